// attention()'s argument errors: every bad call throws blockfuse::Error naming the argument and the
// requirement before any CUDA call, so these run on CPU-only machines. Pointers are fake aligned
// addresses that are never dereferenced.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "blockfuse/attention.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

struct Call {
  AttnConstTensor q, k, v;
  AttnTensor out;
  float* lse = nullptr;
  AttentionParams p;
  bool use_config = false;
  AttentionConfig cfg{128, 64, 4};
  void operator()() const {
    if (use_config)
      attention(q, k, v, out, lse, p, cfg);
    else
      attention(q, k, v, out, lse, p);
  }
};

// A valid batched GQA call on a fused QKV buffer: [B=2, S=100, (8 + 2 + 2) heads, 128].
Call valid(DType dt = DType::kBF16) {
  Call c;
  const int64_t D = 128, H = 12, row = H * D;
  c.q = AttnConstTensor{fake(1), dt, 2, 100, 8, D, 100 * row, row, D};
  c.k = AttnConstTensor{static_cast<char*>(fake(1)) + 8 * D * 2, dt, 2, 100, 2, D, 100 * row, row, D};
  c.v = AttnConstTensor{static_cast<char*>(fake(1)) + 10 * D * 2, dt, 2, 100, 2, D, 100 * row, row, D};
  c.out = make_attn_tensor(fake(2), dt, 2, 100, 8, D);
  c.lse = static_cast<float*>(fake(3));
  return c;
}

TEST(AttentionArgs, MessageNamesTheFunction) {
  Call c = valid();
  c.q.head_dim = 96;
  try {
    c();
    FAIL() << "no error for head_dim 96";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("blockfuse::attention", 0), 0u) << e.what();
  }
}

TEST(AttentionArgs, ShapesAndTypes) {
  { Call c = valid(); c.q.head_dim = c.k.head_dim = c.v.head_dim = c.out.head_dim = 80; expect_arg_error(c, "q", "64, 128 or 256"); }
  { Call c = valid(); c.k.head_dim = 64; expect_arg_error(c, "k", "head_dim"); }
  { Call c = valid(); c.k.heads = c.v.heads = 3; expect_arg_error(c, "k", "q.heads % k.heads == 0"); }
  { Call c = valid(); c.v.heads = 4; expect_arg_error(c, "v", "heads"); }
  { Call c = valid(); c.k.dtype = DType::kFP16; expect_arg_error(c, "k", "dtype"); }
  { Call c = valid(); c.out.dtype = DType::kFP16; expect_arg_error(c, "out", "dtype"); }
  { Call c = valid(); c.q.dtype = static_cast<DType>(7); expect_arg_error(c, "q", "bf16 or fp16"); }
  { Call c = valid(); c.v.seqlen = 99; expect_arg_error(c, "v", "seqlen"); }
  { Call c = valid(); c.out.seqlen = 99; expect_arg_error(c, "out", "seqlen"); }
  { Call c = valid(); c.k.batch = 1; expect_arg_error(c, "k", "batch"); }
  { Call c = valid(); c.q.seqlen = -1; expect_arg_error(c, "q", "seqlen >= 0"); }
  { Call c = valid(); c.q.heads = 0; expect_arg_error(c, "q", "heads >= 1"); }
  { Call c = valid(); c.k.seqlen = c.v.seqlen = 0; expect_arg_error(c, "k", "seqlen >= 1"); }
  { Call c = valid(); c.q.data = nullptr; expect_arg_error(c, "q", "pointer"); }
}

TEST(AttentionArgs, StridesAndAlignment) {
  { Call c = valid(); c.q.seq_stride = 100; expect_arg_error(c, "q", "seq_stride % 8 == 0"); }
  { Call c = valid(); c.k.head_stride = 64; expect_arg_error(c, "k", "head_stride >= head_dim"); }
  { Call c = valid(); c.v.batch_stride = 12; expect_arg_error(c, "v", "batch_stride % 8 == 0"); }
  { Call c = valid(); c.q.data = static_cast<char*>(fake(1)) + 8; expect_arg_error(c, "q", "16-byte aligned"); }
  { Call c = valid(); c.lse = reinterpret_cast<float*>(static_cast<char*>(fake(3)) + 2); expect_arg_error(c, "lse", "4-byte aligned"); }
  { Call c = valid(); c.p.sm90_tile_counter = reinterpret_cast<int32_t*>(static_cast<char*>(fake(4)) + 2); expect_arg_error(c, "sm90_tile_counter", "4-byte aligned"); }
  { Call c = valid(); c.p.sm90_schedule = Sm90Schedule::kDynamic; expect_arg_error(c, "sm90_schedule", "a tile counter"); }
  { Call c = valid(); c.p.sm90_schedule = static_cast<Sm90Schedule>(3); expect_arg_error(c, "sm90_schedule", "kAuto, kPerTile or kDynamic"); }
  { Call c = valid(); c.out.data = const_cast<void*>(c.q.data); expect_arg_error(c, "out", "must not overlap"); }
  { Call c = valid(); c.lse = static_cast<float*>(c.out.data); expect_arg_error(c, "lse", "must not overlap"); }
}

TEST(AttentionArgs, MaskAndScalars) {
  { Call c = valid(); c.p.causal = true; c.p.window_right = 4; expect_arg_error(c, "window_right", "causal"); }
  { Call c = valid(); c.p.window_left = -2; expect_arg_error(c, "window_left", "-1"); }
  { Call c = valid(); c.p.window_right = -5; expect_arg_error(c, "window_right", "-1"); }
  { Call c = valid(); c.p.softcap = -1.0f; expect_arg_error(c, "softcap", "> 0"); }
  { Call c = valid(); c.p.softmax_scale = 1.0f / 0.0f; expect_arg_error(c, "softmax_scale", "finite"); }
  { Call c = valid(); c.p.sm90_block_m = 100; expect_arg_error(c, "sm90_block_m", "0 (the heuristic's), 128"); }
  { Call c = valid(); c.p.sm90_block_m = -1; expect_arg_error(c, "sm90_block_m", "192 at head_dim 64"); }
  { Call c = valid(); c.p.sm90_block_m = 192; expect_arg_error(c, "sm90_block_m", "192 at head_dim 64"); }  // D = 128
  { Call c = valid(); c.use_config = true; c.cfg = AttentionConfig{96, 64, 4}; expect_arg_error(c, "config", "attention_config"); }
}

// params.kernel: a known code; kSm90 only in a build with the sm90a kernel and without an explicit
// (sm80) AttentionConfig.
TEST(AttentionArgs, KernelChoice) {
  { Call c = valid(); c.p.kernel = static_cast<AttentionKernel>(7); expect_arg_error(c, "params.kernel", "kAuto, kSm80 or kSm90"); }
  if (!attention_has_sm90()) {
    Call c = valid();
    c.p.kernel = AttentionKernel::kSm90;
    expect_arg_error(c, "params.kernel", "BLOCKFUSE_SM90");
    return;
  }
  auto sm90 = [] {
    Call c = valid();
    c.p.kernel = AttentionKernel::kSm90;
    return c;
  };
  { Call c = sm90(); c.use_config = true; expect_arg_error(c, "params.kernel", "explicit AttentionConfig"); }
}

TEST(AttentionArgs, Varlen) {
  static const std::vector<int32_t> cq{0, 3, 3, 10}, ck{0, 5, 9, 12}, bad{0, 5, 4, 12}, nonzero{1, 5, 9, 12};
  auto varlen = [] {
    Call c;
    const DType dt = DType::kFP16;
    c.q = make_attn_tensor(fake(1), dt, 1, 10, 8, 64);
    c.k = make_attn_tensor(fake(2), dt, 1, 12, 2, 64);
    c.v = make_attn_tensor(fake(3), dt, 1, 12, 2, 64);
    c.out = make_attn_tensor(fake(4), dt, 1, 10, 8, 64);
    c.p.cu_seqlens_q = fake(5);
    c.p.cu_seqlens_k = fake(6);
    c.p.num_seqs = 3;
    c.p.max_seqlen_q = 7;
    c.p.max_seqlen_k = 5;
    c.p.host_cu_seqlens_q = cq.data();
    c.p.host_cu_seqlens_k = ck.data();
    return c;
  };
  { Call c = varlen(); c.p.cu_seqlens_type = IndexType::kInt64; expect_arg_error(c, "cu_seqlens_type", "int32"); }
  { Call c = varlen(); c.p.cu_seqlens_k = nullptr; expect_arg_error(c, "cu_seqlens_k", "both"); }
  { Call c = varlen(); c.p.host_cu_seqlens_k = bad.data(); expect_arg_error(c, "cu_seqlens_k", "non-decreasing"); }
  { Call c = varlen(); c.p.host_cu_seqlens_k = nonzero.data(); expect_arg_error(c, "cu_seqlens_k", "cu_seqlens[0] == 0"); }
  { Call c = varlen(); c.p.max_seqlen_q = 6; expect_arg_error(c, "max_seqlen_q", "<= the maximum"); }
  { Call c = varlen(); c.p.max_seqlen_k = 13; expect_arg_error(c, "max_seqlen_k", "total k rows"); }
  { Call c = varlen(); c.p.num_seqs = 0; expect_arg_error(c, "num_seqs", "1 <= num_seqs"); }
  { Call c = varlen(); c.q.batch = 2; expect_arg_error(c, "q", "batch = 1"); }
  { Call c = varlen(); c.p.cu_seqlens_q = static_cast<char*>(fake(5)) + 2; expect_arg_error(c, "cu_seqlens_q", "4-byte"); }
}

}  // namespace
}  // namespace blockfuse
