// Internal: the host side both sm90a gated-up launchers share (launch_sm90.cuh: 16-bit,
// launch_fp8_sm90.cuh: FP8). The kernel is launched directly (cudaLaunchKernelEx with the cluster
// shape as an attribute) rather than through CUTLASS's GemmUniversalAdapter, so that the
// shared-memory opt-in happens once per device instead of on every call, and nothing allocates a
// workspace (the persistent scheduler without split-K needs none). Per call the host builds the
// three TMA descriptors (x, w, out) — that is CUTLASS's to_underlying_arguments — which costs a few
// microseconds.
#pragma once

#include "cutlass/device_kernel.h"

#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"

namespace blockfuse::sm90 {

// Launches Cfg's kernel on the interleaved GEMM M x 2U x K of p (GatedUpParams or GatedUpFp8Params):
// the shape, strides, output stride, activation, device and scheduler are set here; `fill(args)`
// sets what differs (the typed pointers, the FP8 scales). `who` and `required` word the error
// when CUTLASS rejects the problem (nothing launched).
template <class Cfg, class Params, class Fill>
void launch_gated_up_gemm(const Params& p, const char* who, const char* required, Fill&& fill, cudaStream_t stream) {
  using Kernel = typename Cfg::Kernel;
  constexpr int kSmem = Kernel::SharedStorageSize;
  auto kernel = cutlass::device_kernel<Kernel>;

  const int dev = detail::current_device();
  static detail::PerDeviceCache<bool> opted_in;  // this kernel's
  detail::opt_in_dynamic_smem_once(opted_in, kernel, kSmem);

  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  // The interleaved GEMM: M x N x K with N = 2U; the dispatcher has checked M < 2^31 and the
  // allocation sizes keep K and 2U far below 2^31.
  args.problem_shape = make_shape(int(p.m), int(2 * p.u), int(p.k), 1);
  args.mainloop.dA = make_stride(p.ldx, Int<1>{}, int64_t(0));
  args.mainloop.dB = make_stride(p.ldw, Int<1>{}, int64_t(0));
  args.epilogue.ldo = p.ldo;
  args.epilogue.act = p.act;
  fill(args);
  args.hw_info.device_id = dev;
  args.hw_info.sm_count = detail::device_spec(dev).sm_count;
  // The dispatcher's sm90_choose_swizzle (the largest swizzle that adds no padding tiles).
  args.scheduler.max_swizzle_size = p.sm90_max_swizzle;
  // Heuristic = walk along the longer grid side, in swizzled groups along the shorter one.
  args.scheduler.raster_order = cutlass::gemm::kernel::detail::RasterOrderOptions::Heuristic;

  if (!Kernel::can_implement(args))
    throw Error(detail::cat(who, ": CUTLASS rejects the problem M = ", p.m, ", K = ", p.k, ", U = ", p.u, ", ldx = ",
                            p.ldx, ", ldw = ", p.ldw, ", ldo = ", p.ldo, "; required: ", required));
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);
  detail::launch_with_cluster(kernel, Kernel::get_grid_shape(params), Kernel::get_block_shape(), kSmem, stream,
                              dim3(size<0>(typename Cfg::ClusterShape{}), size<1>(typename Cfg::ClusterShape{}), 1),
                              params);
  BF_CHECK_LAUNCH();
}

}  // namespace blockfuse::sm90
