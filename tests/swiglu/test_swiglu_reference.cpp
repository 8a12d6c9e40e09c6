// The swiglu CPU reference (src/swiglu/reference.*) against hand-computed values, and swiglu_fp8()'s
// argument errors, which run before any CUDA call (CPU-only machines, CI). Fake pointers are
// 256-byte-aligned addresses that are never dereferenced.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "blockfuse/swiglu.h"
#include "common/fp8_host.h"
#include "common/host_float.h"
#include "testing/gtest/gtest_util.h"
#include "swiglu/reference.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;
using testing::HostMatrix;

double silu(double g) { return g / (1.0 + std::exp(-g)); }

// One row, U = 2: gate = (1, -2), up = (3, 0.5), exactly representable in bf16.
HostMatrix one_row(GateUpLayout layout) {
  HostMatrix m(DType::kBF16, 1, 4);
  if (layout == GateUpLayout::kStacked) {
    m.set(0, 0, 1.0f); m.set(0, 1, -2.0f); m.set(0, 2, 3.0f); m.set(0, 3, 0.5f);
  } else {  // up_0, gate_0, up_1, gate_1
    m.set(0, 0, 3.0f); m.set(0, 1, 1.0f); m.set(0, 2, 0.5f); m.set(0, 3, -2.0f);
  }
  return m;
}

TEST(SwigluReference, HandComputedBothLayouts) {
  for (auto layout : {GateUpLayout::kStacked, GateUpLayout::kInterleaved}) {
    const HostMatrix in = one_row(layout);
    float v[2];
    swiglu_reference_host_f32(in.view(), v, 2, Activation::kSiLU, layout);
    EXPECT_NEAR(v[0], silu(1.0) * 3.0, 1e-6) << layout_name(layout);
    EXPECT_NEAR(v[1], silu(-2.0) * 0.5, 1e-6) << layout_name(layout);
    HostMatrix out(DType::kBF16, 1, 2);
    swiglu_reference_host(in.view(), out.view(), Activation::kSiLU, layout);
    EXPECT_EQ(out.at(0, 0), host::bf16_to_float(host::float_to_bf16(v[0])));
    EXPECT_EQ(out.at(0, 1), host::bf16_to_float(host::float_to_bf16(v[1])));
  }
  // GELU-tanh at g = 1: 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.841192
  const HostMatrix in = one_row(GateUpLayout::kStacked);
  float v[2];
  swiglu_reference_host_f32(in.view(), v, 2, Activation::kGeluTanh, GateUpLayout::kStacked);
  EXPECT_NEAR(v[0], 0.841192 * 3.0, 1e-5);
}

TEST(SwigluReference, Fp8StaticAndDynamic) {
  const HostMatrix in = one_row(GateUpLayout::kStacked);
  float v[2];
  swiglu_reference_host_f32(in.view(), v, 2, Activation::kSiLU, GateUpLayout::kStacked);
  uint8_t q[2];
  float s = 0.25f;
  swiglu_fp8_reference_host(in.view(), q, 2, Fp8ScaleMode::kStaticPerTensor, &s, Activation::kSiLU, GateUpLayout::kStacked);
  EXPECT_EQ(s, 0.25f);  // the static scale is read, not written
  EXPECT_EQ(q[0], host::float_to_fp8_e4m3(v[0] / 0.25f));
  EXPECT_EQ(q[1], host::float_to_fp8_e4m3(v[1] / 0.25f));
  float scales[1] = {-1.0f};
  swiglu_fp8_reference_host(in.view(), q, 2, Fp8ScaleMode::kDynamicPerRow, scales, Activation::kSiLU, GateUpLayout::kStacked);
  const float amax = std::max(std::fabs(v[0]), std::fabs(v[1]));
  EXPECT_EQ(scales[0], amax / 448.0f);
  EXPECT_EQ(q[0], 0x7e);  // v[0] is the row's largest magnitude: exactly the top code
}

TEST(SwigluReference, Fp8DynamicExcludesNonFiniteAndHandlesZeroRows) {
  // Row 0: gate = (inf, 1), up = (1, 2): v = (inf, 2 silu(1)) -> the Inf is NaN in FP8 and does not
  // enter the amax. Row 1: up = 0 everywhere: amax 0 -> scale 1, all codes +-0.
  HostMatrix in(DType::kBF16, 2, 4);
  const float inf = std::numeric_limits<float>::infinity();
  in.set(0, 0, inf); in.set(0, 1, 1.0f); in.set(0, 2, 1.0f); in.set(0, 3, 2.0f);
  in.set(1, 0, 1.0f); in.set(1, 1, -3.0f); in.set(1, 2, 0.0f); in.set(1, 3, 0.0f);
  uint8_t q[4];
  float scales[2] = {0, 0};
  swiglu_fp8_reference_host(in.view(), q, 2, Fp8ScaleMode::kDynamicPerRow, scales, Activation::kSiLU, GateUpLayout::kStacked);
  EXPECT_EQ(q[0] & 0x7f, 0x7f);
  EXPECT_FLOAT_EQ(scales[0], float(2.0 * silu(1.0)) / 448.0f);
  EXPECT_EQ(q[1], 0x7e);
  EXPECT_EQ(scales[1], 1.0f);
  EXPECT_EQ(q[2] & 0x7f, 0);
  EXPECT_EQ(q[3] & 0x7f, 0);
}

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

struct Fp8Call {
  ConstMatrix in{fake(1), DType::kBF16, 7, 96, 104};
  Fp8Matrix out{fake(2), 7, 48, 56};
  Fp8Scale scale{Fp8ScaleMode::kDynamicPerRow, static_cast<float*>(fake(3))};
  Activation act = Activation::kSiLU;
  GateUpLayout layout = GateUpLayout::kInterleaved;
  void operator()() const { swiglu_fp8(in, out, scale, act, layout); }
};

TEST(SwigluFp8Args, EveryArgumentIsNamed) {
  { Fp8Call c; c.act = static_cast<Activation>(5); expect_arg_error(c, "activation", "5"); }
  { Fp8Call c; c.layout = static_cast<GateUpLayout>(3); expect_arg_error(c, "layout", "3"); }
  { Fp8Call c; c.in.dtype = static_cast<DType>(9); expect_arg_error(c, "gate_up", "9"); }
  { Fp8Call c; c.out.rows = 8; expect_arg_error(c, "out", "8"); }
  { Fp8Call c; c.in.cols = 94; c.in.ld = 96; expect_arg_error(c, "gate_up", "94"); }
  { Fp8Call c; c.out.cols = 20; c.out.ld = 24; c.in.cols = 40; c.in.ld = 40; expect_arg_error(c, "out", "20"); }
  { Fp8Call c; c.out.ld = 44; expect_arg_error(c, "out", "44"); }           // ld < cols
  { Fp8Call c; c.out.ld = 52; expect_arg_error(c, "out", "52"); }           // ld % 8 (8-byte stores)
  { Fp8Call c; c.out.data = static_cast<char*>(fake(2)) + 4; expect_arg_error(c, "out", "aligned"); }
  { Fp8Call c; c.out.data = nullptr; expect_arg_error(c, "out", "null"); }
  { Fp8Call c; c.in.data = static_cast<const char*>(fake(1)) + 8; expect_arg_error(c, "gate_up", "aligned"); }
  { Fp8Call c; c.scale.scale = nullptr; expect_arg_error(c, "scale", "7 floats"); }
  { Fp8Call c; c.scale.mode = Fp8ScaleMode::kStaticPerTensor; c.scale.scale = nullptr; expect_arg_error(c, "scale", "null"); }
  { Fp8Call c; c.scale.mode = static_cast<Fp8ScaleMode>(4); expect_arg_error(c, "scale", "4"); }
  { Fp8Call c; c.scale.scale = reinterpret_cast<float*>(static_cast<char*>(fake(3)) + 2); expect_arg_error(c, "scale", "aligned"); }
}

TEST(SwigluFp8Args, EmptyIsANoOpAndHostMemoryIsRejected) {
  { Fp8Call c; c.in.rows = c.out.rows = 0; EXPECT_NO_THROW(c()); }
  HostMatrix h(DType::kBF16, 7, 96, 104);
  Fp8Call c;
  c.in = h.view();
  expect_arg_error(c, "gate_up", "device memory");
}

}  // namespace
}  // namespace blockfuse
