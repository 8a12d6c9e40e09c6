// Internal: host-side launch helpers shared by the families' launchers.
#pragma once

#include <cstdint>
#include <utility>

#include <cuda_runtime.h>

#include "common/check.h"
#include "common/device.h"

namespace blockfuse::detail {

// Whether a launch of the kernel `fn` may carry the programmatic-dependent-launch attribute on the
// current device: the process-wide switch (blockfuse/common.h) is on, the device is sm_90+, and the
// code loaded for `fn` was compiled for sm_90+ (a build for sm_80 only runs on a Hopper through its
// compute_80 PTX, where pdl_wait() compiled to nothing: launched with the attribute, that kernel
// could read its predecessor's output early). Callers cache the last part per device per family
// (`cache`, a function-local static beside the launcher), as cluster_path_available does.
bool pdl_launchable(PerDeviceCache<bool>& cache, const void* fn);

// Whether the device is sm_90+ and the code loaded for `fn` was compiled for sm_90+ (cached in
// `cache` per device): the test behind pdl_launchable and add_rmsnorm's cluster path.
bool sm90_code_loaded(PerDeviceCache<bool>& cache, const void* fn);

// The row counts whose launches carry the PDL attribute: decode-sized calls, where the launch gap is a
// large part of a 1.5-5 µs kernel. Measured on the H100 (C++ and torch benchmarks, PDL on vs off in
// one process; docs/add_rmsnorm.md#tuning): at 1-32 rows every add_rmsnorm and swiglu
// point 0.15-0.6 µs faster; at 256 rows up to 1.7 µs slower (add_rmsnorm H = 4096: 9.4 vs 7.7 µs),
// from 2048 rows within 1 %. Pure, CPU-tested.
inline constexpr int64_t kPdlMaxRows = 32;
constexpr bool pdl_rows(int64_t rows) { return rows <= kPdlMaxRows; }

// Launches `kernel` through cudaLaunchKernelEx with the given attributes (at most two).
template <class... Params, class... Args>
void launch_with_attributes(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                            cudaLaunchAttribute* attrs, unsigned num_attrs, Args&&... args) {
  cudaLaunchConfig_t lc{};
  lc.gridDim = grid;
  lc.blockDim = block;
  lc.dynamicSmemBytes = smem_bytes;
  lc.stream = stream;
  lc.attrs = attrs;
  lc.numAttrs = num_attrs;
  BF_CUDA_CHECK(cudaLaunchKernelEx(&lc, kernel, std::forward<Args>(args)...));
}

inline cudaLaunchAttribute cluster_attribute(dim3 cluster) {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = cluster.x;
  a.val.clusterDim.y = cluster.y;
  a.val.clusterDim.z = cluster.z;
  return a;
}

// Launches `kernel` with thread-block clusters of `cluster` CTAs when cluster.x * cluster.y *
// cluster.z > 1 (sm_90+; grid a multiple of it, no compile-time __cluster_dims__ needed, so one
// kernel serves every cluster size), and with programmatic stream serialization when `pdl` (the
// kernel must begin with pdl_enter(): common/pdl.cuh).
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                   dim3 cluster, bool pdl, Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (cluster.x * cluster.y * cluster.z > 1) attr[n++] = cluster_attribute(cluster);
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  launch_with_attributes(kernel, grid, block, smem_bytes, stream, attr, n, std::forward<Args>(args)...);
}

// Launches `kernel` as clusters of `cluster` CTAs (sm_90+), always with the cluster attribute (also
// for 1 x 1 x 1: the sm90a GEMM and attention kernels are written for a cluster launch).
template <class... Params, class... Args>
void launch_with_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                         dim3 cluster, Args&&... args) {
  cudaLaunchAttribute attr[1] = {cluster_attribute(cluster)};
  launch_with_attributes(kernel, grid, block, smem_bytes, stream, attr, 1, std::forward<Args>(args)...);
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
