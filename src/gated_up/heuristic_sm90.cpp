// The sm90a gated-up tile heuristic: a pure function of (M, K, U) and the device, unit-tested on
// the CPU (tests/cpu/test_heuristic_sm90.cpp). See tile_configs_sm90.h for the table.
//
// Model (a prior, not yet a measurement — replace rel_rate with the H100 numbers from
// `blockfuse bench gated-up --kernel sm90 --tile-config N` once they exist): the persistent
// scheduler hands each SM whole tiles, so a config's time is
//     waves × (bm·bn per tile) / rel_rate,   waves = ceil(tiles / sm_count),
// K cancels (every tile runs the full K loop). This captures the two effects that decide between
// the rows: wave quantisation (the last, partial wave costs as much as a full one — which is what
// makes the 128x256 tile lose at 128 and 512 tokens, where 2U/256 weight panels leave part of the
// 132 SMs idle or padded by the 2x1 cluster) and the per-tile efficiency of the bigger tile at
// large M. Ties go to the lower index (the larger, better-measured tile).
#include "gated_up/tile_configs_sm90.h"

namespace blockfuse {

int choose_gated_up_sm90_tile_config(const GatedUpProblem& p, const DeviceSpec& dev) {
  const long long sms = dev.sm_count > 0 ? dev.sm_count : 1;
  int best = 0;
  double best_cost = 0;
  for (int c = 0; c < kNumSm90TileConfigs; ++c) {
    const Sm90TileConfigRow& r = kSm90TileConfigs[c];
    const long long tiles = sm90_num_tiles(p.m < 1 ? 1 : p.m, p.u < 1 ? 1 : p.u, r);
    const long long waves = (tiles + sms - 1) / sms;
    const double cost = double(waves) * double(r.bm) * double(r.bn) / double(r.rel_rate);
    if (c == 0 || cost < best_cost * (1 - 1e-9)) {
      best = c;
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace blockfuse
