// The sm90a FP8 (e4m3) fused gated up-projection: the 16-bit kernel of gated_up_sm90.cuh with e4m3
// operands. What changes:
//   * the mainloop is CUTLASS's CollectiveBuilder for float_e4m3_t A/B (16-element = 16-byte TMA
//     alignment) with the FP8 "fast accumulation" schedules (Kernel...CooperativeFP8FastAccum /
//     PingpongFP8FastAccum): wgmma m64nNk32 e4m3 accumulating straight into the fp32 registers,
//     no periodic promotion into a second accumulator (the slow-accumulation variant keeps two
//     accumulator sets, which does not fit beside the 128-register tile of 128x256 cooperative);
//   * the epilogue is the same GatedEpilogue with kDequant: C(m, n)·sx(m)·sw(n) before the gate,
//     and for e4m3 outputs the quantisation with the static per-tensor output scale.
// The accumulator layout (CLayout_64xN) is that of the 16-bit MMA, so the pairing proof of
// gated_up_sm90.cuh (test_gating_layout_sm90.cu) covers these kernels too; the test instantiates
// them.
#pragma once

#include "gated_up/gated_up_sm90.cuh"
#include "gated_up/tile_configs_fp8_sm90.h"

namespace blockfuse::sm90 {

template <class ElementOut_, int BM, int BN, int BK, int ClusterM, int ClusterN, bool Pingpong>
struct GatedUpFp8Sm90 {
  using ElementIn = cutlass::float_e4m3_t;
  using Element = ElementOut_;                                            // bf16 or e4m3 output
  using TileShape = Shape<Int<BM>, Int<BN>, Int<BK>>;                     // the interleaved GEMM's CTA tile
  using ClusterShape = Shape<Int<ClusterM>, Int<ClusterN>, _1>;
  using KernelSchedule = std::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum,
                                            cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum>;
  using Epilogue = GatedEpilogue<Element, TileShape, /*kDequant=*/true>;
  // A = x [M, K] row-major (K-major), B = w [2U, K] (K-major), 16-byte (16-element) aligned, fp32
  // accumulation. Stages: as many as fit beside the epilogue's tile.
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      ElementIn, cutlass::layout::RowMajor, 16,
      ElementIn, cutlass::layout::ColumnMajor, 16,
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using TiledMma = typename Mainloop::TiledMma;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  static_assert(accumulator_pairs_are_adjacent_columns<TiledMma>(), "see gated_up_sm90.cuh");
};

template <class TOut, int I>
using Sm90Fp8KernelFor =
    GatedUpFp8Sm90<TOut, kSm90Fp8TileConfigs[I].bm, kSm90Fp8TileConfigs[I].bn, kSm90Fp8TileConfigs[I].bk,
                   kSm90Fp8TileConfigs[I].cluster_m, kSm90Fp8TileConfigs[I].cluster_n, kSm90Fp8TileConfigs[I].pingpong>;

}  // namespace blockfuse::sm90
