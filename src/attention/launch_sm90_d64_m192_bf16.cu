// The D = 64, 192-row-tile bf16 instantiation of the sm90a attention kernel (one file per dtype: they
// compile in parallel).
#include "attention/launch_sm90.cuh"

namespace blockfuse::attn::sm90 {

void launch_d64_m192_bf16(const Params& p, cudaStream_t stream) { launch<TraitsD64M192<cutlass::bfloat16_t>>(p, stream); }

int smem_bytes_d64_m192() { return TraitsD64M192<cutlass::bfloat16_t>::kSmemBytes; }

}  // namespace blockfuse::attn::sm90
