// CPU tests of swiglu_backward (no GPU needed): the fp64 derivative act_grad_f64 against central
// differences of act_f64; the fp64 reference (reference.h: swiglu_backward_reference_host) against
// the definition in both layouts; and every argument error (blockfuse::Error naming the argument
// before any CUDA call; fake, never dereferenced pointers: a valid call reaches the device check of
// 'dh').
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "blockfuse/swiglu.h"
#include "common/activation.cuh"
#include "swiglu/reference.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;
using testing::HostMatrix;

TEST(SwigluBackwardReference, ActGradMatchesCentralDifferences) {
  for (Activation act : {Activation::kSiLU, Activation::kGeluTanh})
    for (double g = -12.0; g <= 12.0; g += 0.0625) {
      const double h = 1e-6;
      const double fd = (act_f64(act, g + h) - act_f64(act, g - h)) / (2 * h);
      ASSERT_NEAR(act_grad_f64(act, g), fd, 1e-7) << activation_name(act) << " g = " << g;
    }
}

using Param = std::tuple<DType, GateUpLayout>;
class SwigluBackwardCpu : public ::testing::TestWithParam<Param> {};

TEST_P(SwigluBackwardCpu, ReferenceFollowsTheDefinition) {
  const auto [dt, layout] = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const int64_t rows = 3, u = 5;  // any U on the host
  HostMatrix in(dt, rows, 2 * u, 2 * u + 3), dh(dt, rows, u);
  in.fill_uniform(rng, -4.f, 4.f);
  dh.fill_uniform(rng, -2.f, 2.f);
  for (Activation act : {Activation::kSiLU, Activation::kGeluTanh}) {
    std::vector<double> d(size_t(rows * 2 * u));
    swiglu_backward_reference_host(dh.view(), in.view(), d.data(), 2 * u, act, layout);
    const bool il = layout == GateUpLayout::kInterleaved;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < u; ++j) {
        const double g = in.at(r, il ? 2 * j + 1 : j), up = in.at(r, il ? 2 * j : u + j), dd = dh.at(r, j);
        // d/dgate and d/dup of dd · act(gate) · up, by central differences.
        const double e = 1e-6;
        const double dg = dd * up * (act_f64(act, g + e) - act_f64(act, g - e)) / (2 * e);
        EXPECT_NEAR(d[size_t(r * 2 * u + (il ? 2 * j + 1 : j))], dg, 1e-6 * (1 + std::fabs(dg)));
        EXPECT_DOUBLE_EQ(d[size_t(r * 2 * u + (il ? 2 * j : u + j))], dd * act_f64(act, g));
      }
  }
}

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

struct Call {
  ConstMatrix dh, in;
  Matrix dout;
  Activation act = Activation::kSiLU;
  GateUpLayout layout = GateUpLayout::kStacked;
  bool with_out = false;  // the form that also writes the forward's output
  Matrix out;
  void operator()() const {
    if (with_out) swiglu_backward(dh, in, dout, out, act, layout);
    else swiglu_backward(dh, in, dout, act, layout);
  }
};

Call valid(DType dt, GateUpLayout layout) {
  Call c;
  c.dh = ConstMatrix{fake(1), dt, 7, 48, 56};
  c.in = ConstMatrix{fake(2), dt, 7, 96, 104};
  c.dout = Matrix{fake(3), dt, 7, 96, 96};
  c.layout = layout;
  return c;
}

TEST_P(SwigluBackwardCpu, ArgumentErrors) {
  const auto [dt, layout] = GetParam();
  const DType other = dt == DType::kBF16 ? DType::kFP16 : DType::kBF16;
  { Call c = valid(dt, layout); expect_arg_error(c, "dh", "device memory"); }
  // In place: d_gate_up over gate_up.
  { Call c = valid(dt, layout); c.dout = Matrix{fake(2), dt, 7, 96, 104}; expect_arg_error(c, "dh", "device memory"); }
  { Call c = valid(dt, layout); c.act = static_cast<Activation>(7); expect_arg_error(c, "activation", "7"); }
  { Call c = valid(dt, layout); c.layout = static_cast<GateUpLayout>(9); expect_arg_error(c, "layout", "9"); }
  { Call c = valid(dt, layout); c.dh.dtype = other; expect_arg_error(c, "dh", dtype_name(other)); }
  { Call c = valid(dt, layout); c.dh.rows = 6; expect_arg_error(c, "dh", "[6, 48]"); }
  { Call c = valid(dt, layout); c.dh.cols = 40; expect_arg_error(c, "dh", "[7, 40]"); }
  { Call c = valid(dt, layout); c.dh.cols = 44; c.in.cols = 88; c.dout.cols = 88; expect_arg_error(c, "dh", "U % 8"); }
  { Call c = valid(dt, layout); c.dh.ld = 60; expect_arg_error(c, "dh", "60"); }
  { Call c = valid(dt, layout); c.dh.data = static_cast<char*>(fake(1)) + 8; expect_arg_error(c, "dh", "aligned"); }
  { Call c = valid(dt, layout); c.in.data = static_cast<char*>(fake(2)) + 8; expect_arg_error(c, "gate_up", "aligned"); }
  { Call c = valid(dt, layout); c.dout.dtype = other; expect_arg_error(c, "d_gate_up", dtype_name(other)); }
  { Call c = valid(dt, layout); c.dout.cols = 88; expect_arg_error(c, "d_gate_up", "[7, 88]"); }
  { Call c = valid(dt, layout); c.dout.data = static_cast<char*>(fake(3)) + 4; expect_arg_error(c, "d_gate_up", "aligned"); }
  { Call c = valid(dt, layout); c.dout = Matrix{static_cast<char*>(fake(2)) + 64, dt, 7, 96, 104}; expect_arg_error(c, "d_gate_up", "overlaps 'gate_up'"); }
  { Call c = valid(dt, layout); c.dout = Matrix{fake(2), dt, 7, 96, 96}; expect_arg_error(c, "d_gate_up", "overlaps 'gate_up'"); }
  { Call c = valid(dt, layout); c.dout = Matrix{fake(1), dt, 7, 96, 96}; expect_arg_error(c, "d_gate_up", "overlaps 'dh'"); }
  { Call c = valid(dt, layout); c.dh.rows = c.in.rows = c.dout.rows = 0; EXPECT_NO_THROW(c()); }
}

TEST_P(SwigluBackwardCpu, ArgumentErrorsWithForwardOutput) {
  const auto [dt, layout] = GetParam();
  const DType other = dt == DType::kBF16 ? DType::kFP16 : DType::kBF16;
  auto valid_out = [&] {
    Call c = valid(dt, layout);
    c.with_out = true;
    c.out = Matrix{fake(4), dt, 7, 48, 48};
    return c;
  };
  { Call c = valid_out(); expect_arg_error(c, "dh", "device memory"); }  // every check passed but the device's
  { Call c = valid_out(); c.out.dtype = other; expect_arg_error(c, "out", dtype_name(other)); }
  { Call c = valid_out(); c.out.rows = 6; expect_arg_error(c, "out", "[6, 48]"); }
  { Call c = valid_out(); c.out.cols = 40; expect_arg_error(c, "out", "[7, 40]"); }
  { Call c = valid_out(); c.out.ld = 52; expect_arg_error(c, "out", "52"); }
  { Call c = valid_out(); c.out.data = static_cast<char*>(fake(4)) + 8; expect_arg_error(c, "out", "aligned"); }
  { Call c = valid_out(); c.out.data = fake(1); expect_arg_error(c, "out", "overlaps 'dh'"); }
  { Call c = valid_out(); c.out.data = static_cast<char*>(fake(2)) + 64; expect_arg_error(c, "out", "overlaps 'gate_up'"); }
  { Call c = valid_out(); c.out.data = fake(3); expect_arg_error(c, "out", "overlaps 'd_gate_up'"); }
  { Call c = valid_out(); c.dh.rows = c.in.rows = c.dout.rows = c.out.rows = 0; EXPECT_NO_THROW(c()); }
}

INSTANTIATE_TEST_SUITE_P(All, SwigluBackwardCpu,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kFP16),
                                            ::testing::Values(GateUpLayout::kStacked, GateUpLayout::kInterleaved)),
                         [](const ::testing::TestParamInfo<Param>& i) {
                           return std::string(dtype_name(std::get<0>(i.param))) + "_" + layout_name(std::get<1>(i.param));
                         });

}  // namespace
}  // namespace blockfuse
