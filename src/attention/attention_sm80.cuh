// Internal: the sm80 attention forward kernel (FlashAttention-2's algorithm, written with CuTe).
// Runs on compute capability >= 8.0, Hopper included (mma.sync; the wgmma kernel is attention_sm90.cuh).
// Its configuration (tile, warps, mma.sync atom, shared-memory layouts, accumulator views) is
// traits_sm80.cuh, its register-level GEMM and copy helpers gemm_sm80.cuh.
//
// One block computes O for kBlockM query rows of one (batch, head):
//   Q tile  -> shared memory once (cp.async, 16-byte vectors, swizzled layout: conflict-free ldmatrix)
//   for each visible key block n, from the last to the first:
//     S = Q·Kᵀ      ldmatrix + mma.sync m16n8k16, fp32 accumulators in registers (kNWarps warps,
//                    16 query rows each per MMA step); V[n] is loaded by cp.async meanwhile
//     soft-cap, mask (policy objects of mask.cuh, only on blocks that need them)
//     online softmax in registers: row max and sum over the 4 lanes of a quad, exp2 with the
//                    softmax scale folded into one FFMA, O rescaled by exp2(m_old − m_new)
//     P -> bf16/fp16 in registers, reinterpreted as the A operand of O += P·V (the m16n8k16 C
//                    fragment of S is the A fragment of the next MMA), V read transposed by
//                    ldmatrix.trans; K[n−1] is loaded by cp.async meanwhile
//   O /= row sum once at the end, converted, staged through shared memory (Q's buffer) and stored
//   with 16-byte vectors; LSE = m·scale + log(sum) per row.
// K and V each have one shared-memory buffer: the copy of one overlaps the GEMM on the other, which
// is FlashAttention-2's two-stage pipeline.
//
// The main loop and the epilogue stay in this one function body: moved into force-inlined
// functions (as the sm90a kernel's are), ptxas allocated the 128 x 64 D = 64 kernel 252-255
// registers instead of 236, so the split waits for a GPU check (docs/attention.md#design).
#pragma once

#include <cmath>

#include "attention/gemm_sm80.cuh"
#include "attention/mask.cuh"
#include "attention/params.h"
#include "attention/softmax.cuh"
#include "attention/traits_sm80.cuh"

namespace blockfuse::attn {

using namespace cute;

// ---- the kernel -----------------------------------------------------------------------------

template <class Traits>
__global__ void __launch_bounds__(Traits::kNThreads, 1) attention_fwd_sm80(const Params p) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kNWarps = Traits::kNWarps;

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
    Tensor tOgO = gmem_thr_o.partition_D(gO);
    Tensor tOcO = gmem_thr_o.partition_D(cO);
    Tensor zero = make_tensor<Element>(shape(tOgO(_, 0, 0)));
    clear(zero);
    CUTE_UNROLL
    for (int m = 0; m < size<1>(tOgO); ++m)
      if (get<0>(tOcO(0, m, 0)) < rows_here) {
        CUTE_UNROLL
        for (int k = 0; k < size<2>(tOgO); ++k) copy(gmem_copy_o, zero, tOgO(_, m, k));
      }
    if (p.lse != nullptr)
      for (int r = tid; r < rows_here; r += Traits::kNThreads)
        p.lse[lse_off + m_block * kBlockM + r] = -INFINITY;
    return;
  }

  Element* smem = reinterpret_cast<Element*>(smem_raw);
  Tensor sQ = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(sQ.data() + size(sQ), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(sK.data() + size(sK), typename Traits::SmemLayoutKV{});
  Tensor sVt = make_tensor(sV.data(), typename Traits::SmemLayoutVt{});
  Tensor sVtNoSwizzle = make_tensor(sV.data().get(), typename Traits::SmemLayoutVtNoSwizzle{});

  typename Traits::GmemTiledCopyQKV gmem_copy;
  auto gmem_thr = gmem_copy.get_thread_slice(tid);
  Tensor tQgQ = gmem_thr.partition_S(gQ);
  Tensor tQsQ = gmem_thr.partition_D(sQ);
  Tensor tKgK = gmem_thr.partition_S(gK);  // (CPY, CPY_N, CPY_K, nblk)
  Tensor tKsK = gmem_thr.partition_D(sK);
  Tensor tVgV = gmem_thr.partition_S(gV);
  Tensor tVsV = gmem_thr.partition_D(sV);
  Tensor cQ = make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{});
  Tensor cKV = make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{});
  Tensor tQcQ = gmem_thr.partition_S(cQ);
  Tensor tKVcKV = gmem_thr.partition_S(cKV);

  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor tSrQ = thr_mma.partition_fragment_A(sQ);
  Tensor tSrK = thr_mma.partition_fragment_B(sK);
  Tensor tOrVt = thr_mma.partition_fragment_B(sVtNoSwizzle);
  Tensor acc_o = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kHeadDim>>{});

  auto smem_copy_q = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, mma);
  auto smem_thr_q = smem_copy_q.get_thread_slice(tid);
  Tensor tSsQ = smem_thr_q.partition_S(sQ);
  auto smem_copy_k = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, mma);
  auto smem_thr_k = smem_copy_k.get_thread_slice(tid);
  Tensor tSsK = smem_thr_k.partition_S(sK);
  auto smem_copy_v = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, mma);
  auto smem_thr_v = smem_copy_v.get_thread_slice(tid);
  Tensor tOsVt = smem_thr_v.partition_S(sVt);

  // Prologue: Q and the last visible K block in flight.
  int n_block = n_max - 1;
  copy_rows<true>(gmem_copy, tQgQ, tQsQ, tQcQ, rows_here);
  copy_rows<true>(gmem_copy, tKgK(_, _, _, n_block), tKsK, tKVcKV, seqlen_k - n_block * kBlockN);
  cp_async_fence();
  clear(acc_o);

  constexpr int kRows = 2 * (kBlockM / (16 * kNWarps));
  OnlineSoftmax<kRows> softmax;
  Tensor acc_o_rc = make_tensor(acc_o.data(), acc_rowcol(acc_o.layout()));
  const int lane = tid % 32;
  const int row0 = m_block * kBlockM + (tid / 32) * 16 + lane / 4;

  auto step = [&](auto first) {
    constexpr bool kFirst = decltype(first)::value;
    Tensor acc_s = partition_fragment_C(mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_s);
    cp_async_wait<0>();
    __syncthreads();  // K[n] landed; every warp is done with V[n+1]
    copy_rows<true>(gmem_copy, tVgV(_, _, _, n_block), tVsV, tKVcKV, seqlen_k - n_block * kBlockN);
    cp_async_fence();

    gemm_ss(acc_s, tSrQ, tSrK, tSsQ, tSsK, mma, smem_copy_q, smem_copy_k, smem_thr_q, smem_thr_k);

    // The score modifiers, in their one place: soft-cap, then the visibility mask.
    Tensor s = make_tensor(acc_s.data(), acc_rowcol(acc_s.layout()));
    if (softcap.enabled()) softcap.apply(s);
    if (mask.template block_needs_mask<kBlockM, kBlockN>(m_block, n_block))
      mask.apply(s, row0, n_block * kBlockN + (lane % 4) * 2, 16 * kNWarps);

    cp_async_wait<0>();
    __syncthreads();  // V[n] landed; every warp is done with K[n]
    if (n_block > n_min) {
      copy_rows<true>(gmem_copy, tKgK(_, _, _, n_block - 1), tKsK, tKVcKV, seqlen_k - (n_block - 1) * kBlockN);
      cp_async_fence();
    }

    softmax.template update<kFirst>(s, acc_o_rc, p.scale_log2);

    Tensor rP = convert_fragment<Element>(acc_s);
    Tensor tOrP = make_tensor(rP.data(), acc_as_a(rP.layout()));
    gemm_rs(acc_o, tOrP, tOrVt, tOsVt, mma, smem_copy_v, smem_thr_v);
  };

  step(std::true_type{});
  for (--n_block; n_block >= n_min; --n_block) step(std::false_type{});

  // Epilogue: O /= sum, LSE, O -> smem (Q's buffer) -> global in 16-byte vectors.
  float lse[kRows];
  softmax.template finalize<false>(acc_o_rc, p.scale_lse, lse);

  Tensor rO = convert_fragment<Element>(acc_o);
  Tensor sO = make_tensor(sQ.data(), typename Traits::SmemLayoutO{});
  auto smem_copy_o = make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, mma);
  auto smem_thr_o = smem_copy_o.get_thread_slice(tid);
  Tensor taccOrO = smem_thr_o.retile_S(rO);
  Tensor taccOsO = smem_thr_o.partition_D(sO);
  // Each warp writes only the rows of Q it read (the swizzle permutes within a row): no barrier
  // is needed between the last Q read and this write.
  copy(smem_copy_o, taccOrO, taccOsO);

  if (p.lse != nullptr && lane % 4 == 0) {
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const int r = (tid / 32) * 16 + lane / 4 + (mi / 2) * 16 * kNWarps + (mi % 2) * 8;
      if (r < rows_here) p.lse[lse_off + m_block * kBlockM + r] = lse[mi];
    }
  }

  __syncthreads();
  Tensor tOsO = gmem_thr_o.partition_S(sO);
  Tensor tOgO = gmem_thr_o.partition_D(gO);
  Tensor tOcO = gmem_thr_o.partition_D(cO);
  Tensor tOrO = make_tensor<Element>(shape(tOgO));
  copy(gmem_copy_o, tOsO, tOrO);
  CUTE_UNROLL
  for (int m = 0; m < size<1>(tOgO); ++m)
    if (get<0>(tOcO(0, m, 0)) < rows_here) {
      CUTE_UNROLL
      for (int k = 0; k < size<2>(tOgO); ++k) copy(gmem_copy_o, tOrO(_, m, k), tOgO(_, m, k));
    }
}

}  // namespace blockfuse::attn
