// The decode attention kernels at head_dim 256 (bf16 and fp16).
#include "attention/launch_decode.cuh"

namespace blockfuse::attn::decode {

void launch_d256(const Params& p, const AppendParams* append, DType dtype, int m_frags, int m_blocks, cudaStream_t stream) {
  launch_head_dim<256>(p, append, dtype, m_frags, m_blocks, stream);
}

}  // namespace blockfuse::attn::decode
