// The device math of the sm90a gated epilogue (epilogue_sm90.cuh): the check of the accumulator
// pairing the gate relies on, the call-free activations and the FP8 output scale's reciprocal.
#pragma once

#include <cute/tensor.hpp>

namespace blockfuse::sm90 {

using namespace cute;

// The pairing the gate relies on, checked on the MMA atom's accumulator layout: the first value
// mode has extent 2 and a stride of one column (= the atom's M extent in the m + M·n encoding).
template <class TiledMma>
constexpr bool accumulator_pairs_are_adjacent_columns() {
  using CL = typename TiledMma::Atom::CLayout;
  using AtomMNK = typename TiledMma::AtomShape_MNK;
  return int(size<1, 0>(CL{})) == 2 && int(stride<1, 0>(CL{})) == int(size<0>(AtomMNK{}));
}

// Warpgroups side by side along N in the TiledMma (2 in the N-split cooperative rows, else 1).
template <class TiledMma>
inline constexpr int kSplitN = int(size<2>(typename TiledMma::ThrLayoutVMNK{}));

// The activations, call-free. The shared ones (activation.cuh) use IEEE division, whose slow path
// is a subroutine call; any call in a wgmma kernel makes ptxas serialise *every* wgmma of the
// kernel (warning C7510), mainloop included. Here both gates are written as g·sigmoid(z) with
// the fast exponential and reciprocal (a few fp32 ulps; the output is rounded to 8 or 11 bits):
//   silu(g)      = g · sigmoid(g)
//   gelu_tanh(g) = 0.5·g·(1 + tanh(y)) = g · sigmoid(2y),  y = sqrt(2/pi)·(g + 0.044715·g³)
// — the second form also avoids 1 + tanh(y)'s cancellation for negative y. Limits match the
// shared formulas: g → -inf gives 1/(1 + inf) = 0 and a product of -0 for finite g (NaN at
// g = -inf exactly, as g / inf there); NaN propagates.
__device__ __forceinline__ float sigmoid_fast(float z) { return __fdividef(1.0f, 1.0f + __expf(-z)); }
__device__ __forceinline__ float silu_fast(float g) { return g * sigmoid_fast(g); }
__device__ __forceinline__ float gelu_tanh_fast(float g) {
  const float kTwoAlpha = 1.5957691216057308f;  // 2·sqrt(2/pi)
  const float kBeta = 0.044715f;
  return g * sigmoid_fast(kTwoAlpha * (g + kBeta * g * g * g));
}

// 1/s for the FP8 output scale without IEEE division (whose slow path is a call, see above): the
// approximate reciprocal and one Newton step, within an ulp of the correctly rounded 1/s for a
// normal positive s; NaN stays NaN.
__device__ __forceinline__ float reciprocal_newton(float s) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
  return fmaf(r, fmaf(-s, r, 1.0f), r);
}

}  // namespace blockfuse::sm90
