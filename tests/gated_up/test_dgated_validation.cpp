// Every argument check of gated_mlp_dgated() that needs no device: each bad call throws
// blockfuse::Error naming the argument, before anything is launched (fake, never-dereferenced
// addresses, as in test_validation.cpp). The device-memory and overlap checks are in
// test_dgated_gpu.cu.
#include <gtest/gtest.h>

#include <cstdint>

#include "blockfuse/gated_up.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7f0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

// A valid call (M = 16, N = 64, U = 32) that each test breaks in one way.
struct Call {
  ConstMatrix dy{fake(0), DType::kBF16, 16, 64, 64};
  ConstMatrix w_down{fake(1), DType::kBF16, 64, 32, 32};
  ConstMatrix z{fake(2), DType::kBF16, 16, 64, 64};
  Matrix dz{fake(3), DType::kBF16, 16, 64, 64};
  Matrix h{fake(4), DType::kBF16, 16, 32, 32};
  Activation act = Activation::kSiLU;
  void operator()() const { gated_mlp_dgated(dy, w_down, z, dz, h, act); }
};

TEST(GatedMlpDgatedValidation, ShapesAndDtypes) {
  { Call c; c.w_down.rows = 72; expect_arg_error(c, "w_down", "72"); }             // w_down.rows != N
  { Call c; c.z.cols = 66; c.z.ld = 72; expect_arg_error(c, "z", "66"); }          // z.cols != 2U
  { Call c; c.z.rows = 15; expect_arg_error(c, "z", "15"); }
  { Call c; c.dz.rows = 17; expect_arg_error(c, "dz", "17"); }
  { Call c; c.dz.cols = 32; expect_arg_error(c, "dz", "32"); }
  { Call c; c.h.cols = 24; expect_arg_error(c, "h", "24"); }
  { Call c; c.h.rows = 8; expect_arg_error(c, "h", "8"); }
  { Call c; c.dy.dtype = DType::kFP16; expect_arg_error(c, "w_down", "bf16"); }    // w_down differs from dy
  { Call c; c.z.dtype = DType::kFP16; expect_arg_error(c, "z", "fp16"); }
  { Call c; c.dz.dtype = DType::kFP16; expect_arg_error(c, "dz", "fp16"); }
  { Call c; c.h.dtype = DType::kFP16; expect_arg_error(c, "h", "fp16"); }
  { Call c; c.act = static_cast<Activation>(5); expect_arg_error(c, "activation", "5"); }
  { Call c; c.dy.data = nullptr; expect_arg_error(c, "dy", "null"); }
  { Call c; c.dz.ld = 32; expect_arg_error(c, "dz", "32"); }                       // ld < cols
}

TEST(GatedMlpDgatedValidation, VectorWidthAndAlignment) {
  { Call c; c.dy.cols = 60; c.w_down.rows = 60; expect_arg_error(c, "dy", "60"); }  // N % 8
  {
    Call c;  // U % 8
    c.w_down.cols = 28;
    c.z.cols = c.dz.cols = 56;
    c.h.cols = 28;
    expect_arg_error(c, "w_down", "28");
  }
  { Call c; c.dy.ld = 68; expect_arg_error(c, "dy", "68"); }                         // ld % 8
  { Call c; c.z.ld = 68; expect_arg_error(c, "z", "68"); }
  { Call c; c.h.ld = 36; expect_arg_error(c, "h", "36"); }
  { Call c; c.dz.data = static_cast<char*>(fake(3)) + 8; expect_arg_error(c, "dz", "16"); }  // 16-byte aligned
  { Call c; c.w_down.data = static_cast<char*>(fake(1)) + 2; expect_arg_error(c, "w_down", "16"); }
}

// M == 0 is a no-op whatever the pointers; h may be absent.
TEST(GatedMlpDgatedValidation, EmptyAndAbsent) {
  Call c;
  c.dy.rows = c.z.rows = c.dz.rows = c.h.rows = 0;
  c.dy.data = c.z.data = c.dz.data = c.h.data = nullptr;
  EXPECT_NO_THROW(c());
  c.h = Matrix{};
  EXPECT_NO_THROW(c());
}

}  // namespace
}  // namespace blockfuse
