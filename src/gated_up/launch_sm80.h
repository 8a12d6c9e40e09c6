// Internal: the per-dtype sm80 kernel launchers the dispatcher (gated_up.cpp) calls. Arguments are
// already validated; `config` indexes kSm80TileConfigs (tile_configs_sm80.h).
#pragma once

#include <cuda_runtime_api.h>

#include "gated_up/params.h"

namespace blockfuse::sm80 {
void launch_gated_up_bf16(int config, const GatedUpParams& p, cudaStream_t stream);
void launch_gated_up_fp16(int config, const GatedUpParams& p, cudaStream_t stream);
}  // namespace blockfuse::sm80
