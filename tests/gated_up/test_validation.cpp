// Every argument check of gated_up() and swiglu(): each bad call throws blockfuse::Error whose
// message names the argument (in quotes), shows its value and says what is required — before
// anything is launched. (The weight-layout helpers' checks are in test_weight_layout.cpp.)
//
// Runs with or without a GPU (CI has none). Shape, dtype, alignment, activation and option errors
// are detected before any CUDA call, so fake, never-dereferenced "device" addresses are enough.
// The checks that need the CUDA runtime (device memory, then overlap) are tested both ways: on a
// CPU-only machine the pointer cannot be inspected and the first matrix checked ('x' / 'gate_up')
// is named; with a GPU, real device buffers let each argument be rejected on its own.
#include <gtest/gtest.h>

#include <string>

#include <cuda_runtime_api.h>

#include "blockfuse/gated_up.h"
#include "blockfuse/swiglu.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

// Fake device addresses, 256-byte aligned, far apart, never dereferenced.
void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7f0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

// A valid gated_up call (M = 16, K = 64, U = 32) that each test breaks in one way.
struct Call {
  ConstMatrix x{fake(0), DType::kBF16, 16, 64, 64};
  ConstMatrix w{fake(1), DType::kBF16, 64, 64, 64};
  Matrix out{fake(2), DType::kBF16, 16, 32, 32};
  Activation act = Activation::kSiLU;
  GatedUpOptions opt;
  void operator()() const { gated_up(x, w, out, act, nullptr, opt); }
};

TEST(GatedUpValidation, ShapesAndDtypes) {
  { Call c; c.w.rows = 66; expect_arg_error(c, "w", "66"); }               // w.rows != 2U
  { Call c; c.w.cols = 72; c.w.ld = 72; expect_arg_error(c, "w", "72"); }  // w.cols != K
  { Call c; c.out.rows = 15; expect_arg_error(c, "out", "15"); }           // out.rows != M
  { Call c; c.w.dtype = DType::kFP16; expect_arg_error(c, "w", "fp16"); }  // dtype mismatch
  { Call c; c.out.dtype = DType::kFP16; expect_arg_error(c, "out", "fp16"); }
  { Call c; c.x.dtype = static_cast<DType>(7); expect_arg_error(c, "x", "7"); }  // not a dtype
  { Call c; c.w.dtype = static_cast<DType>(-1); expect_arg_error(c, "w", "-1"); }
  { Call c; c.out.dtype = static_cast<DType>(2); expect_arg_error(c, "out", "2"); }
  { Call c; c.x.rows = -1; c.out.rows = -1; expect_arg_error(c, "x", "-1"); }    // negative rows
  { Call c; c.out.cols = -8; expect_arg_error(c, "out", "-8"); }                 // negative cols
  { Call c; c.x.ld = 32; expect_arg_error(c, "x", "32"); }                       // ld < cols
  { Call c; c.w.ld = 56; expect_arg_error(c, "w", "56"); }
  { Call c; c.out.ld = 24; expect_arg_error(c, "out", "24"); }
  { Call c; c.x.data = nullptr; expect_arg_error(c, "x", "null"); }              // null, non-empty
  { Call c; c.w.data = nullptr; expect_arg_error(c, "w", "null"); }
  { Call c; c.out.data = nullptr; expect_arg_error(c, "out", "null"); }
  { Call c; c.x.rows = c.out.rows = int64_t(1) << 31; expect_arg_error(c, "x", "2^31"); }  // M too large
  { Call c; c.x.rows = c.out.rows = int64_t(1) << 36; expect_arg_error(c, "x", "2^40"); }  // offsets overflow
}

TEST(GatedUpValidation, VectorWidthAndAlignment) {
  { Call c; c.x.cols = c.w.cols = 60; expect_arg_error(c, "x", "60"); }   // K % 8 (ld 64 stays valid)
  { Call c; c.x.cols = c.w.cols = 4; c.x.ld = c.w.ld = 8; expect_arg_error(c, "x", "K >= 8"); }  // K < 8
  { Call c; c.x.cols = c.w.cols = 0; c.x.ld = c.w.ld = 8; expect_arg_error(c, "x", "K >= 8"); }  // K == 0
  { Call c; c.out.cols = 30; c.w.rows = 60; expect_arg_error(c, "out", "30"); }  // U % 8
  { Call c; c.out.cols = 0; c.w.rows = 0; expect_arg_error(c, "out", "U >= 8"); }  // U == 0
  { Call c; c.x.ld = 68; expect_arg_error(c, "x", "68"); }                       // ld % 8
  { Call c; c.w.ld = 65; expect_arg_error(c, "w", "65"); }
  { Call c; c.out.ld = 36; expect_arg_error(c, "out", "36"); }
  { Call c; c.x.data = static_cast<const char*>(fake(0)) + 2; expect_arg_error(c, "x", "aligned"); }  // base + 2 bytes
  { Call c; c.w.data = static_cast<const char*>(fake(1)) + 2; expect_arg_error(c, "w", "aligned"); }
  { Call c; c.out.data = static_cast<char*>(fake(2)) + 8; expect_arg_error(c, "out", "aligned"); }
}

TEST(GatedUpValidation, ActivationAndOptions) {
  { Call c; c.act = static_cast<Activation>(5); expect_arg_error(c, "activation", "5"); }
  { Call c; c.act = static_cast<Activation>(-1); expect_arg_error(c, "activation", "-1"); }
  { Call c; c.opt.tile_config = gated_up_num_tile_configs(); expect_arg_error(c, "options.tile_config", std::to_string(gated_up_num_tile_configs())); }
  { Call c; c.opt.tile_config = 99; expect_arg_error(c, "options.tile_config", "99"); }
  { Call c; c.opt.tile_config = -2; expect_arg_error(c, "options.tile_config", "-2"); }
  { Call c; c.opt.kernel = static_cast<GatedUpKernel>(9); expect_arg_error(c, "options.kernel", "9"); }
  // The decode kernel takes no tile config and at most 32 rows.
  { Call c; c.opt.kernel = GatedUpKernel::kDecode; c.opt.tile_config = 0; expect_arg_error(c, "options.tile_config", "0"); }
  { Call c; c.opt.kernel = GatedUpKernel::kDecode; c.x.rows = c.out.rows = 33; expect_arg_error(c, "x", "33"); }
  // The raster: a defined order, and only for the sm90a kernel (an explicit other kernel is refused here;
  // kAuto resolving to another kernel is refused at dispatch, GatedUpGpu.Sm90RasterOnlyWhereSm90Runs).
  { Call c; c.opt.sm90_raster = static_cast<Sm90Raster>(3); expect_arg_error(c, "options.sm90_raster", "3"); }
  { Call c; c.opt.sm90_raster = static_cast<Sm90Raster>(-1); expect_arg_error(c, "options.sm90_raster", "-1"); }
  { Call c; c.opt.kernel = GatedUpKernel::kSm80; c.opt.sm90_raster = Sm90Raster::kAlongN; expect_arg_error(c, "options.sm90_raster", "sm80"); }
  { Call c; c.opt.kernel = GatedUpKernel::kDecode; c.opt.sm90_raster = Sm90Raster::kAlongM; expect_arg_error(c, "options.sm90_raster", "decode"); }
}

TEST(GatedUpValidation, WorkspaceSizeArguments) {
  expect_arg_error([] { gated_up_workspace_size(-1, 64, 32); }, "m", "-1");
  expect_arg_error([] { gated_up_workspace_size(1, 60, 32); }, "k", "60");
  expect_arg_error([] { gated_up_workspace_size(1, -8, 32); }, "k", "-8");
  expect_arg_error([] { gated_up_workspace_size(1, 64, -8); }, "u", "-8");
  EXPECT_EQ(gated_up_workspace_size(0, 64, 32), 0u);  // no rows: no device query, nothing needed
}

// M == 0 is a no-op: nothing launched, no device needed, pointers not inspected.
TEST(GatedUpValidation, EmptyProblemIsANoOp) {
  Call c;
  c.x.rows = c.out.rows = 0;
  EXPECT_NO_THROW(c());
  c.x.data = nullptr;
  c.out.data = nullptr;
  EXPECT_NO_THROW(c());
  // ...but the shapes are still checked.
  c.w.rows = 62;
  expect_arg_error(c, "w", "62");
}

// Device memory, owned for one test (only used where a GPU is present).
using DeviceBuffer = testing::DeviceBuffer<char>;

TEST(GatedUpValidation, HostMemoryIsRejected) {
  testing::HostMatrix hx(DType::kBF16, 16, 64), hw(DType::kBF16, 64, 64), hout(DType::kBF16, 16, 32);
  {  // With or without a GPU: host x is rejected as not device memory (on a CPU-only machine the
     // pointer cannot be inspected, which is reported the same way).
    Call c;
    c.x = hx.view();
    expect_arg_error(c, "x", "device memory");
  }
  if (!testing::has_cuda_device()) {
    // CPU-only: even a fake device address fails the device check, naming the first matrix.
    expect_arg_error(Call{}, "x", "device memory");
    return;
  }
  DeviceBuffer dx(16 * 64 * 2), dw(64 * 64 * 2), dout(16 * 32 * 2);
  Call c;
  c.x.data = dx.data();
  c.w.data = dw.data();
  c.out.data = dout.data();
  { Call b = c; b.w = hw.view(); expect_arg_error(b, "w", "device memory"); }
  { Call b = c; b.out = hout.view(); expect_arg_error(b, "out", "device memory"); }
}

TEST(GatedUpValidation, OutputMustNotOverlapInputs) {
  if (!testing::has_cuda_device()) {
    // Overlap is checked after the device checks, which fail first without a GPU — still an
    // Error naming an argument, before anything could be launched.
    Call c;
    c.out.data = const_cast<void*>(c.x.data);
    expect_arg_error(c, "x", "device memory");
    return;
  }
  DeviceBuffer buf(1 << 20);
  char* base = static_cast<char*>(buf.data());
  Call c;
  c.x.data = base;
  c.w.data = base + 65536;
  c.out.data = base + 2 * 65536;
  { Call b = c; b.out.data = base + 1024; expect_arg_error(b, "out", "overlap"); }           // inside x
  { Call b = c; b.out.data = base + 65536 + 4096; expect_arg_error(b, "out", "overlap"); }   // inside w
}

// A valid swiglu call (M = 4, U = 32) that each test breaks in one way.
struct SwigluCall {
  ConstMatrix in{fake(3), DType::kBF16, 4, 64, 64};
  Matrix out{fake(4), DType::kBF16, 4, 32, 32};
  Activation act = Activation::kSiLU;
  GateUpLayout layout = GateUpLayout::kStacked;
  void operator()() const { swiglu(in, out, act, layout); }
};

TEST(SwigluValidation, Arguments) {
  { SwigluCall c; c.in.cols = 48; c.in.ld = 48; expect_arg_error(c, "gate_up", "48"); }  // cols != 2U
  { SwigluCall c; c.out.rows = 5; expect_arg_error(c, "out", "5"); }                      // rows differ
  { SwigluCall c; c.out.cols = 28; c.in.cols = 56; c.in.ld = 56; expect_arg_error(c, "out", "28"); }  // U % 8
  { SwigluCall c; c.out.dtype = DType::kFP16; expect_arg_error(c, "out", "fp16"); }
  { SwigluCall c; c.in.dtype = static_cast<DType>(3); expect_arg_error(c, "gate_up", "3"); }
  { SwigluCall c; c.out.dtype = static_cast<DType>(4); expect_arg_error(c, "out", "4"); }
  { SwigluCall c; c.layout = static_cast<GateUpLayout>(3); expect_arg_error(c, "layout", "3"); }
  { SwigluCall c; c.act = static_cast<Activation>(3); expect_arg_error(c, "activation", "3"); }
  { SwigluCall c; c.in.data = static_cast<const char*>(fake(3)) + 4; expect_arg_error(c, "gate_up", "aligned"); }
  { SwigluCall c; c.out.data = static_cast<char*>(fake(4)) + 2; expect_arg_error(c, "out", "aligned"); }
  { SwigluCall c; c.out.ld = 33; expect_arg_error(c, "out", "33"); }      // ld % 8
  { SwigluCall c; c.in.ld = 72 + 4; expect_arg_error(c, "gate_up", "76"); }
  { SwigluCall c; c.in.ld = 32; expect_arg_error(c, "gate_up", "32"); }   // ld < cols
  { SwigluCall c; c.in.rows = c.out.rows = -2; expect_arg_error(c, "gate_up", "-2"); }
  { SwigluCall c; c.in.data = nullptr; expect_arg_error(c, "gate_up", "null"); }
  { SwigluCall c; c.out.data = nullptr; expect_arg_error(c, "out", "null"); }
  { SwigluCall c; c.layout = GateUpLayout::kInterleaved; c.out.cols = 12; c.in.cols = 24; c.in.ld = 24;
    expect_arg_error(c, "out", "12"); }
}

TEST(SwigluValidation, EmptyIsANoOp) {
  SwigluCall c;
  c.in.rows = c.out.rows = 0;
  EXPECT_NO_THROW(c());
}

TEST(SwigluValidation, DeviceMemoryAndOverlap) {
  testing::HostMatrix hin(DType::kBF16, 4, 64);
  { SwigluCall c; c.in = hin.view(); expect_arg_error(c, "gate_up", "device memory"); }
  if (!testing::has_cuda_device()) {
    SwigluCall c;
    c.out.data = const_cast<void*>(c.in.data);  // overlap, but the device check comes first
    expect_arg_error(c, "gate_up", "device memory");
    return;
  }
  DeviceBuffer buf(1 << 16);
  SwigluCall c;
  c.in.data = buf.data();
  c.out.data = static_cast<char*>(buf.data()) + 4096;
  { SwigluCall b = c; testing::HostMatrix hout(DType::kBF16, 4, 32); b.out = hout.view(); expect_arg_error(b, "out", "device memory"); }
  { SwigluCall b = c; b.out.data = static_cast<char*>(buf.data()) + 64; expect_arg_error(b, "out", "overlap"); }
}

}  // namespace
}  // namespace blockfuse
