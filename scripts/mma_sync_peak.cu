// The mma.sync m16n8k16 bf16 throughput ceiling (registers only, no memory traffic), cited in
// docs/perf-notes.md (H100, 2026-11-22: 593 / 635 / 636 TFLOP/s at 4 / 8 / 16 warps per SM).
// Build: nvcc -O3 -gencode arch=compute_90,code=sm_90 scripts/mma_sync_peak.cu -o mma_sync_peak
#include <cstdio>
#include <cuda_runtime.h>
template <int CHAINS>
__global__ void __launch_bounds__(256) peak(float* out, int iters) {
  unsigned a0 = threadIdx.x, a1 = a0 * 3, a2 = a0 * 5, a3 = a0 * 7, b0 = a0 * 11, b1 = a0 * 13;
  float c[CHAINS][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < CHAINS; ++j)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                   : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  float s = 0;
#pragma unroll
  for (int j = 0; j < CHAINS; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  if (s == 1.2345f) out[0] = s;
}
int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* o; cudaMalloc(&o, 4); cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int wpsm : {4, 8, 16}) {
    int iters = 20000; dim3 grid(sms * (wpsm >= 8 ? wpsm / 8 : 1)); int threads = wpsm >= 8 ? 256 : 32 * wpsm;
    peak<16><<<grid, threads>>>(o, 100); cudaDeviceSynchronize();
    float best = 1e9;
    for (int r = 0; r < 5; ++r) { cudaEventRecord(e0); peak<16><<<grid, threads>>>(o, iters); cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); if (ms < best) best = ms; }
    double flops = 2.0 * 16 * 8 * 16 * 16.0 * iters * grid.x * (threads / 32);
    printf("mma.sync bf16 m16n8k16 peak: %2d warps/SM -> %.1f TFLOP/s\n", wpsm, flops / best / 1e9);
  }
  printf("err=%s\n", cudaGetErrorString(cudaGetLastError()));
}
