// The helpers every file of the PyTorch binding shares: tensors -> blockfuse's plain matrix views,
// the checks a view cannot express, and the conversion of blockfuse::Error into a Python error.
//
// Every argument error raised from the binding is a Python ValueError (TORCH_CHECK_VALUE) whose
// message names the op and the argument, like blockfuse::Error's own messages, which are re-raised
// unchanged as ValueError. Nothing here launches work; nothing here is called from Python.
//
// Every argument given to TORCH_CHECK_* below is a string: torch formats the others with an
// ostream, and formatting a number with an ostream inside a PyTorch process on the H100 machine
// crashed it (SIGSEGV; see src/common/check.h). Devices and dtypes are rendered by c10 itself.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "blockfuse/blockfuse.h"

namespace blockfuse_torch {

using blockfuse::ConstMatrix;
using blockfuse::DType;
using blockfuse::Matrix;

inline std::string num(int64_t v) { return std::to_string(v); }

inline std::string dims(c10::IntArrayRef a) {
  std::string s = "[";
  for (size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + std::to_string(a[i]);
  return s + "]";
}

inline std::string shape_str(const at::Tensor& t) {
  return "sizes " + dims(t.sizes()) + ", strides " + dims(t.strides());
}
inline std::string dev_str(const at::Tensor& t) { return t.device().str(); }
inline const char* dtype_str(const at::Tensor& t) { return c10::toString(t.scalar_type()); }

// bf16/fp16 -> blockfuse's DType; nullopt for any other dtype.
inline std::optional<DType> half_dtype(const at::Tensor& t) {
  if (t.scalar_type() == at::kBFloat16) return DType::kBF16;
  if (t.scalar_type() == at::kHalf) return DType::kFP16;
  return std::nullopt;
}

// bf16/fp16 -> blockfuse's DType; anything else names the argument.
inline DType to_dtype(const at::Tensor& t, const char* fn, const char* arg) {
  if (const std::optional<DType> dt = half_dtype(t)) return *dt;
  TORCH_CHECK_VALUE(false, "blockfuse.", fn, ": argument '", arg, "' has dtype ", dtype_str(t),
                    "; required: torch.bfloat16 or torch.float16");
  return DType::kBF16;  // unreachable
}

inline void check_same_dtype(const at::Tensor& t, const at::Tensor& ref, const char* fn, const char* arg,
                             const char* ref_arg) {
  TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type(), "blockfuse.", fn, ": argument '", arg,
                    "' has dtype ", dtype_str(t), "; required: the dtype of '", ref_arg, "' (",
                    dtype_str(ref), ")");
}

inline void check_same_device(const at::Tensor& t, const at::Tensor& ref, const char* fn, const char* arg,
                              const char* ref_arg) {
  TORCH_CHECK_VALUE(t.device() == ref.device(), "blockfuse.", fn, ": argument '", arg, "' is on ",
                    dev_str(t), "; required: the device of '", ref_arg, "' (", dev_str(ref), ")");
}

inline void check_cuda(const at::Tensor& t, const char* fn, const char* arg) {
  TORCH_CHECK_VALUE(t.is_cuda(), "blockfuse.", fn, ": argument '", arg, "' is on ", dev_str(t),
                    "; required: a CUDA tensor (the kernel runs on the GPU)");
}

inline void check_same_sizes(const at::Tensor& t, const at::Tensor& ref, const char* fn, const char* arg,
                             const char* ref_arg) {
  TORCH_CHECK_VALUE(t.sizes() == ref.sizes(), "blockfuse.", fn, ": argument '", arg, "' has sizes ",
                    dims(t.sizes()), "; required: the sizes of '", ref_arg, "' (", dims(ref.sizes()), ")");
}

// A tensor with the name its argument has in the op's schema (for the messages).
struct NamedTensor {
  const at::Tensor* t;
  const char* name;
};

// The operands of a GPU-only op: x and the tensors that go with it, each a CUDA tensor on x's
// device with x's dtype (bf16/fp16). Checked in that order (every device, then every dtype), so
// the first error names the first argument at fault. Returns x's dtype.
inline DType check_operands(const char* fn, const at::Tensor& x, std::initializer_list<NamedTensor> others) {
  check_cuda(x, fn, "x");
  for (const NamedTensor& o : others) check_cuda(*o.t, fn, o.name);
  for (const NamedTensor& o : others) check_same_device(*o.t, x, fn, o.name, "x");
  const DType dt = to_dtype(x, fn, "x");
  for (const NamedTensor& o : others) check_same_dtype(*o.t, x, fn, o.name, "x");
  return dt;
}

// A tensor [..., cols] as a row-major matrix [rows, cols] with one row stride `ld`: the last dim
// must be contiguous and the leading dims must flatten into rows (what x.view(-1, cols) accepts
// whose rows are also non-overlapping and ordered). Size-1 dims place no constraint.
struct RowView {
  int64_t rows, cols, ld;
};

inline RowView as_rows(const at::Tensor& t, const char* fn, const char* arg) {
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
inline RowView as_matrix(const at::Tensor& t, const char* fn, const char* arg) {
  TORCH_CHECK_VALUE(t.dim() == 2, "blockfuse.", fn, ": argument '", arg, "' has ", num(t.dim()),
                    " dimensions (sizes ", dims(t.sizes()), "); required: a 2-D matrix");
  return as_rows(t, fn, arg);
}

// A contiguous 1-D tensor [n] as a [1, n] matrix (norm weights).
inline RowView as_vector(const at::Tensor& t, const char* fn, const char* arg) {
  TORCH_CHECK_VALUE(t.dim() == 1 && (t.stride(0) == 1 || t.size(0) <= 1), "blockfuse.", fn,
                    ": argument '", arg, "' has ", shape_str(t),
                    "; required: a contiguous 1-D tensor [H]");
  return {1, t.size(0), std::max<int64_t>(t.size(0), 1)};
}

inline ConstMatrix cview(const at::Tensor& t, const RowView& v, DType dt) {
  return blockfuse::make_matrix(static_cast<const void*>(t.data_ptr()), dt, v.rows, v.cols, v.ld);
}
inline Matrix mview(const at::Tensor& t, const RowView& v, DType dt) {
  return blockfuse::make_matrix(t.data_ptr(), dt, v.rows, v.cols, v.ld);
}

// A FakeTensor's under torch.compile's dynamic shapes: size() and numel() would throw.
inline bool has_symbolic_sizes(const at::Tensor& t) { return t.unsafeGetTensorImpl()->has_symbolic_sizes_strides(); }

// The output shape of an op mapping x [..., K] to [..., n].
inline std::vector<int64_t> with_last(const at::Tensor& x, int64_t n) {
  std::vector<int64_t> s(x.sizes().begin(), x.sizes().end());
  s.back() = n;
  return s;
}

inline blockfuse::Activation parse_activation(c10::string_view a, const char* fn) {
  if (a == "silu") return blockfuse::Activation::kSiLU;
  if (a == "gelu_tanh") return blockfuse::Activation::kGeluTanh;
  TORCH_CHECK_VALUE(false, "blockfuse.", fn, ": argument 'activation' is '", std::string(a.data(), a.size()),
                    "'; required: 'silu' (SwiGLU) or 'gelu_tanh' (GeGLU)");
  return blockfuse::Activation::kSiLU;  // unreachable
}

// Runs a blockfuse C++ call, re-raising blockfuse::Error with its message: a ValueError when it
// names an argument (every validation error of a launcher does), a RuntimeError otherwise (a CUDA
// failure blockfuse detected).
template <typename F>
void call_blockfuse(F&& f) {
  try {
    f();
  } catch (const blockfuse::Error& e) {
    const std::string msg = e.what();
    TORCH_CHECK_VALUE(msg.find("argument '") == std::string::npos, msg);
    TORCH_CHECK(false, msg);
  }
}

inline cudaStream_t current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

// ---- FP8 (e4m3) outputs --------------------------------------------------------------------------

// The FP8 scale argument of an op with an e4m3 output: a float32 CUDA tensor of one element on x's
// device (static per-tensor scale; row_scales becomes an empty [0] tensor), or None (dynamic: the
// per-row scales, x's leading dims in float32, are allocated into row_scales and written by the kernel).
inline blockfuse::Fp8Scale fp8_scale(const char* fn, const std::optional<at::Tensor>& scale, const at::Tensor& x,
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

// An e4m3 tensor shaped like x [..., K] with a last dimension of `cols`, and its contiguous view.
inline at::Tensor fp8_like(const at::Tensor& x, int64_t cols) {
  return at::empty(with_last(x, cols), x.options().dtype(at::kFloat8_e4m3fn));
}
inline blockfuse::Fp8Matrix fp8_view(const at::Tensor& t, int64_t rows, int64_t cols) {
  return blockfuse::make_fp8_matrix(t.data_ptr(), rows, cols, cols);
}

// ---- attention views ([B, S, H, D] tensors with their strides) ----------------------------------
// Shared by attention_op.cpp and decode_attention_op.cpp.

// A dtype other than bf16/fp16 is a TypeError here (the other ops raise ValueError).
inline DType attn_dtype(const at::Tensor& t, const char* fn, const char* arg) {
  const std::optional<DType> dt = half_dtype(t);
  TORCH_CHECK_TYPE(dt.has_value(), "blockfuse::", fn, ": argument '", arg, "' has dtype ", dtype_str(t),
                   "; required: torch.bfloat16 or torch.float16");
  return *dt;
}

// A size-1 dimension's stride is arbitrary in torch (unsqueeze, transposes of size-1 dims); it is
// never used to address memory, so it is passed as 0, which the launcher's stride checks accept.
inline int64_t used_stride(const at::Tensor& t, int64_t d) { return t.size(d) == 1 ? 0 : t.stride(d); }

// [B, S, H, D] (varlen: [T, H, D], passed as B = 1, S = T) as the launcher's view.
inline blockfuse::AttnConstTensor view_of(const at::Tensor& t, bool varlen, const char* fn, const char* arg) {
  const int64_t rank = varlen ? 3 : 4;
  TORCH_CHECK_VALUE(t.dim() == rank, "blockfuse::", fn, ": argument '", arg, "' has sizes ", dims(t.sizes()),
                    varlen ? "; required: a packed [total, heads, head_dim] tensor"
                           : "; required: a [batch, seqlen, heads, head_dim] tensor");
  TORCH_CHECK_VALUE(t.stride(-1) == 1 || t.size(-1) <= 1, "blockfuse::", fn, ": argument '", arg,
                    "' has sizes ", dims(t.sizes()), ", strides ", dims(t.strides()),
                    "; required: a contiguous head dim (stride(-1) == 1)");
  blockfuse::AttnConstTensor v;
  v.data = t.data_ptr();
  v.dtype = attn_dtype(t, fn, arg);
  const int64_t o = varlen ? 1 : 0;  // dimension offset: varlen has no batch dimension
  v.batch = varlen ? 1 : t.size(0);
  v.batch_stride = varlen ? 0 : used_stride(t, 0);
  v.seqlen = t.size(1 - o);
  v.seq_stride = used_stride(t, 1 - o);
  v.heads = t.size(2 - o);
  v.head_stride = used_stride(t, 2 - o);
  v.head_dim = t.size(3 - o);
  return v;
}

// A writable view (an output, or a KV cache an op writes into).
inline blockfuse::AttnTensor out_view(const at::Tensor& out, bool varlen, const char* fn, const char* arg = "out") {
  const blockfuse::AttnConstTensor c = view_of(out, varlen, fn, arg);
  return blockfuse::AttnTensor{out.data_ptr(), c.dtype, c.batch, c.seqlen, c.heads, c.head_dim,
                               c.batch_stride, c.seq_stride, c.head_stride};
}

// An explicit scale <= 0 would silently become 1/sqrt(D) in the C++ API; the op rejects it instead.
inline void check_scale(std::optional<double> softmax_scale, const char* fn) {
  TORCH_CHECK_VALUE(!softmax_scale.has_value() || *softmax_scale > 0.0, "blockfuse::", fn,
                    ": argument 'softmax_scale' is ", std::to_string(softmax_scale.value_or(0.0)),
                    "; required: None (1/sqrt(head_dim)) or a value > 0");
}

// ---- registration ----------------------------------------------------------------------------------


// Defines ops whose schemas are given, tagged pt2_compliant (torch.compile may trace them).
inline void def_ops(torch::Library& m, std::initializer_list<const char*> schemas) {
  const std::vector<at::Tag> tags{at::Tag::pt2_compliant_tag};
  for (const char* schema : schemas) m.def(schema, tags);
}

}  // namespace blockfuse_torch

// Registers a family's kernels for CUDA and for CPU tensors: the same functions serve both, since
// their first check names the argument that is not on CUDA. Written
//   BLOCKFUSE_TORCH_IMPLS(m) { m.impl("op", &op_fn); ... }
#define BLOCKFUSE_TORCH_IMPLS(m)                                             \
  static void blockfuse_torch_impls(torch::Library&);                       \
  TORCH_LIBRARY_IMPL(blockfuse, CUDA, lib) { blockfuse_torch_impls(lib); }  \
  TORCH_LIBRARY_IMPL(blockfuse, CPU, lib) { blockfuse_torch_impls(lib); }   \
  static void blockfuse_torch_impls(torch::Library& m)
