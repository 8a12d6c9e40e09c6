// The D = 256 bf16 instantiation of the sm90a attention kernel (one file per dtype: they compile in parallel).
#include "attention/launch_sm90.cuh"

namespace blockfuse::attn::sm90 {

void launch_d256_bf16(const Params& p, cudaStream_t stream) { launch<TraitsD256<cutlass::bfloat16_t>>(p, stream); }

int smem_bytes_d256() { return TraitsD256<cutlass::bfloat16_t>::kSmemBytes; }

}  // namespace blockfuse::attn::sm90
