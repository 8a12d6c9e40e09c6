// Internal: CUDA error checks and argument validation shared by every kernel family.
//
// Every public entry point validates all of its arguments before it launches anything; a
// violation throws blockfuse::Error whose message names the function, the argument, its value and
// the requirement, e.g.
//   blockfuse::gated_up: argument 'w' has 28673 rows; required: rows == 2 * out.cols (= 28672)
#pragma once

#include <cstdio>
#include <string>
#include <type_traits>

#include <cuda_runtime_api.h>

#include "blockfuse/common.h"
#include "blockfuse/fp8.h"

namespace blockfuse::detail {

[[noreturn]] void throw_cuda(cudaError_t err, const char* what, const char* file, int line);

#define BF_CUDA_CHECK(expr)                                                            \
  do {                                                                                 \
    cudaError_t bf_err_ = (expr);                                                      \
    if (bf_err_ != cudaSuccess) ::blockfuse::detail::throw_cuda(bf_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// Checks the launch that just happened (configuration errors surface here, not at the launch).
#define BF_CHECK_LAUNCH() BF_CUDA_CHECK(cudaGetLastError())

// Throws "blockfuse::<fn>: argument '<arg>' <what>; required: <requirement>".
[[noreturn]] void throw_arg(const char* fn, const char* arg, const std::string& what,
                            const std::string& requirement);

// Message building without iostreams: numbers go through std::to_string / snprintf. Formatting an
// integer with an ostream uses the std::num_put facet of the process's locale, which crashed
// (SIGSEGV) inside a PyTorch process (torch 2.11 wheel, this library built with another GCC: two
// copies of libstdc++'s locale machinery). Strings and to_string need no facet.
inline void append_part(std::string& s, const std::string& v) { s += v; }
inline void append_part(std::string& s, const char* v) { s += v ? v : "(null)"; }
inline void append_part(std::string& s, char v) { s += v; }
inline void append_part(std::string& s, bool v) { s += v ? "true" : "false"; }
inline void append_part(std::string& s, const void* v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", v);
  s += buf;
}
template <class T>
std::enable_if_t<std::is_integral_v<T>> append_part(std::string& s, T v) {
  s += std::to_string(v);
}
template <class T>
std::enable_if_t<std::is_floating_point_v<T>> append_part(std::string& s, T v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  s += buf;
}

template <class... T>
std::string cat(const T&... parts) {
  std::string s;
  (append_part(s, parts), ...);
  return s;
}

// An empty view (data == nullptr, rows == 0): an optional argument left out (a residual, an output
// not wanted).
inline bool absent(const ConstMatrix& m) { return m.data == nullptr && m.rows == 0; }

// Shape/stride sanity for any matrix view: rows, cols >= 0, ld >= max(cols, 1), data non-null
// unless the matrix is empty.
void check_matrix_shape(const char* fn, const char* arg, const ConstMatrix& m);
// check_matrix_shape + the pointer is device memory of the current device (or managed).
void check_device_matrix(const char* fn, const char* arg, const ConstMatrix& m);
// data pointer aligned to `bytes` and ld a multiple of `elems`.
void check_alignment(const char* fn, const char* arg, const ConstMatrix& m, int bytes, int elems);
// A pointer aligned to `bytes` (any buffer: FP8 outputs, scales, workspaces).
void check_pointer_alignment(const char* fn, const char* arg, const void* p, int bytes);
void check_same_dtype(const char* fn, const char* arg, const ConstMatrix& m, const char* ref_arg,
                      DType ref);
// Throws if the byte ranges spanned by a and b overlap.
void check_no_overlap(const char* fn, const char* a_arg, const ConstMatrix& a, const char* b_arg,
                      const ConstMatrix& b);
// The pointer is device memory of the current device (or managed); for any device buffer that is
// not a 2-byte matrix (FP8 outputs, scale vectors, workspaces).
void check_device_pointer(const char* fn, const char* arg, const void* p);
// A byte range [begin, end) of device memory, for overlap checks between buffers of any type.
struct Span {
  const char* begin = nullptr;
  const char* end = nullptr;
};
Span span_of(const ConstMatrix& m);
inline Span span_of_bytes(const void* p, int64_t bytes) {
  auto* b = static_cast<const char*>(p);
  return Span{b, b + (p ? bytes : 0)};
}
// Throws if two non-empty spans overlap (the error names a_arg).
void check_no_overlap(const char* fn, const char* a_arg, Span a, const char* b_arg, Span b);
// An FP8 output of rows x cols: shape, ld, a non-null pointer when non-empty, `align_bytes`-aligned
// data and ld % align_bytes == 0 (the kernels store whole vectors per row).
void check_fp8_matrix_shape(const char* fn, const char* arg, const Fp8Matrix& m, int align_bytes);
Span span_of(const Fp8Matrix& m);
// The scale argument of an FP8 output with `rows` rows: a known mode and a non-null, 4-byte-aligned
// device pointer (checked for device-ness only when `on_device`, i.e. after the shape checks).
void check_fp8_scale(const char* fn, const char* arg, const Fp8Scale& s, int64_t rows, bool on_device);
// Its two parts, for entry points that name the fields ('scale.mode', 'scale.scale'):
// a known mode; a 4-byte-aligned pointer, non-null unless `null_ok`.
void check_fp8_scale_mode(const char* fn, const char* arg, Fp8ScaleMode mode);
void check_fp8_scale_pointer(const char* fn, const char* arg, const Fp8Scale& s, int64_t rows, bool null_ok);
Span span_of(const Fp8Scale& s, int64_t rows);
// The current device's compute capability is >= major.minor.
void check_compute_capability(const char* fn, int major, int minor);

// Byte range [first, last) a matrix view spans.
inline const char* span_begin(const ConstMatrix& m) { return static_cast<const char*>(m.data); }
inline const char* span_end(const ConstMatrix& m) {
  if (m.rows == 0 || m.cols == 0) return span_begin(m);
  return span_begin(m) + ((m.rows - 1) * m.ld + m.cols) * static_cast<int64_t>(dtype_size(m.dtype));
}

}  // namespace blockfuse::detail
