// Internal: what the heuristics and launchers need to know about a device, read once per device,
// and the per-device cache every family uses for such once-per-device state (device properties,
// a kernel's shared-memory opt-in, whether a code path is available).
#pragma once

#include <mutex>
#include <optional>
#include <vector>

namespace blockfuse::detail {

struct DeviceSpec {
  int sm_count;            // multiprocessors
  int max_smem_per_block;  // opt-in maximum dynamic shared memory per block, bytes
  int cc_major, cc_minor;
  // Peak DRAM bandwidth, GB/s (memory clock x 2 x bus width); 0 where the device does not report it.
  double dram_gbps = 0;
  // Shared memory of one multiprocessor, bytes (how many CTAs of a size fit); 0 where unknown.
  int smem_per_sm = 0;
};

// The current CUDA device (cudaGetDevice; throws blockfuse::Error on failure).
int current_device();
// Properties of `device`, cached per device.
DeviceSpec device_spec(int device);
// Properties of the current device, cached per device.
DeviceSpec current_device_spec();

// One value per device, computed by `init(device)` on first use and returned from the cache after
// (thread-safe). A failing init (it throws) caches nothing, so an invalid device id stays an error.
// A function-local static gives each kernel or code path its own cache.
template <class T>
class PerDeviceCache {
 public:
  template <class F>
  T get(int device, F&& init) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool cacheable = device >= 0;
    if (cacheable && static_cast<size_t>(device) < values_.size() && values_[device]) return *values_[device];
    T v = init(device);
    if (cacheable) {
      if (static_cast<size_t>(device) >= values_.size()) values_.resize(device + 1);
      values_[device] = v;
    }
    return v;
  }
  // The same for the current device.
  template <class F>
  T get(F&& init) {
    return get(current_device(), static_cast<F&&>(init));
  }

 private:
  std::mutex mu_;
  std::vector<std::optional<T>> values_;
};

}  // namespace blockfuse::detail
