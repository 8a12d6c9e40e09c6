// blockfuse_testing: fp32 GPU references of attention and its backward for the tests and the
// benchmark, where the fp64 CPU references (src/attention/reference.cpp) would take minutes. They are
// themselves checked against the CPU references on small shapes (tests/attention/test_attention_gpu.cu,
// test_attention_backward_gpu.cu).
#pragma once

#include <cuda_runtime_api.h>

#include "blockfuse/attention.h"

namespace blockfuse::testing {

// One block per computed query row: fp32 scores recomputed in two passes (max, then exp-sum and
// P·V), nothing tiled. out_ref: fp32, laid out like a contiguous q ([B, Sq, Hq, D] or
// [total, Hq, D]); lse_ref: [B, Hq, Sq] or [Hq, total]. Only rows s with s % row_step == 0 of each
// sequence are written (row_step >= 1; a subset keeps long sequences cheap). Same argument
// conventions as blockfuse::attention (varlen through params.cu_seqlens_q/k on the device).
void attention_reference_gpu(AttnConstTensor q, AttnConstTensor k, AttnConstTensor v,
                             const AttentionParams& params, float* out_ref, float* lse_ref, int row_step = 1,
                             cudaStream_t stream = nullptr);

// The backward given the forward's out and lse (as blockfuse::attention_backward takes them), fp32,
// nothing tiled, batched tensors only (no cu_seqlens): with P_ij = exp(s_ij − lse_i) (s the soft-capped
// scaled score, masked as the forward masks), Dsum_i = dO_i · O_i, dS_ij = P_ij (dO_i · v_j − Dsum_i)
// (times 1 − tanh² of the capped score's argument under a soft-cap),
//   dq_i = scale · Σ_j dS_ij k_j,   dk_j = scale · Σ_{i, heads of j's group} dS_ij q_i,
//   dv_j = Σ_{i, heads of j's group} P_ij dO_i.
// dq_ref fp32 laid out like a contiguous q, dk_ref / dv_ref like a contiguous k; only query rows
// s % row_step == 0 (dq) and key rows s % row_step == 0 (dk, dv) are written. One block per row.
void attention_backward_reference_gpu(AttnConstTensor q, AttnConstTensor k, AttnConstTensor v, AttnConstTensor out,
                                      AttnConstTensor dout, const float* lse, const AttentionParams& params,
                                      float* dq_ref, float* dk_ref, float* dv_ref, int row_step = 1,
                                      cudaStream_t stream = nullptr);

}  // namespace blockfuse::testing
