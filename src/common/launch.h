// Internal: host-side launch helpers shared by the families' launchers.
#pragma once

#include <utility>

#include <cuda_runtime.h>

#include "common/check.h"
#include "common/device.h"

namespace blockfuse::detail {

// Launches `kernel` with thread-block clusters of `cluster` CTAs (sm_90+; grid a multiple of it),
// through cudaLaunchKernelEx with the cluster shape as a launch attribute, so no compile-time
// __cluster_dims__ is needed and one kernel serves every cluster size.
template <class... Params, class... Args>
void launch_with_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                         dim3 cluster, Args&&... args) {
  cudaLaunchConfig_t lc{};
  lc.gridDim = grid;
  lc.blockDim = block;
  lc.dynamicSmemBytes = smem_bytes;
  lc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster.x;
  attr[0].val.clusterDim.y = cluster.y;
  attr[0].val.clusterDim.z = cluster.z;
  lc.attrs = attr;
  lc.numAttrs = 1;
  BF_CUDA_CHECK(cudaLaunchKernelEx(&lc, kernel, std::forward<Args>(args)...));
}

// Lets `kernel` use `bytes` (> 48 KB) of dynamic shared memory, once per device: `once` is the
// caller's function-local static, one per kernel (the attribute is per kernel, and it is not a
// stream operation, so after the first call nothing of it lands in a CUDA-graph capture).
template <class Kernel>
void opt_in_dynamic_smem_once(PerDeviceCache<bool>& once, Kernel kernel, int bytes) {
  once.get([&](int) {
    BF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return true;
  });
}

}  // namespace blockfuse::detail
