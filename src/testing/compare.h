// blockfuse::testing — the one comparison of a result with its higher-precision reference, used by
// the tests and the benchmarks alike: per element |got − ref| <= atol + rtol·|ref|, non-finite
// results counted apart (outputs are poisoned with NaN first, so an unwritten element shows), and
// the relative L2 error reported beside it (a systematic error can hide inside a per-element band).
// The device version (compare() in testing.h) fills the same CompareStats.
//
// Tolerances come from one per-dtype table: the unit roundoff u of the type (half an ulp at 1.0)
// times the number of roundings the kernel may legitimately differ from the reference by.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "blockfuse/common.h"

namespace blockfuse::testing {

// The element types a result can have (DType plus FP8 outputs and fp32 workspaces).
enum class Precision { kBF16, kFP16, kFP8E4M3, kFP32 };
inline Precision precision_of(DType t) { return t == DType::kBF16 ? Precision::kBF16 : Precision::kFP16; }
const char* precision_name(Precision p);

// Half an ulp at 1.0: bf16 2^-8 (8 significand bits), fp16 2^-11, e4m3 2^-4, fp32 2^-24.
double unit_roundoff(Precision p);
inline double unit_roundoff(DType t) { return unit_roundoff(precision_of(t)); }

struct Tolerance {
  double atol = 0, rtol = 0;
  double bound(double ref) const { return atol + rtol * std::fabs(ref); }
};
// `roundings` output roundings (rtol = roundings·u) plus `atol` for results near zero, where fp32
// accumulation order, not the output rounding, sets the error.
Tolerance tolerance(Precision p, double roundings = 1, double atol = 1e-5);
inline Tolerance tolerance(DType t, double roundings = 1, double atol = 1e-5) {
  return tolerance(precision_of(t), roundings, atol);
}

struct CompareStats {
  int64_t count = 0;        // elements compared
  int64_t nonfinite = 0;    // elements of `out` that are NaN/Inf where ref is finite (unwritten/poisoned)
  int64_t violations = 0;   // elements with |out - ref| > atol + rtol·|ref|
  double max_abs_diff = 0;  // max |out - ref|
  double sum_abs_diff = 0;  // Σ|out - ref|
  double sum_sq_diff = 0;   // Σ(out - ref)²
  double sum_sq_ref = 0;    // Σ ref²
  double sum_abs_ref = 0;   // Σ|ref|
  int64_t first_bad_row = -1, first_bad_col = -1;  // first violation or non-finite, if any
  double first_bad_got = 0, first_bad_ref = 0;     // (host comparisons only)
  double mean_abs_diff() const { return count ? sum_abs_diff / count : 0; }
  double rel_l2() const;  // ‖out − ref‖₂ / ‖ref‖₂
  double rel_l1() const { return sum_abs_ref > 0 ? sum_abs_diff / sum_abs_ref : 0; }  // Σ|d| / Σ|ref|
  bool ok(double max_rel_l2 = 1e-2) const { return count > 0 && !nonfinite && !violations && rel_l2() <= max_rel_l2; }
  // "3 of 4096 out of tolerance, 0 non-finite, first at (2, 17): got 1.5 want 1.25; rel_l2 1e-3"
  std::string summary() const;

  // Adds one element (host comparisons): |got - ref| <= bound. A NaN reference expects a NaN
  // result, an infinite one the same infinity.
  void add(int64_t r, int64_t c, double got, double ref, double bound);
  void add(int64_t r, int64_t c, double got, double ref, const Tolerance& tol) { add(r, c, got, ref, tol.bound(ref)); }
};

// Compares rows x cols elements got(r, c) with ref(r, c) on the host.
template <class Got, class Ref>
CompareStats compare_host(int64_t rows, int64_t cols, Got got, Ref ref, const Tolerance& tol) {
  CompareStats st;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) st.add(r, c, double(got(r, c)), double(ref(r, c)), tol);
  return st;
}

// Scales (one per row, or one per tensor) against the reference's: |got − ref| <= rtol·ref. A
// reference scale that is not finite and positive counts as a violation (the test computed no
// valid scale), whatever the result.
CompareStats compare_scales(int64_t n, const float* got, const float* ref, double rtol);

// FP8 e4m3 results are compared after de-scaling: code q with scale s stands for value(q)·s. One
// e4m3 step is 2^-3 of a value at the bottom of its binade (the spacing is 1/16..1/8 of the value
// in the normal range) and 2^-9·s, the subnormal spacing, near zero; `steps` steps allow
// steps·(2^-3·|v| + 2^-9·s). The unit roundoff of the table (u = 2^-4) is half of one step.
double e4m3_dequant(uint8_t q, double scale);  // NaN for the NaN codes 0x7f / 0xff
double e4m3_step_bound(double v, double scale, double steps = 1);

// Compares rows x cols e4m3 codes q (row stride ld bytes) de-scaled by scale(r) with the unrounded
// reference ref(r, c), saturated to ±448·scale(r) as the conversion saturates: within `steps`
// e4m3 steps of the saturated reference. A NaN reference expects a NaN code.
template <class Scale, class Ref>
CompareStats compare_e4m3_host(int64_t rows, int64_t cols, const uint8_t* q, int64_t ld, Scale scale, Ref ref,
                               double steps = 1) {
  CompareStats st;
  for (int64_t r = 0; r < rows; ++r) {
    const double s = double(scale(r)), lim = 448.0 * s;
    for (int64_t c = 0; c < cols; ++c) {
      const double v = double(ref(r, c));
      const double want = std::isnan(v) ? v : v > lim ? lim : v < -lim ? -lim : v;
      st.add(r, c, e4m3_dequant(q[r * ld + c], s), want, e4m3_step_bound(want, s, steps));
    }
  }
  return st;
}

// Compares e4m3 codes with reference codes, each de-scaled by its own scale (got_scale(r),
// ref_scale(r)). Either side may round a value on a code boundary to the neighbouring code and the
// two scales may differ in their last bits, so the bound is `steps` steps of the larger of the two
// values, the subnormal step taken from the reference scale (×1.0001 for the scales' difference).
// NaN codes must coincide.
template <class GotScale, class RefScale>
CompareStats compare_e4m3_codes_host(int64_t rows, int64_t cols, const uint8_t* got, int64_t ld_got, GotScale got_scale,
                                     const uint8_t* ref, int64_t ld_ref, RefScale ref_scale, double steps = 1) {
  CompareStats st;
  for (int64_t r = 0; r < rows; ++r) {
    const double gs = double(got_scale(r)), rs = double(ref_scale(r));
    for (int64_t c = 0; c < cols; ++c) {
      const double a = e4m3_dequant(got[r * ld_got + c], gs), b = e4m3_dequant(ref[r * ld_ref + c], rs);
      st.add(r, c, a, b, e4m3_step_bound(std::fmax(std::fabs(a), std::fabs(b)), rs * 1.0001, steps));
    }
  }
  return st;
}

}  // namespace blockfuse::testing
