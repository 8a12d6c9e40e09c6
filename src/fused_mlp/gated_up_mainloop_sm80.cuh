// The fused MLP's phase 1 (fused_mlp_sm80.cuh): the block's gate/up rows -> h in shared memory.
//
// The block's 2·16·ng interleaved rows of w_gate_up are 2·ng tiles of 16 rows; warp w takes tile
// w % (2ng) and K slice w / (2ng) and runs the decode loop (common/decode_loop.cuh) on it. The fp32
// tile results go through shared memory (s_acc), are summed over the K slices (and, in a split unit,
// over the cluster's CTAs through distributed shared memory), and h = act(gate) · up is formed in
// fp32, zeroed for tokens that did not select the group, and rounded once to T into s_h.
#pragma once

#include <cstdint>

#include <cooperative_groups.h>

#include "common/activation.cuh"
#include "common/decode_loop.cuh"
#include "fused_mlp/params.h"

namespace blockfuse::fmlp {

// U: 32-k chunks per decode-loop step; MP, HLD: s_h's rows and row stride (fused_mlp_kernel).
// cs, rank: the CTAs sharing this unit's groups and this CTA's rank among them (schedule_unit).
template <class T, int NT, int NG, int W, int U, int MP, int HLD>
__device__ __forceinline__ void gated_up_phase(const FusedMlpParams& p, int ng, int cs, int rank, int warp, int lane,
                                               int g, int t, const int64_t (&s_base)[NG], const uint32_t (&s_mask)[NG],
                                               float4 (&s_acc)[W][NT][32], T (&s_h)[MP * HLD],
                                               float2 (&s_part)[NT == 1 ? 8 * kGroup : 1]) {
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
      decode::token_rows<T, NT>(p.m, p.x, p.ldx, g, t, xr, x_ok);
      decode::decode_mainloop<T, NT, U>(acc, w0, w1, true, true, xr, x_ok, k_begin, k_end, t);
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
    // peer's sums once, so a value costs one remote load instead of one per slice (a split unit's h
    // took about twice an unsplit block's on H100: docs/fused_mlp.md#tuning). Every CTA adds the
    // ranks' sums in rank order: the same h in each. (cs is the launcher's p.split, kSplitCtas.)
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

}  // namespace blockfuse::fmlp
