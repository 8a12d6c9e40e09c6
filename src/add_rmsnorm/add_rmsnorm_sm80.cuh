// Internal: the one-block-per-row add_rmsnorm kernels (sm_80+; launched by add_rmsnorm.cu with the
// shape add_rmsnorm_config() picks, config.h).
//   register path  each of T threads (a multiple of 32) holds V 16-byte chunks of the row, V in
//                  {1, 2, 4, 8}: T·V·8 >= H with the tail chunks masked, so any H % 8 == 0 up to
//                  8 · 512 · 8 = 32768 takes this path. Chunk c of thread t is c = t + i·T
//                  (consecutive threads read consecutive 16-byte chunks: coalesced).
//   loop path      H > 32768: a block of 512 threads loops over the row's chunks; the second pass
//                  re-reads the row (from residual_out when written — the in-place alias makes
//                  the residual stale — else x and residual), which mostly hits L2. More traffic,
//                  but only for hidden sizes no current model has.
// One block per row (rather than a warp per row) also serves the latency-bound decode case
// (1-32 rows in a CUDA graph): every chunk of the row is requested by some thread at once.
#pragma once

#include <cstdint>

#include "add_rmsnorm/config.h"
#include "add_rmsnorm/params.h"
#include "add_rmsnorm/row.cuh"
#include "common/pdl.cuh"
#include "common/reduce.cuh"

namespace blockfuse::add_rmsnorm_detail {

using detail::block_reduce;
using detail::MaxOp;
using detail::SumOp;

// Starts fetching the weight into L2 (one request per 128-byte line: the thread whose chunk
// begins a line) so that, for a few-row decode step, its DRAM latency overlaps the row loads instead
// of following the reduction; the weight registers are only taken after the reduction.
template <class T>
__device__ __forceinline__ void prefetch_weight(const T* w, int nchunks) {
  for (int c = threadIdx.x * 8; c < nchunks; c += blockDim.x * 8)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(w + c * 8));
}

// Register path: T = blockDim.x threads, V chunks each. No min-blocks bound: capping V = 8 at 64
// registers spills and does not pay (docs/add_rmsnorm.md#tuning).
// Dynamic FP8: the amax's partial max |r · g| is reduced together with the sum of squares
// (row_amax_unscaled, row.cuh), one block reduction per row instead of two (docs/add_rmsnorm.md#tuning).
// kPreloadW: the weight chunks are loaded into registers with the row's (decode-sized calls,
// config.h: add_rmsnorm_preload_weight) instead of read after the reduction.
// kStream: residual_out and out by streaming stores (many rows, config.h: add_rmsnorm_streaming_stores).
template <class T, int V, AddRmsNormOutput kOut, bool kPreloadW = false, bool kStream = false>
__global__ void __launch_bounds__(512) add_rmsnorm_regs(const AddRmsNormParams p) {
  detail::pdl_enter();  // before any global access (common/pdl.cuh)
  __shared__ float red[2][32];
  const int nchunks = p.h >> 3;
  const int tid = threadIdx.x, nt = blockDim.x;
  const T* w = static_cast<const T*>(p.w);
  const float inv_h = 1.0f / float(p.h);
  const float static_scale = kOut == AddRmsNormOutput::kFp8StaticScale ? __ldg(p.scale) : 1.0f;
  constexpr bool kDynamic = kOut == AddRmsNormOutput::kFp8DynamicScale;
  const bool early_res_out = detail::add_rmsnorm_early_res_out(kOut == AddRmsNormOutput::kDtype, p.rows);
  // Many rows: the weight chunks are read after the reduction (L2-prefetched here): loading them into
  // registers before the row loop measured slower, 78-87 % vs 89-98 % of copy at H = 16384 on the
  // H100 (docs/add_rmsnorm.md#tuning).
  uint4 wr[kPreloadW ? V : 1];
  if constexpr (kPreloadW) {
#pragma unroll
    for (int i = 0; i < V; ++i)
      wr[i] = tid + i * nt < nchunks ? __ldg(reinterpret_cast<const uint4*>(w) + tid + i * nt) : zero4();
  } else {
    prefetch_weight(w, nchunks);
  }
  auto weight = [&](int i) {
    if constexpr (kPreloadW) return wr[i];
    else return __ldg(reinterpret_cast<const uint4*>(w) + tid + i * nt);
  };
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const uint4* rr = p.res ? row_chunks<T>(p.res, row, p.ldr) : nullptr;
    uint4 r[V];
    float ss = load_row_sumsq<T, V>(row_chunks<T>(p.x, row, p.ldx), rr, nchunks, r);
    // residual_out before the reduction where that measured faster (config.h: add_rmsnorm_early_res_out):
    // its stores drain while the block waits at the reduction's barriers. Each chunk is read and
    // written by the same thread, so the in-place alias (residual_out == residual) stays safe.
    if (early_res_out && p.res_out)
      store_chunks<V, kStream>(row_chunks<T>(p.res_out, row, p.ldro), nchunks, r);
    if constexpr (kDynamic) {
      float m = row_amax_unscaled<T, V>(r, nchunks, weight, p.gemma);
      detail::block_reduce_sum_max(ss, m, red);
      const float inv = rsqrtf(ss * inv_h + p.eps);
      if (!early_res_out && p.res_out)
        store_chunks<V, kStream>(row_chunks<T>(p.res_out, row, p.ldro), nchunks, r);
      const float s = fp8_dynamic_scale(fold_amax(inv, m));
      if (tid == 0) p.scale[row] = s;
      store_row<T, kOut, V, kStream>(p, row, 0, r, nchunks, weight, inv, 1.0f / s);
      continue;
    }
    const float inv = rsqrtf(block_reduce<SumOp>(ss, red[0]) * inv_h + p.eps);
    if (!early_res_out && p.res_out)
      store_chunks<V, kStream>(row_chunks<T>(p.res_out, row, p.ldro), nchunks, r);
    store_row<T, kOut, V, kStream>(p, row, 0, r, nchunks, weight, inv, 1.0f / static_scale);
  }
}

// Loop path (H > 32768): the row does not fit the registers of one block, so it is read again.
template <class T, AddRmsNormOutput kOut>
__global__ void __launch_bounds__(512) add_rmsnorm_loop(const AddRmsNormParams p) {
  detail::pdl_enter();  // before any global access (common/pdl.cuh)
  __shared__ float red[2][32];
  const int nchunks = p.h >> 3;
  const uint4* w = static_cast<const uint4*>(p.w);  // read-only path: shared by every row, stays in L2
  const float inv_h = 1.0f / float(p.h);
  const float static_scale = kOut == AddRmsNormOutput::kFp8StaticScale ? __ldg(p.scale) : 1.0f;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const uint4* xr = row_chunks<T>(p.x, row, p.ldx);
    const uint4* rr = p.res ? row_chunks<T>(p.res, row, p.ldr) : nullptr;
    uint4* ro = p.res_out ? row_chunks<T>(p.res_out, row, p.ldro) : nullptr;
    // The rounded residual of chunk c after the first pass: from residual_out when it was written
    // (this thread's own earlier store; with the in-place alias the residual itself is overwritten),
    // else recomputed from the unchanged inputs — the same fp32 sum, so the same bits.
    auto reread = [&](int c) {
      if (ro) return ro[c];
      const uint4 b = rr ? rr[c] : zero4();
      return add_chunk<T>(xr[c], b, rr != nullptr);
    };
    float ss = 0;
    for (int c = threadIdx.x; c < nchunks; c += blockDim.x) {
      const uint4 b = rr ? rr[c] : zero4();
      const uint4 r = add_chunk<T>(xr[c], b, rr != nullptr);
      float f[8];
      Vec8<T>::unpack(r, f);
      ss += sumsq8(f);
      if (ro) ro[c] = r;
    }
    const float inv = rsqrtf(block_reduce<SumOp>(ss, red[0]) * inv_h + p.eps);
    float s = static_scale;
    if constexpr (kOut == AddRmsNormOutput::kFp8DynamicScale) {
      float m = 0;
      for (int c = threadIdx.x; c < nchunks; c += blockDim.x) {
        float v[8];
        norm_chunk<T>(reread(c), __ldg(w + c), inv, p.gemma, v);
        m = fmaxf(m, finite_abs_max8(v));
      }
      const float amax = block_reduce<MaxOp>(m, red[1]);
      s = fp8_dynamic_scale(amax);
      if (threadIdx.x == 0) p.scale[row] = s;
    }
    const float inv_s = 1.0f / s;
    for (int c = threadIdx.x; c < nchunks; c += blockDim.x) {
      float v[8];
      norm_chunk<T>(reread(c), __ldg(w + c), inv, p.gemma, v);
      store_out<T, kOut>(p, row, c, v, inv_s);
    }
  }
}

}  // namespace blockfuse::add_rmsnorm_detail
