// Internal: a cluster-wide reduction of per-warp partials by pushing them into every CTA's shared
// memory (sm_90), for the kernels that split a row over a thread-block cluster (swiglu's dynamic-FP8
// row kernel, add_rmsnorm's cluster kernel).
//
// Each warp's lanes k < C store the warp's reduced value(s) into CTA k's slots (distributed shared
// memory), then the cluster barrier; after it every CTA combines the C x warps partials from its own
// shared memory. Against pulling (each CTA's partial reduced over its block, a barrier, then C remote
// loads per thread and a last barrier before any CTA may exit) this takes no block reduction (two
// __syncthreads), no remote load (each a DSMEM round trip) and no trailing barrier: after a row's
// barrier nothing touches a peer's shared memory, so a CTA may exit as soon as it is done.
//
// The combine is deterministic and gives the same bits in every thread of every CTA: lane w combines
// the warp-w partials of ranks 0..C-1 in rank order, then the xor butterfly of warp_reduce (each step
// adds the same two values in every lane, so all lanes end equal), over slots that hold the same
// values in every CTA. So a sum (not only a max) may be exchanged this way.
//
// Slots are double-buffered by row parity: a CTA pushes row j+2's partials only after passing row
// j+1's barrier, which each peer reaches after reading row j's slots. A CTA may write a peer's shared
// memory only once the peer has started; cluster_start_arrive() at the top of the kernel and
// cluster_start_wait() before the first push give that guarantee while the first row's loads run.
#pragma once

#include <cooperative_groups.h>

#include "common/reduce.cuh"
#include "common/sm90_asm.cuh"

namespace blockfuse::detail {

// barrier.cluster (PTX ISA 7.8, sm_90): every thread of every CTA of the cluster arrives; the wait
// returns once all have. arrive has release and wait acquire semantics at cluster scope, so shared
// memory stores (local or remote) before the arrive are visible to every thread after the wait.
__device__ __forceinline__ void cluster_arrive() { BF_SM90_ASM("barrier.cluster.arrive.aligned;"); }
__device__ __forceinline__ void cluster_wait() { BF_SM90_ASM("barrier.cluster.wait.aligned;"); }
// The start-up barrier orders nothing (no memory is exchanged before it), hence relaxed.
__device__ __forceinline__ void cluster_start_arrive() { BF_SM90_ASM("barrier.cluster.arrive.relaxed.aligned;"); }
__device__ __forceinline__ void cluster_start_wait() { cluster_wait(); }

// N partials per warp from CTAs of up to kMaxRanks per cluster and up to 32 warps per CTA.
template <int N, int kMaxRanks>
struct ClusterWarpPartials {
  float slot[2][kMaxRanks][N][32];  // [row parity][source rank][value][source warp]
};

// Every lane holds its warp's reduced values v (warp_reduce's result); lane k < C writes them into
// CTA k's slots. Then the caller's cluster_arrive() / cluster_wait().
template <int N, int R>
__device__ __forceinline__ void cluster_push(ClusterWarpPartials<N, R>& p, int par, int rank, int ranks,
                                             const float (&v)[N]) {
  namespace cg = cooperative_groups;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane < ranks) {
    float(*dst)[32] = cg::this_cluster().map_shared_rank(p.slot[par][rank], lane);
#pragma unroll
    for (int n = 0; n < N; ++n) dst[n][warp] = v[n];
  }
}

// As cluster_push for value n alone (the others' slots untouched).
template <int N, int R>
__device__ __forceinline__ void cluster_push_one(ClusterWarpPartials<N, R>& p, int par, int rank, int ranks, int n,
                                                 float v) {
  namespace cg = cooperative_groups;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane < ranks) cg::this_cluster().map_shared_rank(p.slot[par][rank], lane)[n][warp] = v;
}

// After the barrier: value n of the row combined over every warp of every CTA (Op's identity 0:
// a sum, or a max of magnitudes). The same bits in every thread of the cluster.
template <class Op, int N, int R>
__device__ __forceinline__ float cluster_combine(const ClusterWarpPartials<N, R>& p, int par, int ranks, int n) {
  const int lane = threadIdx.x & 31;
  const bool live = lane < int(blockDim.x >> 5);
  float a = 0.0f;
  for (int k = 0; k < ranks; ++k) a = Op::apply(a, live ? p.slot[par][k][n][lane] : 0.0f);
  return warp_reduce<Op>(a);
}

}  // namespace blockfuse::detail
