// The fused MLP's block-list scheduler (fused_mlp_sm80.cuh): which blocks of the grid take part,
// with how many 16-neuron groups each, and which neurons and tokens each group is.
#pragma once

#include <cstdint>

#include "fused_mlp/params.h"

namespace blockfuse::fmlp {

// Is block number e in the sorted row [row, row + n)? (per-token lists)
__device__ __forceinline__ bool sorted_contains(const int32_t* row, int n, int64_t e) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    const int64_t v = row[mid];
    if (v == e) return true;
    if (v < e) lo = mid + 1;
    else hi = mid;
  }
  return false;
}

// Which blocks take part, with how many groups each. Dense and per-token grids: every block, NG
// groups each. A union list's count is read here: blocks past the list's end return at once (they
// read no weights and do not count in, so a short list costs no more than its blocks), and with
// dynamic_groups the groups per block are the heuristic's choice for the listed groups, so a short
// list spreads over more SMs. Every block reads the same count, so all agree on `blocks`, the
// number that counts in on each chunk.
//
// Split launches (p.split = 2: union lists with the heuristic's block size at M <= 8 on sm_90, as
// clusters of 2 CTAs): where the list has few groups (split_groups, params.h), each 16-neuron group
// is shared by the cluster's two CTAs — rank r reads half of K of the gate/up rows, the halves' sums
// meet through distributed shared memory, and each CTA then takes half of the down phase's chunks —
// so twice as many SMs stream a short list's rows. Otherwise every CTA is a unit of its own, as in
// an unsplit launch (the grid then has twice the CTAs the list can use: the rest return at once).
// On entry ng = NG, blocks = gridDim.x, cs = 1 (CTAs sharing this unit's groups), rank = 0 (this
// CTA's rank among them), unit = blockIdx.x (the block number: a split cluster's); returns false
// where this block takes no part (the kernel then returns at once).
template <int NT, int NG, int W>
__device__ __forceinline__ bool schedule_unit(const FusedMlpParams& p, int& ng, int64_t& blocks, int& cs, int& rank,
                                              int64_t& unit) {
  if (p.mode == ListMode::kUnion) {
    const int64_t count = min(max(int64_t(*p.cnt), int64_t(0)), p.capacity);
    const int64_t listed = count * p.list_groups_per_block;
    // (split launches are M <= kSplitMaxRows: one token tile)
    if (NT == 1 && p.split > 1 && (p.split_always || split_groups(listed, p.sm_count, W))) {
      cs = p.split;
      rank = int(blockIdx.x % unsigned(cs));
      unit = blockIdx.x / unsigned(cs);
      ng = 1;
    }
    // Every unit that takes part has at least one group (unit 0 always takes part): the others
    // return before the block-size model below.
    if (unit > 0 && unit >= listed) return false;
    if (cs == 1 && p.dynamic_groups) ng = min(NG, modeled_neurons_per_block(p.m, p.k, listed, p.sm_count) / kGroup);
    blocks = max(int64_t(1), ceil_div(listed, ng));
    if (unit >= blocks) return false;
  }
  return true;
}

// Which neurons: thread i < NG writes group i's first neuron (s_base, -1: inactive) and the mask of
// the tokens that selected it (s_mask); returns whether that group is active (false elsewhere).
template <int NG>
__device__ __forceinline__ bool pick_groups(const FusedMlpParams& p, int64_t unit, int ng, uint32_t all_tokens,
                                            int64_t (&s_base)[NG], uint32_t (&s_mask)[NG]) {
  bool mine = false;
  if (threadIdx.x < NG) {
    const int64_t f = unit * ng + threadIdx.x;  // flat group number
    int64_t base = -1;
    uint32_t mask = 0;
    if (int(threadIdx.x) < ng && f < p.groups) {
      if (p.mode == ListMode::kDense) {
        base = f * kGroup;
        mask = all_tokens;
      } else if (p.mode == ListMode::kUnion) {
        const int64_t count = min(int64_t(*p.cnt), p.capacity);
        const int64_t e = f / p.list_groups_per_block;
        if (e < count) {
          const int64_t b = p.idx[e];
          // Out-of-range entries are skipped rather than read out of bounds (the list is trusted,
          // but a bad one must not fault).
          if (b >= 0 && b < p.list_blocks) {
            base = (b * p.list_groups_per_block + f % p.list_groups_per_block) * kGroup;
            mask = all_tokens;
          }
        }
      } else {
        const int64_t e = f / p.list_groups_per_block;  // the neuron block this group belongs to
        for (int m = 0; m < p.m; ++m) {
          const int n = int(min(int64_t(max(p.cnt[m], 0)), p.idx_ld));
          if (sorted_contains(p.idx + m * p.idx_ld, n, e)) mask |= 1u << m;
        }
        if (mask) base = f * kGroup;
      }
    }
    s_base[threadIdx.x] = base;
    s_mask[threadIdx.x] = mask;
    mine = base >= 0;
  }
  return mine;
}

}  // namespace blockfuse::fmlp
