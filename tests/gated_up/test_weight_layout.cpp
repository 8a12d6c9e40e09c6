// Weight-layout helpers (include/blockfuse/weight_layout.h) on the host: interleaving from separate
// gate/up weights and from the stacked [gate; up] tensor, both inverses, the row convention
// (row 2j = up_j, row 2j+1 = gate_j, bit-exact), strided views on every side (ld > cols, padding
// untouched), and every argument check of the host and device versions (the device versions'
// shape checks run before any CUDA call, so they are tested here without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "blockfuse/weight_layout.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;
using testing::HostMatrix;

constexpr uint16_t kSentinel = 0xABCD;  // HostMatrix's initial fill: padding must keep it

void expect_padding_untouched(const HostMatrix& m, const char* what) {
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = m.cols; c < m.ld; ++c)
      ASSERT_EQ(m.bits[size_t(r * m.ld + c)], kSentinel) << what << " padding written at (" << r << ", " << c << ")";
}

// w is gate/up interleaved: row 2j == up row j and row 2j+1 == gate row j, bit for bit.
void expect_interleaved(const HostMatrix& w, const ConstMatrix& gate, const ConstMatrix& up) {
  const auto* g = static_cast<const uint16_t*>(gate.data);
  const auto* u = static_cast<const uint16_t*>(up.data);
  for (int64_t j = 0; j < gate.rows; ++j)
    for (int64_t k = 0; k < gate.cols; ++k) {
      ASSERT_EQ(w.bits[size_t(2 * j * w.ld + k)], u[j * up.ld + k]) << "row " << 2 * j << " must be up_" << j << " (k = " << k << ")";
      ASSERT_EQ(w.bits[size_t((2 * j + 1) * w.ld + k)], g[j * gate.ld + k])
          << "row " << 2 * j + 1 << " must be gate_" << j << " (k = " << k << ")";
    }
}

void expect_equal_values(const HostMatrix& a, const HostMatrix& b, const char* what) {
  ASSERT_EQ(a.rows, b.rows);
  ASSERT_EQ(a.cols, b.cols);
  for (int64_t r = 0; r < a.rows; ++r)
    for (int64_t c = 0; c < a.cols; ++c)
      ASSERT_EQ(a.bits[size_t(r * a.ld + c)], b.bits[size_t(r * b.ld + c)]) << what << " differs at (" << r << ", " << c << ")";
}

struct Dims {
  int64_t U, K;
};
const Dims kDims[] = {{1, 8}, {7, 24}, {64, 136}, {3, 5}};  // the host helpers take any K

TEST(WeightLayoutHost, SeparateRoundTrip) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (Dims d : kDims) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " U=" << d.U << " K=" << d.K);
      HostMatrix gate(dt, d.U, d.K, d.K + 8), up(dt, d.U, d.K, d.K + 1), w(dt, 2 * d.U, d.K, d.K + 16);
      gate.fill_uniform(rng, -1, 1);
      up.fill_uniform(rng, -1, 1);
      interleave_gate_up_host(gate.view(), up.view(), w.view());
      expect_interleaved(w, gate.view(), up.view());
      expect_padding_untouched(w, "interleaved");
      HostMatrix g2(dt, d.U, d.K, d.K + 3), u2(dt, d.U, d.K, d.K + 9);
      deinterleave_gate_up_host(w.view(), g2.view(), u2.view());
      expect_equal_values(g2, gate, "de-interleaved gate");
      expect_equal_values(u2, up, "de-interleaved up");
      expect_padding_untouched(g2, "gate");
      expect_padding_untouched(u2, "up");
    }
}

TEST(WeightLayoutHost, StackedRoundTrip) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (Dims d : kDims) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " U=" << d.U << " K=" << d.K);
      HostMatrix stacked(dt, 2 * d.U, d.K, d.K + 4), w(dt, 2 * d.U, d.K, d.K + 8), back(dt, 2 * d.U, d.K, d.K + 2);
      stacked.fill_uniform(rng, -3, 3);
      interleave_stacked_gate_up_host(stacked.view(), w.view());
      // [gate; up]: gate = rows [0, U), up = rows [U, 2U).
      const ConstMatrix gate{stacked.bits.data(), dt, d.U, d.K, stacked.ld};
      const ConstMatrix up{stacked.bits.data() + d.U * stacked.ld, dt, d.U, d.K, stacked.ld};
      expect_interleaved(w, gate, up);
      expect_padding_untouched(w, "interleaved");
      deinterleave_to_stacked_host(w.view(), back.view());
      expect_equal_values(back, stacked, "stacked round trip");
      expect_padding_untouched(back, "stacked");
    }
}

// The two sources agree: interleaving the stacked tensor == interleaving its two halves; and
// de-interleaving to separate matrices == the halves of de-interleaving to stacked.
TEST(WeightLayoutHost, StackedAgreesWithSeparate) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const int64_t U = 9, K = 16;
  HostMatrix stacked(DType::kBF16, 2 * U, K), w1(DType::kBF16, 2 * U, K), w2(DType::kBF16, 2 * U, K);
  stacked.fill_uniform(rng, -1, 1);
  interleave_stacked_gate_up_host(stacked.view(), w1.view());
  const ConstMatrix gate{stacked.bits.data(), DType::kBF16, U, K, K};
  const ConstMatrix up{stacked.bits.data() + U * K, DType::kBF16, U, K, K};
  interleave_gate_up_host(gate, up, w2.view());
  EXPECT_EQ(w1.bits, w2.bits);

  HostMatrix g(DType::kBF16, U, K), u(DType::kBF16, U, K), back(DType::kBF16, 2 * U, K);
  deinterleave_gate_up_host(w1.view(), g.view(), u.view());
  deinterleave_to_stacked_host(w1.view(), back.view());
  EXPECT_TRUE(std::equal(g.bits.begin(), g.bits.end(), back.bits.begin()));
  EXPECT_TRUE(std::equal(u.bits.begin(), u.bits.end(), back.bits.begin() + U * K));
}

TEST(WeightLayoutHost, EmptyIsANoOp) {
  HostMatrix gate(DType::kBF16, 0, 8), up(DType::kBF16, 0, 8), w(DType::kBF16, 0, 8);
  EXPECT_NO_THROW(interleave_gate_up_host(gate.view(), up.view(), w.view()));
  EXPECT_NO_THROW(deinterleave_gate_up_host(w.view(), gate.view(), up.view()));
  EXPECT_NO_THROW(interleave_stacked_gate_up_host(w.view(), Matrix{nullptr, DType::kBF16, 0, 8, 8}));
}

// Every check of the host helpers: the message names the argument as the header does.
TEST(WeightLayoutHost, Errors) {
  const DType bf = DType::kBF16;
  HostMatrix gate(bf, 4, 8), up(bf, 4, 8), w(bf, 8, 8), w2(bf, 8, 8), w_bad(bf, 6, 8), up16(DType::kFP16, 4, 8),
      w16(DType::kFP16, 8, 8), odd(bf, 7, 8), up_k(bf, 4, 16), g_rows(bf, 3, 8);
  // interleave_gate_up_host(gate, up, out)
  expect_arg_error([&] { interleave_gate_up_host(gate.view(), up.view(), w_bad.view()); }, "out", "6");
  expect_arg_error([&] { interleave_gate_up_host(gate.view(), up16.view(), w.view()); }, "up", "fp16");
  expect_arg_error([&] { interleave_gate_up_host(gate.view(), up.view(), w16.view()); }, "out", "fp16");
  expect_arg_error([&] { interleave_gate_up_host(gate.view(), up_k.view(), w.view()); }, "up", "16");
  expect_arg_error([&] { interleave_gate_up_host(gate.view(), up.view(), Matrix{w.bits.data(), bf, 8, 8, 4}); }, "out", "ld");
  expect_arg_error([&] { interleave_gate_up_host(gate.view(), up.view(), Matrix{nullptr, bf, 8, 8, 8}); }, "out", "null");
  expect_arg_error([&] { interleave_gate_up_host(ConstMatrix{gate.bits.data(), bf, -4, 8, 8}, up.view(), w.view()); }, "gate", "-4");
  expect_arg_error([&] { interleave_gate_up_host(ConstMatrix{gate.bits.data(), DType(9), 4, 8, 8}, up.view(), w.view()); },
                   "gate", "9");
  // Output aliasing an input.
  expect_arg_error([&] { interleave_gate_up_host(ConstMatrix{w.bits.data(), bf, 4, 8, 8}, up.view(), w.view()); }, "out",
                   "overlap");
  // interleave_stacked_gate_up_host(stacked, out)
  expect_arg_error([&] { interleave_stacked_gate_up_host(odd.view(), w.view()); }, "stacked", "7");
  expect_arg_error([&] { interleave_stacked_gate_up_host(w.view(), w_bad.view()); }, "out", "6");
  expect_arg_error([&] { interleave_stacked_gate_up_host(w.view(), w16.view()); }, "out", "fp16");
  expect_arg_error([&] { interleave_stacked_gate_up_host(w.view(), w.view()); }, "out", "overlap");
  // deinterleave_gate_up_host(interleaved, gate, up)
  expect_arg_error([&] { deinterleave_gate_up_host(odd.view(), gate.view(), up.view()); }, "interleaved", "7");
  expect_arg_error([&] { deinterleave_gate_up_host(w.view(), g_rows.view(), up.view()); }, "gate", "3");
  expect_arg_error([&] { deinterleave_gate_up_host(w.view(), gate.view(), up16.view()); }, "up", "fp16");
  expect_arg_error([&] { deinterleave_gate_up_host(w.view(), gate.view(), Matrix{gate.bits.data(), bf, 4, 8, 8}); }, "gate",
                   "overlap");
  expect_arg_error([&] { deinterleave_gate_up_host(w.view(), Matrix{w.bits.data(), bf, 4, 8, 8}, up.view()); }, "gate",
                   "overlap");
  // deinterleave_to_stacked_host(interleaved, stacked)
  expect_arg_error([&] { deinterleave_to_stacked_host(odd.view(), w.view()); }, "interleaved", "7");
  expect_arg_error([&] { deinterleave_to_stacked_host(w.view(), w_bad.view()); }, "stacked", "6");
  expect_arg_error([&] { deinterleave_to_stacked_host(w.view(), w16.view()); }, "stacked", "fp16");
  expect_arg_error([&] { deinterleave_to_stacked_host(w.view(), w.view()); }, "stacked", "overlap");
  EXPECT_NO_THROW(deinterleave_to_stacked_host(w.view(), w2.view()));
}

// The device versions check shapes and dtypes before any CUDA call (same messages with or without
// a GPU), then require device memory: host pointers are rejected naming the argument, whether the
// CUDA runtime can inspect them (GPU present) or not (CPU-only CI).
TEST(WeightLayoutDevice, Errors) {
  const DType bf = DType::kBF16;
  HostMatrix gate(bf, 4, 8), up(bf, 4, 8), w(bf, 8, 8), w_bad(bf, 6, 8), up16(DType::kFP16, 4, 8), odd(bf, 7, 8),
      g_rows(bf, 3, 8);
  expect_arg_error([&] { interleave_gate_up(gate.view(), up.view(), w_bad.view()); }, "out", "6");
  expect_arg_error([&] { interleave_gate_up(gate.view(), up16.view(), w.view()); }, "up", "fp16");
  expect_arg_error([&] { interleave_stacked_gate_up(odd.view(), w.view()); }, "stacked", "7");
  expect_arg_error([&] { interleave_stacked_gate_up(w.view(), w_bad.view()); }, "out", "6");
  expect_arg_error([&] { deinterleave_gate_up(odd.view(), gate.view(), up.view()); }, "interleaved", "7");
  expect_arg_error([&] { deinterleave_gate_up(w.view(), g_rows.view(), up.view()); }, "gate", "3");
  expect_arg_error([&] { deinterleave_to_stacked(w.view(), w_bad.view()); }, "stacked", "6");
  // Valid shapes, host memory: the first argument checked (an input) is named.
  expect_arg_error([&] { interleave_gate_up(gate.view(), up.view(), w.view()); }, "gate", "device memory");
  HostMatrix w2(bf, 8, 8);
  expect_arg_error([&] { interleave_stacked_gate_up(w.view(), w2.view()); }, "stacked", "device memory");
  expect_arg_error([&] { deinterleave_gate_up(w.view(), gate.view(), up.view()); }, "interleaved", "device memory");
  expect_arg_error([&] { deinterleave_to_stacked(w.view(), w.view()); }, "interleaved", "device memory");
  // Empty: nothing to copy, no device needed.
  HostMatrix e(bf, 0, 8);
  EXPECT_NO_THROW(interleave_gate_up(e.view(), e.view(), e.view()));
}

}  // namespace
}  // namespace blockfuse
