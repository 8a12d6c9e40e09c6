// The gated MLP's fused backward through the down projection on sm90a: the GEMM dh = dy · w_down
// (dy [M, N] K-major; w_down [N, U] row-major, so B is read MN-major, which wgmma takes for 16-bit
// types) as a stock CUTLASS 3.x warp-specialised kernel, with DGatedEpilogue
// (dgated_epilogue_sm90.cuh) in place of CUTLASS's epilogue: dz and h from the forward's z, dh never
// stored. One tile configuration: 128 x 128 x 64, a 2 x 1 cluster (w_down's tile multicast to the
// M-neighbour), ping-pong, so one warpgroup's epilogue runs under the other's mainloop, with z
// brought into shared memory by the producer warpgroup's epilogue warp while the tile's mainloop
// runs. Not yet tuned: docs/gated_up.md#training-backward-where-it-stands-and-the-plan.
#include <cute/tensor.hpp>

#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"
#include "gated_up/dgated_epilogue_sm90.cuh"
#include "gated_up/dgated_sm90.h"
#include "gated_up/tile_configs_sm90.h"

namespace blockfuse::sm90 {

namespace {

constexpr Sm90TileConfigRow kDGatedTile = {128, 128, 64, 2, 1, true, 1.0f, 1.0f};

template <class Element_>
struct DGatedSm90Gemm {
  using Element = Element_;
  using TileShape = Shape<Int<kDGatedTile.bm>, Int<kDGatedTile.bn>, Int<kDGatedTile.bk>>;
  using ClusterShape = Shape<Int<kDGatedTile.cluster_m>, Int<kDGatedTile.cluster_n>, _1>;
  using Epilogue = DGatedEpilogue<Element, TileShape>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, 8,  // A = dy [M, N]: K-major
      Element, cutlass::layout::RowMajor, 8,  // B = w_down [N, U], "K x N row-major": N-major
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
};

template <class Element>
void launch_typed(const DGatedParams& p, cudaStream_t stream) {
  using Cfg = DGatedSm90Gemm<Element>;
  using Kernel = typename Cfg::Kernel;
  constexpr int kSmem = Kernel::SharedStorageSize;
  auto kernel = cutlass::device_kernel<Kernel>;
  const int dev = detail::current_device();
  static detail::PerDeviceCache<bool> opted_in;
  detail::opt_in_dynamic_smem_once(opted_in, kernel, kSmem);

  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = make_shape(int(p.m), int(p.u), int(p.n), 1);  // (M, N = U, K = N_hidden, L)
  args.mainloop.ptr_A = static_cast<const Element*>(p.dy);
  args.mainloop.dA = make_stride(p.lddy, Int<1>{}, int64_t(0));
  args.mainloop.ptr_B = static_cast<const Element*>(p.w_down);
  args.mainloop.dB = make_stride(Int<1>{}, p.ldw, int64_t(0));  // (u, k) -> k·ldw + u
  args.epilogue.z = static_cast<const Element*>(p.z);
  args.epilogue.ldz = p.ldz;
  args.epilogue.dz = static_cast<Element*>(p.dz);
  args.epilogue.lddz = p.lddz;
  args.epilogue.h = static_cast<Element*>(p.h);
  args.epilogue.ldh = p.ldh;
  args.epilogue.act = p.act;
  args.hw_info.device_id = dev;
  args.hw_info.sm_count = detail::device_spec(dev).sm_count;
  args.scheduler.max_swizzle_size = p.max_swizzle;
  args.scheduler.raster_order = cutlass::gemm::kernel::detail::RasterOrderOptions::Heuristic;
  if (!Kernel::can_implement(args))
    throw Error(detail::cat("blockfuse::gated_mlp_dgated (sm90): CUTLASS rejects the problem M = ", p.m, ", N = ", p.n,
                            ", U = ", p.u, ", lddy = ", p.lddy, ", ldw = ", p.ldw, ", ldz = ", p.ldz,
                            "; required: N % 8 == 0, U % 8 == 0, ld % 8 == 0, 16-byte-aligned pointers"));
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);
  detail::launch_with_cluster(kernel, Kernel::get_grid_shape(params), Kernel::get_block_shape(), kSmem, stream,
                              dim3(kDGatedTile.cluster_m, kDGatedTile.cluster_n, 1), params);
  BF_CHECK_LAUNCH();
}

}  // namespace

int dgated_max_swizzle(int64_t m, int64_t u, int sm_count) {
  // sm90_choose_swizzle counts the gated GEMM's N = 2U columns: the dgated GEMM's N = U is that of u / 2.
  return sm90_choose_swizzle(m, u / 2, kDGatedTile, sm_count);
}

void launch_dgated(DType dtype, const DGatedParams& p, cudaStream_t stream) {
  if (dtype == DType::kBF16)
    launch_typed<cute::bfloat16_t>(p, stream);
  else
    launch_typed<cute::half_t>(p, stream);
}

}  // namespace blockfuse::sm90
