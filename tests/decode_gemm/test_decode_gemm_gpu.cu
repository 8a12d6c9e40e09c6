// GPU tests of blockfuse::decode_gemm (src/decode_gemm/): the kernel's y = x · Wᵀ against the fp64
// CPU reference (src/decode_gemm/reference.cpp) on host copies of the inputs, both dtypes.
//
// Shapes: M in {1, 3, 8, 16, 17, 32} (one to four 8-row MMA tiles, partial tiles), N in {1, 7, 8,
// 24, 1000} (any N is supported: columns past N are neither read nor written; 1 and 7 are a
// partial 16-column warp tile, 1000 a partial block), K in {8, 24, 4104, 16384} (less than one
// 32-k chunk, a partial chunk, a partial 8-chunk step, a real projection). The heuristic's
// configuration and explicit ones (split 1, 2, 7, 16 x 4 and 8 warps) must all agree with the
// reference; the same configuration twice gives the same bits (fixed-order split-K sum).
// Outputs are poisoned with NaN before each launch (an element the kernel forgets stays NaN);
// strided cases pad every row and check y's padding sentinel comes back untouched. The workspace
// is zeroed once per test and reused by every call, graph replays included (the split-K counters
// must reset themselves). Tolerance: fp32 accumulation against fp64 — |y − ref| <= u·|ref| (the
// one rounding of y) + 1e-5·Σ|x·w| (fp32 sums of K products, in any order: far above their
// ~1e-7·Σ|x·w| typical error, far below a wrong or missing term at these K).
// Each test skips, saying so, where no CUDA device exists. DecodeGemmSanitizer is the small suite
// scripts/sanitize runs under compute-sanitizer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include "blockfuse/decode_gemm.h"
#include "decode_gemm/reference.h"
#include "testing/gtest/gtest_util.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;

#define SKIP_WITHOUT_GPU() BF_SKIP_WITHOUT_GPU("the decode_gemm kernel")

#define CUDA_OK(expr) BF_CUDA_OK(expr)

// A zeroed workspace, as the API asks (cudaMemset once before first use). The memset completes
// before the constructor returns: run_once may launch on a non-blocking stream, which would not wait
// for it (to_device, testing/device_buffer.h, says why).
struct Workspace {
  testing::DeviceBuffer<unsigned char> buf;
  void* p;
  size_t bytes;
  explicit Workspace(size_t n) : buf(n), p(buf.data()), bytes(n) {
    if (n && (cudaMemset(p, 0, n) != cudaSuccess || cudaStreamSynchronize(cudaStreamLegacy) != cudaSuccess))
      throw std::runtime_error("cudaMemset failed");
  }
  // The counters must be back at zero after every completed call.
  bool counters_are_zero(int64_t n) const {
    if (!p) return true;
    std::vector<int> c(size_t((n + 63) / 64));
    if (cudaMemcpy(c.data(), p, c.size() * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    for (int v : c)
      if (v != 0) return false;
    return true;
  }
};

// Random inputs (never zero) with row padding; x in [-1, 1), w in [-1/√K, 1/√K) like nn.Linear.
struct Problem {
  HostMatrix x, w;
  std::vector<double> ref, abs_sum;
  Problem(DType dt, int64_t m, int64_t n, int64_t k, int64_t x_pad, int64_t w_pad, std::mt19937_64& rng)
      : x(dt, m, k, k + x_pad), w(dt, n, k, k + w_pad) {
    x.fill_uniform(rng, -1.f, 1.f);
    const float wb = 1.0f / std::sqrt(float(std::max<int64_t>(k, 1)));
    w.fill_uniform(rng, -wb, wb);
    compute_reference();
  }
  void compute_reference() {
    ref.assign(size_t(x.rows * w.rows), 0);
    abs_sum.assign(ref.size(), 0);
    decode::reference(x.view(), w.view(), ref.data(), w.rows, abs_sum.data());
  }
};

// Checks y (poisoned before the call, padding sentinel 0xABCD) against the problem's reference.
void check(const Problem& pr, const HostMatrix& y) {
  // One output rounding, plus the fp32 summation order's share of Σ|x·w| (cancellation).
  const double u = testing::unit_roundoff(y.dtype);
  testing::CompareStats st;
  int64_t pad_bad = 0;
  for (int64_t m = 0; m < y.rows; ++m) {
    for (int64_t n = 0; n < y.cols; ++n) {
      const double ref = pr.ref[size_t(m * y.cols + n)];
      st.add(m, n, y.at(m, n), ref, u * std::fabs(ref) + 1e-5 * pr.abs_sum[size_t(m * y.cols + n)] + 1e-30);
    }
    for (int64_t c = y.cols; c < y.ld; ++c)
      if (y.bits[size_t(m * y.ld + c)] != 0xABCD) ++pad_bad;
  }
  // No relative-L2 bound: some problems hold deliberate infinities and NaNs.
  testing::expect_close(st, "y", INFINITY);
  EXPECT_EQ(pad_bad, 0) << "elements written in the row padding of 'y' (ld ignored?)";
}

// One call of decode_gemm (heuristic when cfg is empty) on device copies; returns y's host copy.
HostMatrix run_once(const Problem& pr, int64_t y_pad, std::optional<DecodeGemmConfig> cfg, cudaStream_t stream = nullptr) {
  const int64_t M = pr.x.rows, N = pr.w.rows, K = pr.x.cols;
  HostMatrix y(pr.x.dtype, M, N, N + y_pad);
  y.poison();
  testing::DeviceMatrix dx(pr.x), dw(pr.w), dy(y);
  Workspace ws(cfg ? decode_gemm_workspace_size(M, N, K, *cfg) : decode_gemm_workspace_size(M, N, K));
  if (cfg)
    decode_gemm(dx.cview(pr.x), dw.cview(pr.w), dy.view(y), ws.p, ws.bytes, *cfg, stream);
  else
    decode_gemm(dx.cview(pr.x), dw.cview(pr.w), dy.view(y), ws.p, ws.bytes, stream);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  dy.to_host(y);
  EXPECT_TRUE(ws.counters_are_zero(N)) << "split-K counters not reset";
  return y;
}

std::string cfg_note(std::optional<DecodeGemmConfig> c) {
  return c ? "split " + std::to_string(c->split_k) + " warps " + std::to_string(c->warps_per_block) : "heuristic";
}

void run_case(DType dt, int64_t m, int64_t n, int64_t k, int64_t x_pad = 0, int64_t w_pad = 0, int64_t y_pad = 0,
              std::optional<DecodeGemmConfig> cfg = std::nullopt) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(std::string(dtype_name(dt)) + " M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" +
               std::to_string(k) + " pads " + std::to_string(x_pad) + "/" + std::to_string(w_pad) + "/" +
               std::to_string(y_pad) + " " + cfg_note(cfg) + "; " + testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  Problem pr(dt, m, n, k, x_pad, w_pad, rng);
  check(pr, run_once(pr, y_pad, cfg));
}

class DecodeGemmGpu : public ::testing::TestWithParam<DType> {};

TEST_P(DecodeGemmGpu, MatchesFp64Reference) {
  SKIP_WITHOUT_GPU();
  for (int64_t m : {1, 3, 8, 16, 17, 32})
    for (int64_t n : {1, 7, 8, 24, 1000})
      for (int64_t k : {8, 24, 4104}) run_case(GetParam(), m, n, k);
}

TEST_P(DecodeGemmGpu, LongK) {
  SKIP_WITHOUT_GPU();
  for (int64_t m : {1, 16, 32}) run_case(GetParam(), m, 264, 16384);
  run_case(GetParam(), 8, 2312, 16384);  // a 405B qkv slice + 8 columns: a partial block at the end
}

TEST_P(DecodeGemmGpu, StridedRows) {
  SKIP_WITHOUT_GPU();
  // x and w padded by 8 and 40 elements (the 16-byte minimum and an odd multiple), y by 3 (any ld).
  for (int64_t m : {1, 17})
    for (int64_t n : {7, 1000}) {
      run_case(GetParam(), m, n, 4104, 8, 40, 3);
      run_case(GetParam(), m, n, 24, 40, 8, 1, DecodeGemmConfig{1, 8});
    }
  // K = 0 (rows of ld 8, nothing to read): y is all zeros.
  run_case(GetParam(), 3, 24, 0, 8, 8, 0);
}

TEST_P(DecodeGemmGpu, ExplicitConfigsAgree) {
  SKIP_WITHOUT_GPU();
  for (int64_t m : {3, 17, 32}) {
    const uint64_t seed = testing::fresh_seed();
    std::mt19937_64 rng(seed);
    Problem pr(GetParam(), m, 1000, 8192, 0, 8, rng);  // one reference for all eight configurations
    for (int split : {1, 2, 7, 16})
      for (int warps : {4, 8}) {
        SCOPED_TRACE("M=" + std::to_string(m) + " " + cfg_note(DecodeGemmConfig{split, warps}) + "; " + testing::seed_note(seed));
        check(pr, run_once(pr, 5, DecodeGemmConfig{split, warps}));
      }
  }
}

TEST_P(DecodeGemmGpu, DeterministicForAConfiguration) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  Problem pr(GetParam(), 16, 1000, 8192, 0, 0, rng);
  for (int split : {1, 7}) {
    const HostMatrix a = run_once(pr, 0, DecodeGemmConfig{split, 4});
    const HostMatrix b = run_once(pr, 0, DecodeGemmConfig{split, 4});
    EXPECT_EQ(a.bits, b.bits) << "split " << split << ": two identical calls differ";
  }
}

// One workspace, many calls: different M, configurations and a CUDA graph replayed 3 times must
// all give the reference (the last block of every N tile leaves its counter at 0).
TEST_P(DecodeGemmGpu, RepeatedCallsAndGraphReplay) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  const int64_t N = 1000, K = 8192;
  std::mt19937_64 rng(testing::fresh_seed());
  Problem pr(dt, 32, N, K, 0, 0, rng);
  testing::DeviceMatrix dx(pr.x), dw(pr.w);
  size_t ws_bytes = decode_gemm_workspace_size(32, N, K);
  for (int split : {2, 7, 16})
    for (int warps : {4, 8}) ws_bytes = std::max(ws_bytes, decode_gemm_workspace_size(32, N, K, DecodeGemmConfig{split, warps}));
  Workspace ws(ws_bytes);
  HostMatrix y(dt, 32, N);
  testing::DeviceMatrix dy(y);
  auto run_and_check = [&](const std::function<void()>& fn, const std::string& what) {
    SCOPED_TRACE(what);
    y.poison();
    dy.upload(y);
    fn();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dy.to_host(y);
    check(pr, y);
    EXPECT_TRUE(ws.counters_are_zero(N));
  };
  for (int rep = 0; rep < 3; ++rep) {
    for (int split : {2, 7, 16})
      for (int warps : {4, 8})
        run_and_check([&] { decode_gemm(dx.cview(pr.x), dw.cview(pr.w), dy.view(y), ws.p, ws.bytes, DecodeGemmConfig{split, warps}); },
                      "eager split " + std::to_string(split) + " warps " + std::to_string(warps));
    run_and_check([&] { decode_gemm(dx.cview(pr.x), dw.cview(pr.w), dy.view(y), ws.p, ws.bytes); }, "eager heuristic");
  }
  // Fewer rows through the same workspace (sized for M = 32).
  {
    const ConstMatrix x5{dx.data(), dt, 5, K, K};
    HostMatrix y5(dt, 5, N);
    y5.poison();
    testing::DeviceMatrix dy5(y5);
    decode_gemm(x5, dw.cview(pr.w), dy5.view(y5), ws.p, ws.bytes);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dy5.to_host(y5);
    Problem p5 = pr;
    p5.x = HostMatrix(dt, 5, K);
    std::memcpy(p5.x.bits.data(), pr.x.bits.data(), size_t(5 * K) * 2);
    p5.compute_reference();
    check(p5, y5);
  }
  // A graph of three calls (two configurations), replayed 3 times.
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  decode_gemm(dx.cview(pr.x), dw.cview(pr.w), dy.view(y), ws.p, ws.bytes, DecodeGemmConfig{7, 4}, s);
  decode_gemm(dx.cview(pr.x), dw.cview(pr.w), dy.view(y), ws.p, ws.bytes, DecodeGemmConfig{16, 8}, s);
  decode_gemm(dx.cview(pr.x), dw.cview(pr.w), dy.view(y), ws.p, ws.bytes, s);
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; ++rep)
    run_and_check([&] { ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess); }, "graph replay " + std::to_string(rep));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// One workspace shared by calls of different N (as the torch binding shares one per device): a call
// with more N blocks must not find an earlier call's partials where its counters are. Here the
// first call's partials would have started at byte 256, inside the second call's 128 counters, had
// the counter region been sized by N (params.h).
TEST_P(DecodeGemmGpu, OneWorkspaceServesEveryShape) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  std::mt19937_64 rng(testing::fresh_seed());
  Problem small(dt, 32, 40, 4104, 0, 0, rng), large(dt, 3, 8192, 8192, 0, 0, rng);
  const DecodeGemmConfig c_small{5, 4}, c_large{4, 4};
  Workspace ws(std::max(decode_gemm_workspace_size(32, 40, 4104, c_small), decode_gemm_workspace_size(3, 8192, 8192, c_large)));
  for (int rep = 0; rep < 2; ++rep)
    for (const Problem* pr : {&small, &large}) {
      const DecodeGemmConfig c = pr == &small ? c_small : c_large;
      SCOPED_TRACE("N=" + std::to_string(pr->w.rows) + " rep " + std::to_string(rep));
      HostMatrix y(dt, pr->x.rows, pr->w.rows);
      y.poison();
      testing::DeviceMatrix dx(pr->x), dw(pr->w), dy(y);
      decode_gemm(dx.cview(pr->x), dw.cview(pr->w), dy.view(y), ws.p, ws.bytes, c);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      dy.to_host(y);
      check(*pr, y);
      EXPECT_TRUE(ws.counters_are_zero(pr->w.rows));
    }
}

// NaN and Inf in x reach exactly the outputs of their row, as in IEEE arithmetic (the reference):
// a NaN row is all NaN, a row with one +Inf is ±Inf by the sign of w[n, k], other rows finite.
TEST_P(DecodeGemmGpu, NanAndInfPropagate) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  std::mt19937_64 rng(testing::fresh_seed());
  for (int split : {1, 5}) {
    Problem pr(dt, 9, 40, 4104, 0, 0, rng);
    pr.x.set(1, 777, std::numeric_limits<float>::quiet_NaN());
    pr.x.set(8, 4100, std::numeric_limits<float>::infinity());
    pr.x.set(4, 0, -std::numeric_limits<float>::infinity());
    pr.compute_reference();
    SCOPED_TRACE("split " + std::to_string(split));
    check(pr, run_once(pr, 2, DecodeGemmConfig{split, 4}));
  }
}

TEST_P(DecodeGemmGpu, OnAStream) {
  SKIP_WITHOUT_GPU();
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::mt19937_64 rng(testing::fresh_seed());
  Problem pr(GetParam(), 4, 520, 4096, 8, 0, rng);
  check(pr, run_once(pr, 0, std::nullopt, s));
  check(pr, run_once(pr, 0, DecodeGemmConfig{3, 8}, s));
  CUDA_OK(cudaStreamDestroy(s));
}

// Small shapes for compute-sanitizer (memcheck, racecheck): every kernel path — split 1 and the
// split-K reduction, 4 and 8 warps, partial N and M tiles, a K tail — in seconds.
class DecodeGemmSanitizer : public ::testing::TestWithParam<DType> {};

TEST_P(DecodeGemmSanitizer, SmallShapesEveryPath) {
  SKIP_WITHOUT_GPU();
  for (int64_t m : {3, 17})
    for (auto [split, warps] : {std::pair{1, 4}, std::pair{3, 4}, std::pair{2, 8}}) {
      run_case(GetParam(), m, 40, 200, 8, 0, 1, DecodeGemmConfig{split, warps});
    }
  run_case(GetParam(), 32, 7, 24);
}

INSTANTIATE_TEST_SUITE_P(BothDtypes, DecodeGemmGpu, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });
INSTANTIATE_TEST_SUITE_P(BothDtypes, DecodeGemmSanitizer, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace blockfuse
