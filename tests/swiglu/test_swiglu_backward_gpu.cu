// GPU tests of swiglu_backward (src/swiglu/backward.cu) against the fp64 reference
// (src/swiglu/reference.h: swiglu_backward_reference_host, checked against central differences in
// test_swiglu_backward_cpu.cpp): both layouts, both activations, both dtypes, rows 1, 7, 2048 and
// U = 8, 24, 14336, strided rows, in place (d_gate_up over gate_up), and the form that also writes the
// forward's output (checked against swiglu_reference_host_f32, the same tolerance). The kernel computes in fp32 and
// rounds once: |got − ref| <= 2u·|ref| + 1e-4 (the special-function sigmoid's few ulp, times
// |dh · up| <= 8, near zero). Outputs are poisoned (NaN) first; row padding must come back untouched.
// Each test skips, saying so, where no CUDA device exists.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include "blockfuse/swiglu.h"
#include "swiglu/reference.h"
#include "testing/gtest/gtest_util.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;

#define SKIP_WITHOUT_GPU() BF_SKIP_WITHOUT_GPU("the swiglu backward kernel")
#define CUDA_OK(expr) BF_CUDA_OK(expr)

void run_case(DType dt, Activation act, GateUpLayout layout, int64_t rows, int64_t u, int64_t pad, bool in_place,
              bool with_out = false) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(std::string(dtype_name(dt)) + " " + activation_name(act) + " " + layout_name(layout) +
               " rows=" + std::to_string(rows) + " U=" + std::to_string(u) + " pad=" + std::to_string(pad) +
               (in_place ? " in-place" : "") + (with_out ? " with out" : "") + "; " + testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  HostMatrix in(dt, rows, 2 * u, 2 * u + pad), dh(dt, rows, u, u + 2 * pad);
  in.fill_uniform(rng, -4.f, 4.f);
  dh.fill_uniform(rng, -2.f, 2.f);
  std::vector<double> ref(size_t(rows * 2 * u));
  swiglu_backward_reference_host(dh.view(), in.view(), ref.data(), 2 * u, act, layout);

  HostMatrix out(dt, rows, 2 * u, 2 * u + 3 * pad), h(dt, rows, u, u + pad);
  out.poison();
  h.poison();
  std::vector<float> h_ref(size_t(rows * u));
  swiglu_reference_host_f32(in.view(), h_ref.data(), u, act, layout);
  testing::DeviceMatrix d_in(in), d_dh(dh), d_out(out), d_h(h);
  const Matrix dst = in_place ? d_in.view(in) : d_out.view(out);
  if (with_out)
    swiglu_backward(d_dh.cview(dh), d_in.cview(in), dst, d_h.view(h), act, layout);
  else
    swiglu_backward(d_dh.cview(dh), d_in.cview(in), dst, act, layout);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  HostMatrix got = in_place ? in : out;
  if (in_place) d_in.to_host(got);
  else d_out.to_host(got);
  const testing::Tolerance tol{1e-4, 2 * testing::unit_roundoff(dt)};
  testing::expect_close(testing::compare_host(rows, 2 * u, [&](int64_t r, int64_t j) { return got.at(r, j); },
                                              [&](int64_t r, int64_t j) { return ref[size_t(r * 2 * u + j)]; }, tol),
                        "d_gate_up");
  if (with_out) {
    d_h.to_host(h);
    testing::expect_close(testing::compare_host(rows, u, [&](int64_t r, int64_t j) { return h.at(r, j); },
                                                [&](int64_t r, int64_t j) { return double(h_ref[size_t(r * u + j)]); },
                                                tol),
                          "out");
    int64_t pad_bad = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = u; c < h.ld; ++c) pad_bad += h.bits[size_t(r * h.ld + c)] != 0xABCD;
    EXPECT_EQ(pad_bad, 0) << "elements written in the row padding of out";
  }
  if (!in_place) {
    int64_t pad_bad = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 2 * u; c < got.ld; ++c) pad_bad += got.bits[size_t(r * got.ld + c)] != 0xABCD;
    EXPECT_EQ(pad_bad, 0) << "elements written in the row padding of d_gate_up";
  }
}

using Param = std::tuple<DType, Activation, GateUpLayout>;
class SwigluBackwardGpu : public ::testing::TestWithParam<Param> {};

TEST_P(SwigluBackwardGpu, MatchesFp64) {
  SKIP_WITHOUT_GPU();
  const auto [dt, act, layout] = GetParam();
  for (int64_t rows : {1, 7, 2048})
    for (int64_t u : {8, 24, 14336}) {
      if (rows == 2048 && u == 14336) continue;  // 58 M elements of host fp64 reference: slow, adds nothing
      run_case(dt, act, layout, rows, u, 0, false);
    }
  run_case(dt, act, layout, 129, 14336, 0, false);
}

TEST_P(SwigluBackwardGpu, StridedAndInPlace) {
  SKIP_WITHOUT_GPU();
  const auto [dt, act, layout] = GetParam();
  for (int64_t u : {8, 1032}) {
    run_case(dt, act, layout, 33, u, 8, false);
    run_case(dt, act, layout, 33, u, 40, true);
  }
}

// The form with the forward's output, as blockfuse.ops.gated_mlp's backward calls it (in place) and
// out of place, strided.
TEST_P(SwigluBackwardGpu, WithForwardOutput) {
  SKIP_WITHOUT_GPU();
  const auto [dt, act, layout] = GetParam();
  run_case(dt, act, layout, 7, 24, 0, true, true);
  run_case(dt, act, layout, 129, 1032, 8, true, true);
  run_case(dt, act, layout, 33, 1032, 16, false, true);
}

INSTANTIATE_TEST_SUITE_P(AllVariants, SwigluBackwardGpu,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kFP16),
                                            ::testing::Values(Activation::kSiLU, Activation::kGeluTanh),
                                            ::testing::Values(GateUpLayout::kStacked, GateUpLayout::kInterleaved)),
                         [](const ::testing::TestParamInfo<Param>& i) {
                           return std::string(dtype_name(std::get<0>(i.param))) + "_" +
                                  activation_name(std::get<1>(i.param)) + "_" + layout_name(std::get<2>(i.param));
                         });

}  // namespace
}  // namespace blockfuse
