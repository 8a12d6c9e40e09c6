// The D = 64 bf16 instantiation of the sm90a attention backward's dK/dV kernel (one file per dtype: they
// compile in parallel).
#include "attention/launch_backward_sm90.cuh"

namespace blockfuse::attn::sm90::bwd {

void launch_dkdv_d64_bf16(const BwdParams& p, cudaStream_t stream) { launch_dkdv<BwdTraitsD64<cutlass::bfloat16_t>>(p, stream); }

int dkdv_smem_bytes_d64() { return BwdTraitsD64<cutlass::bfloat16_t>::kSmemBytes; }

}  // namespace blockfuse::attn::sm90::bwd
