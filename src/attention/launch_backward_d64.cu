// The attention backward kernels at head_dim 64 (bf16 and fp16).
#include "attention/launch_backward.cuh"

namespace blockfuse::attn::bwd {

void launch_d64(const BwdParams& p, DType dtype, int batch, int rows_dsum, cudaStream_t stream,
                DkdvLauncher dkdv) {
  launch_head_dim<64>(p, dtype, batch, rows_dsum, stream, dkdv);
}

}  // namespace blockfuse::attn::bwd
