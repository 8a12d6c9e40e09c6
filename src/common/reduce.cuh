// Internal: warp and block reductions (sum or max of a float), every thread getting the result.
#pragma once

#include <cuda_runtime.h>

namespace blockfuse::detail {

struct SumOp {
  static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
};
// For values >= 0 (magnitudes): 0 pads the partials of absent warps.
struct MaxOp {
  static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); }
};

template <class Op>
__device__ __forceinline__ float warp_reduce(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Over the block (blockDim.x a multiple of 32); every thread gets the result. `scratch` is a
// 32-float shared array used by this reduction only; the trailing barrier lets the caller reuse it
// (the next row of a grid-stride loop) without a race against slower warps still reading it.
template <class Op>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
  v = warp_reduce<Op>(v);
  if (blockDim.x == 32) return v;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? scratch[lane] : 0.0f;  // 0: the identity of the sum and of a max of magnitudes
  v = warp_reduce<Op>(v);
  __syncthreads();
  return v;
}

// Two values reduced together over the block (OpA on a, OpB on b): one pair of barriers for both,
// where two block_reduce calls take two. `scratch` is a [2][32] shared array used by this reduction
// only (trailing barrier as above). 0 fills the missing warps: the identity of a sum and of a max of
// magnitudes (>= 0), the two ops used.
template <class OpA, class OpB>
__device__ __forceinline__ void block_reduce_pair(float& a, float& b, float (*scratch)[32]) {
  a = warp_reduce<OpA>(a);
  b = warp_reduce<OpB>(b);
  if (blockDim.x == 32) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    scratch[0][warp] = a;
    scratch[1][warp] = b;
  }
  __syncthreads();
  const bool live = lane < int(blockDim.x >> 5);
  a = warp_reduce<OpA>(live ? scratch[0][lane] : 0.0f);
  b = warp_reduce<OpB>(live ? scratch[1][lane] : 0.0f);
  __syncthreads();
}

// A sum and a max of magnitudes (>= 0) together (add_rmsnorm's FP8 row: Σ r² and amax).
__device__ __forceinline__ void block_reduce_sum_max(float& sum, float& max, float (*scratch)[32]) {
  block_reduce_pair<SumOp, MaxOp>(sum, max, scratch);
}

}  // namespace blockfuse::detail
