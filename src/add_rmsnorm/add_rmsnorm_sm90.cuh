// Internal: the cluster add_rmsnorm kernel (sm_90; launched by add_rmsnorm.cu with the shape
// add_rmsnorm_config_sm90() picks, config.h, for few rows of 8192 <= H <= 131072).
// A thread-block cluster of C = 4 or 8 CTAs shares each row: CTA rank k holds the slice of chunks
// [k·S, (k+1)·S) (S = ceil(H/8 / C), the last slice shorter) in registers, V = 2 or 4 per thread,
// its weight slice too. The CTAs exchange their partial sums (and FP8 amax) through distributed
// shared memory and add them in rank order, so every CTA of the cluster computes the bit-identical
// total and rsqrt. The row is then fetched by C SMs at once (one SM per row is per-SM bound at few
// rows; docs/add_rmsnorm.md#tuning) and the CTAs are small.
//
// Compiled into every build; below sm_90 the body is a trap and the launcher never selects it
// (cluster_path_available() checks the architecture the loaded code was compiled for).
#pragma once

#include <cstdint>

#include <cooperative_groups.h>

#include "add_rmsnorm/params.h"
#include "add_rmsnorm/row.cuh"
#include "common/cluster.cuh"
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

// Per row: the shared prologue (loads, partial sum of squares) -> each warp's partial pushed into
// every CTA's shared memory -> one cluster barrier -> every CTA combines the C x warps partials in
// rank order from its own shared memory (common/cluster.cuh: the same bits in every CTA, so the same
// rsqrt everywhere) -> stores. The slots are double-buffered by row parity. All CTAs of a cluster
// walk the same rows (grid-stride by clusters), so the barriers match. Pushing the partials (rather
// than each thread pulling its peers') saves a barrier a row (docs/add_rmsnorm.md#tuning).
// Dynamic FP8: each CTA's partial max |r · g| travels with its sum of squares (row_amax_unscaled,
// row.cuh), so one exchange and one cluster barrier per row serve both.
// (512, 1): with the bound alone ptxas held the V = 2 dynamic-FP8 kernels to 64 registers and spilled
// 4 bytes; with it they take 70-72 and none spill (sm_90).
template <class T, int V, AddRmsNormOutput kOut>
__global__ void __launch_bounds__(512, 1) add_rmsnorm_cluster(const AddRmsNormParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  detail::cluster_start_arrive();  // peers must have started before a push reaches them (cluster.cuh)
  detail::pdl_enter();             // before any global access (common/pdl.cuh)
  namespace cg = cooperative_groups;
  using detail::MaxOp;
  using detail::SumOp;
  using detail::warp_reduce;
  const cg::cluster_group cluster = cg::this_cluster();
  __shared__ detail::ClusterWarpPartials<2, 8> part;  // [.][.][sum of squares, amax][.]; C <= 8 (config.h)
  const int C = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int nchunks = p.h >> 3;
  const int slice = (nchunks + C - 1) / C;
  const int first = rank * slice;
  const int len = max(0, min(slice, nchunks - first));
  const float inv_h = 1.0f / float(p.h);
  const float static_scale = kOut == AddRmsNormOutput::kFp8StaticScale ? __ldg(p.scale) : 1.0f;
  uint4 w[V];
  load_weight<V>(p.w, first, len, w);
  auto weight = [&](int i) { return w[i]; };
  bool started = false;
  // After this CTA has pushed a row's partials: the first time, the start-up barrier's wait comes
  // before the push (cluster.cuh); then the row's barrier.
  auto start = [&] {
    if (!started) detail::cluster_start_wait();
    started = true;
  };
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
    if constexpr (kOut == AddRmsNormOutput::kFp8DynamicScale) {
      const float wss = warp_reduce<SumOp>(ss);
      const float wm = warp_reduce<MaxOp>(row_amax_unscaled<T, V>(r, len, weight, p.gemma));
      start();
      detail::cluster_push_one(part, par, rank, C, 0, wss);
      detail::cluster_push_one(part, par, rank, C, 1, wm);
      detail::cluster_arrive();
      detail::cluster_wait();
      const float total = detail::cluster_combine<SumOp>(part, par, C, 0);
      const float m = detail::cluster_combine<MaxOp>(part, par, C, 1);
      const float inv = rsqrtf(total * inv_h + p.eps);
      const float s = fp8_dynamic_scale(fold_amax(inv, m));
      if (rank == 0 && threadIdx.x == 0) p.scale[row] = s;
      store_row<T, kOut, V>(p, row, first, r, len, weight, inv, 1.0f / s);
      continue;
    }
    start();
    detail::cluster_push_one(part, par, rank, C, 0, warp_reduce<SumOp>(ss));
    detail::cluster_arrive();
    detail::cluster_wait();
    const float inv = rsqrtf(detail::cluster_combine<SumOp>(part, par, C, 0) * inv_h + p.eps);
    store_row<T, kOut, V>(p, row, first, r, len, weight, inv, 1.0f / static_scale);
  }
  if (!started) detail::cluster_start_wait();  // (a cluster past the rows: never launched so)
#else
  // Never launched below sm_90 (cluster_path_available() checks the code's architecture).
  __trap();
#endif
}

}  // namespace blockfuse::add_rmsnorm_detail
