// The attention tile heuristic and configuration table (pure functions, no GPU).
#include <vector>

#include <gtest/gtest.h>

#include "attention/params.h"
#include "blockfuse/attention.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

TEST(AttentionHeuristic, EveryHeadDimHasAConfigThatFitsTheSharedMemory) {
  for (int64_t d : {64, 128, 256}) {
    for (bool causal : {false, true})
      for (int cc : {80, 86, 89, 90}) {
        const AttentionConfig c = attention_heuristic(d, causal, cc / 10, cc % 10);
        EXPECT_EQ(c.block_m % (16 * c.warps), 0);
        // 99 KB: the smallest opt-in shared memory per block of the sm_8x parts (sm_86/89).
        const int smem = attn::smem_bytes(attn::TileConfig{int(d), c.block_m, c.block_n, c.warps});
        if (d <= 128) {
          EXPECT_LE(smem, 99 * 1024) << "D " << d;
        }
        EXPECT_LE(smem, 163 * 1024) << "D " << d;  // A100's 163 KB: every config runs on sm_80
      }
    // The heuristic's choice is configuration 0 and every configuration is listed once.
    const AttentionConfig h = attention_heuristic(d, false, 9, 0);
    const AttentionConfig c0 = attention_config(d, 0);
    EXPECT_EQ(h.block_m, c0.block_m);
    EXPECT_EQ(h.block_n, c0.block_n);
    EXPECT_EQ(h.warps, c0.warps);
    EXPECT_GE(attention_num_configs(d), 2);
  }
  EXPECT_EQ(attention_heuristic(128, false, 9, 0).block_n, 128);
  EXPECT_EQ(attention_heuristic(128, false, 9, 0).warps, 8);
  EXPECT_EQ(attention_heuristic(64, true, 8, 0).block_n, 128);
}

// kAuto's kernel choice: the sm90a kernel exactly where it can run.
TEST(AttentionHeuristic, AutoUsesSm90OnlyWhereItRuns) {
  constexpr int kNeed = 164 * 1024, kH100 = 227 * 1024;
  EXPECT_TRUE(attn::auto_uses_sm90(true, 9, 0, 128, kNeed, kH100));
  EXPECT_TRUE(attn::auto_uses_sm90(true, 9, 0, 64, kNeed, kH100));
  EXPECT_TRUE(attn::auto_uses_sm90(true, 9, 0, 256, kNeed, kH100));
  EXPECT_FALSE(attn::auto_uses_sm90(true, 9, 0, 96, kNeed, kH100));    // a head dim it has no kernel for
  EXPECT_FALSE(attn::auto_uses_sm90(false, 9, 0, 128, kNeed, kH100));  // not built
  EXPECT_FALSE(attn::auto_uses_sm90(true, 8, 0, 128, kNeed, kH100));   // Ampere
  EXPECT_FALSE(attn::auto_uses_sm90(true, 8, 9, 128, kNeed, 99 * 1024));
  EXPECT_FALSE(attn::auto_uses_sm90(true, 10, 0, 128, kNeed, kH100));  // sm_90a code is not forward compatible
  EXPECT_FALSE(attn::auto_uses_sm90(true, 9, 0, 128, kNeed, kNeed - 1));
  EXPECT_TRUE(attn::sm90_supports(64));
  EXPECT_TRUE(attn::sm90_supports(256));
  EXPECT_FALSE(attn::sm90_supports(96));
}

// The sm90a tile: 192 query rows (three consumer warpgroups, 128 keys a step) at D = 64 from 2048
// query rows (measured ahead or even from 2048, behind causal at 1024), 128 rows elsewhere; a
// request wins; what a request may be.
TEST(AttentionHeuristic, Sm90BlockM) {
  for (int64_t s : {1, 1000, 1024, 2047, 2048, 4096, 16384}) {
    EXPECT_EQ(attn::sm90_block_m(64, 0, s), s >= 2048 ? 192 : 128) << s;
    EXPECT_EQ(attn::sm90_block_m(128, 0, s), 128);
    EXPECT_EQ(attn::sm90_block_m(256, 0, s), 128);
    EXPECT_EQ(attn::sm90_block_m(64, 128, s), 128);
    EXPECT_EQ(attn::sm90_block_m(64, 192, s), 192);
    // Walked from a counter, 192 rows only from 4096; an explicit request wins either way.
    EXPECT_EQ(attn::sm90_block_m(64, 0, s, true), s >= 4096 ? 192 : 128) << s;
    EXPECT_EQ(attn::sm90_block_m(128, 0, s, true), 128);
    EXPECT_EQ(attn::sm90_block_m(64, 192, s, true), 192);
  }
  EXPECT_EQ(attn::sm90_block_n(64, 192), 128);
  EXPECT_EQ(attn::sm90_block_n(64, 128), 128);
  EXPECT_EQ(attn::sm90_block_n(128, 128), 128);
  EXPECT_EQ(attn::sm90_block_n(256, 128), 64);
  EXPECT_TRUE(attn::sm90_block_m_valid(0, 128));
  EXPECT_TRUE(attn::sm90_block_m_valid(128, 256));
  EXPECT_TRUE(attn::sm90_block_m_valid(192, 64));
  EXPECT_FALSE(attn::sm90_block_m_valid(192, 128));
  EXPECT_FALSE(attn::sm90_block_m_valid(64, 64));
  EXPECT_FALSE(attn::sm90_block_m_valid(256, 64));
}

// The sm90a grid: persistent (at most one CTA per SM) for uniform tiles, one CTA per tile under a band.
TEST(AttentionHeuristic, Sm90GridIsPersistentOnlyForUniformTiles) {
  EXPECT_EQ(attn::sm90_grid_ctas(8192, 132, false), 132);
  EXPECT_EQ(attn::sm90_grid_ctas(100, 132, false), 100);
  EXPECT_EQ(attn::sm90_grid_ctas(8192, 132, true), 8192);
  EXPECT_EQ(attn::sm90_grid_ctas(int64_t(1) << 40, 132, true), 132);  // beyond grid.x: persistent
}

// The banded grid's tile order: every tile once; within a section of (head, batch) pairs the query
// blocks come longest first (m_block descending), each m_block across the section's pairs before
// the next; sections in order, the last one narrower where the pairs do not divide.
TEST(AttentionHeuristic, LptTileOrderIsABijectionLongestFirstPerSection) {
  struct Case {
    int m_blocks, hb_total, section;
  };
  for (const Case c : {Case{22, 64, 32}, Case{22, 64, 64}, Case{7, 10, 4}, Case{1, 5, 2}, Case{3, 1, 1},
                       Case{128, 96, 8}, Case{5, 6, 6}}) {
    const int64_t n = int64_t(c.m_blocks) * c.hb_total;
    std::vector<int> seen(n, 0);
    int last_m = c.m_blocks, last_section = 0;
    for (int64_t t = 0; t < n; ++t) {
      const attn::TileCoord tc = attn::lpt_tile(t, c.m_blocks, c.hb_total, c.section);
      ASSERT_GE(tc.m_block, 0) << t;
      ASSERT_LT(tc.m_block, c.m_blocks) << t;
      ASSERT_GE(tc.hb, 0) << t;
      ASSERT_LT(tc.hb, c.hb_total) << t;
      ++seen[int64_t(tc.hb) * c.m_blocks + tc.m_block];
      const int section = tc.hb / c.section;
      ASSERT_GE(section, last_section) << "sections in order, t " << t;
      if (section != last_section) last_m = c.m_blocks;
      ASSERT_LE(tc.m_block, last_m) << "longest first within a section, t " << t;
      last_m = tc.m_block;
      last_section = section;
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "tile " << i << " of " << c.m_blocks << "x" << c.hb_total;
  }
  // The first tiles of a section are its pairs' last (longest, causal) query blocks.
  EXPECT_EQ(attn::lpt_tile(0, 22, 64, 32).m_block, 21);
  EXPECT_EQ(attn::lpt_tile(31, 22, 64, 32).hb, 31);
  EXPECT_EQ(attn::lpt_tile(32, 22, 64, 32).m_block, 20);
  EXPECT_EQ(attn::lpt_tile(22 * 32, 22, 64, 32).hb, 32);
}

// Sections: the power of two of KV heads whose K and V fit in 32 MB, times the group, at most all pairs.
TEST(AttentionHeuristic, LptSectionFitsL2) {
  EXPECT_EQ(attn::sm90_lpt_section(4096, 64, 2, 1, 64), 32);     // 1 MB a head
  EXPECT_EQ(attn::sm90_lpt_section(4096, 64, 2, 4, 64), 64);     // 128 capped at the 64 pairs
  EXPECT_EQ(attn::sm90_lpt_section(16384, 64, 2, 1, 64), 8);     // 4 MB
  EXPECT_EQ(attn::sm90_lpt_section(4096, 128, 2, 1, 64), 16);    // 2 MB
  EXPECT_EQ(attn::sm90_lpt_section(3000, 128, 2, 1, 64), 16);    // 1.46 MB: 21 heads, rounded down
  EXPECT_EQ(attn::sm90_lpt_section(1 << 20, 256, 2, 2, 64), 2);  // 1 GB a head: one KV head
  EXPECT_EQ(attn::sm90_lpt_section(0, 64, 2, 1, 64), 1);
  EXPECT_EQ(attn::sm90_lpt_section(1024, 64, 2, 8, 4), 4);
}

TEST(AttentionHeuristic, RejectsUnsupportedInput) {
  testing::expect_arg_error([] { attention_heuristic(96, false, 9, 0); }, "head_dim", "64, 128 or 256");
  testing::expect_arg_error([] { attention_heuristic(128, false, 7, 5); }, "cc_major");
  testing::expect_arg_error([] { attention_config(128, 99); }, "index");
}

// Auto walks banded tiles from a counter up to 4096 query rows; kPerTile and kDynamic force either.
TEST(AttentionHeuristic, Sm90DynamicWalk) {
  for (int64_t s : {1, 1024, 4096, 4097, 16384}) {
    EXPECT_EQ(attn::sm90_dynamic_walk(Sm90Schedule::kAuto, s), s <= 4096) << s;
    EXPECT_FALSE(attn::sm90_dynamic_walk(Sm90Schedule::kPerTile, s)) << s;
    EXPECT_TRUE(attn::sm90_dynamic_walk(Sm90Schedule::kDynamic, s)) << s;
  }
}

}  // namespace
}  // namespace blockfuse
