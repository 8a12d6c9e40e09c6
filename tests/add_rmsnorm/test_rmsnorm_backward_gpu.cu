// GPU tests of rmsnorm_backward / add_rmsnorm_backward (src/add_rmsnorm/backward.cu) against the fp64
// CPU reference (src/add_rmsnorm/reference.h: rmsnorm_backward, itself checked against central
// differences in test_rmsnorm_backward_cpu.cpp):
//   - dh within 2 roundings of the dtype plus an absolute 1e-4 (the fp32 sums and rsqrtf; the
//     difference g − h̃·m can cancel);
//   - dweight within 2 roundings plus 1e-5 · M (an fp32 sum over M rows in the CTAs' order);
//   - determinism: the same call twice gives bitwise equal dh and dweight;
//   - in place (dh over dy, dh over d_residual_out), a frozen weight (no dweight), dweight only,
//     M = 0 (dweight zeroed);
//   - the fused reduction (one cooperative launch, where every CTA is resident) gives the two-kernel
//     path's bits, directly and replayed from a CUDA graph.
// Shapes: rows 1, 7, 2048; H = 8, 4104 (v2 x 288 threads, a masked tail), 8192 (the widest register
// row), 8200 and 16392 (the loop kernel); both dtypes, Gemma's 1 + w, with and without
// d_residual_out, strided views. Outputs are poisoned (NaN) before each launch. Each test skips,
// saying so, where no CUDA device exists.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "add_rmsnorm/params.h"
#include "add_rmsnorm/reference.h"
#include "blockfuse/add_rmsnorm.h"
#include "testing/gtest/gtest_util.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;

#define SKIP_WITHOUT_GPU() BF_SKIP_WITHOUT_GPU("the rmsnorm backward kernels")
#define CUDA_OK(expr) BF_CUDA_OK(expr)

enum class Alias { kNone, kDy, kDres };

struct Case {
  DType dt = DType::kBF16;
  int64_t rows = 1, h = 8, pad = 0;
  bool add = true;       // add_rmsnorm_backward (else rmsnorm_backward)
  bool dres = true;      // d_residual_out given (add form only)
  bool want_dh = true, want_dw = true;
  bool gemma = false;
  Alias alias = Alias::kNone;
  float eps = 1e-6f;
};

std::string describe(const Case& c) {
  return std::string(dtype_name(c.dt)) + " rows=" + std::to_string(c.rows) + " H=" + std::to_string(c.h) +
         " pad=" + std::to_string(c.pad) + (c.add ? " add" : " rmsnorm") + (c.add && c.dres ? " d_residual_out" : "") +
         (c.want_dh ? " dh" : "") + (c.want_dw ? " dweight" : "") + (c.gemma ? " gemma" : "") +
         (c.alias == Alias::kDy ? " dh=dy" : c.alias == Alias::kDres ? " dh=d_residual_out" : "");
}

// Runs the case twice (determinism) and checks the first result against the reference.
void run_case(const Case& c) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(describe(c) + "; " + testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const int64_t M = c.rows, H = c.h;
  const bool dres_on = c.add && c.dres;
  HostMatrix dy(c.dt, M, H, H + c.pad), hm(c.dt, M, H, H + 2 * c.pad), w(c.dt, 1, H);
  HostMatrix dr(c.dt, dres_on ? M : 0, H, c.alias == Alias::kDres ? H + c.pad : H + 3 * c.pad);
  dy.fill_uniform(rng, -2.f, 2.f);
  hm.fill_uniform(rng, -2.f, 2.f);
  dr.fill_uniform(rng, -1.f, 1.f);
  w.fill_uniform(rng, c.gemma ? -1.f : -2.f, c.gemma ? 1.f : 2.f);

  std::vector<double> dh_ref(static_cast<size_t>(M * H)), dw_ref(static_cast<size_t>(H));
  reference::rmsnorm_backward(c.dt, M, H, dy.bits.data(), dy.ld, dres_on ? dr.bits.data() : nullptr, dr.ld,
                              hm.bits.data(), hm.ld, w.bits.data(), c.eps, c.gemma, dh_ref.data(), dw_ref.data());

  const size_t ws_bytes = c.want_dw ? rmsnorm_backward_workspace_bytes(M, H) : 0;
  testing::DeviceBuffer<unsigned char> ws(ws_bytes);
  RmsNormOptions opt;
  opt.eps = c.eps;
  opt.gemma_one_plus_w = c.gemma;

  std::vector<uint16_t> first_dh, first_dw;
  for (int rep = 0; rep < 2; ++rep) {
    testing::DeviceMatrix d_dy(dy), d_h(hm), d_w(w), d_dr(dr);
    HostMatrix dh_out(c.dt, M, H, H + c.pad + 8);
    dh_out.poison();
    HostMatrix dw_out(c.dt, 1, H);
    dw_out.poison();
    testing::DeviceMatrix d_dh(dh_out), d_dw(dw_out);
    Matrix dh_view = c.want_dh ? d_dh.view(dh_out) : Matrix{};
    if (c.alias == Alias::kDy) dh_view = Matrix{d_dy.data(), c.dt, M, H, dy.ld};
    if (c.alias == Alias::kDres) dh_view = Matrix{d_dr.data(), c.dt, M, H, dr.ld};
    const Matrix dw_view = c.want_dw ? d_dw.view(dw_out) : Matrix{};
    if (c.add)
      add_rmsnorm_backward(d_dy.cview(dy), dres_on ? d_dr.cview(dr) : ConstMatrix{}, d_h.cview(hm), d_w.cview(w), dh_view,
                           dw_view, ws.data(), ws_bytes, opt);
    else
      rmsnorm_backward(d_dy.cview(dy), d_h.cview(hm), d_w.cview(w), dh_view, dw_view, ws.data(), ws_bytes, opt);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    // The written dh, wherever it went.
    HostMatrix got_dh = c.alias == Alias::kDy ? dy : c.alias == Alias::kDres ? dr : dh_out;
    if (c.alias == Alias::kDy) d_dy.to_host(got_dh);
    else if (c.alias == Alias::kDres) d_dr.to_host(got_dh);
    else d_dh.to_host(got_dh);
    d_dw.to_host(dw_out);
    if (rep == 1) {
      if (c.want_dh) EXPECT_EQ(got_dh.bits, first_dh) << "dh differs between two identical calls";
      if (c.want_dw) EXPECT_EQ(dw_out.bits, first_dw) << "dweight differs between two identical calls";
      break;
    }
    first_dh = got_dh.bits;
    first_dw = dw_out.bits;
    if (c.want_dh) {
      const testing::Tolerance tol{1e-4, 2 * testing::unit_roundoff(c.dt)};
      testing::expect_close(
          testing::compare_host(M, H, [&](int64_t r, int64_t i) { return got_dh.at(r, i); },
                                [&](int64_t r, int64_t i) { return dh_ref[size_t(r * H + i)]; }, tol),
          "dh");
      if (c.alias == Alias::kNone) {
        int64_t pad_bad = 0;
        for (int64_t r = 0; r < M; ++r)
          for (int64_t i = H; i < got_dh.ld; ++i) pad_bad += got_dh.bits[size_t(r * got_dh.ld + i)] != 0xABCD;
        EXPECT_EQ(pad_bad, 0) << "elements written in the row padding of dh";
      }
    } else {
      // Without dh the kernel has nowhere to write it: its inputs stay as they were.
      HostMatrix dy_after = dy, h_after = hm;
      d_dy.to_host(dy_after);
      d_h.to_host(h_after);
      EXPECT_EQ(dy_after.bits, dy.bits) << "dy changed by a call without dh";
      EXPECT_EQ(h_after.bits, hm.bits) << "h changed by a call without dh";
      if (dres_on) {
        HostMatrix dr_after = dr;
        d_dr.to_host(dr_after);
        EXPECT_EQ(dr_after.bits, dr.bits) << "d_residual_out changed by a call without dh";
      }
    }
    if (c.want_dw) {
      const testing::Tolerance tol{1e-5 * double(M) + 1e-5, 2 * testing::unit_roundoff(c.dt)};
      testing::expect_close(testing::compare_host(1, H, [&](int64_t, int64_t i) { return dw_out.at(0, i); },
                                                  [&](int64_t, int64_t i) { return dw_ref[size_t(i)]; }, tol),
                            "dweight");
    }
  }
}

class RmsNormBackwardGpu : public ::testing::TestWithParam<DType> {};

TEST_P(RmsNormBackwardGpu, Shapes) {
  SKIP_WITHOUT_GPU();
  for (int64_t rows : {1, 7, 2048})
    for (int64_t h : {8, 4104, 8192, 8200, 16392}) {
      if (rows == 2048 && h > 8192) continue;  // the loop kernel below, at fewer rows
      for (bool add : {false, true}) {
        Case c;
        c.dt = GetParam();
        c.rows = rows;
        c.h = h;
        c.add = add;
        run_case(c);
      }
    }
  Case c;
  c.dt = GetParam();
  c.rows = 300;  // more rows than CTAs: the loop kernel's partials accumulate over rows
  c.h = 16392;
  run_case(c);
  // Many partial rows for the dweight reduction: 20000 rows -> 625 CTAs (groups of 19-20 rows in one
  // batch of loads), 40000 -> 1024 (the cap); a width that is no multiple of its 32 columns.
  for (int64_t rows : {20000, 40000}) {
    Case d;
    d.dt = GetParam();
    d.rows = rows;
    d.h = 72;
    d.add = rows == 40000;
    run_case(d);
  }
}

TEST_P(RmsNormBackwardGpu, GemmaResidualGradAndStrides) {
  SKIP_WITHOUT_GPU();
  for (bool gemma : {false, true})
    for (bool dres : {false, true})
      for (int64_t h : {24, 4104, 8200}) {
        Case c;
        c.dt = GetParam();
        c.rows = 33;
        c.h = h;
        c.gemma = gemma;
        c.dres = dres;
        c.pad = 8;
        run_case(c);
      }
}

TEST_P(RmsNormBackwardGpu, MixedOutputsAndInPlace) {
  SKIP_WITHOUT_GPU();
  for (int64_t h : {4104, 8200}) {
    Case c;
    c.dt = GetParam();
    c.rows = 513;
    c.h = h;
    { Case d = c; d.want_dw = false; run_case(d); }  // frozen weight
    { Case d = c; d.want_dh = false; run_case(d); }  // only the weight needs a gradient
    { Case d = c; d.alias = Alias::kDy; run_case(d); }
    { Case d = c; d.alias = Alias::kDres; run_case(d); }
    { Case d = c; d.add = false; d.alias = Alias::kDy; run_case(d); }
  }
  // Many rows per CTA (2049 rows: 264 CTAs take 7 or 8 each, so the shared-memory prefetch runs
  // two rows ahead of a dh written over dy or d_residual_out), register shapes v = 1 and v = 2.
  for (int64_t h : {4096, 8192}) {
    Case c;
    c.dt = GetParam();
    c.rows = 2049;
    c.h = h;
    { Case d = c; d.alias = Alias::kDy; run_case(d); }
    { Case d = c; d.alias = Alias::kDres; run_case(d); }
  }
}

TEST_P(RmsNormBackwardGpu, ZeroRowsZeroDweight) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  HostMatrix dw(dt, 1, 64);
  dw.poison();
  HostMatrix w(dt, 1, 64);
  w.poison();
  testing::DeviceMatrix d_dw(dw), d_w(w);
  rmsnorm_backward(ConstMatrix{nullptr, dt, 0, 64, 64}, ConstMatrix{nullptr, dt, 0, 64, 64}, d_w.cview(w), Matrix{},
                   d_dw.view(dw), nullptr, 0, {});
  CUDA_OK(cudaDeviceSynchronize());
  d_dw.to_host(dw);
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(dw.at(0, i), 0.0f) << i;
}

// One add_rmsnorm_backward call of rows x h (with d_residual_out and dweight) on `stream`, optionally
// captured into a CUDA graph and replayed twice; returns dh's and dweight's bits.
struct Bits {
  std::vector<uint16_t> dh, dw;
};
Bits call_bits(DType dt, int64_t rows, int64_t h, uint64_t seed, bool fused_allowed, bool graph) {
  std::mt19937_64 rng(seed);
  HostMatrix dy(dt, rows, h), hm(dt, rows, h), dr(dt, rows, h), w(dt, 1, h);
  dy.fill_uniform(rng, -2.f, 2.f);
  hm.fill_uniform(rng, -2.f, 2.f);
  dr.fill_uniform(rng, -1.f, 1.f);
  w.fill_uniform(rng, -2.f, 2.f);
  HostMatrix dh(dt, rows, h), dw(dt, 1, h);
  dh.poison();
  dw.poison();
  testing::DeviceMatrix d_dy(dy), d_h(hm), d_dr(dr), d_w(w), d_dh(dh), d_dw(dw);
  const size_t ws_bytes = rmsnorm_backward_workspace_bytes(rows, h);
  testing::DeviceBuffer<unsigned char> ws(ws_bytes);
  cudaStream_t stream;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  detail::set_rmsnorm_backward_fused_reduce(fused_allowed);
  auto call = [&] {
    add_rmsnorm_backward(d_dy.cview(dy), d_dr.cview(dr), d_h.cview(hm), d_w.cview(w), d_dh.view(dh), d_dw.view(dw),
                         ws.data(), ws_bytes, {}, stream);
  };
  if (graph) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    call();
    EXPECT_EQ(cudaStreamEndCapture(stream, &g), cudaSuccess);
    EXPECT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    for (int rep = 0; rep < 2; ++rep) EXPECT_EQ(cudaGraphLaunch(ge, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(cudaGraphExecDestroy(ge), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  } else {
    call();
  }
  detail::set_rmsnorm_backward_fused_reduce(true);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // (EXPECT: ASSERT returns void)
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  d_dh.to_host(dh);
  d_dw.to_host(dw);
  for (uint16_t b : dw.bits) EXPECT_NE(b, 0xABCD) << "a dweight element left unwritten";
  return {dh.bits, dw.bits};
}

// The fused reduction (row kernel + grid-wide barrier, one cooperative launch) adds the partials in
// the reduction kernel's order: the same bits as the two-kernel path, directly and replayed from a
// CUDA graph. Small calls (every CTA resident on any GPU) take it; v = 2 rows (H > 4096) never do.
TEST_P(RmsNormBackwardGpu, FusedReductionMatchesTheTwoKernels) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  EXPECT_TRUE(detail::rmsnorm_backward_fused_reduce_applies(7, 1000, true));
  EXPECT_TRUE(detail::rmsnorm_backward_fused_reduce_applies(33, 4096, false));
  EXPECT_FALSE(detail::rmsnorm_backward_fused_reduce_applies(7, 4104, true));    // v = 2
  EXPECT_FALSE(detail::rmsnorm_backward_fused_reduce_applies(7, 16392, true));   // the loop kernel
  EXPECT_FALSE(detail::rmsnorm_backward_fused_reduce_applies(0, 4096, true));
  detail::set_rmsnorm_backward_fused_reduce(false);
  EXPECT_FALSE(detail::rmsnorm_backward_fused_reduce_applies(7, 1000, true));
  detail::set_rmsnorm_backward_fused_reduce(true);
  for (auto [rows, h] : {std::pair<int64_t, int64_t>{7, 1000}, {2048, 4096}, {8448, 4096}, {20000, 72}, {300, 24}}) {
    const uint64_t seed = testing::fresh_seed();
    SCOPED_TRACE(std::string(dtype_name(dt)) + " rows=" + std::to_string(rows) + " H=" + std::to_string(h) + " fused " +
                 (detail::rmsnorm_backward_fused_reduce_applies(rows, h, true) ? "applies" : "does not apply") + "; " +
                 testing::seed_note(seed));
    const Bits two = call_bits(dt, rows, h, seed, false, false);
    const Bits fused = call_bits(dt, rows, h, seed, true, false);
    const Bits replay = call_bits(dt, rows, h, seed, true, true);
    EXPECT_EQ(fused.dh, two.dh) << "dh";
    EXPECT_EQ(fused.dw, two.dw) << "dweight: the fused reduction's order differs";
    EXPECT_EQ(replay.dh, two.dh) << "dh from the graph replay";
    EXPECT_EQ(replay.dw, two.dw) << "dweight from the graph replay";
  }
}

INSTANTIATE_TEST_SUITE_P(BothDtypes, RmsNormBackwardGpu, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace blockfuse
