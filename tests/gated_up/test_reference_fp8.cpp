// The FP8 gated-up CPU reference (src/gated_up/reference_fp8.cpp) against values computed by hand,
// for every scale mode and both activations, and its argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/fp8_host.h"
#include "gated_up/reference_fp8.h"

namespace blockfuse {
namespace {

// e4m3 bytes: 1.0 = 0x38, 2.0 = 0x40, 0.5 = 0x30, -1.0 = 0xb8, 3.0 = 0x44.
TEST(GatedUpFp8Reference, HandComputed) {
  ASSERT_EQ(host::fp8_e4m3_to_float(0x38), 1.0f);
  ASSERT_EQ(host::fp8_e4m3_to_float(0x44), 3.0f);
  // M = 2, K = 2, U = 1. x rows [1, 2] and [2, 1]; w: up_0 = [0.5, 1], gate_0 = [1, -1].
  const uint8_t x[] = {0x38, 0x40, 0x40, 0x38};
  const uint8_t w[] = {0x30, 0x38, 0x38, 0xb8};
  const float sx_rows[] = {2.0f, 0.25f}, sx_tensor[] = {2.0f};
  const float sw_ch[] = {0.5f, 3.0f}, sw_tensor[] = {0.5f};
  // C: row 0 up 2.5, gate -1; row 1 up 2, gate 1.
  const double c_up[] = {2.5, 2.0}, c_gate[] = {-1.0, 1.0};
  auto silu = [](double g) { return g / (1 + std::exp(-g)); };
  auto gelu = [](double g) { return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))); };
  for (bool xr : {false, true})
    for (bool wc : {false, true})
      for (Activation act : {Activation::kSiLU, Activation::kGeluTanh}) {
        GatedUpFp8HostProblem p{x, w, 2, 2, 1, 2, 2, xr ? sx_rows : sx_tensor, wc ? sw_ch : sw_tensor, xr, wc, act};
        float out[2] = {NAN, NAN};
        gated_up_fp8_reference_host_f32(p, out, 1);
        for (int m = 0; m < 2; ++m) {
          const double sx = xr ? sx_rows[m] : sx_tensor[0];
          const double up = c_up[m] * sx * (wc ? sw_ch[0] : sw_tensor[0]);
          const double g = c_gate[m] * sx * (wc ? sw_ch[1] : sw_tensor[0]);
          const double want = (act == Activation::kSiLU ? silu(g) : gelu(g)) * up;
          EXPECT_NEAR(out[m], want, 1e-6 * std::fabs(want) + 1e-12)
              << "row " << m << " x_per_row " << xr << " w_per_channel " << wc << " " << activation_name(act);
        }
      }
}

TEST(GatedUpFp8Reference, RejectsBadArguments) {
  const uint8_t x[4] = {}, w[4] = {};
  const float s[2] = {1, 1};
  float out[2];
  GatedUpFp8HostProblem p{x, w, 2, 2, 1, 2, 2, s, s, false, false, Activation::kSiLU};
  { auto q = p; q.act = static_cast<Activation>(9); EXPECT_THROW(gated_up_fp8_reference_host_f32(q, out, 1), Error); }
  { auto q = p; q.ldx = 1; EXPECT_THROW(gated_up_fp8_reference_host_f32(q, out, 1), Error); }
  { auto q = p; q.w_scale = nullptr; EXPECT_THROW(gated_up_fp8_reference_host_f32(q, out, 1), Error); }
  EXPECT_THROW(gated_up_fp8_reference_host_f32(p, out, 0), Error);
  EXPECT_NO_THROW(gated_up_fp8_reference_host_f32(p, out, 1));
}

}  // namespace
}  // namespace blockfuse
