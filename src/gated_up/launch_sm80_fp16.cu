// The sm80 gated-up kernel for fp16: one dtype per translation unit so the builds run in parallel.
#include "gated_up/launch_sm80.h"
#include "gated_up/launch_sm80.cuh"

namespace blockfuse::sm80 {
void launch_gated_up_fp16(int config, const GatedUpParams& p, cudaStream_t stream) {
  launch_gated_up<cute::half_t>(config, p, stream);
}
}  // namespace blockfuse::sm80
