// The CPU reference of gated_up (src/gated_up/reference.cpp) against a naive fp64 version, and the
// interleaving convention end to end (separate gate/up -> interleave -> reference == definition).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "blockfuse/weight_layout.h"
#include "gated_up/reference.h"
#include "support/test_util.h"

namespace blockfuse {
namespace {

using test::HostMatrix;

double act64(Activation a, double g) {
  if (a == Activation::kSiLU) return g / (1.0 + std::exp(-g));
  return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
}

// fp64 definition from separate gate/up weights: h = act(x·gateᵀ) · (x·upᵀ).
std::vector<double> naive(const HostMatrix& x, const HostMatrix& gate, const HostMatrix& up, Activation a,
                          std::vector<double>* scale) {
  const int64_t M = x.rows, K = x.cols, U = gate.rows;
  std::vector<double> h(size_t(M * U));
  scale->assign(size_t(M * U), 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < U; ++j) {
      double g = 0, u = 0, ag = 0, au = 0;
      for (int64_t k = 0; k < K; ++k) {
        g += double(x.at(m, k)) * gate.at(j, k);
        u += double(x.at(m, k)) * up.at(j, k);
        ag += std::fabs(double(x.at(m, k)) * gate.at(j, k));
        au += std::fabs(double(x.at(m, k)) * up.at(j, k));
      }
      h[size_t(m * U + j)] = act64(a, g) * u;
      // Bound on the fp32 accumulation error's effect: |act'(g)|·Δg·|u| + |act(g)|·Δu, with
      // Δ ≈ K·2^-24·Σ|terms| and |act'| <= 1.2 for both activations.
      const double eps = double(K) * std::ldexp(1.0, -24);
      (*scale)[size_t(m * U + j)] = 1.2 * eps * ag * std::fabs(u) + std::fabs(act64(a, g)) * eps * au + 1e-30;
    }
  return h;
}

struct Case {
  int64_t M, K, U;
};

class ReferenceVsFp64 : public ::testing::TestWithParam<std::tuple<DType, Activation>> {};

TEST_P(ReferenceVsFp64, RandomShapes) {
  const auto [dt, act] = GetParam();
  std::mt19937_64 rng(test::fresh_seed());
  for (Case c : {Case{1, 8, 8}, Case{7, 24, 24}, Case{33, 136, 200}, Case{5, 1000, 8}, Case{3, 64, 1000}}) {
    HostMatrix x(dt, c.M, c.K, c.K + 8), gate(dt, c.U, c.K), up(dt, c.U, c.K), w(dt, 2 * c.U, c.K);
    x.fill_uniform(rng, -2.f, 2.f);
    gate.fill_uniform(rng, -1.f, 1.f);
    up.fill_uniform(rng, -1.f, 1.f);
    interleave_gate_up_host(gate.view(), up.view(), w.view());
    HostMatrix out(dt, c.M, c.U, c.U + 16);
    out.poison();
    gated_up_reference_host(x.view(), w.view(), out.view(), act);
    std::vector<float> f32(size_t(c.M * c.U));
    gated_up_reference_host_f32(x.view(), w.view(), f32.data(), c.U, act);
    std::vector<double> acc;
    const auto ref = naive(x, gate, up, act, &acc);
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t j = 0; j < c.U; ++j) {
        const double r = ref[size_t(m * c.U + j)], e = acc[size_t(m * c.U + j)];
        const double got = out.at(m, j), got32 = f32[size_t(m * c.U + j)];
        ASSERT_TRUE(std::isfinite(got)) << "unwritten output at " << m << "," << j;
        // Unrounded fp32: only the accumulation error (plus fp32 evaluation of act·up).
        ASSERT_NEAR(got32, r, 2 * e + 4e-7 * std::fabs(r)) << "f32 M=" << c.M << " K=" << c.K << " U=" << c.U << " at " << m << "," << j;
        // Rounded: at most one rounding of the output dtype on top.
        ASSERT_NEAR(got, r, test::unit_roundoff(dt) * std::fabs(r) + 2 * e + 1e-6 * std::fabs(r))
            << dtype_name(dt) << " M=" << c.M << " K=" << c.K << " U=" << c.U << " at " << m << "," << j;
      }
    // The padding of `out` beyond U is untouched.
    for (int64_t m = 0; m < c.M; ++m) ASSERT_EQ(out.bits[size_t(m * out.ld + c.U)], 0xABCD);
  }
}

INSTANTIATE_TEST_SUITE_P(All, ReferenceVsFp64,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kFP16),
                                            ::testing::Values(Activation::kSiLU, Activation::kGeluTanh)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" + activation_name(std::get<1>(info.param));
                         });

// A hand-checkable case: K = 8, a single output, exact in bf16.
TEST(Reference, HandComputedSwiGLU) {
  HostMatrix x(DType::kBF16, 1, 8), w(DType::kBF16, 2, 8), out(DType::kBF16, 1, 1);
  for (int k = 0; k < 8; ++k) {
    x.set(0, k, 1.0f);
    w.set(0, k, 0.25f);   // up row: x·up = 2
    w.set(1, k, 0.125f);  // gate row: x·gate = 1
  }
  gated_up_reference_host(x.view(), w.view(), out.view(), Activation::kSiLU);
  const double expect = 1.0 / (1.0 + std::exp(-1.0)) * 2.0;  // silu(1) * 2 = 1.4621...
  EXPECT_NEAR(out.at(0, 0), expect, expect / 256);
  const double swapped = 2.0 / (1.0 + std::exp(-2.0)) * 1.0;  // silu(2) * 1 = 1.7616: gate/up swapped
  EXPECT_GT(std::fabs(out.at(0, 0) - swapped), 0.1) << "odd rows must be the gate, even rows the up projection";
}

TEST(Reference, RejectsMismatchedShapes) {
  HostMatrix x(DType::kBF16, 2, 8), w(DType::kBF16, 6, 8), out(DType::kBF16, 2, 4);
  EXPECT_THROW(gated_up_reference_host(x.view(), w.view(), out.view(), Activation::kSiLU), Error);
}

}  // namespace
}  // namespace blockfuse
