// The sm90a gated-up kernel for bf16, and the per-config shared-memory sizes: one dtype per
// translation unit so the two CUTLASS sm90a builds run in parallel. Built only with
// BLOCKFUSE_ENABLE_SM90 (see the end of CMakeLists.txt), for sm_90a only.
#include "gated_up/launch_sm90.h"
#include "gated_up/launch_sm90.cuh"

namespace blockfuse::sm90 {

void launch_gated_up_bf16(int config, const GatedUpParams& p, cudaStream_t stream) {
  launch_gated_up<cute::bfloat16_t>(config, p, stream);
}

int smem_bytes(int config) {
  // The shared storage does not depend on which 16-bit dtype it holds.
  switch (config) {
    case 0: return Sm90KernelFor<cute::bfloat16_t, 0>::Kernel::SharedStorageSize;
    case 1: return Sm90KernelFor<cute::bfloat16_t, 1>::Kernel::SharedStorageSize;
    case 2: return Sm90KernelFor<cute::bfloat16_t, 2>::Kernel::SharedStorageSize;
  }
  throw Error(detail::cat("blockfuse::gated_up: sm90 tile config ", config, " does not exist"));
}

}  // namespace blockfuse::sm90
