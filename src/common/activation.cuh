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

// The same functions from the special-function unit's approximations (ex2 and rcp, as __expf and
// __fdividef: a few fp32 ulp, far below the rounding of a bf16, fp16 or e4m3 output) instead of an
// accurate expf and an IEEE division. For the memory-bound swiglu kernels, where the accurate forms
// were most of the instructions: at 256 x 14336 the elementwise kernel executed 4.1 M warp
// instructions against 2.4 M (ncu, 11.8 -> 9.4 us; 8 rows 1.67 -> 1.27 us, static FP8 at 2048 rows
// 57.0 -> 52.3 us; H100, docs/swiglu.md#tuning). The GEMM epilogues keep the accurate
// forms (their cost is hidden under the mainloop).
// g / (1 + e^-g): g = -inf gives NaN as the accurate form does, a large negative g -0 (e^-g = inf),
// g = +inf gives +inf (1 / 1).
#if defined(__CUDACC__)  // device intrinsics: not for the host compiler of the .cpp files including this
__device__ __forceinline__ float silu_fast_f32(float g) { return __fdividef(g, 1.0f + __expf(-g)); }
// 0.5 g (1 + tanh z) = g · sigmoid(2z), z = sqrt(2/pi) (g + 0.044715 g^3): the sigmoid form has no
// cancellation where tanh z -> -1 (the accurate 1 + tanhf(z) loses its digits there).
__device__ __forceinline__ float gelu_tanh_fast_f32(float g) {
  const float z = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return __fdividef(g, 1.0f + __expf(-2.0f * z));
}
__device__ __forceinline__ float gated_act_fast(int act, float gate, float up) {
  return (act == 0 ? silu_fast_f32(gate) : gelu_tanh_fast_f32(gate)) * up;
}
#endif

// act(g) in fp64, the definitions the CPU references and the tests' tolerances use (host only);
// `act` an Activation or its code.
template <class Act>
inline double act_f64(Act act, double g) {
  if (static_cast<int>(act) == 0) return g / (1.0 + std::exp(-g));
  return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
}

}  // namespace blockfuse
