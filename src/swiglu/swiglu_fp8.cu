// swiglu_fp8: out[M, U] (e4m3) = quantise(act(gate) ⊙ up) from a [M, 2U] bf16/fp16 input.
//
// One block per row (grid-stride over rows). The dynamic per-row scale needs the row's amax before
// the first byte is written, so each thread keeps its share of the row's fp32 results in registers
// — up to kChunksPerThread 8-column chunks, i.e. U <= 8 · 4 · 1024 = 32768 — and the block reduces
// the amax in shared memory: one read of the input, one write of the output. Wider rows (none in
// today's models) take a two-pass path that recomputes the row (its second read mostly hits L2).
// All of a thread's 16-byte loads are issued before any math so that 4 chunks × 2 vectors are in
// flight per thread. The static-scale kernel is the same without the reduction.
#include "blockfuse/swiglu.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/check.h"
#include "common/fp8_device.cuh"
#include "gated_up/activation.cuh"
#include "swiglu/gate_up_load.cuh"
#include "swiglu/validate.h"

namespace blockfuse {
namespace {

constexpr int kChunksPerThread = 4;
constexpr int kMaxThreads = 1024;

// Block-wide max of v (>= 0) for blocks of a multiple of 32 threads. partial[32] holds one value per
// warp and *result the block's; the two barriers make it safe to call once per row in a loop (a
// warp cannot overwrite partial[] for the next row before warp 0 has read this row's).
__device__ __forceinline__ float block_max(float v, float* partial, float* result) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < int(blockDim.x / 32) ? partial[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, o));
    if (lane == 0) *result = w;
  }
  __syncthreads();
  return *result;
}

// 8 results -> 8 e4m3 bytes, one 8-byte store.
__device__ __forceinline__ void store_fp8x8(uint8_t* dst, const float (&v)[8], float scale) {
  uint2 o;
  uint8_t* b = reinterpret_cast<uint8_t*>(&o);
#pragma unroll
  for (int j = 0; j < 8; ++j) b[j] = fp8_quantize(v[j], scale);
  *reinterpret_cast<uint2*>(dst) = o;
}

template <class T, bool kInterleaved>
__device__ __forceinline__ void chunk_values(const T* row, int64_t u, int64_t c, int act, float (&v)[8]) {
  float g[8], up[8];
  load_gate_up_chunk<T, kInterleaved>(row, u, c, g, up);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = gated_act(act, g[j], up[j]);
}

template <class T, bool kInterleaved, bool kDynamic>
__global__ void __launch_bounds__(kMaxThreads) swiglu_fp8_kernel(
    const T* __restrict__ in, int64_t ldi, uint8_t* __restrict__ out, int64_t ldo, int64_t rows,
    int64_t u, int act, float* __restrict__ scale) {
  __shared__ float partial[32];
  __shared__ float result;
  const int64_t chunks = u / 8;
  const bool in_registers = chunks <= int64_t(blockDim.x) * kChunksPerThread;
  const float static_scale = kDynamic ? 1.0f : __ldg(scale);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = in + r * ldi;
    uint8_t* orow = out + r * ldo;
    if (in_registers) {
      uint4 raw[kChunksPerThread][2];
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int64_t ch = threadIdx.x + int64_t(i) * blockDim.x;
        if (ch < chunks) load_gate_up_raw<T, kInterleaved>(row, u, ch * 8, raw[i]);
      }
      float v[kChunksPerThread][8];
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        float g[8], up[8];
        unpack_gate_up<T, kInterleaved>(raw[i], g, up);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          v[i][j] = gated_act(act, g[j], up[j]);
          // Chunks past the row's end hold garbage: they must not reach the amax.
          if (kDynamic && threadIdx.x + int64_t(i) * blockDim.x < chunks) amax = fmaxf(amax, finite_abs(v[i][j]));
        }
      }
      float s = static_scale;
      if constexpr (kDynamic) {
        s = fp8_dynamic_scale(block_max(amax, partial, &result));
        if (threadIdx.x == 0) scale[r] = s;
      }
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int64_t ch = threadIdx.x + int64_t(i) * blockDim.x;
        if (ch < chunks) store_fp8x8(orow + ch * 8, v[i], s);
      }
    } else {
      float s = static_scale;
      if constexpr (kDynamic) {
        float amax = 0.0f;
        for (int64_t ch = threadIdx.x; ch < chunks; ch += blockDim.x) {
          float v[8];
          chunk_values<T, kInterleaved>(row, u, ch * 8, act, v);
#pragma unroll
          for (int j = 0; j < 8; ++j) amax = fmaxf(amax, finite_abs(v[j]));
        }
        s = fp8_dynamic_scale(block_max(amax, partial, &result));
        if (threadIdx.x == 0) scale[r] = s;
      }
      for (int64_t ch = threadIdx.x; ch < chunks; ch += blockDim.x) {
        float v[8];
        chunk_values<T, kInterleaved>(row, u, ch * 8, act, v);
        store_fp8x8(orow + ch * 8, v, s);
      }
    }
  }
}

template <class T, bool kInterleaved>
void launch_layout(const ConstMatrix& in, const Fp8Matrix& out, const Fp8Scale& scale, Activation act,
                   cudaStream_t stream) {
  const int64_t chunks = out.cols / 8;
  // Enough threads that kChunksPerThread chunks each cover the row (whole warps, at most 1024).
  const int64_t want = (chunks + kChunksPerThread - 1) / kChunksPerThread;
  const int threads = static_cast<int>(std::clamp<int64_t>((want + 31) / 32 * 32, 32, kMaxThreads));
  int dev = 0, sms = 0;
  BF_CUDA_CHECK(cudaGetDevice(&dev));
  BF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  // One block per row up to 2048/threads resident blocks per SM, times a few waves' worth of
  // launches; beyond that blocks loop over rows.
  const int64_t max_blocks = int64_t(sms) * std::max(1, 2048 / threads) * 8;
  const unsigned blocks = static_cast<unsigned>(std::min(out.rows, max_blocks));
  auto* ip = static_cast<const T*>(in.data);
  auto* op = static_cast<uint8_t*>(out.data);
  if (scale.mode == Fp8ScaleMode::kDynamicPerRow)
    swiglu_fp8_kernel<T, kInterleaved, true><<<blocks, threads, 0, stream>>>(ip, in.ld, op, out.ld, out.rows, out.cols, int(act), scale.scale);
  else
    swiglu_fp8_kernel<T, kInterleaved, false><<<blocks, threads, 0, stream>>>(ip, in.ld, op, out.ld, out.rows, out.cols, int(act), scale.scale);
  BF_CHECK_LAUNCH();
}

template <class T>
void launch(const ConstMatrix& in, const Fp8Matrix& out, const Fp8Scale& scale, Activation act,
            GateUpLayout layout, cudaStream_t stream) {
  if (layout == GateUpLayout::kInterleaved)
    launch_layout<T, true>(in, out, scale, act, stream);
  else
    launch_layout<T, false>(in, out, scale, act, stream);
}

}  // namespace

void swiglu_fp8(ConstMatrix gate_up, Fp8Matrix out, Fp8Scale scale, Activation act, GateUpLayout layout,
                cudaStream_t stream) {
  constexpr const char* kFn = "swiglu_fp8";
  detail::check_swiglu_codes_and_input(kFn, gate_up, act, layout);
  detail::check_fp8_matrix_shape(kFn, "out", out, 8);
  detail::check_swiglu_shapes(kFn, gate_up, out.rows, out.cols);
  detail::check_fp8_scale(kFn, "scale", scale, out.rows, /*on_device=*/false);
  if (out.rows == 0 || out.cols == 0) return;
  detail::check_device_matrix(kFn, "gate_up", gate_up);
  detail::check_device_pointer(kFn, "out", out.data);
  detail::check_fp8_scale(kFn, "scale", scale, out.rows, /*on_device=*/true);
  detail::check_no_overlap(kFn, "out", detail::span_of(out), "gate_up", detail::span_of(gate_up));
  detail::check_no_overlap(kFn, "scale", detail::span_of(scale, out.rows), "gate_up", detail::span_of(gate_up));
  detail::check_no_overlap(kFn, "scale", detail::span_of(scale, out.rows), "out", detail::span_of(out));
  detail::check_compute_capability(kFn, 8, 0);
  if (gate_up.dtype == DType::kBF16)
    launch<__nv_bfloat16>(gate_up, out, scale, act, layout, stream);
  else
    launch<__half>(gate_up, out, scale, act, layout, stream);
}

}  // namespace blockfuse
