// The D = 256 instantiations of the sm80 attention kernel (one file per head dim: they compile in parallel).
#include "attention/launch_sm80.cuh"

namespace blockfuse::attn {

void launch_sm80_d256(const Params& p, const TileConfig& c, DType dtype, cudaStream_t stream) {
  if (launch_if<256, 128, 64, 8>(p, c, dtype, stream)) return;
  if (launch_if<256, 64, 64, 4>(p, c, dtype, stream)) return;
  no_such_config(c);
}

}  // namespace blockfuse::attn
