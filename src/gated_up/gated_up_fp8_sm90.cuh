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

// e4m3 x and w, bf16 or e4m3 h: GatedUpSm90Gemm (gated_up_sm90.cuh) with the FP8 fast-accumulation
// schedules and the dequantising epilogue.
template <class ElementOut, int BM, int BN, int BK, int ClusterM, int ClusterN, bool Pingpong>
using GatedUpFp8Sm90 = GatedUpSm90Gemm<cutlass::float_e4m3_t, ElementOut, true, BM, BN, BK, ClusterM, ClusterN, Pingpong>;

template <class TOut, int I>
using Sm90Fp8KernelFor =
    GatedUpFp8Sm90<TOut, kSm90Fp8TileConfigs[I].bm, kSm90Fp8TileConfigs[I].bn, kSm90Fp8TileConfigs[I].bk,
                   kSm90Fp8TileConfigs[I].cluster_m, kSm90Fp8TileConfigs[I].cluster_n, kSm90Fp8TileConfigs[I].pingpong>;

}  // namespace blockfuse::sm90
