// Every argument check of gated_up() and swiglu(): each bad call throws blockfuse::Error whose
// message names the argument (in quotes), shows its value and says what is required — before
// anything is launched. Runs without a GPU: fake, never-dereferenced device addresses are used and
// shape/dtype/alignment errors are detected before any CUDA call.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "blockfuse/gated_up.h"
#include "blockfuse/swiglu.h"
#include "support/test_util.h"

namespace blockfuse {
namespace {

// Fake device addresses, 256-byte aligned, far apart, never dereferenced.
void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7f0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

void expect_error(const std::function<void()>& fn, const std::string& arg, const std::string& also = "") {
  try {
    fn();
    ADD_FAILURE() << "expected blockfuse::Error naming '" << arg << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + arg + "'"), std::string::npos) << "message does not name '" << arg << "': " << what;
    EXPECT_NE(what.find("required"), std::string::npos) << "message does not say what is required: " << what;
    if (!also.empty()) EXPECT_NE(what.find(also), std::string::npos) << "message lacks '" << also << "': " << what;
  }
}

struct Call {
  int64_t M = 16, K = 64, U = 32;
  ConstMatrix x{fake(0), DType::kBF16, 16, 64, 64};
  ConstMatrix w{fake(1), DType::kBF16, 64, 64, 64};
  Matrix out{fake(2), DType::kBF16, 16, 32, 32};
  Activation act = Activation::kSiLU;
  GatedUpOptions opt;
  void operator()() const { gated_up(x, w, out, act, nullptr, opt); }
};

TEST(GatedUpValidation, ShapesAndDtypes) {
  { Call c; c.w.rows = 66; expect_error(c, "w", "66"); }             // w.rows != 2U
  { Call c; c.w.cols = 72; c.w.ld = 72; expect_error(c, "w", "72"); } // w.cols != K
  { Call c; c.out.rows = 15; expect_error(c, "out", "15"); }          // out.rows != M
  { Call c; c.w.dtype = DType::kFP16; expect_error(c, "w", "fp16"); }
  { Call c; c.out.dtype = DType::kFP16; expect_error(c, "out", "fp16"); }
  { Call c; c.x.dtype = static_cast<DType>(7); expect_error(c, "x", "7"); }
  { Call c; c.x.rows = -1; c.out.rows = -1; expect_error(c, "x", "-1"); }
  { Call c; c.x.ld = 32; expect_error(c, "x", "32"); }               // ld < cols
  { Call c; c.x.data = nullptr; expect_error(c, "x", "null"); }
}

TEST(GatedUpValidation, Alignment) {
  { Call c; c.x.cols = c.w.cols = 60; c.x.ld = c.w.ld = 64; expect_error(c, "x", "60"); }  // K % 8
  { Call c; c.x.cols = c.w.cols = 4; c.x.ld = c.w.ld = 8; expect_error(c, "x", "K >= 8"); }
  { Call c; c.out.cols = 30; c.w.rows = 60; expect_error(c, "out", "30"); }              // U % 8
  { Call c; c.x.ld = 68; expect_error(c, "x", "68"); }                                    // ld % 8
  { Call c; c.out.ld = 36; expect_error(c, "out", "36"); }
  { Call c; c.w.data = static_cast<const char*>(fake(1)) + 2; expect_error(c, "w", "aligned"); }
  { Call c; c.out.data = static_cast<char*>(fake(2)) + 8; expect_error(c, "out", "aligned"); }
}

TEST(GatedUpValidation, ActivationAndOptions) {
  { Call c; c.act = static_cast<Activation>(5); expect_error(c, "activation", "5"); }
  { Call c; c.opt.tile_config = 99; expect_error(c, "options.tile_config", "99"); }
  { Call c; c.opt.tile_config = -2; expect_error(c, "options.tile_config", "-2"); }
  { Call c; c.opt.kernel = static_cast<GatedUpKernel>(9); expect_error(c, "options.kernel", "9"); }
}

TEST(GatedUpValidation, HostPointerIsRejected) {
  // A valid shape with host memory: rejected as not device memory (with or without a GPU present;
  // on a machine without one the pointer cannot be inspected, which is reported the same way).
  test::HostMatrix hx(DType::kBF16, 16, 64);
  Call c;
  c.x = hx.view();
  expect_error(c, "x", "device memory");
}

TEST(GatedUpValidation, EmptyProblemIsANoOp) {
  Call c;
  c.M = 0;
  c.x.rows = 0;
  c.out.rows = 0;
  EXPECT_NO_THROW(c());  // M == 0: nothing launched, no device needed
}

struct SwigluCall {
  ConstMatrix in{fake(3), DType::kBF16, 4, 64, 64};
  Matrix out{fake(4), DType::kBF16, 4, 32, 32};
  Activation act = Activation::kSiLU;
  GateUpLayout layout = GateUpLayout::kStacked;
  void operator()() const { swiglu(in, out, act, layout); }
};

TEST(SwigluValidation, Arguments) {
  { SwigluCall c; c.in.cols = 48; c.in.ld = 48; expect_error(c, "gate_up", "48"); }
  { SwigluCall c; c.out.rows = 5; expect_error(c, "out", "5"); }
  { SwigluCall c; c.out.cols = 28; c.in.cols = 56; c.in.ld = 56; expect_error(c, "out", "28"); }
  { SwigluCall c; c.out.dtype = DType::kFP16; expect_error(c, "out", "fp16"); }
  { SwigluCall c; c.layout = static_cast<GateUpLayout>(3); expect_error(c, "layout", "3"); }
  { SwigluCall c; c.act = static_cast<Activation>(3); expect_error(c, "activation", "3"); }
  { SwigluCall c; c.in.data = static_cast<const char*>(fake(3)) + 4; expect_error(c, "gate_up", "aligned"); }
  { SwigluCall c; c.out.ld = 33; expect_error(c, "out", "33"); }
}

}  // namespace
}  // namespace blockfuse
