// Session 14 (written, not run: the device budget was spent). Issue 14's question: how fast can ONE
// SM stream weights from DRAM, by ordinary 16-byte loads and by bulk asynchronous copies (TMA,
// cp.async.bulk)? Session 12 measured a short sparse list's blocks at about 25-33 GB/s each, and two
// co-resident blocks did not stream faster than one (docs/fused_mlp.md). That fits a per-SM limit on
// loads in flight through L1, which bulk copies do not share. This program measures the rate per SM
// of:
//   ldg   T threads, each keeping D 16-byte ld.global.nc.L1::no_allocate loads in flight;
//   bulk  one thread keeping S stages of B bytes of cp.async.bulk in flight into shared memory,
//         each completing on its stage's mbarrier (the data is not read: only the transfer is timed).
// with 1, 8, 33, 66 and 132 SMs active (one block each; each block streams its own 16 MiB region of a
// 2 GiB buffer, a fresh region every repetition, so the bytes come from DRAM). GB/s per SM and in all.
//   nvcc -O3 -std=c++17 -arch=sm_90a sm_stream.cu -o sm_stream && ./sm_stream
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

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

// Each block streams `bytes` from base + blockIdx.x * stride: thread t reads 16-byte words t, t + T, ...
// D at a time (all D issued before any is used).
template <int D>
__global__ void ldg_kernel(const uint4* base, size_t stride16, size_t words, unsigned* sink) {
  const uint4* p = base + blockIdx.x * stride16;
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
  if (acc == 0x12345678u) sink[0] = acc;  // keeps the loads
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(unsigned(__cvta_generic_to_shared(bar))), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(unsigned(__cvta_generic_to_shared(bar))),
               "r"(bytes));
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned phase) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra W;\n"
      "}\n" ::"r"(unsigned(__cvta_generic_to_shared(bar))),
      "r"(phase));
}
__device__ __forceinline__ void bulk_copy(void* smem, const void* gmem, unsigned bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          unsigned(__cvta_generic_to_shared(smem))),
      "l"(gmem), "r"(bytes), "r"(unsigned(__cvta_generic_to_shared(bar)))
      : "memory");
}

// One thread per block streams `bytes` through `stages` shared-memory stages of `chunk` bytes.
__global__ void bulk_kernel(const char* base, size_t stride, size_t bytes, unsigned chunk, int stages) {
  extern __shared__ __align__(128) char smem[];
  __shared__ uint64_t bars[16];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < stages; ++s) mbar_init(&bars[s], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const char* p = base + blockIdx.x * stride;
  const size_t n = bytes / chunk;
  size_t issued = 0;
  for (; issued < n && issued < size_t(stages); ++issued) {
    mbar_expect_tx(&bars[issued], chunk);
    bulk_copy(smem + issued * chunk, p + issued * chunk, chunk, &bars[issued]);
  }
  for (size_t done = 0; done < n; ++done) {
    const int s = int(done % stages);
    mbar_wait(&bars[s], unsigned((done / stages) & 1));
    if (issued < n) {
      mbar_expect_tx(&bars[s], chunk);
      bulk_copy(smem + s * chunk, p + issued * chunk, chunk, &bars[s]);
      ++issued;
    }
  }
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t region = size_t(16) << 20, total = size_t(6) << 30;
  char* buf = nullptr;
  unsigned* sink = nullptr;
  CK(cudaMalloc(&buf, total));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(buf, 1, total));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  size_t next = 0;  // a fresh region for every timed launch: DRAM, not L2
  auto fresh = [&](int blocks) {
    if (next + size_t(blocks) * region > total) next = 0;
    const size_t at = next;
    next += size_t(blocks) * region;
    return at;
  };
  const int active[] = {1, 8, 33, 66, sms};
  std::printf("device SMs %d; each block streams %zu MiB; GB/s per SM (all SMs together)\n", sms, region >> 20);
  auto report = [&](const char* what, int blocks, float ms) {
    const double gbs = double(blocks) * region / (ms * 1e-3) / 1e9;
    std::printf("  %-34s %4d SMs: %7.1f GB/s per SM (%7.1f in all)\n", what, blocks, gbs / blocks, gbs);
  };
  // The best of 3 launches of launch(blocks, offset of a fresh region), in ms.
  auto best_ms = [&](int blocks, auto launch) {
    float best = 1e30f;
    for (int rep = 0; rep < 3; ++rep) {
      const size_t at = fresh(blocks);
      CK(cudaEventRecord(e0));
      launch(blocks, at);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      best = ms < best ? ms : best;
    }
    return best;
  };
  auto time_ldg = [&](auto kernel, const char* name, int threads) {
    for (int blocks : active)
      report(name, blocks, best_ms(blocks, [&](int n, size_t at) {
               kernel<<<n, threads>>>(reinterpret_cast<const uint4*>(buf + at), region / 16, region / 16, sink);
             }));
  };
  std::printf("ldg (16-byte non-allocating loads):\n");
  time_ldg(ldg_kernel<4>, "256 threads x 4 in flight (16 KB)", 256);
  time_ldg(ldg_kernel<16>, "256 threads x 16 in flight (64 KB)", 256);
  time_ldg(ldg_kernel<8>, "1024 threads x 8 in flight (128 KB)", 1024);
  time_ldg(ldg_kernel<16>, "1024 threads x 16 in flight (256 KB)", 1024);
  std::printf("bulk (cp.async.bulk into shared memory, one thread):\n");
  struct Cfg { unsigned chunk; int stages; };
  for (Cfg c : {Cfg{16384, 2}, Cfg{16384, 4}, Cfg{16384, 8}, Cfg{32768, 6}, Cfg{16384, 12}}) {
    const int smem = int(c.chunk) * c.stages;
    CK(cudaFuncSetAttribute(bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    char name[64];
    std::snprintf(name, sizeof name, "%d x %u KB stages (%d KB)", c.stages, c.chunk >> 10, smem >> 10);
    for (int blocks : active)
      report(name, blocks, best_ms(blocks, [&](int n, size_t at) {
               bulk_kernel<<<n, 32, smem>>>(buf + at, region, region, c.chunk, c.stages);
             }));
  }
  CK(cudaGetLastError());
  return 0;
}
