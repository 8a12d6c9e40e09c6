// The sm90a gated-up kernel for fp16: one dtype per translation unit so the two CUTLASS sm90a
// builds run in parallel. Built only with BLOCKFUSE_ENABLE_SM90 (see the end of CMakeLists.txt).
#include "gated_up/launch_sm90.h"
#include "gated_up/launch_sm90.cuh"

namespace blockfuse::sm90 {
void launch_gated_up_fp16(int config, const GatedUpParams& p, cudaStream_t stream) {
  launch_gated_up<cute::half_t>(config, p, stream);
}
}  // namespace blockfuse::sm90
