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

}  // namespace blockfuse::testing
