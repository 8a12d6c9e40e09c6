// swiglu()'s argument errors in every dtype x layout combination (test_validation.cpp covers each
// check once, in bf16 and mostly the stacked layout): every bad call throws blockfuse::Error whose
// message starts with "blockfuse::swiglu", names the argument in quotes, shows the bad value and says
// what is required — before any CUDA call, so these run on CPU-only machines (CI). The pointers
// are fake, 256-byte-aligned addresses that are never dereferenced.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "blockfuse/swiglu.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

using Param = std::tuple<DType, GateUpLayout>;

class SwigluArgs : public ::testing::TestWithParam<Param> {
 protected:
  // A valid call (M = 7, U = 48) that each check breaks in one way.
  struct Call {
    ConstMatrix in;
    Matrix out;
    Activation act = Activation::kGeluTanh;
    GateUpLayout layout;
    void operator()() const { swiglu(in, out, act, layout); }
  };
  Call valid() const {
    const auto [dt, layout] = GetParam();
    Call c;
    c.in = ConstMatrix{fake(1), dt, 7, 96, 104};
    c.out = Matrix{fake(2), dt, 7, 48, 56};
    c.layout = layout;
    return c;
  }
  DType other_dtype() const { return std::get<0>(GetParam()) == DType::kBF16 ? DType::kFP16 : DType::kBF16; }
};

TEST_P(SwigluArgs, MessageNamesTheFunction) {
  Call c = valid();
  c.in.cols = 90;
  try {
    c();
    FAIL() << "no error for gate_up.cols = 90";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("blockfuse::swiglu", 0), 0u) << e.what();
  }
}

TEST_P(SwigluArgs, Shapes) {
  { Call c = valid(); c.in.cols = 98; expect_arg_error(c, "gate_up", "98"); }   // != 2U
  { Call c = valid(); c.in.cols = 48; expect_arg_error(c, "gate_up", "48"); }   // == U, not 2U
  { Call c = valid(); c.out.rows = 8; expect_arg_error(c, "out", "8"); }        // rows differ
  { Call c = valid(); c.in.rows = 6; expect_arg_error(c, "out", "7"); }         // out is the one named
  { Call c = valid(); c.out.cols = 20; c.out.ld = 24; c.in.cols = 40; c.in.ld = 40;
    expect_arg_error(c, "out", "20"); }                                         // U % 8 != 0
  { Call c = valid(); c.out.cols = -8; expect_arg_error(c, "out", "-8"); }
  { Call c = valid(); c.in.rows = c.out.rows = -1; expect_arg_error(c, "gate_up", "-1"); }
  { Call c = valid(); c.out.ld = 40; expect_arg_error(c, "out", "40"); }       // ld < cols
  { Call c = valid(); c.in.ld = 0; expect_arg_error(c, "gate_up", "0"); }
}

TEST_P(SwigluArgs, DtypesAndCodes) {
  { Call c = valid(); c.out.dtype = other_dtype(); expect_arg_error(c, "out", dtype_name(other_dtype())); }
  { Call c = valid(); c.in.dtype = static_cast<DType>(7); expect_arg_error(c, "gate_up", "7"); }
  { Call c = valid(); c.act = static_cast<Activation>(-1); expect_arg_error(c, "activation", "-1"); }
  { Call c = valid(); c.layout = static_cast<GateUpLayout>(2); expect_arg_error(c, "layout", "2"); }
}

TEST_P(SwigluArgs, AlignmentAndStride) {
  // 16-byte vectors: pointers 16-byte aligned, row strides multiples of 8 elements.
  { Call c = valid(); c.in.data = static_cast<const char*>(fake(1)) + 8; expect_arg_error(c, "gate_up", "aligned"); }
  { Call c = valid(); c.out.data = static_cast<char*>(fake(2)) + 6; expect_arg_error(c, "out", "aligned"); }
  { Call c = valid(); c.in.ld = 100; expect_arg_error(c, "gate_up", "100"); }
  { Call c = valid(); c.out.ld = 52; expect_arg_error(c, "out", "52"); }
}

TEST_P(SwigluArgs, NullPointers) {
  { Call c = valid(); c.in.data = nullptr; expect_arg_error(c, "gate_up", "null"); }
  { Call c = valid(); c.out.data = nullptr; expect_arg_error(c, "out", "null"); }
}

TEST_P(SwigluArgs, EmptyProblemsAreNoOps) {
  // Zero rows (a batch with no tokens) and zero columns return before any pointer is inspected.
  { Call c = valid(); c.in.rows = c.out.rows = 0; EXPECT_NO_THROW(c()); }
  { Call c = valid(); c.in.rows = c.out.rows = 0; c.in.data = nullptr; c.out.data = nullptr; EXPECT_NO_THROW(c()); }
  { Call c = valid(); c.in.cols = 0; c.out.cols = 0; EXPECT_NO_THROW(c()); }
}

TEST_P(SwigluArgs, HostPointerIsRejected) {
  // A host buffer is not device memory: named before anything launches, with or without a GPU.
  testing::HostMatrix h(std::get<0>(GetParam()), 7, 96, 104);
  Call c = valid();
  c.in = h.view();
  expect_arg_error(c, "gate_up", "device memory");
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_" + layout_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllVariants, SwigluArgs,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kFP16),
                                            ::testing::Values(GateUpLayout::kStacked, GateUpLayout::kInterleaved)),
                         param_name);

}  // namespace
}  // namespace blockfuse
