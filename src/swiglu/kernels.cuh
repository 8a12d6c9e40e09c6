// Internal: the swiglu kernels (included by swiglu.cu only).
//
// Both are memory-bound on the H100 only while the per-element math stays small: act() costs an
// expf and an IEEE division, the FP8 path a multiply and half a cvt more. A division per element
// and 4 chunks per thread (spilling under a 64-register cap) held the FP8 output at 40-62 % of copy
// bandwidth (results/gpu/experiments/swiglu_v1_division_spills.json; docs/decoder-kernels.md).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "common/activation.cuh"
#include "common/fp8_device.cuh"
#include "common/reduce.cuh"
#include "common/vec.cuh"
#include "swiglu/gate_up_load.cuh"

namespace blockfuse::swiglu_detail {

// Chunks (8 columns) per thread: both chunks' 16-byte loads are issued before any math, 64 bytes in
// flight per thread; more would cost registers (and the row kernel below keeps them all live).
constexpr int kChunksPerThread = 2;
constexpr int kElementwiseThreads = 256;
// Problems of at most this many chunks use one chunk per thread in 128-thread blocks (decode rows).
constexpr int64_t kSmallProblemChunksPerSm = 512;
constexpr int kSmallBlockThreads = 128;
constexpr int kRowMaxThreads = 1024;
// The row kernel keeps a whole row in registers up to this U (1024 threads x 2 chunks x 8).
constexpr int64_t kRowInRegistersMaxU = int64_t(kRowMaxThreads) * kChunksPerThread * 8;

// What the elementwise kernel writes (the dynamic FP8 scale needs the row kernel below).
enum class SwigluElementwiseOutput : int { k16Bit = 0, kFp8StaticScale = 1 };

// Elementwise: thread t of the grid handles chunks t, t + stride, ... (kChunks of them, then the
// grid-stride loop). 16-bit output, or FP8 with one per-tensor scale (read from device memory:
// graph-safe). kChunks = kChunks for large problems (more bytes in flight per thread);
// 1 for decode-sized ones, where spreading the few chunks over as many SMs as possible is what
// shortens the call.
template <class T, bool kInterleaved, SwigluElementwiseOutput kOut, int kChunks>
__global__ void __launch_bounds__(kElementwiseThreads) swiglu_elementwise_kernel(
    const T* __restrict__ in, int64_t ldi, void* __restrict__ out, int64_t ldo, int64_t rows, int64_t u, int act,
    const float* __restrict__ scale) {
  const int64_t chunks_per_row = u / 8;
  const int64_t total = rows * chunks_per_row;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  float inv_scale = 1.0f;
  if constexpr (kOut == SwigluElementwiseOutput::kFp8StaticScale) inv_scale = 1.0f / __ldg(scale);
  for (int64_t base = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; base < total; base += stride * kChunks) {
    uint4 raw[kChunks][2];
    int64_t r[kChunks], c[kChunks];
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int64_t idx = base + i * stride;
      r[i] = idx / chunks_per_row;
      c[i] = (idx - r[i] * chunks_per_row) * 8;
      if (idx < total) load_gate_up_raw<T, kInterleaved>(in + r[i] * ldi, u, c[i], raw[i]);
    }
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (base + i * stride >= total) break;
      float g[8], up[8], v[8];
      unpack_gate_up<T, kInterleaved>(raw[i], g, up);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = gated_act(act, g[j], up[j]);
      if constexpr (kOut == SwigluElementwiseOutput::k16Bit) {
        *reinterpret_cast<uint4*>(static_cast<T*>(out) + r[i] * ldo + c[i]) = detail::Vec8<T>::pack(v);
      } else {
        store_fp8x8(static_cast<uint8_t*>(out) + r[i] * ldo + c[i], v, inv_scale);
      }
    }
  }
}

template <class T, bool kInterleaved>
__device__ __forceinline__ void chunk_values(const T* row, int64_t u, int64_t c, int act, float (&v)[8]) {
  float g[8], up[8];
  load_gate_up_chunk<T, kInterleaved>(row, u, c, g, up);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = gated_act(act, g[j], up[j]);
}

// FP8 with a dynamic per-row scale: the row's amax is needed before its first byte is written, so
// one block owns a row (grid-stride over rows) and keeps its share of the row's fp32 results in
// registers (U <= kRowInRegistersMaxU: one read, one write); wider rows recompute in a second pass.
// Measured slower on the H100 (bf16, % of copy at 2048 / 8192 rows, docs/decoder-kernels.md): a
// 4-CTA cluster per row sharing the amax through DSMEM, 64 / 73 % vs 74 / 84 % at U = 16384
// (results/gpu/experiments/swiglu_dynamic_cluster4.json); a persistent grid prefetching each
// block's next row, 71 / 81 % at U = 16384 (results/gpu/experiments/swiglu_dynamic_persistent_prefetch.json).
template <class T, bool kInterleaved>
__global__ void __launch_bounds__(kRowMaxThreads) swiglu_fp8_rowwise_kernel(
    const T* __restrict__ in, int64_t ldi, uint8_t* __restrict__ out, int64_t ldo, int64_t rows, int64_t u, int act,
    float* __restrict__ scale) {
  __shared__ float partial[32];
  const int64_t chunks = u / 8;
  const bool in_registers = chunks <= int64_t(blockDim.x) * kChunksPerThread;
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
        const bool live = threadIdx.x + int64_t(i) * blockDim.x < chunks;
        float g[8], up[8];
        unpack_gate_up<T, kInterleaved>(raw[i], g, up);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          v[i][j] = gated_act(act, g[j], up[j]);
          if (live) amax = fmaxf(amax, finite_abs(v[i][j]));  // dead chunks hold garbage
        }
      }
      const float s = fp8_dynamic_scale(detail::block_reduce<detail::MaxOp>(amax, partial));
      if (threadIdx.x == 0) scale[r] = s;
      const float inv = 1.0f / s;
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int64_t ch = threadIdx.x + int64_t(i) * blockDim.x;
        if (ch < chunks) store_fp8x8(orow + ch * 8, v[i], inv);
      }
    } else {
      float amax = 0.0f;
      for (int64_t ch = threadIdx.x; ch < chunks; ch += blockDim.x) {
        float v[8];
        chunk_values<T, kInterleaved>(row, u, ch * 8, act, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) amax = fmaxf(amax, finite_abs(v[j]));
      }
      const float s = fp8_dynamic_scale(detail::block_reduce<detail::MaxOp>(amax, partial));
      if (threadIdx.x == 0) scale[r] = s;
      const float inv = 1.0f / s;
      for (int64_t ch = threadIdx.x; ch < chunks; ch += blockDim.x) {
        float v[8];
        chunk_values<T, kInterleaved>(row, u, ch * 8, act, v);
        store_fp8x8(orow + ch * 8, v, inv);
      }
    }
  }
}

}  // namespace blockfuse::swiglu_detail
