// The host e4m3 conversion (common/fp8_host.h) that every FP8 reference relies on: every finite code
// round-trips, midpoints between neighbouring codes round to the even code, saturation, subnormals,
// NaN; and the quantisation rule of blockfuse/fp8.h (non-finite -> NaN, clamp, dynamic scale).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/fp8_host.h"

namespace blockfuse {
namespace {

using host::float_to_fp8_e4m3;
using host::fp8_e4m3_to_float;

bool is_nan_code(uint8_t b) { return (b & 0x7f) == 0x7f; }

TEST(Fp8Host, HandCases) {
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xff)));
  EXPECT_EQ(float_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(449.0f), 0x7e);    // saturates, no Inf in e4m3
  EXPECT_EQ(float_to_fp8_e4m3(1e30f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(1e-9f), 0x00);     // underflows to +0
  EXPECT_EQ(float_to_fp8_e4m3(-1e-9f), 0x80);    // -0 keeps its sign
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);        // half the smallest subnormal: to even (0)
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);        // 1.5 subnormal steps: to even (2)
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);   // halfway 1 and 1.125: to even (1.0)
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3a);   // halfway 1.125 and 1.25: to even (1.25)
  EXPECT_EQ(float_to_fp8_e4m3(1.9f), 0x3f);      // nearer 1.875 than 2 (midpoint 1.9375)
  EXPECT_EQ(float_to_fp8_e4m3(1.97f), 0x40);     // rounds up into the next binade: 2.0
  EXPECT_TRUE(is_nan_code(float_to_fp8_e4m3(std::nanf(""))));
}

TEST(Fp8Host, EveryFiniteCodeRoundTripsAndMidpointsRoundToEven) {
  int checked = 0;
  for (int b = 0; b < 256; ++b) {
    const uint8_t code = static_cast<uint8_t>(b);
    if (is_nan_code(code)) continue;
    const float v = fp8_e4m3_to_float(code);
    EXPECT_EQ(float_to_fp8_e4m3(v), code) << "code " << b << " value " << v;
    // The midpoint to the next larger magnitude rounds to whichever of the two codes is even.
    if ((code & 0x7f) < 0x7e) {
      const uint8_t next = static_cast<uint8_t>(code + 1);
      const float mid = 0.5f * (v + fp8_e4m3_to_float(next));
      const uint8_t even = (code & 1) ? next : code;
      EXPECT_EQ(float_to_fp8_e4m3(mid), even) << "midpoint after code " << b;
      // Just off the midpoint goes to the nearer code.
      EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, 0.0f)), code) << "below midpoint after code " << b;
      EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, v < 0 || (code & 0x80) ? -1e9f : 1e9f)), next)
          << "above midpoint after code " << b;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 254);  // 256 codes minus the two NaNs
}

TEST(Fp8Host, QuantiseRule) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(host::fp8_quantize(2.0f, 0.5f), float_to_fp8_e4m3(4.0f));
  EXPECT_EQ(host::fp8_quantize(1000.0f, 1.0f), 0x7e);   // clamped, finite stays finite
  EXPECT_EQ(host::fp8_quantize(-1000.0f, 1.0f), 0xfe);
  EXPECT_EQ(host::fp8_quantize(1.0f, 1e-40f), 0x7e);    // quotient overflows to Inf: still clamped
  EXPECT_TRUE(is_nan_code(host::fp8_quantize(inf, 1.0f)));   // e4m3 has no Inf: NaN, never 448
  EXPECT_TRUE(is_nan_code(host::fp8_quantize(-inf, 1.0f)));
  EXPECT_TRUE(is_nan_code(host::fp8_quantize(std::nanf(""), 1.0f)));
  EXPECT_TRUE(is_nan_code(host::fp8_quantize(1.0f, std::nanf(""))));  // a NaN scale is not hidden
  EXPECT_EQ(host::fp8_dynamic_scale(0.0f), 1.0f);
  EXPECT_EQ(host::fp8_dynamic_scale(896.0f), 2.0f);
  // The row maximum quantises to exactly 448 with its dynamic scale.
  for (float amax : {0.001f, 0.37f, 3.0f, 1234.5f}) {
    EXPECT_EQ(host::fp8_quantize(amax, host::fp8_dynamic_scale(amax)), 0x7e) << amax;
    EXPECT_EQ(host::fp8_quantize(-amax, host::fp8_dynamic_scale(amax)), 0xfe) << amax;
  }
}

}  // namespace
}  // namespace blockfuse
