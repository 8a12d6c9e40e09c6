// GPU tests of gated_mlp_dgated (the gated MLP's fused backward through the down projection, sm90a):
// every element of dz and h against an fp64 host reference computed from the same rounded inputs
// (dh = dy · w_down in fp64, then act and act' in fp64), on fresh random inputs; outputs poisoned with
// NaN first and their row padding checked untouched; tails of the 128 x 128 tile in M and U, N not a
// multiple of the 64-deep k-block, both activations and dtypes, in place (dz over z) and not, h
// absent, and the argument errors that need device memory; GatedMlpDgatedSanitizer is the small set
// compute-sanitizer runs. Skips, saying so, without a device of
// compute capability 9.0 or without the sm90a kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "blockfuse/gated_up.h"
#include "common/activation.cuh"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::DeviceMatrix;
using testing::HostMatrix;

bool runnable() { return testing::has_cuda_device() && gated_mlp_dgated_available(); }

#define SKIP_UNLESS_RUNNABLE()                                                                           \
  do {                                                                                                   \
    BF_SKIP_WITHOUT_GPU("gated_mlp_dgated");                                                             \
    if (!runnable())                                                                                     \
      GTEST_SKIP() << "gated_mlp_dgated needs a device of compute capability 9.0 and the sm90a kernels"; \
  } while (0)

struct Case {
  int64_t m, n, u;
  DType dt;
  Activation act;
  bool in_place;
  bool want_h;
  int64_t pad = 0;  // extra columns of every row stride (multiples of 8)
};

std::string name(const Case& c) {
  return std::string(dtype_name(c.dt)) + " " + activation_name(c.act) + " M=" + std::to_string(c.m) +
         " N=" + std::to_string(c.n) + " U=" + std::to_string(c.u) + (c.in_place ? " in place" : "") +
         (c.want_h ? "" : " no h") + (c.pad ? " pad " + std::to_string(c.pad) : "");
}

void run(const Case& c) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(name(c) + " " + testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  HostMatrix dy(c.dt, c.m, c.n, c.n + c.pad), w(c.dt, c.n, c.u, c.u + c.pad), z(c.dt, c.m, 2 * c.u, 2 * c.u + c.pad);
  dy.fill_uniform(rng, -1.f, 1.f);
  const float wb = 1.f / std::sqrt(float(c.n));
  w.fill_uniform(rng, -wb, wb);
  z.fill_uniform(rng, -4.f, 4.f);  // the gate over the activation's curved range
  HostMatrix dz(c.dt, c.m, 2 * c.u, 2 * c.u + c.pad), h(c.dt, c.m, c.u, c.u + c.pad);
  dz.poison();
  h.poison();
  const DeviceMatrix d_dy(dy), d_w(w), d_z(z), d_dz(dz), d_h(h);
  const Matrix dz_view = c.in_place ? d_z.view(z) : d_dz.view(dz);
  gated_mlp_dgated(d_dy.cview(dy), d_w.cview(w), d_z.cview(z), dz_view, c.want_h ? d_h.view(h) : Matrix{}, c.act);
  BF_CUDA_OK(cudaDeviceSynchronize());
  HostMatrix got_dz(c.dt, c.m, 2 * c.u, 2 * c.u + c.pad), got_h(c.dt, c.m, c.u, c.u + c.pad);
  (c.in_place ? d_z : d_dz).to_host(got_dz);
  d_h.to_host(got_h);

  // The reference from the rounded inputs, in fp64.
  std::vector<double> ref_dz(size_t(c.m * 2 * c.u)), ref_h(size_t(c.m * c.u));
  std::vector<double> dh(size_t(c.u));
  for (int64_t r = 0; r < c.m; ++r) {
    std::fill(dh.begin(), dh.end(), 0.0);
    for (int64_t k = 0; k < c.n; ++k) {
      const double a = dy.at(r, k);
      for (int64_t j = 0; j < c.u; ++j) dh[size_t(j)] += a * double(w.at(k, j));
    }
    for (int64_t j = 0; j < c.u; ++j) {
      const double up = z.at(r, 2 * j), gate = z.at(r, 2 * j + 1);
      const double a = act_f64(c.act, gate), da = act_grad_f64(c.act, gate);
      ref_dz[size_t(r * 2 * c.u + 2 * j)] = dh[size_t(j)] * a;
      ref_dz[size_t(r * 2 * c.u + 2 * j + 1)] = dh[size_t(j)] * up * da;
      ref_h[size_t(r * c.u + j)] = a * up;
    }
  }
  // Two roundings' worth (the output's and the fast exp / reciprocal's few fp32 ulps, far below it)
  // plus an absolute term for results near zero, where dh's fp32 accumulation order sets the error.
  const testing::Tolerance tol = testing::tolerance(c.dt, 2, 1e-4);
  testing::expect_close(testing::compare_host(c.m, 2 * c.u, [&](int64_t r, int64_t j) { return got_dz.at(r, j); },
                                              [&](int64_t r, int64_t j) { return ref_dz[size_t(r * 2 * c.u + j)]; }, tol),
                        "dz");
  if (c.want_h) {
    testing::expect_close(testing::compare_host(c.m, c.u, [&](int64_t r, int64_t j) { return got_h.at(r, j); },
                                                [&](int64_t r, int64_t j) { return ref_h[size_t(r * c.u + j)]; }, tol),
                          "h");
  }
  // Nothing written outside the outputs: the row padding of dz and h (HostMatrix's sentinel) and
  // all of h when it is absent (poisoned) keep the bits they were uploaded with.
  int64_t touched = 0;
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t j = c.want_h ? c.u : 0; j < c.u + c.pad; ++j)
      touched += got_h.bits[size_t(r * h.ld + j)] != h.bits[size_t(r * h.ld + j)];
    const HostMatrix& dz_before = c.in_place ? z : dz;
    for (int64_t j = 2 * c.u; j < 2 * c.u + c.pad; ++j)
      touched += got_dz.bits[size_t(r * dz.ld + j)] != dz_before.bits[size_t(r * dz.ld + j)];
  }
  EXPECT_EQ(touched, 0) << "elements written outside dz and h";
}

TEST(GatedMlpDgatedGpu, ShapesDtypesActivations) {
  SKIP_UNLESS_RUNNABLE();
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (Activation act : {Activation::kSiLU, Activation::kGeluTanh}) {
      run({1, 64, 8, dt, act, false, true});
      run({7, 72, 136, dt, act, true, true});        // U a tile and a pair-block past 128
      run({129, 520, 264, dt, act, false, true, 8});  // M one past a tile, N not a multiple of 64, padded rows
    }
}

TEST(GatedMlpDgatedGpu, InPlaceAndWithoutH) {
  SKIP_UNLESS_RUNNABLE();
  run({300, 1024, 776, DType::kBF16, Activation::kSiLU, true, false});
  run({300, 1024, 776, DType::kBF16, Activation::kSiLU, false, true});
  run({513, 256, 1032, DType::kFP16, Activation::kGeluTanh, true, true, 16});
}

TEST(GatedMlpDgatedGpu, EmptyCallLaunchesNothing) {
  SKIP_UNLESS_RUNNABLE();
  HostMatrix w(DType::kBF16, 64, 32);
  const DeviceMatrix d_w(w);
  EXPECT_NO_THROW(gated_mlp_dgated(ConstMatrix{nullptr, DType::kBF16, 0, 64, 64}, d_w.cview(w),
                                   ConstMatrix{nullptr, DType::kBF16, 0, 64, 64}, Matrix{nullptr, DType::kBF16, 0, 64, 64},
                                   Matrix{}, Activation::kSiLU));
  BF_CUDA_OK(cudaDeviceSynchronize());
}

// The compute-sanitizer set (scripts/sanitize): one small case of each form.
TEST(GatedMlpDgatedSanitizer, SmallCases) {
  SKIP_UNLESS_RUNNABLE();
  run({33, 64, 136, DType::kBF16, Activation::kSiLU, true, true});
  run({5, 72, 8, DType::kFP16, Activation::kGeluTanh, false, false, 8});
}

// Overlaps and host memory, which only real device buffers can show: each named, nothing launched.
TEST(GatedMlpDgatedGpu, OverlapAndHostMemoryErrors) {
  SKIP_UNLESS_RUNNABLE();
  HostMatrix dy(DType::kBF16, 16, 64), w(DType::kBF16, 64, 32), z(DType::kBF16, 16, 64), h(DType::kBF16, 16, 32);
  const DeviceMatrix d_dy(dy), d_w(w), d_z(z), d_h(h);
  HostMatrix big(DType::kBF16, 16, 128);
  const DeviceMatrix d_big(big);
  const Matrix dz_shifted{static_cast<uint16_t*>(d_z.data()) + 8, DType::kBF16, 16, 64, 64};  // overlaps z, not equal
  testing::expect_arg_error([&] { gated_mlp_dgated(d_dy.cview(dy), d_w.cview(w), d_z.cview(z), dz_shifted, d_h.view(h),
                                                   Activation::kSiLU); }, "dz");
  const Matrix h_over_z{d_z.data(), DType::kBF16, 16, 32, 32};
  testing::expect_arg_error([&] { gated_mlp_dgated(d_dy.cview(dy), d_w.cview(w), d_z.cview(z), d_z.view(z), h_over_z,
                                                   Activation::kSiLU); }, "h");
  const Matrix dz_over_dy{d_big.data(), DType::kBF16, 16, 64, 128};
  const ConstMatrix dy_in_big{static_cast<uint16_t*>(d_big.data()) + 64, DType::kBF16, 16, 64, 128};
  testing::expect_arg_error([&] { gated_mlp_dgated(dy_in_big, d_w.cview(w), d_z.cview(z), dz_over_dy, Matrix{},
                                                   Activation::kSiLU); }, "dz");
  testing::expect_arg_error([&] { gated_mlp_dgated(dy.view(), d_w.cview(w), d_z.cview(z), d_z.view(z), Matrix{},
                                                   Activation::kSiLU); }, "dy");
}

}  // namespace
}  // namespace blockfuse
