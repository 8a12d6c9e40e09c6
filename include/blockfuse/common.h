// blockfuse/common.h — types shared by every blockfuse entry point.
//
// blockfuse's C++ API takes plain views of device memory: no ownership, no framework types. A
// matrix is row-major with a row stride `ld` (in elements) so a caller can pass a slice of a
// larger buffer. Every entry point validates its arguments before anything is launched and throws
// blockfuse::Error with a message that names the argument, its value and what was required.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

namespace blockfuse {

enum class DType : int {
  kBF16 = 0,  // bfloat16 (8-bit exponent) — the usual LLM weight/activation type
  kFP16 = 1,  // IEEE half
};

// Element size in bytes.
constexpr std::size_t dtype_size(DType) { return 2; }
const char* dtype_name(DType t);

// The gate activation of a gated linear unit: h = act(gate) ⊙ up.
enum class Activation : int {
  kSiLU = 0,      // SwiGLU: silu(g) = g · sigmoid(g)         (Llama, Mistral, Qwen)
  kGeluTanh = 1,  // GeGLU:  0.5 g (1 + tanh(√(2/π)(g + 0.044715 g³)))   (Gemma)
};
const char* activation_name(Activation a);

// A read-only row-major matrix in device (or, for host helpers, host) memory.
struct ConstMatrix {
  const void* data = nullptr;
  DType dtype = DType::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // row stride in elements; >= cols
};

// A writable row-major matrix.
struct Matrix {
  void* data = nullptr;
  DType dtype = DType::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // row stride in elements; >= cols
  operator ConstMatrix() const { return ConstMatrix{data, dtype, rows, cols, ld}; }
};

// ld defaults to cols (a contiguous matrix).
inline ConstMatrix make_matrix(const void* data, DType dtype, int64_t rows, int64_t cols,
                               int64_t ld = -1) {
  return ConstMatrix{data, dtype, rows, cols, ld < 0 ? cols : ld};
}
inline Matrix make_matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld = -1) {
  return Matrix{data, dtype, rows, cols, ld < 0 ? cols : ld};
}

// Thrown for every invalid argument and every CUDA failure blockfuse detects.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Programmatic dependent launch (PDL; Hopper and later). blockfuse launches its memory-bound kernels
// (add_rmsnorm, rmsnorm, swiglu and their FP8 forms) for up to 32 rows with the
// programmatic-stream-serialization attribute, so their blocks become resident while the kernel
// before them in the stream drains and the launch gap overlaps it (0.15-0.6 µs of a 1.5-5 µs call
// on an H100; larger calls gain nothing and are launched plainly). Each such kernel waits for its predecessor to complete (and its writes
// to be visible) before it touches memory, so results are the same with or without it; a kernel
// after one of them may start launching early only if it was itself launched with the attribute,
// and CUDA then requires it to wait likewise. On by default where the device is sm_90+ and the
// library carries sm_90 code; BLOCKFUSE_PDL=0 in the environment, or
// set_programmatic_dependent_launch(false), turns it off for the process. Returns the previous
// setting. Works under CUDA-graph capture (the dependency is captured as a programmatic edge).
bool set_programmatic_dependent_launch(bool enabled);
bool programmatic_dependent_launch();

}  // namespace blockfuse
