// The decode attention split heuristic (decode_attention_num_splits, a pure function of the batch,
// KV heads, rows per KV head, head dim, key range, SM count, page size and shared memory per SM) and
// the workspace size, on the CPU.
// The contract checked: one split where batch · Hkv · row blocks already fills the SMs; many splits
// at batch 1 with a long cache; never fewer than two 64-key tiles per split nor more than 128
// splits; the chosen count
// is the smallest whose grid fills the SMs within 95 % of the best count's fill
// (src/attention/decode_params.h); errors name the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "attention/decode_params.h"
#include "blockfuse/decode_attention.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

// Row blocks of one KV head: rows in 16-row fragments, at most 256 / D fragments per CTA (17-32
// rows as two 16-row blocks while the call's K + V read stays within 32 MiB).
int64_t m_blocks(int64_t rows, int64_t d, int64_t b, int64_t hkv, int64_t s) {
  const int64_t mf = attn::decode::m_frags_for(rows, int(d), attn::decode::cache_read_bytes(b, hkv, s, d));
  return (rows + 16 * mf - 1) / (16 * mf);
}

// How well `splits` fills `sm` SMs with one CTA each (the last wave counts as a whole wave).
double fill(int64_t ctas, int sm) { return double(ctas) / double((ctas + sm - 1) / sm * sm); }

TEST(DecodeAttentionHeuristic, MeasuredChoices) {
  // Batch 1, Hkv 8, D 128 on 132 SMs (H100): 16 splits = 128 CTAs, the measured best, at every
  // length long enough to have 16 tiles.
  for (int64_t s : {8192, 32768, 131072}) EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, s, 132), 16) << s;
  EXPECT_EQ(decode_attention_num_splits(8, 8, 4, 128, 32768, 132), 2);
  // Enough CTAs without splitting.
  EXPECT_EQ(decode_attention_num_splits(32, 8, 4, 128, 32768, 132), 1);
  EXPECT_EQ(decode_attention_num_splits(128, 8, 4, 128, 131072, 132), 1);
  // Capped at two tiles per split by a short cache: S = 1024 (16 tiles) takes 8 splits, as
  // measured best; 200 keys (4 tiles) 2; up to three tiles one.
  EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 1024, 132), 8);
  EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 200, 132), 2);
  EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 0, 132), 1);
  EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 64, 132), 1);
  EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 192, 132), 1);
  EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 193, 132), 2);
  // MQA at batch 1: S = 8192 (128 tiles, 8 MiB of K + V: two 16-row CTAs per split) takes 61
  // splits (122 CTAs: the smallest count within 95 % of 64's fill); S = 131072 (one 32-row CTA per
  // split) 122.
  EXPECT_EQ(decode_attention_num_splits(1, 1, 32, 128, 8192, 132), 61);
  EXPECT_EQ(decode_attention_num_splits(1, 1, 32, 128, 131072, 132), 122);
}

TEST(DecodeAttentionHeuristic, SmallPagesAimAtTwoCtasPerSm) {
  constexpr int64_t kH100Smem = 233472, kA100Smem = 167936;  // cudaDevAttrMaxSharedMemoryPerMultiprocessor
  // Pages below a tile (or of no power of two) where two CTAs fit (D 64 / 128 on the H100): the
  // count for twice the SMs; pages of a tile or more, or one CTA per SM: the contiguous count.
  for (int64_t page : {1, 8, 16, 32, 48, 96}) {
    EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 32768, 132, page, kH100Smem), 32) << page;   // 256 CTAs (measured)
    EXPECT_EQ(decode_attention_num_splits(8, 8, 4, 128, 32768, 132, page, kH100Smem), 4) << page;    // 256
    EXPECT_EQ(decode_attention_num_splits(128, 8, 4, 128, 32768, 132, page, kH100Smem), 1) << page;  // full
    EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 64, 32768, 132, page, kH100Smem), attn::decode::num_splits(8, 512, 264)) << page;
    // D 256 (136 KB a CTA), the A100's 164 KB, or an unknown size: one CTA per SM, no doubling.
    EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 256, 32768, 132, page, kH100Smem), attn::decode::num_splits(8, 512, 132)) << page;
    EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 32768, 108, page, kA100Smem), attn::decode::num_splits(8, 512, 108)) << page;
    EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 32768, 132, page), 16) << page;
  }
  for (int64_t page : {0, 64, 128, 256, 4096}) {
    EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 32768, 132, page, kH100Smem), 16) << page;
    EXPECT_EQ(decode_attention_num_splits(8, 8, 4, 128, 32768, 132, page, kH100Smem), 2) << page;
  }
  EXPECT_EQ(attn::decode::ctas_per_sm(kH100Smem, attn::decode::smem_bytes(128, 1)), 2);
  EXPECT_EQ(attn::decode::ctas_per_sm(kH100Smem, attn::decode::smem_bytes(256, 1)), 1);
  EXPECT_EQ(attn::decode::ctas_per_sm(kA100Smem, attn::decode::smem_bytes(128, 1)), 1);
  EXPECT_EQ(attn::decode::ctas_per_sm(0, attn::decode::smem_bytes(64, 4)), 1);
  // small_pages and the kernel's layout choice (kv_layout) agree on every page size.
  for (int64_t page = 1; page <= 1024; ++page) {
    attn::decode::Params p{};
    static const int32_t table = 0;
    p.block_table = &table;
    p.page_size = int(page);
    p.page_shift = -1;
    for (int sh = 0; sh < 31; ++sh)
      if ((int64_t(1) << sh) == page) p.page_shift = sh;
    const int layout = attn::decode::kv_layout(p);
    EXPECT_EQ(attn::decode::small_pages(page), layout == attn::decode::kPagedPow2 || layout == attn::decode::kPagedAny) << page;
  }
  EXPECT_TRUE(attn::decode::small_pages(16));
  EXPECT_TRUE(attn::decode::small_pages(48));
  EXPECT_TRUE(attn::decode::small_pages(96));
  EXPECT_FALSE(attn::decode::small_pages(0));
  EXPECT_FALSE(attn::decode::small_pages(64));
  expect_arg_error([] { decode_attention_num_splits(1, 8, 4, 128, 1000, 132, -16); }, "page_size");
  expect_arg_error([] { decode_attention_num_splits(1, 8, 4, 128, 1000, 132, 16, -1); }, "smem_per_sm");
}

TEST(DecodeAttentionHeuristic, OneSplitWhenTheGridIsFull) {
  for (int sm : {1, 78, 108, 132, 144})
    for (int64_t b : {1, 4, 17, 128, 1024})
      for (int64_t hkv : {1, 8, 32})
        for (int64_t rows : {1, 4, 28, 64, 256})
          for (int64_t d : {64, 128, 256}) {
            const int n = decode_attention_num_splits(b, hkv, rows, d, 131072, sm);
            if (b * hkv * m_blocks(rows, d, b, hkv, 131072) >= sm) EXPECT_EQ(n, 1) << b << " " << hkv << " " << rows << " " << d << " " << sm;
          }
}

TEST(DecodeAttentionHeuristic, ManySplitsAtBatchOneLongCache) {
  for (int sm : {108, 132, 144}) {
    // MQA (one KV head): one CTA per split, so a long cache spreads over (nearly) every SM.
    EXPECT_GE(decode_attention_num_splits(1, 1, 32, 128, 131072, sm), std::min(sm, kDecodeAttentionMaxSplits) * 9 / 10) << sm;
    EXPECT_GE(decode_attention_num_splits(1, 8, 4, 128, 131072, sm), 8) << sm;
    EXPECT_GE(decode_attention_num_splits(1, 8, 4, 64, 32768, sm), 8) << sm;
  }
  // A huge GPU: capped at 128 splits (the smallest count within 95 % of 128's fill).
  const int huge = decode_attention_num_splits(1, 1, 1, 128, int64_t(1) << 24, 100000);
  EXPECT_LE(huge, kDecodeAttentionMaxSplits);
  EXPECT_GE(huge, kDecodeAttentionMaxSplits * 95 / 100);
}

// Bounds and the documented rule, over a grid of shapes.
TEST(DecodeAttentionHeuristic, BoundsAndFillRule) {
  for (int sm : {1, 78, 108, 132})
    for (int64_t s : {0, 1, 63, 64, 65, 1000, 4097, 32768, 1 << 20})
      for (int64_t b : {1, 2, 3, 8, 33})
        for (int64_t hkv : {1, 2, 8})
          for (int64_t rows : {1, 7, 16, 17, 112})
            for (int64_t d : {64, 128, 256}) {
              SCOPED_TRACE(::testing::Message() << "B " << b << " Hkv " << hkv << " rows " << rows << " D " << d << " S "
                                                << s << " SMs " << sm);
              const int n = decode_attention_num_splits(b, hkv, rows, d, s, sm);
              const int64_t tiles = (s + 63) / 64;
              EXPECT_GE(n, 1);
              EXPECT_LE(n, kDecodeAttentionMaxSplits);
              const int64_t cap = std::max<int64_t>(1, tiles / attn::decode::kMinTilesPerSplit);
              EXPECT_LE(n, cap) << "a split of fewer than two 64-key tiles";
              const int64_t units = b * hkv * m_blocks(rows, d, b, hkv, s);
              if (n == 1) continue;
              // Split only where one split leaves SMs idle; the fill within 95 % of the best, and no
              // smaller count gets there.
              EXPECT_LT(units, sm);
              double best = 0;
              for (int64_t k = 1; k <= std::min<int64_t>(cap, kDecodeAttentionMaxSplits); ++k) best = std::max(best, fill(units * k, sm));
              EXPECT_GE(fill(units * n, sm), 0.95 * best);
              for (int k = 1; k < n; ++k) EXPECT_LT(fill(units * k, sm), 0.95 * best) << "k " << k;
            }
}

// Monotone where it must be: a longer cache never takes fewer splits than a shorter one until the
// tile cap stops binding, more rows per KV head (more row blocks) never take more, nor does a
// larger batch once the grid is full.
TEST(DecodeAttentionHeuristic, MonotoneProperties) {
  for (int sm : {108, 132})
    for (int64_t hkv : {1, 8}) {
      int prev = 1;
      for (int64_t s = 64; s <= (int64_t(1) << 20); s *= 2) {
        const int n = decode_attention_num_splits(1, hkv, 4, 128, s, sm);
        EXPECT_GE(n, prev) << "S " << s << " Hkv " << hkv;
        prev = n;
      }
      EXPECT_LE(decode_attention_num_splits(1, hkv, 128, 128, 131072, sm), decode_attention_num_splits(1, hkv, 4, 128, 131072, sm));
      EXPECT_LE(decode_attention_num_splits(1, hkv, 32, 256, 131072, sm), decode_attention_num_splits(1, hkv, 32, 128, 131072, sm));
    }
  // Rows per KV head beyond one CTA's fragments make more row blocks, hence fewer splits.
  EXPECT_LT(decode_attention_num_splits(1, 1, 64, 128, 131072, 132), decode_attention_num_splits(1, 1, 4, 128, 131072, 132));
}

TEST(DecodeAttentionHeuristic, RowFragments) {
  using attn::decode::m_frags_for;
  EXPECT_EQ(m_frags_for(4, 128), 1);
  EXPECT_EQ(m_frags_for(16, 128), 1);
  EXPECT_EQ(m_frags_for(17, 128), 2);
  EXPECT_EQ(m_frags_for(40, 64), 4);  // three fragments round up to the compiled four
  EXPECT_EQ(m_frags_for(512, 128), 2);
  EXPECT_EQ(m_frags_for(512, 256), 1);
  EXPECT_EQ(m_frags_for(512, 64), 4);
  // 17-32 rows (MQA's 32 query heads): two 16-row CTAs while K + V fit in 32 MiB, then one of 32.
  using attn::decode::cache_read_bytes;
  EXPECT_EQ(cache_read_bytes(1, 1, 32768, 128), int64_t(16) << 20);
  EXPECT_EQ(m_frags_for(32, 128, cache_read_bytes(1, 1, 32768, 128)), 1);   // measured 1.21x
  EXPECT_EQ(m_frags_for(32, 128, cache_read_bytes(8, 1, 8192, 128)), 1);    // 32 MiB: 1.06x
  EXPECT_EQ(m_frags_for(32, 128, cache_read_bytes(8, 1, 8193, 128)), 2);
  EXPECT_EQ(m_frags_for(32, 128, cache_read_bytes(1, 1, 131072, 128)), 2);  // 64 MiB: 0.98x
  EXPECT_EQ(m_frags_for(17, 64, cache_read_bytes(1, 1, 1024, 64)), 1);
  EXPECT_EQ(m_frags_for(16, 128, 0), 1);
  EXPECT_EQ(m_frags_for(40, 64, 0), 4);  // only the two-fragment case splits
  EXPECT_EQ(m_frags_for(512, 256, 0), 1);
  // The heuristic counts the row blocks: MQA at B 1, S 8k has two per KV head (122 CTAs).
  EXPECT_EQ(decode_attention_num_splits(1, 1, 32, 128, 8192, 132), 61);
  EXPECT_EQ(decode_attention_num_splits(2, 1, 32, 128, 8192, 132), 32);
}

TEST(DecodeAttentionHeuristic, BadArguments) {
  expect_arg_error([] { decode_attention_num_splits(1, 8, 4, 96, 100, 132); }, "head_dim", "64, 128 or 256");
  expect_arg_error([] { decode_attention_num_splits(0, 8, 4, 128, 100, 132); }, "batch", ">= 1");
  expect_arg_error([] { decode_attention_num_splits(1, 0, 4, 128, 100, 132); }, "heads_kv", ">= 1");
  expect_arg_error([] { decode_attention_num_splits(1, 8, 0, 128, 100, 132); }, "rows_per_kv_head", ">= 1");
  expect_arg_error([] { decode_attention_num_splits(1, 8, 4, 128, -1, 132); }, "seqlen_k", ">= 0");
  expect_arg_error([] { decode_attention_num_splits(1, 8, 4, 128, 100, 0); }, "sm_count", ">= 1");
  expect_arg_error([] { decode_attention_workspace_size(1, 17, 32, 8, 128, 100, 1); }, "seqlen_q");
  expect_arg_error([] { decode_attention_workspace_size(1, 0, 32, 8, 128, 100, 1); }, "seqlen_q");
  expect_arg_error([] { decode_attention_workspace_size(1, 1, 30, 8, 128, 100, 1); }, "heads_q");
  expect_arg_error([] { decode_attention_workspace_size(1, 1, 32, 8, 128, 100, 129); }, "num_splits");
  expect_arg_error([] { decode_attention_workspace_size(1, 1, 32, 8, 128, 100, -1); }, "num_splits");
  expect_arg_error([] { decode_attention_workspace_size(-1, 1, 32, 8, 128, 100, 1); }, "batch");
}

TEST(DecodeAttentionHeuristic, WorkspaceSize) {
  EXPECT_EQ(decode_attention_workspace_size(2, 1, 32, 8, 128, 1000, 1), 0u);
  EXPECT_EQ(decode_attention_workspace_size(0, 1, 32, 8, 128, 1000, 7), 0u);
  // 3 splits: partial outputs and LSEs of 2·32 rows.
  EXPECT_EQ(decode_attention_workspace_size(2, 1, 32, 8, 128, 1000, 3), size_t(3 * 64 * 128 * 4 + 3 * 64 * 4));
  // With the append: the rotated q as well.
  EXPECT_EQ(decode_attention_workspace_size(2, 1, 32, 8, 128, 1000, 1, true), size_t(64 * 128 * 2));
  // 16-byte multiples; more splits never need less.
  size_t prev = 0;
  for (int s = 1; s <= kDecodeAttentionMaxSplits; ++s) {
    const size_t w = decode_attention_workspace_size(3, 5, 7, 1, 64, 1 << 20, s, true);
    EXPECT_EQ(w % 16, 0u) << s;
    EXPECT_GE(w, prev) << s;
    prev = w;
  }
}

}  // namespace
}  // namespace blockfuse
