// The backward of rmsnorm / add_rmsnorm (blockfuse/add_rmsnorm.h): the launcher and the entry points.
//
// Two launches per call: the row kernel (backward_sm80.cuh; the register or the loop shape of
// config.h: rmsnorm_backward_config) writes dh and, when dweight is wanted, one fp32 partial row of
// dweight per CTA into the workspace; the reduction kernel adds those rows in a fixed order. The CTA
// count is config.h's rmsnorm_backward_ctas(M), a pure function of M: the workspace size and every
// summation order are the same on every call and device, so the results are bitwise reproducible.
// Read: params.h (RmsNormBackwardParams), config.h (the backward section), backward_sm80.cuh,
// validate.cpp (check_rmsnorm_backward_args), reference.cpp (add_rmsnorm_backward).
#include <algorithm>
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
#include "common/launch.h"

namespace blockfuse {
namespace {

using add_rmsnorm_detail::rmsnorm_bwd_dweight;
using add_rmsnorm_detail::rmsnorm_bwd_loop;
using add_rmsnorm_detail::rmsnorm_bwd_regs;
using add_rmsnorm_detail::rmsnorm_bwd_regs_smem;

template <class T, int V, bool kDw>
void launch_regs(const RmsNormBackwardParams& p, dim3 grid, dim3 block, cudaStream_t stream) {
  auto kernel = rmsnorm_bwd_regs<T, V, kDw>;
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
