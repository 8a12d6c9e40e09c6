// The PyTorch ops of the fused residual add + RMSNorm (include/blockfuse/add_rmsnorm.h), with a
// bf16/fp16 or an FP8 (e4m3) output:
//   rmsnorm(x [..., H], weight [H], eps, gemma) -> out [..., H]
//   add_rmsnorm(x, residual, weight, eps, gemma) -> (out, residual_out)      residual_out = x + residual
//   add_rmsnorm_(x, residual!, weight, eps, gemma) -> out                   residual updated in place
//   rmsnorm_fp8(x, weight, scale?, eps, gemma) -> (out e4m3, row_scales)
//   add_rmsnorm_fp8(x, residual, weight, scale?, eps, gemma) -> (out e4m3, residual_out, row_scales)
//   rmsnorm_backward(dy, x, weight, eps, gemma, need_dx, need_dweight) -> (dx, dweight)
//   add_rmsnorm_backward(dy, d_residual_out?, h, weight, eps, gemma, need_dh, need_dweight) -> (dh, dweight)
// The backward ops serve the autograd formulas of rmsnorm and add_rmsnorm (registered in Python,
// blockfuse/add_rmsnorm.py); h is add_rmsnorm's residual_out and dh the gradient of both x and
// residual. An output not needed comes back as an empty [0] tensor; dweight is [H] in weight's dtype.
// The dweight partials' workspace comes from the caching allocator per call.
// Schemas at the end; the fake implementations are in the Python package. FP8 scales: `scale` given
// (a float32 CUDA tensor of one element, read on the device, so a graph replays with a changed
// value) is the static per-tensor scale and row_scales is empty ([0]); `scale` None is the dynamic
// per-row mode and row_scales [...] (x's leading dims, float32) is written by the kernel.
// Dequantised value = float(q) · scale.
//
// The functional add_rmsnorm returns the new residual stream instead of overwriting the old one:
// torch.compile and CUDA graphs take it as it is (no functionalisation, no copies), and a caller
// that still holds the old stream (Hugging Face's output_hidden_states keeps every layer's) sees it
// unchanged. It costs one allocation from the caching allocator, no extra traffic (the kernel
// writes residual_out either way). add_rmsnorm_ is the in-place form for callers that own the
// buffer; torch.compile functionalises it.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "binding.h"

namespace {

using namespace blockfuse_torch;

blockfuse::RmsNormOptions norm_options(double eps, bool gemma) {
  blockfuse::RmsNormOptions o;
  o.eps = static_cast<float>(eps);
  o.gemma_one_plus_w = gemma;
  return o;
}

// The tensors of an (add_)rmsnorm call as views; residual optional.
struct NormArgs {
  DType dt;
  RowView xv, wv;
};

NormArgs check_norm(const char* fn, const at::Tensor& x, const at::Tensor* residual, const at::Tensor& weight) {
  check_cuda(x, fn, "x");
  const DType dt = to_dtype(x, fn, "x");
  if (residual) {
    check_cuda(*residual, fn, "residual");
    check_same_device(*residual, x, fn, "residual", "x");
    check_same_dtype(*residual, x, fn, "residual", "x");
    check_same_sizes(*residual, x, fn, "residual", "x");
  }
  check_cuda(weight, fn, "weight");
  check_same_device(weight, x, fn, "weight", "x");
  check_same_dtype(weight, x, fn, "weight", "x");
  const RowView xv = as_rows(x, fn, "x");
  const RowView wv = as_vector(weight, fn, "weight");
  TORCH_CHECK_VALUE(wv.cols == xv.cols, "blockfuse.", fn, ": argument 'weight' has sizes ", dims(weight.sizes()),
                    "; required: [H] with H = x.size(-1) = ", num(xv.cols));
  return {dt, xv, wv};
}

at::Tensor rmsnorm_op(const at::Tensor& x, const at::Tensor& weight, double eps, bool gemma) {
  constexpr const char* fn = "rmsnorm";
  const NormArgs a = check_norm(fn, x, nullptr, weight);
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  const RowView ov{a.xv.rows, a.xv.cols, a.xv.cols};
  if (a.xv.rows == 0) return out;  // nothing to launch (empty views carry null pointers)
  call_blockfuse([&] {
    blockfuse::add_rmsnorm(cview(x, a.xv, a.dt), ConstMatrix{}, cview(weight, a.wv, a.dt), Matrix{},
                           mview(out, ov, a.dt), norm_options(eps, gemma), current_stream(x));
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> add_rmsnorm_op(const at::Tensor& x, const at::Tensor& residual,
                                                  const at::Tensor& weight, double eps, bool gemma) {
  constexpr const char* fn = "add_rmsnorm";
  const NormArgs a = check_norm(fn, x, &residual, weight);
  const RowView rv = as_rows(residual, fn, "residual");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  at::Tensor res_out = at::empty(x.sizes(), x.options());
  const RowView ov{a.xv.rows, a.xv.cols, a.xv.cols};
  if (a.xv.rows == 0) return {out, res_out};
  call_blockfuse([&] {
    blockfuse::add_rmsnorm(cview(x, a.xv, a.dt), cview(residual, rv, a.dt), cview(weight, a.wv, a.dt),
                           mview(res_out, ov, a.dt), mview(out, ov, a.dt), norm_options(eps, gemma),
                           current_stream(x));
  });
  return {out, res_out};
}

at::Tensor add_rmsnorm_inplace_op(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                  double eps, bool gemma) {
  constexpr const char* fn = "add_rmsnorm_";
  const NormArgs a = check_norm(fn, x, &residual, weight);
  const RowView rv = as_rows(residual, fn, "residual");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  const RowView ov{a.xv.rows, a.xv.cols, a.xv.cols};
  if (a.xv.rows == 0) return out;
  call_blockfuse([&] {
    // residual_out aliases residual exactly (same pointer and ld): the in-place form the C++ API allows.
    blockfuse::add_rmsnorm(cview(x, a.xv, a.dt), cview(residual, rv, a.dt), cview(weight, a.wv, a.dt),
                           mview(residual, rv, a.dt), mview(out, ov, a.dt), norm_options(eps, gemma),
                           current_stream(x));
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_fp8_op(const at::Tensor& x, const at::Tensor& weight,
                                                  const std::optional<at::Tensor>& scale, double eps, bool gemma) {
  constexpr const char* fn = "rmsnorm_fp8";
  const NormArgs a = check_norm(fn, x, nullptr, weight);
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor row_scales;
  const blockfuse::Fp8Scale s = fp8_scale(fn, scale, x, a.xv.rows, row_scales);
  at::Tensor out = fp8_like(x, a.xv.cols);
  if (a.xv.rows == 0) return {out, row_scales};
  call_blockfuse([&] {
    blockfuse::add_rmsnorm_fp8(cview(x, a.xv, a.dt), ConstMatrix{}, cview(weight, a.wv, a.dt), Matrix{},
                               fp8_view(out, a.xv.rows, a.xv.cols), s, norm_options(eps, gemma),
                               current_stream(x));
  });
  return {out, row_scales};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rmsnorm_fp8_op(const at::Tensor& x, const at::Tensor& residual,
                                                                  const at::Tensor& weight,
                                                                  const std::optional<at::Tensor>& scale,
                                                                  double eps, bool gemma) {
  constexpr const char* fn = "add_rmsnorm_fp8";
  const NormArgs a = check_norm(fn, x, &residual, weight);
  const RowView rv = as_rows(residual, fn, "residual");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor row_scales;
  const blockfuse::Fp8Scale s = fp8_scale(fn, scale, x, a.xv.rows, row_scales);
  at::Tensor out = fp8_like(x, a.xv.cols);
  at::Tensor res_out = at::empty(x.sizes(), x.options());
  const RowView ov{a.xv.rows, a.xv.cols, a.xv.cols};
  if (a.xv.rows == 0) return {out, res_out, row_scales};
  call_blockfuse([&] {
    blockfuse::add_rmsnorm_fp8(cview(x, a.xv, a.dt), cview(residual, rv, a.dt), cview(weight, a.wv, a.dt),
                               mview(res_out, ov, a.dt), fp8_view(out, a.xv.rows, a.xv.cols), s,
                               norm_options(eps, gemma), current_stream(x));
  });
  return {out, res_out, row_scales};
}

// add: add_rmsnorm_backward (h, dh, an optional d_residual_out), else rmsnorm_backward (x, dx).
std::tuple<at::Tensor, at::Tensor> norm_backward(bool add, const at::Tensor& dy,
                                                 const std::optional<at::Tensor>& dres, const at::Tensor& h,
                                                 const at::Tensor& weight, double eps, bool gemma, bool need_dh,
                                                 bool need_dw) {
  const char* fn = add ? "add_rmsnorm_backward" : "rmsnorm_backward";
  const char* h_name = add ? "h" : "x";
  check_cuda(dy, fn, "dy");
  const DType dt = to_dtype(dy, fn, "dy");
  std::vector<NamedTensor> others{{&h, h_name}, {&weight, "weight"}};
  if (dres) others.push_back({&*dres, "d_residual_out"});
  for (const NamedTensor& o : others) {
    check_cuda(*o.t, fn, o.name);
    check_same_device(*o.t, dy, fn, o.name, "dy");
    check_same_dtype(*o.t, dy, fn, o.name, "dy");
  }
  check_same_sizes(h, dy, fn, h_name, "dy");
  if (dres) check_same_sizes(*dres, dy, fn, "d_residual_out", "dy");
  const RowView dyv = as_rows(dy, fn, "dy");
  const RowView hv = as_rows(h, fn, h_name);
  const RowView wv = as_vector(weight, fn, "weight");
  TORCH_CHECK_VALUE(wv.cols == dyv.cols, "blockfuse.", fn, ": argument 'weight' has sizes ", dims(weight.sizes()),
                    "; required: [H] with H = dy.size(-1) = ", num(dyv.cols));
  TORCH_CHECK_VALUE(need_dh || need_dw, "blockfuse.", fn,
                    ": arguments 'need_dh' and 'need_dweight' are both False; required: at least one output");
  c10::cuda::CUDAGuard guard(dy.device());
  at::Tensor dh = need_dh ? at::empty(dy.sizes(), dy.options()) : at::empty({0}, dy.options());
  at::Tensor dw = need_dw ? at::empty({dyv.cols}, weight.options()) : at::empty({0}, weight.options());
  if (dyv.rows == 0) {
    if (need_dw) dw.zero_();  // a sum over no rows
    return {dh, dw};
  }
  const RowView ov{dyv.rows, dyv.cols, dyv.cols};
  const size_t ws_bytes = need_dw ? blockfuse::rmsnorm_backward_workspace_bytes(dyv.rows, dyv.cols) : 0;
  at::Tensor ws = at::empty({static_cast<int64_t>(ws_bytes)}, dy.options().dtype(at::kByte));
  const RowView dwv{1, dyv.cols, dyv.cols};
  call_blockfuse([&] {
    const Matrix dhm = need_dh ? mview(dh, ov, dt) : Matrix{};
    const Matrix dwm = need_dw ? mview(dw, dwv, dt) : Matrix{};
    void* wsp = ws_bytes ? ws.data_ptr() : nullptr;
    if (add) {
      const ConstMatrix rm = dres ? cview(*dres, as_rows(*dres, fn, "d_residual_out"), dt) : ConstMatrix{};
      blockfuse::add_rmsnorm_backward(cview(dy, dyv, dt), rm, cview(h, hv, dt), cview(weight, wv, dt), dhm, dwm, wsp,
                                      ws_bytes, norm_options(eps, gemma), current_stream(dy));
    } else {
      blockfuse::rmsnorm_backward(cview(dy, dyv, dt), cview(h, hv, dt), cview(weight, wv, dt), dhm, dwm, wsp, ws_bytes,
                                  norm_options(eps, gemma), current_stream(dy));
    }
  });
  return {dh, dw};
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_backward_op(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                                                       double eps, bool gemma, bool need_dx, bool need_dweight) {
  return norm_backward(false, dy, std::nullopt, x, weight, eps, gemma, need_dx, need_dweight);
}

std::tuple<at::Tensor, at::Tensor> add_rmsnorm_backward_op(const at::Tensor& dy,
                                                           const std::optional<at::Tensor>& d_residual_out,
                                                           const at::Tensor& h, const at::Tensor& weight, double eps,
                                                           bool gemma, bool need_dh, bool need_dweight) {
  return norm_backward(true, dy, d_residual_out, h, weight, eps, gemma, need_dh, need_dweight);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(blockfuse, m) {
  def_ops(m, {"rmsnorm(Tensor x, Tensor weight, float eps=1e-6, bool gemma=False) -> Tensor",
               "add_rmsnorm(Tensor x, Tensor residual, Tensor weight, float eps=1e-6, bool gemma=False) -> (Tensor, Tensor)",
               "add_rmsnorm_(Tensor x, Tensor(a!) residual, Tensor weight, float eps=1e-6, bool gemma=False) -> Tensor",
               "rmsnorm_fp8(Tensor x, Tensor weight, Tensor? scale=None, float eps=1e-6, bool gemma=False) -> (Tensor, Tensor)",
               "add_rmsnorm_fp8(Tensor x, Tensor residual, Tensor weight, Tensor? scale=None, float eps=1e-6, "
               "bool gemma=False) -> (Tensor, Tensor, Tensor)",
               "rmsnorm_backward(Tensor dy, Tensor x, Tensor weight, float eps=1e-6, bool gemma=False, "
               "bool need_dx=True, bool need_dweight=True) -> (Tensor, Tensor)",
               "add_rmsnorm_backward(Tensor dy, Tensor? d_residual_out, Tensor h, Tensor weight, float eps=1e-6, "
               "bool gemma=False, bool need_dh=True, bool need_dweight=True) -> (Tensor, Tensor)"});
}

BLOCKFUSE_TORCH_IMPLS(m) {
  m.impl("rmsnorm", &rmsnorm_op);
  m.impl("add_rmsnorm", &add_rmsnorm_op);
  m.impl("add_rmsnorm_", &add_rmsnorm_inplace_op);
  m.impl("rmsnorm_fp8", &rmsnorm_fp8_op);
  m.impl("add_rmsnorm_fp8", &add_rmsnorm_fp8_op);
  m.impl("rmsnorm_backward", &rmsnorm_backward_op);
  m.impl("add_rmsnorm_backward", &add_rmsnorm_backward_op);
}
