// CPU tests of the fused MLP (src/fused_mlp/): the heuristic, the workspace arithmetic, the
// argument errors (raised before any CUDA call, so they run without a GPU; the pointers are fake
// addresses never dereferenced), the fp64 reference on a hand-checked case, the host transpose and
// the list -> neuron mask helper.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "blockfuse/fused_mlp.h"
#include "fused_mlp/params.h"
#include "fused_mlp/reference.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;
using testing::HostMatrix;

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

TEST(FusedMlpHeuristic, PicksAValidBlockSize) {
  for (int64_t m : {1, 4, 16, 32})
    for (int64_t groups : {1, 10, 90, 224, 896, 1792})
      for (int sms : {1, 108, 132}) {
        const int nb = fused_mlp_heuristic(m, 4096, groups, sms).neurons_per_block;
        EXPECT_TRUE(nb == 16 || nb == 32 || nb == 64) << nb;
      }
  // Dense Llama-3 8B on an H100: the largest blocks (fewest fp32 flushes).
  EXPECT_EQ(fused_mlp_heuristic(16, 4096, 896, 132).neurons_per_block, 64);
  // A 90 %-sparse union list at M = 1: 90 groups; 16-neuron blocks put them on more SMs.
  EXPECT_EQ(fused_mlp_heuristic(1, 4096, 90, 132).neurons_per_block, 16);
  expect_arg_error([] { fused_mlp_heuristic(33, 4096, 10, 132); }, "m");
  expect_arg_error([] { fused_mlp_heuristic(1, 4096, 10, 0); }, "sm_count");
}

// Split launches (params.h): a union list's 16-neuron groups are shared by a 2-CTA cluster only
// while the split units fit one wave — at most one group per SM with 8-warp blocks (two an SM), half
// that with 16 (one an SM), a quarter with 32 — and only at M <= 8 (one token tile).
TEST(FusedMlpHeuristic, SplitsShortListsOnly) {
  for (int sms : {1, 108, 132})
    for (int64_t listed : {int64_t(0), int64_t(1), int64_t(sms) - 1, int64_t(sms), int64_t(sms) + 1, int64_t(4) * sms}) {
      EXPECT_EQ(fmlp::split_groups(listed, sms), listed <= sms) << listed << " groups, " << sms << " SMs";
      EXPECT_EQ(fmlp::split_groups(listed, sms, 8), listed <= sms) << listed << " groups, " << sms << " SMs";
      EXPECT_EQ(fmlp::split_groups(listed, sms, 16), 2 * listed <= sms) << listed << " groups, " << sms << " SMs, 16 warps";
      EXPECT_EQ(fmlp::split_groups(listed, sms, 32), 4 * listed <= sms) << listed << " groups, " << sms << " SMs, 32 warps";
    }
  // Llama-3 8B on an H100 (448 blocks of 32 neurons, 2 groups each): 90 % sparse (44 blocks) splits
  // at 8 warps, not at 16; 95 % (22 blocks) at both; 75 % at neither.
  EXPECT_TRUE(fmlp::split_groups(2 * 44, 132));
  EXPECT_FALSE(fmlp::split_groups(2 * 44, 132, 16));
  EXPECT_TRUE(fmlp::split_groups(2 * 22, 132, 16));
  EXPECT_FALSE(fmlp::split_groups(2 * 112, 132));
  EXPECT_FALSE(fmlp::split_groups(2 * 112, 132, 16));
  EXPECT_EQ(fmlp::kSplitMaxRows, 8);
  EXPECT_EQ(FusedMlpConfig{}.split, fmlp::SplitRule::kAuto);  // the default
  // The launch (clusters of 2) and the device's choice, shared by the launcher and the bench.
  using fmlp::SplitRule;
  for (int64_t m : {1, 8, 9, 32})
    for (SplitRule rule : {SplitRule::kAuto, SplitRule::kNever, SplitRule::kAlways})
      for (bool sm90 : {false, true}) {
        const bool launch = m <= 8 && rule != SplitRule::kNever && sm90;
        EXPECT_EQ(fmlp::split_launch(m, rule, sm90), launch) << m << " rows, rule " << int(rule) << ", sm90 " << sm90;
        for (int64_t listed : {1, 66, 67, 132, 133, 528}) {
          EXPECT_EQ(fmlp::split_units(m, rule, sm90, listed, 132), launch && (rule == SplitRule::kAlways || listed <= 132))
              << m << " rows, rule " << int(rule) << ", sm90 " << sm90 << ", " << listed << " groups";
          EXPECT_EQ(fmlp::split_units(m, rule, sm90, listed, 132, 16), launch && (rule == SplitRule::kAlways || listed <= 66))
              << m << " rows, rule " << int(rule) << ", sm90 " << sm90 << ", " << listed << " groups, 16 warps";
        }
      }
}

// The block-width override (FusedMlpConfig::block_warps): the rule (0) by default, 8 and 16
// accepted, anything else a named error; a forced width applies at M <= 8 only. The split-rule
// override likewise: kAuto by default, an unknown rule a named error.
TEST(FusedMlpHeuristic, BlockWarpsOverride) {
  EXPECT_EQ(FusedMlpConfig{}.block_warps, fmlp::kAutoBlockWarps);
  EXPECT_EQ(fmlp::kWarps, 8);
  for (int w : {16, 8, 0}) {
    EXPECT_TRUE(fmlp::valid_block_warps(w)) << w;
    FusedMlpConfig c;
    c.block_warps = w;
    EXPECT_GT(fused_mlp_workspace_size(1, 4096, 256, c), 0u) << w;
    EXPECT_EQ(fmlp::launch_block_warps(8, 9, false, false, 0.0, w), w == 0 ? fmlp::kWarps : w);
    EXPECT_EQ(fmlp::launch_block_warps(9, 9, true, true, 25.0, w), fmlp::kWarps) << "M > 8: 8 warps whatever is forced";
  }
  for (int bad : {4, 12, 24, 32, 64, -8}) {
    EXPECT_FALSE(fmlp::valid_block_warps(bad)) << bad;
    FusedMlpConfig c;
    c.block_warps = bad;
    expect_arg_error([&] { fused_mlp_workspace_size(1, 4096, 256, c); }, "config", "0 (the rule), 8 or 16");
  }
  FusedMlpConfig c;
  c.split = MlpSplitRule(3);
  expect_arg_error([&] { fused_mlp_workspace_size(1, 4096, 256, c); }, "config", "kAuto, kNever or kAlways");
}

// The rule (params.h: auto_block_warps; docs/fused_mlp.md#tuning): 16 warps for union lists with the heuristic's block size and in the
// deterministic mode at M <= 8 on sm_90+, and for dense and per-token grids where the peak DRAM
// bandwidth is at most 30 GB/s a SM (the H100 SXM); 8 for dense and per-token grids with atomics on
// faster memory (the H200) or unknown bandwidth, for more token tiles, and below sm_90.
TEST(FusedMlpHeuristic, AutoBlockWarps) {
  const double h100 = fmlp::dram_gbps_per_sm(3352.3, 132), h200 = fmlp::dram_gbps_per_sm(4800.0, 132);
  EXPECT_NEAR(h100, 25.4, 0.1);
  EXPECT_DOUBLE_EQ(fmlp::dram_gbps_per_sm(3352.3, 0), 0.0) << "no SM count: unknown";
  for (int64_t m : {1, 4, 8}) {
    EXPECT_EQ(fmlp::auto_block_warps(m, 9, false, false, h100), 16) << "M = " << m << ", dense on an H100";
    EXPECT_EQ(fmlp::auto_block_warps(m, 9, false, false, h200), fmlp::kWarps) << "M = " << m << ", dense on an H200";
    EXPECT_EQ(fmlp::auto_block_warps(m, 9, false, false, 0.0), fmlp::kWarps) << "M = " << m << ", unknown bandwidth";
    EXPECT_EQ(fmlp::auto_block_warps(m, 9, true, false, h200), 16) << "M = " << m << ", union list on an H200";
    EXPECT_EQ(fmlp::auto_block_warps(m, 8, false, false, h100), fmlp::kWarps) << "M = " << m << ", sm_80/86/89";
  }
  for (int64_t m : {9, 16, 32}) EXPECT_EQ(fmlp::auto_block_warps(m, 9, false, false, h100), fmlp::kWarps) << "M = " << m;

  for (int64_t m : {1, 4, 8}) {
    EXPECT_EQ(fmlp::auto_block_warps(m, 9, true), 16) << "M = " << m;
    EXPECT_EQ(fmlp::auto_block_warps(m, 10, true), 16) << "M = " << m;
    EXPECT_EQ(fmlp::auto_block_warps(m, 9, false), fmlp::kWarps) << "M = " << m << ", dense or per-token";
    EXPECT_EQ(fmlp::auto_block_warps(m, 8, true), fmlp::kWarps) << "M = " << m << ", sm_80/86/89";
    EXPECT_EQ(fmlp::auto_block_warps(m, 9, false, true), 16) << "M = " << m << ", deterministic";
    EXPECT_EQ(fmlp::auto_block_warps(m, 9, true, true), 16) << "M = " << m << ", deterministic union list";
    EXPECT_EQ(fmlp::auto_block_warps(m, 8, false, true), fmlp::kWarps) << "M = " << m << ", deterministic, sm_80/86/89";
  }
  for (int64_t m : {9, 16, 32}) {
    EXPECT_EQ(fmlp::auto_block_warps(m, 9, true), fmlp::kWarps) << "M = " << m;
    EXPECT_EQ(fmlp::auto_block_warps(m, 9, false, true), fmlp::kWarps) << "M = " << m << ", deterministic";
  }
}

TEST(FusedMlpWorkspace, Arithmetic) {
  // Atomic: counters (ceil(K / 64) ints, rounded to 256 bytes) + an fp32 [M, K] accumulator.
  EXPECT_EQ(fused_mlp_workspace_size(4, 4096, 896, FusedMlpConfig{}), 256u + 4u * 4096 * 4);
  // Deterministic, 32-neuron blocks: after the counters and the largest atomic accumulator
  // ([32, K] fp32, so one workspace serves both reductions), a flag per block and the count of blocks
  // taking part (rounded to 256 bytes) + [blocks, M, K] fp32 slots.
  const size_t blocks = 896 / 2;
  EXPECT_EQ(fused_mlp_workspace_size(2, 4096, 896, FusedMlpConfig{32, MlpReduction::kDeterministic}),
            256u + 32u * 4096 * 4 + ((blocks + 1) * 4 + 255) / 256 * 256 + blocks * 2 * 4096 * 4);
  // 64 blocks: 65 ints take a second 256-byte unit.
  EXPECT_EQ(fused_mlp_workspace_size(1, 64, 64 * 2, FusedMlpConfig{32, MlpReduction::kDeterministic}),
            256u + 32u * 64 * 4 + 512u + 64u * 1 * 64 * 4);
  EXPECT_EQ(fused_mlp_workspace_size(0, 4096, 896, FusedMlpConfig{}), 0u);
  expect_arg_error([] { fused_mlp_workspace_size(33, 64, 4, FusedMlpConfig{}); }, "m");
  expect_arg_error([] { fused_mlp_workspace_size(1, 60, 4, FusedMlpConfig{}); }, "k");
  expect_arg_error([] { fused_mlp_workspace_size(1, 64, 4, FusedMlpConfig{24, MlpReduction::kAtomic}); }, "config");
}

// The deterministic sum's lanes per output quad (params.h: sum_lanes, sum_grid): the fewest powers of
// two that give 2048 threads an SM, at most 32 and at most the blocks summed; the grid covers every quad.
TEST(FusedMlpDeterministicSum, SumLanes) {
  EXPECT_EQ(fmlp::sum_lanes(1, 4096, 224, 132), 32);   // 1024 quads: 32 lanes give 32768 threads, < 270336
  EXPECT_EQ(fmlp::sum_lanes(32, 8192, 448, 132), 8);   // 65536 quads: x 4 = 262144 < 270336, x 8 is enough
  EXPECT_EQ(fmlp::sum_lanes(1, 4096, 5, 132), 4);      // no more lanes than blocks
  EXPECT_EQ(fmlp::sum_lanes(1, 4096, 1, 132), 1);
  EXPECT_EQ(fmlp::sum_lanes(32, 1 << 16, 448, 1), 1);  // enough quads already
  for (int64_t m : {1, 3, 8, 17, 32})
    for (int64_t k : {8, 64, 4104, 8192})
      for (int64_t blocks : {1, 2, 7, 64, 448}) {
        const int lanes = fmlp::sum_lanes(m, k, blocks, 132);
        ASSERT_TRUE(lanes >= 1 && lanes <= 32 && (lanes & (lanes - 1)) == 0) << lanes;
        ASSERT_LE(lanes, std::max<int64_t>(blocks, 1));
        const int64_t quads = m * (k / 4), threads = fmlp::sum_grid(m, k, lanes) * fmlp::kSumThreads;
        ASSERT_GE(threads / 32 * (32 / lanes), quads) << "M=" << m << " K=" << k;          // every quad
        ASSERT_LT(threads - fmlp::kSumThreads, (quads * lanes + 31) / 32 * 32) << "M=" << m;  // no spare block
      }
}

class FusedMlpArgs : public ::testing::TestWithParam<DType> {
 protected:
  // A valid dense call (M = 5, K = 64, U = 32) with an explicit configuration, so the workspace
  // check runs before any device query.
  struct Call {
    ConstMatrix x, wgu, wd;
    Matrix y;
    Activation act = Activation::kSiLU;
    void* ws = nullptr;
    size_t ws_bytes = 0;
    FusedMlpConfig cfg{32, MlpReduction::kAtomic};
    void operator()() const { fused_mlp(x, wgu, wd, y, act, ws, ws_bytes, cfg); }
  };
  Call valid() const {
    const DType dt = GetParam();
    Call c;
    c.x = ConstMatrix{fake(1), dt, 5, 64, 72};
    c.wgu = ConstMatrix{fake(2), dt, 64, 64, 64};
    c.wd = ConstMatrix{fake(3), dt, 32, 64, 64};
    c.y = Matrix{fake(4), dt, 5, 64, 65};
    c.ws = fake(5);
    c.ws_bytes = fused_mlp_workspace_size(5, 64, 2, c.cfg);
    return c;
  }
  DType other() const { return GetParam() == DType::kBF16 ? DType::kFP16 : DType::kBF16; }
};

TEST_P(FusedMlpArgs, Shapes) {
  { Call c = valid(); c.x.rows = 33; c.y.rows = 33; expect_arg_error(c, "x", "33"); }
  { Call c = valid(); c.x.rows = 0; c.y.rows = 0; expect_arg_error(c, "x", "1 <= M"); }
  { Call c = valid(); c.x.cols = 60; expect_arg_error(c, "x", "K % 8"); }
  { Call c = valid(); c.wgu.cols = 56; expect_arg_error(c, "w_gate_up", "56"); }
  { Call c = valid(); c.wd.cols = 56; expect_arg_error(c, "w_down_t", "56"); }
  { Call c = valid(); c.wd.rows = 24; c.wgu.rows = 48; expect_arg_error(c, "w_down_t", "U % 16"); }
  { Call c = valid(); c.wgu.rows = 66; expect_arg_error(c, "w_gate_up", "2U"); }
  { Call c = valid(); c.y.rows = 4; expect_arg_error(c, "y", "rows"); }
  { Call c = valid(); c.y.cols = 63; expect_arg_error(c, "y", "cols"); }
  { Call c = valid(); c.act = Activation(7); expect_arg_error(c, "act", "7"); }
}

TEST_P(FusedMlpArgs, DtypesAlignmentOverlapWorkspace) {
  { Call c = valid(); c.wd.dtype = other(); expect_arg_error(c, "w_down_t"); }
  { Call c = valid(); c.y.dtype = other(); expect_arg_error(c, "y"); }
  { Call c = valid(); c.x.data = static_cast<char*>(const_cast<void*>(c.x.data)) + 2; expect_arg_error(c, "x", "aligned"); }
  { Call c = valid(); c.wgu.ld = 68; expect_arg_error(c, "w_gate_up"); }
  { Call c = valid(); c.y.data = const_cast<void*>(c.x.data); expect_arg_error(c, "y", "overlap"); }
  { Call c = valid(); c.ws_bytes -= 4; expect_arg_error(c, "workspace_bytes"); }
  { Call c = valid(); c.ws = nullptr; expect_arg_error(c, "workspace", "null"); }
  { Call c = valid(); c.ws = static_cast<char*>(c.ws) + 8; expect_arg_error(c, "workspace", "aligned"); }
  { Call c = valid(); c.cfg.neurons_per_block = 48; expect_arg_error(c, "config", "48"); }
}

TEST_P(FusedMlpArgs, SparseLists) {
  const Call c = valid();
  auto* idx = static_cast<const int32_t*>(fake(6));
  auto* cnt = static_cast<const int32_t*>(fake(7));
  auto sparse = [&](NeuronBlockList l) {
    return [=] { fused_mlp_sparse(c.x, c.wgu, c.wd, c.y, c.act, l, c.ws, c.ws_bytes, c.cfg); };
  };
  expect_arg_error(sparse({idx, cnt, 1, 24}), "blocks", "16, 32 or 64");
  expect_arg_error(sparse({idx, cnt, 1, 64}), "blocks", "dividing U");  // U = 32
  expect_arg_error(sparse({idx, cnt, 3, 16}), "blocks", "capacity");
  expect_arg_error(sparse({idx, nullptr, 1, 16}), "blocks.count", "null");
  expect_arg_error(sparse({nullptr, cnt, 1, 16}), "blocks.indices", "null");
  auto per_token = [&](PerTokenNeuronBlocks l) {
    return [=] { fused_mlp_sparse(c.x, c.wgu, c.wd, c.y, c.act, l, c.ws, c.ws_bytes, c.cfg); };
  };
  expect_arg_error(per_token({idx, cnt, 2, 20}), "blocks", "16, 32 or 64");
  expect_arg_error(per_token({idx, cnt, 3, 16}), "blocks", "ld");
  expect_arg_error(per_token({idx, nullptr, 2, 16}), "blocks.counts", "null");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedMlpArgs, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(FusedMlpReference, HandChecked) {
  // K = 2, U = 2, M = 1: x = [1, 2]; up_0 = [1, 0], gate_0 = [0, 1], up_1 = [0.5, 0.5], gate_1 = [-1, 0].
  HostMatrix x(DType::kBF16, 1, 2), wgu(DType::kBF16, 4, 2), wd(DType::kBF16, 2, 2);
  x.set(0, 0, 1); x.set(0, 1, 2);
  const float g[4][2] = {{1, 0}, {0, 1}, {0.5f, 0.5f}, {-1, 0}};
  for (int r = 0; r < 4; ++r) for (int c = 0; c < 2; ++c) wgu.set(r, c, g[r][c]);
  wd.set(0, 0, 1); wd.set(0, 1, -1); wd.set(1, 0, 2); wd.set(1, 1, 0.5f);
  double y[2], a[2];
  fmlp::reference(x.view(), wgu.view(), wd.view(), Activation::kSiLU, nullptr, y, 2, a);
  const auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  const double h0 = silu(2.0) * 1.0, h1 = silu(-1.0) * 1.5;
  EXPECT_NEAR(y[0], h0 * 1 + h1 * 2, 1e-12);
  EXPECT_NEAR(y[1], h0 * -1 + h1 * 0.5, 1e-12);
  EXPECT_NEAR(a[0], std::fabs(h0) + std::fabs(2 * h1), 1e-12);
  // Neuron 1 masked off for the token.
  const unsigned char mask[2] = {1, 0};
  fmlp::reference(x.view(), wgu.view(), wd.view(), Activation::kSiLU, mask, y, 2);
  EXPECT_NEAR(y[0], h0, 1e-12);
}

TEST(FusedMlpLayout, TransposeHostAndMask) {
  HostMatrix d(DType::kFP16, 3, 5), t(DType::kFP16, 5, 3);
  for (int r = 0; r < 3; ++r) for (int c = 0; c < 5; ++c) d.set(r, c, float(10 * r + c));
  transpose_down_proj_host(d.view(), t.view());
  for (int r = 0; r < 3; ++r) for (int c = 0; c < 5; ++c) EXPECT_EQ(t.at(c, r), d.at(r, c));
  expect_arg_error([&] { transpose_down_proj_host(d.view(), HostMatrix(DType::kFP16, 3, 5).view()); }, "out", "[U, K]");
  const int32_t idx[4] = {1, -1, 0, 1}, counts[2] = {1, 2};
  unsigned char mask[2 * 4];
  fmlp::neuron_mask_from_blocks(idx, counts, 2, true, 2, 4, 2, mask);
  const unsigned char want[8] = {0, 0, 1, 1, 1, 1, 1, 1};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(mask[i], want[i]) << i;
}

}  // namespace
}  // namespace blockfuse
