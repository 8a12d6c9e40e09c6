// Internal: the sm80 attention forward kernel (FlashAttention-2's algorithm, written with CuTe).
// Runs on compute capability >= 8.0, Hopper included (mma.sync; the wgmma kernel is attention_sm90.cuh).
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
#pragma once

#include <cmath>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>

#include "attention/mask.cuh"
#include "attention/params.h"
#include "attention/softmax.cuh"

namespace blockfuse::attn {

using namespace cute;

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_>
struct KernelTraits {
  using Element = Element_;  // cutlass::bfloat16_t or cutlass::half_t
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;
  static_assert(kBlockM % (16 * kNWarps) == 0, "each warp owns whole 16-row MMA tiles");

  using MmaAtom = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                     MMA_Atom<SM80_16x8x16_F32F16F16F32_TN>,
                                     MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>>;
  // Warps stacked along M; N tile 16 so B fragments load with one ldmatrix.x4 (two n8 tiles).
  using TiledMma = TiledMMA<MmaAtom, Layout<Shape<Int<kNWarps>, _1, _1>>, Tile<Int<16 * kNWarps>, _16, _16>>;

  // Shared memory: rows of 64 elements (128 bytes) swizzled with Swizzle<3,3,3> so that the eight
  // 16-byte ldmatrix row reads of a phase hit eight different bank groups.
  static constexpr int kBlockKSmem = 64;
  using SmemLayoutAtom = decltype(composition(
      Swizzle<3, 3, 3>{}, Layout<Shape<_8, Int<kBlockKSmem>>, Stride<Int<kBlockKSmem>, _1>>{}));
  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // V viewed as Vᵀ [D, kBlockN] for the B operand of P·V (read with ldmatrix.trans).
  using SmemLayoutVt = decltype(composition(
      SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
  using SmemLayoutVtNoSwizzle = decltype(get_nonswizzle_portion(SmemLayoutVt{}));
  using SmemLayoutO = SmemLayoutQ;

  using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
  using SmemCopyAtomO = Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<128>, Element>;

  // Global <-> shared: 16-byte vectors, 8 threads per 64-element row segment.
  static constexpr int kElemsPerLoad = 16 / sizeof(Element);
  static constexpr int kThreadsPerRow = kBlockKSmem / kElemsPerLoad;
  using GmemLayoutAtom = Layout<Shape<Int<kNThreads / kThreadsPerRow>, Int<kThreadsPerRow>>,
                                Stride<Int<kThreadsPerRow>, _1>>;
  using GmemTiledCopyQKV = decltype(make_tiled_copy(
      Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{}, GmemLayoutAtom{}, Layout<Shape<_1, _8>>{}));
  using GmemTiledCopyO = decltype(make_tiled_copy(
      Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<128>, Element>{}, GmemLayoutAtom{}, Layout<Shape<_1, _8>>{}));

  static constexpr int kSmemBytes = (kBlockM + 2 * kBlockN) * kHeadDim * int(sizeof(Element));
};

// ---- register-level helpers ------------------------------------------------------------------

// The m16n8 accumulator layout ((2, 2), MMA_M, MMA_N) viewed as (row, col) = ((2, MMA_M), (2, MMA_N)).
template <class Layout>
__device__ auto acc_rowcol(Layout acc) {
  auto l = logical_divide(acc, Shape<_2>{});
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<2>(l)));
}

// The accumulator of S = Q·Kᵀ (m16n8) viewed as the A operand of P·V (m16n8k16): two adjacent n8
// tiles form one k16 slice. ((2, 2), MMA_M, MMA_N) -> ((4, 2), MMA_M, MMA_N / 2).
template <class Layout>
__device__ auto acc_as_a(Layout acc) {
  auto l = logical_divide(acc, Shape<Underscore, Underscore, _2>{});
  return make_layout(make_layout(get<0>(l), get<2, 0>(l)), get<1>(l), get<2, 1>(l));
}

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

// ---- the kernel -----------------------------------------------------------------------------

template <class Traits>
__global__ void __launch_bounds__(Traits::kNThreads, 1) attention_fwd_sm80(const AttnParams p) {
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
