// add_rmsnorm's launch shape (src/add_rmsnorm/config.h): for every row length up to the register
// limit, the block covers the row (threads x v chunks), is a whole number of warps and fits the
// kernels' __launch_bounds__(512); longer rows take the loop path. The sm_90 cluster shape: C CTAs
// whose slices (ceil(n / C) chunks, the last one shorter) cover the row, each CTA non-empty and
// without a whole idle warp, v = 2 or 4 (loads overlap). The shapes of the common hidden sizes are
// pinned so a change to them is deliberate (they decide registers, occupancy, latency).
#include <gtest/gtest.h>

#include "add_rmsnorm/config.h"

namespace blockfuse {
namespace {

TEST(AddRmsNormConfig, CoversEveryRowLength) {
  for (auto rule : {detail::AddRmsNormRule::kAuto, detail::AddRmsNormRule::kV8, detail::AddRmsNormRule::kV4Wide,
                    detail::AddRmsNormRule::kWide})
  for (int n = 1; n <= detail::kAddRmsNormMaxRegisterChunks; ++n) {
    const detail::AddRmsNormConfig c = detail::add_rmsnorm_config(n, rule);
    ASSERT_TRUE(c.v == 1 || c.v == 2 || c.v == 4 || c.v == 8) << "chunks " << n;
    ASSERT_GE(c.threads * c.v, n) << "chunks " << n;
    ASSERT_LT((c.threads - 32) * c.v, n) << "chunks " << n << ": a whole idle warp";
    ASSERT_EQ(c.threads % 32, 0) << "chunks " << n;
    ASSERT_LE(c.threads, 512) << "chunks " << n;
  }
  for (int n : {detail::kAddRmsNormMaxRegisterChunks + 1, 8192, 1 << 27}) {
    const detail::AddRmsNormConfig c = detail::add_rmsnorm_config(n);
    EXPECT_EQ(c.v, 0) << "chunks " << n;
    EXPECT_EQ(c.threads, detail::kAddRmsNormLoopThreads);
  }
}

TEST(AddRmsNormConfig, CommonHiddenSizes) {
  struct Want { int h, v, threads; };
  for (const Want w : {Want{8, 1, 32}, Want{24, 1, 32}, Want{3584, 2, 224}, Want{4096, 2, 256}, Want{5120, 4, 160},
                       Want{8192, 4, 256}, Want{12288, 4, 384}, Want{16384, 4, 512}, Want{16392, 8, 288},
                       Want{32768, 8, 512}}) {
    const detail::AddRmsNormConfig c = detail::add_rmsnorm_config(w.h / 8, detail::AddRmsNormRule::kV4Wide);
    EXPECT_EQ(c.v, w.v) << "H " << w.h;
    EXPECT_EQ(c.threads, w.threads) << "H " << w.h;
  }
  // The default is kAuto, resolved per call (next test); unresolved it reads as kV4Wide (measured
  // faster than kV8 at H = 16384, config.h).
  EXPECT_EQ(detail::kAddRmsNormDefaultRule, detail::AddRmsNormRule::kAuto);
  EXPECT_EQ(detail::add_rmsnorm_config(16384 / 8).v, 4);
  EXPECT_EQ(detail::add_rmsnorm_config(8192 / 8).threads, 256);
  // kWide: up to 512 threads at every H.
  for (const Want w : {Want{4096, 1, 512}, Want{8192, 2, 512}, Want{5120, 2, 320}, Want{16384, 4, 512}, Want{1024, 1, 128}}) {
    const detail::AddRmsNormConfig c = detail::add_rmsnorm_config(w.h / 8, detail::AddRmsNormRule::kWide);
    EXPECT_EQ(c.v, w.v) << "H " << w.h;
    EXPECT_EQ(c.threads, w.threads) << "H " << w.h;
  }
  // kV8, the first rule: v = 8 from H > 8192.
  for (const Want w : {Want{8192, 4, 256}, Want{12288, 8, 192}, Want{16384, 8, 256}}) {
    const detail::AddRmsNormConfig c = detail::add_rmsnorm_config(w.h / 8, detail::AddRmsNormRule::kV8);
    EXPECT_EQ(c.v, w.v) << "H " << w.h;
    EXPECT_EQ(c.threads, w.threads) << "H " << w.h;
  }
}

// kAuto follows the measurement (config.h): the wide shape for decode-sized calls of
// H <= 4096 and for larger calls of 4096 < H <= 8192, kV4Wide's everywhere else.
TEST(AddRmsNormConfig, AutoRuleFollowsTheMeasurement) {
  using detail::AddRmsNormRule;
  using detail::add_rmsnorm_auto_rule;
  EXPECT_EQ(add_rmsnorm_auto_rule(4096 / 8, true), AddRmsNormRule::kWide);
  EXPECT_EQ(add_rmsnorm_auto_rule(4096 / 8, false), AddRmsNormRule::kV4Wide);
  EXPECT_EQ(add_rmsnorm_auto_rule(8192 / 8, true), AddRmsNormRule::kV4Wide);
  EXPECT_EQ(add_rmsnorm_auto_rule(8192 / 8, false), AddRmsNormRule::kWide);
  EXPECT_EQ(add_rmsnorm_auto_rule(16384 / 8, false), AddRmsNormRule::kV4Wide);
  EXPECT_EQ(add_rmsnorm_auto_rule(16384 / 8, true), AddRmsNormRule::kV4Wide);
  // The launched shapes: H = 4096 decode v1 x 512, else v2 x 256; H = 8192 decode v4 x 256, else v2 x 512.
  EXPECT_EQ(detail::add_rmsnorm_config(512, add_rmsnorm_auto_rule(512, true)).threads, 512);
  EXPECT_EQ(detail::add_rmsnorm_config(512, add_rmsnorm_auto_rule(512, false)).v, 2);
  EXPECT_EQ(detail::add_rmsnorm_config(1024, add_rmsnorm_auto_rule(1024, true)).v, 4);
  EXPECT_EQ(detail::add_rmsnorm_config(1024, add_rmsnorm_auto_rule(1024, false)).threads, 512);
}

// config.h: rows of 128 < chunks <= 512 take kWide from 1536 rows, except for the
// dynamic FP8 output; the rest as above.
TEST(AddRmsNormConfig, AutoRuleWideFromFifteenHundredRows) {
  using detail::AddRmsNormRule;
  using detail::add_rmsnorm_auto_rule;
  const int64_t from = detail::kAddRmsNormWideFromRows;
  EXPECT_EQ(from, 1536);
  for (int h : {2048, 3584, 4096}) {
    EXPECT_EQ(add_rmsnorm_auto_rule(h / 8, false, from - 1), AddRmsNormRule::kV4Wide) << "H " << h;
    EXPECT_EQ(add_rmsnorm_auto_rule(h / 8, false, from), AddRmsNormRule::kWide) << "H " << h;
    EXPECT_EQ(add_rmsnorm_auto_rule(h / 8, false, int64_t{1} << 31), AddRmsNormRule::kWide) << "H " << h;
    EXPECT_EQ(add_rmsnorm_auto_rule(h / 8, false, from, true), AddRmsNormRule::kV4Wide) << "H " << h << " dynamic";
  }
  EXPECT_EQ(add_rmsnorm_auto_rule(1024 / 8, false, 1 << 20), AddRmsNormRule::kV4Wide) << "H = 1024: not measured";
  EXPECT_EQ(add_rmsnorm_auto_rule(8192 / 8, false, 1 << 20), AddRmsNormRule::kWide);
  EXPECT_EQ(add_rmsnorm_auto_rule(16384 / 8, false, 1 << 20), AddRmsNormRule::kV4Wide);
  // The launched shapes at H = 4096: v1 x 512 from 1536 rows, v2 x 256 below and for dynamic FP8.
  const auto wide = detail::add_rmsnorm_config(512, add_rmsnorm_auto_rule(512, false, from));
  EXPECT_EQ(wide.v, 1);
  EXPECT_EQ(wide.threads, 512);
  EXPECT_EQ(detail::add_rmsnorm_config(512, add_rmsnorm_auto_rule(512, false, from, true)).v, 2);
  // H = 3584: v1 x 448.
  EXPECT_EQ(detail::add_rmsnorm_config(448, add_rmsnorm_auto_rule(448, false, from)).threads, 448);
}

TEST(AddRmsNormConfig, ClusterSlicesCoverEveryRowLength) {
  for (int n = detail::kAddRmsNormMinClusterChunks; n <= detail::kAddRmsNormMaxClusterChunks; ++n) {
    const detail::AddRmsNormConfig c = detail::add_rmsnorm_config_sm90(n);
    ASSERT_TRUE(c.cluster == 4 || c.cluster == 8) << "chunks " << n;
    ASSERT_TRUE(c.v == 2 || c.v == 4) << "chunks " << n;
    const int slice = (n + c.cluster - 1) / c.cluster;
    ASSERT_GE(c.threads * c.v, slice) << "chunks " << n;
    ASSERT_LT((c.threads - 32) * c.v, slice) << "chunks " << n << ": a whole idle warp";
    ASSERT_EQ(c.threads % 32, 0) << "chunks " << n;
    ASSERT_LE(c.threads, 512) << "chunks " << n;
    ASSERT_GT(n - (c.cluster - 1) * slice, 0) << "chunks " << n << ": the last CTA's slice is empty";
  }
  // Outside the cluster range: exactly the one-block (sm_80) shape.
  for (int n : {1, 8, 255, detail::kAddRmsNormMinClusterChunks - 1, detail::kAddRmsNormMaxClusterChunks + 1, 1 << 27}) {
    const detail::AddRmsNormConfig c = detail::add_rmsnorm_config_sm90(n), o = detail::add_rmsnorm_config(n);
    EXPECT_EQ(c.cluster, 1) << "chunks " << n;
    EXPECT_EQ(c.v, o.v) << "chunks " << n;
    EXPECT_EQ(c.threads, o.threads) << "chunks " << n;
  }
  EXPECT_EQ(detail::add_rmsnorm_config(512).cluster, 1);
}

TEST(AddRmsNormConfig, ClusterCommonHiddenSizes) {
  struct Want { int h, cluster, v, threads; };
  for (const Want w : {Want{2048, 1, 2, 128}, Want{3584, 1, 2, 224}, Want{4096, 1, 2, 256}, Want{5120, 1, 4, 160},
                       Want{8192, 4, 2, 128}, Want{8200, 4, 2, 160}, Want{16384, 8, 2, 128}, Want{16392, 8, 2, 160},
                       Want{32768, 8, 2, 256}, Want{131072, 8, 4, 512}, Want{131080, 1, 0, 512}}) {
    const detail::AddRmsNormConfig c = detail::add_rmsnorm_config_sm90(w.h / 8);
    EXPECT_EQ(c.cluster, w.cluster) << "H " << w.h;
    EXPECT_EQ(c.v, w.v) << "H " << w.h;
    EXPECT_EQ(c.threads, w.threads) << "H " << w.h;
  }
}

// Calls of at most 2^18 chunks (H <= 16384: 512 rows at H = 4096, 256 at 8192, 128 at 16384) preload
// the weight in the one-block kernel, except H > 8192 at <= 32 rows where clusters can run: there the
// cluster kernel measured faster for every output (config.h).
// residual_out is stored before the row's reduction for 16-bit outputs at every row count, for FP8
// outputs only up to 32 rows (config.h: the measurement).
TEST(AddRmsNormConfig, EarlyResidualOutStore) {
  using detail::add_rmsnorm_early_res_out;
  for (int64_t rows : {int64_t{1}, int64_t{32}, int64_t{33}, int64_t{256}, int64_t{1} << 20}) {
    EXPECT_TRUE(add_rmsnorm_early_res_out(true, rows)) << rows;
    EXPECT_EQ(add_rmsnorm_early_res_out(false, rows), rows <= 32) << rows;
  }
  static_assert(add_rmsnorm_early_res_out(false, 1), "constexpr: the kernel evaluates it too");
}

TEST(AddRmsNormConfig, WeightPreloadForDecodeSizedCalls) {
  using detail::add_rmsnorm_preload_weight;
  for (int h : {8, 4096, 8192, 8200, 12288, 16384})
    for (int64_t rows : {1, 8, 9, 32, 33}) {
      EXPECT_TRUE(add_rmsnorm_preload_weight(rows, h / 8, false)) << "H " << h << " rows " << rows;
      EXPECT_EQ(add_rmsnorm_preload_weight(rows, h / 8, true), h <= 8192 || rows > 32) << "H " << h << " rows " << rows;
    }
  for (bool clusters : {false, true}) {
    EXPECT_TRUE(add_rmsnorm_preload_weight(512, 4096 / 8, clusters));
    EXPECT_FALSE(add_rmsnorm_preload_weight(513, 4096 / 8, clusters));
    EXPECT_TRUE(add_rmsnorm_preload_weight(256, 8192 / 8, clusters));
    EXPECT_FALSE(add_rmsnorm_preload_weight(257, 8192 / 8, clusters));
    EXPECT_TRUE(add_rmsnorm_preload_weight(128, 16384 / 8, clusters));
    EXPECT_FALSE(add_rmsnorm_preload_weight(129, 16384 / 8, clusters));
    EXPECT_FALSE(add_rmsnorm_preload_weight(8192, 4096 / 8, clusters));
    EXPECT_FALSE(add_rmsnorm_preload_weight(1, 16392 / 8, clusters));
    EXPECT_FALSE(add_rmsnorm_preload_weight(1, 32768 / 8, clusters));
    EXPECT_FALSE(add_rmsnorm_preload_weight(1, 16384 / 8, clusters, 0)) << "the bench's --preload-chunks 0";
  }
}

TEST(AddRmsNormConfig, ClustersOnlyForFewRows) {
  // H100: 132 SMs. 4-CTA clusters up to 66 rows, 8-CTA ones up to 33; never for one CTA.
  EXPECT_TRUE(detail::add_rmsnorm_clusters_pay(1, 4, 132));
  EXPECT_TRUE(detail::add_rmsnorm_clusters_pay(32, 4, 132));
  EXPECT_TRUE(detail::add_rmsnorm_clusters_pay(66, 4, 132));
  EXPECT_FALSE(detail::add_rmsnorm_clusters_pay(67, 4, 132));
  EXPECT_FALSE(detail::add_rmsnorm_clusters_pay(256, 4, 132));
  EXPECT_TRUE(detail::add_rmsnorm_clusters_pay(33, 8, 132));
  EXPECT_FALSE(detail::add_rmsnorm_clusters_pay(34, 8, 132));
  EXPECT_FALSE(detail::add_rmsnorm_clusters_pay(1, 1, 132));
}

// Streaming stores from 1024 rows, on the register kernels only (config.h: measured ahead from 1024
// rows, behind at 1-512; the loop kernel reads its residual_out back).
TEST(AddRmsNormConfig, StreamingStoresFromOneThousandRows) {
  for (int v : {1, 2, 4, 8}) {
    EXPECT_FALSE(detail::add_rmsnorm_streaming_stores(v, 1)) << "v " << v;
    EXPECT_FALSE(detail::add_rmsnorm_streaming_stores(v, 512)) << "v " << v;
    EXPECT_FALSE(detail::add_rmsnorm_streaming_stores(v, detail::kAddRmsNormStreamingStoresRows - 1)) << "v " << v;
    EXPECT_TRUE(detail::add_rmsnorm_streaming_stores(v, detail::kAddRmsNormStreamingStoresRows)) << "v " << v;
    EXPECT_TRUE(detail::add_rmsnorm_streaming_stores(v, int64_t{1} << 31)) << "v " << v;
  }
  EXPECT_EQ(detail::kAddRmsNormStreamingStoresRows, 1024);
  EXPECT_FALSE(detail::add_rmsnorm_streaming_stores(0, 1 << 20)) << "the loop kernel";
}

}  // namespace
}  // namespace blockfuse
