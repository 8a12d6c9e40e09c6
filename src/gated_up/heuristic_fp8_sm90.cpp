// The FP8 sm90a gated-up tile heuristic: the 16-bit kernel's model (heuristic_sm90.cpp) over the
// FP8 table (tile_configs_fp8_sm90.h). A config's time is waves x (bm·bn per tile) / rate, with
// waves = ceil(tiles / SMs) and tiles counted as CUTLASS's persistent scheduler creates them
// (cluster and swizzle padding included). Pure; unit-tested in test_heuristic_fp8_sm90.cpp.
#include "gated_up/tile_configs_fp8_sm90.h"

namespace blockfuse {

int choose_gated_up_fp8_sm90_tile_config(const GatedUpProblem& p, const detail::DeviceSpec& dev) {
  const long long sms = dev.sm_count > 0 ? dev.sm_count : 1;
  const long long m = p.m < 1 ? 1 : p.m, u = p.u < 1 ? 1 : p.u;
  int best = 0;
  double best_cost = 0;
  for (int c = 0; c < kNumSm90Fp8TileConfigs; ++c) {
    const Sm90TileConfigRow& r = kSm90Fp8TileConfigs[c];
    const long long tiles = sm90_num_tiles(m, u, r);
    const long long waves = (tiles + sms - 1) / sms;
    const double rate = p.k <= 4096 ? r.rel_rate : r.rel_rate_large_k;
    const double cost = double(waves) * double(r.bm) * double(r.bn) / rate;
    if (c == 0 || cost < best_cost * (1 - 1e-9)) {
      best = c;
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace blockfuse
