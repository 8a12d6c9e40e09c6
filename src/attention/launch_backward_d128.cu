// The attention backward kernels at head_dim 128 (bf16 and fp16).
#include "attention/launch_backward.cuh"

namespace blockfuse::attn::bwd {

void launch_d128(const BwdParams& p, DType dtype, int batch, int rows_dsum, cudaStream_t stream,
                 DkdvLauncher dkdv) {
  launch_head_dim<128>(p, dtype, batch, rows_dsum, stream, dkdv);
}

}  // namespace blockfuse::attn::bwd
