// blockfuse::testing::DeviceBuffer — the one owning device allocation of the tests and benchmarks.
// Freed on scope exit, so a test that fails or a benchmark point that throws leaks nothing and the
// next (larger) point sees all the memory again. Header-only so CPU-only test binaries can use it
// without linking blockfuse_testing.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

#include "blockfuse/common.h"

namespace blockfuse::testing {

template <class T = unsigned char>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `count` elements of T; 0 allocates nothing (data() == nullptr). Throws blockfuse::Error when
  // cudaMalloc fails, naming the size.
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count == 0) return;
    const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&p_), count * sizeof(T));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      p_ = nullptr;
      throw Error("cudaMalloc of " + std::to_string(count * sizeof(T)) + " bytes failed: " + cudaGetErrorString(e));
    }
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() const { return p_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  void reset() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    count_ = 0;
  }

 private:
  T* p_ = nullptr;
  size_t count_ = 0;
};

// A device copy of `bytes` host bytes, and the copy of a whole buffer back to the host. Throw
// blockfuse::Error when the copy fails.
// The copy is complete on return. From pageable memory cudaMemcpy may return once the bytes are
// staged, before the DMA has written them, and a kernel on a non-blocking stream does not wait for
// the legacy stream: the late DMA then overwrote a kernel's output (WeightLayoutGpu, H200).
inline DeviceBuffer<unsigned char> to_device(const void* src, size_t bytes) {
  DeviceBuffer<unsigned char> d(bytes);
  cudaError_t e = bytes ? cudaMemcpy(d.data(), src, bytes, cudaMemcpyHostToDevice) : cudaSuccess;
  if (e == cudaSuccess && bytes) e = cudaStreamSynchronize(cudaStreamLegacy);
  if (e != cudaSuccess) throw Error(std::string("to_device: cudaMemcpy failed: ") + cudaGetErrorString(e));
  return d;
}
template <class T>
void to_host(const DeviceBuffer<T>& d, void* dst) {
  const cudaError_t e = d.bytes() ? cudaMemcpy(dst, d.data(), d.bytes(), cudaMemcpyDeviceToHost) : cudaSuccess;
  if (e != cudaSuccess) throw Error(std::string("to_host: cudaMemcpy failed: ") + cudaGetErrorString(e));
}

}  // namespace blockfuse::testing
