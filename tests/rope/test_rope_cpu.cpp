// CPU tests of blockfuse::rope: the fp64 reference (rope/reference.h) against Hugging Face's formula
// written out (x·cos + rotate_half(x)·sin), its backward as the forward's adjoint (<R x, y> = <x, Rᵀ y>
// for random x, y and tables), and every argument error that needs no device (named, "required").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "blockfuse/rope.h"
#include "rope/reference.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

std::vector<float> uniform(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) {
    do x = d(rng);
    while (x == 0.f);
  }
  return v;
}

TEST(RopeReference, IsHuggingFacesFormula) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int64_t d : {8, 64, 128}) {
    const std::vector<float> x = uniform(rng, size_t(d)), c = uniform(rng, size_t(d)), s = uniform(rng, size_t(d));
    std::vector<double> got(static_cast<size_t>(d));
    reference::rope_row(x.data(), c.data(), s.data(), d, false, got.data());
    for (int64_t i = 0; i < d; ++i) {
      const double rot = i < d / 2 ? -double(x[size_t(i + d / 2)]) : double(x[size_t(i - d / 2)]);  // rotate_half
      EXPECT_NEAR(got[size_t(i)], double(x[size_t(i)]) * c[size_t(i)] + rot * s[size_t(i)], 1e-12) << d << " " << i;
    }
  }
}

TEST(RopeReference, BackwardIsTheAdjoint) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const int64_t d = 128;
  const std::vector<float> x = uniform(rng, d), y = uniform(rng, d), c = uniform(rng, d), s = uniform(rng, d);
  std::vector<double> rx(d), rty(d);
  reference::rope_row(x.data(), c.data(), s.data(), d, false, rx.data());
  reference::rope_row(y.data(), c.data(), s.data(), d, true, rty.data());
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < d; ++i) lhs += rx[size_t(i)] * y[size_t(i)], rhs += double(x[size_t(i)]) * rty[size_t(i)];
  EXPECT_NEAR(lhs, rhs, 1e-9 * (std::fabs(lhs) + 1));
}

// A valid call's views on host memory (every error below comes before the device checks).
struct Call {
  std::vector<uint16_t> xb = std::vector<uint16_t>(2 * 3 * 4 * 64, 0x3f80), ob = xb, tb = std::vector<uint16_t>(3 * 64, 0x3f80);
  AttnTensor x = make_attn_tensor(static_cast<void*>(xb.data()), DType::kBF16, 2, 3, 4, 64);
  AttnTensor out = make_attn_tensor(static_cast<void*>(ob.data()), DType::kBF16, 2, 3, 4, 64);
  RopeTables t{tb.data(), tb.data(), 1, 0, 64};
  void operator()() { rope(x, out, t, false); }
};

TEST(RopeValidation, EveryArgumentNamed) {
  using testing::expect_arg_error;
  { Call c; c.x.dtype = static_cast<DType>(7); expect_arg_error(c, "x"); }
  { Call c; c.x.head_dim = c.out.head_dim = 96; expect_arg_error(c, "x", "96"); }
  { Call c; c.out.dtype = DType::kFP16; expect_arg_error(c, "out"); }
  { Call c; c.out.heads = 2; expect_arg_error(c, "out"); }
  { Call c; c.x.head_stride = 68; expect_arg_error(c, "x", "68"); }
  { Call c; c.t.batch = 3; expect_arg_error(c, "tables.batch", "3"); }
  { Call c; c.t.seq_stride = 60; expect_arg_error(c, "tables.seq_stride", "60"); }
  { Call c; c.t.seq_stride = 68; expect_arg_error(c, "tables.seq_stride", "68"); }
  { Call c; c.t.batch = 2; c.t.batch_stride = 4; expect_arg_error(c, "tables.batch_stride", "4"); }
  { Call c; c.t.cos = nullptr; expect_arg_error(c, "tables.cos"); }
  { Call c; c.t.sin = reinterpret_cast<const char*>(c.tb.data()) + 2; expect_arg_error(c, "tables.sin", "aligned"); }
  { Call c; c.out.data = c.xb.data() + 64; expect_arg_error(c, "out", "overlap"); }  // in place only exactly
}

TEST(RopeValidation, EmptyLaunchesNothing) {
  Call c;
  c.x.seqlen = c.out.seqlen = 0;
  c.t.cos = c.t.sin = nullptr;  // not even looked at
  EXPECT_NO_THROW(c());
}

}  // namespace
}  // namespace blockfuse
