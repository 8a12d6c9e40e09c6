// CPU tests of the shared comparison (src/testing/compare.h) that every GPU test and benchmark
// relies on: a comparison that accepted a wrong result would silently turn those checks off, so each
// rule is tested both ways (accepted at the bound, rejected just past it), with NaN, Inf and
// saturation, on hand-picked values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/fp8_host.h"
#include "testing/compare.h"

namespace blockfuse::testing {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

TEST(Compare, ToleranceTableIsUnitRoundoffTimesRoundings) {
  EXPECT_EQ(unit_roundoff(Precision::kBF16), std::ldexp(1.0, -8));
  EXPECT_EQ(unit_roundoff(Precision::kFP16), std::ldexp(1.0, -11));
  EXPECT_EQ(unit_roundoff(Precision::kFP8E4M3), std::ldexp(1.0, -4));
  EXPECT_EQ(unit_roundoff(DType::kBF16), std::ldexp(1.0, -8));
  const Tolerance t = tolerance(DType::kFP16, 2, 1e-7);
  EXPECT_EQ(t.rtol, std::ldexp(1.0, -10));
  EXPECT_EQ(t.atol, 1e-7);
  EXPECT_EQ(t.bound(-4.0), 1e-7 + 4 * std::ldexp(1.0, -10));
}

TEST(Compare, HostElementwiseBoundNanAndInf) {
  const Tolerance tol{0.5, 0};
  const std::vector<double> ref = {1, 2, kNaN, -kInf, 3};
  {  // within the bound (at it exactly), NaN for NaN, the same infinity
    const std::vector<double> got = {1.5, 2, kNaN, -kInf, 2.5};
    const CompareStats st = compare_host(1, 5, [&](int64_t, int64_t c) { return got[size_t(c)]; },
                                         [&](int64_t, int64_t c) { return ref[size_t(c)]; }, tol);
    EXPECT_TRUE(st.ok(1.0)) << st.summary();
    EXPECT_EQ(st.count, 5);
    EXPECT_EQ(st.max_abs_diff, 0.5);
  }
  {  // past the bound
    const std::vector<double> got = {1.5000001, 2, kNaN, -kInf, 3};
    const CompareStats st = compare_host(1, 5, [&](int64_t, int64_t c) { return got[size_t(c)]; },
                                         [&](int64_t, int64_t c) { return ref[size_t(c)]; }, tol);
    EXPECT_EQ(st.violations, 1);
    EXPECT_EQ(st.first_bad_col, 0);
    EXPECT_FALSE(st.ok(1.0));
  }
  {  // a finite value where NaN is expected, the other infinity, NaN (poison) where a value is expected
    const std::vector<double> got = {1, 2, 0, kInf, kNaN};
    const CompareStats st = compare_host(1, 5, [&](int64_t, int64_t c) { return got[size_t(c)]; },
                                         [&](int64_t, int64_t c) { return ref[size_t(c)]; }, tol);
    EXPECT_EQ(st.violations, 2);
    EXPECT_EQ(st.nonfinite, 1);
    EXPECT_EQ(st.first_bad_col, 2);
  }
}

TEST(Compare, RelL2CatchesASystematicErrorInsideTheBand) {
  // Every element 0.9 % high: inside a 1 % per-element band, but rel_l2 0.009 > 0.005.
  const CompareStats st = compare_host(4, 8, [](int64_t r, int64_t c) { return 1.009 * double(r + c + 1); },
                                       [](int64_t r, int64_t c) { return double(r + c + 1); }, Tolerance{0, 0.01});
  EXPECT_EQ(st.violations, 0);
  EXPECT_NEAR(st.rel_l2(), 0.009, 1e-12);
  EXPECT_TRUE(st.ok(0.01));
  EXPECT_FALSE(st.ok(0.005));
}

TEST(Compare, ScalesRelativeAndReferenceMustBeValid) {
  const std::vector<float> ref = {1.0f, 0.5f, 2.0f};
  {
    const std::vector<float> got = {1.0f, 0.5f * (1 + 0.5e-5f), 2.0f * (1 - 0.5e-5f)};
    const CompareStats st = compare_scales(3, got.data(), ref.data(), 1e-5);
    EXPECT_TRUE(st.ok(1e-5)) << st.summary();
  }
  {
    const std::vector<float> got = {1.0f, 0.5f * (1 + 2e-5f), std::nanf("")};
    const CompareStats st = compare_scales(3, got.data(), ref.data(), 1e-5);
    EXPECT_EQ(st.violations, 1);
    EXPECT_EQ(st.nonfinite, 1);
    EXPECT_EQ(st.first_bad_row, 1);
  }
  {  // a NaN, zero or negative reference scale fails even when the result matches it
    const std::vector<float> bad_ref = {std::nanf(""), 0.0f, -1.0f};
    const CompareStats st = compare_scales(3, bad_ref.data(), bad_ref.data(), 1e-5);
    EXPECT_EQ(st.count, 3);
    EXPECT_EQ(st.violations, 3);
    EXPECT_FALSE(st.ok(kInf));
  }
}

TEST(Compare, E4m3DequantAndStep) {
  EXPECT_EQ(e4m3_dequant(0x38, 0.5), 0.5);                          // 1.0 · 0.5
  EXPECT_EQ(e4m3_dequant(0x7e, 2.0), 896.0);                        // 448 · 2
  EXPECT_EQ(e4m3_dequant(0x81, 1.0), -std::ldexp(1.0, -9));         // smallest negative subnormal
  EXPECT_TRUE(std::isnan(e4m3_dequant(0x7f, 1.0)));
  EXPECT_TRUE(std::isnan(e4m3_dequant(0xff, 1.0)));
  EXPECT_EQ(e4m3_step_bound(-16.0, 1.0), 2.0 + std::ldexp(1.0, -9));  // one step at 16 is 2
  EXPECT_EQ(e4m3_step_bound(0.0, 4.0, 2), 2 * std::ldexp(4.0, -9));
  // One step bounds the distance to either neighbouring code, for every finite positive code.
  for (int q = 1; q < 0x7e; ++q) {
    const double v = e4m3_dequant(uint8_t(q), 1.0), next = e4m3_dequant(uint8_t(q + 1), 1.0);
    EXPECT_LE(next - v, e4m3_step_bound(v, 1.0)) << q;
    EXPECT_LE(next - v, e4m3_step_bound(next, 1.0)) << q;
  }
}

TEST(Compare, E4m3AgainstUnroundedReference) {
  const double s = 0.25;
  // Reference values, their nearest codes with scale s, and the saturation at 448·s = 112.
  const std::vector<double> ref = {1.0, -3.3, 0.001, 500.0, kNaN, -1e9};
  std::vector<uint8_t> q(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) q[i] = host::fp8_quantize(float(ref[i]), float(s));
  const auto refv = [&](int64_t, int64_t c) { return ref[size_t(c)]; };
  const auto scale = [&](int64_t) { return s; };
  {
    const CompareStats st = compare_e4m3_host(1, int64_t(ref.size()), q.data(), 0, scale, refv);
    EXPECT_EQ(st.violations + st.nonfinite, 0) << st.summary();
    EXPECT_LE(st.rel_l2(), unit_roundoff(Precision::kFP8E4M3)) << st.summary();
  }
  {  // one code up (a tie resolved the other way) still passes; two codes up does not
    std::vector<uint8_t> q1 = q, q2 = q;
    q1[0] += 1;
    q2[0] += 2;
    EXPECT_EQ(compare_e4m3_host(1, 6, q1.data(), 0, scale, refv).violations, 0);
    const CompareStats st = compare_e4m3_host(1, 6, q2.data(), 0, scale, refv);
    EXPECT_EQ(st.violations, 1);
    EXPECT_EQ(st.first_bad_col, 0);
  }
  {  // a NaN code for a value, a value for NaN, the wrong saturation sign
    std::vector<uint8_t> b = q;
    b[1] = 0x7f;
    b[4] = 0x38;
    b[5] = 0x7e;
    const CompareStats st = compare_e4m3_host(1, 6, b.data(), 0, scale, refv);
    EXPECT_EQ(st.nonfinite, 1);
    EXPECT_EQ(st.violations, 2);
  }
  {  // a wrong scale (2x) shows though the codes are right (not near zero, nor where saturated)
    const CompareStats st = compare_e4m3_host(1, 6, q.data(), 0, [](int64_t) { return 0.5; }, refv);
    EXPECT_EQ(st.violations, 2);
  }
}

TEST(Compare, E4m3CodesAgainstReferenceCodes) {
  // Two rows of four codes (row stride 5), per-row scales.
  const std::vector<uint8_t> ref = {0x38, 0x40, 0x01, 0x7f, 0xAA, 0xb8, 0x7e, 0x00, 0x20, 0xAA};
  const std::vector<float> rs = {0.5f, 2.0f};
  const auto ref_scale = [&](int64_t r) { return rs[size_t(r)]; };
  {  // the same codes with scales 1e-5 off; the neighbouring code in two places
    std::vector<uint8_t> got = ref;
    got[0] = 0x39;
    got[6] = 0x7d;
    const CompareStats st = compare_e4m3_codes_host(2, 4, got.data(), 5, [&](int64_t r) { return rs[size_t(r)] * (1 + 1e-5); },
                                                    ref.data(), 5, ref_scale);
    EXPECT_EQ(st.violations + st.nonfinite, 0) << st.summary();
    EXPECT_EQ(st.count, 8);
  }
  {  // two codes away; a NaN code missing; a NaN code extra
    std::vector<uint8_t> got = ref;
    got[1] = 0x42;
    got[3] = 0x38;
    got[8] = 0xff;
    const CompareStats st = compare_e4m3_codes_host(2, 4, got.data(), 5, ref_scale, ref.data(), 5, ref_scale);
    EXPECT_EQ(st.violations, 2);
    EXPECT_EQ(st.nonfinite, 1);
    EXPECT_EQ(st.first_bad_col, 1);
  }
}

}  // namespace
}  // namespace blockfuse::testing
