// The D = 64 fp16 instantiation of the sm90a attention backward's dK/dV kernel (one file per dtype: they
// compile in parallel).
#include "attention/launch_backward_sm90.cuh"

namespace blockfuse::attn::sm90::bwd {

void launch_dkdv_d64_fp16(const BwdParams& p, cudaStream_t stream) { launch_dkdv<BwdTraitsD64<cutlass::half_t>>(p, stream); }

}  // namespace blockfuse::attn::sm90::bwd
