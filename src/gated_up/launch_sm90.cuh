// Internal: host-side launch of the sm90a gated-up kernel for one (dtype, tile config); each pair is
// explicitly instantiated in its own CMake-generated translation unit (launch_sm90.h), so the
// slow CUTLASS sm90a builds run in parallel.
//
// The kernel is launched directly (cudaLaunchKernelEx with the cluster shape as an attribute)
// rather than through CUTLASS's GemmUniversalAdapter, so that the shared-memory opt-in happens once
// per device instead of on every call, and nothing allocates a workspace (the persistent
// scheduler without split-K needs none). Per call the host builds the three TMA descriptors
// (x, w, out) — that is CUTLASS's to_underlying_arguments — which costs a few microseconds.
#pragma once

#include "cutlass/device_kernel.h"

#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"
#include "gated_up/gated_up_sm90.cuh"
#include "gated_up/launch_sm90.h"
#include "gated_up/params.h"

namespace blockfuse::sm90 {

template <class Cfg>
void launch_config(const GatedUpParams& p, cudaStream_t stream) {
  using Kernel = typename Cfg::Kernel;
  using T = typename Cfg::Element;
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
  args.mainloop.ptr_A = static_cast<const T*>(p.x);
  args.mainloop.dA = make_stride(p.ldx, Int<1>{}, int64_t(0));
  args.mainloop.ptr_B = static_cast<const T*>(p.w);
  args.mainloop.dB = make_stride(p.ldw, Int<1>{}, int64_t(0));
  args.epilogue.ptr_out = static_cast<T*>(p.out);
  args.epilogue.ldo = p.ldo;
  args.epilogue.act = p.act;
  args.hw_info.device_id = dev;
  args.hw_info.sm_count = detail::device_spec(dev).sm_count;
  // The dispatcher's sm90_choose_swizzle (the largest swizzle that adds no padding tiles).
  args.scheduler.max_swizzle_size = p.sm90_max_swizzle;
  // Heuristic = walk along the longer grid side, in swizzled groups along the shorter one.
  args.scheduler.raster_order = cutlass::gemm::kernel::detail::RasterOrderOptions::Heuristic;

  if (!Kernel::can_implement(args))
    throw Error(detail::cat("blockfuse::gated_up (sm90): CUTLASS rejects the problem M = ", p.m, ", K = ", p.k,
                            ", U = ", p.u, ", ldx = ", p.ldx, ", ldw = ", p.ldw, ", ldo = ", p.ldo,
                            "; required: K % 8 == 0, ld % 8 == 0, 16-byte-aligned pointers"));
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);

  detail::launch_with_cluster(kernel, Kernel::get_grid_shape(params), Kernel::get_block_shape(), kSmem, stream,
                              dim3(size<0>(typename Cfg::ClusterShape{}), size<1>(typename Cfg::ClusterShape{}), 1),
                              params);
  BF_CHECK_LAUNCH();
}

template <DType D>
using ElementFor = std::conditional_t<D == DType::kBF16, cute::bfloat16_t, cute::half_t>;

template <DType D, int Config>
void launch_instance(const GatedUpParams& p, cudaStream_t stream) {
  launch_config<Sm90KernelFor<ElementFor<D>, Config>>(p, stream);
}

// The shared storage does not depend on which 16-bit dtype it holds.
template <int Config>
int smem_bytes_instance() {
  return Sm90KernelFor<cute::bfloat16_t, Config>::Kernel::SharedStorageSize;
}

}  // namespace blockfuse::sm90
