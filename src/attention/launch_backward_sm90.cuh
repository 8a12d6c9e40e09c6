// Internal: host-side launch of the sm90a attention backward's dK/dV kernel (backward_sm90.cuh) for
// one (dtype, head dim). Per call the host encodes four TMA descriptors (q, k, v, dout) into the
// __grid_constant__ parameters; the shared-memory opt-in happens once per device. The grid is one
// CTA per (128-key block, KV head, sequence).
#pragma once

#include "attention/backward_sm90.cuh"
#include "attention/launch_backward_sm90.h"
#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"

namespace blockfuse::attn::sm90::bwd {

template <class Traits, bool kDeterministic>
void launch_dkdv_mode(const BwdParams& a, cudaStream_t stream) {
  using Element = typename Traits::Element;
  auto kernel = attention_bwd_dkdv_sm90<Traits, kDeterministic>;
  constexpr int kSmem = Traits::kSmemBytes;
  static detail::PerDeviceCache<bool> opted_in;
  detail::opt_in_dynamic_smem_once(opted_in, kernel, kSmem);

  constexpr int D = Traits::kHeadDim;  // tma_gmem_view (traits_sm90.cuh): int32 coordinates, zero strides
  const auto qkv = qkv_tma_views<D, Element>(a);
  auto dout = tma_gmem_view<D>(static_cast<const Element*>(a.dout), qkv.rows_q, a.heads_q, qkv.views, a.do_row_stride,
                               a.do_head_stride, a.do_batch_stride);
  BwdSm90Params<Traits> p{a,
                          make_tma_copy(SM90_TMA_LOAD{}, qkv.q, typename Traits::SmemLayoutBox{}),
                          make_tma_copy(SM90_TMA_LOAD{}, qkv.k, typename Traits::SmemLayoutBoxK{}),
                          make_tma_copy(SM90_TMA_LOAD{}, qkv.v, typename Traits::SmemLayoutBox{}),
                          make_tma_copy(SM90_TMA_LOAD{}, dout, typename Traits::SmemLayoutBox{})};
  p.rows_q = qkv.rows_q;
  p.rows_k = qkv.rows_k;
  const int64_t key_blocks = (a.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  // The KV heads fastest or the key blocks (backward_key_block_major, backward_blocks.h, says when).
  p.key_block_major = backward_key_block_major(kDeterministic, key_blocks, a.window_left, a.window_right);
  if (!kDeterministic && p.key_block_major)
    p.section_heads = backward_section_heads(key_blocks, a.heads_kv, detail::current_device_spec().sm_count);
  const dim3 grid = p.key_block_major
                        ? dim3(static_cast<unsigned>(a.heads_kv), static_cast<unsigned>(key_blocks),
                               static_cast<unsigned>(a.batch))
                        : dim3(static_cast<unsigned>(key_blocks), static_cast<unsigned>(a.heads_kv),
                               static_cast<unsigned>(a.batch));
  detail::launch_with_cluster(kernel, grid, dim3(Traits::kThreads, 1, 1), kSmem, stream, dim3(1, 1, 1), p);
  BF_CHECK_LAUNCH();
}

// The deterministic mode where the launcher passed its counters (dq_semaphore), else reductions in any order.
template <class Traits>
void launch_dkdv(const BwdParams& a, cudaStream_t stream) {
  if (a.dq_semaphore != nullptr)
    launch_dkdv_mode<Traits, true>(a, stream);
  else
    launch_dkdv_mode<Traits, false>(a, stream);
}

// Q / dO stages: at D = 128 three (K, V, the stages, the two dS buffers and the dQ stage take about
// 210 KB, Traits::kSmemBytes), at D = 64 four (130 KB; four against two, with two dQ stages:
// 0.91-0.97x the time in the deterministic mode, 0.96-0.98x unordered; results/attention.json
// backward_d64_stages).
template <class Element>
using BwdTraitsD128 = BwdTraits<Element, 128, 3>;
template <class Element>
using BwdTraitsD64 = BwdTraits<Element, 64, 4>;

}  // namespace blockfuse::attn::sm90::bwd
