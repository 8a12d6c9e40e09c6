// CPU reference of gated_up_fp8 (see reference_fp8.h): the definition, deliberately simple.
#include "gated_up/reference_fp8.h"

#include <cmath>
#include <vector>

#include "common/check.h"
#include "common/fp8_host.h"

namespace blockfuse {

void gated_up_fp8_reference_host_f32(const GatedUpFp8HostProblem& p, float* out, int64_t ldo, float* sensitivity) {
  constexpr const char* kFn = "gated_up_fp8_reference_host_f32";
  using detail::cat;
  if (p.act != Activation::kSiLU && p.act != Activation::kGeluTanh)
    detail::throw_arg(kFn, "act", cat("has code ", static_cast<int>(p.act)), "Activation::kSiLU or Activation::kGeluTanh");
  if (p.m < 0 || p.k < 0 || p.u < 0)
    detail::throw_arg(kFn, "p", cat("has m, k, u = ", p.m, ", ", p.k, ", ", p.u), "m, k, u >= 0");
  if (p.ldx < p.k || p.ldw < p.k) detail::throw_arg(kFn, "p", cat("has ldx, ldw = ", p.ldx, ", ", p.ldw), "ldx, ldw >= k");
  if (ldo < p.u) detail::throw_arg(kFn, "ldo", cat("= ", ldo), cat("ldo >= u (= ", p.u, ")"));
  if (p.m > 0 && p.u > 0 && (!p.x || !p.w || !p.x_scale || !p.w_scale || !out))
    detail::throw_arg(kFn, "p", "has a null pointer", "x, w, x_scale, w_scale and out non-null");
  // Every e4m3 value decoded once (a 256-entry table, then w as a whole): the tests run this on
  // Llama-sized K.
  float lut[256];
  for (int b = 0; b < 256; ++b) lut[b] = host::fp8_e4m3_to_float(uint8_t(b));
  std::vector<float> wf(size_t(2 * p.u) * size_t(p.k));
  for (int64_t n = 0; n < 2 * p.u; ++n)
    for (int64_t k = 0; k < p.k; ++k) wf[size_t(n * p.k + k)] = lut[p.w[n * p.ldw + k]];
  std::vector<double> xr(size_t(p.k));
  for (int64_t m = 0; m < p.m; ++m) {
    for (int64_t k = 0; k < p.k; ++k) xr[size_t(k)] = lut[p.x[m * p.ldx + k]];
    const double sx = p.x_scale[p.x_per_row ? m : 0];
    for (int64_t j = 0; j < p.u; ++j) {
      const float* wu = wf.data() + (2 * j) * p.k;
      const float* wg = wf.data() + (2 * j + 1) * p.k;
      double cu = 0, cg = 0, au = 0, ag = 0;
      for (int64_t k = 0; k < p.k; ++k) {
        const double tu = xr[size_t(k)] * wu[k];
        const double tg = xr[size_t(k)] * wg[k];
        cu += tu;
        cg += tg;
        au += std::fabs(tu);
        ag += std::fabs(tg);
      }
      const double su = sx * double(p.w_scale[p.w_per_channel ? 2 * j : 0]);
      const double sg = sx * double(p.w_scale[p.w_per_channel ? 2 * j + 1 : 0]);
      const double up = cu * su, g = cg * sg;
      double a, da;  // act(g) and act'(g)
      if (p.act == Activation::kSiLU) {
        const double sig = 1.0 / (1.0 + std::exp(-g));
        a = g * sig;
        da = sig * (1.0 + g * (1.0 - sig));
      } else {
        const double c = 0.7978845608028654, b = 0.044715;
        const double t = std::tanh(c * (g + b * g * g * g));
        a = 0.5 * g * (1.0 + t);
        da = 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * c * (1.0 + 3.0 * b * g * g);
      }
      out[m * ldo + j] = static_cast<float>(a * up);
      if (sensitivity)
        sensitivity[m * ldo + j] = static_cast<float>(std::fabs(a) * au * std::fabs(su) + std::fabs(da) * std::fabs(up) * ag * std::fabs(sg));
    }
  }
}

}  // namespace blockfuse
