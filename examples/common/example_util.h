// What the examples share: host bf16 and FP8 e4m3 conversions for their CPU checks, a device
// allocation, a CUDA error check, and the exit codes (the same for every example):
//   0   the result matched the CPU check
//   1   the result was wrong (the message says where and by how much)
//   2   a blockfuse::Error or a CUDA error (the message says which)
//   77  no CUDA device on this machine: nothing was run (77 is CTest's and Automake's "skipped";
//       the `blockfuse` CLI exits with the same status and message form, bench/harness.h)
// The examples use only the installed headers (<blockfuse/...>) and the CUDA runtime API, as any
// consumer of find_package(blockfuse) would.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace example {

constexpr int kOk = 0;
constexpr int kWrong = 1;
constexpr int kError = 2;
constexpr int kNoGpu = 77;

// True when a CUDA device is usable; otherwise prints why the example does nothing.
inline bool have_gpu(const char* example) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::fprintf(stderr,
                 "%s: no CUDA device found (%s); it needs an NVIDIA GPU of compute capability >= 8.0. Nothing was "
                 "run (exit %d).\n",
                 example, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", kNoGpu);
    return false;
  }
  return true;
}

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device memory, freed when it goes out of scope.
using DevicePtr = std::unique_ptr<void, cudaError_t (*)(void*)>;
inline DevicePtr device_alloc(size_t bytes) {
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
  return DevicePtr(p, cudaFree);
}
template <class T>
DevicePtr to_device(const std::vector<T>& h) {
  DevicePtr d = device_alloc(h.size() * sizeof(T));
  cuda_check(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}
template <class T>
std::vector<T> to_host(const DevicePtr& d, size_t n) {
  std::vector<T> h(n);
  cuda_check(cudaMemcpy(h.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return h;
}

// bfloat16 <-> float on the host (round to nearest even; inputs here are finite).
inline uint16_t bf16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// OCP FP8 e4m3 -> float: 1 sign, 4 exponent (bias 7), 3 mantissa bits; 0x7f/0xff are NaN.
inline float fp8_e4m3_to_float(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xF, man = b & 0x7;
  if (exp == 0xF && man == 0x7) return NAN;
  const float mag = exp == 0 ? std::ldexp(float(man) / 8.0f, -6) : std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
  return sign ? -mag : mag;
}

inline float silu(float g) { return g / (1.0f + std::exp(-g)); }

// Compares got[i] with want[i] within atol + rtol·|want|; prints the first miss and the count.
inline bool check_close(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                        float atol, float rtol) {
  size_t bad = 0, first = 0;
  double max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    if (!(err <= atol + rtol * std::fabs(want[i]))) {  // NaN counts as a miss
      if (bad++ == 0) first = i;
    }
    if (err > max_err) max_err = err;
  }
  if (bad) {
    std::printf("%s: WRONG: %zu of %zu elements off (first at %zu: got %g, want %g)\n", what, bad, want.size(),
                first, got[first], want[first]);
    return false;
  }
  std::printf("%s: ok (%zu elements, max abs error %.3g)\n", what, want.size(), max_err);
  return true;
}

}  // namespace example
