// Internal: the backward kernels of rmsnorm / add_rmsnorm (sm_80+; launched by backward.cu with the
// shape rmsnorm_backward_config() and the CTA count rmsnorm_backward_ctas() pick, config.h).
//
//   rmsnorm_bwd_regs     H <= 8192: each of T threads holds V <= 2 16-byte chunks of the row's dy, h
//                        and weight (chunk c of thread t is c = t + i·T, as in the forward), and
//                        V · 8 fp32 dweight accumulators that live across every row the CTA takes
//                        (rows b, b + C, b + 2C, ...). One pass over dy, h (and d_residual_out): each
//                        row's two sums, Σ h² and Σ g·h with g = dy · w_eff, are reduced over the
//                        block together, then dh is computed from the registers and stored.
//   rmsnorm_bwd_loop     H > 8192: the row does not fit; the second pass re-reads dy and h (mostly
//                        from L2) and the dweight partials accumulate in the workspace row of the
//                        CTA (each element read and written by the one thread that owns it).
//   rmsnorm_bwd_dweight  adds the [C, H] fp32 partials column by column in a fixed order and rounds.
//   rmsnorm_bwd_regs<..., kFused = true>  (H <= 4096, every CTA resident: a cooperative launch) the
//                        same row kernel, which then waits at a grid-wide barrier and adds the
//                        partials itself (dweight_columns, the reduction kernel's order), so one
//                        launch and no second kernel's ramp (2048 rows: about a quarter of the call;
//                        docs/add_rmsnorm.md#backward).
//
// Numerics: rstd = rsqrtf(Σh²/H + eps) recomputed from the dtype h; m = rstd · Σ(g·h) / H (the
// mean of g·h̃); dh = rstd · (g − h·rstd · m) (+ d_residual_out) in fp32, one rounding; the dweight
// accumulators add fmaf(dy, h·rstd, acc) row after row in the CTA's row order. Every order depends
// only on (M, H): the results are bitwise reproducible.
#pragma once

#include <cstdint>

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "add_rmsnorm/config.h"
#include "add_rmsnorm/params.h"
#include "common/cp_async.cuh"
#include "common/reduce.cuh"
#include "common/vec.cuh"

namespace blockfuse::add_rmsnorm_detail {

using detail::Vec8;
using detail::zero4;

// The partial sums of one chunk: Σ h² and Σ (dy · w_eff) · h.
template <class T>
__device__ __forceinline__ void bwd_chunk_sums(const uint4& dyv, const uint4& hv, const uint4& wv, bool gemma,
                                               float& ss, float& sgh) {
  float dy[8], h[8], w[8];
  Vec8<T>::unpack(dyv, dy);
  Vec8<T>::unpack(hv, h);
  Vec8<T>::unpack(wv, w);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float g = dy[j] * (gemma ? 1.0f + w[j] : w[j]);
    ss = fmaf(h[j], h[j], ss);
    sgh = fmaf(g, h[j], sgh);
  }
}

// dh of one chunk (d_residual_out `dres` added when has_dres) and, with acc, the chunk's dweight
// terms dy · h̃ added to acc. (dres by value: a pointer to a register array put it in local memory.)
template <class T>
__device__ __forceinline__ uint4 bwd_chunk_dh(const uint4& dyv, const uint4& hv, const uint4& wv, uint4 dres,
                                              bool has_dres, bool gemma, float rstd, float m, float* acc) {
  float dy[8], h[8], w[8], d[8];
  Vec8<T>::unpack(dyv, dy);
  Vec8<T>::unpack(hv, h);
  Vec8<T>::unpack(wv, w);
  float r[8];
  Vec8<T>::unpack(dres, r);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float g = dy[j] * (gemma ? 1.0f + w[j] : w[j]);
    const float hn = h[j] * rstd;
    d[j] = rstd * (g - hn * m);
    if (has_dres) d[j] += r[j];
    if (acc) acc[j] = fmaf(dy[j], hn, acc[j]);
  }
  return Vec8<T>::pack(d);
}

template <class T>
__device__ __forceinline__ const uint4* bwd_row(const void* base, int64_t row, int64_t ld) {
  return reinterpret_cast<const uint4*>(static_cast<const T*>(base) + row * ld);
}

__device__ __forceinline__ void store_scalar(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_scalar(__half* p, float v) { *p = __float2half_rn(v); }

// dweight[c0 .. c0 + cols) from the [ctas, H] fp32 partials, by `nthreads` threads (tid) in a fixed
// order: group g of kRmsNormBwdReduceGroups adds partial rows g, g + G, ... of a column, then the G
// group sums are added in order 0..G-1. Which thread takes which (column, group) pair does not
// change a sum, so the reduction kernel and the fused row kernel give the same bits. cols <=
// kRmsNormBwdReduceCols; `sums` is shared; ends with a barrier (sums reusable).
template <class T>
__device__ __forceinline__ void dweight_columns(const float* partials, int64_t ctas, int h, T* dweight, int c0, int cols,
                                                float (*sums)[detail::kRmsNormBwdReduceCols + 1], int tid, int nthreads) {
  constexpr int kGroups = detail::kRmsNormBwdReduceGroups;
  for (int pair = tid; pair < cols * kGroups; pair += nthreads) {
    const int lane = pair % cols, group = pair / cols;
    const int col = c0 + lane;
    float a = 0.0f;
    if (col < h)
      for (int64_t k = group; k < ctas; k += kGroups) a += __ldcg(partials + k * h + col);
    sums[group][lane] = a;
  }
  __syncthreads();
  for (int lane = tid; lane < cols; lane += nthreads)
    if (c0 + lane < h) {
      float t = 0.0f;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) t += sums[g][lane];
      store_scalar(dweight + c0 + lane, t);
    }
  __syncthreads();
}

// Register path. kDw: dweight wanted (the accumulators and the partials store exist only then).
// The CTA's rows stream through shared memory by cp.async, kRmsNormBwdStages rows ahead: each
// thread copies its own chunks of dy, h (and d_residual_out) into its own slots and reads back only
// those, so no barrier orders the copies, and the bytes in flight hold no registers. A slot is
// refilled right after the row's block reduction, whose barriers order every read of it before the
// new copies.
// Every group is committed, empty or not, so wait_group<kRmsNormBwdStages - 1> always leaves the
// current row's copies complete.
// kFused (V = 1 only; launched cooperatively, all CTAs resident, two per SM at 512 threads, hence
// the 64-register bound): after its partial row, the CTA waits for every other CTA's at a grid-wide
// barrier, then adds blockDim / G columns at a time, column blocks strided over the CTAs.
template <class T, int V, bool kDw, bool kFused = false>
__global__ void __launch_bounds__(512, kFused ? 2 : 1) rmsnorm_bwd_regs(const RmsNormBackwardParams p) {
  static_assert(!kFused || (kDw && V == 1), "the fused reduction is built for the one-chunk rows with dweight");
  constexpr int kStages = detail::kRmsNormBwdStages;
  __shared__ float red[2][32];
  extern __shared__ __align__(16) uint4 slots[];  // [kStages][sources][V][blockDim.x]
  const int nchunks = p.h >> 3;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int sources = p.dres ? 3 : 2;
  const float inv_h = 1.0f / float(p.h);
  auto slot = [&](int stage, int src, int i) -> uint4* { return slots + ((stage * sources + src) * V + i) * nt + tid; };
  // Issues the copies of row `row` (none past the CTA's last) into `stage` and closes the group.
  auto prefetch = [&](int64_t row, int stage) {
    if (row < p.rows) {
      const uint4* dyr = bwd_row<T>(p.dy, row, p.lddy);
      const uint4* hr = bwd_row<T>(p.in, row, p.ldin);
      const uint4* rr = p.dres ? bwd_row<T>(p.dres, row, p.lddres) : nullptr;
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (tid + i * nt < nchunks) {
          detail::cp_async16(slot(stage, 0, i), dyr + tid + i * nt);
          detail::cp_async16(slot(stage, 1, i), hr + tid + i * nt);
          if (rr) detail::cp_async16(slot(stage, 2, i), rr + tid + i * nt);
        }
    }
    detail::cp_async_commit();
  };
  const int64_t first = blockIdx.x, step = gridDim.x;
#pragma unroll
  for (int s = 0; s < kStages; ++s) prefetch(first + s * step, s);
  // The weight is the same for every row: loaded once per CTA, while the first rows are in flight.
  uint4 wr[V];
#pragma unroll
  for (int i = 0; i < V; ++i)
    wr[i] = tid + i * nt < nchunks ? __ldg(reinterpret_cast<const uint4*>(p.w) + tid + i * nt) : zero4();
  float acc[kDw ? V : 1][8];
#pragma unroll
  for (int i = 0; i < (kDw ? V : 1); ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  int stage = 0;
  for (int64_t row = first; row < p.rows; row += step) {
    detail::cp_async_wait<kStages - 1>();
    uint4 dyv[V], hv[V], rv[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const bool live = tid + i * nt < nchunks;
      dyv[i] = live ? *slot(stage, 0, i) : zero4();
      hv[i] = live ? *slot(stage, 1, i) : zero4();
      rv[i] = live && p.dres ? *slot(stage, 2, i) : zero4();
    }
    float ss = 0.0f, sgh = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) bwd_chunk_sums<T>(dyv[i], hv[i], wr[i], p.gemma, ss, sgh);
    detail::block_reduce_pair<detail::SumOp, detail::SumOp>(ss, sgh, red);
    prefetch(row + kStages * step, stage);
    stage = stage + 1 == kStages ? 0 : stage + 1;
    const float rstd = rsqrtf(ss * inv_h + p.eps);
    const float m = rstd * sgh * inv_h;
    uint4* dhr = p.dh ? reinterpret_cast<uint4*>(static_cast<T*>(p.dh) + row * p.lddh) : nullptr;
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (tid + i * nt < nchunks) {
        const uint4 d = bwd_chunk_dh<T>(dyv[i], hv[i], wr[i], rv[i], p.dres != nullptr, p.gemma, rstd, m,
                                        kDw ? acc[kDw ? i : 0] : nullptr);
        if (dhr) __stcs(dhr + tid + i * nt, d);
      }
  }
  detail::cp_async_wait<0>();  // no copy outlives the CTA (the last groups are empty, but closed)
  if constexpr (kDw) {
    float* pr = p.partials + int64_t(blockIdx.x) * p.h;
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (tid + i * nt < nchunks) {
        float4* dst = reinterpret_cast<float4*>(pr + (tid + i * nt) * 8);
        dst[0] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        dst[1] = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
      }
  }
  if constexpr (kFused) {
    __shared__ float sums[detail::kRmsNormBwdReduceGroups][detail::kRmsNormBwdReduceCols + 1];
    __threadfence();
    cooperative_groups::this_grid().sync();
    const int cols = nt / detail::kRmsNormBwdReduceGroups > 0 ? nt / detail::kRmsNormBwdReduceGroups : 1;
    for (int c0 = blockIdx.x * cols; c0 < p.h; c0 += gridDim.x * cols)
      dweight_columns<T>(p.partials, gridDim.x, p.h, static_cast<T*>(p.dweight), c0, cols, sums, tid, nt);
  }
}

// Dynamic shared memory of rmsnorm_bwd_regs: kRmsNormBwdStages rows of `sources` tensors (dy, h and
// d_residual_out when present), V 16-byte chunks a thread.
inline int rmsnorm_bwd_regs_smem(int v, int threads, bool dres) {
  return detail::kRmsNormBwdStages * (dres ? 3 : 2) * v * threads * 16;
}

// Loop path (H > 8192): two passes over the row's chunks; the CTA's dweight partials accumulate
// in its workspace row (the first row of the CTA initialises them).
template <class T, bool kDw>
__global__ void __launch_bounds__(512) rmsnorm_bwd_loop(const RmsNormBackwardParams p) {
  __shared__ float red[2][32];
  const int nchunks = p.h >> 3;
  const uint4* w = static_cast<const uint4*>(p.w);
  const float inv_h = 1.0f / float(p.h);
  float* pr = kDw ? p.partials + int64_t(blockIdx.x) * p.h : nullptr;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const uint4* dyr = bwd_row<T>(p.dy, row, p.lddy);
    const uint4* hr = bwd_row<T>(p.in, row, p.ldin);
    const uint4* rr = p.dres ? bwd_row<T>(p.dres, row, p.lddres) : nullptr;
    uint4* dhr = p.dh ? reinterpret_cast<uint4*>(static_cast<T*>(p.dh) + row * p.lddh) : nullptr;
    float ss = 0.0f, sgh = 0.0f;
    for (int c = threadIdx.x; c < nchunks; c += blockDim.x) bwd_chunk_sums<T>(dyr[c], hr[c], __ldg(w + c), p.gemma, ss, sgh);
    detail::block_reduce_pair<detail::SumOp, detail::SumOp>(ss, sgh, red);
    const float rstd = rsqrtf(ss * inv_h + p.eps);
    const float m = rstd * sgh * inv_h;
    const bool first = row == blockIdx.x;
    for (int c = threadIdx.x; c < nchunks; c += blockDim.x) {
      float acc[8];
      if constexpr (kDw) {
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] = first ? 0.0f : pr[c * 8 + j];
      }
      const uint4 r = rr ? rr[c] : zero4();
      // dy is read before dh (which may alias it) is written, by the same thread.
      const uint4 d = bwd_chunk_dh<T>(dyr[c], hr[c], __ldg(w + c), r, rr != nullptr, p.gemma, rstd, m, kDw ? acc : nullptr);
      if (dhr) dhr[c] = d;
      if constexpr (kDw) {
#pragma unroll
        for (int j = 0; j < 8; ++j) pr[c * 8 + j] = acc[j];
      }
    }
  }
}

// dweight[col] = Σ_k partials[k, col] over the C partial rows, in dweight_columns' fixed order, one
// block of kRmsNormBwdReduceCols columns x kRmsNormBwdReduceGroups groups (a thread a pair) per CTA.
template <class T>
__global__ void __launch_bounds__(detail::kRmsNormBwdReduceCols * detail::kRmsNormBwdReduceGroups)
    rmsnorm_bwd_dweight(const float* __restrict__ partials, int64_t ctas, int h, T* __restrict__ dweight) {
  constexpr int kCols = detail::kRmsNormBwdReduceCols;
  __shared__ float sums[detail::kRmsNormBwdReduceGroups][kCols + 1];
  dweight_columns<T>(partials, ctas, h, dweight, blockIdx.x * kCols, kCols, sums, threadIdx.x, blockDim.x);
}

}  // namespace blockfuse::add_rmsnorm_detail
