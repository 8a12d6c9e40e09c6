// The D = 64 instantiations of the sm80 attention kernel: the kTileConfigs rows of that head dim
// (one file per head dim: they compile in parallel).
#include "attention/launch_sm80.cuh"

namespace blockfuse::attn {

void launch_sm80_d64(const Params& p, const TileConfig& c, DType dtype, cudaStream_t stream) {
  launch_head_dim<64>(p, c, dtype, stream);
}

}  // namespace blockfuse::attn
