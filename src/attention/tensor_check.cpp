// The shared checks of the attention views (tensor_check.h).
#include "attention/tensor_check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attention/params.h"

namespace blockfuse::attn {

using detail::cat;
using detail::throw_arg;

detail::Span span_of_tensor(const AttnConstTensor& t) {
  if (t.batch == 0 || t.seqlen == 0 || t.heads == 0) return detail::Span{};
  const int64_t last = (t.batch - 1) * t.batch_stride + (t.seqlen - 1) * t.seq_stride +
                       (t.heads - 1) * t.head_stride + t.head_dim;
  auto* b = static_cast<const char*>(t.data);
  return detail::Span{b, b + last * 2};
}

void check_tensor(const char* fn, const char* arg, const AttnConstTensor& t, int64_t max_batch, bool varlen) {
  if (t.dtype != DType::kBF16 && t.dtype != DType::kFP16)
    throw_arg(fn, arg, cat("has dtype code ", static_cast<int>(t.dtype)), "bf16 or fp16");
  if (t.head_dim != 64 && t.head_dim != 128 && t.head_dim != 256)
    throw_arg(fn, arg, cat("has head_dim = ", t.head_dim), "64, 128 or 256");
  if (t.batch < 0 || t.seqlen < 0 || t.heads < 1)
    throw_arg(fn, arg, cat("has batch = ", t.batch, ", seqlen = ", t.seqlen, ", heads = ", t.heads),
              "batch >= 0, seqlen >= 0, heads >= 1");
  if (varlen && t.batch != 1)
    throw_arg(fn, arg, cat("has batch = ", t.batch, " in varlen mode"),
              "a packed [total, heads, head_dim] tensor passed as batch = 1, seqlen = total");
  if (t.seqlen >= kMaxSeqlen) throw_arg(fn, arg, cat("has seqlen = ", t.seqlen), "seqlen < 2^30");
  if (t.heads > 65535) throw_arg(fn, arg, cat("has heads = ", t.heads), "heads <= 65535 (grid y)");
  if (t.batch > max_batch) throw_arg(fn, arg, cat("has batch = ", t.batch), cat("batch <= ", max_batch));
  // Strides: multiples of 8 elements (16-byte vectors), the head dim contiguous.
  const struct { const char* name; int64_t v; bool used; } strides[] = {
      {"batch_stride", t.batch_stride, !varlen && t.batch > 1},
      {"seq_stride", t.seq_stride, t.seqlen > 1},
      {"head_stride", t.head_stride, t.heads > 1}};
  for (const auto& s : strides) {
    if (s.v % 8 != 0)
      throw_arg(fn, arg, cat("has ", s.name, " = ", s.v), cat(s.name, " % 8 == 0 (16-byte vector loads)"));
    if (s.used && s.v < t.head_dim)
      throw_arg(fn, arg, cat("has ", s.name, " = ", s.v, " with head_dim = ", t.head_dim),
                cat(s.name, " >= head_dim (the head dim is contiguous, stride 1; rows must not overlap)"));
  }
  if (t.data == nullptr && t.batch > 0 && t.seqlen > 0)
    throw_arg(fn, arg, "has a null data pointer", "a valid device pointer for a non-empty tensor");
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0)
    throw_arg(fn, arg, cat("pointer ", t.data, " is not 16-byte aligned"), "a 16-byte aligned data pointer");
}

ScoreScale score_scale(float softmax_scale, float softcap, int64_t head_dim) {
  const double scale = softmax_scale > 0 ? softmax_scale : 1.0 / std::sqrt(double(head_dim));
  constexpr double kLog2e = 1.4426950408889634;
  if (softcap > 0)
    return ScoreScale{static_cast<float>(softcap * kLog2e), softcap, static_cast<float>(scale / softcap)};
  return ScoreScale{static_cast<float>(scale * kLog2e), static_cast<float>(scale), 0.0f};
}

int window_left_bound(int64_t window_left) {
  return window_left < 0 ? kWindowUnbounded : static_cast<int>(std::min<int64_t>(window_left, kWindowUnbounded));
}

int window_right_bound(int64_t window_right, bool causal) {
  const int64_t right = causal ? 0 : window_right;
  return right < 0 ? kWindowUnbounded : static_cast<int>(std::min<int64_t>(right, kWindowUnbounded));
}

}  // namespace blockfuse::attn
