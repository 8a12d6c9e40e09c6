// Internal: CPU reference of attention (fp64 accumulation) for the tests.
#pragma once

#include <cstdint>
#include <vector>

#include "blockfuse/attention.h"

namespace blockfuse::attn {

// Is key j visible to query row i of a sequence of sq queries and sk keys under `p` (causal,
// window)? The definition of include/blockfuse/attention.h, written out once for the references.
bool reference_visible(int64_t i, int64_t j, int64_t sq, int64_t sk, const AttentionParams& p);

// out and lse of attention(q, k, v) for host tensors of 2-byte values (views with host pointers,
// any head_dim >= 1). out: fp32, laid out like a contiguous q ([B, Sq, Hq, D] or [total, Hq, D]);
// lse: [B, Hq, Sq] or [Hq, total]. Varlen mode (p.cu_seqlens_q set) reads p.host_cu_seqlens_q/k.
// Scores, exponentials and sums in double; rows without a visible key get out 0, lse −inf.
void attention_reference(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v,
                         const AttentionParams& p, std::vector<float>& out, std::vector<float>& lse);

// Gradients of attention(q, k, v) given dout (host views, as above): dq, dk, dv in fp32, laid out
// like contiguous q, k, v. Scores, probabilities and sums in double from the definition:
//   dv = Pᵀ·dout, dP = dout·vᵀ, dS = P ∘ (dP − rowsum(dP ∘ P)), ds/dqk = scale (× (1 − tanh²) with a
//   soft-cap), dq = dS'·k, dk = dS'ᵀ·q, GQA summed over the query heads of a group.
void attention_backward_reference(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v,
                                  const AttnConstTensor& dout, const AttentionParams& p, std::vector<float>& dq,
                                  std::vector<float>& dk, std::vector<float>& dv);

}  // namespace blockfuse::attn
