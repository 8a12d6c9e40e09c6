// Internal: the FP8 sm90a gated-up launchers the dispatcher (gated_up_fp8.cpp) calls; they exist
// only in builds with the Hopper kernel (BLOCKFUSE_HAS_SM90). Arguments are already validated;
// `config` indexes kSm90Fp8TileConfigs (tile_configs_fp8_sm90.h).
#pragma once

#include <cuda_runtime_api.h>

#include "gated_up/params.h"

namespace blockfuse::sm90 {
void launch_gated_up_fp8(int config, const GatedUpFp8Params& p, cudaStream_t stream);
// Dynamic shared memory of `config`'s kernel for the given output (bytes). Throws for an unknown config.
int smem_bytes_fp8(int config, bool out_fp8);

// One instantiation per (output type, config), each in its own CMake-generated translation unit
// (launch_fp8_sm90_instance.cu.in).
template <bool OutFp8, int Config>
void launch_fp8_instance(const GatedUpFp8Params& p, cudaStream_t stream);
template <bool OutFp8, int Config>
int smem_bytes_fp8_instance();
}  // namespace blockfuse::sm90
