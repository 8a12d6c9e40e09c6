// Internal: the tile configurations the sm80 gated-up kernel is compiled for. Kept short: each row
// is one template instantiation per dtype per architecture (build time; CI compiles them all).
// The heuristic (heuristic.cpp) picks a row; GatedUpOptions::tile_config forces one.
#pragma once

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

inline constexpr int tile_config_smem_bytes(const TileConfigRow& c) {
  const int pipe = c.stages * (c.bm + c.bn) * c.bk * 2;
  const int epilogue = c.bm * (c.bn / 2) * 2;
  return pipe > epilogue ? pipe : epilogue;
}

}  // namespace blockfuse
