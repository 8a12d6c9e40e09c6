// Internal: the launchers of the compiled attention kernels (one translation unit per head dim).
#pragma once

#include <cuda_runtime_api.h>

#include "attention/params.h"

namespace blockfuse::attn {

// Launches the kernel of kTileConfigs[config] for dtype on `stream`, grid (ceil(seqlen_q / block_m),
// heads_q, batch). Defined in launch_sm80_d<D>.cu for the configurations of that head dim.
void launch_sm80_d64(const Params& p, const TileConfig& config, DType dtype, cudaStream_t stream);
void launch_sm80_d128(const Params& p, const TileConfig& config, DType dtype, cudaStream_t stream);
void launch_sm80_d256(const Params& p, const TileConfig& config, DType dtype, cudaStream_t stream);

}  // namespace blockfuse::attn
