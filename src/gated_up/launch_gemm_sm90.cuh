// Internal: the host side both sm90a gated-up launchers share (launch_sm90.cuh: 16-bit,
// launch_fp8_sm90.cuh: FP8). The kernel is launched directly (cudaLaunchKernelEx with the cluster
// shape as an attribute) rather than through CUTLASS's GemmUniversalAdapter, so that the
// shared-memory opt-in happens once per device instead of on every call, and nothing allocates a
// workspace (the persistent scheduler needs none; the stream-K row takes the caller's). Per call the host builds the
// three TMA descriptors (x, w, out) — that is CUTLASS's to_underlying_arguments — which costs a few
// microseconds.
#pragma once

#include "cutlass/device_kernel.h"

#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"

namespace blockfuse::sm90 {

// The typed operand pointers both launchers set: x and w (TIn) and the output (TOut).
template <class TIn, class TOut, class Args, class Params>
void set_operands(Args& args, const Params& p) {
  args.mainloop.ptr_A = static_cast<const TIn*>(p.x);
  args.mainloop.ptr_B = static_cast<const TIn*>(p.w);
  args.epilogue.ptr_out = static_cast<TOut*>(p.out);
}

// The CUTLASS arguments of Cfg's kernel for the interleaved GEMM M x 2U x K of p (GatedUpParams or
// GatedUpFp8Params): the shape, strides, output stride, activation, device and scheduler are set
// here; `fill(args)` sets what differs (the typed pointers, the FP8 scales).
template <class Cfg, class Params, class Fill>
typename Cfg::Kernel::Arguments gemm_arguments(const Params& p, int dev, Fill&& fill) {
  typename Cfg::Kernel::Arguments args{};
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
  // The dispatcher's sm90_choose_swizzle (the largest swizzle that adds no more than 1 % tiles and waves).
  args.scheduler.max_swizzle_size = p.sm90_max_swizzle;
  // Heuristic = CUTLASS's: walk along the shorter grid side (along M where N tiles outnumber M tiles,
  // as at every LLM point), in swizzled groups across the longer one; the row (tile_configs_sm90.h,
  // row 1) or the caller may ask for either order (sm90_raster_for).
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.raster_order = p.sm90_raster == 1 ? Raster::AlongM : p.sm90_raster == 2 ? Raster::AlongN : Raster::Heuristic;
  return args;
}

// Bytes of workspace Cfg's kernel needs for p (0 for the persistent scheduler; the stream-K
// scheduler's partial-tile accumulators and flags otherwise). Reads no pointer of p.
template <class Cfg, class Params>
size_t gemm_workspace_bytes(const Params& p) {
  const auto args = gemm_arguments<Cfg>(p, detail::current_device(), [](auto&) {});
  return Cfg::Kernel::get_workspace_size(args);
}

// Launches Cfg's kernel on the interleaved GEMM of p. `who` and `required` word the error when
// CUTLASS rejects the problem (nothing launched). A kernel that needs a workspace (stream-K) takes
// p.sm90_workspace (the dispatcher has checked its size); CUTLASS initialises it on `stream`.
template <class Cfg, class Params, class Fill>
void launch_gated_up_gemm(const Params& p, const char* who, const char* required, Fill&& fill, cudaStream_t stream) {
  using Kernel = typename Cfg::Kernel;
  constexpr int kSmem = Kernel::SharedStorageSize;
  auto kernel = cutlass::device_kernel<Kernel>;

  const int dev = detail::current_device();
  static detail::PerDeviceCache<bool> opted_in;  // this kernel's
  detail::opt_in_dynamic_smem_once(opted_in, kernel, kSmem);

  const typename Kernel::Arguments args = gemm_arguments<Cfg>(p, dev, fill);
  if (!Kernel::can_implement(args))
    throw Error(detail::cat(who, ": CUTLASS rejects the problem M = ", p.m, ", K = ", p.k, ", U = ", p.u, ", ldx = ",
                            p.ldx, ", ldw = ", p.ldw, ", ldo = ", p.ldo, "; required: ", required));
  const size_t need = Kernel::get_workspace_size(args);
  if (need > p.sm90_workspace_bytes || (need > 0 && p.sm90_workspace == nullptr))
    throw Error(detail::cat(who, ": the kernel needs ", need, " bytes of workspace and was given ", p.sm90_workspace_bytes,
                            " (internal: the dispatcher checks this)"));
  if (need > 0 && Kernel::initialize_workspace(args, p.sm90_workspace, stream) != cutlass::Status::kSuccess)
    throw Error(detail::cat(who, ": initialising the stream-K workspace failed"));
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, need > 0 ? p.sm90_workspace : nullptr);
  detail::launch_with_cluster(kernel, Kernel::get_grid_shape(params), Kernel::get_block_shape(), kSmem, stream,
                              dim3(size<0>(typename Cfg::ClusterShape{}), size<1>(typename Cfg::ClusterShape{}), 1),
                              params);
  BF_CHECK_LAUNCH();
}

}  // namespace blockfuse::sm90
