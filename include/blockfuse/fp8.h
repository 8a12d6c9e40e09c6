// blockfuse/fp8.h — FP8 (e4m3) outputs shared by the memory-bound kernels (add_rmsnorm, swiglu).
//
// The next GEMM of a decoder block (QKV after the norm, down-projection after the gated unit) is
// often an FP8 GEMM; writing its input in FP8 from the kernel that produces it saves a pass and
// halves the bytes written. Format: OCP e4m3 (`__nv_fp8_e4m3`, max finite ±448), converted with
// round-to-nearest-even and saturation to ±448 (`__NV_SATFINITE`); NaN stays NaN.
//
// Scaling (dequantised value = float(q) · scale):
//   kStaticPerTensor: the caller gives one scale in device memory (so the call can sit in a CUDA
//                     graph while the scale changes); q = sat(v · (1/scale)). scale must be > 0
//                     (a NaN scale gives NaN outputs).
//   kDynamicPerRow:   the kernel writes one scale per row: scale_r = amax_r / 448 where
//                     amax_r = max |v| over the row's finite values (NaN/Inf excluded, so one bad
//                     value does not zero the rest of the row), and scale_r = 1 when amax_r == 0;
//                     q = sat(v · (1/scale_r)), so the row's largest finite value maps to ±448.
//   1/scale is rounded to fp32 once per tensor or row (the kernels multiply, not divide, per
//   element); sat() saturates to ±448. Non-finite v gives NaN (e4m3 has no Inf).
// v is the fp32 result before any rounding to bf16/fp16.
#pragma once

#include <cstdint>

#include "blockfuse/common.h"

namespace blockfuse {

constexpr float kFp8E4M3Max = 448.0f;

// A writable row-major matrix of 1-byte e4m3 elements in device memory.
struct Fp8Matrix {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // row stride in elements (= bytes); >= cols
};
inline Fp8Matrix make_fp8_matrix(void* data, int64_t rows, int64_t cols, int64_t ld = -1) {
  return Fp8Matrix{data, rows, cols, ld < 0 ? cols : ld};
}

enum class Fp8ScaleMode : int {
  kStaticPerTensor = 0,
  kDynamicPerRow = 1,
};
const char* fp8_scale_mode_name(Fp8ScaleMode m);

struct Fp8Scale {
  Fp8ScaleMode mode = Fp8ScaleMode::kStaticPerTensor;
  // kStaticPerTensor: device pointer to 1 float, read. kDynamicPerRow: device pointer to `rows`
  // floats (contiguous), written.
  float* scale = nullptr;
};

}  // namespace blockfuse
