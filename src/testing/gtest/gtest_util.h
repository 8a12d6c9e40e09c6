// blockfuse::testing, GoogleTest side: fresh seeds, the one skip-without-GPU macro, argument-error
// expectations, host matrices with fill and poison, and EXPECT on a CompareStats (compare.h). Compiled
// into the test binaries only (the rest of src/testing is the blockfuse_testing library). Every test draws new random data (seeded from the test's name and a counter) so the
// kernels are checked on many inputs over time, never on zeros.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "blockfuse/attention.h"
#include "blockfuse/common.h"
#include "blockfuse/fp8.h"
#include "blockfuse/fused_mlp.h"
#include "blockfuse/gated_up.h"
#include "blockfuse/swiglu.h"
#include "common/host_float.h"
#include "testing/compare.h"
#include "testing/device_buffer.h"
#include "testing/testing.h"

namespace blockfuse::testing {

// A fresh seed per call: the test name, a per-thread call counter and the time, so reruns differ.
// BLOCKFUSE_TEST_SEED=<n> replays one (every call then returns n). Put seed_note(seed) in a
// SCOPED_TRACE so a failure prints the seed that produced it.
uint64_t fresh_seed();
std::string seed_note(uint64_t seed);

// In a GPU test: skips it, saying so, where no CUDA device exists (`what` names the kernel).
#define BF_SKIP_WITHOUT_GPU(what)                                                         \
  do {                                                                                     \
    if (!::blockfuse::testing::has_cuda_device())                                             \
      GTEST_SKIP() << "no CUDA device on this machine: " << (what) << " cannot run here";  \
  } while (0)

// Whether the sm90a attention kernels run here: a build with them (attention_has_sm90()) on a
// device of compute capability 9.0 exactly (sm_90a code is not forward compatible).
inline bool attention_sm90_runnable() {
  if (!attention_has_sm90() || !has_cuda_device()) return false;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) return false;
  return major == 9 && minor == 0;
}

// Asserts a CUDA runtime call succeeded, printing the call and the error.
#define BF_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// Runs fn and expects blockfuse::Error whose message names 'arg' (in quotes), says "required",
// and contains `also` when given: the library's contract for every invalid argument.
void expect_arg_error(const std::function<void()>& fn, const std::string& arg, const std::string& also = "");

// rows x ld host matrix of 2-byte values, uniform in [lo, hi), padding (cols..ld) filled with a
// sentinel pattern so tests can check it is left untouched.
struct HostMatrix {
  DType dtype;
  int64_t rows, cols, ld;
  std::vector<uint16_t> bits;
  HostMatrix(DType t, int64_t r, int64_t c, int64_t l = -1) : dtype(t), rows(r), cols(c), ld(l < 0 ? c : l), bits(size_t(r * (l < 0 ? c : l)), 0xABCD) {}
  float at(int64_t r, int64_t c) const { return host::to_float(dtype, bits[size_t(r * ld + c)]); }
  void set(int64_t r, int64_t c, float v) { bits[size_t(r * ld + c)] = host::from_float(dtype, v); }
  ConstMatrix view() const { return ConstMatrix{bits.data(), dtype, rows, cols, ld}; }
  Matrix view() { return Matrix{bits.data(), dtype, rows, cols, ld}; }
  // Never zero after rounding: a zero input would hide a wrong index or a dropped term.
  void fill_uniform(std::mt19937_64& rng, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        do set(r, c, d(rng));
        while (at(r, c) == 0.0f);
      }
  }
  void poison() {
    const uint16_t nan = dtype == DType::kBF16 ? 0x7fc0 : 0x7e00;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) bits[size_t(r * ld + c)] = nan;
  }
};

// The whole ld-strided buffer of h (padding included) on the device.
inline DeviceBuffer<unsigned char> to_device(const HostMatrix& h) {
  return to_device(h.bits.data(), h.bits.size() * sizeof(uint16_t));
}

// A HostMatrix's copy in device memory (one DeviceBuffer underneath): the views a kernel call
// takes and the copy back. Throws blockfuse::Error when a copy fails.
class DeviceMatrix {
 public:
  explicit DeviceMatrix(const HostMatrix& h) : buf_(h.bits.size()) { upload(h); }
  void upload(const HostMatrix& h) const;
  void to_host(HostMatrix& h) const;
  ConstMatrix cview(const HostMatrix& h) const { return ConstMatrix{buf_.data(), h.dtype, h.rows, h.cols, h.ld}; }
  Matrix view(const HostMatrix& h) const { return Matrix{buf_.data(), h.dtype, h.rows, h.cols, h.ld}; }
  uint16_t* data() const { return buf_.data(); }

 private:
  DeviceBuffer<uint16_t> buf_;
};

// Expects st to hold a full, finite comparison within tolerance and within max_rel_l2, printing
// `what` and the first offending element otherwise.
void expect_close(const CompareStats& st, const std::string& what, double max_rel_l2 = 1e-2);

}  // namespace blockfuse::testing

// How GoogleTest prints blockfuse's enums (found by argument-dependent lookup), as test parameters
// (--gtest_list_tests, failure headers) and in EXPECT_EQ messages: their names, not
// "4-byte object <01-00 00-00>". A parameter struct gets its own PrintTo beside its test.
namespace blockfuse {
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
inline void PrintTo(Activation a, std::ostream* os) { *os << activation_name(a); }
inline void PrintTo(GateUpLayout l, std::ostream* os) { *os << layout_name(l); }
inline void PrintTo(Fp8ScaleMode m, std::ostream* os) { *os << fp8_scale_mode_name(m); }
inline void PrintTo(GatedUpKernel k, std::ostream* os) { *os << kernel_name(k); }
inline void PrintTo(MlpReduction r, std::ostream* os) {
  *os << (r == MlpReduction::kAtomic ? "atomic" : r == MlpReduction::kDeterministic ? "deterministic" : "MlpReduction?");
}
inline void PrintTo(RouterMode m, std::ostream* os) {
  *os << (m == RouterMode::kThreshold ? "threshold" : m == RouterMode::kTopK ? "top_k" : "RouterMode?");
}
inline void PrintTo(IndexType t, std::ostream* os) {
  *os << (t == IndexType::kInt32 ? "int32" : t == IndexType::kInt64 ? "int64" : "IndexType?");
}
}  // namespace blockfuse
