// The GoogleTest side of blockfuse::testing (gtest_util.h).
#include "testing/gtest/gtest_util.h"

#include <chrono>
#include <cstdlib>
#include <functional>

#include <cuda_runtime_api.h>

namespace blockfuse::testing {

uint64_t fresh_seed() {
  if (const char* s = std::getenv("BLOCKFUSE_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  // Per thread (gtest runs a test's body on one thread): calls within a test get distinct seeds.
  thread_local uint64_t counter = 0;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
  const uint64_t t = static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  return std::hash<std::string>{}(name) ^ (counter++ * 0x9E3779B97F4A7C15ull) ^ t;
}

std::string seed_note(uint64_t seed) {
  return "random seed " + std::to_string(seed) + " (replay: BLOCKFUSE_TEST_SEED=" + std::to_string(seed) + ")";
}

void DeviceMatrix::upload(const HostMatrix& h) const {
  if (h.bits.empty()) return;
  // Complete on return (to_device, device_buffer.h, says why): kernels under test run on
  // non-blocking streams too.
  cudaError_t e = cudaMemcpy(buf_.data(), h.bits.data(), h.bits.size() * sizeof(uint16_t), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamLegacy);
  if (e != cudaSuccess) throw Error(std::string("DeviceMatrix: cudaMemcpy H2D failed: ") + cudaGetErrorString(e));
}

void DeviceMatrix::to_host(HostMatrix& h) const {
  if (h.bits.empty()) return;
  const cudaError_t e = cudaMemcpy(h.bits.data(), buf_.data(), h.bits.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) throw Error(std::string("DeviceMatrix: cudaMemcpy D2H failed: ") + cudaGetErrorString(e));
}

void expect_close(const CompareStats& st, const std::string& what, double max_rel_l2) {
  EXPECT_GT(st.count, 0) << what << ": nothing compared";
  EXPECT_EQ(st.nonfinite, 0) << what << ": unwritten or non-finite outputs; " << st.summary();
  EXPECT_EQ(st.violations, 0) << what << ": " << st.summary();
  EXPECT_LE(st.rel_l2(), max_rel_l2) << what << ": " << st.summary();
}

void expect_arg_error(const std::function<void()>& fn, const std::string& arg, const std::string& also) {
  try {
    fn();
    ADD_FAILURE() << "expected blockfuse::Error naming '" << arg << "', but the call returned";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + arg + "'"), std::string::npos) << "message does not name '" << arg << "': " << what;
    EXPECT_NE(what.find("required"), std::string::npos) << "message does not say what is required: " << what;
    if (!also.empty()) EXPECT_NE(what.find(also), std::string::npos) << "message lacks \"" << also << "\": " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected blockfuse::Error naming '" << arg << "', got another exception: " << e.what();
  }
}

}  // namespace blockfuse::testing
