// The FP8 sm90a gated-up tile heuristic: a measured table first (as the 16-bit heuristic's), else the
// 16-bit kernel's model (heuristic_sm90.cpp) over the FP8 table (tile_configs_fp8_sm90.h). A config's
// time is waves x (bm·bn per tile) / rate, with waves = ceil(tiles / SMs) and tiles counted as
// CUTLASS's persistent scheduler creates them (cluster and swizzle padding included). Pure;
// unit-tested in test_heuristic_fp8_sm90.cpp.
#include <array>

#include "gated_up/tile_configs_fp8_sm90.h"
#include "gated_up/tile_tables_sm90.h"

namespace blockfuse {

// The measured table (kSm90Fp8Measured) is generated: tile_tables_sm90.h.

Sm90MeasuredTable sm90_fp8_measured_table() {
  return {kSm90Fp8Measured.data(), int(kSm90Fp8Measured.size()), kSm90TableSms};
}

int choose_gated_up_fp8_sm90_tile_config(const GatedUpProblem& p, const detail::DeviceSpec& dev) {
  const Sm90MeasuredTable t = sm90_fp8_measured_table();
  const int measured =
      sm90_measured_tile_config(t.points, t.n, t.sms, kSm90Fp8TileConfigs, kNumSm90Fp8TileConfigs, p, dev);
  if (measured >= 0) return measured;
  return sm90_cheapest_tile_config(kSm90Fp8TileConfigs, kNumSm90Fp8TileConfigs, p, dev);
}

}  // namespace blockfuse
