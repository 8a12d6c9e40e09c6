// Device properties the heuristics need, read once per device (device.h).
#include "common/device.h"

#include "common/check.h"

namespace blockfuse::detail {

int current_device() {
  int dev = 0;
  BF_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

DeviceSpec device_spec(int device) {
  static PerDeviceCache<DeviceSpec> cache;
  return cache.get(device, [](int dev) {
    DeviceSpec s{};
    BF_CUDA_CHECK(cudaDeviceGetAttribute(&s.sm_count, cudaDevAttrMultiProcessorCount, dev));
    BF_CUDA_CHECK(cudaDeviceGetAttribute(&s.max_smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    BF_CUDA_CHECK(cudaDeviceGetAttribute(&s.cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    BF_CUDA_CHECK(cudaDeviceGetAttribute(&s.cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
    return s;
  });
}

DeviceSpec current_device_spec() { return device_spec(current_device()); }

}  // namespace blockfuse::detail
