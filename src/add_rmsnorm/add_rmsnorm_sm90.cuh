// Internal: the cluster add_rmsnorm kernel (sm_90; launched by add_rmsnorm.cu with the shape
// add_rmsnorm_config_sm90() picks, config.h, for few rows of 8192 <= H <= 131072).
// A thread-block cluster of C = 4 or 8 CTAs shares each row: CTA rank k holds the slice of chunks
// [k·S, (k+1)·S) (S = ceil(H/8 / C), the last slice shorter) in registers, V = 2 or 4 per thread,
// its weight slice too. The CTAs exchange their partial sums (and FP8 amax) through distributed
// shared memory and add them in rank order, so every CTA of the cluster computes the bit-identical
// total and rsqrt. The row is then fetched by C SMs at once (one SM per row is per-SM bound at few
// rows: results/gpu/experiments/add_rmsnorm_v1_one_block.json) and the CTAs are small.
//
// Compiled into every build; below sm_90 the body is a trap and the launcher never selects it
// (cluster_path_available() checks the architecture the loaded code was compiled for).
#pragma once

#include <cstdint>

#include <cooperative_groups.h>

#include "add_rmsnorm/params.h"
#include "add_rmsnorm/row.cuh"
#include "common/pdl.cuh"
#include "common/reduce.cuh"

namespace blockfuse::add_rmsnorm_detail {

// The weight chunks a thread needs (chunks first + tid + i*nt, i < V, those below `len`), loaded
// once per block before the row loop, so their latency overlaps the first row's loads instead of
// following the reduction (the weight is shared by every row: the read-only path keeps it in L2).
template <int V>
__device__ __forceinline__ void load_weight(const void* w, int first, int len, uint4 (&wv)[V]) {
  const uint4* wp = static_cast<const uint4*>(w) + first;
  const int tid = threadIdx.x, nt = blockDim.x;
#pragma unroll
  for (int i = 0; i < V; ++i) wv[i] = tid + i * nt < len ? __ldg(wp + tid + i * nt) : zero4();
}

// Called at the top of each row of the grid-stride loop: makes the packed weight registers opaque
// to the compiler, which otherwise hoists their unpacking to fp32 (loop-invariant) out of the row
// loop and keeps 8 instead of 4 registers per chunk live — 90+ registers and spills at V = 8 (ptxas,
// sm_90). Emits no instruction.
template <int V>
__device__ __forceinline__ void keep_packed(uint4 (&wv)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) asm volatile("" : "+r"(wv[i].x), "+r"(wv[i].y), "+r"(wv[i].z), "+r"(wv[i].w));
}

// Per row: the shared prologue (loads, partial sum of squares) -> block reduction -> this CTA's
// partial into its shared `part` -> cluster.sync -> every thread reads the C partials through
// distributed shared memory and adds them in rank order (so all CTAs get the same bits: the same
// rsqrt everywhere) -> the same for the FP8 dynamic amax -> stores.
// `part` is double-buffered by row parity: a CTA writes the slot of row j+2 only after passing the
// barrier of row j+1, which every CTA reaches after reading the slot of row j. All CTAs of a
// cluster walk the same rows (grid-stride by clusters), so the barriers match; a last
// cluster.sync keeps each CTA's shared memory alive until its peers have read it.
// kOneExchange (dynamic FP8 only): each CTA's partial max |r · g| travels with its sum of squares
// (row_amax_unscaled, row.cuh), so one block reduction and one cluster barrier per row serve both
// instead of two of each.
template <class T, int V, AddRmsNormOutput kOut, bool kOneExchange = true>
__global__ void __launch_bounds__(512) add_rmsnorm_cluster(const AddRmsNormParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  detail::pdl_enter();  // before any global access (common/pdl.cuh)
  namespace cg = cooperative_groups;
  using detail::block_reduce;
  using detail::MaxOp;
  using detail::SumOp;
  const cg::cluster_group cluster = cg::this_cluster();
  __shared__ float red[2][32];
  __shared__ float part[2][2];  // [row parity][sum of squares, amax] of this CTA's slice
  const int C = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int nchunks = p.h >> 3;
  const int slice = (nchunks + C - 1) / C;
  const int first = rank * slice;
  const int len = max(0, min(slice, nchunks - first));
  const int tid = threadIdx.x;
  const float inv_h = 1.0f / float(p.h);
  const float static_scale = kOut == AddRmsNormOutput::kFp8StaticScale ? __ldg(p.scale) : 1.0f;
  uint4 w[V];
  load_weight<V>(p.w, first, len, w);
  auto weight = [&](int i) { return w[i]; };
  int par = 0;
  for (int64_t row = blockIdx.x / C; row < p.rows; row += gridDim.x / C, par ^= 1) {
    keep_packed<V>(w);
    const uint4* rr = p.res ? row_chunks<T>(p.res, row, p.ldr) + first : nullptr;
    uint4 r[V];
    const float ss = load_row_sumsq<T, V>(row_chunks<T>(p.x, row, p.ldx) + first, rr, len, r);
    // residual_out does not depend on the norm: stored before the cluster barrier, so the stores
    // drain while the CTAs wait for each other. In place (residual_out == residual) this CTA only
    // overwrites its own slice, which it has already read.
    if (p.res_out) store_chunks<V>(row_chunks<T>(p.res_out, row, p.ldro) + first, len, r);
    if constexpr (kOut == AddRmsNormOutput::kFp8DynamicScale && kOneExchange) {
      float cta_ss = ss, cta_m = row_amax_unscaled<T, V>(r, len, weight, p.gemma);
      detail::block_reduce_sum_max(cta_ss, cta_m, red);
      if (tid == 0) {
        part[par][0] = cta_ss;
        part[par][1] = cta_m;
      }
      cluster.sync();
      float total = 0, m = 0;
#pragma unroll 1
      for (int k = 0; k < C; ++k) {
        total += *cluster.map_shared_rank(&part[par][0], k);
        m = fmaxf(m, *cluster.map_shared_rank(&part[par][1], k));
      }
      const float inv = rsqrtf(total * inv_h + p.eps);
      const float s = fp8_dynamic_scale(fold_amax(inv, m));
      if (rank == 0 && tid == 0) p.scale[row] = s;
      store_row<T, kOut, V>(p, row, first, r, len, weight, inv, 1.0f / s);
      continue;
    }
    const float cta_ss = block_reduce<SumOp>(ss, red[0]);
    if (tid == 0) part[par][0] = cta_ss;
    cluster.sync();
    float total = 0;
#pragma unroll 1
    for (int k = 0; k < C; ++k) total += *cluster.map_shared_rank(&part[par][0], k);
    const float inv = rsqrtf(total * inv_h + p.eps);
    float s = static_scale;
    if constexpr (kOut == AddRmsNormOutput::kFp8DynamicScale) {
      const float cta_m = block_reduce<MaxOp>(row_amax<T, V>(r, len, weight, inv, p.gemma), red[1]);
      if (tid == 0) part[par][1] = cta_m;
      cluster.sync();
      float amax = 0;
#pragma unroll 1
      for (int k = 0; k < C; ++k) amax = fmaxf(amax, *cluster.map_shared_rank(&part[par][1], k));
      s = fp8_dynamic_scale(amax);
      if (rank == 0 && tid == 0) p.scale[row] = s;
    }
    store_row<T, kOut, V>(p, row, first, r, len, weight, inv, 1.0f / s);
  }
  cluster.sync();
#else
  // Never launched below sm_90 (cluster_path_available() checks the code's architecture).
  __trap();
#endif
}

}  // namespace blockfuse::add_rmsnorm_detail
