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
// 690-800 in the same run; the table is in docs/gated_up.md#tuning):
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
//
// With a workspace (choose_gated_up_sm90_tile_config(p, dev, true)) the stream-K row 3 is allowed,
// at kSm90StreamKPoints only: the model has no rate for stream-K (row 3 is row 0's tile,
// so it would tie with row 0 everywhere), and the grid found it ahead by >= 2 % at 1 of 60 points.
#include <array>

#include "gated_up/tile_configs_sm90.h"
#include "gated_up/tile_tables_sm90.h"

namespace blockfuse {

int sm90_cheapest_tile_config(const Sm90TileConfigRow* table, int rows, const GatedUpProblem& p,
                              const detail::DeviceSpec& dev) {
  const long long sms = dev.sm_count > 0 ? dev.sm_count : 1;
  const long long m = p.m < 1 ? 1 : p.m, u = p.u < 1 ? 1 : p.u;
  int best = -1;
  double best_cost = 0;
  for (int c = 0; c < rows; ++c) {
    const Sm90TileConfigRow& r = table[c];
    if (r.stream_k) continue;  // opt-in: needs the caller's workspace (tile_configs_sm90.h, row 3)
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

int sm90_measured_tile_config(const Sm90MeasuredPoint* table, int n, int sms, const Sm90TileConfigRow* rows, int n_rows,
                              const GatedUpProblem& p, const detail::DeviceSpec& dev) {
  if (table == nullptr || n <= 0 || dev.sm_count != sms) return -1;
  // The nearest measured points at or below and at or above p.m, for p's shape.
  const Sm90MeasuredPoint* lo = nullptr;
  const Sm90MeasuredPoint* hi = nullptr;
  for (int i = 0; i < n; ++i) {
    const Sm90MeasuredPoint& t = table[i];
    if (t.k != p.k || t.u != p.u) continue;
    if (t.m <= p.m && (lo == nullptr || t.m > lo->m)) lo = &t;
    if (t.m >= p.m && (hi == nullptr || t.m < hi->m)) hi = &t;
  }
  if (lo == nullptr || hi == nullptr || lo->row != hi->row) return -1;
  const int row = lo->row;
  if (rows == nullptr || row < 0 || row >= n_rows || rows[row].stream_k) return -1;
  return row;
}

// The measured tables (kSm90Measured; kSm90StreamKPoints for callers that pass a workspace, read by
// exact (K, U, M): the points where the stream-K row beat the best other row by >= 2 %, beyond the
// run-to-run spread) are generated: tile_tables_sm90.h.
Sm90MeasuredTable sm90_measured_table(bool stream_k_points) {
  if (stream_k_points) return {kSm90StreamKPoints.data(), int(kSm90StreamKPoints.size()), kSm90TableSms};
  return {kSm90Measured.data(), int(kSm90Measured.size()), kSm90TableSms};
}

int sm90_stream_k_tile_config(const Sm90MeasuredPoint* table, int n, int sms, const Sm90TileConfigRow* rows, int n_rows,
                              const GatedUpProblem& p, const detail::DeviceSpec& dev) {
  if (table == nullptr || rows == nullptr || dev.sm_count != sms) return -1;
  for (int i = 0; i < n; ++i) {
    const Sm90MeasuredPoint& t = table[i];
    if (t.k == p.k && t.u == p.u && t.m == p.m && t.row >= 0 && t.row < n_rows && rows[t.row].stream_k) return t.row;
  }
  return -1;
}

int choose_gated_up_sm90_tile_config(const GatedUpProblem& p, const detail::DeviceSpec& dev, bool with_workspace) {
  if (with_workspace) {
    // A stream-K row only at a stream-K point; elsewhere the choice without a workspace.
    const Sm90MeasuredTable t = sm90_measured_table(/*stream_k_points=*/true);
    const int sk = sm90_stream_k_tile_config(t.points, t.n, t.sms, kSm90TileConfigs, kNumSm90TileConfigs, p, dev);
    if (sk >= 0) return sk;
  }
  const Sm90MeasuredTable t = sm90_measured_table(false);
  const int measured = sm90_measured_tile_config(t.points, t.n, t.sms, kSm90TileConfigs, kNumSm90TileConfigs, p, dev);
  if (measured >= 0) return measured;
  return sm90_cheapest_tile_config(kSm90TileConfigs, kNumSm90TileConfigs, p, dev);
}

}  // namespace blockfuse
