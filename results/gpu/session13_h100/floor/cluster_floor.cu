// Session 13: the floor of a decode-sized launch on the H100 — per-call µs of an empty kernel in a
// CUDA graph of 20 calls, launched as clusters of 1 / 2 / 4 / 8 CTAs, with 0, 1 or 2 cluster barriers,
// at grids of 8, 64 and 256 CTAs (256 threads). What is left of swiglu_fp8's 8-CTA row kernel above
// the elementwise kernel at 1-32 rows (docs/decoder-kernels.md, session 13) is compared with this.
// Second table: the start-up barrier plus a second cluster barrier, against the start-up barrier plus
// one remote mbarrier arrive per peer (exchange_kernel).
// Build and run: nvcc -O3 -arch=sm_90 cluster_floor.cu -o cluster_floor && ./cluster_floor
#include <cstdio>
#include <cuda_runtime.h>

template <int kBarriers>
__global__ void empty_kernel(int* out) {
#pragma unroll
  for (int i = 0; i < kBarriers; ++i) {
    asm volatile("barrier.cluster.arrive.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  }
  if (out && threadIdx.x == 0 && blockIdx.x == 0) *out = 1;
}

// The exchange of swiglu_fp8's cluster row kernel without a second cluster barrier: after the
// start-up barrier (which also publishes each CTA's initialised mbarrier), thread k < C arrives
// remotely on CTA k's mbarrier (expected count C) and every thread waits on its own. kBarrier true:
// the same with a second cluster barrier instead (what the row kernel does today).
template <bool kBarrier>
__global__ void exchange_kernel(int* out) {
  __shared__ __align__(8) unsigned long long bar;
  const unsigned bar_addr = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  unsigned c;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(c));
  if (!kBarrier && threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar_addr), "r"(c) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (kBarrier) {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  } else {
    if (threadIdx.x < c) {
      unsigned remote;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar_addr), "r"(threadIdx.x));
      asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
    }
    asm volatile(
        "{\n .reg .pred p;\n WAIT_%=:\n"
        " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], 0;\n"
        " @!p bra WAIT_%=;\n}" ::"r"(bar_addr)
        : "memory");
  }
  if (out && threadIdx.x == 0 && blockIdx.x == 0) *out = 1;
}

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

int time_kernel(void (*kernel)(int*), int cluster, int grid, cudaStream_t s, float* us);

template <int kBarriers>
int time_one(int cluster, int grid, cudaStream_t s, float* us) { return time_kernel(empty_kernel<kBarriers>, cluster, grid, s, us); }

int time_kernel(void (*kernel)(int*), int cluster, int grid, cudaStream_t s, float* us) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 20; ++i) CK(cudaLaunchKernelEx(&cfg, kernel, (int*)nullptr));
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 5; ++i) CK(cudaGraphLaunch(ge, s));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  float best = 1e9f;
  for (int r = 0; r < 20; ++r) {
    cudaEventRecord(a, s);
    CK(cudaGraphLaunch(ge, s));
    cudaEventRecord(b, s);
    CK(cudaEventSynchronize(b));
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (ms < best) best = ms;
  }
  *us = best * 1000.0f / 20.0f;
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return 0;
}

int main() {
  cudaStream_t s;
  cudaStreamCreate(&s);
  printf("per-call us (best of 20 graph replays of 20 calls), 256-thread CTAs\n");
  printf("%8s %6s %10s %10s %10s\n", "cluster", "grid", "0 barrier", "1 barrier", "2 barriers");
  for (int c : {1, 2, 4, 8})
    for (int grid : {8, 64, 256}) {
      float t0, t1, t2;
      if (time_one<0>(c, grid, s, &t0) || time_one<1>(c, grid, s, &t1) || time_one<2>(c, grid, s, &t2)) return 1;
      printf("%8d %6d %10.2f %10.2f %10.2f\n", c, grid, t0, t1, t2);
    }
  printf("\nstart-up barrier + a second cluster barrier, against + a remote mbarrier arrive per peer\n");
  printf("%8s %6s %10s %10s\n", "cluster", "grid", "barrier", "mbarrier");
  for (int c : {2, 4, 8})
    for (int grid : {8, 64, 256}) {
      float tb, tm;
      if (time_kernel(exchange_kernel<true>, c, grid, s, &tb) || time_kernel(exchange_kernel<false>, c, grid, s, &tm)) return 1;
      printf("%8d %6d %10.2f %10.2f\n", c, grid, tb, tm);
    }
  return 0;
}
