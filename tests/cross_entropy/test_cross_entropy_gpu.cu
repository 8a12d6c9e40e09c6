// GPU tests of cross_entropy_forward_backward: loss and gradient of every element against the fp64
// reference (cross_entropy/reference.h) on fresh random logits, both dtypes, vocabularies from one
// chunk to a language model's (128256), row strides with padding (left untouched), ignored rows,
// a bad label (NaN row), the loss alone (logits unchanged), rows of -inf and a device-side scale.
// Skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "blockfuse/cross_entropy.h"
#include "cross_entropy/reference.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::DeviceBuffer;
using testing::DeviceMatrix;
using testing::HostMatrix;

struct Case {
  DType dt;
  int64_t rows, vocab, pad;
  bool grad;
  bool minus_inf_row = false;
};

void run(const Case& c) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(std::string(dtype_name(c.dt)) + " rows " + std::to_string(c.rows) + " V " + std::to_string(c.vocab) +
               (c.grad ? "" : " loss only") + " " + testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  HostMatrix x(c.dt, c.rows, c.vocab, c.vocab + c.pad);
  x.fill_uniform(rng, -6.f, 6.f);
  if (c.minus_inf_row)
    for (int64_t j = 8; j < c.vocab; ++j) x.set(1, j, -INFINITY);  // all but the first chunk masked
  std::vector<int64_t> labels(size_t(c.rows));
  std::uniform_int_distribution<int64_t> pick(0, c.vocab - 1);
  for (auto& l : labels) l = pick(rng);
  if (c.minus_inf_row) labels[1] = 3;          // a visible column
  if (c.rows > 2) labels[2] = -100;            // ignored
  if (c.rows > 3) labels[3] = c.vocab + 5;     // bad: NaN row
  const float scale = 1.f / 37.f;
  const DeviceMatrix d_x(x);
  auto d_labels = testing::to_device(labels.data(), labels.size() * sizeof(int64_t));
  auto d_scale = testing::to_device(&scale, sizeof(float));
  DeviceBuffer<float> d_loss(size_t(c.rows));
  cross_entropy_forward_backward(d_x.view(x), reinterpret_cast<const int64_t*>(d_labels.data()), -100, d_loss.data(),
                                 c.grad ? reinterpret_cast<const float*>(d_scale.data()) : nullptr);
  BF_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> loss(size_t(c.rows));
  testing::to_host(d_loss, loss.data());
  HostMatrix got(c.dt, c.rows, c.vocab, c.vocab + c.pad);
  d_x.to_host(got);

  std::vector<float> xf(size_t(c.rows * c.vocab));
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = 0; j < c.vocab; ++j) xf[size_t(r * c.vocab + j)] = x.at(r, j);
  std::vector<double> ref_loss, ref_grad;
  reference::cross_entropy(xf.data(), c.rows, c.vocab, c.vocab, labels.data(), -100, scale, ref_loss,
                           c.grad ? &ref_grad : nullptr);
  // The loss: fp32 sums of up to 128256 exponentials; the gradient: one output rounding.
  testing::expect_close(testing::compare_host(c.rows, 1, [&](int64_t r, int64_t) { return loss[size_t(r)]; },
                                              [&](int64_t r, int64_t) { return ref_loss[size_t(r)]; },
                                              testing::Tolerance{1e-4, 1e-5}),
                        "loss");
  if (c.grad) {
    testing::expect_close(
        testing::compare_host(c.rows, c.vocab, [&](int64_t r, int64_t j) { return got.at(r, j); },
                              [&](int64_t r, int64_t j) { return ref_grad[size_t(r * c.vocab + j)]; },
                              testing::Tolerance{1e-7, 2 * testing::unit_roundoff(c.dt)}),
        "gradient");
  } else {
    EXPECT_EQ(got.bits, x.bits) << "the loss alone must leave the logits as they were";
  }
  int64_t touched = 0;  // row padding keeps HostMatrix's sentinel
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = c.vocab; j < c.vocab + c.pad; ++j) touched += got.bits[size_t(r * x.ld + j)] != x.bits[size_t(r * x.ld + j)];
  EXPECT_EQ(touched, 0);
}

TEST(CrossEntropyGpu, LossAndGradient) {
  BF_SKIP_WITHOUT_GPU("cross_entropy_forward_backward");
  for (DType dt : {DType::kBF16, DType::kFP16}) {
    run({dt, 5, 8, 0, true});
    run({dt, 7, 1000, 8, true, true});
    run({dt, 33, 32000, 0, true});
    run({dt, 6, 128256, 16, true});
    run({dt, 9, 4104, 0, false});
  }
}

TEST(CrossEntropyGpu, HostMemoryIsRefused) {
  BF_SKIP_WITHOUT_GPU("cross_entropy_forward_backward");
  HostMatrix x(DType::kBF16, 4, 64);
  const DeviceMatrix d_x(x);
  std::vector<int64_t> labels(4, 1);
  DeviceBuffer<float> d_loss(4);
  testing::expect_arg_error([&] { cross_entropy_forward_backward(d_x.view(x), labels.data(), -100, d_loss.data(), nullptr); },
                            "labels");
  auto d_labels = testing::to_device(labels.data(), labels.size() * sizeof(int64_t));
  testing::expect_arg_error([&] {
    cross_entropy_forward_backward(d_x.view(x), reinterpret_cast<const int64_t*>(d_labels.data()), -100,
                                   reinterpret_cast<float*>(d_x.data()), nullptr);
  }, "loss");
}

// The compute-sanitizer set (scripts/sanitize).
TEST(CrossEntropySanitizer, SmallCases) {
  BF_SKIP_WITHOUT_GPU("cross_entropy_forward_backward");
  run({DType::kBF16, 5, 1000, 8, true, true});
  run({DType::kFP16, 3, 64, 0, false});
}

}  // namespace
}  // namespace blockfuse
