// The D = 64, 192-row-tile fp16 instantiation of the sm90a attention kernel.
#include "attention/launch_sm90.cuh"

namespace blockfuse::attn::sm90 {

void launch_d64_m192_fp16(const Params& p, cudaStream_t stream) { launch<TraitsD64M192<cutlass::half_t>>(p, stream); }

}  // namespace blockfuse::attn::sm90
