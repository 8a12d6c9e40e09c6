// The sm80 fused gated up-projection kernel: h = act(x·W_gateᵀ) ⊙ (x·W_upᵀ) in one CuTe GEMM.
//
// Runs on every GPU with compute capability >= 8.0 (Ampere, Ada, Hopper — on Hopper it is the
// portable fallback; mma.sync cannot reach wgmma's rate).
//
// Structure (one CTA computes a BM × BN tile of the interleaved product C = x · wᵀ, i.e. BM × BN/2
// outputs):
//   mainloop  cp.async (16-byte, L2-only) global→shared copies into a `Stages`-deep ring of
//             swizzled shared-memory tiles; ldmatrix shared→registers, double-buffered per 16-wide
//             k-block; mma.sync m16n8k16 with fp32 accumulators. Out-of-range rows (M and 2U tails)
//             and the K tail are predicated and zero-filled, so no shape needs to be a tile multiple.
//   epilogue  the gate on the accumulator registers (below), the gated tile staged through shared
//             memory, then 128-bit coalesced stores with row/column predication.
//   raster    CTAs are numbered down groups of `sm80_raster_group` m-tiles, so the CTAs resident at
//             once share a few weight panels and a few activation panels in L2.
//
// The gating, and why it needs no custom MMA atom. In the m16n8k16 accumulator layout each thread
// holds values in pairs of adjacent columns (2c, 2c+1) (static_assert below), and every atom's
// column offset is a multiple of 8, so each pair is exactly (up_j, gate_j) of the interleaved
// weight. The gated tile H (BM × BN/2) is then the GEMM tile seen through a layout whose column
// mode is (2, BN/2):(0, 1·BM): both columns of a pair land on the same h element. Partitioning
// that view with the *same* thr_mma.partition_C as the accumulators gives every thread the address
// of the h element each of its accumulator pairs produces — no custom MMA atom: the shapes are derived by CuTe from the GEMM's own TiledMMA and nothing re-derived by hand
// (test_gating_layout.cu checks the mapping for every thread of every tile config).
#pragma once

#include <cute/tensor.hpp>

#include "common/activation.cuh"
#include "gated_up/params.h"

namespace blockfuse::sm80 {

using namespace cute;

template <class Element_, int BM_, int BN_, int BK_, int Stages_, int WarpsM_, int WarpsN_>
struct GatedUpTraits {
  using Element = Element_;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, Stages = Stages_;
  static constexpr int kWarpsM = WarpsM_, kWarpsN = WarpsN_;
  static constexpr int kThreads = 32 * WarpsM_ * WarpsN_;
  static_assert(BK == 32 || BK == 64, "BK must be 32 or 64 (swizzle atom)");
  static_assert(BN % 128 == 0, "BN/2 must be a multiple of 64 (epilogue swizzle atom)");
  static_assert(Stages >= 3, "at least a 3-stage cp.async pipeline");

  using MmaAtomOp = std::conditional_t<std::is_same_v<Element, bfloat16_t>,
                                       SM80_16x8x16_F32BF16BF16F32_TN, SM80_16x8x16_F32F16F16F32_TN>;
  // Warps tile the CTA WarpsM × WarpsN; the 16·WarpsN permutation tile gives each warp two n8 atoms
  // per step so B fragments load with ldmatrix.x4. Plain integer permutations keep atom column
  // offsets at multiples of 8, which the gating relies on.
  using TiledMma = decltype(make_tiled_mma(MmaAtomOp{}, Layout<Shape<Int<WarpsM_>, Int<WarpsN_>, _1>>{},
                                           Tile<Int<16 * WarpsM_>, Int<16 * WarpsN_>, _16>{}));

  // Shared memory: K-major tiles with the standard sm80 16-bit swizzles (conflict-free cp.async
  // writes and ldmatrix reads).
  using SmemAtom = std::conditional_t<
      BK == 64, decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{})),
      decltype(composition(Swizzle<2, 3, 3>{}, Layout<Shape<_8, _32>, Stride<_32, _1>>{}))>;
  using SmemLayoutA = decltype(tile_to_shape(SmemAtom{}, Shape<Int<BM>, Int<BK>, Int<Stages>>{}));
  using SmemLayoutB = decltype(tile_to_shape(SmemAtom{}, Shape<Int<BN>, Int<BK>, Int<Stages>>{}));
  // The gated output tile (BM × BN/2), swizzled so the accumulator-order 2-byte writes of one warp
  // spread over banks while 16-byte chunks stay contiguous for the vector read-back.
  using SmemLayoutH = decltype(tile_to_shape(
      composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}), Shape<Int<BM>, Int<BN / 2>>{}));
  // (m, (parity, j)) -> linear index of H(m, j): the "GEMM tile view" of H described above.
  using PairToH = Layout<Shape<Int<BM>, Shape<_2, Int<BN / 2>>>, Stride<_1, Stride<_0, Int<BM>>>>;

  // global -> shared: 16-byte cp.async, BK/8 threads along K per row.
  static constexpr int kCopyThreadsK = BK / 8;
  using GmemTiledCopy = decltype(make_tiled_copy(
      Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, Element>{},
      Layout<Shape<Int<kThreads / kCopyThreadsK>, Int<kCopyThreadsK>>, Stride<Int<kCopyThreadsK>, _1>>{},
      Layout<Shape<_1, _8>>{}));
  using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  // shared -> global for H: 16-byte vectors, BN/16 threads per row.
  static constexpr int kStoreThreadsN = BN / 16;
  using StoreTiledCopy = decltype(make_tiled_copy(
      Copy_Atom<UniversalCopy<uint128_t>, Element>{},
      Layout<Shape<Int<kThreads / kStoreThreadsN>, Int<kStoreThreadsN>>, Stride<Int<kStoreThreadsN>, _1>>{},
      Layout<Shape<_1, _8>>{}));

  static constexpr int kSmemPipe = (cosize(SmemLayoutA{}) + cosize(SmemLayoutB{})) * int(sizeof(Element));
  static constexpr int kSmemH = cosize(SmemLayoutH{}) * int(sizeof(Element));
  static constexpr int kSmemBytes = kSmemPipe > kSmemH ? kSmemPipe : kSmemH;
};

// The accumulator pairing the gate relies on: in the m16n8 C layout (thread, value) -> m + 16·n,
// the first value mode has extent 2 and stride 16 = one column. Holds for every SM80 16x8 atom.
template <class MmaOp>
constexpr bool accumulator_pairs_are_adjacent_columns() {
  using CL = typename MMA_Traits<MmaOp>::CLayout;
  return size<1, 0>(CL{}) == 2 && stride<1, 0>(CL{}) == 16;
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) gated_up_sm80_kernel(GatedUpParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using T = typename Traits::Element;
  constexpr int BM = Traits::BM, BN = Traits::BN, BK = Traits::BK, Stages = Traits::Stages;
  static_assert(accumulator_pairs_are_adjacent_columns<typename Traits::MmaAtomOp>(),
                "the gating assumes each thread's accumulators come in adjacent column pairs");

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x;

  // ---- tile coordinates: grouped rasterisation ----
  const int m_tiles = static_cast<int>((p.m + BM - 1) / BM);
  const int n_tiles = static_cast<int>((2 * p.u + BN - 1) / BN);
  const int group = p.sm80_raster_group;
  const int bid = blockIdx.x;
  const int tiles_per_group = group * n_tiles;
  const int first_m = (bid / tiles_per_group) * group;
  const int group_m = min(m_tiles - first_m, group);
  const int in_group = bid % tiles_per_group;
  const int m_tile = first_m + in_group % group_m;
  const int n_tile = in_group / group_m;

  // ---- global tensors ----
  Tensor mX = make_tensor(make_gmem_ptr(static_cast<const T*>(p.x)), make_shape(p.m, p.k), make_stride(p.ldx, _1{}));
  Tensor mW = make_tensor(make_gmem_ptr(static_cast<const T*>(p.w)), make_shape(2 * p.u, p.k), make_stride(p.ldw, _1{}));
  Tensor mH = make_tensor(make_gmem_ptr(static_cast<T*>(p.out)), make_shape(p.m, p.u), make_stride(p.ldo, _1{}));
  Tensor gX = local_tile(mX, Shape<Int<BM>, Int<BK>>{}, make_coord(m_tile, _));   // (BM, BK, k_tiles)
  Tensor gW = local_tile(mW, Shape<Int<BN>, Int<BK>>{}, make_coord(n_tile, _));   // (BN, BK, k_tiles)
  Tensor gH = local_tile(mH, Shape<Int<BM>, Int<BN / 2>>{}, make_coord(m_tile, n_tile));  // (BM, BN/2)

  // Rows/columns of this tile that exist (the rest are predicated off).
  const int m_resid = static_cast<int>(min<int64_t>(BM, p.m - int64_t(m_tile) * BM));
  const int n_resid = static_cast<int>(min<int64_t>(BN, 2 * p.u - int64_t(n_tile) * BN));
  const int k_tiles = static_cast<int>((p.k + BK - 1) / BK);

  // ---- shared memory ----
  T* smem_a = reinterpret_cast<T*>(smem);
  T* smem_b = smem_a + cosize(typename Traits::SmemLayoutA{});
  Tensor sA = make_tensor(make_smem_ptr(smem_a), typename Traits::SmemLayoutA{});  // (BM, BK, Stages)
  Tensor sB = make_tensor(make_smem_ptr(smem_b), typename Traits::SmemLayoutB{});  // (BN, BK, Stages)

  // ---- global -> shared copies, with predicates from identity tensors ----
  typename Traits::GmemTiledCopy g2s;
  auto g2s_thr = g2s.get_thread_slice(tid);
  Tensor tAgA = g2s_thr.partition_S(gX);  // (CPY, CPY_M, CPY_K, k_tiles)
  Tensor tAsA = g2s_thr.partition_D(sA);  // (CPY, CPY_M, CPY_K, Stages)
  Tensor tBgB = g2s_thr.partition_S(gW);
  Tensor tBsB = g2s_thr.partition_D(sB);
  Tensor tAcA = g2s_thr.partition_S(make_identity_tensor(Shape<Int<BM>, Int<BK>>{}));
  Tensor tBcB = g2s_thr.partition_S(make_identity_tensor(Shape<Int<BN>, Int<BK>>{}));
  const bool full_mn = (m_resid == BM) && (n_resid == BN);

  auto load_tile = [&](int kt, int stage) {
    const int k_resid = static_cast<int>(min<int64_t>(BK, p.k - int64_t(kt) * BK));
    if (full_mn && k_resid == BK) {
      copy(g2s, tAgA(_, _, _, kt), tAsA(_, _, _, stage));
      copy(g2s, tBgB(_, _, _, kt), tBsB(_, _, _, stage));
      return;
    }
    // Tail tile: copy the 16-byte vectors that exist, zero the rest (zeros add nothing to the dot
    // products; stale shared memory would).
    CUTE_UNROLL
    for (int i = 0; i < size<1>(tAsA); ++i) {
      CUTE_UNROLL
      for (int j = 0; j < size<2>(tAsA); ++j) {
        if (get<0>(tAcA(0, i, j)) < m_resid && get<1>(tAcA(0, i, j)) < k_resid)
          copy(g2s, tAgA(_, i, j, kt), tAsA(_, i, j, stage));
        else
          clear(tAsA(_, i, j, stage));
      }
    }
    CUTE_UNROLL
    for (int i = 0; i < size<1>(tBsB); ++i) {
      CUTE_UNROLL
      for (int j = 0; j < size<2>(tBsB); ++j) {
        if (get<0>(tBcB(0, i, j)) < n_resid && get<1>(tBcB(0, i, j)) < k_resid)
          copy(g2s, tBgB(_, i, j, kt), tBsB(_, i, j, stage));
        else
          clear(tBsB(_, i, j, stage));
      }
    }
  };

  // ---- MMA partitions ----
  typename Traits::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(tid);
  Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));  // (MMA, MMA_M, MMA_K)
  Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));  // (MMA, MMA_N, MMA_K)
  Tensor acc = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});  // (MMA, MMA_M, MMA_N) fp32
  clear(acc);

  auto s2r_a = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, mma);
  auto s2r_a_thr = s2r_a.get_thread_slice(tid);
  Tensor tXsA = s2r_a_thr.partition_S(sA);   // (CPY, MMA_M, MMA_K, Stages)
  Tensor tXrA = s2r_a_thr.retile_D(tCrA);
  auto s2r_b = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, mma);
  auto s2r_b_thr = s2r_b.get_thread_slice(tid);
  Tensor tXsB = s2r_b_thr.partition_S(sB);
  Tensor tXrB = s2r_b_thr.retile_D(tCrB);

  constexpr int KB = size<2>(tCrA);  // 16-wide k-blocks per BK tile
  static_assert(KB >= 2, "the register double-buffering below needs >= 2 k-blocks per tile");

  // ---- mainloop: prologue fills Stages-1 stages ----
  CUTE_UNROLL
  for (int s = 0; s < Stages - 1; ++s) {
    if (s < k_tiles) load_tile(s, s);
    cp_async_fence();
  }
  int read_stage = 0;
  int write_stage = Stages - 1;
  int next_tile = Stages - 1;

  cp_async_wait<Stages - 2>();
  __syncthreads();
  copy(s2r_a, tXsA(_, _, 0, read_stage), tXrA(_, _, 0));
  copy(s2r_b, tXsB(_, _, 0, read_stage), tXrB(_, _, 0));

  for (int kt = 0; kt < k_tiles; ++kt) {
    CUTE_UNROLL
    for (int kb = 0; kb < KB; ++kb) {
      if (kb == KB - 1) {
        // The last k-block of this tile is already in registers: move to the next stage once its
        // copies have landed (and everyone is done reading the stage the next load overwrites).
        read_stage = read_stage + 1 == Stages ? 0 : read_stage + 1;
        cp_async_wait<Stages - 2>();
        __syncthreads();
      }
      const int kb_next = (kb + 1) % KB;
      copy(s2r_a, tXsA(_, _, kb_next, read_stage), tXrA(_, _, kb_next));
      copy(s2r_b, tXsB(_, _, kb_next, read_stage), tXrB(_, _, kb_next));
      if (kb == 0) {
        // Refill the stage consumed one tile ago. An empty group keeps the wait counts uniform.
        if (next_tile < k_tiles) load_tile(next_tile, write_stage);
        cp_async_fence();
        ++next_tile;
        write_stage = write_stage + 1 == Stages ? 0 : write_stage + 1;
      }
      gemm(mma, acc, tCrA(_, _, kb), tCrB(_, _, kb), acc);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory is reused for H below

  // ---- epilogue: gate on the accumulators, stage H in shared memory ----
  T* smem_h = reinterpret_cast<T*>(smem);
  Tensor sH = make_tensor(make_smem_ptr(smem_h), typename Traits::SmemLayoutH{});  // (BM, BN/2)
  Tensor sHpairs = make_tensor(sH.data(), composition(sH.layout(), typename Traits::PairToH{}));  // (BM, BN)
  Tensor tCsH = thr_mma.partition_C(sHpairs);  // same shape as acc; (0,r) and (1,r) alias one h
  static_assert(decltype(size(tCsH))::value == decltype(size(acc))::value, "gated view must match acc");

  const int act = p.act;
  CUTE_UNROLL
  for (int j = 0; j < size<2>(acc); ++j) {
    CUTE_UNROLL
    for (int i = 0; i < size<1>(acc); ++i) {
      CUTE_UNROLL
      for (int r = 0; r < 2; ++r) {  // the row pair (m, m+8) of the atom
        const float up = acc(make_coord(0, r), i, j);    // even column: up_j
        const float gate = acc(make_coord(1, r), i, j);  // odd column:  gate_j
        tCsH(make_coord(0, r), i, j) = static_cast<T>(gated_act(act, gate, up));
      }
    }
  }
  __syncthreads();

  // ---- shared -> global: 16-byte vectors, predicated on the M and U tails ----
  typename Traits::StoreTiledCopy s2g;
  auto s2g_thr = s2g.get_thread_slice(tid);
  Tensor tHsH = s2g_thr.partition_S(sH);  // (CPY, CPY_M, CPY_N)
  Tensor tHgH = s2g_thr.partition_D(gH);
  Tensor tHcH = s2g_thr.partition_D(make_identity_tensor(Shape<Int<BM>, Int<BN / 2>>{}));
  Tensor tHrH = make_fragment_like(tHsH);
  copy(s2g, tHsH, tHrH);
  const int u_resid = n_resid / 2;  // 2U and BN are even, so n_resid is even
  CUTE_UNROLL
  for (int i = 0; i < size<1>(tHrH); ++i) {
    CUTE_UNROLL
    for (int j = 0; j < size<2>(tHrH); ++j) {
      if (get<0>(tHcH(0, i, j)) < m_resid && get<1>(tHcH(0, i, j)) < u_resid)
        copy(s2g, tHrH(_, i, j), tHgH(_, i, j));
    }
  }
#endif  // __CUDA_ARCH__ >= 800
}

}  // namespace blockfuse::sm80
