// The CPU reference of gated_up (src/gated_up/reference.cpp) against a naive fp64 version written
// here, and the interleaving convention end to end (separate gate/up -> interleave -> reference ==
// act(x·gateᵀ) ⊙ (x·upᵀ)).
//
// The bounds are derived, not tuned. With bf16/fp16 inputs every product x·w is exact in fp32
// (8+8 or 11+11 significant bits <= 24), so the fp32 sums differ from the exact ones by at most
// Δ = K·2^-24·Σ|x·w| (recursive summation). The activations' slopes are below 1.2 (silu' <= 1.10,
// gelu_tanh' <= 1.13), and their fp32 evaluation adds a few ulps. The f32 variant must stay
// within that accumulation/evaluation bound E; the rounded output within E plus one rounding to
// the output dtype (unit roundoff 2^-8 bf16, 2^-11 fp16, plus half the fp16 subnormal step), and it
// must be exactly the rounding of the f32 variant ("one rounding").
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/activation.cuh"
#include "blockfuse/weight_layout.h"
#include "common/host_float.h"
#include "gated_up/reference.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;

constexpr double kU32 = 1.0 / (1 << 24);  // fp32 unit roundoff

// The fp64 definition from separate gate/up weights, and the bound E on |fp32 result - it|.
struct Naive {
  std::vector<double> h, bound;
};
Naive naive(const HostMatrix& x, const HostMatrix& gate, const HostMatrix& up, Activation a) {
  const int64_t M = x.rows, K = x.cols, U = gate.rows;
  Naive r;
  r.h.resize(size_t(M * U));
  r.bound.resize(size_t(M * U));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < U; ++j) {
      double g = 0, u = 0, sg = 0, su = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double xv = x.at(m, k), gv = gate.at(j, k), uv = up.at(j, k);
        g += xv * gv;
        u += xv * uv;
        sg += std::fabs(xv * gv);
        su += std::fabs(xv * uv);
      }
      const double ag = act_f64(a, g), h = ag * u;
      const double dg = double(K) * kU32 * sg, du = double(K) * kU32 * su;  // fp32 accumulation
      // |act32(g32) - act(g)|: the slope times dg, plus the fp32 evaluation (expf/tanhf, a divide or
      // 1 + tanh whose absolute error is ~u·|g| where it cancels).
      const double da = 1.2 * dg + 8 * kU32 * (std::fabs(ag) + 1.2 * dg) + 4 * kU32 * (std::fabs(g) + dg);
      // (a + εa)(u + εu) - a·u, plus the final fp32 product's rounding; doubled for the neglected
      // second-order terms.
      const double e = da * (std::fabs(u) + du) + std::fabs(ag) * du + 2 * kU32 * std::fabs(h);
      r.h[size_t(m * U + j)] = h;
      r.bound[size_t(m * U + j)] = 2 * e;
    }
  return r;
}

// Half the spacing of the smallest (subnormal) values: the absolute part of one rounding.
double subnormal_half_step(DType t) { return t == DType::kBF16 ? std::ldexp(1.0, -134) : std::ldexp(1.0, -25); }

struct Shape {
  int64_t M, K, U;
};

// Runs both references on fresh random data and checks them against the fp64 definition.
// `x_scale` sets |x|; w is scaled by 1/sqrt(K) so the sums stay O(x_scale) as in a real layer.
void check_against_fp64(DType dt, Activation act, Shape s, float x_scale, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << activation_name(act) << " M=" << s.M << " K=" << s.K
                                    << " U=" << s.U << " x_scale=" << x_scale);
  const float w_scale = 2.0f / std::sqrt(float(s.K));
  // Row strides larger than the rows (x, w's parts, out, f32 out) so a stride bug reads the
  // sentinel/NaN padding instead of the next row.
  HostMatrix x(dt, s.M, s.K, s.K + 8), gate(dt, s.U, s.K, s.K + 3), up(dt, s.U, s.K), w(dt, 2 * s.U, s.K, s.K + 16);
  x.fill_uniform(rng, -x_scale, x_scale);
  gate.fill_uniform(rng, -w_scale, w_scale);
  up.fill_uniform(rng, -w_scale, w_scale);
  interleave_gate_up_host(gate.view(), up.view(), w.view());
  HostMatrix out(dt, s.M, s.U, s.U + 16);
  out.poison();
  const int64_t ldo = s.U + 5;
  std::vector<float> f32(size_t(s.M * ldo), std::nanf(""));
  gated_up_reference_host(x.view(), w.view(), out.view(), act);
  gated_up_reference_host_f32(x.view(), w.view(), f32.data(), ldo, act);

  const Naive ref = naive(x, gate, up, act);
  // The f32 result within the bound E of the fp64 definition; the rounded one within E plus one
  // rounding of |h| + E (and half the subnormal spacing); and that rounding is round(f32).
  testing::CompareStats st32, st;
  int64_t not_one_rounding = 0;
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t j = 0; j < s.U; ++j) {
      const double h = ref.h[size_t(m * s.U + j)], e = ref.bound[size_t(m * s.U + j)];
      const float got32 = f32[size_t(m * ldo + j)];
      st32.add(m, j, got32, h, e);
      st.add(m, j, out.at(m, j), h, e + testing::unit_roundoff(dt) * (std::fabs(h) + e) + subnormal_half_step(dt));
      if (out.bits[size_t(m * out.ld + j)] != host::from_float(dt, got32) && not_one_rounding++ < 5)
        ADD_FAILURE() << "(" << m << ", " << j << "): rounded output " << out.at(m, j) << " is not round(" << got32 << ")";
    }
  testing::expect_close(st32, "f32 reference vs fp64 (NaN: unwritten)", 1e-4);
  // The aggregate allows 1 % plus, per element, half a subnormal step: a product of small draws can
  // land in fp16's subnormal range, where one rounding is absolute (M = K = U = 1 once drew |h| of
  // 1.5e-6, whose rounding alone is 1.7 % of it).
  const double subnormal_l2 =
      st.sum_sq_ref > 0 ? std::sqrt(double(st.count)) * subnormal_half_step(dt) / std::sqrt(st.sum_sq_ref) : 0.0;
  testing::expect_close(st, std::string(dtype_name(dt)) + " reference vs fp64 (NaN: unwritten)", 1e-2 + subnormal_l2);
  EXPECT_EQ(not_one_rounding, 0);
  for (int64_t m = 0; m < s.M; ++m) {
    for (int64_t c = s.U; c < out.ld; ++c) ASSERT_EQ(out.bits[size_t(m * out.ld + c)], 0xABCD) << "out padding written";
    for (int64_t c = s.U; c < ldo; ++c) ASSERT_TRUE(std::isnan(f32[size_t(m * ldo + c)])) << "f32 padding written";
  }
}

class ReferenceVsFp64 : public ::testing::TestWithParam<std::tuple<DType, Activation>> {};

// Every combination of odd and even sizes: M = 1 (decode), 7, 33 (not tile multiples), K down to
// one 16-byte vector and up to 1000, U = 8 .. 200.
TEST_P(ReferenceVsFp64, ShapeGrid) {
  const auto [dt, act] = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int64_t M : {1, 7, 33})
    for (int64_t K : {8, 24, 136, 1000})
      for (int64_t U : {8, 24, 200}) check_against_fp64(dt, act, {M, K, U}, 1.0f, rng);
}

// Larger gate values: the saturating (silu -> g, gelu -> g) and vanishing (-> 0) ends of the
// activations, where fp32 evaluation error is relatively largest.
TEST_P(ReferenceVsFp64, WideRange) {
  const auto [dt, act] = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  for (float scale : {0.01f, 4.0f, 12.0f}) check_against_fp64(dt, act, {9, 64, 16}, scale, rng);
}

// The reference is the definition, not the kernel: it takes shapes the kernel rejects (K, U not
// multiples of 8, K = 1).
TEST_P(ReferenceVsFp64, ShapesTheKernelRejects) {
  const auto [dt, act] = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  for (Shape s : {Shape{1, 1, 1}, Shape{3, 5, 3}, Shape{2, 17, 11}}) check_against_fp64(dt, act, s, 1.0f, rng);
}

INSTANTIATE_TEST_SUITE_P(All, ReferenceVsFp64,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kFP16),
                                            ::testing::Values(Activation::kSiLU, Activation::kGeluTanh)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  activation_name(std::get<1>(info.param));
                         });

// A hand-checkable case: K = 8, a single output, exact in bf16. Also pins which rows are the gate.
TEST(Reference, HandComputedSwiGLU) {
  HostMatrix x(DType::kBF16, 1, 8), w(DType::kBF16, 2, 8), out(DType::kBF16, 1, 1);
  for (int k = 0; k < 8; ++k) {
    x.set(0, k, 1.0f);
    w.set(0, k, 0.25f);   // up row: x·up = 2
    w.set(1, k, 0.125f);  // gate row: x·gate = 1
  }
  gated_up_reference_host(x.view(), w.view(), out.view(), Activation::kSiLU);
  const double expect = 1.0 / (1.0 + std::exp(-1.0)) * 2.0;  // silu(1) * 2 = 1.4621...
  EXPECT_EQ(out.at(0, 0), 1.4609375f) << "round_bf16(1.46212) = 187 / 128";
  EXPECT_NEAR(out.at(0, 0), expect, expect / 256);
  const double swapped = 2.0 / (1.0 + std::exp(-2.0)) * 1.0;  // silu(2) * 1 = 1.7616: gate/up swapped
  EXPECT_GT(std::fabs(out.at(0, 0) - swapped), 0.1) << "odd rows must be the gate, even rows the up projection";
  float f32 = 0;
  gated_up_reference_host_f32(x.view(), w.view(), &f32, 1, Activation::kGeluTanh);
  EXPECT_NEAR(f32, 0.8411920 * 2.0, 1e-6) << "gelu_tanh(1) * 2";
}

// The interleaving convention, explicitly: gate and up built separately, interleaved by the host
// helper; each output equals act(x·gateᵀ)·(x·upᵀ) and (with gate ≠ up) not act(x·upᵀ)·(x·gateᵀ).
TEST(Reference, InterleavedRowsAreUpThenGate) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const int64_t M = 5, K = 32, U = 16;
  for (Activation act : {Activation::kSiLU, Activation::kGeluTanh}) {
    HostMatrix x(DType::kFP16, M, K), gate(DType::kFP16, U, K), up(DType::kFP16, U, K), w(DType::kFP16, 2 * U, K);
    x.fill_uniform(rng, -1, 1);
    gate.fill_uniform(rng, -0.5f, 0.5f);
    up.fill_uniform(rng, -0.5f, 0.5f);
    interleave_gate_up_host(gate.view(), up.view(), w.view());
    std::vector<float> h(size_t(M * U));
    gated_up_reference_host_f32(x.view(), w.view(), h.data(), U, act);
    const Naive right = naive(x, gate, up, act), swapped = naive(x, up, gate, act);
    testing::CompareStats st;
    int64_t distinguishable = 0;
    for (int64_t i = 0; i < M * U; ++i) {
      st.add(0, i, h[size_t(i)], right.h[size_t(i)], right.bound[size_t(i)]);
      if (std::fabs(swapped.h[size_t(i)] - right.h[size_t(i)]) > 10 * right.bound[size_t(i)]) ++distinguishable;
    }
    testing::expect_close(st, "f32 reference vs fp64", 1e-4);
    EXPECT_GT(distinguishable, M * U / 2) << "the data must tell gate from up, or this test proves nothing";
  }
}

TEST(Reference, ValidatesArguments) {
  HostMatrix x(DType::kBF16, 2, 8), w(DType::kBF16, 8, 8), out(DType::kBF16, 2, 4), w_odd(DType::kBF16, 7, 8),
      w16(DType::kFP16, 8, 8), out_rows(DType::kBF16, 3, 4), w_k(DType::kBF16, 8, 16);
  float f32[16];
  const auto silu = Activation::kSiLU;
  testing::expect_arg_error([&] { gated_up_reference_host(x.view(), w_odd.view(), out.view(), silu); }, "w", "7");
  testing::expect_arg_error([&] { gated_up_reference_host(x.view(), w16.view(), out.view(), silu); }, "w", "fp16");
  testing::expect_arg_error([&] { gated_up_reference_host(x.view(), w_k.view(), out.view(), silu); }, "w", "16");
  testing::expect_arg_error([&] { gated_up_reference_host(x.view(), w.view(), out_rows.view(), silu); }, "out", "3");
  testing::expect_arg_error([&] { gated_up_reference_host(x.view(), w.view(), out.view(), Activation(4)); }, "activation", "4");
  testing::expect_arg_error([&] { gated_up_reference_host(x.view(), w.view(), Matrix{x.bits.data(), DType::kBF16, 2, 4, 4}, silu); },
                         "out", "overlap");
  testing::expect_arg_error([&] { gated_up_reference_host_f32(x.view(), w_odd.view(), f32, 4, silu); }, "w");
  testing::expect_arg_error([&] { gated_up_reference_host_f32(x.view(), w.view(), f32, 3, silu); }, "ldo", "3");
  testing::expect_arg_error([&] { gated_up_reference_host_f32(x.view(), w.view(), nullptr, 4, silu); }, "out");
  // Empty problems are fine and touch nothing.
  HostMatrix x0(DType::kBF16, 0, 8), out0(DType::kBF16, 0, 4);
  EXPECT_NO_THROW(gated_up_reference_host(x0.view(), w.view(), out0.view(), silu));
}

}  // namespace
}  // namespace blockfuse
