// Internal: the per-dtype kernel launchers the dispatcher (gated_up.cu) calls. Arguments are
// already validated; `config` indexes kSm80TileConfigs.
#pragma once

#include <cuda_runtime_api.h>

#include "gated_up/params.h"

namespace blockfuse::sm80 {
void launch_gated_up_bf16(int config, const GatedUpParams& p, cudaStream_t stream);
void launch_gated_up_fp16(int config, const GatedUpParams& p, cudaStream_t stream);
}  // namespace blockfuse::sm80
