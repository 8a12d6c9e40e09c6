// The CPU reference of add_rmsnorm (src/add_rmsnorm/reference.h) against hand-computed rows, and
// its FP8 e4m3 conversion against hand cases: the GPU tests trust this reference, so it is checked
// here on values whose results are known exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "add_rmsnorm/reference.h"
#include "common/host_float.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

std::vector<uint16_t> bits(DType t, const std::vector<float>& v) {
  std::vector<uint16_t> b;
  for (float f : v) b.push_back(host::from_float(t, f));
  return b;
}

class AddRmsNormReference : public ::testing::TestWithParam<DType> {};

// r = x + residual = ±5 alternating: mean(r²) = 25, so v = r / sqrt(25 + eps) · w = ±w (to 1e-7).
TEST_P(AddRmsNormReference, HandRowWithResidual) {
  const DType t = GetParam();
  const auto x = bits(t, {2, -2, 2, -2, 2, -2, 2, -2});
  const auto res = bits(t, {3, -3, 3, -3, 3, -3, 3, -3});
  const auto w = bits(t, {1, 0.5f, 2, -1, 0.25f, 4, 1.5f, -0.5f});
  std::vector<uint16_t> r(8);
  std::vector<double> v(8);
  reference::add_rmsnorm(t, 1, 8, x.data(), 8, res.data(), 8, w.data(), 1e-6, false, r.data(), v.data());
  const double expect_v[8] = {1, -0.5, 2, 1, 0.25, -4, 1.5, 0.5};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(host::to_float(t, r[size_t(i)]), i % 2 ? -5.0f : 5.0f) << i;
    EXPECT_NEAR(v[size_t(i)], expect_v[i], 1e-7 * std::fabs(expect_v[i])) << i;
    EXPECT_EQ(host::to_float(t, reference::round_to_dtype(t, v[size_t(i)])), float(expect_v[i])) << i;
  }
}

// Gemma: the gain is 1 + w (w = 0 is the identity gain).
TEST_P(AddRmsNormReference, GemmaOnePlusW) {
  const DType t = GetParam();
  const auto x = bits(t, {5, -5, 5, -5, 5, -5, 5, -5});
  const auto w = bits(t, {0, -0.5f, 1, -2, -0.75f, 3, 0.5f, -1.5f});
  std::vector<uint16_t> r(8);
  std::vector<double> v(8);
  reference::add_rmsnorm(t, 1, 8, x.data(), 8, nullptr, 0, w.data(), 1e-6, true, r.data(), v.data());
  const double expect_v[8] = {1, -0.5, 2, 1, 0.25, -4, 1.5, 0.5};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(v[size_t(i)], expect_v[i], 1e-7 * std::fabs(expect_v[i])) << i;
}

// Residual absent: r = x exactly; eps matters when the row is small (mean 1e-6 + eps 1e-6 halves
// the scale squared: v = r / sqrt(2e-6)).
TEST_P(AddRmsNormReference, NoResidualAndEps) {
  const DType t = GetParam();
  std::vector<float> xv(8, 0.0f);
  xv[0] = std::sqrt(8e-6f);  // mean(r²) = r0² / 8 = 1e-6 (up to the rounding of r0)
  const auto x = bits(t, xv);
  const auto w = bits(t, std::vector<float>(8, 1.0f));
  std::vector<uint16_t> r(8);
  std::vector<double> v(8);
  reference::add_rmsnorm(t, 1, 8, x.data(), 8, nullptr, 0, w.data(), 1e-6, false, r.data(), v.data());
  EXPECT_EQ(r, x);
  const double r0 = host::to_float(t, x[0]);
  EXPECT_NEAR(v[0], r0 / std::sqrt(r0 * r0 / 8 + 1e-6), 1e-12);
  EXPECT_NEAR(v[0], r0 / std::sqrt(2e-6), 0.02 * r0 / std::sqrt(2e-6));
  for (int i = 1; i < 8; ++i) EXPECT_EQ(v[size_t(i)], 0.0);
}

// The norm is computed from the *rounded* residual_out: in bf16, 1 + 2^-8 is a tie that rounds to
// 1 (even), so r = [1, 2, ..., 2] and v0 = 1 / sqrt(29/8 + eps), not 1.0039 / sqrt(...).
TEST(AddRmsNormReferenceRounding, NormOfRoundedResidual) {
  const DType t = DType::kBF16;
  const auto x = bits(t, {1, 1, 1, 1, 1, 1, 1, 1});
  const auto res = bits(t, {1.0f / 256, 1, 1, 1, 1, 1, 1, 1});
  const auto w = bits(t, std::vector<float>(8, 1.0f));
  std::vector<uint16_t> r(8);
  std::vector<double> v(8);
  reference::add_rmsnorm(t, 1, 8, x.data(), 8, res.data(), 8, w.data(), 1e-6, false, r.data(), v.data());
  EXPECT_EQ(host::to_float(t, r[0]), 1.0f);
  EXPECT_EQ(host::to_float(t, r[1]), 2.0f);
  EXPECT_NEAR(v[0], 1.0 / std::sqrt(29.0 / 8 + 1e-6), 1e-12);
  EXPECT_NEAR(v[1], 2.0 / std::sqrt(29.0 / 8 + 1e-6), 1e-12);
}

// Row strides, several rows, and non-finite rows: a NaN makes its whole row NaN; an Inf makes the
// mean Inf, so the Inf element gives NaN (Inf · 0) and the others 0; the other rows are unaffected.
TEST_P(AddRmsNormReference, StridesAndNonFiniteRows) {
  const DType t = GetParam();
  const int64_t H = 8, ld = 16;
  std::vector<uint16_t> x(3 * ld, 0xABCD), res(3 * ld, 0xABCD);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t m = 0; m < 3; ++m)
    for (int64_t i = 0; i < H; ++i) {
      x[size_t(m * ld + i)] = host::from_float(t, i % 2 ? -2.0f : 2.0f);
      res[size_t(m * ld + i)] = host::from_float(t, i % 2 ? -3.0f : 3.0f);
    }
  x[size_t(1 * ld + 3)] = host::from_float(t, nan);
  res[size_t(2 * ld + 5)] = host::from_float(t, inf);
  const auto w = bits(t, std::vector<float>(8, 2.0f));
  std::vector<uint16_t> r(3 * H);
  std::vector<double> v(3 * H);
  reference::add_rmsnorm(t, 3, H, x.data(), ld, res.data(), ld, w.data(), 1e-6, false, r.data(), v.data());
  for (int64_t i = 0; i < H; ++i) {
    EXPECT_NEAR(v[size_t(i)], i % 2 ? -2.0 : 2.0, 1e-6) << i;
    EXPECT_TRUE(std::isnan(v[size_t(H + i)])) << i;
    if (i == 5) {
      EXPECT_TRUE(std::isnan(v[size_t(2 * H + i)]));
      EXPECT_TRUE(std::isinf(host::to_float(t, r[size_t(2 * H + i)])));
    } else {
      EXPECT_EQ(std::fabs(v[size_t(2 * H + i)]), 0.0) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothDtypes, AddRmsNormReference, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

TEST(AddRmsNormReferenceFp8, HandConversions) {
  using reference::e4m3_from_double;
  EXPECT_EQ(e4m3_from_double(448), 0x7e);
  EXPECT_EQ(e4m3_from_double(449), 0x7e);   // saturates
  EXPECT_EQ(e4m3_from_double(1e9), 0x7e);
  EXPECT_EQ(e4m3_from_double(-1e9), 0xfe);
  EXPECT_EQ(e4m3_from_double(std::numeric_limits<double>::infinity()), 0x7e);  // SATFINITE
  EXPECT_EQ(e4m3_from_double(std::nan("")) & 0x7f, 0x7f);
  EXPECT_EQ(e4m3_from_double(1.0), 0x38);
  EXPECT_EQ(e4m3_from_double(-2.0), 0xc0);
  EXPECT_EQ(e4m3_from_double(240), 0x77);
  EXPECT_EQ(e4m3_from_double(416), 0x7d);
  EXPECT_EQ(e4m3_from_double(1.0625), 0x38);  // tie 1 | 1.125 -> even (1)
  EXPECT_EQ(e4m3_from_double(1.1875), 0x3a);  // tie 1.125 | 1.25 -> even (1.25)
  EXPECT_EQ(e4m3_from_double(168), 0x72);     // 1.3125·128: tie -> 1.25·128 = 160
  EXPECT_EQ(e4m3_from_double(1e-9), 0x00);
  EXPECT_EQ(e4m3_from_double(-1e-9), 0x80);
  EXPECT_EQ(e4m3_from_double(std::ldexp(1.0, -9)), 0x01);       // smallest subnormal
  EXPECT_EQ(e4m3_from_double(std::ldexp(1.0, -10)), 0x00);      // tie 0 | 2^-9 -> even (0)
  EXPECT_EQ(e4m3_from_double(3 * std::ldexp(1.0, -10)), 0x02);  // tie 2^-9 | 2^-8 -> even
  EXPECT_EQ(e4m3_from_double(std::ldexp(1.0, -6)), 0x08);       // smallest normal
  EXPECT_EQ(e4m3_from_double(7.5 * std::ldexp(1.0, -9)), 0x08); // subnormal tie rounds up to normal
  EXPECT_EQ(reference::e4m3_to_double(0x7e), 448.0);
  EXPECT_EQ(reference::e4m3_to_double(0x01), std::ldexp(1.0, -9));
  EXPECT_TRUE(std::isnan(reference::e4m3_to_double(0x7f)));
  EXPECT_TRUE(std::isnan(reference::e4m3_to_double(0xff)));
  // Every finite code decodes and re-encodes to itself.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    EXPECT_EQ(e4m3_from_double(reference::e4m3_to_double(uint8_t(b))), b) << "code " << b;
  }
}

TEST(AddRmsNormReferenceFp8, DynamicScale) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const double v[5] = {1, -896, nan, inf, 3};
  EXPECT_EQ(reference::e4m3_dynamic_scale(v, 5), 2.0f);  // amax over finite values: 896 / 448
  const double zeros[3] = {0, -0.0, 0};
  EXPECT_EQ(reference::e4m3_dynamic_scale(zeros, 3), 1.0f);
  const double bad[2] = {nan, -inf};
  EXPECT_EQ(reference::e4m3_dynamic_scale(bad, 2), 1.0f);
  // The hand row of HandRowWithResidual: amax 4 -> scale 4/448 = 1/112, q = v · 112.
  const double row[8] = {1, -0.5, 2, 1, 0.25, -4, 1.5, 0.5};
  const float s = reference::e4m3_dynamic_scale(row, 8);
  EXPECT_FLOAT_EQ(s, 4.0f / 448.0f);
  EXPECT_EQ(reference::e4m3_from_double(row[5] / s), 0xfe);   // -448
  EXPECT_EQ(reference::e4m3_from_double(row[0] / s), 0x6e);   // 112 = 1.75·64
  EXPECT_EQ(reference::e4m3_from_double(row[4] / s), 0x5e);   // 28 = 1.75·16
}

}  // namespace
}  // namespace blockfuse
