// The sm80 gated-up tile heuristic: a pure function of (M, K, U) and the device, unit-tested on the
// CPU (test_heuristic.cpp). See tile_configs_sm80.h for the table.
#include "blockfuse/gated_up.h"
#include "common/check.h"
#include "gated_up/tile_configs_sm80.h"

namespace blockfuse {

int GatedUpTileConfig::smem_bytes() const {
  return tile_config_smem_bytes(TileConfigRow{block_m, block_n, block_k, stages, warps_m, warps_n});
}

int gated_up_num_tile_configs() { return kNumSm80TileConfigs; }

GatedUpTileConfig gated_up_tile_config(int index) {
  if (index < 0 || index >= kNumSm80TileConfigs)
    detail::throw_arg("gated_up_tile_config", "index", detail::cat("= ", index),
                      detail::cat("0 <= index < ", kNumSm80TileConfigs));
  const TileConfigRow& r = kSm80TileConfigs[index];
  return GatedUpTileConfig{r.bm, r.bn, r.bk, r.stages, r.warps_m, r.warps_n};
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t num_tiles(const GatedUpProblem& p, int config) {
  const TileConfigRow& r = kSm80TileConfigs[config];
  return ceil_div(p.m, r.bm) * ceil_div(2 * p.u, r.bn);
}

// Measurements behind the rules: docs/gated_up.md#tuning, "sm80 kernel" (H100). Every 128x256 variant
// (BK 32/64, 3-6 stages) ran within 5 % of the others at 410-430 TFLOP/s — the kernel is bound by
// mma.sync issue and shared-memory bandwidth, not by the pipeline — so the table stays small and the
// choice is about filling the SMs.
int choose_gated_up_sm80_tile_config(const GatedUpProblem& p, const detail::DeviceSpec& dev) {
  auto fits = [&](int c) { return tile_config_smem_bytes(kSm80TileConfigs[c]) <= dev.max_smem_per_block; };
  // Few rows: a 64-row tile halves the wasted MMA work of a 128-row tile.
  if (p.m <= 64 && fits(2)) return 2;
  // The 128x256 tile has the highest arithmetic intensity per shared-memory byte; use it when it
  // still gives every SM at least one CTA.
  if (num_tiles(p, 0) >= dev.sm_count && fits(0)) return 0;
  // Otherwise 128x128 doubles the CTA count so more SMs get work.
  if (fits(1)) return 1;
  return 2;  // 48 KB fits every sm80+ device
}

}  // namespace blockfuse
