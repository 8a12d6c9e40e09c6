// Internal: host-side launch of the sm90a attention kernel for one (dtype, head dim, tile).
// Per call the host encodes four TMA descriptors (q, k, v, out; cuTensorMapEncodeTiled, not a
// stream operation, so graph capture is unaffected) into the __grid_constant__ parameters; the
// shared-memory opt-in happens once per device. No workspace.
#pragma once

#include "attention/attention_sm90.cuh"
#include "attention/launch_sm90.h"
#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"

namespace blockfuse::attn::sm90 {

template <class Traits>
void launch(const Params& a, cudaStream_t stream) {
  using Element = typename Traits::Element;
  auto kernel = attention_fwd_sm90<Traits>;
  constexpr int kSmem = Traits::kSmemBytes;
  static detail::PerDeviceCache<bool> opted_in;  // this kernel's
  detail::opt_in_dynamic_smem_once(opted_in, kernel, kSmem);

  const int m_blocks = (a.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  const int64_t num_tiles = int64_t(m_blocks) * a.heads_q * a.batch;
  // The TMA views: [batch][rows][heads][D]; varlen: one view of all `total` packed rows.
  constexpr int D = Traits::kHeadDim;  // tma_gmem_view (traits_sm90.cuh): int32 coordinates, zero strides
  const auto qkv = qkv_tma_views<D, Element>(a);
  auto o = tma_gmem_view<D>(static_cast<Element*>(a.out), qkv.rows_q, a.heads_q, qkv.views, a.o_row_stride,
                            a.o_head_stride, a.o_batch_stride);
  Sm90Params<Traits> p{a,
                       make_tma_copy(SM90_TMA_LOAD{}, qkv.q, typename Traits::SmemLayoutQSlice{}),
                       make_tma_copy(SM90_TMA_LOAD{}, qkv.k, typename Traits::SmemLayoutKStage{}),
                       make_tma_copy(SM90_TMA_LOAD{}, qkv.v, typename Traits::SmemLayoutKStage{}),
                       make_tma_copy(SM90_TMA_STORE{}, o, typename Traits::SmemLayoutQSlice{})};
  p.rows_q = qkv.rows_q;
  p.rows_k = qkv.rows_k;
  p.m_blocks = m_blocks;
  p.num_tiles = num_tiles;
  // Persistent (one CTA per SM: the shared memory allows no more) unless a band makes the tiles
  // uneven (sm90_grid_ctas); then one CTA per tile, longest first within L2 sections (lpt_tile).
  const bool banded = a.window_left < kWindowUnbounded || a.window_right < kWindowUnbounded;
  // Given a tile counter (the host passes one only where attn::sm90_dynamic_walk chose it), a banded
  // shape runs persistent too, its CTAs taking tiles from the counter longest first.
  const bool dynamic = banded && a.tile_counter != nullptr;
  if (!dynamic) p.tile_counter = nullptr;
  if (banded)
    p.lpt_section = sm90_lpt_section(a.seqlen_k, D, int(sizeof(Element)), a.group, a.heads_q * a.batch);
  const int sms = detail::current_device_spec().sm_count;
  const dim3 grid(static_cast<unsigned>(sm90_grid_ctas(num_tiles, sms, banded && !dynamic)), 1, 1);
  detail::launch_with_cluster(kernel, grid, dim3(Traits::kThreads, 1, 1), kSmem, stream, dim3(1, 1, 1), p);
  BF_CHECK_LAUNCH();
}

// 128 x 128 tiles. D = 128: two K and two V stages (Q, O, K, V: 192 KB). D = 64: half the bytes
// per stage and half the work per key block, so three stages (128 KB) to keep more loads in flight.
template <class Element>
using TraitsD128 = Sm90Traits<Element, 128, 128, 2>;
template <class Element>
using TraitsD64 = Sm90Traits<Element, 64, 128, 3>;
// D = 64, 192 x 128 tiles: three consumer warpgroups, four K and four V stages (Q, O, K, V: 176 KB).
// A consumer has 160 registers beside two others; with the masked key blocks peeled out of the main
// loop (mainloop_sm90.cuh) ptxas keeps 128 keys a step (S 64, P 32 and O 32 registers a thread)
// with spills only in the masked edge loops and one 8-byte reload a step in the main one.
template <class Element>
using TraitsD64M192 = Sm90Traits<Element, 64, 128, 4, true, 3>;
// D = 256: 128 x 64 tiles (the O accumulator alone is 128 registers a thread), two K and two V
// stages, O staged through Q's buffer (Q, K, V: 192 KB; a separate O would need 256 KB).
template <class Element>
using TraitsD256 = Sm90Traits<Element, 256, 64, 2, false>;
// The tiles sm90_block_n (params.h) reports for benchmarks and tests.
static_assert(TraitsD64<cutlass::bfloat16_t>::kBlockN == sm90_block_n(64, 128) &&
                  TraitsD64M192<cutlass::bfloat16_t>::kBlockN == sm90_block_n(64, 192) &&
                  TraitsD64M192<cutlass::bfloat16_t>::kBlockM == 192 &&
                  TraitsD128<cutlass::bfloat16_t>::kBlockN == sm90_block_n(128, 128) &&
                  TraitsD256<cutlass::bfloat16_t>::kBlockN == sm90_block_n(256, 128),
              "sm90_block_n must name the compiled tiles");

}  // namespace blockfuse::attn::sm90
