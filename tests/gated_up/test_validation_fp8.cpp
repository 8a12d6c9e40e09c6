// Every argument check of gated_up_fp8(), every output (bf16; e4m3 with a static or a dynamic
// per-row scale, the latter through the workspace overload): each bad call throws blockfuse::Error whose
// message names the argument (in quotes), shows its value and says what is required — before
// anything is launched. Runs with or without a GPU: shape, alignment, scale and option errors are
// detected before any CUDA call, so fake, never-dereferenced "device" addresses are enough; the
// checks that need the runtime (device memory, overlap, compute capability) are in
// test_gated_up_fp8_gpu.cu with real buffers, and here only as "fails naming 'x'" without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "blockfuse/gated_up_fp8.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }
float* fake_f(int i) { return static_cast<float*>(fake(i)); }

// A valid call (M = 16, K = 64, U = 32), bf16 or e4m3 output, that each test breaks in one way.
struct Call {
  Fp8ConstMatrix x{fake(0), 16, 64, 64};
  Fp8ConstMatrix w{fake(1), 64, 64, 64};
  Fp8InputScale xs{Fp8InputScaleMode::kPerTensor, fake_f(2)};
  Fp8InputScale ws{Fp8InputScaleMode::kPerTensor, fake_f(3)};
  Matrix out{fake(4), DType::kBF16, 16, 32, 32};
  Fp8Matrix out8{fake(5), 16, 32, 32};
  Fp8Scale os{Fp8ScaleMode::kStaticPerTensor, fake_f(6)};
  bool fp8_out = false;
  bool with_workspace = false;  // the e4m3 overload with a workspace (dynamic per-row scales)
  void* workspace = fake(7);
  size_t workspace_bytes = size_t(1) << 40;  // large enough for every shape the tests make
  Activation act = Activation::kSiLU;
  GatedUpFp8Options opt;
  void operator()() const {
    if (fp8_out && with_workspace)
      gated_up_fp8(x, xs, w, ws, out8, os, act, workspace, workspace_bytes, nullptr, opt);
    else if (fp8_out)
      gated_up_fp8(x, xs, w, ws, out8, os, act, nullptr, opt);
    else
      gated_up_fp8(x, xs, w, ws, out, act, nullptr, opt);
  }
  // The e4m3 output with dynamic per-row scales through the workspace overload.
  Call& dynamic() {
    fp8_out = with_workspace = true;
    os.mode = Fp8ScaleMode::kDynamicPerRow;
    return *this;
  }
  // Keeps the output shapes in step for tests that change M or U.
  Call& rows(int64_t m) { x.rows = out.rows = out8.rows = m; return *this; }
  Call& cols_u(int64_t u) { out.cols = out8.cols = u; w.rows = 2 * u; return *this; }
};

// Every output (bf16; e4m3 static; e4m3 dynamic per row through the workspace overload): every
// input check must hold for each.
template <class F>
void both(F&& f) {
  for (int o : {0, 1, 2}) {
    Call c;
    c.fp8_out = o > 0;
    if (o == 2) c.dynamic();
    SCOPED_TRACE(o == 0 ? "bf16 output" : o == 1 ? "e4m3 output" : "e4m3 output, dynamic per-row scales");
    f(c);
  }
}

TEST(GatedUpFp8Validation, InputShapes) {
  both([](Call c0) {
    { Call c = c0; c.w.rows = 66; expect_arg_error(c, "w", "66"); }               // w.rows != 2U
    { Call c = c0; c.w.cols = 80; c.w.ld = 80; expect_arg_error(c, "w", "80"); }  // w.cols != K
    { Call c = c0; c.out.rows = c.out8.rows = 15; expect_arg_error(c, "out", "15"); }
    { Call c = c0; c.x.rows = -1; expect_arg_error(c, "x", "-1"); }
    { Call c = c0; c.x.ld = 48; expect_arg_error(c, "x", "48"); }                   // ld < cols
    { Call c = c0; c.x.data = nullptr; expect_arg_error(c, "x", "null"); }
    { Call c = c0; c.w.data = nullptr; expect_arg_error(c, "w", "null"); }
    { Call c = c0; c.rows(int64_t(1) << 31); c.x.ld = c.w.ld = 64; expect_arg_error(c, "x", "2^31"); }
  });
}

TEST(GatedUpFp8Validation, TmaAlignment) {
  both([](Call c0) {
    { Call c = c0; c.x.cols = c.w.cols = 56; expect_arg_error(c, "x", "56"); }   // K % 16 (ld 64 valid)
    { Call c = c0; c.x.cols = c.w.cols = 8; c.x.ld = c.w.ld = 16; expect_arg_error(c, "x", "K >= 16"); }
    { Call c = c0; c.x.cols = c.w.cols = 0; c.x.ld = c.w.ld = 16; expect_arg_error(c, "x", "K >= 16"); }
    { Call c = c0; c.x.ld = 72; expect_arg_error(c, "x", "72"); }                 // ld % 16
    { Call c = c0; c.w.ld = 88; expect_arg_error(c, "w", "88"); }
    { Call c = c0; c.x.data = static_cast<const char*>(fake(0)) + 8; expect_arg_error(c, "x", "16-byte"); }
    { Call c = c0; c.w.data = static_cast<const char*>(fake(1)) + 4; expect_arg_error(c, "w", "16-byte"); }
    { Call c = c0; c.cols_u(28); expect_arg_error(c, "out", "28"); }              // U % 8
    { Call c = c0; c.cols_u(0); expect_arg_error(c, "out", "U >= "); }
  });
  // The outputs' own rules: bf16 16-byte aligned with ld % 8; e4m3 16-byte aligned with ld % 16.
  { Call c; c.out.ld = 36; expect_arg_error(c, "out", "36"); }
  { Call c; c.out.data = static_cast<char*>(fake(4)) + 8; expect_arg_error(c, "out", "aligned"); }
  { Call c; c.out.dtype = DType::kFP16; expect_arg_error(c, "out", "fp16"); }
  { Call c; c.out.dtype = static_cast<DType>(5); expect_arg_error(c, "out", "5"); }
  { Call c; c.out.data = nullptr; expect_arg_error(c, "out", "null"); }
  { Call c; c.fp8_out = true; c.out8.ld = 40; expect_arg_error(c, "out", "40"); }
  // e4m3 rows must be whole 16-byte units (U = 40 is fine for bf16, not for e4m3).
  { Call c; c.fp8_out = true; c.cols_u(40); c.out8.ld = 48; expect_arg_error(c, "out", "U % 16 == 0"); }
  { Call c; c.fp8_out = true; c.cols_u(8); c.out8.ld = 16; expect_arg_error(c, "out", "U >= 16"); }
  { Call c; c.fp8_out = true; c.out8.data = static_cast<char*>(fake(5)) + 8; expect_arg_error(c, "out", "aligned"); }
  { Call c; c.fp8_out = true; c.out8.data = nullptr; expect_arg_error(c, "out", "null"); }
}

TEST(GatedUpFp8Validation, Scales) {
  both([](Call c0) {
    { Call c = c0; c.xs.scale = nullptr; expect_arg_error(c, "x_scale", "null"); }
    { Call c = c0; c.ws.scale = nullptr; expect_arg_error(c, "w_scale", "null"); }
    { Call c = c0; c.xs.mode = Fp8InputScaleMode::kPerRow; c.xs.scale = nullptr; expect_arg_error(c, "x_scale", "16 floats"); }
    { Call c = c0; c.ws.mode = Fp8InputScaleMode::kPerRow; c.ws.scale = nullptr; expect_arg_error(c, "w_scale", "64 floats"); }
    { Call c = c0; c.xs.mode = static_cast<Fp8InputScaleMode>(3); expect_arg_error(c, "x_scale", "3"); }
    { Call c = c0; c.ws.mode = static_cast<Fp8InputScaleMode>(-1); expect_arg_error(c, "w_scale", "-1"); }
    { Call c = c0; c.xs.scale = reinterpret_cast<float*>(static_cast<char*>(fake(2)) + 2); expect_arg_error(c, "x_scale", "4-byte"); }
    // Per-channel w scales are read as (up, gate) pairs: 8-byte alignment.
    { Call c = c0; c.ws.mode = Fp8InputScaleMode::kPerRow; c.ws.scale = fake_f(3) + 1; expect_arg_error(c, "w_scale", "8-byte"); }
  });
  { Call c; c.fp8_out = true; c.os.scale = nullptr; expect_arg_error(c, "out_scale", "null"); }
  { Call c; c.fp8_out = true; c.os.mode = static_cast<Fp8ScaleMode>(7); expect_arg_error(c, "out_scale", "7"); }
  { Call c; c.fp8_out = true; c.os.scale = reinterpret_cast<float*>(static_cast<char*>(fake(6)) + 1); expect_arg_error(c, "out_scale", "4-byte"); }
  // Dynamic per-row output scales need the workspace overload: without it, a clear error whatever the
  // other arguments.
  { Call c; c.fp8_out = true; c.os.mode = Fp8ScaleMode::kDynamicPerRow; expect_arg_error(c, "out_scale", "kDynamicPerRow"); }
  { Call c; c.fp8_out = true; c.os.mode = Fp8ScaleMode::kDynamicPerRow; c.rows(0); expect_arg_error(c, "out_scale", "workspace"); }
  // With it: M scales written, so a null pointer asks for M floats.
  { Call c; c.dynamic(); c.os.scale = nullptr; expect_arg_error(c, "out_scale", "16 floats"); }
  { Call c; c.dynamic(); c.os.scale = reinterpret_cast<float*>(static_cast<char*>(fake(6)) + 2); expect_arg_error(c, "out_scale", "4-byte"); }
}

// The workspace of the dynamic per-row e4m3 output: h in bf16, M·U·2 bytes rounded up to 256.
TEST(GatedUpFp8Validation, DynamicOutputWorkspace) {
  EXPECT_EQ(gated_up_fp8_workspace_size(16, 32, Fp8ScaleMode::kDynamicPerRow), 1024u);
  EXPECT_EQ(gated_up_fp8_workspace_size(3, 48, Fp8ScaleMode::kDynamicPerRow), 512u);  // 288 -> 512
  EXPECT_EQ(gated_up_fp8_workspace_size(4096, 14336, Fp8ScaleMode::kDynamicPerRow), size_t(4096) * 14336 * 2);
  EXPECT_EQ(gated_up_fp8_workspace_size(0, 14336, Fp8ScaleMode::kDynamicPerRow), 0u);
  EXPECT_EQ(gated_up_fp8_workspace_size(4096, 14336, Fp8ScaleMode::kStaticPerTensor), 0u);
  expect_arg_error([] { gated_up_fp8_workspace_size(-1, 32, Fp8ScaleMode::kDynamicPerRow); }, "m", "-1");
  expect_arg_error([] { gated_up_fp8_workspace_size(16, -8, Fp8ScaleMode::kDynamicPerRow); }, "u", "-8");
  expect_arg_error([] { gated_up_fp8_workspace_size(16, 32, static_cast<Fp8ScaleMode>(9)); }, "out_scale_mode", "9");
  expect_arg_error([] { gated_up_fp8_workspace_size(int64_t(1) << 30, int64_t(1) << 20, Fp8ScaleMode::kDynamicPerRow); },
                   "m", "2^40");
  // The call checks it before anything else that needs the runtime: null, too small, misaligned.
  { Call c; c.dynamic(); c.workspace = nullptr; expect_arg_error(c, "workspace", "null"); }
  { Call c; c.dynamic(); c.workspace_bytes = 1023; expect_arg_error(c, "workspace", "1023 bytes"); }
  { Call c; c.dynamic(); c.workspace = static_cast<char*>(fake(7)) + 8; expect_arg_error(c, "workspace", "16-byte"); }
  // A static scale through the same overload needs no workspace; the rest of the call is still checked.
  { Call c; c.fp8_out = c.with_workspace = true; c.workspace = nullptr; c.workspace_bytes = 0; c.w.rows = 66;
    expect_arg_error(c, "w", "66"); }
}

TEST(GatedUpFp8Validation, ActivationAndOptions) {
  both([](Call c0) {
    { Call c = c0; c.act = static_cast<Activation>(4); expect_arg_error(c, "activation", "4"); }
    { Call c = c0; c.opt.tile_config = gated_up_fp8_num_tile_configs(); expect_arg_error(c, "options.tile_config", std::to_string(gated_up_fp8_num_tile_configs())); }
    { Call c = c0; c.opt.tile_config = -2; expect_arg_error(c, "options.tile_config", "-2"); }
    { Call c = c0; c.opt.sm90_raster = static_cast<Sm90Raster>(5); expect_arg_error(c, "options.sm90_raster", "5"); }
  });
}

// M == 0: nothing launched, no device needed, pointers not inspected; the shapes are still checked.
TEST(GatedUpFp8Validation, EmptyProblemIsANoOp) {
  if (!gated_up_fp8_has_sm90()) GTEST_SKIP() << "this build has no FP8 kernel: every call is 'not supported'";
  both([](Call c) {
    c.rows(0);
    c.workspace = nullptr;  // M = 0: the dynamic output's workspace is 0 bytes
    c.workspace_bytes = 0;
    EXPECT_NO_THROW(c());
    c.w.rows = 62;
    expect_arg_error(c, "w", "62");
  });
}

// Without a GPU a valid call still fails before any launch, naming the first buffer it inspects.
TEST(GatedUpFp8Validation, WithoutGpuFailsOnDeviceCheck) {
  if (testing::has_cuda_device()) GTEST_SKIP() << "covered with real buffers by GatedUpFp8Gpu.BadArgumentsNeedingDeviceMemory";
  if (!gated_up_fp8_has_sm90()) GTEST_SKIP() << "this build has no FP8 kernel: every call is 'not supported'";
  both([](Call c) { expect_arg_error(c, "x", "device memory"); });
}

}  // namespace
}  // namespace blockfuse
