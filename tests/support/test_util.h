// Host-side helpers for the tests: fresh random bf16/fp16 matrices, poisoning, a GPU-presence
// guard. Every test draws new random data (seeded from the test's name and a counter) so the
// kernels are checked on many inputs over time, never on zeros.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "blockfuse/common.h"
#include "common/host_float.h"

namespace blockfuse::test {

// A fresh seed per call: the test name, a process-wide counter and the time, so reruns differ.
uint64_t fresh_seed();

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
  void fill_uniform(std::mt19937_64& rng, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) set(r, c, d(rng));
  }
  void poison() {
    const uint16_t nan = dtype == DType::kBF16 ? 0x7fc0 : 0x7e00;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) bits[size_t(r * ld + c)] = nan;
  }
};

// Relative size of one rounding to the dtype (half an ulp at 1.0).
inline double unit_roundoff(DType t) { return t == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048; }

}  // namespace blockfuse::test
