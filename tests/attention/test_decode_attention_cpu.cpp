// The decode attention path on the CPU: the split heuristic (a pure function) and every argument
// error (blockfuse::Error naming the argument, thrown before any CUDA call; the pointers are fake
// aligned addresses that are never dereferenced).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>

#include "attention/decode_params.h"
#include "blockfuse/decode_attention.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

TEST(DecodeAttentionHeuristic, FillsTheSmsOneCtaEach) {
  // Batch 1, Hkv 8, D 128 on 132 SMs: 16 splits = 128 CTAs (the measured best), at every length
  // long enough to have 16 tiles.
  for (int64_t s : {8192, 32768, 131072}) EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, s, 132), 16) << s;
  EXPECT_EQ(decode_attention_num_splits(8, 8, 4, 128, 32768, 132), 2);
  // Enough CTAs without splitting.
  EXPECT_EQ(decode_attention_num_splits(32, 8, 4, 128, 32768, 132), 1);
  EXPECT_EQ(decode_attention_num_splits(128, 8, 4, 128, 131072, 132), 1);
  // Never more splits than 64-key tiles, never more than the maximum.
  EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 200, 132), 4);
  EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 0, 132), 1);
  EXPECT_EQ(decode_attention_num_splits(1, 8, 4, 128, 64, 132), 1);
  for (int64_t s : {1, 63, 65, 1000, 4097, 1 << 20})
    for (int64_t b : {1, 2, 3, 8, 33})
      for (int64_t hkv : {1, 2, 8}) {
        const int n = decode_attention_num_splits(b, hkv, 4, 128, s, 132);
        EXPECT_GE(n, 1);
        EXPECT_LE(n, kDecodeAttentionMaxSplits);
        EXPECT_LE(n, std::max<int64_t>(1, (s + 63) / 64));
        // The grid never needs a second wave when one split already overfills it.
        if (b * hkv >= 132) EXPECT_EQ(n, 1);
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
}

TEST(DecodeAttentionHeuristic, BadArguments) {
  expect_arg_error([] { decode_attention_num_splits(1, 8, 4, 96, 100, 132); }, "head_dim");
  expect_arg_error([] { decode_attention_num_splits(0, 8, 4, 128, 100, 132); }, "batch");
  expect_arg_error([] { decode_attention_num_splits(1, 0, 4, 128, 100, 132); }, "heads_kv");
  expect_arg_error([] { decode_attention_num_splits(1, 8, 4, 128, 100, 0); }, "sm_count");
  expect_arg_error([] { decode_attention_workspace_size(1, 17, 32, 8, 128, 100, 1); }, "seqlen_q");
  expect_arg_error([] { decode_attention_workspace_size(1, 1, 30, 8, 128, 100, 1); }, "heads_q");
  expect_arg_error([] { decode_attention_workspace_size(1, 1, 32, 8, 128, 100, 129); }, "num_splits");
}

TEST(DecodeAttentionHeuristic, WorkspaceSize) {
  EXPECT_EQ(decode_attention_workspace_size(2, 1, 32, 8, 128, 1000, 1), 0u);
  // 3 splits: partial outputs and LSEs of 2·32 rows.
  EXPECT_EQ(decode_attention_workspace_size(2, 1, 32, 8, 128, 1000, 3), size_t(3 * 64 * 128 * 4 + 3 * 64 * 4));
  // With the append: the rotated q as well.
  EXPECT_EQ(decode_attention_workspace_size(2, 1, 32, 8, 128, 1000, 1, true), size_t(64 * 128 * 2));
}

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

struct Call {
  AttnConstTensor q, k, v, kn, vn;
  AttnTensor out;
  const int32_t* lens = static_cast<const int32_t*>(fake(9));
  float* lse = nullptr;
  DecodeAttentionParams p;
  RotaryParams r;
  void* ws = fake(10);
  size_t ws_bytes = size_t(1) << 30;
  bool append = false;
  void operator()() const {
    AttnTensor kc{const_cast<void*>(k.data), k.dtype, k.batch, k.seqlen, k.heads, k.head_dim, k.batch_stride, k.seq_stride, k.head_stride};
    AttnTensor vc{const_cast<void*>(v.data), v.dtype, v.batch, v.seqlen, v.heads, v.head_dim, v.batch_stride, v.seq_stride, v.head_stride};
    if (append)
      decode_attention_with_kvcache(q, kc, vc, kn, vn, lens, r, out, lse, p, ws, ws_bytes);
    else
      decode_attention(q, k, v, lens, out, lse, p, ws, ws_bytes);
  }
};

// A valid call: q [2, 1, 32, 128], a contiguous cache [2, 4096, 8, 128].
Call valid() {
  Call c;
  c.q = make_attn_tensor(static_cast<const void*>(fake(1)), DType::kBF16, 2, 1, 32, 128);
  c.k = make_attn_tensor(static_cast<const void*>(fake(2)), DType::kBF16, 2, 4096, 8, 128);
  c.v = make_attn_tensor(static_cast<const void*>(fake(3)), DType::kBF16, 2, 4096, 8, 128);
  c.kn = make_attn_tensor(static_cast<const void*>(fake(5)), DType::kBF16, 2, 1, 8, 128);
  c.vn = make_attn_tensor(static_cast<const void*>(fake(6)), DType::kBF16, 2, 1, 8, 128);
  c.out = make_attn_tensor(fake(4), DType::kBF16, 2, 1, 32, 128);
  return c;
}

void expect_error(const std::function<void(Call&)>& edit, const std::string& arg, bool append = false) {
  Call c = valid();
  c.append = append;
  edit(c);
  expect_arg_error(c, arg);
}

TEST(DecodeAttentionValidation, NamesTheArgument) {
  expect_error([](Call& c) { c.q.seqlen = 0; }, "q");
  expect_error([](Call& c) { c.q.seqlen = 17, c.out.seqlen = 17; }, "q");
  expect_error([](Call& c) { c.q.head_dim = 96; }, "q");
  expect_error([](Call& c) { c.k.dtype = DType::kFP16; }, "k_cache");
  expect_error([](Call& c) { c.v.heads = 4; }, "v_cache");
  expect_error([](Call& c) { c.k.heads = 5, c.v.heads = 5; }, "k_cache");
  expect_error([](Call& c) { c.k.batch = 3, c.v.batch = 3; }, "k_cache");
  expect_error([](Call& c) { c.out.seqlen = 2; }, "out");
  expect_error([](Call& c) { c.q.seq_stride = 100; }, "q");
  expect_error([](Call& c) { c.lens = nullptr; }, "cache_seqlens");
  expect_error([](Call& c) { c.lens = reinterpret_cast<const int32_t*>(static_cast<char*>(fake(9)) + 2); }, "cache_seqlens");
  expect_error([](Call& c) { c.p.num_splits = 129; }, "params.num_splits");
  expect_error([](Call& c) { c.p.softcap = -1.f; }, "params.softcap");
  expect_error([](Call& c) { c.p.window_left = -2; }, "params.window_left");
  expect_error([](Call& c) { c.p.causal = true, c.p.window_right = 3; }, "params.window_right");
  expect_error([](Call& c) { c.p.max_blocks = 4; }, "params.block_table");
  expect_error([](Call& c) { c.out.data = static_cast<char*>(const_cast<void*>(c.q.data)) + 256; }, "out");
  expect_error([](Call& c) { c.ws = nullptr, c.ws_bytes = 0, c.p.num_splits = 4; }, "workspace");
  // Grid limits: rows of the merge, KV heads times splits in grid y.
  expect_error([](Call& c) { c.q.batch = c.out.batch = c.k.batch = c.v.batch = 65535, c.q.heads = c.out.heads = 4096, c.q.seqlen = c.out.seqlen = 16; }, "q");
  expect_error([](Call& c) { c.k.heads = c.v.heads = 1024, c.q.heads = c.out.heads = 1024, c.p.num_splits = 128; }, "params.num_splits");
}

TEST(DecodeAttentionValidation, PagedAndHostCopies) {
  static const int32_t table[2 * 4] = {0, 1, 2, 3, 4, 5, 6, 99};
  auto paged = [](Call& c) {
    c.k.batch = 8, c.k.seqlen = 16, c.k.batch_stride = 16 * 8 * 128;
    c.v.batch = 8, c.v.seqlen = 16, c.v.batch_stride = 16 * 8 * 128;
    c.p.block_table = static_cast<const int32_t*>(fake(7)), c.p.max_blocks = 4;
  };
  expect_error([&](Call& c) { paged(c), c.p.max_blocks = 0; }, "params.max_blocks");
  expect_error([&](Call& c) { paged(c), c.p.block_table_stride = 3; }, "params.block_table_stride");
  static const int32_t lens_past[2] = {10, 65};  // capacity 4 pages of 16 = 64
  expect_error([&](Call& c) { paged(c), c.p.host_cache_seqlens = lens_past; }, "cache_seqlens");
  static const int32_t lens_ok[2] = {10, 64};
  expect_error([&](Call& c) { paged(c), c.p.host_cache_seqlens = lens_ok, c.p.host_block_table = table; }, "block_table");
  expect_error([&](Call& c) { paged(c), c.p.host_block_table = table; }, "params.host_block_table");
  static const int32_t lens_neg[2] = {-1, 3};
  expect_error([](Call& c) { c.p.host_cache_seqlens = lens_neg; }, "cache_seqlens");
}

TEST(DecodeAttentionValidation, WithKvcache) {
  expect_error([](Call& c) { c.kn.heads = 4; }, "k_new", true);
  expect_error([](Call& c) { c.vn.seqlen = 2; }, "v_new", true);
  expect_error([](Call& c) { c.r.cos = fake(11); }, "rotary.sin", true);
  expect_error([](Call& c) { c.r.cos = fake(11), c.r.sin = fake(12), c.r.rotary_dim = 7, c.r.max_positions = 5000; }, "rotary.rotary_dim", true);
  expect_error([](Call& c) { c.r.cos = fake(11), c.r.sin = fake(12), c.r.rotary_dim = 256, c.r.max_positions = 5000; }, "rotary.rotary_dim", true);
  expect_error([](Call& c) { c.r.cos = fake(11), c.r.sin = fake(12), c.r.max_positions = 4000; }, "rotary.max_positions", true);
  static const int32_t full[2] = {4096, 0};  // no room for the new key
  expect_error([](Call& c) { c.p.host_cache_seqlens = full; }, "cache_seqlens", true);
}

}  // namespace
}  // namespace blockfuse
