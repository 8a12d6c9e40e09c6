// The fused MLP's epilogue (fused_mlp_sm80.cuh): the down phase's fp32 partials into the workspace,
// the chunk completion (atomic mode: the last block to count in on a chunk writes y and clears it)
// and the deterministic mode's second launch, fused_mlp_sum_kernel.
//
// Per chunk, a warp adds its fp32 partial to the workspace — kAtomic: fp32 atomics (red.global.add,
// four-wide on sm_90) into one [M, K] accumulator; kDeterministic: stores into the block's own slot,
// which fused_mlp_sum_kernel sums in block order. Atomic: after a batch of up to 32 chunks a warp
// fences once and counts in on each of them; the warp that counts last (of the participating
// blocks) reads the chunk and clears it, writes y in T and resets the counter, so the next call or
// graph replay finds the workspace zeroed.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/decode_loop.cuh"  // store_y
#include "common/pdl.cuh"
#include "fused_mlp/params.h"

namespace blockfuse::fmlp {

using decode::store_y;

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

// d[j][i] = {y[8j+2t][kc+2i], y[8j+2t+1][kc+2i], y[8j+2t][kc+2i+1], y[8j+2t+1][kc+2i+1]}: into the
// accumulator (atomic) or this block's slot (deterministic).
template <int NT>
__device__ __forceinline__ void store_partials(const FusedMlpParams& p, const float (&d)[NT][4][4], int64_t kc, int t) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = 8 * j + 2 * t + h;
      if (m >= p.m) continue;
      const float v8[8] = {d[j][0][h], d[j][0][2 + h], d[j][1][h], d[j][1][2 + h],
                           d[j][2][h], d[j][2][2 + h], d[j][3][h], d[j][3][2 + h]};
      if (p.deterministic) {
        float4* dst = reinterpret_cast<float4*>(p.partials + (int64_t(blockIdx.x) * p.m + m) * p.k + kc);
        __stcg(dst, make_float4(v8[0], v8[1], v8[2], v8[3]));
        __stcg(dst + 1, make_float4(v8[4], v8[5], v8[6], v8[7]));
      } else {
        red_add8(p.acc + m * p.k + kc, v8);
      }
    }
  }
}

// Count in on the chunks c0, c0 + CW, … of this warp's batch (lane i on the i-th); the last of the
// `blocks` blocks to count in on a chunk finishes it: reads and clears its accumulator, writes y
// and resets the counter.
template <class T>
__device__ __forceinline__ void count_in_and_finish(const FusedMlpParams& p, int64_t c0, int64_t CW, int64_t n_chunks,
                                                    int64_t blocks, int lane) {
  // Count in; the last of the `blocks` blocks to count in on a chunk finishes it.
  __threadfence();
  __syncwarp();
  const int64_t mine_c = c0 + int64_t(lane) * CW;
  const bool last = mine_c < n_chunks && atomicAdd(p.counters + mine_c, 1) == int(blocks) - 1;
  uint32_t lasts = __ballot_sync(0xffffffffu, last);
  if (lasts) __threadfence();  // warp-uniform
  while (lasts) {
    const int64_t c = c0 + int64_t(__ffs(lasts) - 1) * CW;
    lasts &= lasts - 1;
    const int64_t col0 = c * kChunk;
    const int64_t width = min(int64_t(kChunk), p.k - col0);  // a multiple of 8
    const int64_t quads = width / 4;
    T* y = static_cast<T*>(p.y);
    for (int64_t q = lane; q < p.m * quads; q += 32) {
      const int64_t m = q / quads, col = col0 + 4 * (q % quads);
      float4* a = reinterpret_cast<float4*>(p.acc + m * p.k + col);
      const float4 s = __ldcg(a);
      __stcg(a, make_float4(0.f, 0.f, 0.f, 0.f));
      T* yr = y + m * p.ldy + col;
      store_y<T>(yr, s.x);
      store_y<T>(yr + 1, s.y);
      store_y<T>(yr + 2, s.z);
      store_y<T>(yr + 3, s.w);
    }
    if (lane == 0) p.counters[c] = 0;  // every block has counted this chunk
  }
}

// The deterministic mode's reduction, a second launch after fused_mlp_kernel (with PDL where the
// device allows, so its launch overlaps the first grid's tail): y[m, c..c+3] = the sum over the
// `*det_blocks` blocks, in block order, of the slots whose flag is set. L lanes share an output quad
// (lane r takes blocks b = r mod L in order) and combine with a fixed xor butterfly, so the order is
// fixed whatever the timing: bitwise the same on every call. The 32 / L quads of a warp are
// consecutive columns of one slot row, so a warp's loads are contiguous. L (sum_lanes, params.h)
// gives the launch enough threads to spread the read over every SM: a second launch, because in one
// launch only the last blocks to finish can sum, and their few warps then read every slot
// (docs/fused_mlp.md#tuning).
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
    store_y<T>(yr, s.x);
    store_y<T>(yr + 1, s.y);
    store_y<T>(yr + 2, s.z);
    store_y<T>(yr + 3, s.w);
  }
}

}  // namespace blockfuse::fmlp
