// Internal: the sm90a gated-up launchers the dispatcher (gated_up.cpp) calls. They exist only
// when the library was built with the Hopper kernel (CMake option BLOCKFUSE_ENABLE_SM90 and
// architecture 90 in BLOCKFUSE_CUDA_ARCHS), which defines BLOCKFUSE_HAS_SM90=1. Arguments are
// already validated (including the TMA requirements: 16-byte-aligned pointers, ld % 8 == 0);
// `config` indexes kSm90TileConfigs (tile_configs_sm90.h).
#pragma once

#include <cuda_runtime_api.h>

#include "gated_up/params.h"

namespace blockfuse::sm90 {
void launch_gated_up_bf16(int config, const GatedUpParams& p, cudaStream_t stream);
void launch_gated_up_fp16(int config, const GatedUpParams& p, cudaStream_t stream);
// Dynamic shared memory the kernel of `config` uses (bytes; the same for both dtypes), for the
// dispatcher's fits-the-device check. Host-only; throws for an unknown config.
int smem_bytes(int config);
}  // namespace blockfuse::sm90
