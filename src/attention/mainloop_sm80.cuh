// Internal: the mainloop of the sm80 attention kernel (attention_sm80.cuh): FlashAttention-2's
// algorithm with mma.sync. For each visible key block n, from the last to the first:
//   S = Q·Kᵀ      ldmatrix + mma.sync m16n8k16, fp32 accumulators in registers (kNWarps warps,
//                  16 query rows each per MMA step); V[n] is loaded by cp.async meanwhile
//   soft-cap, mask (policy objects of mask.cuh, only on blocks that need them)
//   online softmax in registers: row max and sum over the 4 lanes of a quad, exp2 with the
//                  softmax scale folded into one FFMA, O rescaled by exp2(m_old − m_new)
//   P -> bf16/fp16 in registers, reinterpreted as the A operand of O += P·V (the m16n8k16 C
//                  fragment of S is the A fragment of the next MMA), V read transposed by
//                  ldmatrix.trans; K[n−1] is loaded by cp.async meanwhile
// K and V each have one shared-memory buffer: the copy of one overlaps the GEMM on the other, which
// is FlashAttention-2's two-stage pipeline.
#pragma once

#include "attention/mask.cuh"
#include "attention/softmax.cuh"
#include "attention/traits_sm80.cuh"

namespace blockfuse::attn {

using namespace cute;

// acc += A·B with both operands read from shared memory, the next k-slice's ldmatrix issued
// before the current slice's MMAs.
template <class Acc, class RA, class RB, class SA, class SB, class Mma, class CA, class CB, class TA, class TB>
__device__ void gemm_ss(Acc& acc, RA& rA, RB& rB, SA const& sA, SB const& sB, Mma const& mma,
                        CA const& copy_a, CB const& copy_b, TA const& thr_a, TB const& thr_b) {
  auto rA_v = thr_a.retile_D(rA);
  auto rB_v = thr_b.retile_D(rB);
  copy(copy_a, sA(_, _, _0{}), rA_v(_, _, _0{}));
  copy(copy_b, sB(_, _, _0{}), rB_v(_, _, _0{}));
  CUTE_UNROLL
  for (int i = 0; i < size<2>(rA); ++i) {
    if (i < size<2>(rA) - 1) {
      copy(copy_a, sA(_, _, i + 1), rA_v(_, _, i + 1));
      copy(copy_b, sB(_, _, i + 1), rB_v(_, _, i + 1));
    }
    cute::gemm(mma, rA(_, _, i), rB(_, _, i), acc);
  }
}

// acc += A·B with A in registers (P) and B read from shared memory.
template <class Acc, class RA, class RB, class SB, class Mma, class CB, class TB>
__device__ void gemm_rs(Acc& acc, RA const& rA, RB& rB, SB const& sB, Mma const& mma, CB const& copy_b,
                        TB const& thr_b) {
  auto rB_v = thr_b.retile_D(rB);
  copy(copy_b, sB(_, _, _0{}), rB_v(_, _, _0{}));
  CUTE_UNROLL
  for (int i = 0; i < size<2>(rA); ++i) {
    if (i < size<2>(rA) - 1) copy(copy_b, sB(_, _, i + 1), rB_v(_, _, i + 1));
    cute::gemm(mma, rA(_, _, i), rB(_, _, i), acc);
  }
}

// Copies a [rows, cols] tile partitioned by a tiled copy, rows at or beyond `max_rows` skipped
// (and zero-filled in the destination when kClear): the tails of Q, K and V.
template <bool kClear, class TiledCopy, class S, class D, class C>
__device__ void copy_rows(TiledCopy const& tc, S const& src, D& dst, C const& ident, int max_rows) {
  CUTE_UNROLL
  for (int m = 0; m < size<1>(src); ++m) {
    if (get<0>(ident(0, m, 0)) < max_rows) {
      CUTE_UNROLL
      for (int k = 0; k < size<2>(src); ++k) copy(tc, src(_, m, k), dst(_, m, k));
    } else if (kClear) {
      clear(dst(_, m, _));
    }
  }
}

template <class Traits>
struct MainloopSm80 {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kNWarps = Traits::kNWarps;

  // O (acc_o) and the softmax statistics of one block over key blocks [n_min, n_max): Q [rows_here
  // valid rows] -> sQ once, then the steps above. gQ, gK, gV: the block's global tiles (gK, gV with
  // a key-block mode); sQ: Q's shared-memory tile, K and V follow it.
  template <class Params, class GQ, class GK, class GV, class SQ, class Mma, class AccO, class Softmax>
  CUTE_DEVICE static void mma(Params const& p, GQ const& gQ, GK const& gK, GV const& gV, SQ& sQ, Mma& mma,
                              AccO& acc_o, Softmax& softmax, const VisibilityMask& mask, const SoftCap& softcap,
                              int m_block, int n_min, int n_max, int rows_here, int seqlen_k, int tid) {
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

    auto thr_mma = mma.get_thread_slice(tid);
    Tensor tSrQ = thr_mma.partition_fragment_A(sQ);
    Tensor tSrK = thr_mma.partition_fragment_B(sK);
    Tensor tOrVt = thr_mma.partition_fragment_B(sVtNoSwizzle);

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
  }
};

}  // namespace blockfuse::attn
