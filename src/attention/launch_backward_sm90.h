// Internal: the sm90a attention backward launchers (launch_backward_sm90_d{64,128}_{bf16,fp16}.cu) the
// dispatcher (attention.cpp) hands to the backward's launcher in place of the sm80 dK/dV kernel.
// They exist only when the library was built with the Hopper kernels (BLOCKFUSE_HAS_SM90). Arguments
// are already validated; p.dq_accum set and zeroed (and p.dq_semaphore in the deterministic mode),
// k with rows.
#pragma once

#include <cuda_runtime_api.h>

#include "attention/backward_params.h"

namespace blockfuse::attn::sm90::bwd {

void launch_dkdv_d64_bf16(const BwdParams& p, cudaStream_t stream);
void launch_dkdv_d64_fp16(const BwdParams& p, cudaStream_t stream);
void launch_dkdv_d128_bf16(const BwdParams& p, cudaStream_t stream);
void launch_dkdv_d128_fp16(const BwdParams& p, cudaStream_t stream);
// Dynamic shared memory of the kernel for head_dim 64 / 128 (bytes, the same for both dtypes).
int dkdv_smem_bytes_d64();
int dkdv_smem_bytes_d128();

}  // namespace blockfuse::attn::sm90::bwd
