// GPU tests of the device weight-layout helpers (include/blockfuse/weight_layout.h): each of the four
// device conversions must produce the same bytes as its host version (tested on its own in
// tests/cpu/test_weight_layout.cpp) — values and untouched padding — on strided views, in both
// dtypes, on the default and on a created stream; and device interleave → de-interleave returns
// the original weights bit for bit. Every test skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "blockfuse/weight_layout.h"
#include "common/check.h"
#include "testing/gtest/gtest_util.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;

// A device copy of a host matrix, padding included (so device outputs start from the same bytes
// as the host outputs they are compared with).
struct DevMatrix {
  const HostMatrix& h;
  testing::DeviceMatrix d;
  explicit DevMatrix(const HostMatrix& host) : h(host), d(host) {}
  Matrix view() const { return d.view(h); }
  std::vector<uint16_t> download() const {
    HostMatrix copy = h;
    d.to_host(copy);
    return copy.bits;
  }
};

// First differing element of two row-major buffers with row stride ld, as "row, col: a vs b".
std::string first_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int64_t ld) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (a[i] != b[i]) {
      std::ostringstream os;
      os << int64_t(i) / ld << ", " << int64_t(i) % ld << ": device 0x" << std::hex << a[i] << " vs host 0x" << b[i]
         << " (col >= cols is padding)";
      return os.str();
    }
  return "sizes differ";
}

#define EXPECT_SAME_BYTES(dev, host, what) \
  EXPECT_TRUE((dev) == (host).bits) << what << " differs from the host helper at (" << first_diff((dev), (host).bits, (host).ld) << ")"

struct Dims {
  int64_t U, K;
};
// K = 5 and 3: the helpers copy rows of bytes and take any K; 4096 is a real model's row.
const Dims kDims[] = {{1, 8}, {7, 24}, {64, 136}, {3, 5}, {16, 4096}};

TEST(WeightLayoutGpu, DeviceMatchesHost) {
  BF_SKIP_WITHOUT_GPU("the weight-layout kernels");
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  cudaStream_t stream;
  BF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (cudaStream_t st : {cudaStream_t(nullptr), stream})
    for (DType dt : {DType::kBF16, DType::kFP16})
      for (Dims d : kDims) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " U=" << d.U << " K=" << d.K
                                          << (st ? " (created stream)" : " (default stream)"));
        // Every view strided differently; padding holds HostMatrix's sentinel on both sides.
        HostMatrix gate(dt, d.U, d.K, d.K + 8), up(dt, d.U, d.K, d.K + 1), stacked(dt, 2 * d.U, d.K, d.K + 3);
        gate.fill_uniform(rng, -1.f, 1.f);
        up.fill_uniform(rng, -1.f, 1.f);
        stacked.fill_uniform(rng, -1.f, 1.f);
        const DevMatrix dgate(gate), dup(up), dstacked(stacked);

        // gate, up -> interleaved
        HostMatrix w_host(dt, 2 * d.U, d.K, d.K + 16);
        const DevMatrix dw(w_host);  // copied before the host helper writes: same starting bytes
        interleave_gate_up_host(gate.view(), up.view(), w_host.view());
        interleave_gate_up(dgate.view(), dup.view(), dw.view(), st);
        BF_CUDA_CHECK(cudaStreamSynchronize(st));
        EXPECT_SAME_BYTES(dw.download(), w_host, "interleave_gate_up");

        // stacked -> interleaved
        HostMatrix ws_host(dt, 2 * d.U, d.K, d.K + 2);
        const DevMatrix dws(ws_host);
        interleave_stacked_gate_up_host(stacked.view(), ws_host.view());
        interleave_stacked_gate_up(dstacked.view(), dws.view(), st);
        BF_CUDA_CHECK(cudaStreamSynchronize(st));
        EXPECT_SAME_BYTES(dws.download(), ws_host, "interleave_stacked_gate_up");

        // interleaved -> gate, up (and the round trip back to the originals)
        HostMatrix g_host(dt, d.U, d.K, d.K + 4), u_host(dt, d.U, d.K, d.K);
        const DevMatrix dg(g_host), du(u_host);
        deinterleave_gate_up_host(w_host.view(), g_host.view(), u_host.view());
        deinterleave_gate_up(dw.view(), dg.view(), du.view(), st);
        BF_CUDA_CHECK(cudaStreamSynchronize(st));
        const std::vector<uint16_t> g_dev = dg.download(), u_dev = du.download();
        EXPECT_SAME_BYTES(g_dev, g_host, "deinterleave_gate_up (gate)");
        EXPECT_SAME_BYTES(u_dev, u_host, "deinterleave_gate_up (up)");
        for (int64_t r = 0; r < d.U; ++r)
          for (int64_t c = 0; c < d.K; ++c) {
            ASSERT_EQ(g_dev[size_t(r * g_host.ld + c)], gate.bits[size_t(r * gate.ld + c)]) << "gate round trip at (" << r << ", " << c << ")";
            ASSERT_EQ(u_dev[size_t(r * u_host.ld + c)], up.bits[size_t(r * up.ld + c)]) << "up round trip at (" << r << ", " << c << ")";
          }

        // interleaved -> stacked (and the round trip back to the original stacked tensor)
        HostMatrix s_host(dt, 2 * d.U, d.K, d.K + 8);
        const DevMatrix ds(s_host);
        deinterleave_to_stacked_host(ws_host.view(), s_host.view());
        deinterleave_to_stacked(dws.view(), ds.view(), st);
        BF_CUDA_CHECK(cudaStreamSynchronize(st));
        const std::vector<uint16_t> s_dev = ds.download();
        EXPECT_SAME_BYTES(s_dev, s_host, "deinterleave_to_stacked");
        for (int64_t r = 0; r < 2 * d.U; ++r)
          for (int64_t c = 0; c < d.K; ++c)
            ASSERT_EQ(s_dev[size_t(r * s_host.ld + c)], stacked.bits[size_t(r * stacked.ld + c)])
                << "stacked round trip at (" << r << ", " << c << ")";
      }
  BF_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(WeightLayoutGpu, EmptyIsANoOp) {
  BF_SKIP_WITHOUT_GPU("the weight-layout kernels");
  // U = 0: nothing to copy, no CUDA call may fail, and no error is thrown.
  void* p = nullptr;
  BF_CUDA_CHECK(cudaMalloc(&p, 256));
  const Matrix e{p, DType::kBF16, 0, 64, 64};
  EXPECT_NO_THROW(interleave_gate_up(e, e, e));
  EXPECT_NO_THROW(interleave_stacked_gate_up(e, e));
  EXPECT_NO_THROW(deinterleave_gate_up(e, e, e));
  EXPECT_NO_THROW(deinterleave_to_stacked(e, e));
  BF_CUDA_CHECK(cudaDeviceSynchronize());
  BF_CUDA_CHECK(cudaFree(p));
}

}  // namespace
}  // namespace blockfuse
