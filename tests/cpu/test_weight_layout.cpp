// Host weight-layout helpers: interleaving from separate and stacked weights, the inverses, the
// row convention (row 2j = up_j, 2j+1 = gate_j), strided views, and their argument checks.
#include <gtest/gtest.h>

#include <random>

#include "blockfuse/weight_layout.h"
#include "support/test_util.h"

namespace blockfuse {
namespace {

using test::HostMatrix;

TEST(WeightLayoutHost, InterleaveFromGateAndUp) {
  std::mt19937_64 rng(test::fresh_seed());
  for (auto [U, K] : {std::pair<int64_t, int64_t>{1, 8}, {7, 24}, {64, 136}}) {
    HostMatrix gate(DType::kBF16, U, K, K + 8), up(DType::kBF16, U, K), w(DType::kBF16, 2 * U, K, K + 16);
    gate.fill_uniform(rng, -1, 1);
    up.fill_uniform(rng, -1, 1);
    interleave_gate_up_host(gate.view(), up.view(), w.view());
    for (int64_t j = 0; j < U; ++j)
      for (int64_t k = 0; k < K; ++k) {
        ASSERT_EQ(w.bits[size_t(2 * j * w.ld + k)], up.bits[size_t(j * up.ld + k)]) << "row " << 2 * j << " must be up_" << j;
        ASSERT_EQ(w.bits[size_t((2 * j + 1) * w.ld + k)], gate.bits[size_t(j * gate.ld + k)]) << "row " << 2 * j + 1 << " must be gate_" << j;
      }
    for (int64_t r = 0; r < 2 * U; ++r) ASSERT_EQ(w.bits[size_t(r * w.ld + K)], 0xABCD) << "padding written";
    // Inverse.
    HostMatrix g2(DType::kBF16, U, K), u2(DType::kBF16, U, K);
    deinterleave_gate_up_host(w.view(), g2.view(), u2.view());
    for (int64_t j = 0; j < U; ++j)
      for (int64_t k = 0; k < K; ++k) {
        ASSERT_EQ(g2.bits[size_t(j * K + k)], gate.bits[size_t(j * gate.ld + k)]);
        ASSERT_EQ(u2.bits[size_t(j * K + k)], up.bits[size_t(j * up.ld + k)]);
      }
  }
}

TEST(WeightLayoutHost, StackedRoundTrip) {
  std::mt19937_64 rng(test::fresh_seed());
  const int64_t U = 24, K = 40;
  HostMatrix stacked(DType::kFP16, 2 * U, K), w(DType::kFP16, 2 * U, K), back(DType::kFP16, 2 * U, K);
  stacked.fill_uniform(rng, -3, 3);
  interleave_stacked_gate_up_host(stacked.view(), w.view());
  for (int64_t j = 0; j < U; ++j)
    for (int64_t k = 0; k < K; ++k) {
      ASSERT_EQ(w.bits[size_t(2 * j * K + k)], stacked.bits[size_t((U + j) * K + k)]) << "even rows come from the up half [U, 2U)";
      ASSERT_EQ(w.bits[size_t((2 * j + 1) * K + k)], stacked.bits[size_t(j * K + k)]) << "odd rows come from the gate half [0, U)";
    }
  deinterleave_to_stacked_host(w.view(), back.view());
  EXPECT_EQ(back.bits, stacked.bits);
}

TEST(WeightLayoutHost, StackedAgreesWithSeparate) {
  std::mt19937_64 rng(test::fresh_seed());
  const int64_t U = 9, K = 16;
  HostMatrix stacked(DType::kBF16, 2 * U, K), w1(DType::kBF16, 2 * U, K), w2(DType::kBF16, 2 * U, K);
  stacked.fill_uniform(rng, -1, 1);
  interleave_stacked_gate_up_host(stacked.view(), w1.view());
  ConstMatrix gate{stacked.bits.data(), DType::kBF16, U, K, K};
  ConstMatrix up{stacked.bits.data() + U * K, DType::kBF16, U, K, K};
  interleave_gate_up_host(gate, up, w2.view());
  EXPECT_EQ(w1.bits, w2.bits);
}

TEST(WeightLayoutHost, Errors) {
  HostMatrix gate(DType::kBF16, 4, 8), up(DType::kBF16, 4, 8), w(DType::kBF16, 8, 8), w_bad(DType::kBF16, 6, 8),
      up16(DType::kFP16, 4, 8), stacked_odd(DType::kBF16, 7, 8);
  auto expect_arg = [](auto fn, const char* arg) {
    try {
      fn();
      ADD_FAILURE() << "expected blockfuse::Error naming '" << arg << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + arg + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("required"), std::string::npos) << e.what();
    }
  };
  expect_arg([&] { interleave_gate_up_host(gate.view(), up.view(), w_bad.view()); }, "out");
  expect_arg([&] { interleave_gate_up_host(gate.view(), up16.view(), w.view()); }, "up");
  expect_arg([&] { interleave_stacked_gate_up_host(stacked_odd.view(), w.view()); }, "stacked");
  expect_arg([&] { interleave_gate_up_host(gate.view(), up.view(), Matrix{w.bits.data(), DType::kBF16, 8, 8, 4}); }, "out");
  // Output aliasing an input.
  expect_arg([&] { interleave_stacked_gate_up_host(w.view(), w.view()); }, "out");
}

}  // namespace
}  // namespace blockfuse
