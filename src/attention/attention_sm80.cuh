// Internal: the sm80 attention forward kernel (FlashAttention-2's algorithm, written with CuTe).
// Runs on compute capability >= 8.0, Hopper included (mma.sync; the wgmma kernel is attention_sm90.cuh).
// This file maps a block to its tile; the parts are
//   traits_sm80.cuh    tile, warps, mma.sync atom, shared-memory layouts, accumulator views;
//   mainloop_sm80.cuh  Q once, then per key block S = Q·Kᵀ, soft-cap and mask, online softmax, O += P·V;
//   epilogue_sm80.cuh  O /= row sum, staged through shared memory, and the LSE out.
//
// One block computes O for kBlockM query rows of one (batch, head), grid (ceil(seqlen_q / kBlockM),
// heads_q, batch).
#pragma once

#include <cmath>
#include <cstdint>

#include "attention/epilogue_sm80.cuh"
#include "attention/mainloop_sm80.cuh"
#include "attention/mask.cuh"
#include "attention/params.h"
#include "attention/softmax.cuh"
#include "attention/traits_sm80.cuh"

namespace blockfuse::attn {

using namespace cute;

template <class Traits>
__global__ void __launch_bounds__(Traits::kNThreads, 1) attention_fwd_sm80(const Params p) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;

  extern __shared__ __align__(128) char smem_raw[];
  const int tid = threadIdx.x;
  // Longest query blocks first: under a causal mask the last rows see the most keys, and starting
  // them first shortens the tail of the grid.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int head = blockIdx.y;
  const int b = blockIdx.z;
  const int head_kv = head / p.group;

  // Sequence geometry (varlen: from the prefix sums).
  int seqlen_q = p.seqlen_q, seqlen_k = p.seqlen_k;
  int64_t q_off = int64_t(b) * p.q_batch_stride, k_off = int64_t(b) * p.k_batch_stride;
  int64_t v_off = int64_t(b) * p.v_batch_stride, o_off = int64_t(b) * p.o_batch_stride;
  int64_t lse_off = int64_t(b) * p.lse_batch_stride;
  if (p.cu_seqlens_q != nullptr) {
    const int q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    seqlen_q = p.cu_seqlens_q[b + 1] - q0;
    seqlen_k = p.cu_seqlens_k[b + 1] - k0;
    q_off = int64_t(q0) * p.q_row_stride;
    o_off = int64_t(q0) * p.o_row_stride;
    k_off = int64_t(k0) * p.k_row_stride;
    v_off = int64_t(k0) * p.v_row_stride;
    lse_off = q0;
  }
  if (m_block * kBlockM >= seqlen_q) return;
  q_off += int64_t(head) * p.q_head_stride;
  o_off += int64_t(head) * p.o_head_stride;
  k_off += int64_t(head_kv) * p.k_head_stride;
  v_off += int64_t(head_kv) * p.v_head_stride;
  lse_off += int64_t(head) * p.lse_head_stride;
  const int rows_here = min(kBlockM, seqlen_q - m_block * kBlockM);

  const VisibilityMask mask(seqlen_q, seqlen_k, p.window_left, p.window_right);
  const SoftCap softcap{p.softcap_mul};
  int n_min, n_max;
  mask.template n_block_range<kBlockM, kBlockN>(m_block, n_min, n_max);

  Tensor mQ = make_tensor(make_gmem_ptr(static_cast<const Element*>(p.q) + q_off),
                          make_shape(seqlen_q, Int<kHeadDim>{}), make_stride(p.q_row_stride, _1{}));
  Tensor mK = make_tensor(make_gmem_ptr(static_cast<const Element*>(p.k) + k_off),
                          make_shape(seqlen_k, Int<kHeadDim>{}), make_stride(p.k_row_stride, _1{}));
  Tensor mV = make_tensor(make_gmem_ptr(static_cast<const Element*>(p.v) + v_off),
                          make_shape(seqlen_k, Int<kHeadDim>{}), make_stride(p.v_row_stride, _1{}));
  Tensor mO = make_tensor(make_gmem_ptr(static_cast<Element*>(p.out) + o_off),
                          make_shape(seqlen_q, Int<kHeadDim>{}), make_stride(p.o_row_stride, _1{}));
  Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
  Tensor gO = local_tile(mO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
  Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));  // (BN, D, nblk)
  Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));

  typename Traits::GmemTiledCopyO gmem_copy_o;
  auto gmem_thr_o = gmem_copy_o.get_thread_slice(tid);
  Tensor cO = make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{});

  // No visible key for any row of this block: out = 0, LSE = −inf.
  if (n_max <= n_min) {
    EpilogueSm80<Traits>::store_empty(p, gO, gmem_copy_o, gmem_thr_o, cO, lse_off, m_block, rows_here, tid);
    return;
  }

  Element* smem = reinterpret_cast<Element*>(smem_raw);
  Tensor sQ = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutQ{});
  typename Traits::TiledMma mma;
  Tensor acc_o = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kHeadDim>>{});
  OnlineSoftmax<Traits::kRows> softmax;
  MainloopSm80<Traits>::mma(p, gQ, gK, gV, sQ, mma, acc_o, softmax, mask, softcap, m_block, n_min, n_max, rows_here,
                            seqlen_k, tid);
  EpilogueSm80<Traits>::store(p, acc_o, softmax, mma, sQ, gO, gmem_copy_o, gmem_thr_o, cO, lse_off, m_block, rows_here,
                              tid);
}

}  // namespace blockfuse::attn
