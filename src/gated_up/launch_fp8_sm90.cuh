// Internal: host-side launch of the FP8 sm90a gated-up kernel for one (output type, tile config),
// explicitly instantiated one per CMake-generated translation unit. Launched as the 16-bit kernel
// is (launch_sm90.cuh): cudaLaunchKernelEx with the cluster attribute, shared-memory opt-in once
// per device, no workspace; the host builds the three TMA descriptors per call.
#pragma once

#include "cutlass/device_kernel.h"

#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"
#include "gated_up/gated_up_fp8_sm90.cuh"
#include "gated_up/launch_fp8_sm90.h"
#include "gated_up/params.h"

namespace blockfuse::sm90 {

template <class Cfg>
void launch_fp8_config(const GatedUpFp8Params& p, cudaStream_t stream) {
  using Kernel = typename Cfg::Kernel;
  using TIn = typename Cfg::ElementIn;
  using TOut = typename Cfg::Element;
  constexpr int kSmem = Kernel::SharedStorageSize;
  auto kernel = cutlass::device_kernel<Kernel>;

  const int dev = detail::current_device();
  static detail::PerDeviceCache<bool> opted_in;
  detail::opt_in_dynamic_smem_once(opted_in, kernel, kSmem);

  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = make_shape(int(p.m), int(2 * p.u), int(p.k), 1);
  args.mainloop.ptr_A = static_cast<const TIn*>(p.x);
  args.mainloop.dA = make_stride(p.ldx, Int<1>{}, int64_t(0));
  args.mainloop.ptr_B = static_cast<const TIn*>(p.w);
  args.mainloop.dB = make_stride(p.ldw, Int<1>{}, int64_t(0));
  args.epilogue.ptr_out = static_cast<TOut*>(p.out);
  args.epilogue.ldo = p.ldo;
  args.epilogue.act = p.act;
  args.epilogue.x_scale = p.x_scale;
  args.epilogue.w_scale = p.w_scale;
  args.epilogue.x_per_row = p.x_per_row;
  args.epilogue.w_per_channel = p.w_per_channel;
  args.epilogue.out_scale = p.out_scale;
  args.hw_info.device_id = dev;
  args.hw_info.sm_count = detail::device_spec(dev).sm_count;
  args.scheduler.max_swizzle_size = p.sm90_max_swizzle;
  args.scheduler.raster_order = cutlass::gemm::kernel::detail::RasterOrderOptions::Heuristic;

  if (!Kernel::can_implement(args))
    throw Error(detail::cat("blockfuse::gated_up_fp8 (sm90): CUTLASS rejects the problem M = ", p.m, ", K = ", p.k,
                            ", U = ", p.u, ", ldx = ", p.ldx, ", ldw = ", p.ldw, ", ldo = ", p.ldo,
                            "; required: K % 16 == 0, ldx, ldw % 16 == 0, 16-byte-aligned pointers"));
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);
  detail::launch_with_cluster(kernel, Kernel::get_grid_shape(params), Kernel::get_block_shape(), kSmem, stream,
                              dim3(size<0>(typename Cfg::ClusterShape{}), size<1>(typename Cfg::ClusterShape{}), 1),
                              params);
  BF_CHECK_LAUNCH();
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
