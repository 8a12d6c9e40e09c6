// Internal: the tile scheduler of the sm90a attention kernel: which tiles a CTA computes and, for
// each, its sequence, mask and key-block range.
//
// CTA i computes tiles i, i + gridDim.x, ... (the grid: sm90_grid_ctas in params.h). Persistent
// (no band): a tile is (m_block, head, b), m fastest and reversed, so the CTAs running together
// share one head's K and V in L2. Under a band (one CTA per tile, p.lpt_section > 0): lpt_tile's
// order, the longest query blocks of an L2-sized section of heads first. The producer and the consumers
// derive a tile's sequence, mask and key-block range from the same call, so they agree. Varlen:
// sequence b is rows [cu[b], cu[b+1]) of the packed tensors; a tile past its sequence's end is
// skipped by both. (The sm80 kernel is not persistent: one block per tile, the hardware's block
// scheduler walks them, longest query blocks first; attention_sm80.cuh.)
#pragma once

#include <cstdint>

#include <cute/config.hpp>

#include "cutlass/arch/barrier.h"

#include "attention/mask.cuh"
#include "attention/params.h"

namespace blockfuse::attn::sm90 {

struct Tile {
  int m_block, head, b, n_min, n_max;
  int offset_q, offset_k, len_q, len_k;  // batched: 0, 0, seqlen_q, seqlen_k
  VisibilityMask mask;
};

template <int kBlockM, int kBlockN, class KernelParams>
struct TileScheduler {
  KernelParams const& p;
  bool varlen;

  CUTE_DEVICE Tile tile_at(int64_t t) const {
    int m_block;
    int64_t hb;
    if (p.lpt_section > 0) {
      const TileCoord c = lpt_tile(t, p.m_blocks, p.heads_q * p.batch, p.lpt_section);
      m_block = c.m_block;
      hb = c.hb;
    } else {
      m_block = p.m_blocks - 1 - int(t % p.m_blocks);
      hb = t / p.m_blocks;
    }
    const int head = int(hb % p.heads_q), b = int(hb / p.heads_q);
    int offset_q = 0, offset_k = 0, len_q = p.seqlen_q, len_k = p.seqlen_k;
    if (varlen) {
      offset_q = p.cu_seqlens_q[b];
      len_q = p.cu_seqlens_q[b + 1] - offset_q;
      offset_k = p.cu_seqlens_k[b];
      len_k = p.cu_seqlens_k[b + 1] - offset_k;
    }
    Tile tl{m_block, head, b, 0, 0, offset_q, offset_k, len_q, len_k,
            VisibilityMask(len_q, len_k, p.window_left, p.window_right)};
    tl.mask.template n_block_range<kBlockM, kBlockN>(m_block, tl.n_min, tl.n_max);
    return tl;
  }
  CUTE_DEVICE static bool tile_is_empty(const Tile& tl) { return tl.m_block * kBlockM >= tl.len_q; }

  // The walk. Static: tiles first(), + stride(), ... below end(). Dynamic (p.tile_counter, banded
  // shapes on a persistent grid): the first tile is blockIdx.x and a scheduler thread (lane 0 of the
  // producer warpgroup's second warp, otherwise idle) takes each next one from the counter, so a CTA
  // that finishes early takes the next-longest tile. It hands each index to the loading thread and
  // the consumers through a two-slot ring in shared memory (publish / take: one full and one empty
  // barrier a slot), -1 once the tiles have run out. It claims tile k + 1 only once the loading
  // thread has taken tile k (`tile_taken`), so a CTA holds one tile ahead of its loads: claimed as
  // soon as a slot frees, each CTA would hold two tiles ahead of its consumers, and the tiles in
  // flight would span more heads than the L2 sections mean them to. (In the loading thread itself
  // the atomic's registers spilled at 24 a thread.)
  CUTE_DEVICE static int64_t first() { return blockIdx.x; }
  CUTE_DEVICE int64_t end() const { return p.num_tiles; }
  CUTE_DEVICE static int64_t stride() { return gridDim.x; }
  CUTE_DEVICE bool dynamic() const { return p.tile_counter != nullptr; }
  // The k-th tile of this CTA's walk (-1 or >= end(): none), for the loading thread (loader) and the
  // consumers.
  template <class Storage>
  CUTE_DEVICE int64_t tile_of_step(Storage& smem, int k, bool loader = false) const {
    return dynamic() ? take(smem, k, loader) : first() + int64_t(k) * stride();
  }
  // The scheduler thread's whole job. At the end the last CTA sets the counter back to zero (every
  // CTA's scheduler has taken its last index by then, so no add can follow).
  template <class Storage>
  CUTE_DEVICE void schedule(Storage& smem) const {
    int64_t t = first();
    for (int k = 0;; ++k) {
      publish(smem, k, t < end() ? t : -1);
      if (t >= end()) break;
      cutlass::arch::ClusterBarrier::wait(&smem.tile_taken[k & 1], (k >> 1) & 1);
      t = int64_t(atomicAdd(p.tile_counter, 1)) + gridDim.x;
    }
    __threadfence();
    if (atomicAdd(p.tile_counter + 1, 1) == int(gridDim.x) - 1) {
      atomicExch(p.tile_counter, 0);
      atomicExch(p.tile_counter + 1, 0);
    }
  }
  template <class Storage>
  CUTE_DEVICE static void publish(Storage& smem, int k, int64_t tile) {
    using Barrier = cutlass::arch::ClusterBarrier;
    const int s = k & 1, j = k >> 1;
    if (j > 0) Barrier::wait(&smem.tile_empty[s], (j - 1) & 1);
    smem.tile_slot[s] = tile;
    Barrier::arrive(&smem.tile_full[s]);  // release: the slot's write is seen by a waiter
  }
  template <class Storage>
  CUTE_DEVICE static int64_t take(Storage& smem, int k, bool loader) {
    using Barrier = cutlass::arch::ClusterBarrier;
    const int s = k & 1, j = k >> 1;
    Barrier::wait(&smem.tile_full[s], j & 1);
    const int64_t tile = smem.tile_slot[s];
    Barrier::arrive(&smem.tile_empty[s]);
    if (loader) Barrier::arrive(&smem.tile_taken[s]);
    return tile;
  }
};

}  // namespace blockfuse::attn::sm90
