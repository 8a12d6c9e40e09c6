// The sm80 tile heuristic (src/gated_up/heuristic_sm80.cpp): a pure function of (M, K, U, device).
// Two kinds of checks, kept apart so a retune only touches the first:
//   * the documented rules, on named cases (M <= 64 -> the 64-row tile; enough 128x256 tiles to
//     cover the SMs -> config 0; otherwise 128x128 for more CTAs), for an H100, an A100 and an Ada
//     GPU — the small-M, large-U case picks differently on them, by design;
//   * invariants any heuristic must keep, over a sweep of M = 1..70000 and the Llama MLP shapes:
//     a valid index, a config that fits the device's shared memory, purity.
#include <gtest/gtest.h>

#include <vector>

#include "blockfuse/gated_up.h"
#include "gated_up/params.h"
#include "gated_up/tile_configs_sm80.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

struct NamedDevice {
  const char* name;
  detail::DeviceSpec spec;
};
// SM count, opt-in shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin), cc.
const NamedDevice kH100{"H100 SXM", {132, 232448, 9, 0}};
const NamedDevice kA100{"A100", {108, 166912, 8, 0}};
const NamedDevice kAda{"Ada (L40S/RTX 4090 class)", {128, 101376, 8, 9}};
const NamedDevice kDevices[] = {kH100, kA100, kAda};

// (K, U) of gated MLPs in use: Llama-2 7B/13B, Llama-3 8B/70B/405B, Llama-3.2 1B/3B.
const std::pair<int64_t, int64_t> kLlamaShapes[] = {{4096, 11008}, {5120, 13824}, {4096, 14336}, {8192, 28672},
                                                    {16384, 53248}, {2048, 8192}, {3072, 8192}};

// Config indices, named by what the table (tile_configs_sm80.h) says they are for.
constexpr int kLarge = 0;     // 128 x 256
constexpr int kMid = 1;       // 128 x 128
constexpr int kSmallM = 2;    // 64 x 128

int64_t tiles(const GatedUpProblem& p, int cfg) {
  const auto c = gated_up_tile_config(cfg);
  return ((p.m + c.block_m - 1) / c.block_m) * ((2 * p.u + c.block_n - 1) / c.block_n);
}

std::vector<int64_t> m_sweep() {
  std::vector<int64_t> ms;
  for (int64_t m = 1; m <= 300; ++m) ms.push_back(m);  // every value around the 64/128 boundaries
  for (int64_t m = 301; m <= 70000; m = m * 9 / 8 + 1) ms.push_back(m);
  ms.push_back(70000);
  return ms;
}

TEST(Heuristic, TableIsConsistent) {
  ASSERT_GE(gated_up_num_tile_configs(), 3);
  for (int i = 0; i < gated_up_num_tile_configs(); ++i) {
    const auto c = gated_up_tile_config(i);
    SCOPED_TRACE(::testing::Message() << "config " << i);
    EXPECT_EQ(c.threads(), 32 * c.warps_m * c.warps_n);
    EXPECT_GE(c.stages, 3);
    EXPECT_EQ(c.block_n % 128, 0) << "the epilogue swizzle needs BN/2 % 64 == 0";
    EXPECT_EQ(c.block_m % (16 * c.warps_m), 0);
    EXPECT_EQ(c.block_n % (16 * c.warps_n), 0);
    EXPECT_TRUE(c.block_k == 32 || c.block_k == 64);
    // The pipeline's shared memory (A and B tiles per stage) and the staged H tile both fit.
    EXPECT_GE(c.smem_bytes(), c.stages * (c.block_m + c.block_n) * c.block_k * 2);
    EXPECT_GE(c.smem_bytes(), c.block_m * (c.block_n / 2) * 2);
    EXPECT_LE(c.smem_bytes(), kH100.spec.max_smem_per_block) << "every config must run on Hopper";
  }
  EXPECT_EQ(gated_up_tile_config(kSmallM).block_m, 64);
  EXPECT_EQ(gated_up_tile_config(kLarge).block_m, 128);
  EXPECT_EQ(gated_up_tile_config(kLarge).block_n, 256);
  EXPECT_EQ(gated_up_tile_config(kMid).block_n, 128);
  EXPECT_LE(gated_up_tile_config(kSmallM).smem_bytes(), 48 * 1024) << "the fallback must fit any sm80+ device";
}

TEST(Heuristic, TileConfigIndexIsChecked) {
  testing::expect_arg_error([] { gated_up_tile_config(-1); }, "index", "-1");
  testing::expect_arg_error([] { gated_up_tile_config(gated_up_num_tile_configs()); }, "index",
                         std::to_string(gated_up_num_tile_configs()));
  testing::expect_arg_error([] { gated_up_tile_config(1 << 30); }, "index");
}

// Rule 1: M <= 64 -> the 64-row tile (halves the wasted MMA rows of a 128-row tile).
TEST(Heuristic, SmallMUsesTheSixtyFourRowTile) {
  for (const auto& d : kDevices)
    for (auto [K, U] : kLlamaShapes)
      for (int64_t m : {1, 2, 7, 16, 33, 63, 64}) {
        const int c = choose_gated_up_sm80_tile_config({m, K, U}, d.spec);
        EXPECT_EQ(gated_up_tile_config(c).block_m, 64) << d.name << " M=" << m << " K=" << K << " U=" << U;
      }
  for (const auto& d : kDevices)
    EXPECT_EQ(gated_up_tile_config(choose_gated_up_sm80_tile_config({65, 4096, 14336}, d.spec)).block_m, 128) << d.name;
}

// Rule 2: prefill-sized problems fill every SM with 128x256 tiles -> config 0.
TEST(Heuristic, LargeProblemsUseTheLargestTile) {
  for (const auto& d : kDevices)
    for (auto [K, U] : kLlamaShapes)
      for (int64_t m : {1024, 4096, 16384, 65536}) {
        const GatedUpProblem p{m, K, U};
        ASSERT_GE(tiles(p, kLarge), d.spec.sm_count);
        EXPECT_EQ(choose_gated_up_sm80_tile_config(p, d.spec), kLarge) << d.name << " M=" << m << " U=" << U;
      }
}

// Rule 3: small M, large U, too few 128x256 tiles for the SMs -> 128x128 (2x the CTAs). The same
// problem lands on either side of the rule depending on the SM count.
TEST(Heuristic, SmallMLargeUDependsOnTheSmCount) {
  const GatedUpProblem p{128, 4096, 14336};  // Llama-3 8B, one 128-row block: 1 x 112 tiles of 128x256
  ASSERT_EQ(tiles(p, kLarge), 112);
  EXPECT_EQ(choose_gated_up_sm80_tile_config(p, kH100.spec), kMid) << "112 tiles < 132 SMs";
  EXPECT_EQ(choose_gated_up_sm80_tile_config(p, kAda.spec), kMid) << "112 tiles < 128 SMs";
  EXPECT_EQ(choose_gated_up_sm80_tile_config(p, kA100.spec), kLarge) << "112 tiles >= 108 SMs";

  const GatedUpProblem q{100, 4096, 8192};  // 1 x 64 tiles: below every device's SM count
  for (const auto& d : kDevices) EXPECT_EQ(choose_gated_up_sm80_tile_config(q, d.spec), kMid) << d.name;
  const GatedUpProblem r{256, 8192, 28672};  // 2 x 224 tiles: above
  for (const auto& d : kDevices) EXPECT_EQ(choose_gated_up_sm80_tile_config(r, d.spec), kLarge) << d.name;
}

// Devices with less shared memory fall back to what fits.
TEST(Heuristic, SmallSharedMemoryFallsBack) {
  const detail::DeviceSpec only_48k{84, 49152, 8, 6};   // hypothetical: only the 48 KB config fits
  const detail::DeviceSpec only_64k{84, 65536, 8, 6};   // configs 1 and 2 fit
  for (int64_t m : {1, 65, 128, 4096, 65536}) {
    EXPECT_EQ(choose_gated_up_sm80_tile_config({m, 4096, 14336}, only_48k), kSmallM) << "M=" << m;
    const int c = choose_gated_up_sm80_tile_config({m, 4096, 14336}, only_64k);
    EXPECT_LE(gated_up_tile_config(c).smem_bytes(), only_64k.max_smem_per_block) << "M=" << m;
  }
}

// Invariants over the sweep: valid, fits, pure, and consistent with the rules' intent (config 0
// only when its tiles cover the SMs; when they don't, the choice gives no fewer CTAs than config 0 —
// equal only where 2U fits one column of tiles either way, e.g. U = 8).
TEST(Heuristic, InvariantsOverASweep) {
  const std::vector<int64_t> ms = m_sweep();
  std::vector<std::pair<int64_t, int64_t>> shapes(std::begin(kLlamaShapes), std::end(kLlamaShapes));
  shapes.insert(shapes.end(), {{1000, 8}, {8, 1000}, {64, 64}});  // tiny U / tiny K corners
  for (const auto& d : kDevices)
    for (auto [K, U] : shapes)
      for (int64_t m : ms) {
        const GatedUpProblem p{m, K, U};
        const int c = choose_gated_up_sm80_tile_config(p, d.spec);
        ASSERT_GE(c, 0);
        ASSERT_LT(c, gated_up_num_tile_configs());
        const auto cfg = gated_up_tile_config(c);
        SCOPED_TRACE(::testing::Message() << d.name << " M=" << m << " K=" << K << " U=" << U << " -> config " << c);
        ASSERT_LE(cfg.smem_bytes(), d.spec.max_smem_per_block);
        ASSERT_EQ(c, choose_gated_up_sm80_tile_config(p, d.spec)) << "must be a pure function";
        if (m <= 64) ASSERT_EQ(cfg.block_m, 64);
        if (c == kLarge) ASSERT_GE(tiles(p, kLarge), d.spec.sm_count);
        if (m > 64 && tiles(p, kLarge) < d.spec.sm_count) ASSERT_GE(tiles(p, c), tiles(p, kLarge));
      }
}

// What kAuto runs (choose_gated_up_kernel): the decode kernel at 1..32 rows on every architecture
// unless a tile config is forced; above, sm90a on compute capability 9.0 exactly when built.
TEST(KernelChoice, DecodeUpTo32RowsThenTheGemmKernels) {
  for (bool has90 : {false, true})
    for (auto [major, minor] : {std::pair{8, 0}, std::pair{8, 9}, std::pair{9, 0}, std::pair{10, 0}, std::pair{12, 0}}) {
      SCOPED_TRACE(::testing::Message() << "sm90 built " << has90 << ", cc " << major << "." << minor);
      const GatedUpKernel gemm = has90 && major == 9 && minor == 0 ? GatedUpKernel::kSm90 : GatedUpKernel::kSm80;
      for (int64_t m : {1, 2, 16, 31, 32}) {
        EXPECT_EQ(choose_gated_up_kernel(m, -1, has90, major, minor), GatedUpKernel::kDecode) << "M=" << m;
        EXPECT_EQ(choose_gated_up_kernel(m, 0, has90, major, minor), gemm) << "M=" << m << " with a forced tile";
      }
      for (int64_t m : {int64_t(33), int64_t(64), int64_t(4096), int64_t(1) << 30}) EXPECT_EQ(choose_gated_up_kernel(m, -1, has90, major, minor), gemm) << "M=" << m;
    }
}

}  // namespace
}  // namespace blockfuse
