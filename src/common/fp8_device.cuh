// Internal: the FP8 e4m3 quantisation the memory-bound kernels apply on the device, matching
// host::fp8_quantize (common/fp8_host.h) bit for bit: non-finite v -> NaN (e4m3 has no Inf, and a
// silently saturated Inf would hide an overflow upstream); otherwise v · inv_scale (inv_scale =
// 1 / scale, one IEEE division per row or tensor, not per element: a per-element division makes
// the FP8 path compute-bound: it spilled in swiglu's first FP8 kernel, docs/swiglu.md#tuning), converted
// with round-to-nearest-even and saturation to ±448 (cvt ... .satfinite maps |x| > 448, Inf included,
// to ±448 and keeps NaN). Pairs convert with one instruction on sm_89+.
#pragma once

#include <cstdint>

#include <cuda_fp8.h>

#include "blockfuse/fp8.h"

namespace blockfuse {

__device__ __forceinline__ float fp8_prescale(float v, float inv_scale) {
  return isfinite(v) ? v * inv_scale : __int_as_float(0x7fffffff);
}

__device__ __forceinline__ uint8_t fp8_quantize(float v, float inv_scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(fp8_prescale(v, inv_scale), __NV_SATFINITE, __NV_E4M3));
}

// Two values -> two e4m3 bytes (a in the low byte).
__device__ __forceinline__ uint16_t fp8x2_quantize(float a, float b, float inv_scale) {
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(
      make_float2(fp8_prescale(a, inv_scale), fp8_prescale(b, inv_scale)), __NV_SATFINITE, __NV_E4M3));
}

// 8 values -> 8 e4m3 bytes (v[0] in the lowest byte).
__device__ __forceinline__ uint2 pack_fp8x8(const float (&v)[8], float inv_scale) {
  uint2 o;
  o.x = uint32_t(fp8x2_quantize(v[0], v[1], inv_scale)) | (uint32_t(fp8x2_quantize(v[2], v[3], inv_scale)) << 16);
  o.y = uint32_t(fp8x2_quantize(v[4], v[5], inv_scale)) | (uint32_t(fp8x2_quantize(v[6], v[7], inv_scale)) << 16);
  return o;
}

// 8 values -> 8 bytes in one 8-byte store (dst 8-byte aligned).
__device__ __forceinline__ void store_fp8x8(uint8_t* dst, const float (&v)[8], float inv_scale) {
  *reinterpret_cast<uint2*>(dst) = pack_fp8x8(v, inv_scale);
}
// The same by st.global.cs (evict first), for an output far larger than L2 (add_rmsnorm's config.h
// says where it pays).
__device__ __forceinline__ void store_fp8x8_streaming(uint8_t* dst, const float (&v)[8], float inv_scale) {
  __stcs(reinterpret_cast<uint2*>(dst), pack_fp8x8(v, inv_scale));
}

__device__ __forceinline__ float fp8_dynamic_scale(float amax_finite) {
  return amax_finite > 0.0f ? amax_finite / kFp8E4M3Max : 1.0f;
}

// A row's dynamic scale: written to *scale_out by the one thread for which `writer` holds, and
// returned as 1/scale, the factor store_fp8x8 quantises by.
__device__ __forceinline__ float fp8_write_dynamic_scale(float amax_finite, float* scale_out, bool writer) {
  const float s = fp8_dynamic_scale(amax_finite);
  if (writer) *scale_out = s;
  return 1.0f / s;
}

// |v| if finite, else 0: the contribution of one value to a row's amax (NaN/Inf excluded).
__device__ __forceinline__ float finite_abs(float v) { return isfinite(v) ? fabsf(v) : 0.0f; }

}  // namespace blockfuse
