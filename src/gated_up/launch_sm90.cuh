// Internal: host-side launch of the sm90a gated-up kernel for one (dtype, tile config); each pair is
// explicitly instantiated in its own CMake-generated translation unit (launch_sm90.h), so the
// slow CUTLASS sm90a builds run in parallel. The launch itself: launch_gemm_sm90.cuh.
#pragma once

#include "gated_up/gated_up_sm90.cuh"
#include "gated_up/launch_gemm_sm90.cuh"
#include "gated_up/launch_sm90.h"
#include "gated_up/params.h"

namespace blockfuse::sm90 {

template <class Cfg>
void launch_config(const GatedUpParams& p, cudaStream_t stream) {
  using T = typename Cfg::Element;
  launch_gated_up_gemm<Cfg>(p, "blockfuse::gated_up (sm90)", "K % 8 == 0, ld % 8 == 0, 16-byte-aligned pointers",
                            [&](auto& args) { set_operands<T, T>(args, p); }, stream);
}

template <DType D>
using ElementFor = std::conditional_t<D == DType::kBF16, cute::bfloat16_t, cute::half_t>;

template <DType D, int Config>
void launch_instance(const GatedUpParams& p, cudaStream_t stream) {
  launch_config<Sm90KernelFor<ElementFor<D>, Config>>(p, stream);
}

template <DType D, int Config>
size_t workspace_bytes_instance(const GatedUpParams& p) {
  return gemm_workspace_bytes<Sm90KernelFor<ElementFor<D>, Config>>(p);
}

// The shared storage does not depend on which 16-bit dtype it holds.
template <int Config>
int smem_bytes_instance() {
  return Sm90KernelFor<cute::bfloat16_t, Config>::Kernel::SharedStorageSize;
}

}  // namespace blockfuse::sm90
