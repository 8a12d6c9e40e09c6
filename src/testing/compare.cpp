// The per-dtype tolerance table and the host side of the comparison (compare.h).
#include "testing/compare.h"

#include <algorithm>
#include <cstdio>

#include "common/fp8_host.h"

namespace blockfuse::testing {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBF16: return "bf16";
    case Precision::kFP16: return "fp16";
    case Precision::kFP8E4M3: return "fp8_e4m3";
    case Precision::kFP32: return "fp32";
  }
  return "?";
}

double unit_roundoff(Precision p) {
  switch (p) {
    case Precision::kBF16: return std::ldexp(1.0, -8);
    case Precision::kFP16: return std::ldexp(1.0, -11);
    case Precision::kFP8E4M3: return std::ldexp(1.0, -4);
    case Precision::kFP32: return std::ldexp(1.0, -24);
  }
  return 0;
}

Tolerance tolerance(Precision p, double roundings, double atol) { return Tolerance{atol, roundings * unit_roundoff(p)}; }

double CompareStats::rel_l2() const { return sum_sq_ref > 0 ? std::sqrt(sum_sq_diff / sum_sq_ref) : std::sqrt(sum_sq_diff); }

void CompareStats::add(int64_t r, int64_t c, double got, double ref, double bound) {
  ++count;
  bool bad;
  if (std::isnan(ref) || std::isinf(ref)) {
    bad = std::isnan(ref) ? !std::isnan(got) : got != ref;
    if (bad) ++violations;
  } else if (!std::isfinite(got)) {
    bad = true;
    ++nonfinite;
  } else {
    const double d = std::fabs(got - ref);
    max_abs_diff = std::max(max_abs_diff, d);
    sum_abs_diff += d;
    sum_sq_diff += d * d;
    sum_sq_ref += ref * ref;
    sum_abs_ref += std::fabs(ref);
    bad = !(d <= bound);
    if (bad) ++violations;
  }
  if (bad && first_bad_row < 0) {
    first_bad_row = r, first_bad_col = c;
    first_bad_got = got, first_bad_ref = ref;
  }
}

CompareStats compare_scales(int64_t n, const float* got, const float* ref, double rtol) {
  CompareStats st;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[i], r = ref[i];
    if (std::isfinite(r) && r > 0) {
      st.add(i, 0, g, r, rtol * r);
      continue;
    }
    // add() would accept a NaN for a NaN reference: a scale the reference could not compute is a
    // failure of the test itself.
    ++st.count;
    ++st.violations;
    if (st.first_bad_row < 0) st.first_bad_row = i, st.first_bad_col = 0, st.first_bad_got = g, st.first_bad_ref = r;
  }
  return st;
}

double e4m3_dequant(uint8_t q, double scale) { return double(host::fp8_e4m3_to_float(q)) * scale; }

double e4m3_step_bound(double v, double scale, double steps) {
  return steps * (std::ldexp(std::fabs(v), -3) + std::ldexp(scale, -9));
}

std::string CompareStats::summary() const {
  char b[256];
  std::snprintf(b, sizeof b, "%lld of %lld out of tolerance, %lld non-finite", static_cast<long long>(violations),
                static_cast<long long>(count), static_cast<long long>(nonfinite));
  std::string s = b;
  if (first_bad_row >= 0) {
    std::snprintf(b, sizeof b, ", first at (%lld, %lld): got %.6g want %.6g", static_cast<long long>(first_bad_row),
                  static_cast<long long>(first_bad_col), first_bad_got, first_bad_ref);
    s += b;
  }
  std::snprintf(b, sizeof b, "; max |diff| %.3g, rel_l2 %.3g", max_abs_diff, rel_l2());
  return s + b;
}

}  // namespace blockfuse::testing
