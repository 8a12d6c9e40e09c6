// CPU tests of the rmsnorm / add_rmsnorm backward (no GPU needed):
//   - the launch shape and CTA count (config.h) and the workspace size: pure functions;
//   - the fp64 reference (reference.h: rmsnorm_backward) against central differences of a naive
//     fp64 forward, with and without d_residual_out, Gemma's 1 + w, odd H;
//   - every argument error of rmsnorm_backward / add_rmsnorm_backward: blockfuse::Error naming the
//     argument before any CUDA call. The pointers are fake, 4 GiB-apart addresses that are never
//     dereferenced: a valid call gets as far as the device-memory check of 'dy'.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "add_rmsnorm/config.h"
#include "add_rmsnorm/reference.h"
#include "blockfuse/add_rmsnorm.h"
#include "common/host_float.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

// ---- config --------------------------------------------------------------------------------------

TEST(RmsNormBackwardConfig, ShapeCoversTheRow) {
  for (int nchunks = 1; nchunks <= 4096; ++nchunks) {
    const detail::AddRmsNormConfig c = detail::rmsnorm_backward_config(nchunks);
    ASSERT_EQ(c.threads % 32, 0) << nchunks;
    ASSERT_LE(c.threads, 512) << nchunks;
    if (nchunks <= detail::kRmsNormBwdMaxRegisterChunks) {
      ASSERT_TRUE(c.v == 1 || c.v == 2) << nchunks;
      ASSERT_GE(int64_t(c.v) * c.threads, nchunks) << nchunks;  // every chunk has a thread
      ASSERT_LT(int64_t(c.v) * (c.threads - 32), nchunks) << nchunks;  // no all-idle warp
    } else {
      ASSERT_EQ(c.v, 0) << nchunks;  // the loop kernel
    }
  }
  EXPECT_EQ(detail::rmsnorm_backward_config(512).v, 1);    // H = 4096: v1 x 512
  EXPECT_EQ(detail::rmsnorm_backward_config(512).threads, 512);
  EXPECT_EQ(detail::rmsnorm_backward_config(1024).v, 2);   // H = 8192: v2 x 512
  EXPECT_EQ(detail::rmsnorm_backward_config(513).threads, 288);  // H = 4104: v2 x 288
}

TEST(RmsNormBackwardConfig, CtaCountIsPureAndBounded) {
  EXPECT_EQ(detail::rmsnorm_backward_ctas(0), 0);
  EXPECT_EQ(detail::rmsnorm_backward_ctas(1), 1);
  EXPECT_EQ(detail::rmsnorm_backward_ctas(7), 7);
  EXPECT_EQ(detail::rmsnorm_backward_ctas(264), 264);
  EXPECT_EQ(detail::rmsnorm_backward_ctas(265), 264);
  EXPECT_EQ(detail::rmsnorm_backward_ctas(2048), 264);
  EXPECT_EQ(detail::rmsnorm_backward_ctas(4096), 264);
  EXPECT_EQ(detail::rmsnorm_backward_ctas(8448), 264);
  EXPECT_EQ(detail::rmsnorm_backward_ctas(8449), 265);
  EXPECT_EQ(detail::rmsnorm_backward_ctas(16384), 512);
  EXPECT_EQ(detail::rmsnorm_backward_ctas(32768), 1024);
  EXPECT_EQ(detail::rmsnorm_backward_ctas(int64_t{1} << 40), detail::kRmsNormBwdMaxCtas);
  int64_t prev = 0;
  for (int64_t rows = 1; rows <= 20000; rows += rows < 600 ? 1 : 97) {
    const int64_t c = detail::rmsnorm_backward_ctas(rows);
    ASSERT_GE(c, 1) << rows;
    ASSERT_LE(c, rows) << rows;  // every CTA has at least one row (its partial row is written)
    ASSERT_GE(c, prev) << rows;  // monotone
    prev = c;
  }
  EXPECT_EQ(rmsnorm_backward_ctas(2048), detail::rmsnorm_backward_ctas(2048));
}

TEST(RmsNormBackwardConfig, WorkspaceBytes) {
  EXPECT_EQ(rmsnorm_backward_workspace_bytes(0, 4096), 0u);
  EXPECT_EQ(rmsnorm_backward_workspace_bytes(1, 4096), 4096u * 4);
  EXPECT_EQ(rmsnorm_backward_workspace_bytes(2048, 4104), size_t(264) * 4104 * 4);
  EXPECT_EQ(rmsnorm_backward_workspace_bytes(1 << 20, 8192), size_t(1024) * 8192 * 4);
}

// ---- reference -----------------------------------------------------------------------------------

// The forward in fp64 from doubles: L = Σ_{m,i} dy · v + Σ dres · h (h itself is the returned residual).
double loss(int64_t M, int64_t H, const std::vector<double>& h, const std::vector<double>& w, const std::vector<double>& dy,
            const std::vector<double>* dres, double eps, bool gemma) {
  double l = 0;
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t i = 0; i < H; ++i) ss += h[size_t(m * H + i)] * h[size_t(m * H + i)];
    const double rstd = 1.0 / std::sqrt(ss / double(H) + eps);
    for (int64_t i = 0; i < H; ++i) {
      const double v = h[size_t(m * H + i)] * rstd * (w[size_t(i)] + (gemma ? 1.0 : 0.0));
      l += dy[size_t(m * H + i)] * v;
      if (dres) l += (*dres)[size_t(m * H + i)] * h[size_t(m * H + i)];
    }
  }
  return l;
}

class RmsNormBackwardReference : public ::testing::TestWithParam<DType> {};

TEST_P(RmsNormBackwardReference, MatchesCentralDifferences) {
  const DType t = GetParam();
  for (bool gemma : {false, true})
    for (bool with_dres : {false, true}) {
      const uint64_t seed = testing::fresh_seed();
      SCOPED_TRACE(std::string(gemma ? "gemma " : "") + (with_dres ? "d_residual_out " : "") + testing::seed_note(seed));
      std::mt19937_64 rng(seed);
      std::uniform_real_distribution<float> d(-2.f, 2.f);
      const int64_t M = 3, H = 24;
      std::vector<uint16_t> hb(M * H), dyb(M * H), rb(M * H), wb(H);
      std::vector<double> h(M * H), dy(M * H), r(M * H), w(H);
      auto fill = [&](std::vector<uint16_t>& b, std::vector<double>& v) {
        for (size_t i = 0; i < b.size(); ++i) {
          b[i] = host::from_float(t, d(rng));
          v[i] = host::to_float(t, b[i]);
        }
      };
      fill(hb, h);
      fill(dyb, dy);
      fill(rb, r);
      fill(wb, w);
      const double eps = 1e-5;
      std::vector<double> dh(M * H), dw(H);
      reference::rmsnorm_backward(t, M, H, dyb.data(), H, with_dres ? rb.data() : nullptr, H, hb.data(), H, wb.data(), eps,
                                  gemma, dh.data(), dw.data());
      const std::vector<double>* dres = with_dres ? &r : nullptr;
      const double step = 1e-6;
      for (int64_t k = 0; k < M * H; ++k) {
        std::vector<double> hp = h, hm = h;
        hp[size_t(k)] += step;
        hm[size_t(k)] -= step;
        const double fd = (loss(M, H, hp, w, dy, dres, eps, gemma) - loss(M, H, hm, w, dy, dres, eps, gemma)) / (2 * step);
        ASSERT_NEAR(dh[size_t(k)], fd, 1e-6 * (1 + std::fabs(fd))) << "dh " << k;
      }
      for (int64_t i = 0; i < H; ++i) {
        std::vector<double> wp = w, wm = w;
        wp[size_t(i)] += step;
        wm[size_t(i)] -= step;
        const double fd = (loss(M, H, h, wp, dy, dres, eps, gemma) - loss(M, H, h, wm, dy, dres, eps, gemma)) / (2 * step);
        ASSERT_NEAR(dw[size_t(i)], fd, 1e-6 * (1 + std::fabs(fd))) << "dweight " << i;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(BothDtypes, RmsNormBackwardReference, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// ---- argument errors -----------------------------------------------------------------------------

char* fake(int i) { return reinterpret_cast<char*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

class RmsNormBackwardArgs : public ::testing::TestWithParam<DType> {
 protected:
  // A valid call (M = 7, H = 48, strided views) that each check breaks in one way; add: the
  // add_rmsnorm_backward form (with d_residual_out), else rmsnorm_backward.
  struct Call {
    ConstMatrix dy, dres, h, weight;
    Matrix dh, dweight;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    RmsNormOptions opt;
    bool add = true;
    void operator()() const {
      if (add)
        add_rmsnorm_backward(dy, dres, h, weight, dh, dweight, workspace, workspace_bytes, opt);
      else
        rmsnorm_backward(dy, h, weight, dh, dweight, workspace, workspace_bytes, opt);
    }
  };
  Call valid(bool add = true) const {
    const DType dt = GetParam();
    Call c;
    c.dy = ConstMatrix{fake(1), dt, 7, 48, 56};
    c.dres = add ? ConstMatrix{fake(2), dt, 7, 48, 64} : ConstMatrix{};
    c.h = ConstMatrix{fake(3), dt, 7, 48, 48};
    c.weight = ConstMatrix{fake(4), dt, 1, 48, 48};
    c.dh = Matrix{fake(5), dt, 7, 48, 56};
    c.dweight = Matrix{fake(6), dt, 1, 48, 48};
    c.workspace = fake(7);
    c.workspace_bytes = rmsnorm_backward_workspace_bytes(7, 48);
    c.add = add;
    return c;
  }
  DType other() const { return GetParam() == DType::kBF16 ? DType::kFP16 : DType::kBF16; }
  static const char* hname(bool add) { return add ? "h" : "x"; }
  static const char* dhname(bool add) { return add ? "dh" : "dx"; }
};

TEST_P(RmsNormBackwardArgs, ValidCallsReachTheDeviceCheck) {
  const DType dt = GetParam();
  for (bool add : {false, true}) {
    { Call c = valid(add); expect_arg_error(c, "dy", "device memory"); }
    // Frozen weight (no dweight, no workspace), no input gradient (dweight only).
    { Call c = valid(add); c.dweight = Matrix{}; c.workspace = nullptr; c.workspace_bytes = 0; expect_arg_error(c, "dy", "device memory"); }
    { Call c = valid(add); c.dh = Matrix{}; expect_arg_error(c, "dy", "device memory"); }
    // In place: dh aliases dy exactly (and d_residual_out, for the add form).
    { Call c = valid(add); c.dh = Matrix{fake(1), dt, 7, 48, 56}; expect_arg_error(c, "dy", "device memory"); }
    if (add) { Call c = valid(add); c.dh = Matrix{fake(2), dt, 7, 48, 64}; expect_arg_error(c, "dy", "device memory"); }
    if (add) { Call c = valid(add); c.dres = ConstMatrix{}; expect_arg_error(c, "dy", "device memory"); }
    // A larger workspace than needed.
    { Call c = valid(add); c.workspace_bytes += 4096; expect_arg_error(c, "dy", "device memory"); }
  }
}

TEST_P(RmsNormBackwardArgs, MessageNamesTheFunction) {
  for (bool add : {false, true}) {
    Call c = valid(add);
    c.dy.cols = 44;
    try {
      c();
      ADD_FAILURE() << "no error for dy.cols = 44";
    } catch (const Error& e) {
      const std::string want = add ? "blockfuse::add_rmsnorm_backward:" : "blockfuse::rmsnorm_backward:";
      EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
    }
  }
}

TEST_P(RmsNormBackwardArgs, EpsAndDy) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (bool add : {false, true}) {
    for (float e : {0.0f, -1e-6f, nan, inf}) { Call c = valid(add); c.opt.eps = e; expect_arg_error(c, "opt.eps"); }
    { Call c = valid(add); c.dy.cols = 44; expect_arg_error(c, "dy", "44"); }
    { Call c = valid(add); c.dy.cols = 0; expect_arg_error(c, "dy", "H > 0"); }
    { Call c = valid(add); c.dy.ld = 60; expect_arg_error(c, "dy", "60"); }
    { Call c = valid(add); c.dy.data = fake(1) + 8; expect_arg_error(c, "dy", "aligned"); }
    { Call c = valid(add); c.dy.data = nullptr; expect_arg_error(c, "dy", "null"); }
  }
}

TEST_P(RmsNormBackwardArgs, InputsLikeDy) {
  for (bool add : {false, true}) {
    const char* h = hname(add);
    { Call c = valid(add); c.h.rows = 6; expect_arg_error(c, h, "6"); }
    { Call c = valid(add); c.h.cols = 40; expect_arg_error(c, h, "40"); }
    { Call c = valid(add); c.h.dtype = other(); expect_arg_error(c, h, dtype_name(other())); }
    { Call c = valid(add); c.h.data = fake(3) + 4; expect_arg_error(c, h, "aligned"); }
    { Call c = valid(add); c.h = ConstMatrix{}; expect_arg_error(c, h, "ld"); }  // required, never absent
    { Call c = valid(add); c.weight.rows = 2; expect_arg_error(c, "weight", "[2, 48]"); }
    { Call c = valid(add); c.weight.dtype = other(); expect_arg_error(c, "weight", dtype_name(other())); }
    { Call c = valid(add); c.weight.data = fake(4) + 2; expect_arg_error(c, "weight", "aligned"); }
  }
  { Call c = valid(true); c.dres.rows = 8; expect_arg_error(c, "d_residual_out", "8"); }
  { Call c = valid(true); c.dres.dtype = other(); expect_arg_error(c, "d_residual_out", dtype_name(other())); }
  { Call c = valid(true); c.dres.ld = 52; expect_arg_error(c, "d_residual_out", "52"); }
}

TEST_P(RmsNormBackwardArgs, Outputs) {
  const DType dt = GetParam();
  for (bool add : {false, true}) {
    const char* dh = dhname(add);
    { Call c = valid(add); c.dh = Matrix{}; c.dweight = Matrix{}; expect_arg_error(c, "dweight", "at least one output"); }
    { Call c = valid(add); c.dh.rows = 8; expect_arg_error(c, dh, "8"); }
    { Call c = valid(add); c.dh.dtype = other(); expect_arg_error(c, dh, dtype_name(other())); }
    { Call c = valid(add); c.dh.data = fake(5) + 8; expect_arg_error(c, dh, "aligned"); }
    // Overlaps other than the exact in-place alias.
    { Call c = valid(add); c.dh = Matrix{fake(1) + 128, dt, 7, 48, 56}; expect_arg_error(c, dh, "overlaps 'dy'"); }
    { Call c = valid(add); c.dh = Matrix{fake(3), dt, 7, 48, 48}; expect_arg_error(c, dh, std::string("overlaps '") + hname(add) + "'"); }
    { Call c = valid(add); c.dh = Matrix{fake(4) - 64, dt, 7, 48, 56}; expect_arg_error(c, dh, "overlaps 'weight'"); }
    { Call c = valid(add); c.dweight.cols = 40; c.dweight.ld = 40; expect_arg_error(c, "dweight", "[1, 40]"); }
    { Call c = valid(add); c.dweight.dtype = other(); expect_arg_error(c, "dweight", dtype_name(other())); }
    { Call c = valid(add); c.dweight.data = fake(6) + 2; expect_arg_error(c, "dweight", "aligned"); }
    { Call c = valid(add); c.dweight.data = fake(4); expect_arg_error(c, "dweight", "overlaps 'weight'"); }
    { Call c = valid(add); c.dweight.data = fake(5) + 64; expect_arg_error(c, "dweight", std::string("overlaps '") + dh + "'"); }
  }
  { Call c = valid(true); c.dh = Matrix{fake(2), dt, 7, 48, 56}; expect_arg_error(c, "dh", "overlaps 'd_residual_out'"); }
}

TEST_P(RmsNormBackwardArgs, Workspace) {
  for (bool add : {false, true}) {
    { Call c = valid(add); c.workspace_bytes -= 4; expect_arg_error(c, "workspace_bytes", "rmsnorm_backward_workspace_bytes"); }
    { Call c = valid(add); c.workspace = nullptr; expect_arg_error(c, "workspace", "nullptr"); }
    { Call c = valid(add); c.workspace = fake(7) + 4; expect_arg_error(c, "workspace", "aligned"); }
    { Call c = valid(add); c.workspace = fake(1); expect_arg_error(c, "workspace", "overlaps 'dy'"); }
    { Call c = valid(add); c.workspace = fake(6) - 64; expect_arg_error(c, "workspace", "overlaps 'dweight'"); }
  }
}

// M = 0: nothing to launch, but a given dweight is still checked as device memory (it is zeroed).
TEST_P(RmsNormBackwardArgs, ZeroRows) {
  for (bool add : {false, true}) {
    Call c = valid(add);
    c.dy.rows = c.h.rows = c.dh.rows = 0;
    if (add) c.dres.rows = 0;
    c.workspace = nullptr;
    c.workspace_bytes = 0;
    expect_arg_error(c, "dweight", "device memory");
    c.dweight = Matrix{};
    EXPECT_NO_THROW(c());
  }
}

INSTANTIATE_TEST_SUITE_P(BothDtypes, RmsNormBackwardArgs, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace blockfuse
