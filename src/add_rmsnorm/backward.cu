// The backward of rmsnorm / add_rmsnorm (blockfuse/add_rmsnorm.h): the launcher and the entry points.
//
// The row kernel (backward_sm80.cuh; the register or the loop shape of config.h:
// rmsnorm_backward_config) writes dh and, when dweight is wanted, one fp32 partial row of dweight
// per CTA into the workspace; the reduction kernel adds those rows in a fixed order. Where H <= 4096
// and every CTA of the call fits on the device at once (264 CTAs of 512 threads on an H100: up to
// 8448 rows), the row kernel is launched cooperatively and adds the partials itself after a
// grid-wide barrier, in the same order: one launch instead of two. The CTA count is config.h's
// rmsnorm_backward_ctas(M), a pure function of M: the workspace size and every summation order are
// the same on every call and device, so the results are bitwise reproducible.
// Read: params.h (RmsNormBackwardParams), config.h (the backward section), backward_sm80.cuh,
// validate.cpp (check_rmsnorm_backward_args), reference.cpp (add_rmsnorm_backward).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "add_rmsnorm/backward_sm80.cuh"
#include "add_rmsnorm/config.h"
#include "add_rmsnorm/params.h"
#include "add_rmsnorm/validate.h"
#include "blockfuse/add_rmsnorm.h"
#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"

namespace blockfuse {
namespace {

using add_rmsnorm_detail::rmsnorm_bwd_dweight;
using add_rmsnorm_detail::rmsnorm_bwd_loop;
using add_rmsnorm_detail::rmsnorm_bwd_regs;
using add_rmsnorm_detail::rmsnorm_bwd_regs_smem;

std::atomic<bool> g_fused_reduce_allowed{true};

// Resident CTAs of the fused kernel per device, for block sizes 32, 64, ..., 512 (index threads / 32
// - 1) without and with d_residual_out (+ 16); 0 everywhere where cooperative launches are not
// supported. Occupancy depends on the kernel's registers, not on the dtype, so the bf16 kernel speaks
// for both.
using FusedOccupancy = std::array<int, 32>;
FusedOccupancy fused_occupancy(int device) {
  FusedOccupancy occ{};
  int coop = 0;
  BF_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
  if (!coop) return occ;
  const int sms = detail::device_spec(device).sm_count;
  // The largest block (512 threads with d_residual_out) takes 48 KB of dynamic shared memory beside
  // the static reduction buffers: over the default per-block limit, so both kernels opt in here,
  // before the query and before any fused launch on this device.
  const int max_dyn = rmsnorm_bwd_regs_smem(1, 512, true);
  BF_CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_bwd_regs<__nv_bfloat16, 1, true, true>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, max_dyn));
  BF_CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_bwd_regs<__half, 1, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     max_dyn));
  auto kernel = rmsnorm_bwd_regs<__nv_bfloat16, 1, true, true>;
  for (int dres = 0; dres < 2; ++dres)
    for (int i = 0; i < 16; ++i) {
      int per_sm = 0;
      const int threads = 32 * (i + 1);
      BF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_sm, kernel, threads, static_cast<size_t>(rmsnorm_bwd_regs_smem(1, threads, dres != 0))));
      occ[static_cast<size_t>(dres * 16 + i)] = per_sm * sms;
    }
  return occ;
}

bool fused_applies(int64_t ctas, const detail::AddRmsNormConfig& cfg, bool dres) {
  if (cfg.v != 1 || !g_fused_reduce_allowed.load(std::memory_order_relaxed)) return false;
  static detail::PerDeviceCache<FusedOccupancy> cache;
  const FusedOccupancy occ = cache.get([](int device) { return fused_occupancy(device); });
  return ctas <= occ[static_cast<size_t>((dres ? 16 : 0) + cfg.threads / 32 - 1)];
}

template <class T, int V, bool kDw, bool kFused = false>
void launch_regs(const RmsNormBackwardParams& p, dim3 grid, dim3 block, cudaStream_t stream) {
  auto kernel = rmsnorm_bwd_regs<T, V, kDw, kFused>;
  if constexpr (kFused) {  // opted in by fused_occupancy, which fused_applies ran first
    cudaLaunchAttribute coop{};
    coop.id = cudaLaunchAttributeCooperative;
    coop.val.cooperative = 1;
    const int smem = rmsnorm_bwd_regs_smem(1, static_cast<int>(block.x), p.dres != nullptr);
    detail::launch_with_attributes(kernel, grid, block, static_cast<size_t>(smem), stream, &coop, 1, p);
    return;
  }
  // Opted in once per device for the largest call (512 threads with d_residual_out).
  static detail::PerDeviceCache<bool> once;
  detail::opt_in_dynamic_smem_once(once, kernel, rmsnorm_bwd_regs_smem(V, 512, true));
  const int smem = rmsnorm_bwd_regs_smem(V, static_cast<int>(block.x), p.dres != nullptr);
  detail::launch_kernel(kernel, grid, block, static_cast<size_t>(smem), stream, dim3(1, 1, 1), false, p);
}

template <class T, bool kDw>
void launch_rows(const RmsNormBackwardParams& p, int64_t ctas, cudaStream_t stream) {
  const detail::AddRmsNormConfig cfg = detail::rmsnorm_backward_config(p.h / 8);
  const dim3 grid(static_cast<unsigned>(ctas)), block(static_cast<unsigned>(cfg.threads));
  const dim3 no_cluster(1, 1, 1);
  switch (cfg.v) {
    case 1: launch_regs<T, 1, kDw>(p, grid, block, stream); break;
    case 2: launch_regs<T, 2, kDw>(p, grid, block, stream); break;
    default: detail::launch_kernel(rmsnorm_bwd_loop<T, kDw>, grid, block, 0, stream, no_cluster, false, p); break;
  }
  BF_CHECK_LAUNCH();
}

template <class T>
void launch(const RmsNormBackwardParams& p, cudaStream_t stream) {
  const int64_t ctas = detail::rmsnorm_backward_ctas(p.rows);
  if (p.partials == nullptr) {
    launch_rows<T, false>(p, ctas, stream);
    return;
  }
  const detail::AddRmsNormConfig cfg = detail::rmsnorm_backward_config(p.h / 8);
  if (fused_applies(ctas, cfg, p.dres != nullptr)) {
    launch_regs<T, 1, true, true>(p, dim3(static_cast<unsigned>(ctas)), dim3(static_cast<unsigned>(cfg.threads)), stream);
    BF_CHECK_LAUNCH();
    return;
  }
  launch_rows<T, true>(p, ctas, stream);
  constexpr int kCols = detail::kRmsNormBwdReduceCols;
  const unsigned blocks = static_cast<unsigned>((p.h + kCols - 1) / kCols);
  detail::launch_kernel(rmsnorm_bwd_dweight<T>, dim3(blocks), dim3(kCols * detail::kRmsNormBwdReduceGroups), 0, stream,
                        dim3(1, 1, 1), false, static_cast<const float*>(p.partials), ctas, p.h, static_cast<T*>(p.dweight));
  BF_CHECK_LAUNCH();
}

void run(const char* fn, const char* h_name, const char* dh_name, const ConstMatrix& dy, const ConstMatrix& dres,
         const ConstMatrix& h, const ConstMatrix& weight, const Matrix& dh, const Matrix& dweight, void* workspace,
         size_t workspace_bytes, const RmsNormOptions& opt, cudaStream_t stream) {
  const bool want_dw = !detail::absent(dweight);
  if (!detail::check_rmsnorm_backward_args(fn, h_name, dh_name, dy, dres, h, weight, dh, dweight, workspace,
                                           workspace_bytes, opt)) {
    // No rows: the weight's gradient is a sum over nothing.
    if (want_dw) BF_CUDA_CHECK(cudaMemsetAsync(dweight.data, 0, size_t(dweight.cols) * dtype_size(dweight.dtype), stream));
    return;
  }
  RmsNormBackwardParams p{};
  p.dy = dy.data;
  p.lddy = dy.ld;
  p.dres = detail::absent(dres) ? nullptr : dres.data;
  p.lddres = dres.ld;
  p.h = static_cast<int>(dy.cols);
  p.w = weight.data;
  p.dh = detail::absent(dh) ? nullptr : dh.data;
  p.lddh = dh.ld;
  p.partials = want_dw ? static_cast<float*>(workspace) : nullptr;
  p.dweight = want_dw ? dweight.data : nullptr;
  p.rows = dy.rows;
  p.eps = opt.eps;
  p.gemma = opt.gemma_one_plus_w;
  p.in = h.data;
  p.ldin = h.ld;
  if (dy.dtype == DType::kBF16)
    launch<__nv_bfloat16>(p, stream);
  else
    launch<__half>(p, stream);
}

}  // namespace

int64_t rmsnorm_backward_ctas(int64_t rows) { return detail::rmsnorm_backward_ctas(rows); }

namespace detail {
bool rmsnorm_backward_fused_reduce_applies(int64_t rows, int64_t h, bool dres) {
  if (rows <= 0 || h <= 0 || h % 8 != 0) return false;
  return fused_applies(rmsnorm_backward_ctas(rows), rmsnorm_backward_config(static_cast<int>(h / 8)), dres);
}
void set_rmsnorm_backward_fused_reduce(bool allowed) { g_fused_reduce_allowed.store(allowed); }
}  // namespace detail

size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t h) {
  if (rows <= 0 || h <= 0) return 0;
  return static_cast<size_t>(detail::rmsnorm_backward_ctas(rows)) * static_cast<size_t>(h) * sizeof(float);
}

void rmsnorm_backward(ConstMatrix dy, ConstMatrix x, ConstMatrix weight, Matrix dx, Matrix dweight, void* workspace,
                      size_t workspace_bytes, RmsNormOptions opt, cudaStream_t stream) {
  run("rmsnorm_backward", "x", "dx", dy, ConstMatrix{}, x, weight, dx, dweight, workspace, workspace_bytes, opt, stream);
}

void add_rmsnorm_backward(ConstMatrix dy, ConstMatrix d_residual_out, ConstMatrix h, ConstMatrix weight, Matrix dh,
                          Matrix dweight, void* workspace, size_t workspace_bytes, RmsNormOptions opt,
                          cudaStream_t stream) {
  run("add_rmsnorm_backward", "h", "dh", dy, d_residual_out, h, weight, dh, dweight, workspace, workspace_bytes, opt,
      stream);
}

}  // namespace blockfuse
