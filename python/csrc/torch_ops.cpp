// The PyTorch binding of blockfuse: registers the blockfuse::* operators with the dispatcher.
//
// This is the only C++ file that sees torch. It turns tensors into blockfuse's plain matrix views
// (pointer, dtype, rows, cols, row stride), checks what a view cannot express (device, dtype, a
// contiguous last dimension, leading dimensions that flatten into rows with one row stride) with
// messages that name the argument, and calls the C++ API on the current CUDA stream. Outputs come
// from at::empty (the caching allocator), so every op can be captured in a CUDA graph. The C++
// API validates again and throws blockfuse::Error; it is re-raised as a Python RuntimeError with
// the same message.
//
// Python loads this library with torch.ops.load_library (python/blockfuse/_lib.py) — no pybind —
// and registers the fake (meta) implementations and the autograd formula (python/blockfuse/ops.py).
//
// Ops (schemas below):
//   gated_up(x [..., K], w [2U, K] interleaved, activation) -> h [..., U]         CUDA
//   interleave_gate_up(gate [U, K], up [U, K]) -> w [2U, K]                       CUDA, CPU
//   interleave_stacked(stacked [2U, K] = [gate; up]) -> w [2U, K]                 CUDA, CPU
//   deinterleave_gate_up(w [2U, K]) -> (gate [U, K], up [U, K])                   CUDA, CPU
//   deinterleave_to_stacked(w [2U, K]) -> stacked [2U, K]                         CUDA, CPU
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

#include "blockfuse/blockfuse.h"

namespace {

using blockfuse::ConstMatrix;
using blockfuse::DType;
using blockfuse::Matrix;

// Message pieces as strings. Every argument given to TORCH_CHECK below is a string: torch formats
// the others with an ostream, and formatting a number with an ostream inside a PyTorch process on
// the H100 machine crashed it (SIGSEGV; see src/common/check.h). Devices and dtypes are rendered by
// c10 itself (Device::str, toString).
std::string num(int64_t v) { return std::to_string(v); }

std::string dims(c10::IntArrayRef a) {
  std::string s = "[";
  for (size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + std::to_string(a[i]);
  return s + "]";
}

std::string shape_str(const at::Tensor& t) { return "sizes " + dims(t.sizes()) + ", strides " + dims(t.strides()); }

std::string dev_str(const at::Tensor& t) { return t.device().str(); }
const char* dtype_str(const at::Tensor& t) { return c10::toString(t.scalar_type()); }

DType to_dtype(const at::Tensor& t, const char* fn, const char* arg) {
  if (t.scalar_type() == at::kBFloat16) return DType::kBF16;
  if (t.scalar_type() == at::kHalf) return DType::kFP16;
  TORCH_CHECK_TYPE(false, "blockfuse.", fn, ": argument '", arg, "' has dtype ", dtype_str(t),
                   "; required: torch.bfloat16 or torch.float16");
  return DType::kBF16;  // unreachable
}

void check_same_dtype(const at::Tensor& t, const at::Tensor& ref, const char* fn, const char* arg,
                      const char* ref_arg) {
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), "blockfuse.", fn, ": argument '", arg,
                   "' has dtype ", dtype_str(t), "; required: the dtype of '", ref_arg, "' (",
                   dtype_str(ref), ")");
}

void check_same_device(const at::Tensor& t, const at::Tensor& ref, const char* fn, const char* arg,
                       const char* ref_arg) {
  TORCH_CHECK(t.device() == ref.device(), "blockfuse.", fn, ": argument '", arg, "' is on ",
              dev_str(t), "; required: the device of '", ref_arg, "' (", dev_str(ref), ")");
}

void check_cuda(const at::Tensor& t, const char* fn, const char* arg) {
  TORCH_CHECK(t.is_cuda(), "blockfuse.", fn, ": argument '", arg, "' is on ", dev_str(t),
              "; required: a CUDA tensor (the fused kernel runs on the GPU; blockfuse.nn.GatedMLP "
              "falls back to plain torch for CPU tensors)");
}

// A tensor [..., cols] as a row-major matrix [rows, cols] with one row stride `ld`: the last dim
// must be contiguous and the leading dims must flatten into rows (what x.view(-1, cols) accepts
// whose rows are also non-overlapping and ordered). Size-1 dims place no constraint.
struct RowView {
  int64_t rows, cols, ld;
};

RowView as_rows(const at::Tensor& t, const char* fn, const char* arg) {
  TORCH_CHECK_VALUE(t.dim() >= 1, "blockfuse.", fn, ": argument '", arg,
                    "' is a 0-dimensional tensor; required: at least 1 dimension [..., K]");
  const int64_t cols = t.size(-1);
  const int64_t rows = cols == 0 ? 0 : t.numel() / cols;
  TORCH_CHECK_VALUE(t.stride(-1) == 1 || cols <= 1 || rows == 0, "blockfuse.", fn, ": argument '",
                    arg, "' has ", shape_str(t),
                    "; required: a contiguous last dimension (stride(-1) == 1); call .contiguous()");
  int64_t ld = -1, expected = -1;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (ld < 0) {
      ld = t.stride(d);
      expected = ld * t.size(d);
    } else {
      TORCH_CHECK_VALUE(t.stride(d) == expected || rows == 0, "blockfuse.", fn, ": argument '", arg,
                        "' has ", shape_str(t),
                        "; required: leading dimensions that flatten into rows with one row "
                        "stride (as x.view(-1, K) needs); call .contiguous() first");
      expected *= t.size(d);
    }
  }
  if (ld < 0) ld = cols;  // at most one row: any row stride >= cols describes it
  TORCH_CHECK_VALUE(ld >= cols || rows <= 1, "blockfuse.", fn, ": argument '", arg, "' has ",
                    shape_str(t), "; required: a row stride >= K = ", num(cols),
                    " (rows must not overlap: broadcast/expanded rows are not accepted); call "
                    ".contiguous()");
  if (rows <= 1) ld = std::max<int64_t>(cols, 1);  // one row or none: its own length describes it
  return {rows, cols, ld};
}

// A 2-D tensor as a matrix view (weights and weight-layout helpers).
RowView as_matrix(const at::Tensor& t, const char* fn, const char* arg) {
  TORCH_CHECK_VALUE(t.dim() == 2, "blockfuse.", fn, ": argument '", arg, "' has ", num(t.dim()),
                    " dimensions (sizes ", dims(t.sizes()), "); required: a 2-D matrix");
  return as_rows(t, fn, arg);
}

ConstMatrix cview(const at::Tensor& t, const RowView& v, DType dt) {
  return blockfuse::make_matrix(static_cast<const void*>(t.data_ptr()), dt, v.rows, v.cols, v.ld);
}
Matrix mview(const at::Tensor& t, const RowView& v, DType dt) {
  return blockfuse::make_matrix(t.data_ptr(), dt, v.rows, v.cols, v.ld);
}

blockfuse::Activation parse_activation(c10::string_view a) {
  if (a == "silu") return blockfuse::Activation::kSiLU;
  if (a == "gelu_tanh") return blockfuse::Activation::kGeluTanh;
  TORCH_CHECK_VALUE(false, "blockfuse.gated_up: argument 'activation' is '", std::string(a.data(), a.size()),
                    "'; required: 'silu' (SwiGLU) or 'gelu_tanh' (GeGLU)");
  return blockfuse::Activation::kSiLU;  // unreachable
}

// Runs a blockfuse C++ call, re-raising blockfuse::Error as a torch error with the same message.
template <typename F>
void call_blockfuse(F&& f) {
  try {
    f();
  } catch (const blockfuse::Error& e) {
    TORCH_CHECK(false, e.what());
  }
}

cudaStream_t current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

// ---- gated_up ----------------------------------------------------------------------------------

// Validates gated_up's tensors (every error names the argument); returns U.
int64_t check_gated_up_args(const at::Tensor& x, const at::Tensor& w) {
  constexpr const char* fn = "gated_up";
  check_cuda(x, fn, "x");
  check_cuda(w, fn, "w");
  check_same_device(w, x, fn, "w", "x");
  (void)to_dtype(x, fn, "x");
  check_same_dtype(w, x, fn, "w", "x");
  TORCH_CHECK_VALUE(x.dim() >= 1, "blockfuse.gated_up: argument 'x' is 0-dimensional; required: [..., K]");
  TORCH_CHECK_VALUE(w.dim() == 2, "blockfuse.gated_up: argument 'w' has sizes ", dims(w.sizes()),
                    "; required: a 2-D interleaved weight [2U, K] (row 2j = up_j, row 2j+1 = gate_j)");
  const int64_t K = x.size(-1);
  TORCH_CHECK_VALUE(w.size(1) == K, "blockfuse.gated_up: argument 'w' has sizes ", dims(w.sizes()),
                    "; required: w.size(1) == x.size(-1) (K = ", num(K), ")");
  TORCH_CHECK_VALUE(w.size(0) % 2 == 0, "blockfuse.gated_up: argument 'w' has ", num(w.size(0)),
                    " rows; required: an even number 2U (interleaved [up_0; gate_0; up_1; ...])");
  return w.size(0) / 2;
}

at::Tensor gated_up_cuda(const at::Tensor& x, const at::Tensor& w, c10::string_view activation) {
  constexpr const char* fn = "gated_up";
  const blockfuse::Activation act = parse_activation(activation);
  const int64_t U = check_gated_up_args(x, w);
  const DType dt = to_dtype(x, fn, "x");
  const RowView xv = as_rows(x, fn, "x");
  const RowView wv = as_matrix(w, fn, "w");

  c10::cuda::CUDAGuard guard(x.device());
  std::vector<int64_t> out_sizes(x.sizes().begin(), x.sizes().end());
  out_sizes.back() = U;
  at::Tensor out = at::empty(out_sizes, x.options());  // contiguous: row stride U
  const RowView ov{xv.rows, U, U};
  call_blockfuse([&] {
    blockfuse::gated_up(cview(x, xv, dt), cview(w, wv, dt), mview(out, ov, dt), act,
                        current_stream(x));
  });
  return out;
}

at::Tensor gated_up_cpu(const at::Tensor& x, const at::Tensor&, c10::string_view) {
  check_cuda(x, "gated_up", "x");  // always throws: names the argument and the fallback
  return {};
}

// ---- weight layout -----------------------------------------------------------------------------
// The C++ helpers move whole rows (cudaMemcpy2DAsync on the device, memcpy on the host), so they
// serve both backends; the tensors' device picks which.

struct LayoutArg {
  const at::Tensor* t;
  const char* name;
};

// Checks dtype/device agreement of a helper's tensors (the first is the reference).
DType check_layout_args(const char* fn, std::initializer_list<LayoutArg> args) {
  const LayoutArg& ref = *args.begin();
  const DType dt = to_dtype(*ref.t, fn, ref.name);
  for (const LayoutArg& a : args) {
    if (a.t == ref.t) continue;
    check_same_device(*a.t, *ref.t, fn, a.name, ref.name);
    check_same_dtype(*a.t, *ref.t, fn, a.name, ref.name);
  }
  return dt;
}

at::Tensor interleave_gate_up_op(const at::Tensor& gate, const at::Tensor& up) {
  constexpr const char* fn = "interleave_gate_up";
  const DType dt = check_layout_args(fn, {{&gate, "gate"}, {&up, "up"}});
  const RowView gv = as_matrix(gate, fn, "gate"), uv = as_matrix(up, fn, "up");
  TORCH_CHECK_VALUE(gate.sizes() == up.sizes(), "blockfuse.", fn, ": argument 'up' has sizes ",
                    dims(up.sizes()), "; required: the sizes of 'gate' (", dims(gate.sizes()), ")");
  at::Tensor out = at::empty({2 * gv.rows, gv.cols}, gate.options());
  const RowView ov{2 * gv.rows, gv.cols, gv.cols};
  if (gate.is_cuda()) {
    c10::cuda::CUDAGuard guard(gate.device());
    call_blockfuse([&] {
      blockfuse::interleave_gate_up(cview(gate, gv, dt), cview(up, uv, dt), mview(out, ov, dt),
                                    current_stream(gate));
    });
  } else {
    call_blockfuse([&] {
      blockfuse::interleave_gate_up_host(cview(gate, gv, dt), cview(up, uv, dt), mview(out, ov, dt));
    });
  }
  return out;
}

at::Tensor interleave_stacked_op(const at::Tensor& stacked) {
  constexpr const char* fn = "interleave_stacked";
  const DType dt = check_layout_args(fn, {{&stacked, "stacked"}});
  const RowView sv = as_matrix(stacked, fn, "stacked");
  at::Tensor out = at::empty({sv.rows, sv.cols}, stacked.options());
  const RowView ov{sv.rows, sv.cols, sv.cols};
  if (stacked.is_cuda()) {
    c10::cuda::CUDAGuard guard(stacked.device());
    call_blockfuse([&] {
      blockfuse::interleave_stacked_gate_up(cview(stacked, sv, dt), mview(out, ov, dt),
                                            current_stream(stacked));
    });
  } else {
    call_blockfuse([&] { blockfuse::interleave_stacked_gate_up_host(cview(stacked, sv, dt), mview(out, ov, dt)); });
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> deinterleave_gate_up_op(const at::Tensor& w) {
  constexpr const char* fn = "deinterleave_gate_up";
  const DType dt = check_layout_args(fn, {{&w, "w"}});
  const RowView wv = as_matrix(w, fn, "w");
  TORCH_CHECK_VALUE(wv.rows % 2 == 0, "blockfuse.", fn, ": argument 'w' has ", num(wv.rows),
                    " rows; required: an even number 2U");
  const int64_t U = wv.rows / 2;
  at::Tensor gate = at::empty({U, wv.cols}, w.options());
  at::Tensor up = at::empty({U, wv.cols}, w.options());
  const RowView hv{U, wv.cols, wv.cols};
  if (w.is_cuda()) {
    c10::cuda::CUDAGuard guard(w.device());
    call_blockfuse([&] {
      blockfuse::deinterleave_gate_up(cview(w, wv, dt), mview(gate, hv, dt), mview(up, hv, dt),
                                      current_stream(w));
    });
  } else {
    call_blockfuse([&] {
      blockfuse::deinterleave_gate_up_host(cview(w, wv, dt), mview(gate, hv, dt), mview(up, hv, dt));
    });
  }
  return {gate, up};
}

at::Tensor deinterleave_to_stacked_op(const at::Tensor& w) {
  constexpr const char* fn = "deinterleave_to_stacked";
  const DType dt = check_layout_args(fn, {{&w, "w"}});
  const RowView wv = as_matrix(w, fn, "w");
  at::Tensor out = at::empty({wv.rows, wv.cols}, w.options());
  const RowView ov{wv.rows, wv.cols, wv.cols};
  if (w.is_cuda()) {
    c10::cuda::CUDAGuard guard(w.device());
    call_blockfuse([&] {
      blockfuse::deinterleave_to_stacked(cview(w, wv, dt), mview(out, ov, dt), current_stream(w));
    });
  } else {
    call_blockfuse([&] { blockfuse::deinterleave_to_stacked_host(cview(w, wv, dt), mview(out, ov, dt)); });
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(blockfuse, m) {
  const std::vector<at::Tag> tags{at::Tag::pt2_compliant_tag};
  m.def("gated_up(Tensor x, Tensor w, str activation='silu') -> Tensor", tags);
  m.def("interleave_gate_up(Tensor gate, Tensor up) -> Tensor", tags);
  m.def("interleave_stacked(Tensor stacked) -> Tensor", tags);
  m.def("deinterleave_gate_up(Tensor w) -> (Tensor, Tensor)", tags);
  m.def("deinterleave_to_stacked(Tensor w) -> Tensor", tags);
}

TORCH_LIBRARY_IMPL(blockfuse, CUDA, m) {
  m.impl("gated_up", &gated_up_cuda);
  m.impl("interleave_gate_up", &interleave_gate_up_op);
  m.impl("interleave_stacked", &interleave_stacked_op);
  m.impl("deinterleave_gate_up", &deinterleave_gate_up_op);
  m.impl("deinterleave_to_stacked", &deinterleave_to_stacked_op);
}

TORCH_LIBRARY_IMPL(blockfuse, CPU, m) {
  m.impl("gated_up", &gated_up_cpu);
  m.impl("interleave_gate_up", &interleave_gate_up_op);
  m.impl("interleave_stacked", &interleave_stacked_op);
  m.impl("deinterleave_gate_up", &deinterleave_gate_up_op);
  m.impl("deinterleave_to_stacked", &deinterleave_to_stacked_op);
}
