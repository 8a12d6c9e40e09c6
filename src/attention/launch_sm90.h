// Internal: the sm90a attention launchers the dispatcher (attention.cpp) calls. They exist only
// when the library was built with the Hopper kernels (CMake BLOCKFUSE_SM90, which defines
// BLOCKFUSE_HAS_SM90=1 on blockfuse). Arguments are already validated; the shapes are the ones
// attention_sm90_supports() accepts (attention.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include "attention/params.h"

namespace blockfuse::attn::sm90 {

// The stage-1 kernel: D = 128, tile 128 x 128, non-causal, no window or soft-cap, batched
// (no cu_seqlens). One translation unit per dtype (launch_sm90_d128_{bf16,fp16}.cu).
void launch_d128_bf16(const AttnParams& p, cudaStream_t stream);
void launch_d128_fp16(const AttnParams& p, cudaStream_t stream);
// Dynamic shared memory the D = 128 kernel uses (bytes; the same for both dtypes), for the
// dispatcher's fits-the-device check.
int smem_bytes_d128();

}  // namespace blockfuse::attn::sm90
