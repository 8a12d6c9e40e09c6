// The CPU reference of add_rmsnorm (reference.h).
#include "add_rmsnorm/reference.h"

#include <cmath>

#include "blockfuse/fp8.h"
#include "common/host_float.h"

namespace blockfuse::reference {

void add_rmsnorm(DType t, int64_t M, int64_t H, const uint16_t* x, int64_t ldx, const uint16_t* residual,
                 int64_t ldr, const uint16_t* w, double eps, bool gemma_one_plus_w, uint16_t* r_out, double* v) {
  std::vector<double> r(static_cast<size_t>(H));
  for (int64_t m = 0; m < M; ++m) {
    double sumsq = 0;
    for (int64_t i = 0; i < H; ++i) {
      float s = host::to_float(t, x[m * ldx + i]);
      if (residual) s += host::to_float(t, residual[m * ldr + i]);  // the fp32 sum the kernel forms
      const uint16_t rb = host::from_float(t, s);
      r_out[m * H + i] = rb;
      r[size_t(i)] = host::to_float(t, rb);  // the norm sees the rounded residual_out
      sumsq += r[size_t(i)] * r[size_t(i)];
    }
    const double inv = 1.0 / std::sqrt(sumsq / double(H) + eps);
    for (int64_t i = 0; i < H; ++i) {
      double g = host::to_float(t, w[i]);
      if (gemma_one_plus_w) g += 1.0;
      v[m * H + i] = r[size_t(i)] * inv * g;
    }
  }
}

uint16_t round_to_dtype(DType t, double v) { return host::from_float(t, static_cast<float>(v)); }

uint8_t e4m3_from_double(double v) {
  if (std::isnan(v)) return 0x7f;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const double a = std::fabs(v);
  if (a >= double(kFp8E4M3Max)) return sign | 0x7e;  // saturate (Inf too)
  if (a < std::ldexp(1.0, -6)) {
    // Subnormal (or the smallest normal after rounding up): code = round(a / 2^-9); code 8 is
    // exactly the encoding of 2^-6, so rounding into the normal range needs no special case.
    const double q = std::nearbyint(a * 512.0);  // default rounding mode: to nearest even
    return sign | static_cast<uint8_t>(q);
  }
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m · 2^e, m in [0.5, 1)
  int exp = e - 1;                     // a = (2m) · 2^exp, 2m in [1, 2)
  double q = std::nearbyint((2.0 * m - 1.0) * 8.0);
  if (q == 8.0) { q = 0; ++exp; }
  const int code = ((exp + 7) << 3) | static_cast<int>(q);
  return sign | static_cast<uint8_t>(code > 0x7e ? 0x7e : code);  // 448 < a < 464 rounds down anyway
}

double e4m3_to_double(uint8_t b) {
  const double s = (b & 0x80) ? -1.0 : 1.0;
  const int exp = (b >> 3) & 0xf, man = b & 7;
  if (exp == 15 && man == 7) return std::nan("");
  if (exp == 0) return s * std::ldexp(double(man), -9);
  return s * std::ldexp(1.0 + man / 8.0, exp - 7);
}

float e4m3_dynamic_scale(const double* v, int64_t n) {
  double amax = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(v[i])) amax = std::fmax(amax, std::fabs(v[i]));
  return amax == 0 ? 1.0f : static_cast<float>(amax) / kFp8E4M3Max;
}

}  // namespace blockfuse::reference
