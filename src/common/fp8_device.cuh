// Internal: the FP8 e4m3 quantisation the memory-bound kernels apply on the device, matching
// host::fp8_quantize (common/fp8_host.h) bit for bit: non-finite v -> NaN (e4m3 has no Inf, and a
// silently saturated Inf would hide an overflow upstream); otherwise v / scale, clamped to +-448
// (a NaN scale stays NaN), converted with round-to-nearest-even. v / scale is an IEEE division (nvcc's
// default -prec-div=true), not a multiply by a reciprocal, so host and device agree exactly.
#pragma once

#include <cstdint>

#include <cuda_fp8.h>

#include "blockfuse/fp8.h"

namespace blockfuse {

__device__ __forceinline__ uint8_t fp8_quantize(float v, float scale) {
  if (!isfinite(v)) return 0x7f;
  float t = v / scale;
  t = t > kFp8E4M3Max ? kFp8E4M3Max : (t < -kFp8E4M3Max ? -kFp8E4M3Max : t);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(t, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float fp8_dynamic_scale(float amax_finite) {
  return amax_finite > 0.0f ? amax_finite / kFp8E4M3Max : 1.0f;
}

// |v| if finite, else 0: the contribution of one value to a row's amax (NaN/Inf excluded).
__device__ __forceinline__ float finite_abs(float v) { return isfinite(v) ? fabsf(v) : 0.0f; }

}  // namespace blockfuse
