// blockfuse::rope — rotary position embedding as Hugging Face's apply_rotary_pos_emb applies it
// (GPT-NeoX's rotate-half pairing (i, i + D/2) over the whole head dim), forward and backward, in one
// pass over the tensor:
//   forward   out = x · cos + rotate_half(x) · sin,    rotate_half(x) = [−x₂, x₁]
//   backward  dx  = dy · cos + rotate_halfᵀ(dy · sin), rotate_halfᵀ(v) = [v₂, −v₁]
// where the eager form (a cat, two broadcast multiplies and an add per tensor, each a pass over it;
// their autograd the same again) runs five to six passes. fp32 arithmetic, one rounding.
//
// x and out are [batch, seqlen, heads, head_dim] views (AttnConstTensor / AttnTensor of
// blockfuse/attention.h: any strides in multiples of 8 elements with the head dim contiguous, so a
// query projection viewed [B, S, H, D] — what Hugging Face transposes to [B, H, S, D] — is passed as it
// is). cos and sin are [tables.batch, seqlen, head_dim] rows of x's dtype (Hugging Face's rotary
// embedding output after its cast), tables.batch 1 (shared by every sequence) or x.batch. out may be
// x itself (in place); otherwise the two must not overlap. head_dim 64, 128 or 256 (the attention
// family's); batch · seqlen · heads · head_dim / 16 < 2^31.
//
// Errors (blockfuse::Error naming the argument, nothing launched): dtype other than bf16/fp16 or a
// dtype mismatch, shapes that differ, strides or pointers the 16-byte accesses cannot take, host
// memory, a partial overlap of out and x. An empty tensor launches nothing.
#pragma once

#include <cstdint>

#include "blockfuse/attention.h"
#include "blockfuse/common.h"

namespace blockfuse {

struct RopeTables {
  const void* cos = nullptr;
  const void* sin = nullptr;
  int64_t batch = 1;         // 1: one table for every sequence; else x.batch
  int64_t batch_stride = 0;  // elements between sequences' tables (ignored when batch == 1)
  int64_t seq_stride = 0;    // elements between positions; >= head_dim, a multiple of 8
};

void rope(AttnConstTensor x, AttnTensor out, const RopeTables& tables, bool backward, cudaStream_t stream = nullptr);

}  // namespace blockfuse
