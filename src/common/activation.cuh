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
// 57.0 -> 52.3 us; docs/swiglu.md#tuning). The GEMM epilogues keep the accurate
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
// act(g) and act'(g) together (the backward), from one sigmoid s of the same approximations:
//   SiLU:      a = g·s,  a' = s · (1 + g · (1 − s)),               s = sigmoid(g)
//   tanh-GELU: a = g·s,  a' = s + g · 2s(1 − s) · √(2/π)(1 + 3·0.044715·g²),  s = sigmoid(2z)
//              (0.5(1 + tanh z) = s and 0.5(1 − tanh² z) = 2s(1 − s): the forms without cancellation).
// Large |g|: s is exactly 0 or 1 and a' is 0 or 1, the limits.
__device__ __forceinline__ void act_and_grad_fast(int act, float g, float& a, float& da) {
  if (act == 0) {
    const float s = __fdividef(1.0f, 1.0f + __expf(-g));
    a = g * s;
    da = s * (1.0f + g * (1.0f - s));
  } else {
    const float k = 0.7978845608028654f, b = 0.044715f;
    const float z = k * (g + b * g * g * g);
    const float s = __fdividef(1.0f, 1.0f + __expf(-2.0f * z));
    a = g * s;
    da = s + g * (2.0f * s * (1.0f - s)) * k * (1.0f + 3.0f * b * g * g);
  }
}
#endif

// act(g) in fp64, the definitions the CPU references and the tests' tolerances use (host only);
// `act` an Activation or its code.
template <class Act>
inline double act_f64(Act act, double g) {
  if (static_cast<int>(act) == 0) return g / (1.0 + std::exp(-g));
  return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
}

// act'(g) in fp64 (host only): the derivative of act_f64.
template <class Act>
inline double act_grad_f64(Act act, double g) {
  if (static_cast<int>(act) == 0) {
    const double s = 1.0 / (1.0 + std::exp(-g));
    return s * (1.0 + g * (1.0 - s));
  }
  const double k = 0.7978845608028654, b = 0.044715;
  const double t = std::tanh(k * (g + b * g * g * g));
  return 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * k * (1.0 + 3.0 * b * g * g);
}

}  // namespace blockfuse
