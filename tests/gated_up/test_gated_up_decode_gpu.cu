// GPU tests of gated_up's decode path (GatedUpKernel::kDecode: decode_gemm's kernel with the gate
// applied to its fp32 sums; what kAuto runs at M <= 32). The kernel's h against an fp64 reference
// on host copies of fresh random inputs (src/decode_gemm/reference.cpp gives up and gate in fp64
// with Σ|x·w|; the gate is applied in fp64), outputs poisoned with NaN before every call.
//
// Shapes: M in {1, 2, 7, 8, 9, 16, 17, 31, 32} (one to four 8-row MMA tiles, partial ones), U from 8
// (half a warp's 16 columns) through Llama-3 8B's 14336, K from 8 (under one 32-k chunk) through
// 4104 (a partial chunk) and 8192. Without a workspace the kernel never splits K; with one the
// heuristic splits it where 2U gives few column blocks (asserted, so the split-K path is really
// taken). Also: padded rows whose padding must stay untouched, both activations and dtypes, NaN
// confined to its token's row, bitwise repeatability, a CUDA graph replayed with new x, and the
// errors only a device can show (workspace too small, misaligned).
//
// Tolerance per element: the output's one rounding, u·|h|, plus the fp32 sums' order error (at most
// 1e-5·Σ|x·w|, as in the decode_gemm tests) carried through h = act(g)·up: |act(g)|·e_up +
// 1.13·(|up| + e_up)·e_gate (|act'| <= 1.13 for SiLU and tanh-GELU). Every test skips, saying so,
// without a GPU; GatedUpDecodeSanitizer is the set scripts/sanitize runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "common/activation.cuh"
#include "blockfuse/blockfuse.h"
#include "common/check.h"
#include "common/device.h"
#include "decode_gemm/reference.h"
#include "testing/gtest/gtest_util.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;

#define SKIP_WITHOUT_GPU() BF_SKIP_WITHOUT_GPU("gated_up's decode kernel")

struct Case {
  int64_t m, k, u;
  int64_t x_pad = 0, w_pad = 0, o_pad = 0;
};

std::string describe(Case c, DType dt, Activation act) {
  return std::string(dtype_name(dt)) + " " + activation_name(act) + " M=" + std::to_string(c.m) + " K=" +
         std::to_string(c.k) + " U=" + std::to_string(c.u) + " pads " + std::to_string(c.x_pad) + "/" +
         std::to_string(c.w_pad) + "/" + std::to_string(c.o_pad);
}

// Random x in [-1, 1), interleaved w in [-1/√K, 1/√K) (never zero), and h's fp64 reference.
struct Problem {
  Activation act;
  HostMatrix x, w;
  std::vector<double> h, tol;
  Problem(DType dt, Activation a, Case c, std::mt19937_64& rng)
      : act(a), x(dt, c.m, c.k, c.k + c.x_pad), w(dt, 2 * c.u, c.k, c.k + c.w_pad) {
    x.fill_uniform(rng, -1.f, 1.f);
    const float wb = 1.0f / std::sqrt(float(c.k));
    w.fill_uniform(rng, -wb, wb);
    compute_reference();
  }
  void compute_reference() {
    const int64_t M = x.rows, N = w.rows, U = N / 2;
    std::vector<double> y(size_t(M * N)), abs(size_t(M * N));
    decode::reference(x.view(), w.view(), y.data(), N, abs.data());
    h.assign(size_t(M * U), 0);
    tol.assign(h.size(), 0);
    const double u = testing::unit_roundoff(x.dtype);
    // Half the spacing of the output type's subnormals: where |h| is below the smallest normal
    // (fp16: 6.1e-5) rounding errs by up to that much, not by u·|h|.
    const double sub = std::ldexp(1.0, x.dtype == DType::kFP16 ? -25 : -134);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < U; ++j) {
        const double up = y[size_t(m * N + 2 * j)], g = y[size_t(m * N + 2 * j + 1)];
        const double e_up = 1e-5 * abs[size_t(m * N + 2 * j)], e_g = 1e-5 * abs[size_t(m * N + 2 * j + 1)];
        const double hv = act_f64(act, g) * up;
        h[size_t(m * U + j)] = hv;
        tol[size_t(m * U + j)] = u * std::fabs(hv) + std::fabs(act_f64(act, g)) * e_up + 1.13 * (std::fabs(up) + e_up) * e_g + sub;
      }
  }
};

// h (poisoned before the call; row padding holds HostMatrix's 0xABCD sentinel) against the reference.
void check(const Problem& pr, const HostMatrix& out) {
  testing::CompareStats st;
  int64_t pad_bad = 0;
  for (int64_t m = 0; m < out.rows; ++m) {
    for (int64_t j = 0; j < out.cols; ++j)
      st.add(m, j, out.at(m, j), pr.h[size_t(m * out.cols + j)], pr.tol[size_t(m * out.cols + j)]);
    for (int64_t c = out.cols; c < out.ld; ++c)
      if (out.bits[size_t(m * out.ld + c)] != 0xABCD) ++pad_bad;
  }
  testing::expect_close(st, "h", INFINITY);  // per element only: some problems hold a NaN row
  EXPECT_EQ(pad_bad, 0) << "elements written in the row padding of 'out'";
}

// A zeroed workspace (the API's contract: cudaMemset once before the first call).
struct Workspace {
  testing::DeviceBuffer<unsigned char> buf;
  size_t bytes;
  explicit Workspace(size_t n) : buf(n), bytes(n) {
    if (n) BF_CUDA_CHECK(cudaMemset(buf.data(), 0, n));
  }
  void* ptr() const { return bytes ? buf.data() : nullptr; }
};

// One gated_up call on device copies, with or without a workspace; returns h's host copy.
HostMatrix run_once(const Problem& pr, Case c, bool with_workspace, GatedUpKernel kernel = GatedUpKernel::kDecode,
                    cudaStream_t stream = nullptr) {
  HostMatrix out(pr.x.dtype, c.m, c.u, c.u + c.o_pad);
  out.poison();
  testing::DeviceMatrix dx(pr.x), dw(pr.w), dout(out);
  Workspace ws(with_workspace ? gated_up_workspace_size(c.m, c.k, c.u) : 0);
  GatedUpOptions opt;
  opt.kernel = kernel;
  if (with_workspace)
    gated_up(dx.cview(pr.x), dw.cview(pr.w), dout.view(out), pr.act, ws.ptr(), ws.bytes, stream, opt);
  else
    gated_up(dx.cview(pr.x), dw.cview(pr.w), dout.view(out), pr.act, stream, opt);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  dout.to_host(out);
  return out;
}

// Whether the heuristic splits K for this call when given a workspace (the tests assert it where
// they mean to cover the split-K path).
bool splits(Case c) {
  return decode_gemm_heuristic(c.m, 2 * c.u, c.k, detail::current_device_spec().sm_count).split_k > 1;
}

void run_case(DType dt, Activation act, Case c, bool with_workspace, GatedUpKernel kernel = GatedUpKernel::kDecode) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(describe(c, dt, act) + (with_workspace ? " workspace" : " no workspace") + " kernel " +
               kernel_name(kernel) + "; " + testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const Problem pr(dt, act, c, rng);
  check(pr, run_once(pr, c, with_workspace, kernel));
}

class GatedUpDecode : public ::testing::TestWithParam<DType> {};

TEST_P(GatedUpDecode, EveryRowCountBothActivations) {
  SKIP_WITHOUT_GPU();
  for (int64_t m : {1, 2, 7, 8, 9, 16, 17, 31, 32})
    for (Activation act : {Activation::kSiLU, Activation::kGeluTanh}) {
      run_case(GetParam(), act, Case{m, 136, 40}, false);
      run_case(GetParam(), act, Case{m, 4104, 72}, true);
    }
}

TEST_P(GatedUpDecode, SplitKThroughTheWorkspace) {
  SKIP_WITHOUT_GPU();
  // Few column blocks: with a workspace the heuristic splits K (asserted); without, it does not.
  for (Case c : {Case{1, 8192, 64}, Case{17, 4104, 200}, Case{32, 16384, 1024}}) {
    ASSERT_TRUE(splits(c)) << "M=" << c.m << " K=" << c.k << " U=" << c.u << ": pick a shape the heuristic splits";
    run_case(GetParam(), Activation::kSiLU, c, true);
    run_case(GetParam(), Activation::kSiLU, c, false);
  }
}

TEST_P(GatedUpDecode, ModelShapesAndAuto) {
  SKIP_WITHOUT_GPU();
  // Llama-3 8B's projection through kAuto (which must take the decode kernel at these M) and kDecode.
  for (int64_t m : {1, 4, 16, 32}) run_case(GetParam(), Activation::kSiLU, Case{m, 4096, 14336}, false, GatedUpKernel::kAuto);
  run_case(GetParam(), Activation::kGeluTanh, Case{3, 4608, 2048}, true);
}

TEST_P(GatedUpDecode, TinyAndPaddedShapes) {
  SKIP_WITHOUT_GPU();
  for (bool ws : {false, true}) {
    run_case(GetParam(), Activation::kSiLU, Case{5, 8, 8}, ws);                 // K under one chunk, U = half a warp tile
    run_case(GetParam(), Activation::kSiLU, Case{3, 24, 8, 8, 16, 8}, ws);      // padded rows, NaN-free padding sentinel
    run_case(GetParam(), Activation::kGeluTanh, Case{32, 4104, 264, 24, 8, 40}, ws);
  }
}

// A NaN in one token's x row makes that row of h NaN (0 · NaN is NaN) and no other; with split-K
// too (the partials of other rows are summed separately).
TEST_P(GatedUpDecode, NanStaysInItsRow) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  for (bool ws : {false, true}) {
    const Case c{9, 8192, 64};
    Problem pr(GetParam(), Activation::kSiLU, c, rng);
    pr.x.set(4, 777, std::numeric_limits<float>::quiet_NaN());
    pr.compute_reference();
    const HostMatrix out = run_once(pr, c, ws);
    check(pr, out);
    for (int64_t j = 0; j < c.u; ++j) ASSERT_TRUE(std::isnan(out.at(4, j))) << "h[4][" << j << "]";
  }
}

TEST_P(GatedUpDecode, BitwiseRepeatable) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(testing::fresh_seed());
  const Case c{17, 8192, 64};
  const Problem pr(GetParam(), Activation::kSiLU, c, rng);
  for (bool ws : {false, true}) {
    const HostMatrix a = run_once(pr, c, ws), b = run_once(pr, c, ws);
    EXPECT_EQ(a.bits, b.bits) << (ws ? "with" : "without") << " a workspace: two calls on the same inputs differ";
  }
}

// One workspace for many calls and a CUDA graph replayed with new x: the split-K counters reset
// themselves, so nothing needs a memset between calls.
TEST_P(GatedUpDecode, GraphReplayWithNewInputs) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  const Case c{8, 8192, 64};
  ASSERT_TRUE(splits(c));
  std::mt19937_64 rng(testing::fresh_seed());
  Problem pr(dt, Activation::kSiLU, c, rng);
  testing::DeviceMatrix dx(pr.x), dw(pr.w);
  HostMatrix out(dt, c.m, c.u);
  testing::DeviceMatrix dout(out);
  Workspace ws(gated_up_workspace_size(32, c.k, c.u));
  cudaStream_t s = nullptr;
  BF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  BF_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  gated_up(dx.cview(pr.x), dw.cview(pr.w), dout.view(out), Activation::kSiLU, ws.ptr(), ws.bytes, s);
  BF_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  BF_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; ++rep) {
    SCOPED_TRACE("replay " + std::to_string(rep));
    pr.x.fill_uniform(rng, -1.f, 1.f);
    pr.compute_reference();
    dx.upload(pr.x);
    out.poison();
    dout.upload(out);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    dout.to_host(out);
    check(pr, out);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(GatedUpDecodeErrors, WorkspaceChecksNeedADevice) {
  SKIP_WITHOUT_GPU();
  const DType dt = DType::kBF16;
  const Case c{1, 8192, 64};
  ASSERT_TRUE(splits(c));
  std::mt19937_64 rng(testing::fresh_seed());
  const Problem pr(dt, Activation::kSiLU, c, rng);
  HostMatrix out(dt, c.m, c.u);
  testing::DeviceMatrix dx(pr.x), dw(pr.w), dout(out);
  Workspace ws(gated_up_workspace_size(c.m, c.k, c.u) + 16);
  auto call = [&](void* p, size_t bytes) {
    return [&, p, bytes] { gated_up(dx.cview(pr.x), dw.cview(pr.w), dout.view(out), Activation::kSiLU, p, bytes); };
  };
  testing::expect_arg_error(call(ws.ptr(), 64), "workspace_bytes", "64");
  testing::expect_arg_error(call(static_cast<char*>(ws.ptr()) + 8, ws.bytes - 16), "workspace", "aligned");
  // The workspace overlapping the output is refused, naming it.
  testing::expect_arg_error(
      [&] { gated_up(dx.cview(pr.x), dw.cview(pr.w), Matrix{ws.ptr(), dt, c.m, c.u, c.u}, Activation::kSiLU, ws.ptr(), ws.bytes); },
      "workspace", "overlap");
  // kDecode above 32 rows names x (checked before anything else runs).
  HostMatrix x33(dt, 33, c.k), out33(dt, 33, c.u);
  testing::DeviceMatrix dx33(x33), dout33(out33);
  GatedUpOptions opt;
  opt.kernel = GatedUpKernel::kDecode;
  testing::expect_arg_error([&] { gated_up(dx33.cview(x33), dw.cview(pr.w), dout33.view(out33), Activation::kSiLU, nullptr, opt); },
                            "x", "33");
}

// Small shapes for compute-sanitizer: split 1 and split-K, partial M and N tiles, a K tail.
class GatedUpDecodeSanitizer : public ::testing::TestWithParam<DType> {};

TEST_P(GatedUpDecodeSanitizer, SmallShapes) {
  SKIP_WITHOUT_GPU();
  for (int64_t m : {3, 17}) {
    run_case(GetParam(), Activation::kSiLU, Case{m, 200, 24, 8, 0, 8}, false);
    run_case(GetParam(), Activation::kGeluTanh, Case{m, 4104, 40}, true);
  }
}

INSTANTIATE_TEST_SUITE_P(BothDtypes, GatedUpDecode, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });
INSTANTIATE_TEST_SUITE_P(BothDtypes, GatedUpDecodeSanitizer, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace blockfuse
