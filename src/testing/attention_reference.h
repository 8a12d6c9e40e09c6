// blockfuse_testing: an fp32 GPU reference of attention for the tests and the benchmark, where the
// fp64 CPU reference (src/attention/reference.cpp) would take minutes. It is itself checked against
// the CPU reference on small shapes (tests/attention/test_attention_gpu.cu).
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

}  // namespace blockfuse::testing
