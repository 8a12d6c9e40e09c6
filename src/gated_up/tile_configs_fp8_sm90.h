// Internal: the tile configurations the FP8 (e4m3) sm90a gated-up kernel runs, and the
// pure heuristic that picks one (heuristic_fp8_sm90.cpp, CPU-tested in test_heuristic_fp8_sm90.cpp).
// Each row of a new tile is one CUTLASS instantiation per output type (bf16, e4m3), about a minute or
// two of nvcc each, so the table is short; a row that only changes the tile order reuses its kernel.
// The kernel is gated_up_fp8_sm90.cuh; launch_fp8_sm90.cuh maps a row index to its template.
//
// The rows mirror the two 2x1-cluster rows of the 16-bit table (tile_configs_sm90.h) with BK = 128:
// the same 128 bytes of K per pipeline stage as the 16-bit kernel's BK = 64, i.e. the same TMA box
// and swizzle, and one wgmma k-group of 32 e4m3 per 4 issued per stage.
//   0  cooperative 128x256x128, cluster 2x1: four 48 KiB stages beside the epilogue's staging tile;
//      the weight tile is multicast to the M-neighbour.
//   1  ping-pong 128x128x128, cluster 2x1: one warpgroup per tile, the other's gating epilogue
//      hidden under its mainloop; six 32 KiB stages. Twice the tiles of row 0: less wave
//      quantisation at small M.
//   2  row 1 walking its tiles along N (the 16-bit row 1's order): the same kernel, the order a launch
//      argument, so the row costs no instantiation (sm90_fp8_kernel_of). Measured ahead of row 1 at
//      Llama-3 8B x 2048 only (results/gated_up_fp8.json raster_h200: 0.998-1.018x cuBLASLt against
//      0.988-0.990x), so only a measured table places it.
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
    {128, 128, 128, 2, 1, true, 0.95f, 0.80f, false, false, false, true},  // 2: row 1 along N
};
inline constexpr int kNumSm90Fp8TileConfigs = sizeof(kSm90Fp8TileConfigs) / sizeof(kSm90Fp8TileConfigs[0]);

// Rows that differ only in their tile order run one kernel (the order is a launch argument,
// GatedUpFp8Params::sm90_raster): the kernel of row c is that of the first row with its template
// arguments. The distinct kernels come first, so CMake instantiates rows 0 .. kNumSm90Fp8Kernels - 1.
inline constexpr bool sm90_fp8_same_kernel(const Sm90TileConfigRow& a, const Sm90TileConfigRow& b) {
  return a.bm == b.bm && a.bn == b.bn && a.bk == b.bk && a.cluster_m == b.cluster_m && a.cluster_n == b.cluster_n &&
         a.pingpong == b.pingpong && a.stream_k == b.stream_k && a.split_n == b.split_n;
}
inline constexpr int sm90_fp8_kernel_of(int c) {
  int j = 0;
  while (!sm90_fp8_same_kernel(kSm90Fp8TileConfigs[j], kSm90Fp8TileConfigs[c])) ++j;
  return j;
}
inline constexpr int sm90_fp8_count_kernels() {
  int n = 0;
  for (int c = 0; c < kNumSm90Fp8TileConfigs; ++c) n += sm90_fp8_kernel_of(c) == c;
  return n;
}
inline constexpr int kNumSm90Fp8Kernels = sm90_fp8_count_kernels();
inline constexpr bool sm90_fp8_kernels_first() {
  for (int c = 0; c < kNumSm90Fp8TileConfigs; ++c)
    if ((c < kNumSm90Fp8Kernels) != (sm90_fp8_kernel_of(c) == c)) return false;
  return true;
}
static_assert(sm90_fp8_kernels_first(), "kSm90Fp8TileConfigs: rows of new kernels before the rows that reuse one");

// Index into kSm90Fp8TileConfigs: the FP8 measured table's row where it has one
// (sm90_measured_tile_config over sm90_fp8_measured_table(dev)), else the config of least modelled time
// (waves x tile area / rate, the 16-bit model: heuristic_sm90.cpp; ties to the lower index). Pure.
int choose_gated_up_fp8_sm90_tile_config(const GatedUpProblem& p, const detail::DeviceSpec& dev);

// The FP8 measured table `dev` reads (heuristic_fp8_sm90.cpp's kSm90Fp8Measured, or
// kSm90Fp8MeasuredH200 where sm90_reads_h200_tables), for the tests.
Sm90MeasuredTable sm90_fp8_measured_table(const detail::DeviceSpec& dev);

}  // namespace blockfuse
