// Session 15, call 8 (issue 14): sm_stream.cu (session 14's, results/gpu/session14_h100/pending/) found one
// SM streaming 31-33 GB/s with one 256-thread block whether each lane kept 4 or 16 loads in flight, and
// 118 GB/s with one 1024-thread block. Is the rate set by the warps of a block, or of the SM? Session 12
// found two co-resident fused-MLP blocks no faster than one. Here:
//   A. one block on one SM: T threads in {128, 256, 512, 1024} x D loads in flight in {1, 2, 4, 8};
//   B. N co-resident blocks of 256 threads on one SM (N = 1, 2, 4, 8): a grid of N x SMs blocks in which
//      only the blocks that land on SM 0 stream (the others return at once; the count on SM 0 is
//      measured with an atomic and printed); each streams its own 16 MiB.
//   nvcc -O3 -std=c++17 -arch=sm_90a sm_stream2.cu -o sm_stream2 && ./sm_stream2
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));       \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

__device__ __forceinline__ uint4 ldg_na(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// Streams `words` 16-byte words from p: thread t reads t, t + T, ..., D at a time.
template <int D>
__device__ __forceinline__ unsigned stream(const uint4* p, size_t words) {
  unsigned acc = 0;
  for (size_t w = threadIdx.x; w < words; w += size_t(D) * blockDim.x) {
    uint4 v[D];
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const size_t i = w + size_t(d) * blockDim.x;
      v[d] = i < words ? ldg_na(p + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int d = 0; d < D; ++d) acc ^= v[d].x ^ v[d].y ^ v[d].z ^ v[d].w;
  }
  return acc;
}

template <int D>
__global__ void one_block(const uint4* base, size_t words, unsigned* sink) {
  const unsigned acc = stream<D>(base, words);
  if (acc == 0x12345678u) sink[0] = acc;
}

// Only the blocks resident on SM 0 stream; slot = their arrival order there (each its own region).
__global__ void on_sm0(const uint4* base, size_t words, unsigned* count, unsigned* sink) {
  __shared__ unsigned slot;
  if (smid() != 0) return;
  if (threadIdx.x == 0) slot = atomicAdd(count, 1u);
  __syncthreads();
  const unsigned acc = stream<4>(base + size_t(slot) * words, words);
  if (acc == 0x12345678u) sink[0] = acc;
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t region = size_t(16) << 20, total = size_t(4) << 30;
  char* buf = nullptr;
  unsigned *sink = nullptr, *count = nullptr;
  CK(cudaMalloc(&buf, total));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMalloc(&count, 4));
  CK(cudaMemset(buf, 1, total));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  size_t next = 0;
  auto fresh = [&](size_t bytes) {
    if (next + bytes > total) next = 0;
    const size_t at = next;
    next += bytes;
    return at;
  };
  auto best_ms = [&](size_t bytes, auto launch) {
    float best = 1e30f;
    for (int rep = 0; rep < 3; ++rep) {
      const size_t at = fresh(bytes);
      CK(cudaEventRecord(e0));
      launch(at);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      best = ms < best ? ms : best;
    }
    return best;
  };
  std::printf("A. one block on one SM, 16 MiB: GB/s\n      D=1     D=2     D=4     D=8\n");
  for (int threads : {128, 256, 512, 1024}) {
    std::printf("  T=%4d", threads);
    auto run = [&](auto kernel) {
      const float ms = best_ms(region, [&](size_t at) {
        kernel<<<1, threads>>>(reinterpret_cast<const uint4*>(buf + at), region / 16, sink);
      });
      std::printf(" %7.1f", region / (ms * 1e-3) / 1e9);
    };
    run(one_block<1>);
    run(one_block<2>);
    run(one_block<4>);
    run(one_block<8>);
    std::printf("\n");
  }
  std::printf("B. N co-resident 256-thread blocks on SM 0 (D = 4), 16 MiB each: GB/s for the SM\n");
  for (int n : {1, 2, 4, 8}) {
    unsigned got = 0;
    const float ms = best_ms(region * 16, [&](size_t at) {
      CK(cudaMemsetAsync(count, 0, 4));
      on_sm0<<<n * sms, 256>>>(reinterpret_cast<const uint4*>(buf + at), region / 16, count, sink);
    });
    CK(cudaMemcpy(&got, count, 4, cudaMemcpyDeviceToHost));
    std::printf("  N=%d requested, %u blocks ran on SM 0: %7.1f GB/s (%5.1f a block)\n", n, got,
                got * region / (ms * 1e-3) / 1e9, region / (ms * 1e-3) / 1e9);
  }
  CK(cudaGetLastError());
  return 0;
}
