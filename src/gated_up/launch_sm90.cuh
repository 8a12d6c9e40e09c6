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

#include <atomic>

#include "cutlass/device_kernel.h"

#include "blockfuse/gated_up.h"
#include "common/check.h"
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

  int dev = 0;
  BF_CUDA_CHECK(cudaGetDevice(&dev));
  // Opt in to > 48 KB of dynamic shared memory once per device (not a stream operation, so it
  // stays out of CUDA-graph captures after the first call).
  constexpr int kMaxDevices = 64;
  static std::atomic<bool> opted_in[kMaxDevices];
  if (dev >= kMaxDevices || !opted_in[dev].load(std::memory_order_acquire)) {
    BF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    if (dev < kMaxDevices) opted_in[dev].store(true, std::memory_order_release);
  }

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
  args.hw_info.sm_count = current_device_spec().sm_count;
  // The dispatcher's sm90_choose_swizzle (the largest swizzle that adds no padding tiles).
  args.scheduler.max_swizzle_size = p.raster_group;
  // Heuristic = walk along the longer grid side, in swizzled groups along the shorter one.
  args.scheduler.raster_order = cutlass::gemm::kernel::detail::RasterOrderOptions::Heuristic;

  if (!Kernel::can_implement(args))
    throw Error(detail::cat("blockfuse::gated_up (sm90): CUTLASS rejects the problem M = ", p.m, ", K = ", p.k,
                            ", U = ", p.u, ", ldx = ", p.ldx, ", ldw = ", p.ldw, ", ldo = ", p.ldo,
                            "; required: K % 8 == 0, ld % 8 == 0, 16-byte-aligned pointers"));
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);

  cudaLaunchConfig_t cfg{};
  cfg.gridDim = Kernel::get_grid_shape(params);
  cfg.blockDim = Kernel::get_block_shape();
  cfg.dynamicSmemBytes = kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = size<0>(typename Cfg::ClusterShape{});
  attr[0].val.clusterDim.y = size<1>(typename Cfg::ClusterShape{});
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  BF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, params));
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
