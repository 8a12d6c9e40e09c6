// The fused MLP kernel (sm80+: mma.sync, so one kernel is correct on Ampere, Ada and Hopper).
//
// A block of W warps (8; 16 at M <= 8, params.h: auto_block_warps) owns NG groups of 16
// neurons (dense: consecutive groups; sparse: groups of the listed neuron blocks; per-token: one
// neuron block's groups and the mask of tokens that selected it). The kernel is assembled from its
// parts, h never leaving the SM:
//
// - block_scheduler_sm80.cuh: which blocks take part, with how many groups each (dense and
//   per-token grids: every block, NG groups, blocks with nothing selected still count in; union
//   lists: the blocks the list's count needs, the groups per block chosen on the device from the
//   count by the heuristic's own cost model where dynamic_groups; split units of 2-CTA clusters),
//   and which neurons and tokens each group is.
// - gated_up_mainloop_sm80.cuh (phase 1): the gate/up rows through the decode loop
//   (common/decode_loop.cuh: yᵀ = W · xᵀ, W rows as the m16 side of m16n8k16, tokens the n8 side,
//   16-byte non-allocating weight loads, several 32-k chunks in flight per lane), summed over the K
//   slices, h = act(gate) · up in fp32, rounded once to T into shared memory.
// - down_mainloop_sm80.cuh (phase 2): yᵀ[K, M] += W_downᵀ-rows · hᵀ, a warp's 64-column chunks
//   w, w + W, … in batches of up to 32.
// - epilogue_sm80.cuh (phase 3): each chunk's fp32 partial into the workspace (kAtomic: fp32
//   atomics into one [M, K] accumulator, the last block to count in writes y in T and clears it;
//   kDeterministic: the block's own slot, summed in block order by fused_mlp_sum_kernel, a second
//   launch).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fused_mlp/block_scheduler_sm80.cuh"
#include "fused_mlp/down_mainloop_sm80.cuh"
#include "fused_mlp/epilogue_sm80.cuh"  // store_partials, count_in_and_finish, fused_mlp_sum_kernel
#include "fused_mlp/gated_up_mainloop_sm80.cuh"
#include "fused_mlp/params.h"

namespace blockfuse::fmlp {

// W: warps a block, kWarps (two blocks an SM) or, at NT = 1 only, 16 (one block an SM; params.h:
// auto_block_warps). The wider blocks keep 4 gate/up loads a lane in flight (U = 2) and 2 down slots:
// 4 loads a lane are what a warp's streaming rate uses (params.h).
template <class T, int NT, int NG, int W = kWarps>
__global__ void __launch_bounds__(W * 32, W == kWarps ? 2 : 1) fused_mlp_kernel(const FusedMlpParams p) {
  static_assert(W == kWarps || (NT == 1 && W == 16), "wider blocks only at NT = 1 (M <= 8)");
  constexpr int MP = 8 * NT;                // token rows, padded to whole 8-row MMA tiles
  constexpr int HLD = kGroup * NG + 8;      // s_h row stride (keeps 8-byte alignment, staggers banks)
  // 32-k chunks per phase-1 step (2·U weight loads in flight per lane), as decode_gemm sizes it.
  constexpr int U = W > kWarps ? 2 : NT == 1 ? 8 : NT == 4 ? 3 : 4;
  static_assert(NG == 1 || NG == 2 || NG == 4, "NG must be 1, 2 or 4");

  __shared__ int64_t s_base[NG];     // first neuron of each group, -1: inactive
  __shared__ uint32_t s_mask[NG];    // tokens that selected the group
  __shared__ float4 s_acc[W][NT][32];
  __shared__ __align__(16) T s_h[MP * HLD];
  __shared__ float2 s_part[NT == 1 ? 8 * kGroup : 1];  // a split unit's per-CTA sums (one group)

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const uint32_t all_tokens = p.m >= 32 ? 0xffffffffu : ((1u << p.m) - 1u);

  // ---- which blocks take part, with how many groups each (block_scheduler_sm80.cuh) ----------
  int ng = NG;
  int64_t blocks = gridDim.x;
  int cs = 1, rank = 0;  // CTAs sharing this unit's groups, and this CTA's rank among them
  int64_t unit = blockIdx.x;
  if (!schedule_unit<NT, NG, W>(p, ng, blocks, cs, rank, unit)) return;
#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
  if (cs > 1) __trap();  // never launched below sm_90 (the launcher checks the loaded code)
#endif

  // ---- which neurons ---------------------------------------------------------------------------
  const bool mine = pick_groups<NG>(p, unit, ng, all_tokens, s_base, s_mask);
  const bool active = __syncthreads_or(mine);
  if (p.deterministic) {
    // The flag says whether this block's slot holds a partial, and unit 0 records how many blocks
    // take part: fused_mlp_sum_kernel, launched after this grid, reads both once it has completed.
    // An inactive block has nothing more to do.
    if (threadIdx.x == 0) {
      p.flags[blockIdx.x] = active;
      if (unit == 0) *p.det_blocks = int(blocks);
    }
    if (!active) return;
  }

  // ---- phase 1: gate/up rows -> h (gated_up_mainloop_sm80.cuh) ----------------------------------
  if (active)
    gated_up_phase<T, NT, NG, W, U, MP, HLD>(p, ng, cs, rank, warp, lane, g, t, s_base, s_mask, s_acc, s_h, s_part);

  // ---- phase 2 + 3: down projection and reduction (down_mainloop_sm80.cuh, epilogue_sm80.cuh) ---
  // A warp takes chunks warp, warp + W, … in batches of up to 32: it adds the partials of a whole
  // batch first, then fences once and counts in on all of the batch's chunks at once (lane i on the
  // i-th), so the fence and the counter round trip are paid once per batch, not once per chunk.
  constexpr int S = down_slots<NT, W>();
  const int cpr = NT > 1 || ng >= S ? 1 : S / ng;  // chunks per round (ng is 1, 2 or 4)
  const int64_t n_chunks = ceil_div(p.k, kChunk);
  // A warp's chunks: warp, warp + CW, … with CW = 8 warps x the CTAs sharing the unit's groups (rank r
  // of a split unit starts at chunk 8r + warp), so each chunk is computed and counted in by one CTA
  // of each unit.
  const int64_t CW = int64_t(W) * cs;
  for (int64_t c0 = int64_t(rank) * W + warp; c0 < n_chunks; c0 += CW * 32) {
    if (active) down_batch<T, NT, NG, W, MP, HLD>(p, ng, cpr, c0, min(n_chunks, c0 + CW * 32), CW, g, t, s_base, s_h);
    if (p.deterministic) continue;  // the slots are summed by fused_mlp_sum_kernel
    count_in_and_finish<T>(p, c0, CW, n_chunks, blocks, lane);
  }
}

}  // namespace blockfuse::fmlp
