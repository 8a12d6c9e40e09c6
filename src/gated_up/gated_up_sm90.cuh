// The sm90a (Hopper) fused gated up-projection: h = act(x·W_gateᵀ) ⊙ (x·W_upᵀ) with wgmma, TMA
// and warp specialisation.
//
// What is CUTLASS's and what is ours. The GEMM C = x · wᵀ ([M, 2U], K-contiguous "TN") is a stock
// CUTLASS 3.x sm90 kernel: `GemmUniversal` with the `CollectiveBuilder` mainloop —
//   * one producer warp issues TMA loads of x and w tiles into a multistage shared-memory ring,
//     synchronised with mbarriers (PipelineTmaAsync); with a 2x1 cluster each CTA loads half of
//     the weight tile and multicasts it to its M-neighbour;
//   * two consumer warpgroups issue wgmma (A and B from shared memory, fp32 accumulators in
//     registers), cooperatively on one tile (stacked along M, or side by side along N: rows 5-6)
//     or ping-ponging over two;
//   * `setmaxnreg` gives the producer warpgroup 40 registers and each consumer thread 232;
//   * the persistent tile scheduler walks tiles with swizzled rasterisation (along one grid side,
//     in groups of up to 8 tiles across the other: tile_configs_sm90.h's raster_along_n says which)
//     so the CTAs resident at once share weight and activation panels in L2.
// What replaces CUTLASS's epilogue is `GatedEpilogue` (epilogue_sm90.cuh): it writes the gated
// half-width tile, and its header explains the gating on wgmma accumulators.
#pragma once

#include <cute/tensor.hpp>

#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/pipeline/pipeline.hpp"

#include "common/fp8_device.cuh"
#include "gated_up/epilogue_sm90.cuh"
#include "gated_up/tile_configs_sm90.h"

namespace blockfuse::sm90 {

using namespace cute;

// ---------------------------------------------------------------------------------------------
// The builder's mainloop with the two consumer warpgroups side by side along N (each BM x BN/2)
// instead of stacked along M: CollectiveBuilder always stacks a cooperative tile's warpgroups
// along M (64-row wgmma atoms, so BM a multiple of 128), which rules out cuBLAS's 192 x 192 tile.
// Everything but the TiledMma is the builder's (stages, TMA atoms, shared-memory layouts); the
// mainloop partitions shared memory through the TiledMma, so it needs nothing else.
// ---------------------------------------------------------------------------------------------
template <class Built, class TileShape>
using SplitNMainloop = cutlass::gemm::collective::CollectiveMma<
    typename Built::DispatchPolicy, TileShape, typename Built::ElementA, typename Built::StrideA,
    typename Built::ElementB, typename Built::StrideB,
    decltype(make_tiled_mma(
        GMMA::ss_op_selector<typename Built::ElementA, typename Built::ElementB, float,
                             Shape<decltype(size<0>(TileShape{})), Int<size<1>(TileShape{}) / 2>,
                                   decltype(size<2>(TileShape{}))>,
                             GMMA::Major::K, GMMA::Major::K>(),
        Layout<Shape<_1, _2, _1>>{})),
    typename Built::GmemTiledCopyA, typename Built::SmemLayoutAtomA, typename Built::SmemCopyAtomA,
    typename Built::TransformA, typename Built::GmemTiledCopyB, typename Built::SmemLayoutAtomB,
    typename Built::SmemCopyAtomB, typename Built::TransformB>;

// ---------------------------------------------------------------------------------------------
// The kernel type for one tile configuration.
// ---------------------------------------------------------------------------------------------
template <class ElementIn_, class Element_, bool kFp8, int BM, int BN, int BK, int ClusterM, int ClusterN, bool Pingpong,
          bool StreamK = false, bool SplitN = false>
struct GatedUpSm90Gemm {
  using ElementIn = ElementIn_;                                           // x and w
  using Element = Element_;                                               // the output h
  using TileShape = Shape<Int<BM>, Int<BN>, Int<BK>>;                     // the interleaved GEMM's CTA tile
  using ClusterShape = Shape<Int<ClusterM>, Int<ClusterN>, _1>;
  // FP8: wgmma's fast accumulation (no periodic promotion to fp32 registers), as cuBLASLt's fast mode.
  using KernelSchedule = std::conditional_t<
      kFp8,
      std::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum,
                         cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum>,
      std::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                         cutlass::gemm::KernelTmaWarpSpecializedCooperative>>;
  using Epilogue = GatedEpilogue<Element, TileShape, /*kDequant=*/kFp8>;
  // A = x [M, K] row-major (K-major), B = w [2U, K] (K-major: "column-major K x N"), both 16-byte
  // aligned (8 16-bit or 16 e4m3 elements), fp32 accumulation. Stages: as many as fit beside the
  // epilogue's tile.
  static constexpr int kAlign = 16 / static_cast<int>(sizeof(ElementIn));
  using BuiltMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      ElementIn, cutlass::layout::RowMajor, kAlign,
      ElementIn, cutlass::layout::ColumnMajor, kAlign,
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Mainloop = std::conditional_t<SplitN, SplitNMainloop<BuiltMainloop, TileShape>, BuiltMainloop>;
  using TiledMma = typename Mainloop::TiledMma;
  // Problem (M, N = 2U, K, L = 1); persistent scheduler with swizzled rasterisation, or stream-K
  // (partial tiles reduced through the workspace before the epilogue, which sees whole tiles).
  using Scheduler = std::conditional_t<StreamK, cutlass::gemm::StreamKScheduler, cutlass::gemm::PersistentScheduler>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  static_assert(accumulator_pairs_are_adjacent_columns<TiledMma>(), "see the header comment");
  static_assert(!SplitN || (!Pingpong && !kFp8), "the N split is a cooperative 16-bit row");
};

// The 16-bit kernel (bf16 / fp16 in and out).
template <class Element, int BM, int BN, int BK, int ClusterM, int ClusterN, bool Pingpong, bool StreamK = false,
          bool SplitN = false>
using GatedUpSm90 = GatedUpSm90Gemm<Element, Element, false, BM, BN, BK, ClusterM, ClusterN, Pingpong, StreamK, SplitN>;

template <class T, int I>
using Sm90KernelFor = GatedUpSm90<T, kSm90TileConfigs[I].bm, kSm90TileConfigs[I].bn, kSm90TileConfigs[I].bk,
                                  kSm90TileConfigs[I].cluster_m, kSm90TileConfigs[I].cluster_n,
                                  kSm90TileConfigs[I].pingpong, kSm90TileConfigs[I].stream_k,
                                  kSm90TileConfigs[I].split_n>;

}  // namespace blockfuse::sm90
