// Device properties the heuristics need, read once per device (device.h).
#include "common/device.h"

#include "common/check.h"
#include "common/launch.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "blockfuse/common.h"

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
    BF_CUDA_CHECK(cudaDeviceGetAttribute(&s.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    // Only a heuristic's input (fused_mlp's block width): a device that does not report these
    // leaves 0 ("unknown") rather than failing the call.
    int mem_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      mem_khz = bus_bits = 0;
    }
    s.dram_gbps = 2.0 * double(mem_khz) * 1e3 * double(bus_bits) / 8.0 / 1e9;
    return s;
  });
}

DeviceSpec current_device_spec() { return device_spec(current_device()); }

namespace {
// On unless BLOCKFUSE_PDL=0 is in the environment when the switch is first consulted (the first
// launch of a PDL-capable kernel, or a call of the functions below).
auto& pdl_switch() {  // the library's one process-wide setting: public, like torch.backends' flags
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("BLOCKFUSE_PDL");
    return !(e && std::strcmp(e, "0") == 0);
  }()};
  return on;
}
}  // namespace

bool pdl_launchable(PerDeviceCache<bool>& cache, const void* fn) {
  return pdl_switch().load(std::memory_order_relaxed) && sm90_code_loaded(cache, fn);
}

bool sm90_code_loaded(PerDeviceCache<bool>& cache, const void* fn) {
  return cache.get([fn](int dev) {
    if (device_spec(dev).cc_major < 9) return false;
    cudaFuncAttributes a{};
    BF_CUDA_CHECK(cudaFuncGetAttributes(&a, fn));
    return a.ptxVersion >= 90;
  });
}

}  // namespace blockfuse::detail

namespace blockfuse {

bool set_programmatic_dependent_launch(bool enabled) {
  return detail::pdl_switch().exchange(enabled, std::memory_order_relaxed);
}

bool programmatic_dependent_launch() { return detail::pdl_switch().load(std::memory_order_relaxed); }

}  // namespace blockfuse
