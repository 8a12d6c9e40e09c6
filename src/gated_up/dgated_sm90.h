// Internal: the sm90a launcher of the gated MLP's fused backward through the down projection
// (dgated_sm90.cu), which gated_mlp_dgated (dgated.cpp) calls once it has validated the arguments.
// It exists only in a build with the Hopper kernels (BLOCKFUSE_HAS_SM90).
#pragma once

#include <cuda_runtime_api.h>

#include "blockfuse/common.h"
#include "gated_up/params.h"

namespace blockfuse::sm90 {
void launch_dgated(DType dtype, const DGatedParams& p, cudaStream_t stream);
// The persistent scheduler's swizzle for the m x u output on the dgated kernel's tile, on sm_count SMs.
int dgated_max_swizzle(int64_t m, int64_t u, int sm_count);
}  // namespace blockfuse::sm90
