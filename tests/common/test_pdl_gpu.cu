// GPU tests of programmatic dependent launch (blockfuse/common.h: set_programmatic_dependent_launch;
// common/pdl.cuh, common/launch.h). The memory-bound families (add_rmsnorm, swiglu) launch with the
// programmatic-stream-serialization attribute on sm_90+ for up to 32 rows (common/launch.h:
// pdl_rows), and every such kernel waits for its predecessor before touching memory. What must hold:
//   - with the switch on (and sm_90 code in the library), a captured chain of those ops at 32 rows
//     has programmatic edges between its kernel nodes; with it off, or at 33 rows, none;
//   - a dependent chain (add_rmsnorm -> swiglu -> add_rmsnorm_fp8 -> ..., each reading the previous
//     op's output, every intermediate poisoned with NaN beforehand) gives bit-identical results with
//     PDL on and off, eagerly on a stream and replayed from a graph, and they match the CPU
//     reference of the first step. A kernel that read early would see the poison or an older value.
// Each test skips, saying so, where no CUDA device exists; the edge test also below sm_90.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "add_rmsnorm/reference.h"
#include "blockfuse/add_rmsnorm.h"
#include "blockfuse/common.h"
#include "blockfuse/fp8.h"
#include "blockfuse/swiglu.h"
#include "common/device.h"
#include "common/launch.h"
#include "testing/gtest/gtest_util.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;

// Compiled with the test binary's architectures, which are the library's: whether a kernel of this
// build may carry the PDL attribute on this device (the library's families decide the same way).
__global__ void probe_kernel() {}

bool pdl_expected() {
  static detail::PerDeviceCache<bool> cache;
  return detail::pdl_launchable(cache, reinterpret_cast<const void*>(probe_kernel));
}

// Restores the process-wide switch when a test ends.
struct PdlSwitch {
  bool before;
  explicit PdlSwitch(bool on) : before(set_programmatic_dependent_launch(on)) {}
  ~PdlSwitch() { set_programmatic_dependent_launch(before); }
};

// The chain's buffers: x, residual [M, 2U] -> (r1, n1) = add_rmsnorm -> h = swiglu(n1) [M, U] ->
// (r2, q2 e4m3 + per-row scales) = add_rmsnorm_fp8(h, res2) -> g = swiglu(n1 again, interleaved view)
// ... every op reads what the one before it wrote.
struct Chain {
  int64_t M, U;
  HostMatrix x, res, w1, res2, w2;
  testing::DeviceBuffer<uint16_t> dx, dres, dw1, dres2, dw2, r1, n1, h, r2, n3;
  testing::DeviceBuffer<uint8_t> q2;
  testing::DeviceBuffer<float> s2;

  Chain(int64_t m, int64_t u, uint64_t seed)
      : M(m), U(u), x(DType::kBF16, m, 2 * u), res(DType::kBF16, m, 2 * u), w1(DType::kBF16, 1, 2 * u),
        res2(DType::kBF16, m, u), w2(DType::kBF16, 1, u), dx(size_t(m * 2 * u)), dres(size_t(m * 2 * u)),
        dw1(size_t(2 * u)), dres2(size_t(m * u)), dw2(size_t(u)), r1(size_t(m * 2 * u)), n1(size_t(m * 2 * u)),
        h(size_t(m * u)), r2(size_t(m * u)), n3(size_t(m * u)), q2(size_t(m * u)), s2(size_t(m)) {
    std::mt19937_64 rng(seed);
    for (HostMatrix* t : {&x, &res, &w1, &res2, &w2}) t->fill_uniform(rng, -2.f, 2.f);
    // Complete on return (to_device, testing/device_buffer.h, says why): the chain runs on a
    // non-blocking stream.
    auto up = [](const HostMatrix& hm, testing::DeviceBuffer<uint16_t>& d) {
      ASSERT_EQ(cudaMemcpy(d.data(), hm.bits.data(), d.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
    };
    up(x, dx);
    up(res, dres);
    up(w1, dw1);
    up(res2, dres2);
    up(w2, dw2);
  }

  Matrix m16(testing::DeviceBuffer<uint16_t>& b, int64_t cols) { return make_matrix(b.data(), DType::kBF16, M, cols); }

  // NaN into every intermediate and output (a stream operation, so it is ordered before the chain).
  void poison(cudaStream_t s) {
    for (auto* b : {&r1, &n1, &h, &r2, &n3}) ASSERT_EQ(cudaMemsetAsync(b->data(), 0xff, b->bytes(), s), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(q2.data(), 0x7f, q2.bytes(), s), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(s2.data(), 0xff, s2.bytes(), s), cudaSuccess);
  }

  // Five dependent launches.
  void run(cudaStream_t s) {
    const ConstMatrix w1v = make_matrix(dw1.data(), DType::kBF16, 1, 2 * U), w2v = make_matrix(dw2.data(), DType::kBF16, 1, U);
    add_rmsnorm(make_matrix(dx.data(), DType::kBF16, M, 2 * U), make_matrix(dres.data(), DType::kBF16, M, 2 * U), w1v,
                m16(r1, 2 * U), m16(n1, 2 * U), {}, s);
    swiglu(m16(n1, 2 * U), m16(h, U), Activation::kSiLU, GateUpLayout::kStacked, s);
    add_rmsnorm_fp8(m16(h, U), make_matrix(dres2.data(), DType::kBF16, M, U), w2v, m16(r2, U),
                    make_fp8_matrix(q2.data(), M, U, U), Fp8Scale{Fp8ScaleMode::kDynamicPerRow, s2.data()}, {}, s);
    // r2 (written two launches ago) and h (three) feed the last two.
    add_rmsnorm(m16(r2, U), m16(h, U), w2v, Matrix{}, m16(n3, U), {}, s);
    swiglu(m16(r1, 2 * U), m16(h, U), Activation::kSiLU, GateUpLayout::kInterleaved, s);
  }

  struct Result {
    std::vector<uint16_t> r1, n1, h, r2, n3;
    std::vector<uint8_t> q2;
    std::vector<float> s2;
    bool operator==(const Result& o) const {
      return r1 == o.r1 && n1 == o.n1 && h == o.h && r2 == o.r2 && n3 == o.n3 && q2 == o.q2 &&
             std::memcmp(s2.data(), o.s2.data(), s2.size() * sizeof(float)) == 0;
    }
  };

  Result fetch() {
    Result out;
    auto get = [](const auto& d, auto& v) {
      v.resize(d.size());
      ASSERT_EQ(cudaMemcpy(v.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    };
    get(r1, out.r1);
    get(n1, out.n1);
    get(h, out.h);
    get(r2, out.r2);
    get(n3, out.n3);
    get(q2, out.q2);
    get(s2, out.s2);
    return out;
  }
};

size_t count_nan(const std::vector<uint16_t>& v) {
  size_t n = 0;
  for (uint16_t b : v) n += std::isnan(host::to_float(DType::kBF16, b)) ? 1 : 0;
  return n;
}

// Eagerly, then as a graph replayed twice (poisoned before each replay); returns the last result.
Chain::Result run_chain(Chain& c, bool graph) {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  Chain::Result r;
  if (!graph) {
    c.poison(s);
    c.run(s);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    r = c.fetch();
  } else {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    c.poison(s);
    c.run(s);
    EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    EXPECT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    r = c.fetch();
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  cudaStreamDestroy(s);
  return r;
}

// Counts the programmatic edges of a captured chain, with PDL on and off.
TEST(PdlGpu, CapturedChainHasProgrammaticEdgesOnlyWhenOn) {
  BF_SKIP_WITHOUT_GPU("the PDL launches");
  if (!pdl_expected()) GTEST_SKIP() << "PDL needs an sm_90+ device and a build with sm_90 code: nothing to check here";
  for (auto [rows, on] : {std::pair<int64_t, bool>{32, true}, {32, false}, {33, true}}) {
    SCOPED_TRACE(std::string(on ? "PDL on, " : "PDL off, ") + std::to_string(rows) + " rows");
    Chain c(rows, 512, testing::fresh_seed());
    PdlSwitch guard(on);
    cudaStream_t s = nullptr;
    BF_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g = nullptr;
    BF_CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    c.run(s);  // five kernels, no memsets between them
    BF_CUDA_OK(cudaStreamEndCapture(s, &g));
    size_t n = 0;
    BF_CUDA_OK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
    std::vector<cudaGraphNode_t> from(n), to(n);
    std::vector<cudaGraphEdgeData> data(n);
    BF_CUDA_OK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n));
    int programmatic = 0;
    for (const cudaGraphEdgeData& e : data) programmatic += e.type == cudaGraphDependencyTypeProgrammatic ? 1 : 0;
    EXPECT_EQ(n, 4u) << "five kernels in a row: four edges";
    EXPECT_EQ(programmatic, on && detail::pdl_rows(rows) ? 4 : 0);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  }
}

// The dependent chain with PDL on equals the chain with it off, bit for bit, eagerly and from a graph;
// no poison survives; the first step matches the CPU reference.
TEST(PdlGpu, DependentChainIsUnchangedByPdl) {
  BF_SKIP_WITHOUT_GPU("the PDL launches");
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  // 32 rows (the most that carry the attribute) of 2U = 32768: each kernel runs a few µs, so a
  // successor that read before its predecessor finished would find poison or an older value.
  Chain c(32, 16384, seed);
  Chain::Result off;
  {
    PdlSwitch guard(false);
    off = run_chain(c, false);
  }
  ASSERT_EQ(count_nan(off.r1) + count_nan(off.n1) + count_nan(off.h) + count_nan(off.r2) + count_nan(off.n3), 0u);
  // The first op against the CPU reference: residual bit-exact, out within two bf16 roundings.
  {
    std::vector<uint16_t> r_ref(size_t(c.M * 2 * c.U));
    std::vector<double> v_ref(r_ref.size());
    reference::add_rmsnorm(DType::kBF16, c.M, 2 * c.U, c.x.bits.data(), c.x.ld, c.res.bits.data(), c.res.ld,
                           c.w1.bits.data(), 1e-6f, false, r_ref.data(), v_ref.data());
    ASSERT_EQ(off.r1, r_ref);
    size_t bad = 0;
    for (size_t i = 0; i < v_ref.size(); ++i) {
      const double got = host::to_float(DType::kBF16, off.n1[i]);
      bad += std::fabs(got - v_ref[i]) > 2 * std::ldexp(std::fabs(v_ref[i]), -8) + 1e-30 ? 1 : 0;
    }
    EXPECT_EQ(bad, 0u);
  }
  for (bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "graph" : "stream");
    {
      PdlSwitch guard(true);
      EXPECT_TRUE(run_chain(c, graph) == off) << "PDL on changed a result";
    }
    {
      PdlSwitch guard(false);
      EXPECT_TRUE(run_chain(c, graph) == off) << "PDL off is not repeatable";
    }
  }
}

}  // namespace
}  // namespace blockfuse
