// GPU tests of the standalone gated activation blockfuse::swiglu (src/swiglu/swiglu.cu): the
// kernel's output against an fp64 computation on host copies of its input, for both layouts
// (stacked [gate | up], interleaved up/gate pairs), both activations (SiLU, tanh-GELU), both dtypes,
// rows 1, 3, 255, 1000 and U = 8, 24, 14336 (one 16-byte chunk; three chunks; a Llama-3 8B row —
// 1000 x 14336 also runs the grid-stride loop more than once on any GPU).
//
// Outputs are poisoned with NaN before the launch (an element the kernel forgets stays NaN), and
// the strided cases put padding between rows whose sentinel bits must come back untouched (a
// kernel that ignores ld writes there). Each test skips, saying so, where no CUDA device exists.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include "common/activation.cuh"
#include "blockfuse/swiglu.h"
#include "testing/gtest/gtest_util.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;

#define SKIP_WITHOUT_GPU() BF_SKIP_WITHOUT_GPU("the swiglu kernel")

#define CUDA_OK(expr) BF_CUDA_OK(expr)

// Runs swiglu on device copies of `in` and checks every output against fp64 on the host.
//   The kernel computes in fp32 and rounds once, so |out - ref| <= u·|ref| (u = half an ulp of the
//   dtype) plus the fp32 error of expf/tanhf. The latter is relative except where GELU's
//   1 + tanh(z) cancels (g near -4: tanhf's last ulp is ~1e-3 of the result), which atol covers:
//   there |act(g)·up| < 1e-3, so an absolute 1e-5 is still far below any indexing or formula error.
void run_case(DType dt, Activation act, GateUpLayout layout, int64_t rows, int64_t u, int64_t in_pad,
              int64_t out_pad, cudaStream_t stream = nullptr) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(std::string(dtype_name(dt)) + " " + activation_name(act) + " " + layout_name(layout) +
               " rows=" + std::to_string(rows) + " U=" + std::to_string(u) + " in_pad=" + std::to_string(in_pad) +
               " out_pad=" + std::to_string(out_pad) + "; " + testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  HostMatrix in(dt, rows, 2 * u, 2 * u + in_pad);
  in.fill_uniform(rng, -4.f, 4.f);  // never zero; spans both tails of sigmoid and tanh
  HostMatrix out(dt, rows, u, u + out_pad);
  out.poison();  // padding keeps the constructor's 0xABCD sentinel

  testing::DeviceMatrix d_in(in), d_out(out);
  swiglu(d_in.cview(in), d_out.view(out), act, layout, stream);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaStreamSynchronize(stream));
  d_out.to_host(out);

  // One output rounding plus fp32 evaluation of the activation (tanhf's last ulp near g = -4).
  const testing::Tolerance tol{1e-5, testing::unit_roundoff(dt) + 1e-5};
  const auto ref = [&](int64_t r, int64_t j) {
    const int64_t gc = layout == GateUpLayout::kStacked ? j : 2 * j + 1;
    const int64_t uc = layout == GateUpLayout::kStacked ? u + j : 2 * j;
    return act_f64(act, in.at(r, gc)) * double(in.at(r, uc));
  };
  testing::expect_close(testing::compare_host(rows, u, [&](int64_t r, int64_t j) { return out.at(r, j); }, ref, tol),
                        "swiglu out");
  int64_t pad_bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = u; c < out.ld; ++c)
      if (out.bits[size_t(r * out.ld + c)] != 0xABCD) ++pad_bad;
  EXPECT_EQ(pad_bad, 0) << "elements written in the row padding of 'out' (ld ignored?)";
}

using Param = std::tuple<DType, Activation, GateUpLayout>;

class SwigluGpu : public ::testing::TestWithParam<Param> {};

TEST_P(SwigluGpu, MatchesFp64OnHostCopies) {
  SKIP_WITHOUT_GPU();
  const auto [dt, act, layout] = GetParam();
  for (int64_t rows : {1, 3, 255, 1000})
    for (int64_t u : {8, 24, 14336}) run_case(dt, act, layout, rows, u, 0, 0);
}

TEST_P(SwigluGpu, StridedRows) {
  SKIP_WITHOUT_GPU();
  const auto [dt, act, layout] = GetParam();
  // Padding of 8 and 40 elements (the smallest and an odd multiple of the 16-byte requirement).
  for (int64_t rows : {1, 3, 255})
    for (int64_t u : {8, 24, 14336}) {
      run_case(dt, act, layout, rows, u, 8, 16);
      run_case(dt, act, layout, rows, u, 40, 8);
    }
}

TEST_P(SwigluGpu, OnAStream) {
  SKIP_WITHOUT_GPU();
  const auto [dt, act, layout] = GetParam();
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  run_case(dt, act, layout, 257, 1032, 8, 8, s);
  CUDA_OK(cudaStreamDestroy(s));
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [dt, act, layout] = info.param;
  return std::string(dtype_name(dt)) + "_" + activation_name(act) + "_" + layout_name(layout);
}

INSTANTIATE_TEST_SUITE_P(AllVariants, SwigluGpu,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kFP16),
                                            ::testing::Values(Activation::kSiLU, Activation::kGeluTanh),
                                            ::testing::Values(GateUpLayout::kStacked, GateUpLayout::kInterleaved)),
                         param_name);

// A slice of a larger buffer: rows [5, 5 + 37) of a [64, 2U] input into rows [3, 3 + 37) of a
// [48, U] output; the rows outside the slice must stay poisoned (untouched).
TEST(SwigluGpuSlices, RowOffsetViews) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const int64_t u = 40;
  HostMatrix in(DType::kBF16, 64, 2 * u);
  in.fill_uniform(rng, -3.f, 3.f);
  HostMatrix out(DType::kBF16, 48, u);
  out.poison();
  testing::DeviceMatrix d_in(in), d_out(out);
  const ConstMatrix src{static_cast<const uint16_t*>(d_in.data()) + 5 * in.ld, in.dtype, 37, 2 * u, in.ld};
  const Matrix dst{static_cast<uint16_t*>(d_out.data()) + 3 * out.ld, out.dtype, 37, u, out.ld};
  swiglu(src, dst, Activation::kSiLU, GateUpLayout::kStacked);
  CUDA_OK(cudaDeviceSynchronize());
  d_out.to_host(out);
  // Rows outside the slice expect the poison (NaN) back; the rest as in run_case.
  const auto ref = [&](int64_t r, int64_t j) {
    if (r < 3 || r >= 40) return std::nan("");
    return act_f64(Activation::kSiLU, in.at(r + 2, j)) * double(in.at(r + 2, u + j));
  };
  testing::expect_close(testing::compare_host(out.rows, u, [&](int64_t r, int64_t j) { return out.at(r, j); }, ref,
                                              testing::Tolerance{1e-5, testing::unit_roundoff(DType::kBF16) + 1e-5}),
                        "swiglu out (NaN rows outside the slice)");
}

// The kernels evaluate act() from the special-function unit's ex2 and rcp (common/activation.cuh:
// gated_act_fast). Gates at the edges of those approximations, against fp64: +-Inf (SiLU and GELU
// of +Inf are +Inf, of -Inf NaN, as the accurate forms give), NaN, the range where 1 + e^-g passes
// 2^126 (the approximate division returns 0 there; the true value is ~1e-37, inside atol), large
// finite magnitudes and values near 0; every column of a row holds one of them, in both dtypes.
TEST(SwigluGpuEdges, ExtremeAndNonFiniteGates) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> gates = {inf,   -inf, std::nanf(""), -100.f, -88.5f, -87.5f, -30.f, -10.f,
                                    -1.f,  -1e-3f, 1e-3f,        0.5f,   3.f,    10.f,   30.f,  100.f};
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (Activation act : {Activation::kSiLU, Activation::kGeluTanh}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + activation_name(act));
      const int64_t rows = 3, u = 64;
      HostMatrix in(dt, rows, 2 * u);
      in.fill_uniform(rng, 0.25f, 2.f);  // up: never zero (inf * 0 would make NaN on both sides)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < u; ++j) {
          in.set(r, j, gates[size_t(j + r) % gates.size()]);
          if (j % 3 == 0) in.set(r, u + j, -in.at(r, u + j));
        }
      HostMatrix out(dt, rows, u);
      out.poison();
      testing::DeviceMatrix d_in(in), d_out(out);
      swiglu(d_in.cview(in), d_out.view(out), act, GateUpLayout::kStacked);
      CUDA_OK(cudaDeviceSynchronize());
      d_out.to_host(out);
      const auto ref = [&](int64_t r, int64_t j) { return act_f64(act, in.at(r, j)) * double(in.at(r, u + j)); };
      testing::expect_close(testing::compare_host(rows, u, [&](int64_t r, int64_t j) { return out.at(r, j); }, ref,
                                                  testing::Tolerance{1e-5, testing::unit_roundoff(dt) + 1e-5}),
                            "swiglu out (extreme gates)");
    }
}

}  // namespace
}  // namespace blockfuse
