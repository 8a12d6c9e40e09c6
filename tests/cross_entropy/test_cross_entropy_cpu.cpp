// CPU tests of the cross-entropy family: the launch shape's rule, the fp64 reference against the
// definition, and every argument check (fake, never-dereferenced device addresses, as in
// tests/gated_up/test_validation.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "blockfuse/cross_entropy.h"
#include "cross_entropy/config.h"
#include "cross_entropy/reference.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

TEST(CrossEntropyConfig, ThreadsGrowWithTheRow) {
  EXPECT_EQ(detail::cross_entropy_threads(128256), 512);  // Llama-3
  EXPECT_EQ(detail::cross_entropy_threads(32000), 256);   // Llama-2, Mistral
  EXPECT_EQ(detail::cross_entropy_threads(2048), 128);
  EXPECT_EQ(detail::cross_entropy_threads(8), 64);
  int last = 0;
  for (int64_t v = 8; v <= (int64_t{1} << 20); v *= 2) {
    const int t = detail::cross_entropy_threads(v);
    EXPECT_GE(t, last);
    EXPECT_EQ(t % 32, 0);
    EXPECT_LE(t, 512);
    last = t;
  }
}

TEST(CrossEntropyReference, MatchesTheDefinition) {
  const std::vector<float> x = {1.f, 2.f, 3.f, -1.f, 0.5f, 0.5f, 0.5f, 0.5f, 9.f, -9.f, 0.f, 1.f};
  const std::vector<int64_t> labels = {2, -100, 7};  // a row, an ignored row, a bad label
  std::vector<double> loss, grad;
  reference::cross_entropy(x.data(), 3, 4, 4, labels.data(), -100, 0.5, loss, &grad);
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(-1.0));
  EXPECT_NEAR(loss[0], lse0 - 3.0, 1e-12);
  EXPECT_NEAR(grad[2], (std::exp(3.0 - lse0) - 1.0) * 0.5, 1e-12);
  EXPECT_NEAR(grad[0], std::exp(1.0 - lse0) * 0.5, 1e-12);
  EXPECT_EQ(loss[1], 0.0);
  EXPECT_EQ(grad[4], 0.0);
  EXPECT_TRUE(std::isnan(loss[2]));
  EXPECT_TRUE(std::isnan(grad[8]));
}

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7f0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

struct Call {
  Matrix logits{fake(0), DType::kBF16, 16, 64, 64};
  const int64_t* labels = static_cast<const int64_t*>(fake(1));
  float* loss = static_cast<float*>(fake(2));
  const float* scale = static_cast<const float*>(fake(3));
  void operator()() const { cross_entropy_forward_backward(logits, labels, -100, loss, scale); }
};

TEST(CrossEntropyValidation, EveryArgument) {
  { Call c; c.logits.cols = 60; c.logits.ld = 64; expect_arg_error(c, "logits", "60"); }  // V % 8
  { Call c; c.logits.ld = 68; c.logits.cols = 64; expect_arg_error(c, "logits", "68"); }  // ld % 8
  { Call c; c.logits.dtype = static_cast<DType>(7); expect_arg_error(c, "logits", "7"); }
  { Call c; c.logits.ld = 32; expect_arg_error(c, "logits", "32"); }                        // ld < cols
  { Call c; c.logits.data = static_cast<char*>(fake(0)) + 8; expect_arg_error(c, "logits", "16"); }
  { Call c; c.labels = reinterpret_cast<const int64_t*>(static_cast<char*>(fake(1)) + 4); expect_arg_error(c, "labels", "8"); }
  { Call c; c.loss = reinterpret_cast<float*>(static_cast<char*>(fake(2)) + 2); expect_arg_error(c, "loss", "4"); }
  { Call c; c.labels = nullptr; expect_arg_error(c, "labels", "null"); }
  { Call c; c.loss = nullptr; expect_arg_error(c, "loss", "null"); }
  { Call c; c.logits.rows = 0; c.logits.data = nullptr; c.labels = nullptr; c.loss = nullptr; EXPECT_NO_THROW(c()); }
}

}  // namespace
}  // namespace blockfuse
