// The sm90a tile heuristic (src/gated_up/heuristic_sm90.cpp): a pure function of (M, K, U, device):
// the measured table's row where it has one, else the cost model's. Three kinds of checks, kept apart
// so a retune after the H100 measurements only touches the first two:
//   * the cost model's documented rules, on named cases (sm90_cheapest_tile_config, which decides
//     wherever the table does not): the 128x256 cooperative tile (config 0) for the target
//     grid (Llama-3 8B/70B/405B at 1024/4096/16384 tokens) on an H100 and an H200; not config 0 for
//     a single 128-token chunk, where its 2x1 cluster pads the one M tile to two and its 2U/256
//     weight panels leave SMs idle;
//   * the committed measured table: the heuristic returns its row at each of its points;
//   * invariants any heuristic must keep, over a sweep of M = 1..70000, the Llama MLP shapes and
//     SM counts: a valid index, purity, no crash on degenerate inputs;
//   * with a workspace (choose_gated_up_sm90_tile_config(p, dev, true)): the stream-K row at exactly
//     the stream-K points (kSm90StreamKPoints, each a point of kSm90Measured), the choice without a
//     workspace everywhere else.
#include <gtest/gtest.h>

#include <iterator>
#include <utility>
#include <vector>

#include "gated_up/tile_configs_sm90.h"

namespace blockfuse {
namespace {

using detail::DeviceSpec;

// SM count, opt-in shared memory per block, cc, peak DRAM GB/s (memory clock x 2 x bus width, as
// device_spec computes it: the H100 SXM's HBM3 2619 MHz x 5120 bits, the H200's HBM3e 3201 MHz x 6144).
// (H100 PCIe has 114 SMs; H20 78.)
const DeviceSpec kH100{132, 232448, 9, 0, 3352.3};
const DeviceSpec kH200{132, 232448, 9, 0, 4917.0};
const DeviceSpec kH100Pcie{114, 232448, 9, 0, 2039.0};
const DeviceSpec kUnknownDram{132, 232448, 9, 0, 0.0};  // a device that does not report its memory clock

const std::pair<int64_t, int64_t> kTargetShapes[] = {{4096, 14336}, {8192, 28672}, {16384, 53248}};
const std::pair<int64_t, int64_t> kLlamaShapes[] = {{4096, 11008}, {5120, 13824}, {4096, 14336}, {8192, 28672},
                                                    {16384, 53248}, {2048, 8192}, {3072, 8192}, {4608, 36864}};

constexpr int kLarge = 0;      // cooperative 128x256, cluster 2x1
constexpr int kPingpong = 1;   // ping-pong 128x128, cluster 2x1
constexpr int kOneMTile = 2;   // ping-pong 128x128, cluster 1x2
constexpr int kPingpong192 = 6;  // ping-pong 128x192, cluster 2x1 (opt-in: the H200's table places it)

// The cost model alone (what the heuristic falls back to off the measured table).
int model(const GatedUpProblem& p, const DeviceSpec& dev) {
  return sm90_cheapest_tile_config(kSm90TileConfigs, kNumSm90TileConfigs, p, dev);
}

TEST(HeuristicSm90, TargetGridPicksTheLargeTile) {
  for (const DeviceSpec& dev : {kH100, kH200})
    for (auto [k, u] : kTargetShapes)
      for (int64_t m : {1024, 4096, 16384})
        EXPECT_EQ(model({m, k, u}, dev), kLarge) << "M=" << m << " K=" << k << " U=" << u;
}

TEST(HeuristicSm90, OneChunkOf128TokensAvoidsTheClusteredTile) {
  // One M tile: both 2x1-cluster rows would pad it to two, so the 1x2 row (M = 1: decode-sized).
  for (auto [k, u] : kTargetShapes)
    for (int64_t m : {1, 64, 128})
      EXPECT_EQ(model({m, k, u}, kH100), kOneMTile) << "M=" << m << " K=" << k;
}

TEST(HeuristicSm90, ChunksOf512TokensFollowTheMeasurements) {
  // H100, 2026-11-22, 512 tokens: Llama-3 8B (K = 4096) ping-pong 738 vs 677 TFLOP/s for the
  // large tile (4 x 112 tiles of 128x256 = 3.4 waves -> 4; 4 x 224 of 128x128 = 6.8 -> 7);
  // 70B and 405B (K = 8192, 16384): the large tile, 777 vs 739 and 725 vs 617.
  EXPECT_EQ(model({512, 4096, 14336}, kH100), kPingpong);
  EXPECT_EQ(model({512, 8192, 28672}, kH100), kLarge);
  EXPECT_EQ(model({512, 16384, 53248}, kH100), kLarge);
  // Gemma-2 27B (K = 4608): the large tile, 761 vs 703.
  EXPECT_EQ(model({512, 4608, 36864}, kH100), kLarge);
}

TEST(HeuristicSm90, TileCountMatchesTheScheduler) {
  // 2x1 cluster: M tiles round up to even.
  EXPECT_EQ(sm90_num_tiles_chosen(1, 14336, kSm90TileConfigs[0], 132), 2 * 112);
  EXPECT_EQ(sm90_num_tiles_chosen(129, 14336, kSm90TileConfigs[0], 132), 2 * 112);
  EXPECT_EQ(sm90_num_tiles_chosen(257, 14336, kSm90TileConfigs[0], 132), 4 * 112);
  EXPECT_EQ(sm90_num_tiles_chosen(1, 14336, kSm90TileConfigs[1], 132), 2 * 224);
  // 1x2 cluster: N tiles round up to even, M is not padded.
  EXPECT_EQ(sm90_num_tiles_chosen(1, 14336, kSm90TileConfigs[2], 132), 224);
  EXPECT_EQ(sm90_num_tiles_chosen(1, 72, kSm90TileConfigs[2], 132), 2);  // 2U = 144 -> 2 tiles of 128
  // Ragged U: 2U = 2·(8·k) need not be a multiple of bn.
  EXPECT_EQ(sm90_num_tiles_chosen(256, 72, kSm90TileConfigs[1], 132), 2 * 2);  // 2U = 144 -> 2 tiles of 128
}

TEST(HeuristicSm90, SwizzlePaddingMirrorsCutlass) {
  // CUTLASS rounds each mode up to swizzle x cluster; with max swizzle 8 the 2x1-cluster tile at
  // 1024 tokens (8 M tiles) becomes 16 M tiles and at 512 (4) becomes 8 — the 2x slowdown of the
  // first H100 sweep.
  const Sm90TileConfigRow& c0 = kSm90TileConfigs[0];
  EXPECT_EQ(sm90_num_tiles(1024, 14336, c0, 8), 16 * 112);
  EXPECT_EQ(sm90_num_tiles(512, 14336, c0, 8), 8 * 112);
  EXPECT_EQ(sm90_num_tiles(2048, 14336, c0, 8), 16 * 112);  // already a multiple of 16
  // The launcher's choice removes the padding and keeps the largest swizzle that does.
  EXPECT_EQ(sm90_choose_swizzle(1024, 14336, c0, 132), 4);
  EXPECT_EQ(sm90_num_tiles_chosen(1024, 14336, c0, 132), 8 * 112);
  EXPECT_EQ(sm90_choose_swizzle(512, 14336, c0, 132), 2);
  EXPECT_EQ(sm90_num_tiles_chosen(512, 14336, c0, 132), 4 * 112);
  EXPECT_EQ(sm90_choose_swizzle(4096, 14336, c0, 132), 8);
  EXPECT_EQ(sm90_choose_swizzle(16384, 53248, c0, 132), 8);
  // CUTLASS's effective swizzle shrinks with the smaller grid side.
  EXPECT_EQ(sm90_effective_swizzle(6, 100, 8), 8);
  EXPECT_EQ(sm90_effective_swizzle(5, 100, 8), 4);
  EXPECT_EQ(sm90_effective_swizzle(2, 100, 8), 2);
  EXPECT_EQ(sm90_effective_swizzle(1, 100, 8), 1);
  EXPECT_EQ(sm90_effective_swizzle(100, 100, 2), 2);
}

TEST(HeuristicSm90, ChosenSwizzlePadsAtMostOnePercent) {
  // Against swizzle 1 (padding to the cluster shape only), the chosen swizzle adds at most 1 % tiles
  // and 1 % waves (so no wave at all below 100), and no larger swizzle does as well.
  std::vector<int64_t> us{29568, 18944};  // Qwen2 72B and 7B: N tiles not a multiple of 8
  for (auto [k, u] : kLlamaShapes) us.push_back(u);
  for (int sms : {132, 114, 78})
    for (const Sm90TileConfigRow& c : kSm90TileConfigs)
      for (int64_t u : us)
        for (int64_t m = 1; m <= 70000; m = m < 64 ? m + 1 : m * 9 / 8) {
          const int s = sm90_choose_swizzle(m, u, c, sms);
          ASSERT_TRUE(s == 1 || s == 2 || s == 4 || s == 8);
          auto fits = [&](int sw) {
            const long long t1 = sm90_num_tiles(m, u, c, 1), t = sm90_num_tiles(m, u, c, sw);
            const double bound = 1 + kSm90SwizzlePaddingTolerance;
            return double(t) <= double(t1) * bound && double(sm90_waves(t, sms)) <= double(sm90_waves(t1, sms)) * bound;
          };
          ASSERT_TRUE(fits(s)) << "M=" << m << " U=" << u << " SMs=" << sms << " swizzle " << s;
          if (sm90_waves(sm90_num_tiles(m, u, c, 1), sms) < 100)
            ASSERT_EQ(sm90_waves(sm90_num_tiles(m, u, c, s), sms), sm90_waves(sm90_num_tiles(m, u, c, 1), sms));
          for (int larger = s * 2; larger <= 8; larger *= 2)
            ASSERT_FALSE(fits(larger)) << "M=" << m << " U=" << u << " swizzle " << larger << " fits too";
        }
}

TEST(HeuristicSm90, SwizzleTakesAPaddingColumnAtManyWaves) {
  // Qwen2 72B (U = 29568): row 0's 231 N tiles admit no swizzle without a padding column. Unswizzled
  // the grid is rastered along M and every wave re-reads all of x; one padding column is one wave
  // in 224 at 16384 tokens, so swizzle 8 (docs/gated_up.md#tuning).
  const Sm90TileConfigRow& c0 = kSm90TileConfigs[0];
  EXPECT_EQ(sm90_choose_swizzle(16384, 29568, c0, 132), 8);
  EXPECT_EQ(sm90_num_tiles_chosen(16384, 29568, c0, 132), 128 * 232);
  EXPECT_EQ(sm90_choose_swizzle(65536, 29568, c0, 132), 8);
  // At 4096 tokens the column is a 57th wave on 56 (1.8 %; swizzle 8 measured 1.8 % slower there),
  // at 2048 a 29th on 28: unswizzled, as before.
  EXPECT_EQ(sm90_choose_swizzle(4096, 29568, c0, 132), 1);
  EXPECT_EQ(sm90_choose_swizzle(2048, 29568, c0, 132), 1);
  EXPECT_EQ(sm90_num_tiles_chosen(2048, 29568, c0, 132), 16 * 231);
  // Qwen2 7B (148 N tiles) at 16384 tokens: swizzle 8 pads to 152 columns, 148 waves against 144
  // (2.8 %): swizzle 4, which pads nothing.
  EXPECT_EQ(sm90_choose_swizzle(16384, 18944, c0, 132), 4);
}

TEST(HeuristicSm90, InvariantsOverASweep) {
  for (const DeviceSpec& dev : {kH100, kH200, kH100Pcie, DeviceSpec{1, 232448, 9, 0}, DeviceSpec{0, 232448, 9, 0}}) {
    for (auto [k, u] : kLlamaShapes) {
      for (int64_t m = 1; m <= 70000; m = m < 64 ? m + 1 : m * 5 / 4) {
        const GatedUpProblem p{m, k, u};
        const int c = choose_gated_up_sm90_tile_config(p, dev);
        ASSERT_GE(c, 0);
        ASSERT_LT(c, kNumSm90TileConfigs);
        ASSERT_EQ(c, choose_gated_up_sm90_tile_config(p, dev)) << "not pure";
        ASSERT_FALSE(kSm90TileConfigs[c].stream_k) << "stream-K rows are opt-in (they need a workspace)";
        // The rate model never takes an opt-in row; a measured table may place one.
        ASSERT_FALSE(kSm90TileConfigs[sm90_cheapest_tile_config(kSm90TileConfigs, kNumSm90TileConfigs, p, dev)].opt_in);
        const Sm90MeasuredTable t = sm90_measured_table(dev);
        const bool placed = sm90_measured_tile_config(t.points, t.n, t.sms, kSm90TileConfigs, kNumSm90TileConfigs, p,
                                                      dev) == c;
        ASSERT_TRUE(!kSm90TileConfigs[c].opt_in || placed) << "M=" << m << ": an opt-in row the table did not place";
      }
    }
  }
  // Degenerate inputs the dispatcher never passes still give a valid index.
  const int c = choose_gated_up_sm90_tile_config({0, 8, 8}, kH100);
  EXPECT_TRUE(c >= 0 && c < kNumSm90TileConfigs);
}

// The measured-table lookup (sm90_measured_tile_config) on a table made here: a measured M gives its
// row, between two measured Ms their row if they agree and the model otherwise, outside the range,
// another shape or another SM count the model; stream-K and out-of-table rows are never returned, an
// opt-in row is where the table places it (the H200's places row 6).
TEST(HeuristicSm90, MeasuredTableLookup) {
  const Sm90MeasuredPoint t[] = {
      {4096, 14336, 512, kPingpong}, {4096, 14336, 1024, kLarge}, {4096, 14336, 4096, kLarge},
      {4096, 14336, 16384, 3 /* stream-K */}, {4096, 14336, 65536, 3},
      {8192, 28672, 128, kOneMTile}, {8192, 28672, 1024, kOneMTile}, {8192, 28672, 2048, 99 /* not a row */},
      {5120, 13824, 1024, 4 /* opt-in row */},
  };
  const int n = int(sizeof(t) / sizeof(t[0]));
  auto at = [&](int64_t m, int64_t k, int64_t u, const DeviceSpec& dev = kH100) {
    return sm90_measured_tile_config(t, n, 132, kSm90TileConfigs, kNumSm90TileConfigs, {m, k, u}, dev);
  };
  EXPECT_EQ(at(512, 4096, 14336), kPingpong);     // measured
  EXPECT_EQ(at(1024, 4096, 14336), kLarge);       // measured
  EXPECT_EQ(at(700, 4096, 14336), -1);            // between 512 (pp) and 1024 (large): the model
  EXPECT_EQ(at(3000, 4096, 14336), kLarge);       // between two large points
  EXPECT_EQ(at(4096, 4096, 14336), kLarge);
  EXPECT_EQ(at(16384, 4096, 14336), -1);          // stream-K measured: needs a workspace, so the model
  EXPECT_EQ(at(30000, 4096, 14336), -1);          // between two stream-K points
  EXPECT_EQ(at(256, 4096, 14336), -1);            // below the measured range
  EXPECT_EQ(at(100000, 4096, 14336), -1);         // above it
  EXPECT_EQ(at(512, 4096, 11008), -1);            // another shape
  EXPECT_EQ(at(512, 4096, 14336, kH100Pcie), -1); // another SM count
  EXPECT_EQ(at(500, 8192, 28672), kOneMTile);
  EXPECT_EQ(at(2048, 8192, 28672), -1);           // not a row of kSm90TileConfigs
  ASSERT_TRUE(kSm90TileConfigs[4].opt_in);
  EXPECT_EQ(at(1024, 5120, 13824), 4);            // an opt-in row the table places
  EXPECT_EQ(sm90_measured_tile_config(nullptr, 0, 132, kSm90TileConfigs, kNumSm90TileConfigs, {512, 4096, 14336}, kH100), -1);
  // Rows are checked against the table given: row 2 exists in the 16-bit table, not in a 2-row one.
  EXPECT_EQ(sm90_measured_tile_config(t, n, 132, kSm90TileConfigs, 2, {500, 8192, 28672}, kH100), -1);
  // The heuristic with the committed table is still a valid, pure choice (InvariantsOverASweep) and
  // follows the measured row wherever the lookup returns one.
  for (auto [k, u] : kLlamaShapes)
    for (int64_t m = 1; m <= 70000; m = m < 64 ? m + 1 : m * 5 / 4) {
      const int c = choose_gated_up_sm90_tile_config({m, k, u}, kH100);
      const int cm = sm90_cheapest_tile_config(kSm90TileConfigs, kNumSm90TileConfigs, {m, k, u}, kH100);
      ASSERT_TRUE(c == cm || !kSm90TileConfigs[c].stream_k) << "M=" << m;
    }
}

// The committed tables (kSm90Measured in tile_table_sm90.inc, kSm90MeasuredH200 in
// tile_table_sm90_h200.inc, from scripts/tile-table --emit-cpp): well formed, and the heuristic returns
// a table's row at each of its points on a device of its class and the model's on another SM count.
// An empty table passes (only the shape checks apply).
void follows_table(const DeviceSpec& dev) {
  const Sm90MeasuredTable t = sm90_measured_table(dev);
  ASSERT_GE(t.n, 0);
  ASSERT_TRUE(t.n == 0 || t.points != nullptr);
  EXPECT_EQ(t.sms, dev.sm_count);
  for (int i = 0; i < t.n; ++i) {
    const Sm90MeasuredPoint& q = t.points[i];
    ASSERT_TRUE(q.k > 0 && q.k % 8 == 0 && q.u > 0 && q.u % 8 == 0 && q.m > 0) << "point " << i;
    ASSERT_TRUE(q.row >= 0 && q.row < kNumSm90TileConfigs) << "point " << i << ": row " << q.row;
    EXPECT_FALSE(kSm90TileConfigs[q.row].stream_k) << "point " << i << ": the heuristic cannot use a stream-K row";
    for (int j = 0; j < i; ++j)
      ASSERT_FALSE(t.points[j].k == q.k && t.points[j].u == q.u && t.points[j].m == q.m) << "points " << j << ", " << i;
    const GatedUpProblem p{q.m, q.k, q.u};
    EXPECT_EQ(choose_gated_up_sm90_tile_config(p, dev), q.row) << "M=" << q.m << " K=" << q.k << " U=" << q.u;
    EXPECT_EQ(choose_gated_up_sm90_tile_config(p, kH100Pcie), model(p, kH100Pcie)) << "another SM count: the model";
  }
}

TEST(HeuristicSm90, FollowsTheCommittedTable) {
  follows_table(kH100);
  follows_table(kH200);
}

// Which class's tables a 132-SM device reads: the H200's from kSm90H200TableMinDramGbps of peak DRAM
// bandwidth, else the H100's (an unknown bandwidth too); and they are different tables (the H200's
// row differs from the H100's at 30 of their 36 shared points: docs/gated_up.md#tuning).
TEST(HeuristicSm90, DeviceClassPicksTheTable) {
  EXPECT_FALSE(sm90_reads_h200_tables(kH100));
  EXPECT_TRUE(sm90_reads_h200_tables(kH200));
  EXPECT_FALSE(sm90_reads_h200_tables(kUnknownDram));
  EXPECT_EQ(sm90_measured_table(kUnknownDram).points, sm90_measured_table(kH100).points);
  EXPECT_NE(sm90_measured_table(kH200).points, sm90_measured_table(kH100).points);
  // Llama-3 8B x 4096 tokens: the large tile on the H100 (row 0 0.976x cuBLAS, the 128x128 rows behind),
  // the one-M-tile row on the H200 (1.06x against the large tile's 0.97x, two runs).
  EXPECT_EQ(choose_gated_up_sm90_tile_config({4096, 4096, 14336}, kH100), kLarge);
  EXPECT_EQ(choose_gated_up_sm90_tile_config({4096, 4096, 14336}, kH200), kOneMTile);
}

// The H200's table (scripts/tile-table --results results/gated_up.json:tile_sweep_h200_s25
// results/gated_up.json:tile_sweep_h200_s27 ... --run-floor 0.97): the sweeps' passes and session 25's
// grid runs together, and a row that ran below 0.97x cuBLAS in any of them passed over where another
// never did. Llama-3.1 405B x 8192 (K 16384): row 1 leads on the median (1.016x against 1.010x) but ran
// once at 0.85x (an L2 slow mode of the 128x128 tiles there): the large tile. Row 6, quack's 128x192
// ping-pong tile, where it led rows 0-2: 405B x 512 (1.026x against 1.005x), Qwen2 7B x 512 (1.030x
// against 1.016x), Qwen2 72B x 16384 (1.032x against 1.022x).
TEST(HeuristicSm90, H200TableCountsTheGridRuns) {
  EXPECT_EQ(choose_gated_up_sm90_tile_config({8192, 16384, 53248}, kH200), kLarge);
  EXPECT_EQ(choose_gated_up_sm90_tile_config({512, 16384, 53248}, kH200), kPingpong192);
  EXPECT_EQ(choose_gated_up_sm90_tile_config({512, 3584, 18944}, kH200), kPingpong192);
  EXPECT_EQ(choose_gated_up_sm90_tile_config({16384, 8192, 29568}, kH200), kPingpong192);
  // Not on the H100 (its table has rows 0-2 only): the same points read rows 0-2 or the model.
  for (const GatedUpProblem& p : {GatedUpProblem{512, 16384, 53248}, GatedUpProblem{512, 3584, 18944}})
    EXPECT_NE(choose_gated_up_sm90_tile_config(p, kH100), kPingpong192);
}

// sm90_measured_covers on a table the test makes: p's shape with points at or below and at or above p.m,
// on the table's SM count.
TEST(HeuristicSm90, MeasuredCoversItsRangeOnly) {
  const Sm90MeasuredPoint pts[] = {{4096, 14336, 512, kPingpong}, {4096, 14336, 16384, kLarge}};
  const Sm90MeasuredTable t{pts, 2, 132};
  EXPECT_TRUE(sm90_measured_covers(t, {512, 4096, 14336}, kH200));
  EXPECT_TRUE(sm90_measured_covers(t, {3000, 4096, 14336}, kH200));
  EXPECT_TRUE(sm90_measured_covers(t, {16384, 4096, 14336}, kH200));
  EXPECT_FALSE(sm90_measured_covers(t, {511, 4096, 14336}, kH200));
  EXPECT_FALSE(sm90_measured_covers(t, {16385, 4096, 14336}, kH200));
  EXPECT_FALSE(sm90_measured_covers(t, {1024, 4096, 11008}, kH200));  // another shape
  EXPECT_FALSE(sm90_measured_covers(t, {1024, 4096, 14336}, kH100Pcie));  // another SM count
  EXPECT_FALSE(sm90_measured_covers({nullptr, 0, 132}, {1024, 4096, 14336}, kH200));
}

// On the H200, outside its table's range (below 512 and past 16384 tokens) the H100's table, measured on
// the same SM count, before the model: its row at each such point of its shapes, with a workspace its
// stream-K point too (405B x 256). Inside the range the H200's table or, between two of its Ms whose rows
// differ, the model: never the H100's row for it.
TEST(HeuristicSm90, H200BelowItsTableReadsTheH100s) {
  const Sm90MeasuredTable own = sm90_measured_table(kH200), h100 = sm90_h100_measured_table();
  ASSERT_NE(own.points, h100.points);
  EXPECT_EQ(sm90_measured_table(kH100).points, h100.points);
  int read = 0;
  for (int i = 0; i < h100.n; ++i) {
    const Sm90MeasuredPoint& q = h100.points[i];
    const GatedUpProblem p{q.m, q.k, q.u};
    if (sm90_measured_covers(own, p, kH200)) continue;
    ++read;
    EXPECT_EQ(choose_gated_up_sm90_tile_config(p, kH200), q.row) << "M=" << q.m << " K=" << q.k << " U=" << q.u;
  }
  EXPECT_GE(read, 24) << "the H100's 128, 256, 32768 and 65536 tokens of the six shapes";
  constexpr int kStreamK = 3;
  EXPECT_EQ(choose_gated_up_sm90_tile_config({256, 16384, 53248}, kH200, true), kStreamK);
  EXPECT_EQ(choose_gated_up_sm90_tile_config({256, 16384, 53248}, kH200, true),
            choose_gated_up_sm90_tile_config({256, 16384, 53248}, kH100, true));
  // Inside the range: the H200's table (Llama-3 8B x 4096: row 2 on the H200, row 0 on the H100).
  EXPECT_TRUE(sm90_measured_covers(own, {4096, 4096, 14336}, kH200));
  EXPECT_EQ(choose_gated_up_sm90_tile_config({4096, 4096, 14336}, kH200), kOneMTile);
  EXPECT_FALSE(kSm90TileConfigs[choose_gated_up_sm90_tile_config({4096, 16384, 53248}, kH200, true)].stream_k);
  // Between two H200 Ms whose rows differ (8B: row 1 at 2048, row 2 at 4096): the model.
  EXPECT_EQ(choose_gated_up_sm90_tile_config({3000, 4096, 14336}, kH200), model({3000, 4096, 14336}, kH200));
}

// The one-M-tile row (128x128, no multicast of the weight tile) re-reads each weight tile per M tile
// and loses to the large tile wherever there are many M tiles. Two points of the first sweep had it as
// their best by noise, and the heuristic took it there: Llama-3 8B x 16384 tokens ran at 0.81x cuBLAS
// against the large tile's 0.97x, Gemma-2 27B x 4096 at 0.87x against 0.95x (H100, 2026-11-27, three
// runs each, scripts/tile-table --update; docs/gated_up.md#tuning). From 2048 tokens it is never chosen
// on an H100 (the H200, with 1.47x the DRAM bandwidth, runs it ahead there: its own table).
TEST(HeuristicSm90, NoOneMTileRowAtManyMTiles) {
  EXPECT_EQ(choose_gated_up_sm90_tile_config({16384, 4096, 14336}, kH100), kLarge);
  EXPECT_EQ(choose_gated_up_sm90_tile_config({4096, 4608, 36864}, kH100), kLarge);
  for (const DeviceSpec& dev : {kH100, kH100Pcie})
    for (auto [k, u] : kLlamaShapes)
      for (int64_t m : {2048, 3000, 4096, 6000, 8192, 12288, 16384, 32768, 65536})
        EXPECT_NE(choose_gated_up_sm90_tile_config({m, k, u}, dev), kOneMTile)
            << "M=" << m << " K=" << k << " U=" << u << " SMs=" << dev.sm_count;
}

// The measured lookup never returns a stream-K row; the stream-K lookup returns one at exactly a
// stream-K point's (K, U, M) and nothing else (not between two stream-K Ms, not another row).
TEST(HeuristicSm90, StreamKLookupIsExact) {
  constexpr int kStreamK = 3;
  ASSERT_TRUE(kSm90TileConfigs[kStreamK].stream_k);
  const Sm90MeasuredPoint t[] = {
      {4096, 14336, 512, kPingpong}, {4096, 14336, 1024, kStreamK}, {4096, 14336, 4096, kStreamK},
      {4096, 14336, 16384, kLarge},  {8192, 28672, 2048, 99 /* not a row */},
  };
  const int n = int(sizeof(t) / sizeof(t[0]));
  auto measured = [&](int64_t m, int64_t k, int64_t u) {
    return sm90_measured_tile_config(t, n, 132, kSm90TileConfigs, kNumSm90TileConfigs, {m, k, u}, kH100);
  };
  auto sk = [&](int64_t m, int64_t k, int64_t u, const DeviceSpec& dev = kH100, int rows = kNumSm90TileConfigs) {
    return sm90_stream_k_tile_config(t, n, 132, kSm90TileConfigs, rows, {m, k, u}, dev);
  };
  EXPECT_EQ(measured(1024, 4096, 14336), -1);  // a stream-K point: refused
  EXPECT_EQ(measured(2500, 4096, 14336), -1);
  EXPECT_EQ(measured(512, 4096, 14336), kPingpong);
  EXPECT_EQ(sk(1024, 4096, 14336), kStreamK);   // at the point
  EXPECT_EQ(sk(4096, 4096, 14336), kStreamK);
  EXPECT_EQ(sk(2500, 4096, 14336), -1);         // between two stream-K points: not carried over
  EXPECT_EQ(sk(1025, 4096, 14336), -1);
  EXPECT_EQ(sk(1024, 4096, 14337), -1);         // another shape
  EXPECT_EQ(sk(512, 4096, 14336), -1);          // a point, but not a stream-K row
  EXPECT_EQ(sk(16384, 4096, 14336), -1);
  EXPECT_EQ(sk(2048, 8192, 28672), -1);         // not a row of kSm90TileConfigs
  EXPECT_EQ(sk(1024, 4096, 14336, kH100Pcie), -1);   // another SM count
  EXPECT_EQ(sk(1024, 4096, 14336, kH100, 3), -1);    // a table of rows without row 3
  EXPECT_EQ(sm90_stream_k_tile_config(nullptr, 0, 132, kSm90TileConfigs, kNumSm90TileConfigs, {1024, 4096, 14336}, kH100), -1);
}

// The committed stream-K points (kSm90StreamKPoints, scripts/tile-table --emit-cpp): each a point of
// kSm90Measured with a stream-K row (1 of 60 at a 2 % margin), and the heuristic with a workspace
// returns it there.
TEST(HeuristicSm90, StreamKPointsArePointsOfTheTable) {
  const Sm90MeasuredTable t = sm90_measured_table(kH100, false), w = sm90_measured_table(kH100, true);
  ASSERT_GT(w.n, 0) << "no stream-K point";
  ASSERT_LT(w.n, t.n);
  ASSERT_NE(w.points, nullptr);
  EXPECT_EQ(w.sms, t.sms);
  for (int i = 0; i < w.n; ++i) {
    const Sm90MeasuredPoint& b = w.points[i];
    ASSERT_TRUE(b.row >= 0 && b.row < kNumSm90TileConfigs) << "point " << i << ": row " << b.row;
    EXPECT_TRUE(kSm90TileConfigs[b.row].stream_k) << "point " << i << ": not a stream-K row";
    int in_table = 0;
    for (int j = 0; j < t.n; ++j) in_table += t.points[j].k == b.k && t.points[j].u == b.u && t.points[j].m == b.m;
    EXPECT_EQ(in_table, 1) << "M=" << b.m << " K=" << b.k << " U=" << b.u << ": not a point of kSm90Measured";
    for (int j = 0; j < i; ++j)
      EXPECT_FALSE(w.points[j].k == b.k && w.points[j].u == b.u && w.points[j].m == b.m) << "points " << j << ", " << i;
    const GatedUpProblem p{b.m, b.k, b.u};
    EXPECT_EQ(choose_gated_up_sm90_tile_config(p, kH100, true), b.row) << "M=" << b.m << " K=" << b.k << " U=" << b.u;
    EXPECT_FALSE(kSm90TileConfigs[choose_gated_up_sm90_tile_config(p, kH100)].stream_k);
  }
}

// Named points of the measured grid (three runs of every row, then six more of rows 0 and 3;
// docs/gated_up.md#tuning): stream-K with a workspace where it was >= 2 % ahead of the no-workspace
// row, that row elsewhere.
TEST(HeuristicSm90, WithWorkspacePicksStreamKWhereItWasAhead) {
  constexpr int kStreamK = 3;
  auto ws = [](int64_t m, int64_t k, int64_t u) { return choose_gated_up_sm90_tile_config({m, k, u}, kH100, true); };
  auto plain = [](int64_t m, int64_t k, int64_t u) { return choose_gated_up_sm90_tile_config({m, k, u}, kH100); };
  EXPECT_EQ(ws(256, 16384, 53248), kStreamK);     // Llama-3.1 405B: +2.4 % over row 1 (+5.3, +5.6 % over row 0)
  EXPECT_EQ(ws(16384, 8192, 28672), plain(16384, 8192, 28672));  // 70B: +9.5 % over three runs, +0.3 % over nine
  EXPECT_EQ(ws(16384, 16384, 53248), plain(16384, 16384, 53248));  // 405B: +1.45 % over nine runs
  EXPECT_EQ(ws(2048, 16384, 53248), plain(2048, 16384, 53248));  // 405B: behind over six runs
  EXPECT_EQ(ws(8192, 4608, 36864), plain(8192, 4608, 36864));    // Gemma-2 27B: behind over nine runs
  EXPECT_EQ(ws(8192, 8192, 28672), plain(8192, 8192, 28672));    // 70B: +4.1 % over three runs, -4.7 % over six more
  EXPECT_EQ(ws(1024, 16384, 53248), plain(1024, 16384, 53248));  // 405B: +0.5 % over six runs
  EXPECT_EQ(ws(8192, 3584, 18944), plain(8192, 3584, 18944));    // Qwen2 7B: under the margin
  EXPECT_EQ(ws(512, 16384, 53248), plain(512, 16384, 53248));    // +1.96 %: under the margin
  EXPECT_EQ(ws(4096, 4096, 14336), plain(4096, 4096, 14336));    // Llama-3 8B: +1.0 %
  EXPECT_EQ(ws(300, 16384, 53248), plain(300, 16384, 53248));    // between 256 (stream-K) and 512 (row 1)
  for (int64_t m : {256, 1024, 16384}) EXPECT_FALSE(kSm90TileConfigs[plain(m, 16384, 53248)].stream_k);
  // Another SM count: the table does not apply, so no stream-K.
  EXPECT_EQ(choose_gated_up_sm90_tile_config({1024, 16384, 53248}, kH100Pcie, true),
            choose_gated_up_sm90_tile_config({1024, 16384, 53248}, kH100Pcie));
}

// Over a sweep: with a workspace the choice is the no-workspace one or a stream-K point's
// stream-K row (never a stream-K row the table does not give), and pure.
TEST(HeuristicSm90, WithWorkspaceElsewhereIsTheChoiceWithout) {
  const Sm90MeasuredTable w = sm90_measured_table(kH100, true);
  std::vector<std::pair<int64_t, int64_t>> shapes(std::begin(kLlamaShapes), std::end(kLlamaShapes));
  shapes.push_back({3584, 18944});  // Qwen2 7B
  shapes.push_back({8192, 29568});  // Qwen2 72B
  // A sweep of M, and every stream-K point's M.
  std::vector<int64_t> ms;
  for (int64_t m = 1; m <= 70000; m = m < 64 ? m + 1 : m * 9 / 8) ms.push_back(m);
  for (int i = 0; i < w.n; ++i) ms.push_back(w.points[i].m);
  int stream_k = 0;
  for (const DeviceSpec& dev : {kH100, kH100Pcie})
    for (auto [k, u] : shapes)
      for (int64_t m : ms) {
        const GatedUpProblem p{m, k, u};
        const int c = choose_gated_up_sm90_tile_config(p, dev, true), c0 = choose_gated_up_sm90_tile_config(p, dev);
        ASSERT_TRUE(c >= 0 && c < kNumSm90TileConfigs);
        ASSERT_EQ(c, choose_gated_up_sm90_tile_config(p, dev, true)) << "not pure";
        if (kSm90TileConfigs[c].stream_k) {
          ++stream_k;
          ASSERT_EQ(c, sm90_stream_k_tile_config(w.points, w.n, w.sms, kSm90TileConfigs, kNumSm90TileConfigs, p, dev))
              << "M=" << m << " K=" << k << " U=" << u << ": a stream-K row only at a stream-K point";
        } else {
          ASSERT_EQ(c, c0) << "M=" << m << " K=" << k << " U=" << u;
        }
      }
  EXPECT_GT(stream_k, 0);
}

TEST(HeuristicSm90, TableIsWhatTheKernelSupports) {
  for (const Sm90TileConfigRow& r : kSm90TileConfigs) {
    EXPECT_EQ(r.bm % 64, 0) << "wgmma M atoms are 64 rows";
    EXPECT_TRUE(r.bm == 128 || r.bm == 256 || (r.pingpong && r.bm == 64) || r.split_n)
        << "cooperative tiles: two warpgroups of 64 or 128 rows, or side by side along N (the gating layout of "
           "each row: test_gating_layout_sm90.cu)";
    EXPECT_FALSE(r.split_n && r.pingpong) << "the N split is a cooperative layout";
    EXPECT_EQ((r.bn / 2) % 32, 0) << "the epilogue stores 64- or 128-byte panels of 16-bit outputs";
    EXPECT_LE(r.bn, 256) << "wgmma N <= 256";
    EXPECT_EQ(r.bk, 64) << "one 128-byte swizzle atom of 16-bit K";
    EXPECT_GE(r.cluster_m * r.cluster_n, 1);
    EXPECT_LE(r.cluster_m * r.cluster_n, 2) << "portable cluster sizes only";
  }
}

// The raster the launcher passes: the caller's where forced, else the row's. Row 1 (ping-pong 128x128,
// 2x1 cluster) walks along N: along M it re-read the operands from DRAM at K = 16384
// (docs/gated_up.md#tuning, "The raster of row 1"); rows 0 and 2 keep CUTLASS's order, measured
// the faster for them.
TEST(HeuristicSm90, RasterIsTheRowsUnlessForced) {
  EXPECT_EQ(sm90_raster_for(kSm90TileConfigs[1], Sm90Raster::kAuto), 2);
  EXPECT_EQ(sm90_raster_for(kSm90TileConfigs[0], Sm90Raster::kAuto), 0);
  EXPECT_EQ(sm90_raster_for(kSm90TileConfigs[2], Sm90Raster::kAuto), 0);
  for (const Sm90TileConfigRow& r : kSm90TileConfigs) {
    EXPECT_EQ(sm90_raster_for(r, Sm90Raster::kAlongM), 1);
    EXPECT_EQ(sm90_raster_for(r, Sm90Raster::kAlongN), 2);
  }
  EXPECT_TRUE(sm90_raster_valid(Sm90Raster::kAlongN));
  EXPECT_FALSE(sm90_raster_valid(static_cast<Sm90Raster>(3)));
}

}  // namespace
}  // namespace blockfuse
