// Argument validation and CUDA error reporting shared by every kernel family (see check.h).
#include "common/check.h"

#include <cstddef>
#include <cstdint>

#include "blockfuse/swiglu.h"
#include "common/device.h"

namespace blockfuse {

namespace {
// The name of enumerator e of an enum whose values are 0, 1, ... (names in that order).
template <class E, std::size_t N>
const char* enum_name(E e, const char* const (&names)[N]) {
  const auto i = static_cast<std::size_t>(static_cast<int>(e));
  return i < N ? names[i] : "unknown";
}
}  // namespace

const char* dtype_name(DType t) { return enum_name(t, {"bf16", "fp16"}); }
const char* activation_name(Activation a) { return enum_name(a, {"silu", "gelu_tanh"}); }
const char* layout_name(GateUpLayout l) { return enum_name(l, {"stacked", "interleaved"}); }

namespace detail {

void throw_cuda(cudaError_t err, const char* what, const char* file, int line) {
  throw Error(cat("blockfuse: CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                  ") in ", what, " at ", file, ":", line));
}

void throw_arg(const char* fn, const char* arg, const std::string& what,
               const std::string& requirement) {
  throw Error(cat("blockfuse::", fn, ": argument '", arg, "' ", what, "; required: ", requirement));
}

static bool valid_dtype(DType t) { return t == DType::kBF16 || t == DType::kFP16; }

void check_matrix_shape(const char* fn, const char* arg, const ConstMatrix& m) {
  if (!valid_dtype(m.dtype))
    throw_arg(fn, arg, cat("has dtype code ", static_cast<int>(m.dtype)), "bf16 or fp16");
  if (m.rows < 0) throw_arg(fn, arg, cat("has rows = ", m.rows), "rows >= 0");
  if (m.cols < 0) throw_arg(fn, arg, cat("has cols = ", m.cols), "cols >= 0");
  if (m.ld < m.cols || m.ld < 1)
    throw_arg(fn, arg, cat("has row stride ld = ", m.ld, " with cols = ", m.cols),
              "ld >= cols and ld >= 1");
  // Keep every element offset representable (and far from int64 overflow).
  if (m.rows > (int64_t{1} << 40) / m.ld)
    throw_arg(fn, arg, cat("spans rows * ld = ", m.rows, " * ", m.ld, " elements"),
              "rows * ld < 2^40");
  if (m.data == nullptr && m.rows > 0 && m.cols > 0)
    throw_arg(fn, arg, "has a null data pointer", "a valid pointer for a non-empty matrix");
}

void check_device_pointer(const char* fn, const char* arg, const void* p) {
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error this call may leave
    throw_arg(fn, arg, cat("pointer ", p, " could not be inspected (", cudaGetErrorString(err), ")"),
              "device memory of the current CUDA device");
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    throw_arg(fn, arg,
              cat("pointer ", p, " is ",
                  attr.type == cudaMemoryTypeHost ? "pinned host memory" : "not CUDA memory (pageable host?)"),
              "device memory of the current CUDA device");
  const int dev = current_device();
  if (attr.type == cudaMemoryTypeDevice && attr.device != dev)
    throw_arg(fn, arg, cat("pointer ", p, " is on device ", attr.device),
              cat("memory of the current device ", dev));
}

void check_device_matrix(const char* fn, const char* arg, const ConstMatrix& m) {
  check_matrix_shape(fn, arg, m);
  if (m.rows == 0 || m.cols == 0) return;
  check_device_pointer(fn, arg, m.data);
}

void check_pointer_alignment(const char* fn, const char* arg, const void* p, int bytes) {
  if (reinterpret_cast<std::uintptr_t>(p) % bytes != 0)
    throw_arg(fn, arg, cat("pointer ", p, " is not ", bytes, "-byte aligned"),
              cat("a ", bytes, "-byte aligned data pointer"));
}

void check_alignment(const char* fn, const char* arg, const ConstMatrix& m, int bytes, int elems) {
  check_pointer_alignment(fn, arg, m.data, bytes);
  if (m.ld % elems != 0)
    throw_arg(fn, arg, cat("has row stride ld = ", m.ld), cat("ld % ", elems, " == 0"));
}

void check_same_dtype(const char* fn, const char* arg, const ConstMatrix& m, const char* ref_arg,
                      DType ref) {
  if (m.dtype != ref)
    throw_arg(fn, arg, cat("has dtype ", dtype_name(m.dtype)),
              cat("the dtype of '", ref_arg, "' (", dtype_name(ref), ")"));
}

Span span_of(const ConstMatrix& m) { return Span{span_begin(m), span_end(m)}; }

void check_no_overlap(const char* fn, const char* a_arg, Span a, const char* b_arg, Span b) {
  if (a.begin == a.end || b.begin == b.end) return;
  if (a.begin < b.end && b.begin < a.end)
    throw_arg(fn, a_arg,
              cat("spans [", static_cast<const void*>(a.begin), ", ", static_cast<const void*>(a.end),
                  ") which overlaps '", b_arg, "' [", static_cast<const void*>(b.begin), ", ",
                  static_cast<const void*>(b.end), ")"),
              cat("'", a_arg, "' and '", b_arg, "' must not overlap"));
}

void check_no_overlap(const char* fn, const char* a_arg, const ConstMatrix& a, const char* b_arg,
                      const ConstMatrix& b) {
  check_no_overlap(fn, a_arg, span_of(a), b_arg, span_of(b));
}

void check_compute_capability(const char* fn, int major, int minor) {
  const int dev = current_device();
  const DeviceSpec d = device_spec(dev);
  if (d.cc_major * 10 + d.cc_minor < major * 10 + minor)
    throw Error(cat("blockfuse::", fn, ": the current device ", dev, " has compute capability ", d.cc_major,
                    ".", d.cc_minor, "; required: compute capability >= ", major, ".", minor));
}

}  // namespace detail
}  // namespace blockfuse
