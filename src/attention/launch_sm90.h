// Internal: the sm90a attention launchers the dispatcher (attention.cpp) calls. They exist only
// when the library was built with the Hopper kernels (CMake BLOCKFUSE_SM90, which defines
// BLOCKFUSE_HAS_SM90=1 on blockfuse). Arguments are already validated; the shapes are the ones
// attention_sm90_supports() accepts (attention.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include "attention/params.h"

namespace blockfuse::attn::sm90 {

// Tiles 128 x 128 (or 192 x 128) for D = 64, 128 x 128 for D = 128, 128 x 64 for D = 256; any mask, window or soft-cap;
// batched or varlen (cu_seqlens). One translation unit per (head dim, dtype):
// launch_sm90_d{64,128,256}_{bf16,fp16}.cu.
void launch_d64_bf16(const Params& p, cudaStream_t stream);
void launch_d64_fp16(const Params& p, cudaStream_t stream);
// D = 64 with 192-row tiles (three consumer warpgroups): launch_sm90_d64_m192_{bf16,fp16}.cu.
void launch_d64_m192_bf16(const Params& p, cudaStream_t stream);
void launch_d64_m192_fp16(const Params& p, cudaStream_t stream);
void launch_d128_bf16(const Params& p, cudaStream_t stream);
void launch_d128_fp16(const Params& p, cudaStream_t stream);
void launch_d256_bf16(const Params& p, cudaStream_t stream);
void launch_d256_fp16(const Params& p, cudaStream_t stream);
// Dynamic shared memory of the kernel for head_dim (64, 128, 256; bytes, the same for both dtypes),
// for the dispatcher's fits-the-device check.
int smem_bytes_d64();
int smem_bytes_d64_m192();
int smem_bytes_d128();
int smem_bytes_d256();

}  // namespace blockfuse::attn::sm90
