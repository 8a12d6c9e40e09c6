// The PyTorch op of the FP8 fused gated up-projection (include/blockfuse/gated_up_fp8.h, sm90a):
//   gated_up_fp8(x e4m3 [..., K], x_scale, w e4m3 [2U, K] interleaved, w_scale, activation,
//                out_scale?) -> h [..., U]
//   gated_up_fp8_dynamic(x, x_scale, w, w_scale, activation) -> (q e4m3 [..., U], scales float32 [...])
// x_scale: a float32 CUDA tensor of 1 element (per tensor) or of x's rows (per row, any shape with
// that many elements, e.g. x.shape[:-1]); w_scale: 1 element (per tensor) or 2U (per output channel,
// in the interleaved order: [2j] = up_j's, [2j+1] = gate_j's). out_scale None: h is bf16;
// out_scale a float32 tensor of one element: h is e4m3, quantised with that static per-tensor scale
// (dequantised value = float(q) · out_scale). gated_up_fp8_dynamic: e4m3 with one scale per row,
// written (blockfuse/fp8.h's dynamic rule on h rounded to bf16; the bf16 h lives in a workspace
// tensor from torch's caching allocator for the call). Scales are read on the device, so a captured
// graph replays with changed values. Hopper (compute capability 9.0) builds with the sm90a kernel only;
// elsewhere the launcher's "not supported" error is raised (as a RuntimeError), nothing launched.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <vector>

#include "binding.h"

namespace {

using namespace blockfuse_torch;

void check_e4m3(const at::Tensor& t, const char* fn, const char* arg) {
  TORCH_CHECK_VALUE(t.scalar_type() == at::kFloat8_e4m3fn, "blockfuse.", fn, ": argument '", arg, "' has dtype ",
                    dtype_str(t), "; required: torch.float8_e4m3fn");
}

// A float32 scale tensor on x's device with 1 element (per tensor) or `per_row` elements.
blockfuse::Fp8InputScale input_scale(const at::Tensor& s, const at::Tensor& x, int64_t per_row, const char* fn,
                                     const char* arg, const char* per_row_what) {
  check_cuda(s, fn, arg);
  check_same_device(s, x, fn, arg, "x");
  TORCH_CHECK_VALUE(s.scalar_type() == at::kFloat && s.is_contiguous() && (s.numel() == 1 || s.numel() == per_row),
                    "blockfuse.", fn, ": argument '", arg, "' has dtype ", dtype_str(s), " and ", shape_str(s),
                    "; required: a contiguous float32 tensor of 1 element (per tensor) or ", num(per_row), " (",
                    per_row_what, ")");
  blockfuse::Fp8InputScale r;
  r.mode = s.numel() == 1 ? blockfuse::Fp8InputScaleMode::kPerTensor : blockfuse::Fp8InputScaleMode::kPerRow;
  r.scale = s.data_ptr<float>();
  return r;
}

// The operands both ops share, checked (each error names the argument).
struct Operands {
  blockfuse::Activation act;
  RowView xv, wv;
  int64_t u;
  blockfuse::Fp8InputScale sx, sw;
  blockfuse::Fp8ConstMatrix xm, wm;
};

Operands operands(const at::Tensor& x, const at::Tensor& x_scale, const at::Tensor& w, const at::Tensor& w_scale,
                  c10::string_view activation, const char* fn) {
  Operands o;
  o.act = parse_activation(activation, fn);
  check_cuda(x, fn, "x");
  check_cuda(w, fn, "w");
  check_same_device(w, x, fn, "w", "x");
  check_e4m3(x, fn, "x");
  check_e4m3(w, fn, "w");
  o.xv = as_rows(x, fn, "x");
  o.wv = as_matrix(w, fn, "w");
  TORCH_CHECK_VALUE(o.wv.cols == o.xv.cols && o.wv.rows % 2 == 0, "blockfuse.", fn, ": argument 'w' has sizes ",
                    dims(w.sizes()), "; required: [2U, K] with K = x.size(-1) (", num(o.xv.cols), ")");
  o.u = o.wv.rows / 2;
  o.sx = input_scale(x_scale, x, o.xv.rows, fn, "x_scale", "one per row of x");
  o.sw = input_scale(w_scale, x, o.wv.rows, fn, "w_scale", "one per row of w, interleaved");
  o.xm = blockfuse::make_fp8_const_matrix(x.data_ptr(), o.xv.rows, o.xv.cols, o.xv.ld);
  o.wm = blockfuse::make_fp8_const_matrix(w.data_ptr(), o.wv.rows, o.wv.cols, o.wv.ld);
  return o;
}

// The e4m3 output h [..., U] of the static and dynamic ops, and its view for the C++ API.
at::Tensor e4m3_output(const at::Tensor& x, const Operands& o) {
  return at::empty(with_last(x, o.u), x.options().dtype(at::kFloat8_e4m3fn));
}
auto e4m3_view(const at::Tensor& h, const Operands& o) {
  return blockfuse::make_fp8_matrix(h.data_ptr(), o.xv.rows, o.u, std::max<int64_t>(o.u, 1));
}

// The e4m3 output's scale: read (static per tensor) or written (dynamic per row) at `t`.
blockfuse::Fp8Scale output_scale(blockfuse::Fp8ScaleMode mode, const at::Tensor& t) {
  blockfuse::Fp8Scale s;
  s.mode = mode;
  s.scale = t.data_ptr<float>();
  return s;
}

at::Tensor gated_up_fp8_op(const at::Tensor& x, const at::Tensor& x_scale, const at::Tensor& w,
                           const at::Tensor& w_scale, c10::string_view activation,
                           const std::optional<at::Tensor>& out_scale) {
  constexpr const char* fn = "gated_up_fp8";
  const Operands o = operands(x, x_scale, w, w_scale, activation, fn);
  c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = current_stream(x);
  if (!out_scale.has_value()) {
    at::Tensor h = at::empty(with_last(x, o.u), x.options().dtype(at::kBFloat16));
    call_blockfuse([&] {
      blockfuse::gated_up_fp8(o.xm, o.sx, o.wm, o.sw,
                              blockfuse::make_matrix(h.data_ptr(), DType::kBF16, o.xv.rows, o.u, std::max<int64_t>(o.u, 1)),
                              o.act, stream);
    });
    return h;
  }
  const at::Tensor& s = *out_scale;
  check_cuda(s, fn, "out_scale");
  check_same_device(s, x, fn, "out_scale", "x");
  TORCH_CHECK_VALUE(s.scalar_type() == at::kFloat && s.numel() == 1, "blockfuse.", fn, ": argument 'out_scale' has dtype ",
                    dtype_str(s), " and ", num(s.numel()), " elements; required: one float32 element (the static "
                    "per-tensor output scale), or None for a bf16 output");
  at::Tensor h = e4m3_output(x, o);
  const blockfuse::Fp8Scale os = output_scale(blockfuse::Fp8ScaleMode::kStaticPerTensor, s);
  call_blockfuse([&] { blockfuse::gated_up_fp8(o.xm, o.sx, o.wm, o.sw, e4m3_view(h, o), os, o.act, stream); });
  return h;
}

// e4m3 output with one scale per row (written): the workspace overload of gated_up_fp8 with a
// workspace tensor for the bf16 h, taken from torch's caching allocator for the call (so it is
// graph-safe: a captured call keeps its block in the graph's pool).
std::tuple<at::Tensor, at::Tensor> gated_up_fp8_dynamic_op(const at::Tensor& x, const at::Tensor& x_scale,
                                                           const at::Tensor& w, const at::Tensor& w_scale,
                                                           c10::string_view activation) {
  constexpr const char* fn = "gated_up_fp8_dynamic";
  const Operands o = operands(x, x_scale, w, w_scale, activation, fn);
  c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = current_stream(x);
  at::Tensor q = e4m3_output(x, o);
  std::vector<int64_t> lead(x.sizes().begin(), x.sizes().end() - 1);
  at::Tensor scales = at::empty(lead, x.options().dtype(at::kFloat));
  size_t need = 0;
  call_blockfuse([&] { need = blockfuse::gated_up_fp8_workspace_size(o.xv.rows, o.u, blockfuse::Fp8ScaleMode::kDynamicPerRow); });
  at::Tensor ws = at::empty({static_cast<int64_t>(std::max<size_t>(need, 1))}, x.options().dtype(at::kByte));
  const blockfuse::Fp8Scale os = output_scale(blockfuse::Fp8ScaleMode::kDynamicPerRow, scales);
  call_blockfuse([&] {
    blockfuse::gated_up_fp8(o.xm, o.sx, o.wm, o.sw, e4m3_view(q, o), os, o.act, ws.data_ptr(), need, stream);
  });
  return {q, scales};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(blockfuse, m) {
  def_ops(m, {"gated_up_fp8(Tensor x, Tensor x_scale, Tensor w, Tensor w_scale, str activation='silu', "
               "Tensor? out_scale=None) -> Tensor",
               "gated_up_fp8_dynamic(Tensor x, Tensor x_scale, Tensor w, Tensor w_scale, str activation='silu') "
               "-> (Tensor, Tensor)"});
}

BLOCKFUSE_TORCH_IMPLS(m) {
  m.impl("gated_up_fp8", &gated_up_fp8_op);
  m.impl("gated_up_fp8_dynamic", &gated_up_fp8_dynamic_op);
}
