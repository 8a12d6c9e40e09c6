// Internal: the compile-time configuration of the sm80 attention kernel (tile, warps, mma.sync
// atom, swizzled shared-memory layouts, global copies) and the register views of its accumulators.
// The kernel is attention_sm80.cuh; its GEMM and copy helpers are gemm_sm80.cuh.
#pragma once

#include <cmath>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>

#include "attention/params.h"

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
  static constexpr int kRows = 2 * (kBlockM / (16 * kNWarps));  // softmax rows of a thread

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

}  // namespace blockfuse::attn
