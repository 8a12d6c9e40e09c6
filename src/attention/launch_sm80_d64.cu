// The D = 64 instantiations of the sm80 attention kernel (one file per head dim: they compile in parallel).
#include "attention/launch_sm80.cuh"

namespace blockfuse::attn {

void launch_sm80_d64(const Params& p, const TileConfig& c, DType dtype, cudaStream_t stream) {
  if (launch_if<64, 128, 128, 4>(p, c, dtype, stream)) return;
  if (launch_if<64, 128, 64, 4>(p, c, dtype, stream)) return;
  no_such_config(c);
}

}  // namespace blockfuse::attn
