// The sm90a gated-up tile heuristic: a pure function of (M, K, U) and the device, unit-tested on
// the CPU (test_heuristic_sm90.cpp). See tile_configs_sm90.h for the table.
//
// Model: the persistent scheduler hands each SM whole tiles, so a config's time is
//     waves × (bm·bn per tile) / rate,   waves = ceil(tiles / sm_count),
// with tiles counted as CUTLASS's scheduler creates them (cluster and swizzle padding included,
// sm90_num_tiles) and K cancelling except through `rate`. Wave quantisation is what decides
// between the rows: the last, partial wave costs as much as a full one.
//
// The rates, from the H100 sweep (bench gated-up --kernel sm90 --tile-config N, TFLOP/s; cuBLAS
// 690-800 in the same run; the table is docs/perf-notes.md, "Tile configs measured"):
//   * row 0 (coop 128x256, 2x1) is the reference: 677-783 at 512-2048 tokens and 656-728 at
//     16384 over Llama-3 8B/70B/405B and Gemma-2 27B.
//   * row 1 (ping-pong 128x128, 2x1) ran at 0.83-0.85 of row 0 per full wave at K = 4096 (8B at
//     1024/2048 tokens: 661/640 vs 783/771) but 0.68-0.87 at K = 8192-16384; its fit to the
//     512-token points (where it has 7 half-size waves against row 0's 4 full ones) is 0.95 at
//     K = 4096 (measured 738 vs 677: it wins) and 0.74-0.83 above (it loses: 70B 739 vs 777,
//     405B 617 vs 725). Hence 0.95 / 0.80.
//   * row 2 (ping-pong 128x128, 1x2) exists for M <= 128, where both 2x1 rows pad their single M
//     tile to two; its rates are set just below row 1's so it is chosen only there.
// Ties go to the lower index.
#include "gated_up/tile_configs_sm90.h"

namespace blockfuse {

int sm90_cheapest_tile_config(const Sm90TileConfigRow* table, int rows, const GatedUpProblem& p,
                              const detail::DeviceSpec& dev) {
  const long long sms = dev.sm_count > 0 ? dev.sm_count : 1;
  const long long m = p.m < 1 ? 1 : p.m, u = p.u < 1 ? 1 : p.u;
  int best = -1;
  double best_cost = 0;
  for (int c = 0; c < rows; ++c) {
    const Sm90TileConfigRow& r = table[c];
    if (r.stream_k) continue;  // opt-in until measured (tile_configs_sm90.h, row 3)
    const long long tiles = sm90_num_tiles(m, u, r);
    const long long waves = (tiles + sms - 1) / sms;
    const double rate = p.k <= 4096 ? r.rel_rate : r.rel_rate_large_k;
    const double cost = double(waves) * double(r.bm) * double(r.bn) / rate;
    if (best < 0 || cost < best_cost * (1 - 1e-9)) {
      best = c;
      best_cost = cost;
    }
  }
  return best < 0 ? 0 : best;
}

int choose_gated_up_sm90_tile_config(const GatedUpProblem& p, const detail::DeviceSpec& dev) {
  return sm90_cheapest_tile_config(kSm90TileConfigs, kNumSm90TileConfigs, p, dev);
}

}  // namespace blockfuse
