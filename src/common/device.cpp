// Device properties the heuristics need, read once per device.
#include <mutex>
#include <vector>

#include "blockfuse/gated_up.h"
#include "common/check.h"

namespace blockfuse {

DeviceSpec current_device_spec() {
  static std::mutex mu;
  static std::vector<std::pair<bool, DeviceSpec>> cache;
  int dev = 0;
  BF_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(cache.size()) <= dev) cache.resize(dev + 1);
  if (!cache[dev].first) {
    DeviceSpec s{};
    BF_CUDA_CHECK(cudaDeviceGetAttribute(&s.sm_count, cudaDevAttrMultiProcessorCount, dev));
    BF_CUDA_CHECK(cudaDeviceGetAttribute(&s.max_smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    BF_CUDA_CHECK(cudaDeviceGetAttribute(&s.cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    BF_CUDA_CHECK(cudaDeviceGetAttribute(&s.cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
    cache[dev] = {true, s};
  }
  return cache[dev].second;
}

}  // namespace blockfuse
