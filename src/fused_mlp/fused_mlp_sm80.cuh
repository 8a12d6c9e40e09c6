// The fused MLP kernel (sm80+: mma.sync, so one kernel is correct on Ampere, Ada and Hopper).
//
// A block of W warps (8; 16 or 32 at M <= 8, params.h: auto_block_warps) owns NG groups of 16
// neurons (dense: consecutive groups; sparse: groups of the listed neuron blocks; per-token: one
// neuron block's groups and the mask of tokens that selected it). Three phases, h never leaving
// the SM:
//
// 1. gate/up. The block's 2·16·ng interleaved rows of w_gate_up are 2·ng tiles of 16 rows (ng =
//    NG, or fewer for a union list, see 3); warp w takes tile w % (2ng) and K slice w / (2ng) and
//    runs decode_gemm's loop on it: yᵀ = W · xᵀ with W rows as the m16 side of m16n8k16, tokens the n8 side, 16-byte
//    non-allocating weight loads, several 32-k chunks in flight per lane. The fp32 tile results
//    go through shared memory, are summed over the K slices, and h = act(gate) · up is formed in
//    fp32, zeroed for tokens that did not select the group, and rounded once to T into shared memory.
//
// 2. down. yᵀ[K, M] += W_downᵀ-rows · hᵀ: A = the group's 16 rows of w_down_t seen as [k_out,
//    neuron], B = hᵀ [neuron, token]. w_down_t is neuron-major, so lane (g, t) loads 8 consecutive
//    k_out of neurons 4t..4t+3 (four 16-byte loads, 128 contiguous bytes per neuron row per warp)
//    and pairs neurons (4t, 4t+1) and (4t+2, 4t+3) into 32-bit words with byte permutes. The MMA's
//    k (neuron) order is permuted — logical k 2t, 2t+1 are neurons 4t, 4t+1 and 2t+8, 2t+9 are 4t+2,
//    4t+3 — and B uses the same permutation (h[token][4t..4t+3] is one 8-byte shared load), so the
//    products are exact; its m (k_out) order is permuted so that lane (g, t) ends with 8
//    consecutive y columns of tokens 2t and 2t+1: MMA i takes row g = column 8g + 2i, row g + 8 =
//    column 8g + 2i + 1. A warp covers 64 columns (a chunk) per step, warps take chunks w, w + W, …
//
// 3. reduction. Per chunk, a warp adds its fp32 partial to the workspace — kAtomic: fp32 atomics
//    (red.global.add, four-wide on sm_90) into one [M, K] accumulator; kDeterministic: stores into
//    the block's own slot, which a second launch (fused_mlp_sum_kernel, reduce_sm80.cuh) sums in block order.
//    Atomic: after a batch of up to 32 chunks a warp fences once and counts in on each of them; the
//    warp that counts last (of the participating blocks) reads the chunk and clears it, writes y in
//    T and resets the counter, so the next call or graph replay finds the workspace zeroed. Dense and
//    per-token grids: every block takes part, blocks with nothing selected still count in. Union
//    lists: the blocks the list's count needs take part (all read the count on the device), the
//    rest return at once; with the heuristic's block size (dynamic_groups) the groups per block are
//    chosen on the device from the count, by the heuristic's own cost model (params.h).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cooperative_groups.h>

#include "decode_gemm/decode_gemm_sm80.cuh"  // MmaType, load_w, load_x, store_y
#include "fused_mlp/params.h"
#include "fused_mlp/reduce_sm80.cuh"  // red_add8, fused_mlp_sum_kernel
#include "common/activation.cuh"
#include "common/pdl.cuh"

namespace blockfuse::fmlp {

using decode::load_w;
using decode::load_x;
using decode::MmaType;
using decode::store_y;

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

// W: warps a block, kWarps (two blocks an SM) or, at NT = 1 only, 16 or 32 (one block an SM;
// params.h: auto_block_warps). The wider blocks keep 4 gate/up loads a lane in flight (U = 2) and 2
// down slots (1 at 32 warps, 4 loads a lane): 4 loads a lane are what a warp's streaming rate uses
// (params.h). 32 warps leave 64 registers a thread; ptxas (sm_90) still spills 16-72 bytes there
// (none at 16 warps).
template <class T, int NT, int NG, int W = kWarps>
__global__ void __launch_bounds__(W * 32, W == kWarps ? 2 : 1) fused_mlp_kernel(const FusedMlpParams p) {
  static_assert(W == kWarps || (NT == 1 && (W == 16 || W == 32)), "wider blocks only at NT = 1 (M <= 8)");
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

  // ---- which blocks take part, with how many groups each ---------------------------------------
  // Dense and per-token grids: every block, NG groups each. A union list's count is read here:
  // blocks past the list's end return at once (they read no weights and do not count in, so a short
  // list costs no more than its blocks), and with dynamic_groups the groups per block are the
  // heuristic's choice for the listed groups, so a short list spreads over more SMs. Every block
  // reads the same count, so all agree on `blocks`, the number that counts in on each chunk.
  //
  // Split launches (p.split = 2: union lists with the heuristic's block size at M <= 8 on sm_90, as
  // clusters of 2 CTAs): where the list has few groups (split_groups, params.h), each 16-neuron group
  // is shared by the cluster's two CTAs — rank r reads half of K of the gate/up rows, the halves' sums
  // meet through distributed shared memory, and each CTA then takes half of the down phase's chunks —
  // so twice as many SMs stream a short list's rows. Otherwise every CTA is a unit of its own, as in
  // an unsplit launch (the grid then has twice the CTAs the list can use: the rest return at once).
  // `unit`: the block number (a split cluster's).
  int ng = NG;
  int64_t blocks = gridDim.x;
  int cs = 1, rank = 0;  // CTAs sharing this unit's groups, and this CTA's rank among them
  int64_t unit = blockIdx.x;
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
    if (unit > 0 && unit >= listed) return;
    if (cs == 1 && p.dynamic_groups) ng = min(NG, modeled_neurons_per_block(p.m, p.k, listed, p.sm_count) / kGroup);
    blocks = max(int64_t(1), ceil_div(listed, ng));
    if (unit >= blocks) return;
  }
#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
  if (cs > 1) __trap();  // never launched below sm_90 (the launcher checks the loaded code)
#endif

  // ---- which neurons --------------------------------------------------------------------------
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

  if (active) {
    // ---- phase 1: gate/up rows -> h ------------------------------------------------------------
    const int rtn = 2 * ng, ksn = W / rtn;  // 16-row tiles of gate/up rows, K slices
    {
      const int rt = warp % rtn, ks = warp / rtn;
      const int64_t base = s_base[rt >> 1];
      float acc[NT][4];
#pragma unroll
      for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
      if (base >= 0) {
        // This CTA's part of K (all of it unless split), then warp slice ks of that, in whole
        // 32-column steps.
        const int64_t part = (ceil_div(p.k, cs) + 31) / 32 * 32;
        const int64_t kr_begin = min(p.k, int64_t(rank) * part), kr_end = min(p.k, kr_begin + part);
        const int64_t slice = (ceil_div(kr_end - kr_begin, ksn) + 31) / 32 * 32;
        const int64_t k_begin = min(kr_end, kr_begin + int64_t(ks) * slice), k_end = min(kr_end, k_begin + slice);
        const int64_t r0 = 2 * base + 16 * (rt & 1);
        const T* w0 = static_cast<const T*>(p.wgu) + (r0 + g) * p.ldgu + 8 * t;
        const T* w1 = static_cast<const T*>(p.wgu) + (r0 + g + 8) * p.ldgu + 8 * t;
        const T* xr[NT];
        bool x_ok[NT];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          x_ok[j] = 8 * j + g < p.m;
          xr[j] = static_cast<const T*>(p.x) + (x_ok[j] ? 8 * j + g : 0) * p.ldx + 8 * t;
        }
        for (int64_t kb = k_begin; kb < k_end; kb += U * 32) {
          uint4 a0[U], a1[U], b[U][NT];
#pragma unroll
          for (int c = 0; c < U; ++c) {
            const int64_t kk = kb + c * 32;
            const bool in = kk + 8 * t < k_end;
            a0[c] = load_w(w0 + kk, in);
            a1[c] = load_w(w1 + kk, in);
          }
#pragma unroll
          for (int c = 0; c < U; ++c) {
            const int64_t kk = kb + c * 32;
            const bool in = kk + 8 * t < k_end;
#pragma unroll
            for (int j = 0; j < NT; ++j) b[c][j] = load_x(xr[j] + kk, in && x_ok[j]);
          }
#pragma unroll
          for (int c = 0; c < U; ++c) {
            const uint32_t f0[4] = {a0[c].x, a1[c].x, a0[c].y, a1[c].y};
            const uint32_t f1[4] = {a0[c].z, a1[c].z, a0[c].w, a1[c].w};
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              MmaType<T>::mma(acc[j], f0, b[c][j].x, b[c][j].y);
              MmaType<T>::mma(acc[j], f1, b[c][j].z, b[c][j].w);
            }
          }
        }
      }
      // acc[j] = {row g: tokens 8j+2t, 8j+2t+1; row g+8: the same tokens}, rows of tile rt.
#pragma unroll
      for (int j = 0; j < NT; ++j) s_acc[warp][j][lane] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    }
    __syncthreads();
    const int nbr = kGroup * ng;  // this block's neurons
    // Item i = (token m, neuron n): this CTA's sums over its K slices of the up and gate rows. Interleaved
    // rows 2nn (up) and 2nn + 1 (gate) of the group: tile 2·grp + (2nn) / 16, row (2nn) % 16 = lane
    // group g (+8: e bit 1); token m: j = m / 8, lane t = (m % 8) / 2, e bit 0.
    auto slice_sums = [&](int i) {
      const int m = i / nbr, n = i % nbr;
      const int grp = n / kGroup, nn = n % kGroup;
      const int rt = 2 * grp + (2 * nn) / 16, row = (2 * nn) % 16;  // the gate row is row + 1
      const int j = m / 8, tt = (m % 8) / 2, e0 = m & 1;
      float up = 0.f, gate = 0.f;
      for (int ks = 0; ks < ksn; ++ks) {
        const float* a = reinterpret_cast<const float*>(&s_acc[rt + rtn * ks][j][0]);
        up += a[((row & 7) * 4 + tt) * 4 + (row >> 3) * 2 + e0];
        gate += a[(((row + 1) & 7) * 4 + tt) * 4 + ((row + 1) >> 3) * 2 + e0];
      }
      return make_float2(up, gate);
    };
    auto store_h = [&](int i, float2 ug) {
      const int m = i / nbr, n = i % nbr;
      const bool on = (s_mask[n / kGroup] >> m) & 1u;  // also false for the padding rows m >= M
      s_h[m * HLD + n] = static_cast<T>(on ? gated_act(p.act, ug.y, ug.x) : 0.f);
    };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (NT == 1 && cs > 1) {
      // A split unit (NT = 1, one group): each CTA sums its own K slices first, then reads the
      // peer's sums once, so a value costs one remote load instead of one per slice (1.03-1.05x on
      // split lists, H100; docs/fused_mlp.md#tuning). Every CTA adds the ranks' sums in rank order: the same h in each. (cs is the
      // launcher's p.split, kSplitCtas.)
      namespace cg = cooperative_groups;
      for (int i = threadIdx.x; i < MP * nbr; i += W * 32) s_part[i] = slice_sums(i);
      cg::this_cluster().sync();  // every CTA's sums are complete
      for (int i = threadIdx.x; i < MP * nbr; i += W * 32) {
        float2 ug = *cg::this_cluster().map_shared_rank(&s_part[i], 0);
#pragma unroll
        for (int r = 1; r < kSplitCtas; ++r) {
          const float2 v = *cg::this_cluster().map_shared_rank(&s_part[i], r);
          ug.x += v.x;
          ug.y += v.y;
        }
        store_h(i, ug);
      }
      __syncthreads();
      cg::this_cluster().sync();  // the peers have read this CTA's sums: it may exit
    } else
#endif
    {
      for (int i = threadIdx.x; i < MP * nbr; i += W * 32) store_h(i, slice_sums(i));
      __syncthreads();
    }
  }

  // ---- phase 2 + 3: down projection and reduction -----------------------------------------------
  // A warp takes chunks warp, warp + W, … in batches of up to 32: it adds the partials of a whole
  // batch first, then fences once and counts in on all of the batch's chunks at once (lane i on the
  // i-th), so the fence and the counter round trip are paid once per batch, not once per chunk.
  //
  // Loads in flight: a lane loads 4 rows (16 bytes each) of a group for a chunk, and issues S such
  // slots before their MMAs: 16 loads (8 at NT >= 3, where the accumulators take the room). A block
  // of ng >= S groups fills the slots with one chunk's groups; a block of fewer groups (16- and
  // 32-neuron blocks, and the union lists' blocks that chose ng < NG on the device) fills them with
  // the groups of S / ng consecutive chunks of this warp (one 16-neuron chunk alone is only 4 loads
  // per lane): 90 %-sparse 8B at M = 1 29.5 -> 27.4 µs, forced 16-neuron blocks 27.2 -> 25.2
  // (H100; docs/fused_mlp.md#tuning). Only at
  // M <= 8 (NT = 1): with more token tiles the second path's accumulators and slots spill (ptxas
  // sm_90).
  constexpr int S = W > 16 ? 1 : W > kWarps ? 2 : NT <= 2 ? 4 : 2;
  constexpr int GS = NG < S ? NG : S;
  const int cpr = NT > 1 || ng >= S ? 1 : S / ng;  // chunks per round (ng is 1, 2 or 4)
  // Group grp's 4 rows of w_down_t for this lane's 8 columns kc.. of a chunk (no load where off).
  auto load_rows = [&](uint4 (&v)[4], int grp, int64_t kc, bool on) {
    const int64_t base = s_base[grp];
    const T* wr = static_cast<const T*>(p.wd) + (base >= 0 ? base + 4 * t : 0) * p.ldd + kc;
#pragma unroll
    for (int r = 0; r < 4; ++r) v[r] = load_w(wr + r * p.ldd, on && base >= 0);
  };
  // d += those rows · h of group grp.
  auto mma_group = [&](float (&d)[NT][4][4], const uint4 (&v)[4], int grp) {
    uint32_t b[NT][2];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint2 hb = *reinterpret_cast<const uint2*>(&s_h[(8 * j + g) * HLD + grp * kGroup + 4 * t]);
      b[j][0] = hb.x;  // neurons 4t, 4t+1   (logical k 2t, 2t+1)
      b[j][1] = hb.y;  // neurons 4t+2, 4t+3 (logical k 2t+8, 2t+9)
    }
    const uint32_t w0[4] = {v[0].x, v[0].y, v[0].z, v[0].w};
    const uint32_t w1[4] = {v[1].x, v[1].y, v[1].z, v[1].w};
    const uint32_t w2[4] = {v[2].x, v[2].y, v[2].z, v[2].w};
    const uint32_t w3[4] = {v[3].x, v[3].y, v[3].z, v[3].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Columns 2i (rows g) and 2i + 1 (rows g + 8) of this lane's 8: word i of each vector.
      const uint32_t a[4] = {__byte_perm(w0[i], w1[i], 0x5410), __byte_perm(w0[i], w1[i], 0x7632),
                             __byte_perm(w2[i], w3[i], 0x5410), __byte_perm(w2[i], w3[i], 0x7632)};
#pragma unroll
      for (int j = 0; j < NT; ++j) MmaType<T>::mma(d[j][i], a, b[j][0], b[j][1]);
    }
  };
  // d[j][i] = {y[8j+2t][kc+2i], y[8j+2t+1][kc+2i], y[8j+2t][kc+2i+1], y[8j+2t+1][kc+2i+1]}: into the
  // accumulator (atomic) or this block's slot (deterministic).
  auto flush = [&](const float (&d)[NT][4][4], int64_t kc) {
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
  };
  const int64_t n_chunks = ceil_div(p.k, kChunk);
  // A warp's chunks: warp, warp + CW, … with CW = 8 warps x the CTAs sharing the unit's groups (rank r
  // of a split unit starts at chunk 8r + warp), so each chunk is computed and counted in by one CTA
  // of each unit.
  const int64_t CW = int64_t(W) * cs;
  for (int64_t c0 = int64_t(rank) * W + warp; c0 < n_chunks; c0 += CW * 32) {
    if (active) {
      const int64_t c_end = min(n_chunks, c0 + CW * 32);
      if (cpr == 1) {
#pragma unroll 1
        for (int64_t c = c0; c < c_end; c += CW) {
          const int64_t kc = c * kChunk + 8 * g;  // this lane's 8 columns
          const bool col_in = kc < p.k;           // K % 8 == 0: all 8 in or all out
          float d[NT][4][4] = {};
#pragma unroll
          for (int g0 = 0; g0 < NG; g0 += GS) {
            uint4 v[GS][4];
#pragma unroll
            for (int s = 0; s < GS; ++s) load_rows(v[s], g0 + s, kc, col_in);
#pragma unroll
            for (int s = 0; s < GS; ++s)
              if (s_base[g0 + s] >= 0) mma_group(d, v[s], g0 + s);  // block-uniform
          }
          if (col_in) flush(d, kc);
        }
      } else if constexpr (NT == 1) {
        // Slot s holds group s % ng of chunk cb + (s / ng)·CW: every slot's loads first, then
        // the MMAs, a chunk's flush after its last group.
        const int sh = ng == 1 ? 0 : 1;  // ng is 1 or 2 here
#pragma unroll 1
        for (int64_t cb = c0; cb < c_end; cb += CW * cpr) {
          uint4 v[S][4];
#pragma unroll
          for (int s = 0; s < S; ++s) {
            const int64_t c = cb + int64_t(s >> sh) * CW, kc = c * kChunk + 8 * g;
            load_rows(v[s], s & (ng - 1), kc, c < c_end && kc < p.k);
          }
          float d[NT][4][4] = {};
#pragma unroll
          for (int s = 0; s < S; ++s) {
            const int grp = s & (ng - 1);
            if (s_base[grp] >= 0) mma_group(d, v[s], grp);  // block-uniform
            if (grp == ng - 1) {
              const int64_t c = cb + int64_t(s >> sh) * CW, kc = c * kChunk + 8 * g;
              if (c < c_end && kc < p.k) flush(d, kc);
#pragma unroll
              for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) d[j][i][0] = d[j][i][1] = d[j][i][2] = d[j][i][3] = 0.f;
            }
          }
        }
      }
    }
    if (p.deterministic) continue;  // the slots are summed by fused_mlp_sum_kernel
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
}

}  // namespace blockfuse::fmlp
