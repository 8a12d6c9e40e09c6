// Internal: OCP FP8 e4m3 on the host, for the CPU references and the tests. Bit-exact with the
// device conversion blockfuse uses (__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)) for finite
// inputs: round to nearest even, magnitudes above 448 saturate to 448. e4m3: 1 sign, 4 exponent
// (bias 7), 3 mantissa bits; no Inf; S.1111.111 is NaN; smallest subnormal 2^-9.
#pragma once

#include <cmath>
#include <cstdint>

#include "blockfuse/fp8.h"

namespace blockfuse::host {

inline float fp8_e4m3_to_float(uint8_t b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(1.0f + mant / 8.0f, exp - 7);
}

// Round to nearest even, saturating (|v| > 448 -> 448); NaN -> 0x7f (with v's sign bit); +-Inf
// saturates like any large value (blockfuse's kernels turn non-finite results into NaN before
// converting: see blockfuse/fp8.h).
inline uint8_t float_to_fp8_e4m3(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  if (std::isnan(v)) return sign | 0x7f;
  const float a = std::fabs(v);
  if (a >= kFp8E4M3Max) return sign | 0x7e;
  if (a < std::ldexp(1.0f, -6)) {  // subnormal range: multiples of 2^-9 (8 rounds up to 0x08, min normal)
    const float q = std::nearbyint(std::ldexp(a, 9));  // exact scaling; nearbyint rounds half to even
    return sign | static_cast<uint8_t>(q);
  }
  int e = 0;
  const float m = std::frexp(a, &e);           // a = m * 2^e, m in [0.5, 1)
  float q = std::nearbyint((m * 2.0f - 1.0f) * 8.0f);  // 3 mantissa bits of 1.xxx, rounded half-even
  int exp = e - 1 + 7;
  if (q == 8.0f) { q = 0.0f; ++exp; }
  if (exp > 15 || (exp == 15 && q > 6.0f)) return sign | 0x7e;  // rounded past 448
  return sign | static_cast<uint8_t>((exp << 3) | static_cast<int>(q));
}

// The quantisation blockfuse's kernels apply to one fp32 result v with scale s (blockfuse/fp8.h):
// non-finite v -> NaN; otherwise the saturating conversion of v · (1 / s), the reciprocal rounded to
// fp32 once (the kernels multiply rather than divide per element). A NaN scale gives NaN.
inline uint8_t fp8_quantize(float v, float s) {
  if (!std::isfinite(v)) return 0x7f;
  const float inv = 1.0f / s;
  return float_to_fp8_e4m3(v * inv);
}

// The per-row dynamic scale from the row's largest finite magnitude.
inline float fp8_dynamic_scale(float amax_finite) {
  return amax_finite > 0.0f ? amax_finite / kFp8E4M3Max : 1.0f;
}

}  // namespace blockfuse::host
