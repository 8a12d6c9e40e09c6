// Internal: the fused MLP's cross-block reductions (fused_mlp_sm80.cuh's phase 3): the atomic
// accumulation of a warp's partial and the deterministic mode's second launch.
#pragma once

#include <cstdint>

#include "common/pdl.cuh"
#include "decode_gemm/decode_gemm_sm80.cuh"  // store_y
#include "fused_mlp/params.h"

namespace blockfuse::fmlp {

// Adds 8 consecutive fp32 values to global memory (16-byte aligned), no return value.
__device__ __forceinline__ void red_add8(float* p, const float (&v)[8]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3])
               : "memory");
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p + 4), "f"(v[4]), "f"(v[5]), "f"(v[6]),
               "f"(v[7])
               : "memory");
#else
#pragma unroll
  for (int e = 0; e < 8; ++e) atomicAdd(p + e, v[e]);
#endif
}

// The deterministic mode's reduction, a second launch after fused_mlp_kernel (with PDL where the
// device allows, so its launch overlaps the first grid's tail): y[m, c..c+3] = the sum over the
// `*det_blocks` blocks, in block order, of the slots whose flag is set. L lanes share an output quad
// (lane r takes blocks b = r mod L in order) and combine with a fixed xor butterfly, so the order is
// fixed whatever the timing: bitwise the same on every call. The 32 / L quads of a warp are
// consecutive columns of one slot row, so a warp's loads are contiguous. L (sum_lanes, params.h)
// gives the launch enough threads to spread the read over every SM: a second launch, because in one
// launch only the last blocks to finish can sum, and their few warps then read every slot
// (docs/fused_mlp.md, "The deterministic mode's sum").
template <class T>
__global__ void __launch_bounds__(kSumThreads) fused_mlp_sum_kernel(const FusedMlpParams p, int L) {
  detail::pdl_wait();  // the first grid has completed: its slots, flags and count are visible
  const int64_t nb = *p.det_blocks;
  const int64_t quads = p.k / 4;  // K % 8 == 0
  const int64_t items = p.m * quads;
  const int lane = threadIdx.x & 31, per_warp = 32 / L, r = lane / per_warp;
  const int64_t q = ((int64_t(blockIdx.x) * kSumThreads + threadIdx.x) >> 5) * per_warp + lane % per_warp;
  const bool ok = q < items;
  const int64_t m = ok ? q / quads : 0, col = ok ? 4 * (q % quads) : 0;
  // Every block's flag and slot are loaded, and an inactive block's (stale) slot is selected away: no
  // load waits on a flag, so the unrolled loads are in flight together. The same sum bit for bit as
  // skipping the block: s starts at +0 and a round-to-nearest sum is never -0, so s + 0 == s (and a
  // NaN stays NaN).
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
  if (ok) {
#pragma unroll 8
    for (int64_t b = r; b < nb; b += L) {
      const bool on = __ldcg(p.flags + b) != 0;
      const float4 v = __ldcg(reinterpret_cast<const float4*>(p.partials + (b * p.m + m) * p.k + col));
      s.x += on ? v.x : 0.f;
      s.y += on ? v.y : 0.f;
      s.z += on ? v.z : 0.f;
      s.w += on ? v.w : 0.f;
    }
  }
  for (int o = per_warp; o < 32; o *= 2) {
    s.x += __shfl_xor_sync(0xffffffffu, s.x, o);
    s.y += __shfl_xor_sync(0xffffffffu, s.y, o);
    s.z += __shfl_xor_sync(0xffffffffu, s.z, o);
    s.w += __shfl_xor_sync(0xffffffffu, s.w, o);
  }
  if (ok && r == 0) {
    T* yr = static_cast<T*>(p.y) + m * p.ldy + col;
    decode::store_y<T>(yr, s.x);
    decode::store_y<T>(yr + 1, s.y);
    decode::store_y<T>(yr + 2, s.z);
    decode::store_y<T>(yr + 3, s.w);
  }
}

}  // namespace blockfuse::fmlp
