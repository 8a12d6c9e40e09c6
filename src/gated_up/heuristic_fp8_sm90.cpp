// The FP8 sm90a gated-up tile heuristic: the 16-bit kernel's model (heuristic_sm90.cpp) over the
// FP8 table (tile_configs_fp8_sm90.h). A config's time is waves x (bm·bn per tile) / rate, with
// waves = ceil(tiles / SMs) and tiles counted as CUTLASS's persistent scheduler creates them
// (cluster and swizzle padding included). Pure; unit-tested in test_heuristic_fp8_sm90.cpp.
#include "gated_up/tile_configs_fp8_sm90.h"

namespace blockfuse {

int choose_gated_up_fp8_sm90_tile_config(const GatedUpProblem& p, const detail::DeviceSpec& dev) {
  return sm90_cheapest_tile_config(kSm90Fp8TileConfigs, kNumSm90Fp8TileConfigs, p, dev);
}

}  // namespace blockfuse
