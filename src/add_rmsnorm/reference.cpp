// The CPU reference of add_rmsnorm (reference.h).
#include "add_rmsnorm/reference.h"

#include <cmath>

#include "blockfuse/fp8.h"
#include "common/fp8_host.h"
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

void rmsnorm_backward(DType t, int64_t M, int64_t H, const uint16_t* dy, int64_t lddy, const uint16_t* dres,
                      int64_t lddres, const uint16_t* h, int64_t ldh, const uint16_t* w, double eps,
                      bool gemma_one_plus_w, double* dh, double* dweight) {
  if (dweight)
    for (int64_t i = 0; i < H; ++i) dweight[i] = 0;
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0, sgh = 0;
    for (int64_t i = 0; i < H; ++i) {
      const double hv = host::to_float(t, h[m * ldh + i]);
      const double g = double(host::to_float(t, dy[m * lddy + i])) *
                       (double(host::to_float(t, w[i])) + (gemma_one_plus_w ? 1.0 : 0.0));
      ss += hv * hv;
      sgh += g * hv;
    }
    const double rstd = 1.0 / std::sqrt(ss / double(H) + eps);
    const double mean_gh = rstd * sgh / double(H);
    for (int64_t i = 0; i < H; ++i) {
      const double hn = double(host::to_float(t, h[m * ldh + i])) * rstd;
      const double d = host::to_float(t, dy[m * lddy + i]);
      const double g = d * (double(host::to_float(t, w[i])) + (gemma_one_plus_w ? 1.0 : 0.0));
      if (dh) dh[m * H + i] = rstd * (g - hn * mean_gh) + (dres ? double(host::to_float(t, dres[m * lddres + i])) : 0.0);
      if (dweight) dweight[i] += d * hn;
    }
  }
}

uint16_t round_to_dtype(DType t, double v) { return host::from_float(t, static_cast<float>(v)); }

// The shared host e4m3 conversion (common/fp8_host.h, checked code by code in test_fp8_host.cpp).
// Through float: every value these tests convert is either exact in fp32 or far from an e4m3
// rounding boundary compared with fp32's precision.
uint8_t e4m3_from_double(double v) { return host::float_to_fp8_e4m3(static_cast<float>(v)); }

double e4m3_to_double(uint8_t b) { return host::fp8_e4m3_to_float(b); }

float e4m3_dynamic_scale(const double* v, int64_t n) {
  double amax = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(v[i])) amax = std::fmax(amax, std::fabs(v[i]));
  return amax == 0 ? 1.0f : static_cast<float>(amax) / kFp8E4M3Max;
}

}  // namespace blockfuse::reference
