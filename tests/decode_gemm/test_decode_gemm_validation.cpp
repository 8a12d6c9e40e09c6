// decode_gemm()'s argument errors, in both dtypes and through both overloads (heuristic and
// explicit configuration): every bad call throws blockfuse::Error whose message starts with
// "blockfuse::decode_gemm", names the argument in quotes, shows the bad value and says what is
// required — before any CUDA call, so these run on CPU-only machines (CI). The pointers are fake,
// 256-byte-aligned addresses that are never dereferenced.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "blockfuse/decode_gemm.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

class DecodeGemmArgs : public ::testing::TestWithParam<DType> {
 protected:
  // A valid call (M = 5, N = 40, K = 64, strided) with split 2 — each check breaks it in one way.
  struct Call {
    ConstMatrix x, w;
    Matrix y;
    void* ws = nullptr;
    size_t ws_bytes = 0;
    DecodeGemmConfig cfg{2, 4};
    bool use_config = true;
    void operator()() const {
      if (use_config)
        decode_gemm(x, w, y, ws, ws_bytes, cfg);
      else
        decode_gemm(x, w, y, ws, ws_bytes);
    }
  };
  Call valid() const {
    const DType dt = GetParam();
    Call c;
    c.x = ConstMatrix{fake(1), dt, 5, 64, 72};
    c.w = ConstMatrix{fake(2), dt, 40, 64, 64};
    c.y = Matrix{fake(3), dt, 5, 40, 41};
    c.ws = fake(4);
    c.ws_bytes = decode_gemm_workspace_size(5, 40, 64, c.cfg);
    return c;
  }
  DType other() const { return GetParam() == DType::kBF16 ? DType::kFP16 : DType::kBF16; }
};

TEST_P(DecodeGemmArgs, MessageNamesTheFunction) {
  for (bool use_config : {true, false}) {
    Call c = valid();
    c.use_config = use_config;
    c.x.cols = 60;
    try {
      c();
      FAIL() << "no error for K = 60";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("blockfuse::decode_gemm", 0), 0u) << e.what();
    }
  }
}

TEST_P(DecodeGemmArgs, Shapes) {
  for (bool use_config : {true, false}) {
    SCOPED_TRACE(use_config ? "explicit config" : "heuristic");
    auto v = [&] { Call c = valid(); c.use_config = use_config; return c; };
    { Call c = v(); c.x.rows = 33; c.y.rows = 33; expect_arg_error(c, "x", "GEMM"); }         // M > 32
    { Call c = v(); c.x.rows = 40; c.y.rows = 40; expect_arg_error(c, "x", "40"); }
    { Call c = v(); c.x.rows = -1; expect_arg_error(c, "x", "-1"); }
    { Call c = v(); c.x.cols = 60; c.w.cols = 60; expect_arg_error(c, "x", "60"); }            // K % 8
    { Call c = v(); c.w.cols = 56; expect_arg_error(c, "w", "56"); }                          // K differs
    { Call c = v(); c.y.rows = 4; expect_arg_error(c, "y", "4"); }                            // M differs
    { Call c = v(); c.y.cols = 48; c.y.ld = 48; expect_arg_error(c, "y", "48"); }             // N differs
    { Call c = v(); c.y.ld = 39; expect_arg_error(c, "y", "39"); }                            // ld < cols
    { Call c = v(); c.w.ld = 0; expect_arg_error(c, "w", "0"); }
    { Call c = v(); c.w.rows = -8; expect_arg_error(c, "w", "-8"); }
    { Call c = v(); c.x.data = nullptr; expect_arg_error(c, "x", "null"); }
    { Call c = v(); c.w.data = nullptr; expect_arg_error(c, "w", "null"); }
    { Call c = v(); c.y.data = nullptr; expect_arg_error(c, "y", "null"); }
  }
}

TEST_P(DecodeGemmArgs, Dtypes) {
  { Call c = valid(); c.w.dtype = other(); expect_arg_error(c, "w", dtype_name(other())); }
  { Call c = valid(); c.y.dtype = other(); expect_arg_error(c, "y", dtype_name(other())); }
  { Call c = valid(); c.x.dtype = static_cast<DType>(5); expect_arg_error(c, "x", "5"); }
  { Call c = valid(); c.use_config = false; c.y.dtype = static_cast<DType>(-2); expect_arg_error(c, "y", "-2"); }
}

TEST_P(DecodeGemmArgs, AlignmentAndStrides) {
  for (bool use_config : {true, false}) {
    auto v = [&] { Call c = valid(); c.use_config = use_config; return c; };
    { Call c = v(); c.x.data = static_cast<const char*>(fake(1)) + 8; expect_arg_error(c, "x", "aligned"); }
    { Call c = v(); c.w.data = static_cast<const char*>(fake(2)) + 2; expect_arg_error(c, "w", "aligned"); }
    { Call c = v(); c.y.data = static_cast<char*>(fake(3)) + 1; expect_arg_error(c, "y", "aligned"); }
    { Call c = v(); c.x.ld = 68; expect_arg_error(c, "x", "68"); }
    { Call c = v(); c.w.ld = 100; expect_arg_error(c, "w", "100"); }
  }
}

TEST_P(DecodeGemmArgs, Overlaps) {
  for (bool use_config : {true, false}) {
    auto v = [&] { Call c = valid(); c.use_config = use_config; return c; };
    { Call c = v(); c.y.data = const_cast<void*>(c.x.data); expect_arg_error(c, "y", "overlap"); }
    { Call c = v(); c.y.data = static_cast<char*>(const_cast<void*>(c.w.data)) + 128; expect_arg_error(c, "y", "overlap"); }
  }
  { Call c = valid(); c.ws = c.y.data; expect_arg_error(c, "workspace", "overlap"); }
  { Call c = valid(); c.ws = const_cast<void*>(c.w.data); expect_arg_error(c, "workspace", "overlap"); }
  { Call c = valid(); c.ws = static_cast<char*>(const_cast<void*>(c.x.data)) + 64; expect_arg_error(c, "workspace", "overlap"); }
}

TEST_P(DecodeGemmArgs, Config) {
  { Call c = valid(); c.cfg.warps_per_block = 2; expect_arg_error(c, "config", "2"); }
  { Call c = valid(); c.cfg.warps_per_block = 16; expect_arg_error(c, "config", "16"); }
  { Call c = valid(); c.cfg.split_k = 0; expect_arg_error(c, "config", "0"); }
  { Call c = valid(); c.cfg.split_k = -3; expect_arg_error(c, "config", "-3"); }
  { Call c = valid(); c.cfg.split_k = 3; expect_arg_error(c, "config", "non-empty"); }  // K = 64: 2 slices of 32 at most
  { Call c = valid(); c.x.cols = c.w.cols = c.x.ld = c.w.ld = 1 << 16; c.cfg.split_k = 65; expect_arg_error(c, "config", "65"); }
}

TEST_P(DecodeGemmArgs, Workspace) {
  { Call c = valid(); c.ws = nullptr; expect_arg_error(c, "workspace", "null"); }
  { Call c = valid(); c.ws_bytes -= 1; expect_arg_error(c, "workspace_bytes", std::to_string(c.ws_bytes)); }
  { Call c = valid(); c.ws_bytes = 0; expect_arg_error(c, "workspace_bytes", "0"); }
  { Call c = valid(); c.ws = static_cast<char*>(fake(4)) + 4; expect_arg_error(c, "workspace", "aligned"); }
  // More splits need more.
  { Call c = valid(); c.cfg.split_k = 1; c.ws = nullptr; c.ws_bytes = 0;
    c.x.cols = c.w.cols = 4096; c.x.ld = c.w.ld = 4096; c.cfg.split_k = 4;
    expect_arg_error(c, "workspace", "split_k = 4"); }
}

// What passes the host checks reaches the device checks: with no GPU (CI) the fake pointers are
// reported as 'x' that could not be inspected; with one, as not device memory. Either way an
// argument error naming 'x', never a crash or a launch.
TEST_P(DecodeGemmArgs, FakePointersAreCaughtByTheDeviceChecks) {
  for (bool use_config : {true, false}) {
    Call c = valid();
    c.use_config = use_config;
    expect_arg_error(c, "x");
  }
}

// Empty problems launch nothing and so touch nothing (no device checks either).
TEST_P(DecodeGemmArgs, EmptyIsANoOp) {
  for (bool use_config : {true, false}) {
    { Call c = valid(); c.use_config = use_config; c.x.rows = c.y.rows = 0; EXPECT_NO_THROW(c()); }
    { Call c = valid(); c.use_config = use_config; c.w.rows = c.y.cols = 0; c.y.ld = 8; EXPECT_NO_THROW(c()); }
  }
}

INSTANTIATE_TEST_SUITE_P(BothDtypes, DecodeGemmArgs, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace blockfuse
