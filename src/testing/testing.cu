// Device-side helpers for the GPU tests, the benchmarks and the correctness table (testing.h):
// a counter-based random fill, output poisoning, the higher-precision GPU reference of gated_up
// (cuBLAS with fp32 accumulation and output, then the gate in fp32), and an fp64 comparison.
#include "testing/testing.h"

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/check.h"
#include "common/activation.cuh"

namespace blockfuse::testing {
namespace {

#define BF_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                          \
    cublasStatus_t st_ = (expr);                                                                \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                           \
      throw Error(detail::cat("blockfuse::testing: cuBLAS status ", int(st_), " in ", #expr));  \
  } while (0)

// splitmix64 finaliser: a good 64-bit mix of (seed, index).
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <class T>
__global__ void fill_uniform_kernel(T* p, int64_t rows, int64_t cols, int64_t ld, float lo, float hi, uint64_t seed) {
  const int64_t n = rows * cols;
  const uint64_t s = mix64(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const uint64_t z = mix64(s ^ (uint64_t(r) * 0xD1B54A32D192ED03ull + uint64_t(c)));
    const float u = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[r * ld + c] = static_cast<T>(lo + (hi - lo) * u);
  }
}

__global__ void fill_bits_kernel(uint16_t* p, int64_t rows, int64_t cols, int64_t ld, uint16_t bits) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols;
    p[r * ld + (i - r * cols)] = bits;
  }
}

__global__ void gate_kernel(const float* c, int64_t rows, int64_t u, float* ref, int64_t ld_ref, int act) {
  const int64_t n = rows * u;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / u, j = i - r * u;
    const float up = c[r * 2 * u + 2 * j], gate = c[r * 2 * u + 2 * j + 1];
    ref[r * ld_ref + j] = gated_act(act, gate, up);
  }
}

struct DevStats {
  unsigned long long count, nonfinite, violations, first_bad, max_abs_bits;
  double sum_abs, sum_sq, sum_sq_ref, sum_abs_ref;
};

template <class T>
__global__ void compare_kernel(const T* out, int64_t rows, int64_t cols, int64_t ld, const float* ref, int64_t ld_ref,
                               double atol, double rtol, DevStats* st) {
  const int64_t n = rows * cols;
  double s_abs = 0, s_sq = 0, s_ref2 = 0, s_aref = 0, mx = 0;
  unsigned long long nonfin = 0, viol = 0, cnt = 0, first = ~0ull;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const double o = static_cast<float>(out[r * ld + c]);
    const double e = ref[r * ld_ref + c];
    ++cnt;
    bool bad;
    if (!isfinite(e)) {
      // NaN must stay NaN; +-inf must match exactly.
      bad = isnan(e) ? !isnan(o) : (o != e);
    } else if (!isfinite(o)) {
      ++nonfin;
      bad = true;
    } else {
      const double d = fabs(o - e);
      s_abs += d;
      s_sq += d * d;
      s_ref2 += e * e;
      s_aref += fabs(e);
      mx = fmax(mx, d);
      bad = d > atol + rtol * fabs(e);
    }
    if (bad) {
      ++viol;
      if (static_cast<unsigned long long>(i) < first) first = i;
    }
  }
  atomicAdd(&st->count, cnt);
  if (nonfin) atomicAdd(&st->nonfinite, nonfin);
  if (viol) atomicAdd(&st->violations, viol);
  if (first != ~0ull) atomicMin(&st->first_bad, first);
  atomicMax(&st->max_abs_bits, static_cast<unsigned long long>(__double_as_longlong(mx)));  // mx >= 0: bits are monotonic
  atomicAdd(&st->sum_abs, s_abs);
  atomicAdd(&st->sum_sq, s_sq);
  atomicAdd(&st->sum_sq_ref, s_ref2);
  atomicAdd(&st->sum_abs_ref, s_aref);
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

cublasHandle_t handle_for_current_device() {
  static std::mutex mu;
  static std::map<int, cublasHandle_t> handles;
  int dev = 0;
  BF_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(dev);
  if (it != handles.end()) return it->second;
  cublasHandle_t h;
  BF_CUBLAS_CHECK(cublasCreate(&h));
  handles[dev] = h;
  return h;
}

}  // namespace


uint16_t nan_bits(DType t) { return t == DType::kBF16 ? uint16_t(0x7fc0) : uint16_t(0x7e00); }

bool has_cuda_device() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

void fill_uniform(Matrix m, float lo, float hi, uint64_t seed, cudaStream_t stream) {
  if (m.rows == 0 || m.cols == 0) return;
  const unsigned g = grid_for(m.rows * m.cols);
  if (m.dtype == DType::kBF16)
    fill_uniform_kernel<<<g, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(m.data), m.rows, m.cols, m.ld, lo, hi, seed);
  else
    fill_uniform_kernel<<<g, 256, 0, stream>>>(static_cast<__half*>(m.data), m.rows, m.cols, m.ld, lo, hi, seed);
  BF_CHECK_LAUNCH();
}

void fill_bits(Matrix m, uint16_t bits, cudaStream_t stream) {
  if (m.rows == 0 || m.cols == 0) return;
  fill_bits_kernel<<<grid_for(m.rows * m.cols), 256, 0, stream>>>(static_cast<uint16_t*>(m.data), m.rows, m.cols, m.ld, bits);
  BF_CHECK_LAUNCH();
}

void gated_up_reference_gpu(ConstMatrix x, ConstMatrix w, float* ref, int64_t ld_ref, Activation act, cudaStream_t stream) {
  const int64_t M = x.rows, K = x.cols, N = w.rows, U = N / 2;
  if (w.cols != K || N % 2 != 0 || x.dtype != w.dtype)
    throw Error(detail::cat("gated_up_reference_gpu: bad shapes x [", M, ", ", K, "], w [", N, ", ", w.cols, "]"));
  if (M == 0 || U == 0) return;
  float* c = nullptr;
  BF_CUDA_CHECK(cudaMalloc(&c, sizeof(float) * M * N));
  cublasHandle_t h = handle_for_current_device();
  BF_CUBLAS_CHECK(cublasSetStream(h, stream));
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t t = x.dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  // Row-major C[M, N] = x · wᵀ is column-major Cᵀ[N, M] = (w as col-major K×N)ᵀ · (x as col-major K×M).
  BF_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &one, w.data, t, int(w.ld), x.data,
                               t, int(x.ld), &zero, c, CUDA_R_32F, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  gate_kernel<<<grid_for(M * U), 256, 0, stream>>>(c, M, U, ref, ld_ref, static_cast<int>(act));
  BF_CHECK_LAUNCH();
  BF_CUDA_CHECK(cudaStreamSynchronize(stream));
  BF_CUDA_CHECK(cudaFree(c));
}

CompareStats compare(ConstMatrix out, const float* ref, int64_t ld_ref, double atol, double rtol, cudaStream_t stream) {
  CompareStats s;
  if (out.rows == 0 || out.cols == 0) return s;
  DevStats* d = nullptr;
  BF_CUDA_CHECK(cudaMalloc(&d, sizeof(DevStats)));
  DevStats init{};
  init.first_bad = ~0ull;
  BF_CUDA_CHECK(cudaMemcpyAsync(d, &init, sizeof(init), cudaMemcpyHostToDevice, stream));
  const unsigned g = grid_for(out.rows * out.cols);
  if (out.dtype == DType::kBF16)
    compare_kernel<<<g, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(out.data), out.rows, out.cols, out.ld, ref, ld_ref, atol, rtol, d);
  else
    compare_kernel<<<g, 256, 0, stream>>>(static_cast<const __half*>(out.data), out.rows, out.cols, out.ld, ref, ld_ref, atol, rtol, d);
  BF_CHECK_LAUNCH();
  DevStats h{};
  BF_CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, stream));
  BF_CUDA_CHECK(cudaStreamSynchronize(stream));
  BF_CUDA_CHECK(cudaFree(d));
  s.count = int64_t(h.count);
  s.nonfinite = int64_t(h.nonfinite);
  s.violations = int64_t(h.violations);
  s.sum_abs_diff = h.sum_abs;
  s.sum_sq_diff = h.sum_sq;
  s.sum_sq_ref = h.sum_sq_ref;
  s.sum_abs_ref = h.sum_abs_ref;
  long long bits = static_cast<long long>(h.max_abs_bits);
  std::memcpy(&s.max_abs_diff, &bits, sizeof(double));
  if (h.first_bad != ~0ull) {
    s.first_bad_row = int64_t(h.first_bad) / out.cols;
    s.first_bad_col = int64_t(h.first_bad) % out.cols;
  }
  return s;
}

}  // namespace blockfuse::testing
