// Internal: what the forward (attention.cpp) and the decode path (decode_attention.cpp) share on the
// host: the checks of their [batch, seqlen, heads, head_dim] views, and the score scaling and window
// bounds in the form both kernels take.
#pragma once

#include <cstdint>

#include "blockfuse/attention.h"
#include "common/check.h"

namespace blockfuse::attn {

// Lengths below this keep the kernels' int row and key arithmetic exact.
inline constexpr int64_t kMaxSeqlen = int64_t(1) << 30;

// Byte range a view spans (for the overlap checks); empty for an empty view.
detail::Span span_of_tensor(const AttnConstTensor& t);

// dtype bf16/fp16, head_dim 64/128/256, sizes (batch <= max_batch, seqlen < 2^30, heads <= 65535;
// in varlen mode batch must be 1), strides (multiples of 8 elements, the head dim contiguous, used
// strides >= head_dim), a non-null 16-byte aligned pointer for a non-empty view. `fn` and `arg`
// name the entry point and the argument in the error.
void check_tensor(const char* fn, const char* arg, const AttnConstTensor& t, int64_t max_batch, bool varlen = false);

// The kernels' score scaling: exp2-domain factor (softmax_scale·log2 e, or softcap·log2 e with a
// soft-cap), the natural-log factor of the row max in the LSE, and the tanh argument's factor
// (softmax_scale / softcap; 0 without a soft-cap). softmax_scale <= 0 means 1/√head_dim.
struct ScoreScale {
  float scale_log2, scale_lse, softcap_mul;
};
ScoreScale score_scale(float softmax_scale, float softcap, int64_t head_dim);

// A window bound as the kernels store it: -1 (unbounded) becomes a value beyond every row
// (params.h kWindowUnbounded); causal forces the right bound to 0.
int window_left_bound(int64_t window_left);
int window_right_bound(int64_t window_right, bool causal);

}  // namespace blockfuse::attn
