// decode_attention()'s and decode_attention_with_kvcache()'s argument errors: every bad call throws
// blockfuse::Error naming the argument and the requirement before any CUDA call, so these run on
// CPU-only machines. Pointers are fake aligned addresses that are never dereferenced. A valid call
// gets as far as the first device-pointer check (the fake q is no device memory): everything before
// it passed, and nothing was launched. Each expectation also matches the requirement's text, so a
// check that is missing cannot pass by failing later at that device-pointer check.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "blockfuse/decode_attention.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }
template <class T>
T* offset(T* p, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes));
}

struct Call {
  AttnConstTensor q, k, v, kn, vn;
  AttnTensor out;
  const int32_t* lens = static_cast<const int32_t*>(fake(9));
  float* lse = static_cast<float*>(fake(8));
  DecodeAttentionParams p;
  RotaryParams r;
  void* ws = fake(10);
  size_t ws_bytes = size_t(1) << 30;
  bool append = false;
  void operator()() const {
    const AttnTensor kc{const_cast<void*>(k.data), k.dtype, k.batch, k.seqlen, k.heads, k.head_dim, k.batch_stride, k.seq_stride, k.head_stride};
    const AttnTensor vc{const_cast<void*>(v.data), v.dtype, v.batch, v.seqlen, v.heads, v.head_dim, v.batch_stride, v.seq_stride, v.head_stride};
    if (append)
      decode_attention_with_kvcache(q, kc, vc, kn, vn, lens, r, out, lse, p, ws, ws_bytes);
    else
      decode_attention(q, k, v, lens, out, lse, p, ws, ws_bytes);
  }
};

// A valid call: q [2, 1, 32, 128], a contiguous cache [2, 4096, 8, 128]; with append, k_new / v_new
// [2, 1, 8, 128] and fp32 rotary tables for 4096 positions.
Call valid(bool append = false) {
  Call c;
  c.q = make_attn_tensor(static_cast<const void*>(fake(1)), DType::kBF16, 2, 1, 32, 128);
  c.k = make_attn_tensor(static_cast<const void*>(fake(2)), DType::kBF16, 2, 4096, 8, 128);
  c.v = make_attn_tensor(static_cast<const void*>(fake(3)), DType::kBF16, 2, 4096, 8, 128);
  c.kn = make_attn_tensor(static_cast<const void*>(fake(5)), DType::kBF16, 2, 1, 8, 128);
  c.vn = make_attn_tensor(static_cast<const void*>(fake(6)), DType::kBF16, 2, 1, 8, 128);
  c.out = make_attn_tensor(fake(4), DType::kBF16, 2, 1, 32, 128);
  c.append = append;
  if (append) {
    c.r.cos = fake(11), c.r.sin = fake(12), c.r.fp32 = true, c.r.max_positions = 4096;
  }
  return c;
}

// The same call on a paged cache: 64 pages of 16 rows, block table [2, 8] (capacity 128).
Call paged(bool append = false) {
  Call c = valid(append);
  c.k = make_attn_tensor(static_cast<const void*>(fake(2)), DType::kBF16, 64, 16, 8, 128);
  c.v = make_attn_tensor(static_cast<const void*>(fake(3)), DType::kBF16, 64, 16, 8, 128);
  c.p.block_table = static_cast<const int32_t*>(fake(7));
  c.p.max_blocks = 8;
  c.r.max_positions = 128;
  return c;
}

void expect_error(const std::function<void(Call&)>& edit, const std::string& arg, const std::string& also,
                  bool append = false, bool is_paged = false) {
  Call c = is_paged ? paged(append) : valid(append);
  edit(c);
  expect_arg_error(c, arg, also);
}

TEST(DecodeAttentionValidation, ValidCallsReachTheDevicePointerCheck) {
  const std::string device = "device memory of the current CUDA device";
  for (bool append : {false, true}) {
    expect_arg_error(valid(append), "q", device);
    expect_arg_error(paged(append), "q", device);
    Call c = valid(append);
    c.p.num_splits = 128, c.p.causal = true, c.p.window_left = 100, c.p.softcap = 30.f, c.lse = nullptr;
    expect_arg_error(c, "q", device);
  }
}

TEST(DecodeAttentionValidation, MessageNamesTheFunction) {
  for (bool append : {false, true}) {
    Call c = valid(append);
    c.q.head_dim = 96;
    try {
      c();
      FAIL() << "no error for head_dim 96";
    } catch (const Error& e) {
      const std::string want = append ? "blockfuse::decode_attention_with_kvcache" : "blockfuse::decode_attention:";
      EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
    }
  }
}

TEST(DecodeAttentionValidation, ShapesAndTypes) {
  for (bool append : {false, true}) {
    SCOPED_TRACE(append ? "with_kvcache" : "decode_attention");
    expect_error([](Call& c) { c.q.seqlen = 0, c.out.seqlen = 0; }, "q", "1 <= seqlen <= 16", append);
    expect_error([](Call& c) { c.q.seqlen = 17, c.out.seqlen = 17, c.kn.seqlen = c.vn.seqlen = 17; }, "q", "1 <= seqlen <= 16", append);
    expect_error([](Call& c) { c.q.head_dim = c.out.head_dim = c.k.head_dim = c.v.head_dim = 96; }, "q", "64, 128 or 256", append);
    expect_error([](Call& c) { c.q.dtype = static_cast<DType>(5); }, "q", "bf16 or fp16", append);
    expect_error([](Call& c) { c.k.dtype = DType::kFP16; }, "k_cache", "dtype", append);
    expect_error([](Call& c) { c.v.dtype = DType::kFP16; }, "v_cache", "dtype", append);
    expect_error([](Call& c) { c.out.dtype = DType::kFP16; }, "out", "dtype", append);
    expect_error([](Call& c) { c.k.head_dim = 64; }, "k_cache", "head_dim", append);
    expect_error([](Call& c) { c.v.heads = 4; }, "v_cache", "heads", append);
    expect_error([](Call& c) { c.v.seqlen = 4000; }, "v_cache", "seqlen", append);
    expect_error([](Call& c) { c.k.heads = c.v.heads = 5, c.kn.heads = c.vn.heads = 5; }, "k_cache", "q.heads % k_cache.heads == 0", append);
    expect_error([](Call& c) { c.k.batch = c.v.batch = 3; }, "k_cache", "batch", append);
    expect_error([](Call& c) { c.out.seqlen = 2; }, "out", "seqlen", append);
    expect_error([](Call& c) { c.out.heads = 16; }, "out", "heads", append);
    expect_error([](Call& c) { c.k.seqlen = c.v.seqlen = 0; }, "k_cache", "capacity", append);
    expect_error([](Call& c) { c.q.data = nullptr; }, "q", "valid device pointer", append);
  }
  // The new keys must fit: a cache of capacity 1 cannot take 2 new tokens.
  expect_error([](Call& c) { c.q.seqlen = c.out.seqlen = c.kn.seqlen = c.vn.seqlen = 2, c.k.seqlen = c.v.seqlen = 1; },
               "k_cache", "room for the new keys", true);
}

TEST(DecodeAttentionValidation, StridesAndAlignment) {
  for (bool append : {false, true}) {
    SCOPED_TRACE(append ? "with_kvcache" : "decode_attention");
    expect_error([](Call& c) { c.q.seq_stride = 100; }, "q", "seq_stride % 8 == 0", append);
    expect_error([](Call& c) { c.k.head_stride = 64; }, "k_cache", "head_stride >= head_dim", append);
    expect_error([](Call& c) { c.v.batch_stride = 12; }, "v_cache", "batch_stride % 8 == 0", append);
    expect_error([](Call& c) { c.k.seq_stride = int64_t(1) << 31; }, "k_cache", "seq_stride < 2^31", append);
    expect_error([](Call& c) { c.v.seq_stride = int64_t(1) << 32; }, "v_cache", "seq_stride < 2^31", append);
    expect_error([](Call& c) { c.q.data = offset(c.q.data, 8); }, "q", "16-byte aligned", append);
    expect_error([](Call& c) { c.k.data = offset(c.k.data, 2); }, "k_cache", "16-byte aligned", append);
    expect_error([](Call& c) { c.lse = offset(c.lse, 2); }, "lse", "4-byte aligned", append);
    expect_error([](Call& c) { c.lens = nullptr; }, "cache_seqlens", "int32 device buffer", append);
    expect_error([](Call& c) { c.lens = offset(c.lens, 2); }, "cache_seqlens", "int32 device buffer", append);
    expect_error([](Call& c) { c.out.data = offset(const_cast<void*>(c.q.data), 256); }, "out", "overlap", append);
    expect_error([](Call& c) { c.out.data = const_cast<void*>(c.k.data); }, "out", "overlap", append);
    expect_error([](Call& c) { c.lse = static_cast<float*>(c.out.data); }, "lse", "overlap", append);
  }
  // The append writes the caches: they must not overlap each other or the new keys.
  expect_error([](Call& c) { c.v.data = c.k.data; }, "k_cache", "overlap", true);
  expect_error([](Call& c) { c.kn.data = offset(c.k.data, 4096); }, "k_cache", "overlap", true);
}

TEST(DecodeAttentionValidation, MaskScalarsAndSplits) {
  for (bool append : {false, true}) {
    SCOPED_TRACE(append ? "with_kvcache" : "decode_attention");
    expect_error([](Call& c) { c.p.num_splits = 129; }, "params.num_splits", "1..128", append);
    expect_error([](Call& c) { c.p.num_splits = -1; }, "params.num_splits", "1..128", append);
    expect_error([](Call& c) { c.p.softcap = -1.f; }, "params.softcap", "> 0", append);
    expect_error([](Call& c) { c.p.softmax_scale = 1.f / 0.f; }, "params.softmax_scale", "finite", append);
    expect_error([](Call& c) { c.p.window_left = -2; }, "params.window_left", "-1", append);
    expect_error([](Call& c) { c.p.window_right = -3; }, "params.window_right", "-1", append);
    expect_error([](Call& c) { c.p.causal = true, c.p.window_right = 3; }, "params.window_right", "causal", append);
    expect_error([](Call& c) { c.p.max_seqlen_k = -5; }, "params.max_seqlen_k", "0", append);
  }
}

// The launch grid's limits: rows of q below 2^31, splits · KV heads within grid y.
TEST(DecodeAttentionValidation, GridLimits) {
  for (bool append : {false, true}) {
    SCOPED_TRACE(append ? "with_kvcache" : "decode_attention");
    expect_error(
        [](Call& c) {
          c.q = make_attn_tensor(c.q.data, DType::kBF16, 65535, 16, 4096, 128);
          c.out = make_attn_tensor(c.out.data, DType::kBF16, 65535, 16, 4096, 128);
          c.k.batch = c.v.batch = 65535;
        },
        "q", "< 2^31", append);
    expect_error(
        [](Call& c) {
          c.q.heads = c.out.heads = 1024, c.k.heads = c.v.heads = c.kn.heads = c.vn.heads = 1024, c.p.num_splits = 128;
        },
        "params.num_splits", "65535", append);
  }
}

// The workspace: known without the device when num_splits is given (decode_attention).
TEST(DecodeAttentionValidation, Workspace) {
  const size_t need = decode_attention_workspace_size(2, 1, 32, 8, 128, 4096, 4);
  expect_error([](Call& c) { c.ws = nullptr, c.ws_bytes = 0, c.p.num_splits = 4; }, "workspace", "decode_attention_workspace_size");
  expect_error([need](Call& c) { c.ws_bytes = need - 1, c.p.num_splits = 4; }, "workspace", std::to_string(need));
  expect_error([need](Call& c) { c.ws = offset(c.ws, 8), c.ws_bytes = need, c.p.num_splits = 4; }, "workspace", "16-byte aligned");
  // One split needs none: a null workspace is fine (the call gets to the device-pointer check).
  expect_error([](Call& c) { c.ws = nullptr, c.ws_bytes = 0, c.p.num_splits = 1; }, "q", "device memory");
}

TEST(DecodeAttentionValidation, PagedCache) {
  for (bool append : {false, true}) {
    SCOPED_TRACE(append ? "with_kvcache" : "decode_attention");
    expect_error([](Call& c) { c.p.max_blocks = 0; }, "params.max_blocks", ">= 1", append, true);
    expect_error([](Call& c) { c.p.block_table_stride = 3; }, "params.block_table_stride", ">= max_blocks", append, true);
    expect_error([](Call& c) { c.p.block_table = offset(c.p.block_table, 2); }, "params.block_table", "int32", append, true);
    expect_error([](Call& c) { c.k.batch = c.v.batch = 0; }, "k_cache", "num_blocks >= 1", append, true);
    expect_error([](Call& c) { c.v.seqlen = 32; }, "v_cache", "seqlen", append, true);
    // A table without a paged cache, or table sizes without a table.
    expect_error([](Call& c) { c.p.max_blocks = 4; }, "params.block_table", "a block_table for a paged cache", append);
    expect_error([](Call& c) { c.p.block_table_stride = 8; }, "params.block_table", "a block_table for a paged cache", append);
  }
  // A padded table (stride > max_blocks) is valid.
  expect_error([](Call& c) { c.p.block_table_stride = 11; }, "q", "device memory", false, true);
}

TEST(DecodeAttentionValidation, HostCopies) {
  static const int32_t ok_lens[2] = {10, 64}, past[2] = {10, 129}, negative[2] = {-1, 3}, full[2] = {128, 0};
  // Page indices in [0, 64): row 0 uses pages 0..0 (10 keys), row 1 pages 0..3 (64 keys); entry [1][3] bad.
  static const int32_t table_ok[2 * 8] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static const int32_t table_bad[2 * 8] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 64, 12, 13, 14, 15};
  static const int32_t table_neg[2 * 8] = {-1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  // Entries past the pages a sequence uses are not checked (they may hold anything).
  static const int32_t table_unused_bad[2 * 8] = {0, -9, 99, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, -1, 999, 15};
  // Padded rows (stride 10): the bad entry [1][3] at 13.
  static const int32_t table_padded_bad[2 * 10] = {0, 1, 2, 3, 4, 5, 6, 7, -1, -1, 8, 9, 10, 70, 12, 13, 14, 15, -1, -1};
  for (bool append : {false, true}) {
    SCOPED_TRACE(append ? "with_kvcache" : "decode_attention");
    expect_error([](Call& c) { c.p.host_cache_seqlens = past; }, "cache_seqlens", append ? "<= 127" : "<= 128", append, true);
    expect_error([](Call& c) { c.p.host_cache_seqlens = negative; }, "cache_seqlens", "0 <= length", append);
    expect_error([](Call& c) { c.p.host_cache_seqlens = ok_lens, c.p.host_block_table = table_bad; }, "block_table", "[0, 64)", append, true);
    expect_error([](Call& c) { c.p.host_cache_seqlens = ok_lens, c.p.host_block_table = table_neg; }, "block_table", "[0, 64)", append, true);
    expect_error([](Call& c) { c.p.host_cache_seqlens = ok_lens, c.p.host_block_table = table_padded_bad, c.p.block_table_stride = 10; },
                 "block_table", "[0, 64)", append, true);
    expect_error([](Call& c) { c.p.host_block_table = table_ok; }, "params.host_block_table", "host_cache_seqlens", append, true);
    // Valid host copies: the call reaches the device-pointer check.
    expect_error([](Call& c) { c.p.host_cache_seqlens = ok_lens, c.p.host_block_table = table_ok; }, "q", "device memory", append, true);
    expect_error([](Call& c) { c.p.host_cache_seqlens = ok_lens, c.p.host_block_table = table_unused_bad; }, "q", "device memory", append, true);
  }
  // Full caches: no room for the new key (with_kvcache only); a full cache is fine without it.
  expect_error([](Call& c) { c.p.host_cache_seqlens = full; }, "cache_seqlens", "<= 127", true, true);
  expect_error([](Call& c) { c.p.host_cache_seqlens = full; }, "q", "device memory", false, true);
}

TEST(DecodeAttentionValidation, LeftPadding) {
  static const int32_t lens[2] = {10, 64}, pads_ok[2] = {10, 0}, pads_past[2] = {0, 65}, pads_neg[2] = {-2, 0};
  const int32_t* dev_pads = static_cast<const int32_t*>(fake(13));
  // decode_attention: a device pointer, its host copy checked against the host lengths.
  expect_error([&](Call& c) { c.p.cache_leftpad = offset(dev_pads, 2); }, "params.cache_leftpad", "aligned");
  expect_error([](Call& c) { c.p.host_cache_seqlens = lens, c.p.host_cache_leftpad = pads_ok; }, "params.host_cache_leftpad",
               "cache_leftpad as well");
  expect_error([&](Call& c) { c.p.cache_leftpad = dev_pads, c.p.host_cache_leftpad = pads_ok; }, "params.host_cache_leftpad",
               "host_cache_seqlens as well");
  expect_error([&](Call& c) { c.p.cache_leftpad = dev_pads, c.p.host_cache_seqlens = lens, c.p.host_cache_leftpad = pads_past; },
               "cache_leftpad", "0 <= cache_leftpad <= cache_seqlens");
  expect_error([&](Call& c) { c.p.cache_leftpad = dev_pads, c.p.host_cache_seqlens = lens, c.p.host_cache_leftpad = pads_neg; },
               "cache_leftpad", "0 <= cache_leftpad <= cache_seqlens", false, true);
  // Valid (P_b = L_b included): the call reaches the device-pointer check.
  expect_error([&](Call& c) { c.p.cache_leftpad = dev_pads; }, "q", "device memory");
  expect_error([&](Call& c) { c.p.cache_leftpad = dev_pads, c.p.host_cache_seqlens = lens, c.p.host_cache_leftpad = pads_ok; },
               "q", "device memory", false, true);
  // decode_attention_with_kvcache takes none.
  expect_error([&](Call& c) { c.p.cache_leftpad = dev_pads; }, "params.cache_leftpad", "decode_attention_with_kvcache takes no",
               true);
}

TEST(DecodeAttentionValidation, WithKvcache) {
  auto e = [](const std::function<void(Call&)>& edit, const std::string& arg, const std::string& also) {
    expect_error(edit, arg, also, true);
  };
  e([](Call& c) { c.kn.heads = 4; }, "k_new", "heads");
  e([](Call& c) { c.vn.seqlen = 2; }, "v_new", "seqlen");
  e([](Call& c) { c.kn.dtype = DType::kFP16; }, "k_new", "dtype");
  e([](Call& c) { c.vn.dtype = DType::kFP16; }, "v_new", "dtype");
  e([](Call& c) { c.kn.batch = 1; }, "k_new", "batch");
  e([](Call& c) { c.vn.head_dim = 64; }, "v_new", "head_dim");
  e([](Call& c) { c.kn.seq_stride = 12; }, "k_new", "seq_stride % 8 == 0");
  e([](Call& c) { c.r.sin = nullptr; }, "rotary.sin", "both tables or neither");
  e([](Call& c) { c.r.cos = nullptr; }, "rotary.cos", "both tables or neither");
  e([](Call& c) { c.r.rotary_dim = 7; }, "rotary.rotary_dim", "even");
  e([](Call& c) { c.r.rotary_dim = 256; }, "rotary.rotary_dim", "[2, 128]");
  e([](Call& c) { c.r.rotary_dim = -2; }, "rotary.rotary_dim", "even");
  e([](Call& c) { c.r.rotary_dim = 64, c.r.ld = 16; }, "rotary.ld", ">= rotary_dim / 2");
  e([](Call& c) { c.r.max_positions = 4095; }, "rotary.max_positions", "4096");
  e([](Call& c) { c.r.sin = offset(c.r.sin, 2); }, "rotary.sin", "aligned");
  e([](Call& c) { c.out.data = const_cast<void*>(c.kn.data); }, "out", "overlap");
  // Paged: the capacity is max_blocks · page = 128 positions.
  expect_error([](Call& c) { c.r.max_positions = 127; }, "rotary.max_positions", "128", true, true);
  // No rotary, or fp16/bf16 tables with a padded row: valid.
  e([](Call& c) { c.r = RotaryParams{}; }, "q", "device memory");
  e([](Call& c) { c.r.fp32 = false, c.r.rotary_dim = 64, c.r.ld = 40; }, "q", "device memory");
}

}  // namespace
}  // namespace blockfuse
