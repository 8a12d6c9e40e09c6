// The sm80 tile heuristic: a pure function of (M, K, U, device). Checks its documented rules
// (heuristic.cpp) and invariants over a sweep, for an H100, an A100 and an Ada GPU.
#include <gtest/gtest.h>

#include "blockfuse/gated_up.h"

namespace blockfuse {
namespace {

const DeviceSpec kH100{132, 232448, 9, 0};
const DeviceSpec kA100{108, 166912, 8, 0};
const DeviceSpec kAda{128, 101376, 8, 9};  // e.g. L40S / RTX 4090: 99 KB per block

int64_t tiles(const GatedUpProblem& p, int cfg) {
  const auto c = gated_up_tile_config(cfg);
  return ((p.m + c.block_m - 1) / c.block_m) * ((2 * p.u + c.block_n - 1) / c.block_n);
}

TEST(Heuristic, TableIsConsistent) {
  ASSERT_GE(gated_up_num_tile_configs(), 3);
  for (int i = 0; i < gated_up_num_tile_configs(); ++i) {
    const auto c = gated_up_tile_config(i);
    EXPECT_EQ(c.threads(), 32 * c.warps_m * c.warps_n);
    EXPECT_GE(c.stages, 3) << i;
    EXPECT_EQ(c.block_n % 128, 0) << i;
    EXPECT_GT(c.smem_bytes(), 0) << i;
    EXPECT_LE(c.smem_bytes(), kH100.max_smem_per_block) << i;
  }
  EXPECT_THROW(gated_up_tile_config(-1), Error);
  EXPECT_THROW(gated_up_tile_config(gated_up_num_tile_configs()), Error);
  try {
    gated_up_tile_config(99);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'index'"), std::string::npos) << e.what();
  }
}

TEST(Heuristic, SmallMUsesTheSixtyFourRowTile) {
  for (int64_t m : {1, 7, 32, 64}) EXPECT_EQ(gated_up_tile_config(choose_gated_up_tile_config({m, 4096, 14336}, kH100)).block_m, 64) << m;
  EXPECT_EQ(gated_up_tile_config(choose_gated_up_tile_config({65, 4096, 14336}, kH100)).block_m, 128);
}

TEST(Heuristic, LargeProblemsUseTheLargestTile) {
  for (int64_t m : {1024, 4096, 16384, 65536}) {
    const int c = choose_gated_up_tile_config({m, 4096, 14336}, kH100);
    EXPECT_EQ(c, 0) << m;
  }
}

TEST(Heuristic, FewTilesSwitchToMoreCtas) {
  // M = 128, U = 8192: config 0 gives 1 x 64 = 64 tiles < 132 SMs -> the 128x128 tile (128 CTAs).
  const GatedUpProblem p{128, 4096, 8192};
  ASSERT_LT(tiles(p, 0), kH100.sm_count);
  EXPECT_EQ(choose_gated_up_tile_config(p, kH100), 1);
}

TEST(Heuristic, InvariantsOverASweep) {
  for (const DeviceSpec& dev : {kH100, kA100, kAda}) {
    for (int64_t m : {1, 2, 63, 64, 65, 127, 128, 129, 512, 1000, 4097, 16384, 70000}) {
      for (auto ku : {std::pair<int64_t, int64_t>{4096, 14336}, {8192, 28672}, {16384, 53248}, {4608, 36864}, {1000, 8}, {8, 1000}}) {
        const GatedUpProblem p{m, ku.first, ku.second};
        const int c = choose_gated_up_tile_config(p, dev);
        ASSERT_GE(c, 0);
        ASSERT_LT(c, gated_up_num_tile_configs());
        EXPECT_LE(gated_up_tile_config(c).smem_bytes(), dev.max_smem_per_block) << "M=" << m << " cc " << dev.cc_major << dev.cc_minor;
        EXPECT_EQ(c, choose_gated_up_tile_config(p, dev)) << "must be a pure function";
      }
    }
  }
}

TEST(Heuristic, AdaNeverGetsAConfigThatDoesNotFit) {
  // Config 3 (144 KB) exceeds Ada's 99 KB; nothing the heuristic returns may need it.
  ASSERT_GT(gated_up_tile_config(3).smem_bytes(), kAda.max_smem_per_block);
  for (int64_t m = 1; m < 70000; m = m * 3 + 1) EXPECT_NE(choose_gated_up_tile_config({m, 4096, 14336}, kAda), 3);
}

}  // namespace
}  // namespace blockfuse
