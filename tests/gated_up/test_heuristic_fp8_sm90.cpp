// The FP8 sm90a tile heuristic (src/gated_up/heuristic_fp8_sm90.cpp): a pure function of (M, K, U,
// device) over the FP8 table (two kernels, three rows: row 2 is row 1 along N): the measured table's
// row where it has one, else the cost model's. Named cases of the model (the large cooperative tile on
// the benchmark's grid, ping-pong at a 512-token chunk of Llama-3 8B where the 16-bit sweep measured it
// ahead), the committed
// measured table followed at its points, and invariants (valid index, purity, degenerate inputs)
// over a sweep.
#include <gtest/gtest.h>

#include <utility>

#include "gated_up/tile_configs_fp8_sm90.h"

namespace blockfuse {
namespace {

using detail::DeviceSpec;

// SM count, opt-in shared memory per block, cc, peak DRAM GB/s (test_heuristic_sm90.cpp says whence).
const DeviceSpec kH100{132, 232448, 9, 0, 3352.3};
const DeviceSpec kH200{132, 232448, 9, 0, 4917.0};
const DeviceSpec kH100Pcie{114, 232448, 9, 0, 2039.0};

constexpr int kLarge = 0;     // cooperative 128x256x128, cluster 2x1
constexpr int kPingpong = 1;  // ping-pong 128x128x128, cluster 2x1
constexpr int kPingpongAlongN = 2;  // row 1 walking its tiles along N (the same kernel)

// The cost model alone (what the heuristic falls back to off the measured table).
int model(const GatedUpProblem& p, const DeviceSpec& dev) {
  return sm90_cheapest_tile_config(kSm90Fp8TileConfigs, kNumSm90Fp8TileConfigs, p, dev);
}

TEST(HeuristicFp8Sm90, TableRowsAreWhatTheKernelNeeds) {
  for (const Sm90TileConfigRow& r : kSm90Fp8TileConfigs) {
    EXPECT_EQ(r.bk, 128) << "128 bytes of e4m3 per stage row: the 128-byte TMA swizzle";
    EXPECT_EQ((r.bn / 2) % 64, 0) << "the epilogue's panels need BN/2 a multiple of 64";
    EXPECT_EQ(r.bm % 64, 0);
  }
  EXPECT_FALSE(kSm90Fp8TileConfigs[kLarge].pingpong);
  EXPECT_TRUE(kSm90Fp8TileConfigs[kPingpong].pingpong);
}

// Row 2 is row 1 in the other tile order: the same kernel (one instantiation, sm90_fp8_kernel_of), a
// different launch argument; the cost model, which has no term for the order, never picks it (ties go to
// the lower row), so only a measured table places it.
TEST(HeuristicFp8Sm90, RowAlongNSharesRowOnesKernel) {
  EXPECT_EQ(kNumSm90Fp8Kernels, 2);
  EXPECT_EQ(sm90_fp8_kernel_of(kLarge), kLarge);
  EXPECT_EQ(sm90_fp8_kernel_of(kPingpong), kPingpong);
  EXPECT_EQ(sm90_fp8_kernel_of(kPingpongAlongN), kPingpong);
  EXPECT_TRUE(sm90_fp8_same_kernel(kSm90Fp8TileConfigs[kPingpong], kSm90Fp8TileConfigs[kPingpongAlongN]));
  EXPECT_FALSE(sm90_fp8_same_kernel(kSm90Fp8TileConfigs[kLarge], kSm90Fp8TileConfigs[kPingpong]));
  EXPECT_FALSE(kSm90Fp8TileConfigs[kPingpong].raster_along_n);
  EXPECT_TRUE(kSm90Fp8TileConfigs[kPingpongAlongN].raster_along_n);
  EXPECT_EQ(sm90_raster_for(kSm90Fp8TileConfigs[kPingpongAlongN], Sm90Raster::kAuto), 2);
  EXPECT_EQ(sm90_raster_for(kSm90Fp8TileConfigs[kPingpongAlongN], Sm90Raster::kAlongM), 1);
  for (const DeviceSpec& dev : {kH100, kH200, kH100Pcie})
    for (int64_t m : {128, 512, 1000, 2048, 4096, 16384, 65536})
      for (auto [k, u] : {std::pair<int64_t, int64_t>{4096, 14336}, {8192, 28672}, {5120, 13824}})
        EXPECT_NE(model({m, k, u}, dev), kPingpongAlongN) << "M=" << m << " K=" << k;
  // Where the H200's table places it: Llama-3 8B x 2048 (0.998-1.018x cuBLASLt against row 1's
  // 0.988-0.990x, results/gated_up_fp8.json raster_h200).
  EXPECT_EQ(choose_gated_up_fp8_sm90_tile_config({2048, 4096, 14336}, kH200), kPingpongAlongN);
  EXPECT_EQ(choose_gated_up_fp8_sm90_tile_config({4096, 4096, 14336}, kH200), kPingpong);
}

TEST(HeuristicFp8Sm90, BenchmarkGridPicksTheLargeTile) {
  for (auto [k, u] : {std::pair<int64_t, int64_t>{4096, 14336}, {8192, 28672}})
    for (int64_t m : {1024, 4096, 16384})
      EXPECT_EQ(model({m, k, u}, kH100), kLarge) << "M=" << m << " K=" << k;
}

TEST(HeuristicFp8Sm90, SmallChunkAtSmallKPrefersPingpong) {
  // 512 tokens of Llama-3 8B: 4 x 112 = 448 large tiles = 3.4 waves (4) against 896 ping-pong
  // tiles = 6.8 waves (7 half-size waves = 3.5 large ones), and at K <= 4096 ping-pong's rate is
  // 0.95 of the large tile's: ping-pong. At K = 8192 its rate is 0.80: the large tile.
  EXPECT_EQ(model({512, 4096, 14336}, kH100), kPingpong);
  EXPECT_EQ(model({512, 8192, 28672}, kH100), kLarge);
}

// The committed FP8 tables (kSm90Fp8Measured and the H200's kSm90Fp8MeasuredH200, from
// scripts/tile-table --emit-cpp): well formed, and the heuristic returns a table's row at each of its
// points on a device of its class and the model's on another SM count. An empty table passes (only
// the shape checks apply).
void follows_table(const DeviceSpec& dev) {
  const Sm90MeasuredTable t = sm90_fp8_measured_table(dev);
  ASSERT_GE(t.n, 0);
  ASSERT_TRUE(t.n == 0 || t.points != nullptr);
  EXPECT_EQ(t.sms, dev.sm_count);
  for (int i = 0; i < t.n; ++i) {
    const Sm90MeasuredPoint& q = t.points[i];
    ASSERT_TRUE(q.k > 0 && q.k % 16 == 0 && q.u > 0 && q.u % 8 == 0 && q.m > 0) << "point " << i;
    ASSERT_TRUE(q.row >= 0 && q.row < kNumSm90Fp8TileConfigs) << "point " << i << ": row " << q.row;
    for (int j = 0; j < i; ++j)
      ASSERT_FALSE(t.points[j].k == q.k && t.points[j].u == q.u && t.points[j].m == q.m) << "points " << j << ", " << i;
    const GatedUpProblem p{q.m, q.k, q.u};
    EXPECT_EQ(choose_gated_up_fp8_sm90_tile_config(p, dev), q.row) << "M=" << q.m << " K=" << q.k << " U=" << q.u;
    EXPECT_EQ(choose_gated_up_fp8_sm90_tile_config(p, kH100Pcie), model(p, kH100Pcie)) << "another SM count: the model";
  }
}

TEST(HeuristicFp8Sm90, FollowsTheCommittedTable) {
  follows_table(kH100);
  follows_table(kH200);
}

// The H200 reads its own table (sm90_reads_h200_tables): Llama-3 70B x 4096 tokens takes the large
// tile on the H100 (its sweep) and ping-pong on the H200 (1.05x cuBLASLt against the large tile's
// 0.97x, three runs; docs/gated_up_fp8.md#tuning).
TEST(HeuristicFp8Sm90, DeviceClassPicksTheTable) {
  EXPECT_NE(sm90_fp8_measured_table(kH200).points, sm90_fp8_measured_table(kH100).points);
  EXPECT_EQ(choose_gated_up_fp8_sm90_tile_config({4096, 8192, 28672}, kH100), kLarge);
  EXPECT_EQ(choose_gated_up_fp8_sm90_tile_config({4096, 8192, 28672}, kH200), kPingpong);
}

TEST(HeuristicFp8Sm90, ValidPureAndTotal) {
  for (const DeviceSpec& dev : {kH100, kH200, kH100Pcie, DeviceSpec{1, 232448, 9, 0}, DeviceSpec{0, 0, 9, 0}})
    for (int64_t m : {int64_t(0), int64_t(1), int64_t(7), int64_t(128), int64_t(129), int64_t(1000), int64_t(4097),
                      int64_t(65536), int64_t(1) << 30})
      for (auto [k, u] : {std::pair<int64_t, int64_t>{16, 8}, {4096, 14336}, {8192, 28672}, {16384, 53248}}) {
        const int c = choose_gated_up_fp8_sm90_tile_config({m, k, u}, dev);
        ASSERT_GE(c, 0);
        ASSERT_LT(c, kNumSm90Fp8TileConfigs);
        ASSERT_EQ(c, choose_gated_up_fp8_sm90_tile_config({m, k, u}, dev)) << "not pure";
      }
}

}  // namespace
}  // namespace blockfuse
