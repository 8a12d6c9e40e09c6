// The PyTorch ops of the memory-bound decoder-block kernels: residual add + RMSNorm (bf16/fp16 or
// FP8 out), the standalone gated activation (bf16/fp16 or FP8 out) and the decode GEMM.
//
// Schemas (registered at the end; the fake implementations are in python/blockfuse/ops.py):
//   rmsnorm(x [..., H], weight [H], eps, gemma) -> out [..., H]
//   add_rmsnorm(x, residual, weight, eps, gemma) -> (out, residual_out)      residual_out = x + residual
//   add_rmsnorm_(x, residual!, weight, eps, gemma) -> out                   residual updated in place
//   rmsnorm_fp8(x, weight, scale?, eps, gemma) -> (out e4m3, row_scales)
//   add_rmsnorm_fp8(x, residual, weight, scale?, eps, gemma) -> (out e4m3, residual_out, row_scales)
//   swiglu(gate_up [..., 2U], activation, layout) -> out [..., U]
//   swiglu_fp8(gate_up, scale?, activation, layout) -> (out e4m3, row_scales)
//   decode_gemm(x [..., K] with <= 32 rows, w [N, K]) -> y [..., N]
// FP8 scales: `scale` given (a float32 CUDA tensor of one element, read on the device, so a graph
// replays with a changed value) is the static per-tensor scale and row_scales is empty ([0]);
// `scale` None is the dynamic per-row mode and row_scales [...] (x's leading dims, float32) is
// written by the kernel. Dequantised value = float(q) · scale.
//
// The functional add_rmsnorm returns the new residual stream instead of overwriting the old one:
// torch.compile and CUDA graphs take it as it is (no functionalisation, no copies), and a caller
// that still holds the old stream (Hugging Face's output_hidden_states keeps every layer's) sees it
// unchanged. It costs one allocation from the caching allocator, no extra traffic (the kernel
// writes residual_out either way). add_rmsnorm_ is the in-place form for callers that own the
// buffer; torch.compile functionalises it.
//
// decode_gemm's split-K workspace is owned by the binding (workspace.h): a shape must have run once
// eagerly, or ops.decode_gemm_reserve(w), before it is captured into a CUDA graph.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "binding.h"
#include "workspace.h"

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

// The FP8 scale argument: a float32 CUDA tensor of one element on x's device (static), or None
// (dynamic: the per-row scales are allocated and returned).
blockfuse::Fp8Scale fp8_scale(const char* fn, const std::optional<at::Tensor>& scale, const at::Tensor& x,
                              int64_t rows, at::Tensor& row_scales) {
  blockfuse::Fp8Scale s;
  if (scale.has_value()) {
    const at::Tensor& t = *scale;
    check_cuda(t, fn, "scale");
    check_same_device(t, x, fn, "scale", "x");
    TORCH_CHECK_VALUE(t.scalar_type() == at::kFloat && t.numel() == 1, "blockfuse.", fn,
                      ": argument 'scale' has dtype ", dtype_str(t), " and ", num(t.numel()),
                      " elements; required: one float32 element (the static per-tensor scale), or "
                      "None for dynamic per-row scales");
    s.mode = blockfuse::Fp8ScaleMode::kStaticPerTensor;
    s.scale = t.data_ptr<float>();
    row_scales = at::empty({0}, x.options().dtype(at::kFloat));
  } else {
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end() - 1);
    row_scales = at::empty(sizes, x.options().dtype(at::kFloat));
    s.mode = blockfuse::Fp8ScaleMode::kDynamicPerRow;
    s.scale = rows > 0 ? row_scales.data_ptr<float>() : nullptr;
  }
  return s;
}

at::Tensor fp8_like(const at::Tensor& x, int64_t cols) {
  return at::empty(with_last(x, cols), x.options().dtype(at::kFloat8_e4m3fn));
}

blockfuse::Fp8Matrix fp8_view(const at::Tensor& t, int64_t rows, int64_t cols) {
  return blockfuse::make_fp8_matrix(t.data_ptr(), rows, cols, cols);
}

// ---- add_rmsnorm ---------------------------------------------------------------------------------

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

// ---- swiglu ------------------------------------------------------------------------------------

blockfuse::GateUpLayout parse_layout(c10::string_view l, const char* fn) {
  if (l == "stacked") return blockfuse::GateUpLayout::kStacked;
  if (l == "interleaved") return blockfuse::GateUpLayout::kInterleaved;
  TORCH_CHECK_VALUE(false, "blockfuse.", fn, ": argument 'layout' is '", std::string(l.data(), l.size()),
                    "'; required: 'stacked' ([gate | up] columns) or 'interleaved' (column 2j = up_j, "
                    "2j+1 = gate_j)");
  return blockfuse::GateUpLayout::kStacked;  // unreachable
}

struct SwigluArgs {
  DType dt;
  RowView gv;
  int64_t u;
  blockfuse::Activation act;
  blockfuse::GateUpLayout layout;
};

SwigluArgs check_swiglu(const char* fn, const at::Tensor& gate_up, c10::string_view activation,
                        c10::string_view layout) {
  const blockfuse::Activation act = parse_activation(activation, fn);
  const blockfuse::GateUpLayout lay = parse_layout(layout, fn);
  check_cuda(gate_up, fn, "gate_up");
  const DType dt = to_dtype(gate_up, fn, "gate_up");
  const RowView gv = as_rows(gate_up, fn, "gate_up");
  TORCH_CHECK_VALUE(gv.cols % 2 == 0, "blockfuse.", fn, ": argument 'gate_up' has sizes ", dims(gate_up.sizes()),
                    "; required: an even last dimension 2U");
  return {dt, gv, gv.cols / 2, act, lay};
}

at::Tensor swiglu_op(const at::Tensor& gate_up, c10::string_view activation, c10::string_view layout) {
  constexpr const char* fn = "swiglu";
  const SwigluArgs a = check_swiglu(fn, gate_up, activation, layout);
  c10::cuda::CUDAGuard guard(gate_up.device());
  at::Tensor out = at::empty(with_last(gate_up, a.u), gate_up.options());
  const RowView ov{a.gv.rows, a.u, a.u};
  if (a.gv.rows == 0) return out;
  call_blockfuse([&] {
    blockfuse::swiglu(cview(gate_up, a.gv, a.dt), mview(out, ov, a.dt), a.act, a.layout, current_stream(gate_up));
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> swiglu_fp8_op(const at::Tensor& gate_up, const std::optional<at::Tensor>& scale,
                                                 c10::string_view activation, c10::string_view layout) {
  constexpr const char* fn = "swiglu_fp8";
  const SwigluArgs a = check_swiglu(fn, gate_up, activation, layout);
  c10::cuda::CUDAGuard guard(gate_up.device());
  at::Tensor row_scales;
  const blockfuse::Fp8Scale s = fp8_scale(fn, scale, gate_up, a.gv.rows, row_scales);
  at::Tensor out = fp8_like(gate_up, a.u);
  if (a.gv.rows == 0) return {out, row_scales};
  call_blockfuse([&] {
    blockfuse::swiglu_fp8(cview(gate_up, a.gv, a.dt), fp8_view(out, a.gv.rows, a.u), s, a.act, a.layout,
                          current_stream(gate_up));
  });
  return {out, row_scales};
}

// ---- decode_gemm ---------------------------------------------------------------------------------

at::Tensor decode_gemm_op(const at::Tensor& x, const at::Tensor& w) {
  constexpr const char* fn = "decode_gemm";
  check_cuda(x, fn, "x");
  check_cuda(w, fn, "w");
  check_same_device(w, x, fn, "w", "x");
  const DType dt = to_dtype(x, fn, "x");
  check_same_dtype(w, x, fn, "w", "x");
  const RowView xv = as_rows(x, fn, "x");
  const RowView wv = as_matrix(w, fn, "w");
  TORCH_CHECK_VALUE(wv.cols == xv.cols, "blockfuse.decode_gemm: argument 'w' has sizes ", dims(w.sizes()),
                    "; required: w.size(1) == x.size(-1) (K = ", num(xv.cols), ")");
  const int device = x.device().index();
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty(with_last(x, wv.rows), x.options());
  const RowView yv{xv.rows, wv.rows, wv.rows};
  if (xv.rows == 0) return y;
  const cudaStream_t stream = current_stream(x);
  const size_t need = decode_workspace_need(xv.rows, wv.rows, xv.cols, device);
  size_t ws_bytes = 0;
  void* ws = need > 0 ? device_workspace(WorkspaceKind::kDecodeGemm, device, need, stream, &ws_bytes, fn,
                                         "blockfuse.ops.decode_gemm_reserve(w)")
                       : nullptr;
  call_blockfuse([&] {
    blockfuse::decode_gemm(cview(x, xv, dt), cview(w, wv, dt), mview(y, yv, dt), ws, ws_bytes, stream);
  });
  return y;
}

// Reserves (allocates and zeroes) the workspace every decode_gemm(x, w) with 1..32 rows of x needs
// on w's device, so such calls can then be captured. Returns the bytes reserved on that device.
int64_t decode_gemm_reserve_op(const at::Tensor& w) {
  constexpr const char* fn = "decode_gemm_reserve";
  check_cuda(w, fn, "w");
  TORCH_CHECK_VALUE(w.dim() == 2, "blockfuse.", fn, ": argument 'w' has sizes ", dims(w.sizes()),
                    "; required: a 2-D weight [N, K]");
  const int device = w.device().index();
  c10::cuda::CUDAGuard guard(w.device());
  size_t need = 0;
  call_blockfuse([&] {
    need = blockfuse::decode_gemm_workspace_size(blockfuse::kDecodeGemmMaxM, w.size(0), w.size(1), device);
  });
  size_t bytes = 0;
  if (need > 0)
    device_workspace(WorkspaceKind::kDecodeGemm, device, need, current_stream(w), &bytes, fn,
                     "blockfuse.ops.decode_gemm_reserve(w)");
  return static_cast<int64_t>(bytes);
}

// The process-wide programmatic-dependent-launch switch (blockfuse/common.h); returns the previous
// setting. No tensor arguments: registered with its function (a catch-all kernel), not per backend.
bool set_pdl_op(bool enabled) { return blockfuse::set_programmatic_dependent_launch(enabled); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(blockfuse, m) {
  const std::vector<at::Tag> tags{at::Tag::pt2_compliant_tag};
  m.def("set_programmatic_dependent_launch(bool enabled) -> bool", &set_pdl_op);
  m.def("rmsnorm(Tensor x, Tensor weight, float eps=1e-6, bool gemma=False) -> Tensor", tags);
  m.def("add_rmsnorm(Tensor x, Tensor residual, Tensor weight, float eps=1e-6, bool gemma=False) -> (Tensor, Tensor)",
        tags);
  m.def("add_rmsnorm_(Tensor x, Tensor(a!) residual, Tensor weight, float eps=1e-6, bool gemma=False) -> Tensor",
        tags);
  m.def("rmsnorm_fp8(Tensor x, Tensor weight, Tensor? scale=None, float eps=1e-6, bool gemma=False) -> (Tensor, Tensor)",
        tags);
  m.def("add_rmsnorm_fp8(Tensor x, Tensor residual, Tensor weight, Tensor? scale=None, float eps=1e-6, "
        "bool gemma=False) -> (Tensor, Tensor, Tensor)",
        tags);
  m.def("swiglu(Tensor gate_up, str activation='silu', str layout='stacked') -> Tensor", tags);
  m.def("swiglu_fp8(Tensor gate_up, Tensor? scale=None, str activation='silu', str layout='stacked') -> (Tensor, Tensor)",
        tags);
  m.def("decode_gemm(Tensor x, Tensor w) -> Tensor", tags);
  m.def("decode_gemm_reserve(Tensor w) -> int");
}

// The same functions serve CPU tensors: their first check names the argument that is not on CUDA.
#define BLOCKFUSE_DECODER_IMPLS(m)                          \
  m.impl("rmsnorm", &rmsnorm_op);                           \
  m.impl("add_rmsnorm", &add_rmsnorm_op);                   \
  m.impl("add_rmsnorm_", &add_rmsnorm_inplace_op);          \
  m.impl("rmsnorm_fp8", &rmsnorm_fp8_op);                   \
  m.impl("add_rmsnorm_fp8", &add_rmsnorm_fp8_op);           \
  m.impl("swiglu", &swiglu_op);                             \
  m.impl("swiglu_fp8", &swiglu_fp8_op);                     \
  m.impl("decode_gemm", &decode_gemm_op);                   \
  m.impl("decode_gemm_reserve", &decode_gemm_reserve_op)

TORCH_LIBRARY_IMPL(blockfuse, CUDA, m) { BLOCKFUSE_DECODER_IMPLS(m); }
TORCH_LIBRARY_IMPL(blockfuse, CPU, m) { BLOCKFUSE_DECODER_IMPLS(m); }
