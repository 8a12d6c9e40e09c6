// The D = 256 fp16 instantiation of the sm90a attention kernel (one file per dtype: they compile in parallel).
#include "attention/launch_sm90.cuh"

namespace blockfuse::attn::sm90 {

void launch_d256_fp16(const Params& p, cudaStream_t stream) { launch<TraitsD256<cutlass::half_t>>(p, stream); }

}  // namespace blockfuse::attn::sm90
