// Internal: the gate activations, in fp32, shared by the gated_up and swiglu kernels and the GPU
// reference (src/testing), and in fp64 for the CPU references and the tests.
#pragma once

#include <cmath>

#include <cuda_runtime.h>

namespace blockfuse {

// silu(g) = g · sigmoid(g) = g / (1 + e^-g). For g → -inf, e^-g → inf and the quotient → -0;
// NaN propagates.
__host__ __device__ __forceinline__ float silu_f32(float g) { return g / (1.0f + expf(-g)); }

// tanh-approximated GELU (PyTorch's gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh).
__host__ __device__ __forceinline__ float gelu_tanh_f32(float g) {
  const float kAlpha = 0.7978845608028654f;  // sqrt(2/pi)
  const float kBeta = 0.044715f;
  return 0.5f * g * (1.0f + tanhf(kAlpha * (g + kBeta * g * g * g)));
}

// act(gate) * up for Activation code `act` (0 = SiLU, 1 = tanh-GELU).
__host__ __device__ __forceinline__ float gated_act(int act, float gate, float up) {
  return (act == 0 ? silu_f32(gate) : gelu_tanh_f32(gate)) * up;
}

// act(g) in fp64, the definitions the CPU references and the tests' tolerances use (host only);
// `act` an Activation or its code.
template <class Act>
inline double act_f64(Act act, double g) {
  if (static_cast<int>(act) == 0) return g / (1.0 + std::exp(-g));
  return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
}

}  // namespace blockfuse
