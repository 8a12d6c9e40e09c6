// The fused MLP's phase 2 (fused_mlp_sm80.cuh): the down projection of a warp's batch of chunks.
//
// yᵀ[K, M] += W_downᵀ-rows · hᵀ: A = the group's 16 rows of w_down_t seen as [k_out, neuron], B = hᵀ
// [neuron, token]. w_down_t is neuron-major, so lane (g, t) loads 8 consecutive k_out of neurons
// 4t..4t+3 (four 16-byte loads, 128 contiguous bytes per neuron row per warp) and pairs neurons
// (4t, 4t+1) and (4t+2, 4t+3) into 32-bit words with byte permutes. The MMA's k (neuron) order is
// permuted — logical k 2t, 2t+1 are neurons 4t, 4t+1 and 2t+8, 2t+9 are 4t+2, 4t+3 — and B uses the
// same permutation (h[token][4t..4t+3] is one 8-byte shared load), so the products are exact; its m
// (k_out) order is permuted so that lane (g, t) ends with 8 consecutive y columns of tokens 2t and
// 2t+1: MMA i takes row g = column 8g + 2i, row g + 8 = column 8g + 2i + 1. A warp covers 64 columns
// (a chunk) per step.
//
// Loads in flight: a lane loads 4 rows (16 bytes each) of a group for a chunk, and issues S such
// slots before their MMAs: 16 loads (8 at NT >= 3, where the accumulators take the room). A block
// of ng >= S groups fills the slots with one chunk's groups; a block of fewer groups (16- and
// 32-neuron blocks, and the union lists' blocks that chose ng < NG on the device) fills them with
// the groups of S / ng consecutive chunks of this warp (one 16-neuron chunk alone is only 4 loads
// per lane; 7 % faster for 90 %-sparse lists on H100, docs/fused_mlp.md#tuning). Only at M <= 8
// (NT = 1): with more token tiles the second path's accumulators and slots spill (ptxas sm_90).
#pragma once

#include <cstdint>

#include "common/decode_loop.cuh"  // MmaType, load_w
#include "fused_mlp/epilogue_sm80.cuh"
#include "fused_mlp/params.h"

namespace blockfuse::fmlp {

using decode::load_w;
using decode::MmaType;

// S: the down phase's load slots a lane issues before their MMAs, for W warps and NT token tiles.
template <int NT, int W>
__host__ __device__ constexpr int down_slots() {
  return W > kWarps ? 2 : NT <= 2 ? 4 : 2;
}

// Group grp's 4 rows of w_down_t for this lane's 8 columns kc.. of a chunk (no load where off).
template <class T, int NG>
__device__ __forceinline__ void load_rows(const FusedMlpParams& p, const int64_t (&s_base)[NG], uint4 (&v)[4], int grp,
                                          int64_t kc, bool on, int t) {
  const int64_t base = s_base[grp];
  const T* wr = static_cast<const T*>(p.wd) + (base >= 0 ? base + 4 * t : 0) * p.ldd + kc;
#pragma unroll
  for (int r = 0; r < 4; ++r) v[r] = load_w(wr + r * p.ldd, on && base >= 0);
}

// d += those rows · h of group grp.
template <class T, int NT, int MP, int HLD>
__device__ __forceinline__ void mma_group(float (&d)[NT][4][4], const uint4 (&v)[4], int grp, const T (&s_h)[MP * HLD],
                                          int g, int t) {
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
}

// The warp's chunks c0, c0 + CW, … below c_end: their partials into the workspace (store_partials).
// cpr: chunks a round of S slots holds (1, or S / ng at NT = 1 where ng < S).
template <class T, int NT, int NG, int W, int MP, int HLD>
__device__ __forceinline__ void down_batch(const FusedMlpParams& p, int ng, int cpr, int64_t c0, int64_t c_end,
                                           int64_t CW, int g, int t, const int64_t (&s_base)[NG],
                                           const T (&s_h)[MP * HLD]) {
  constexpr int S = down_slots<NT, W>();
  constexpr int GS = NG < S ? NG : S;
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
        for (int s = 0; s < GS; ++s) load_rows<T, NG>(p, s_base, v[s], g0 + s, kc, col_in, t);
#pragma unroll
        for (int s = 0; s < GS; ++s)
          if (s_base[g0 + s] >= 0) mma_group<T, NT, MP, HLD>(d, v[s], g0 + s, s_h, g, t);  // block-uniform
      }
      if (col_in) store_partials<NT>(p, d, kc, t);
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
        load_rows<T, NG>(p, s_base, v[s], s & (ng - 1), kc, c < c_end && kc < p.k, t);
      }
      float d[NT][4][4] = {};
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const int grp = s & (ng - 1);
        if (s_base[grp] >= 0) mma_group<T, NT, MP, HLD>(d, v[s], grp, s_h, g, t);  // block-uniform
        if (grp == ng - 1) {
          const int64_t c = cb + int64_t(s >> sh) * CW, kc = c * kChunk + 8 * g;
          if (c < c_end && kc < p.k) store_partials<NT>(p, d, kc, t);
#pragma unroll
          for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) d[j][i][0] = d[j][i][1] = d[j][i][2] = d[j][i][3] = 0.f;
        }
      }
    }
  }
}

}  // namespace blockfuse::fmlp
