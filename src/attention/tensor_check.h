// Internal: the argument checks that the forward (attention.cpp) and the decode path
// (decode_attention.cpp) share for their [batch, seqlen, heads, head_dim] views.
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

}  // namespace blockfuse::attn
