// Internal: the tile configurations the FP8 (e4m3) sm90a gated-up kernel is compiled for, and the
// pure heuristic that picks one (heuristic_fp8_sm90.cpp, CPU-tested in test_heuristic_fp8_sm90.cpp).
// Each row is one CUTLASS instantiation per output type (bf16, e4m3), about a minute or two of nvcc
// each, so the table is short. The kernel is gated_up_fp8_sm90.cuh; launch_fp8_sm90.cuh maps a row
// index to its template.
//
// The rows mirror the two 2x1-cluster rows of the 16-bit table (tile_configs_sm90.h) with BK = 128:
// the same 128 bytes of K per pipeline stage as the 16-bit kernel's BK = 64, i.e. the same TMA box
// and swizzle, and one wgmma k-group of 32 e4m3 per 4 issued per stage.
//   0  cooperative 128x256x128, cluster 2x1: four 48 KiB stages beside the epilogue's staging tile;
//      the weight tile is multicast to the M-neighbour.
//   1  ping-pong 128x128x128, cluster 2x1: one warpgroup per tile, the other's gating epilogue
//      hidden under its mainloop; six 32 KiB stages. Twice the tiles of row 0: less wave
//      quantisation at small M.
// The model's relative rates are the 16-bit kernel's (tile_configs_sm90.h); at the shapes of the
// measured table (kSm90Fp8Measured, tile_table_fp8_sm90.inc; docs/gated_up_fp8.md#tuning) the measured row
// decides instead.
#pragma once

#include "common/device.h"
#include "gated_up/params.h"
#include "gated_up/tile_configs_sm90.h"

namespace blockfuse {

inline constexpr Sm90TileConfigRow kSm90Fp8TileConfigs[] = {
    // bm   bn   bk  cm cn  pingpong  rel_rate  large K
    {128, 256, 128, 2, 1, false, 1.00f, 1.00f},  // 0: large M
    {128, 128, 128, 2, 1, true, 0.95f, 0.80f},   // 1: small M / small K
};
inline constexpr int kNumSm90Fp8TileConfigs = sizeof(kSm90Fp8TileConfigs) / sizeof(kSm90Fp8TileConfigs[0]);

// Index into kSm90Fp8TileConfigs: the FP8 measured table's row where it has one
// (sm90_measured_tile_config over sm90_fp8_measured_table(dev)), else the config of least modelled time
// (waves x tile area / rate, the 16-bit model: heuristic_sm90.cpp; ties to the lower index). Pure.
int choose_gated_up_fp8_sm90_tile_config(const GatedUpProblem& p, const detail::DeviceSpec& dev);

// The FP8 measured table `dev` reads (heuristic_fp8_sm90.cpp's kSm90Fp8Measured, or
// kSm90Fp8MeasuredH200 where sm90_reads_h200_tables), for the tests.
Sm90MeasuredTable sm90_fp8_measured_table(const detail::DeviceSpec& dev);

}  // namespace blockfuse
