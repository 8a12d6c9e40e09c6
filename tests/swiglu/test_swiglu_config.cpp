// swiglu_fp8's dynamic-scale row kernel shape (src/swiglu/config.h): for every row width under both
// rules the block is whole warps, <= 1024 threads, without a whole idle warp while the row fits the
// registers, and in_registers says exactly whether threads x v chunks cover the row. The shapes of
// the common widths are pinned so a change to them is deliberate (they decide registers and
// blocks per SM).
#include <gtest/gtest.h>

#include <tuple>
#include <utility>

#include "swiglu/config.h"

namespace blockfuse {
namespace {

using detail::SwigluRowRule;

TEST(SwigluRowConfig, CoversEveryRowWidth) {
  for (SwigluRowRule rule : {SwigluRowRule::kTwoChunks, SwigluRowRule::kFourShared, SwigluRowRule::kFourSharedNext,
                             SwigluRowRule::kFourSharedThree})
    for (int64_t n = 1; n <= 20000; ++n) {
      const detail::SwigluRowConfig c = detail::swiglu_fp8_row_config(n, rule);
      ASSERT_TRUE(c.v == 2 || c.v == 4) << "chunks " << n;
      ASSERT_EQ(c.threads % 32, 0) << "chunks " << n;
      ASSERT_GE(c.threads, 32);
      ASSERT_LE(c.threads, detail::kSwigluRowMaxThreads) << "chunks " << n;
      ASSERT_EQ(c.in_registers, n <= int64_t(c.threads) * c.v) << "chunks " << n;
      if (c.in_registers) ASSERT_LT(int64_t(c.threads - 32) * c.v, n) << "chunks " << n << ": a whole idle warp";
      else ASSERT_EQ(c.threads, detail::kSwigluRowMaxThreads) << "chunks " << n;
      if (rule == SwigluRowRule::kTwoChunks || n <= 1024) ASSERT_EQ(c.v, 2) << "chunks " << n;
      // Shared staging exactly for the 4-chunk rows that fit: [4][2][threads] 16-byte vectors.
      const bool staged = c.v == 4 && c.in_registers;
      const bool two_sets_fit = 2 * 4 * 2 * 16 * c.threads <= detail::kSwigluMaxDynamicSmem;
      ASSERT_EQ(c.stage, staged ? (rule == SwigluRowRule::kFourSharedNext && two_sets_fit ? 2 : 1) : 0) << "chunks " << n;
      const int set = 4 * 2 * 16 * c.threads;
      ASSERT_EQ(c.smem_bytes, !staged ? 0 : c.stage == 2 ? 2 * set : set) << "chunks " << n;
      ASSERT_LE(c.smem_bytes, detail::kSwigluMaxDynamicSmem) << "chunks " << n;
      // Three blocks per SM exactly for kFourSharedThree's staged rows of <= 512 threads.
      const bool three = rule == SwigluRowRule::kFourSharedThree && staged && c.threads <= detail::kSwigluThreeBlockThreads;
      ASSERT_EQ(c.min_blocks, three ? 3 : 1) << "chunks " << n;
      if (three) ASSERT_LE(3 * (c.smem_bytes + 1024), 233472) << "chunks " << n << ": three blocks' shared memory";
    }
}

// kClusterTwo: from U > 8192 to U = 32768 a CTA per half row, kTwoChunks' shape on the half
// (ceil(chunks / 2) chunks, 2 per thread, whole warps, no whole idle warp); outside that range
// kFourShared's shape, no cluster. Every other rule has cluster = 1.
TEST(SwigluRowConfig, ClusterTwo) {
  for (int64_t n = 1; n <= 20000; ++n) {
    const detail::SwigluRowConfig c = detail::swiglu_fp8_row_config(n, SwigluRowRule::kClusterTwo);
    if (n >= detail::kSwigluClusterMinChunks && n <= detail::swiglu_cluster_max_chunks(2)) {
      const int64_t half = (n + 1) / 2;
      ASSERT_EQ(c.cluster, 2) << "chunks " << n;
      ASSERT_EQ(c.v, 2) << "chunks " << n;
      ASSERT_EQ(c.threads % 32, 0) << "chunks " << n;
      ASSERT_LE(c.threads, detail::kSwigluRowMaxThreads) << "chunks " << n;
      ASSERT_TRUE(c.in_registers) << "chunks " << n;
      ASSERT_GE(int64_t(c.threads) * c.v, half) << "chunks " << n;
      ASSERT_LT(int64_t(c.threads - 32) * c.v, half) << "chunks " << n << ": a whole idle warp";
      ASSERT_EQ(c.stage, 0) << "chunks " << n;
      ASSERT_EQ(c.smem_bytes, 0) << "chunks " << n;
    } else {
      const detail::SwigluRowConfig f = detail::swiglu_fp8_row_config(n, SwigluRowRule::kFourShared);
      ASSERT_EQ(c.cluster, 1) << "chunks " << n;
      ASSERT_EQ(std::tie(c.v, c.threads, c.in_registers, c.stage, c.smem_bytes, c.min_blocks),
                std::tie(f.v, f.threads, f.in_registers, f.stage, f.smem_bytes, f.min_blocks)) << "chunks " << n;
    }
    for (SwigluRowRule rule : {SwigluRowRule::kTwoChunks, SwigluRowRule::kFourShared, SwigluRowRule::kFourSharedNext,
                               SwigluRowRule::kFourSharedThree})
      ASSERT_EQ(detail::swiglu_fp8_row_config(n, rule).cluster, 1) << "chunks " << n;
  }
  // Pinned: U = 14336 -> 448 threads a half, 16384 -> 512, 28672 -> 896.
  EXPECT_EQ(detail::swiglu_fp8_row_config(14336 / 8, SwigluRowRule::kClusterTwo).threads, 448);
  EXPECT_EQ(detail::swiglu_fp8_row_config(16384 / 8, SwigluRowRule::kClusterTwo).threads, 512);
  EXPECT_EQ(detail::swiglu_fp8_row_config(28672 / 8, SwigluRowRule::kClusterTwo).threads, 896);
  // kAuto does not take it (kClusterEight measured faster wherever it was: config.h).
  for (int64_t rows : {1, 8, 9, 32, 33, 2048, 8192})
    for (int64_t n : {1792, 2048, 2049, 3584, 4096, 4097})
      EXPECT_NE(detail::resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, rows, n, true), SwigluRowRule::kClusterTwo)
          << rows << " rows, " << n << " chunks";
}

// kClusterFour / kClusterEight: a quarter / an eighth of the row per CTA, 2 chunks per thread, from
// U > 8192 to U = 65536 / 131072 (1024 threads a slice); elsewhere kFourShared's shape. kAuto takes
// kClusterEight at 1-32 rows from U > 12288 where clusters can run, and kClusterFour nowhere.
TEST(SwigluRowConfig, ClusterFourAndEight) {
  for (const auto [rule, size] : {std::pair{SwigluRowRule::kClusterFour, 4}, std::pair{SwigluRowRule::kClusterEight, 8}}) {
    EXPECT_EQ(detail::swiglu_cluster_size(rule), size);
    for (int64_t n = 1; n <= 17000; ++n) {
      const detail::SwigluRowConfig c = detail::swiglu_fp8_row_config(n, rule);
      if (n >= detail::kSwigluClusterMinChunks && n <= detail::swiglu_cluster_max_chunks(size)) {
        const int64_t slice = (n + size - 1) / size;
        ASSERT_EQ(c.cluster, size) << "chunks " << n;
        ASSERT_EQ(c.v, 2) << "chunks " << n;
        ASSERT_TRUE(c.in_registers) << "chunks " << n;
        ASSERT_GE(int64_t(c.threads) * c.v, slice) << "chunks " << n;
        ASSERT_LT(int64_t(c.threads - 32) * c.v, slice) << "chunks " << n << ": a whole idle warp";
        ASSERT_LE(c.threads, detail::kSwigluRowMaxThreads) << "chunks " << n;
        ASSERT_EQ(c.smem_bytes, 0) << "chunks " << n;
      } else {
        const detail::SwigluRowConfig f = detail::swiglu_fp8_row_config(n, SwigluRowRule::kFourShared);
        ASSERT_EQ(c.cluster, 1) << "chunks " << n;
        ASSERT_EQ(std::tie(c.v, c.threads, c.in_registers, c.stage, c.smem_bytes),
                  std::tie(f.v, f.threads, f.in_registers, f.stage, f.smem_bytes)) << "chunks " << n;
      }
    }
  }
  EXPECT_LE(detail::swiglu_cluster_size(SwigluRowRule::kClusterEight), detail::kSwigluClusterMaxSize);
  EXPECT_EQ(detail::kSwigluClusterMaxSize, 8) << "the portable cluster size limit";
  EXPECT_EQ(detail::swiglu_fp8_row_config(28672 / 8, SwigluRowRule::kClusterFour).threads, 448);
  EXPECT_EQ(detail::swiglu_fp8_row_config(65536 / 8, SwigluRowRule::kClusterFour).threads, 1024);
  EXPECT_EQ(detail::swiglu_fp8_row_config(28672 / 8, SwigluRowRule::kClusterEight).threads, 224);
  EXPECT_EQ(detail::swiglu_fp8_row_config(131072 / 8, SwigluRowRule::kClusterEight).threads, 1024);
  for (int64_t rows : {1, 8, 9, 32, 2048})
    for (int64_t n : {1024, 1025, 1536, 1537, 1792, 2048, 2049, 3584, 4096, 4097, 8192, 16384, 16385}) {
      const SwigluRowRule got = detail::resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, rows, n, true);
      EXPECT_EQ(got == SwigluRowRule::kClusterEight, rows <= 32 && n > 1536 && n <= 16384) << rows << " rows, " << n << " chunks";
      EXPECT_NE(got, SwigluRowRule::kClusterFour) << rows << " rows, " << n << " chunks";
      EXPECT_EQ(detail::swiglu_cluster_size(detail::resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, rows, n, false)), 1)
          << rows << " rows, " << n << " chunks, no clusters";
    }
}

TEST(SwigluRowConfig, CommonWidths) {
  struct Want { int64_t u; int v, threads; bool regs; };
  for (const Want w : {Want{4096, 2, 256, true}, Want{8192, 2, 512, true}, Want{14336, 4, 448, true},
                       Want{16384, 4, 512, true}, Want{28672, 4, 896, true}, Want{32768, 4, 1024, true},
                       Want{32776, 4, 1024, false}}) {
    const detail::SwigluRowConfig c = detail::swiglu_fp8_row_config(w.u / 8, SwigluRowRule::kFourShared);
    EXPECT_EQ(c.v, w.v) << "U " << w.u;
    EXPECT_EQ(c.threads, w.threads) << "U " << w.u;
    EXPECT_EQ(c.in_registers, w.regs) << "U " << w.u;
  }
  const detail::SwigluRowConfig old = detail::swiglu_fp8_row_config(16384 / 8, SwigluRowRule::kTwoChunks);
  EXPECT_EQ(old.threads, 1024);
  EXPECT_TRUE(old.in_registers);
  EXPECT_FALSE(detail::swiglu_fp8_row_config(28672 / 8, SwigluRowRule::kTwoChunks).in_registers);
}

TEST(SwigluRowConfig, PersistentGridBlocksPerSm) {
  // Two slot sets: U = 16384 -> 512 threads, 128 KB: one block per SM; U = 8200 (1025 chunks) -> 288
  // threads, 72 KB: three (also the register bound at 64 per thread).
  for (const auto& [u, threads, smem, blocks] : {std::tuple{16384, 512, 131072, 1}, std::tuple{14336, 448, 114688, 2},
                                                 std::tuple{28672, 896, 229376, 1}, std::tuple{8200, 288, 73728, 3}}) {
    const detail::SwigluRowConfig c = detail::swiglu_fp8_row_config(u / 8, SwigluRowRule::kFourSharedNext);
    EXPECT_EQ(c.threads, threads) << "U " << u;
    EXPECT_EQ(c.stage, 2) << "U " << u;
    EXPECT_EQ(c.smem_bytes, smem) << "U " << u;
    EXPECT_EQ(detail::swiglu_row_blocks_per_sm(c.threads, c.smem_bytes), blocks) << "U " << u;
  }
  // U = 32768: two sets (256 KB) do not fit; one set.
  const detail::SwigluRowConfig w = detail::swiglu_fp8_row_config(32768 / 8, SwigluRowRule::kFourSharedNext);
  EXPECT_EQ(w.stage, 1);
  EXPECT_EQ(w.smem_bytes, 131072);
}

// kAuto: the measured choice (config.h) — shared staging for many rows or rows the registers cannot
// hold, registers for decode-sized batches of rows they can; an explicit rule is kept as given.
TEST(SwigluRowConfig, AutoRuleFollowsTheMeasuredCrossover) {
  using detail::resolve_swiglu_fp8_row_rule;
  const int64_t u14k = 14336 / 8, u16k = 16384 / 8, u28k = 28672 / 8;
  // 1-32 rows from U > 12288: the 8-CTA cluster where clusters run (sm_90), else one CTA a row — in
  // registers up to U = 16384, staged in shared memory beyond. U = 8200 keeps one CTA a row.
  for (int64_t rows : {1, 8, 32}) {
    for (int64_t n : {u14k, u16k, u28k, int64_t{40960 / 8}, int64_t{131072 / 8}})
      EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, rows, n, true), SwigluRowRule::kClusterEight) << rows << ", " << n;
    EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, rows, u16k, false), SwigluRowRule::kTwoChunks);
    EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, rows, u28k, false), SwigluRowRule::kFourShared);
    EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, rows, 1024, true), SwigluRowRule::kTwoChunks);
    EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, rows, 8200 / 8, true), SwigluRowRule::kTwoChunks);
    EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, rows, 131080 / 8, true), SwigluRowRule::kFourShared);
  }
  EXPECT_EQ(detail::swiglu_fp8_row_config(u28k, SwigluRowRule::kClusterEight).cluster, 8);
  EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, 33, u28k, true), SwigluRowRule::kFourShared);
  EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, 33, u14k, true), SwigluRowRule::kTwoChunks);
  EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, 2048, u14k, true), SwigluRowRule::kFourShared);
  EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, 8192, u16k, true), SwigluRowRule::kFourSharedThree);
  EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, 4095, u16k, true), SwigluRowRule::kFourShared);
  EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, 4096, u28k, false), SwigluRowRule::kFourSharedThree);
  // (wider than 512 threads: kFourSharedThree builds kFourShared's 2-block kernel)
  EXPECT_EQ(detail::swiglu_fp8_row_config(u28k, SwigluRowRule::kFourSharedThree).min_blocks, 1);
  EXPECT_EQ(detail::swiglu_fp8_row_config(u16k, SwigluRowRule::kFourSharedThree).min_blocks, 3);
  // An explicit rule is kept, but a cluster rule where clusters cannot run takes kFourShared's shape.
  EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kTwoChunks, 8192, u28k, true), SwigluRowRule::kTwoChunks);
  EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kFourSharedNext, 1, u14k, true), SwigluRowRule::kFourSharedNext);
  EXPECT_EQ(resolve_swiglu_fp8_row_rule(SwigluRowRule::kClusterTwo, 1, u28k, true), SwigluRowRule::kClusterTwo);
  for (SwigluRowRule r : {SwigluRowRule::kClusterTwo, SwigluRowRule::kClusterFour, SwigluRowRule::kClusterEight})
    EXPECT_EQ(resolve_swiglu_fp8_row_rule(r, 1, u28k, false), SwigluRowRule::kFourShared);
  // Narrow rows take 2 chunks per thread in registers whatever the rule resolves to.
  EXPECT_EQ(detail::swiglu_fp8_row_config(512, resolve_swiglu_fp8_row_rule(SwigluRowRule::kAuto, 8192, 512, true)).v, 2);
}

// The elementwise grid: one chunk per thread in 128-thread blocks; every chunk is covered (by the
// grid, or by the grid-stride loop past 2^31 - 1 blocks).
TEST(SwigluElementwiseConfig, OneChunkPerThreadGrid) {
  using detail::swiglu_elementwise_config;
  for (int64_t total : {int64_t{1}, int64_t{127}, int64_t{128}, int64_t{129}, int64_t{32768} * 28672 / 8}) {
    const auto c = swiglu_elementwise_config(total);
    EXPECT_EQ(c.threads, 128);
    EXPECT_EQ(c.blocks, (total + 127) / 128) << total;
  }
  const auto huge = swiglu_elementwise_config(int64_t{1} << 40);
  EXPECT_EQ(huge.blocks, 2147483647);
  EXPECT_LT(huge.blocks * 128, int64_t{1} << 40);  // the grid-stride loop covers the rest
}

}  // namespace
}  // namespace blockfuse
