// Internal: the tile configurations the sm80 gated-up kernel is compiled for, and the pure
// heuristic that picks one (heuristic_sm80.cpp). Kept short: each row is one template
// instantiation per dtype per architecture (build time; CI compiles them all).
// GatedUpOptions::tile_config forces a row.
#pragma once

#include "common/device.h"
#include "gated_up/params.h"

namespace blockfuse {

struct TileConfigRow {
  int bm, bn, bk, stages, warps_m, warps_n;
};

inline constexpr TileConfigRow kSm80TileConfigs[] = {
    // bm   bn  bk stages wm wn
    {128, 256, 32, 4, 2, 4},  // 0: large problems; 8 warps of 64x64, 96 KB (fits Ampere, Ada, Hopper)
    {128, 128, 32, 4, 2, 2},  // 1: mid-size M or few tiles: 2x the CTAs of config 0, 64 KB
    {64, 128, 32, 4, 1, 4},   // 2: M <= 64 (decode-like), 48 KB
    {128, 256, 64, 3, 2, 4},  // 3: config 0 with BK=64, 3 stages, 144 KB (A100 and Hopper only)
};
inline constexpr int kNumSm80TileConfigs = sizeof(kSm80TileConfigs) / sizeof(kSm80TileConfigs[0]);

// m-tiles per rasterisation group (GatedUpParams::sm80_raster_group): 4 / 8 / 16 / 32 moved config
// 0 by at most ±4 % with no consistent winner (docs/gated_up.md#tuning, "sm80 kernel").
inline constexpr int kSm80RasterGroup = 16;

inline constexpr int tile_config_smem_bytes(const TileConfigRow& c) {
  const int pipe = c.stages * (c.bm + c.bn) * c.bk * 2;
  const int epilogue = c.bm * (c.bn / 2) * 2;
  return pipe > epilogue ? pipe : epilogue;
}

// The sm80 heuristic: a pure function of the problem and the device, unit-tested on the CPU.
// Returns an index into kSm80TileConfigs.
int choose_gated_up_sm80_tile_config(const GatedUpProblem& p, const detail::DeviceSpec& dev);

}  // namespace blockfuse
