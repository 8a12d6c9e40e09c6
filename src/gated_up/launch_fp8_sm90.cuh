// Internal: host-side launch of the FP8 sm90a gated-up kernel for one (output type, tile config),
// explicitly instantiated one per CMake-generated translation unit. Launched as the 16-bit kernel
// is (launch_gemm_sm90.cuh).
#pragma once

#include "gated_up/gated_up_fp8_sm90.cuh"
#include "gated_up/launch_gemm_sm90.cuh"
#include "gated_up/launch_fp8_sm90.h"
#include "gated_up/params.h"

namespace blockfuse::sm90 {

template <class Cfg>
void launch_fp8_config(const GatedUpFp8Params& p, cudaStream_t stream) {
  using TIn = typename Cfg::ElementIn;
  using TOut = typename Cfg::Element;
  launch_gated_up_gemm<Cfg>(p, "blockfuse::gated_up_fp8 (sm90)", "K % 16 == 0, ldx, ldw % 16 == 0, 16-byte-aligned pointers",
                            [&](auto& args) {
                              set_operands<TIn, TOut>(args, p);
                              args.epilogue.x_scale = p.x_scale;
                              args.epilogue.w_scale = p.w_scale;
                              args.epilogue.x_per_row = p.x_per_row;
                              args.epilogue.w_per_channel = p.w_per_channel;
                              args.epilogue.out_scale = p.out_scale;
                            }, stream);
}

template <bool OutFp8>
using Fp8OutputFor = std::conditional_t<OutFp8, cutlass::float_e4m3_t, cute::bfloat16_t>;

template <bool OutFp8, int Config>
void launch_fp8_instance(const GatedUpFp8Params& p, cudaStream_t stream) {
  launch_fp8_config<Sm90Fp8KernelFor<Fp8OutputFor<OutFp8>, Config>>(p, stream);
}

template <bool OutFp8, int Config>
int smem_bytes_fp8_instance() {
  return Sm90Fp8KernelFor<Fp8OutputFor<OutFp8>, Config>::Kernel::SharedStorageSize;
}

}  // namespace blockfuse::sm90
