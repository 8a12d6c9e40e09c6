// add_rmsnorm() and add_rmsnorm_fp8() argument errors, both dtypes: every bad call throws
// blockfuse::Error whose message starts with "blockfuse::add_rmsnorm", names the argument in quotes,
// shows the bad value and says what is required — before any CUDA call, so these run on CPU-only
// machines (CI). The pointers are fake, 4 GiB-apart, 256-byte-aligned addresses that are never
// dereferenced: a valid call gets as far as the device-memory check of 'x', which fails for them
// (with or without a GPU) — that is how the tests see an accepted argument combination.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "blockfuse/add_rmsnorm.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

char* fake(int i) { return reinterpret_cast<char*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

class AddRmsNormArgs : public ::testing::TestWithParam<DType> {
 protected:
  // A valid call (M = 7, H = 48, strided views) that each check breaks in one way.
  struct Call {
    ConstMatrix x, residual, weight;
    Matrix residual_out, out;
    Fp8Matrix out8;
    Fp8Scale scale;
    RmsNormOptions opt;
    bool fp8 = false;
    void operator()() const {
      if (fp8)
        add_rmsnorm_fp8(x, residual, weight, residual_out, out8, scale, opt);
      else
        add_rmsnorm(x, residual, weight, residual_out, out, opt);
    }
  };
  Call valid(bool fp8 = false, Fp8ScaleMode mode = Fp8ScaleMode::kStaticPerTensor) const {
    const DType dt = GetParam();
    Call c;
    c.x = ConstMatrix{fake(1), dt, 7, 48, 56};
    c.residual = ConstMatrix{fake(2), dt, 7, 48, 64};
    c.weight = ConstMatrix{fake(3), dt, 1, 48, 48};
    c.residual_out = Matrix{fake(4), dt, 7, 48, 56};
    c.out = Matrix{fake(5), dt, 7, 48, 48};
    c.out8 = Fp8Matrix{fake(6), 7, 48, 56};
    c.scale = Fp8Scale{mode, reinterpret_cast<float*>(fake(7))};
    c.fp8 = fp8;
    return c;
  }
  DType other() const { return GetParam() == DType::kBF16 ? DType::kFP16 : DType::kBF16; }
  const char* fn(bool fp8) const { return fp8 ? "blockfuse::add_rmsnorm_fp8:" : "blockfuse::add_rmsnorm:"; }
};

TEST_P(AddRmsNormArgs, ValidCallsReachTheDeviceCheck) {
  for (bool fp8 : {false, true}) {
    { Call c = valid(fp8); expect_arg_error(c, "x", "device memory"); }
    { Call c = valid(fp8, Fp8ScaleMode::kDynamicPerRow); expect_arg_error(c, "x", "device memory"); }
    // Residual absent, residual_out absent, both: empty views are accepted.
    { Call c = valid(fp8); c.residual = ConstMatrix{}; expect_arg_error(c, "x", "device memory"); }
    { Call c = valid(fp8); c.residual_out = Matrix{}; expect_arg_error(c, "x", "device memory"); }
    { Call c = valid(fp8); c.residual = ConstMatrix{}; c.residual_out = Matrix{}; expect_arg_error(c, "x", "device memory"); }
    // In place on the residual: residual_out aliases residual exactly.
    { Call c = valid(fp8); c.residual_out = Matrix{fake(2), GetParam(), 7, 48, 64}; expect_arg_error(c, "x", "device memory"); }
    // The static scale is only read: it may sit inside an input.
    if (fp8) { Call c = valid(true); c.scale.scale = reinterpret_cast<float*>(fake(1)); expect_arg_error(c, "x", "device memory"); }
  }
}

TEST_P(AddRmsNormArgs, MessageNamesTheFunction) {
  for (bool fp8 : {false, true}) {
    Call c = valid(fp8);
    c.x.cols = 44;
    try {
      c();
      ADD_FAILURE() << "no error for x.cols = 44";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(fn(fp8), 0), 0u) << e.what();
    }
  }
}

TEST_P(AddRmsNormArgs, Eps) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (bool fp8 : {false, true})
    for (float e : {0.0f, -1e-6f, nan, inf}) { Call c = valid(fp8); c.opt.eps = e; expect_arg_error(c, "opt.eps"); }
}

TEST_P(AddRmsNormArgs, X) {
  for (bool fp8 : {false, true}) {
    { Call c = valid(fp8); c.x.cols = 44; expect_arg_error(c, "x", "44"); }  // H % 8
    { Call c = valid(fp8); c.x.cols = 0; expect_arg_error(c, "x", "H > 0"); }
    { Call c = valid(fp8); c.x.rows = -1; expect_arg_error(c, "x", "-1"); }
    { Call c = valid(fp8); c.x.ld = 40; expect_arg_error(c, "x", "40"); }    // ld < cols
    { Call c = valid(fp8); c.x.ld = 60; expect_arg_error(c, "x", "60"); }    // ld % 8
    { Call c = valid(fp8); c.x.data = fake(1) + 8; expect_arg_error(c, "x", "aligned"); }
    { Call c = valid(fp8); c.x.data = nullptr; expect_arg_error(c, "x", "null"); }
    { Call c = valid(fp8); c.x.dtype = static_cast<DType>(5); expect_arg_error(c, "x", "5"); }
  }
}

TEST_P(AddRmsNormArgs, Residual) {
  for (bool fp8 : {false, true}) {
    { Call c = valid(fp8); c.residual.rows = 6; expect_arg_error(c, "residual", "6"); }
    { Call c = valid(fp8); c.residual.cols = 40; expect_arg_error(c, "residual", "40"); }
    { Call c = valid(fp8); c.residual.dtype = other(); expect_arg_error(c, "residual", dtype_name(other())); }
    { Call c = valid(fp8); c.residual.data = fake(2) + 4; expect_arg_error(c, "residual", "aligned"); }
    { Call c = valid(fp8); c.residual.ld = 52; expect_arg_error(c, "residual", "52"); }
    { Call c = valid(fp8); c.residual.data = nullptr; expect_arg_error(c, "residual", "null"); }  // rows 7: not "absent"
  }
}

TEST_P(AddRmsNormArgs, Weight) {
  for (bool fp8 : {false, true}) {
    { Call c = valid(fp8); c.weight.rows = 2; expect_arg_error(c, "weight", "[2, 48]"); }
    { Call c = valid(fp8); c.weight.cols = 40; c.weight.ld = 40; expect_arg_error(c, "weight", "[1, 40]"); }
    { Call c = valid(fp8); c.weight.dtype = other(); expect_arg_error(c, "weight", dtype_name(other())); }
    { Call c = valid(fp8); c.weight.data = fake(3) + 2; expect_arg_error(c, "weight", "aligned"); }
    { Call c = valid(fp8); c.weight.data = nullptr; expect_arg_error(c, "weight", "null"); }
  }
}

TEST_P(AddRmsNormArgs, ResidualOut) {
  const DType dt = GetParam();
  for (bool fp8 : {false, true}) {
    { Call c = valid(fp8); c.residual_out.rows = 8; expect_arg_error(c, "residual_out", "8"); }
    { Call c = valid(fp8); c.residual_out.cols = 56; expect_arg_error(c, "residual_out", "56"); }
    { Call c = valid(fp8); c.residual_out.dtype = other(); expect_arg_error(c, "residual_out", dtype_name(other())); }
    { Call c = valid(fp8); c.residual_out.data = fake(4) + 8; expect_arg_error(c, "residual_out", "aligned"); }
    { Call c = valid(fp8); c.residual_out.ld = 60; expect_arg_error(c, "residual_out", "60"); }
    { Call c = valid(fp8); c.residual_out.data = nullptr; expect_arg_error(c, "residual_out", "null"); }
    // Overlaps other than the exact in-place alias: shifted by a row, a different stride, x, weight.
    { Call c = valid(fp8); c.residual_out = Matrix{fake(2) + 128, dt, 7, 48, 64}; expect_arg_error(c, "residual_out", "overlaps 'residual'"); }
    { Call c = valid(fp8); c.residual_out = Matrix{fake(2), dt, 7, 48, 56}; expect_arg_error(c, "residual_out", "overlaps 'residual'"); }
    { Call c = valid(fp8); c.residual_out = Matrix{fake(1), dt, 7, 48, 56}; expect_arg_error(c, "residual_out", "overlaps 'x'"); }
    { Call c = valid(fp8); c.residual_out = Matrix{fake(3) - 64, dt, 7, 48, 56}; expect_arg_error(c, "residual_out", "overlaps 'weight'"); }
    // Aliasing x is not the in-place case (even with the residual absent).
    { Call c = valid(fp8); c.residual = ConstMatrix{}; c.residual_out = Matrix{fake(1), dt, 7, 48, 56}; expect_arg_error(c, "residual_out", "overlaps 'x'"); }
  }
}

TEST_P(AddRmsNormArgs, Out) {
  const DType dt = GetParam();
  { Call c = valid(); c.out.rows = 6; expect_arg_error(c, "out", "6"); }
  { Call c = valid(); c.out.cols = 40; expect_arg_error(c, "out", "40"); }
  { Call c = valid(); c.out.dtype = other(); expect_arg_error(c, "out", dtype_name(other())); }
  { Call c = valid(); c.out.data = fake(5) + 2; expect_arg_error(c, "out", "aligned"); }
  { Call c = valid(); c.out.ld = 52; expect_arg_error(c, "out", "52"); }
  { Call c = valid(); c.out.data = nullptr; expect_arg_error(c, "out", "null"); }
  { Call c = valid(); c.out.data = fake(1) + 16; expect_arg_error(c, "out", "overlaps 'x'"); }
  { Call c = valid(); c.out.data = fake(2); expect_arg_error(c, "out", "overlaps 'residual'"); }
  { Call c = valid(); c.out.data = fake(3); expect_arg_error(c, "out", "overlaps 'weight'"); }
  { Call c = valid(); c.out.data = fake(4); expect_arg_error(c, "out", "overlaps 'residual_out'"); }
  // out == residual with the residual updated in place elsewhere is still an overlap.
  { Call c = valid(); c.residual_out = Matrix{}; c.out = Matrix{fake(2), dt, 7, 48, 64}; expect_arg_error(c, "out", "overlaps 'residual'"); }
}

TEST_P(AddRmsNormArgs, Fp8Out) {
  { Call c = valid(true); c.out8.rows = 8; expect_arg_error(c, "out", "8"); }
  { Call c = valid(true); c.out8.cols = 40; expect_arg_error(c, "out", "40"); }
  { Call c = valid(true); c.out8.ld = 44; expect_arg_error(c, "out", "44"); }   // < cols
  { Call c = valid(true); c.out8.ld = 52; expect_arg_error(c, "out", "52"); }   // % 8 bytes
  { Call c = valid(true); c.out8.data = fake(6) + 8; expect_arg_error(c, "out", "aligned"); }
  { Call c = valid(true); c.out8.data = nullptr; expect_arg_error(c, "out", "null"); }
  { Call c = valid(true); c.out8.data = fake(1); expect_arg_error(c, "out", "overlaps 'x'"); }
  { Call c = valid(true); c.out8.data = fake(4) + 32; expect_arg_error(c, "out", "overlaps 'residual_out'"); }
  { Call c = valid(true); c.out8.data = fake(3) - 64; expect_arg_error(c, "out", "overlaps 'weight'"); }
}

TEST_P(AddRmsNormArgs, Fp8Scale) {
  using M = Fp8ScaleMode;
  { Call c = valid(true); c.scale.mode = static_cast<M>(2); expect_arg_error(c, "scale.mode", "2"); }
  { Call c = valid(true); c.scale.scale = nullptr; expect_arg_error(c, "scale.scale", "null"); }
  { Call c = valid(true, M::kDynamicPerRow); c.scale.scale = nullptr; expect_arg_error(c, "scale.scale", "null"); }
  { Call c = valid(true); c.scale.scale = reinterpret_cast<float*>(fake(7) + 2); expect_arg_error(c, "scale.scale", "aligned"); }
  // Written scales overlap nothing; the read static scale only no output.
  { Call c = valid(true); c.scale.scale = reinterpret_cast<float*>(fake(6) + 8); expect_arg_error(c, "scale.scale", "overlaps 'out'"); }
  { Call c = valid(true); c.scale.scale = reinterpret_cast<float*>(fake(4)); expect_arg_error(c, "scale.scale", "overlaps 'residual_out'"); }
  { Call c = valid(true, M::kDynamicPerRow); c.scale.scale = reinterpret_cast<float*>(fake(1) + 16); expect_arg_error(c, "scale.scale", "overlaps 'x'"); }
  { Call c = valid(true, M::kDynamicPerRow); c.scale.scale = reinterpret_cast<float*>(fake(2)); expect_arg_error(c, "scale.scale", "overlaps 'residual'"); }
  { Call c = valid(true, M::kDynamicPerRow); c.scale.scale = reinterpret_cast<float*>(fake(3) + 64); expect_arg_error(c, "scale.scale", "overlaps 'weight'"); }
  // The 7 dynamic scales end exactly where 'x' begins: adjacent, not overlapping.
  { Call c = valid(true, M::kDynamicPerRow); c.scale.scale = reinterpret_cast<float*>(fake(1) - 28); expect_arg_error(c, "x", "device memory"); }
}

TEST_P(AddRmsNormArgs, EmptyBatchIsANoOp) {
  // Zero rows (no tokens): nothing launched, no pointer inspected; x, out, residual_out and the
  // dynamic scales may be null, the weight must still describe [1, H].
  for (bool fp8 : {false, true}) {
    Call c = valid(fp8, Fp8ScaleMode::kDynamicPerRow);
    c.x = ConstMatrix{nullptr, GetParam(), 0, 48, 48};
    c.residual = ConstMatrix{};
    c.residual_out = Matrix{nullptr, GetParam(), 0, 48, 48};
    c.out = Matrix{nullptr, GetParam(), 0, 48, 48};
    c.out8 = Fp8Matrix{nullptr, 0, 48, 48};
    c.scale.scale = nullptr;
    EXPECT_NO_THROW(c());
  }
}

TEST_P(AddRmsNormArgs, HostPointerIsRejected) {
  testing::HostMatrix h(GetParam(), 7, 48, 56);
  for (bool fp8 : {false, true}) {
    Call c = valid(fp8);
    c.x = h.view();
    expect_arg_error(c, "x", "device memory");
  }
}

INSTANTIATE_TEST_SUITE_P(BothDtypes, AddRmsNormArgs, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace blockfuse
