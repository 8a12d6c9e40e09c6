// Internal: the swiglu kernels (included by swiglu.cu only).
//
// Both are memory-bound on the H100 only while the per-element math stays small, so act() is
// gated_act_fast (common/activation.cuh: the special-function unit's ex2 and rcp, not an accurate
// expf and an IEEE division); the FP8 path adds a multiply and half a cvt. A division per element
// and 4 chunks per thread (spilling under a 64-register cap) held the FP8 output at 40-62 % of copy
// bandwidth (docs/swiglu.md#tuning).
#pragma once

#include <cstdint>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include "common/activation.cuh"
#include "common/cluster.cuh"
#include "common/cp_async.cuh"
#include "common/fp8_device.cuh"
#include "common/pdl.cuh"
#include "common/reduce.cuh"
#include "common/vec.cuh"
#include "swiglu/config.h"
#include "swiglu/gate_up_load.cuh"

namespace blockfuse::swiglu_detail {

// The elementwise kernel's shapes (config.h: swiglu_elementwise_config).
constexpr int kElementwiseThreads = detail::kSwigluElementwiseThreads;
constexpr int kRowMaxThreads = detail::kSwigluRowMaxThreads;

// What the elementwise kernel writes (the dynamic FP8 scale needs the row kernel below).
enum class SwigluElementwiseOutput : int { k16Bit = 0, kFp8StaticScale = 1 };

// Elementwise: thread t of the grid handles chunks t, t + stride, ... (kChunks of them, then the
// grid-stride loop). 16-bit output, or FP8 with one per-tensor scale (read from device memory:
// graph-safe). The launcher runs kChunks = 1 (config.h: swiglu_elementwise_config): spreading the
// chunks over as many threads and SMs as possible measured fastest at every size.
template <class T, bool kInterleaved, SwigluElementwiseOutput kOut, int kChunks>
__global__ void __launch_bounds__(kElementwiseThreads) swiglu_elementwise_kernel(
    const T* __restrict__ in, int64_t ldi, void* __restrict__ out, int64_t ldo, int64_t rows, int64_t u, int act,
    const float* __restrict__ scale) {
  detail::pdl_enter();  // before any global access (common/pdl.cuh)
  const int64_t chunks_per_row = u / 8;
  const int64_t total = rows * chunks_per_row;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  float inv_scale = 1.0f;
  if constexpr (kOut == SwigluElementwiseOutput::kFp8StaticScale) inv_scale = 1.0f / __ldg(scale);
  // Chunk index -> (row, column) in 32-bit arithmetic while every index fits (below 2^31 chunks,
  // 16 G elements): a 64-bit division is a subroutine of some 60 instructions per chunk.
  const bool idx32 = total <= int64_t(INT32_MAX);
  for (int64_t base = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; base < total; base += stride * kChunks) {
    uint4 raw[kChunks][2];
    int64_t r[kChunks], c[kChunks];
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int64_t idx = base + i * stride;
      if (idx >= total) continue;
      if (idx32) {
        const uint32_t q = uint32_t(idx) / uint32_t(chunks_per_row);
        r[i] = q;
        c[i] = int64_t(uint32_t(idx) - q * uint32_t(chunks_per_row)) * 8;
      } else {
        r[i] = idx / chunks_per_row;
        c[i] = (idx - r[i] * chunks_per_row) * 8;
      }
      load_gate_up_raw<T, kInterleaved>(in + r[i] * ldi, u, c[i], raw[i]);
    }
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      if (base + i * stride >= total) break;
      float g[8], up[8], v[8];
      unpack_gate_up<T, kInterleaved>(raw[i], g, up);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = gated_act_fast(act, g[j], up[j]);
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
  for (int j = 0; j < 8; ++j) v[j] = gated_act_fast(act, g[j], up[j]);
}

// The register shape's row step: this thread's chunks first + tid + i·nt (i < V, those below `len`)
// loaded and their activations computed into v; returns their max |v|. Chunks past `len` are not
// loaded and their v is garbage, left out of the max (the callers store only chunks below `len`).
template <class T, bool kInterleaved, int V>
__device__ __forceinline__ float row_values_in_registers(const T* row, int64_t u, int64_t first, int64_t len, int act,
                                                         float (&v)[V][8]) {
  const int tid = threadIdx.x, nt = blockDim.x;
  uint4 raw[V][2];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int64_t c = tid + int64_t(i) * nt;
    if (c < len) load_gate_up_raw<T, kInterleaved>(row, u, (first + c) * 8, raw[i]);
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const bool live = tid + int64_t(i) * nt < len;
    float g[8], up[8];
    unpack_gate_up<T, kInterleaved>(raw[i], g, up);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[i][j] = gated_act_fast(act, g[j], up[j]);
      if (live) amax = fmaxf(amax, finite_abs(v[i][j]));
    }
  }
  return amax;
}

// How the row kernel keeps a row on chip (config.h picks it with V):
//   kRegisters  each thread loads its V chunks' gate/up vectors into registers and keeps the V x 8
//               fp32 results there until the stores (V = 2: 64 registers, the cap of a 1024-thread
//               bound; V = 4 spills ~100 bytes, ptxas sm_90)
//   kShared     16-byte cp.async copies of the thread's gate/up vectors into its own shared slots
//               ([V][2][threads] vectors), the fp32 results written back over them (8 floats = the
//               slot pair's 32 bytes): nothing of the row lives in registers, so V = 4 costs none
//   kSharedNext as kShared with two slot sets: once a thread has computed its values it starts
//               copying its block's next row into the other set, overlapping that row's DRAM
//               latency with this row's reduction and stores (a persistent grid)
enum class SwigluRowStage : int { kRegisters = 0, kShared = 1, kSharedNext = 2 };

// FP8 with a dynamic per-row scale: the row's amax is needed before its first byte is written, so
// one block owns a row (grid-stride over rows) and keeps its share of the row's fp32 results on chip,
// V chunks per thread (threads x V >= U/8: one read, one write); wider rows recompute in a second
// pass from global memory. The shape (V, threads, stage) is swiglu_fp8_row_config's (config.h).
// Measured slower on the H100 at 2048 / 8192 rows of U = 16384 (bf16, % of copy): a persistent grid
// prefetching each block's next row into registers, 71 / 81 % vs 74 / 84 % (docs/swiglu.md#tuning).
// kMinBlocks: 1, or 3 for kFourSharedThree's shapes (<= 512 threads: the bound caps registers at 40).
template <class T, bool kInterleaved, int V, SwigluRowStage kStage, int kMinBlocks = 1>
__global__ void __launch_bounds__(kMinBlocks > 1 ? detail::kSwigluThreeBlockThreads : kRowMaxThreads, kMinBlocks > 1 ? kMinBlocks : 0)
swiglu_fp8_rowwise_kernel(
    const T* __restrict__ in, int64_t ldi, uint8_t* __restrict__ out, int64_t ldo, int64_t rows, int64_t u, int act,
    float* __restrict__ scale) {
  detail::pdl_enter();  // before any global access (common/pdl.cuh)
  __shared__ float partial[32];
  extern __shared__ uint4 staged[];  // kShared: [V][2][blockDim.x]; kSharedNext: two of those
  const int64_t chunks = u / 8;
  const int tid = threadIdx.x, nt = blockDim.x;
  const bool on_chip = chunks <= int64_t(nt) * V;
  // Starts the copies of this thread's chunks of row r into its slots of `set`.
  auto stage = [&](int64_t r, uint4* set) {
    const T* row = in + r * ldi;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int64_t ch = tid + int64_t(i) * nt;
      if (ch < chunks) {
        const uint4 *a, *b;
        gate_up_addresses<T, kInterleaved>(row, u, ch * 8, a, b);
        // Interleaved, a chunk's 32 bytes are one sector copied in two 16-byte halves: through L1 the
        // second half finds the sector the first fetched; L2-only copies (.cg) fetch it twice. U = 14336
        // / 28672, 8192 rows: 67 -> 96 / 67 -> 88 % of copy; copying coalesced pieces into other threads'
        // slots instead (a barrier per row) measured 60-66 % (H100; docs/swiglu.md#tuning).
        if constexpr (kInterleaved) {
          detail::cp_async16_ca(&set[(2 * i) * nt + tid], a);
          detail::cp_async16_ca(&set[(2 * i + 1) * nt + tid], b);
        } else {
          detail::cp_async16(&set[(2 * i) * nt + tid], a);
          detail::cp_async16(&set[(2 * i + 1) * nt + tid], b);
        }
      }
    }
    detail::cp_async_commit();
  };
  if constexpr (kStage == SwigluRowStage::kSharedNext)
    if (on_chip && blockIdx.x < rows) stage(blockIdx.x, staged);
  int par = 0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x, par ^= 1) {
    const T* row = in + r * ldi;
    uint8_t* orow = out + r * ldo;
    if (!on_chip) {
      float amax = 0.0f;
      for (int64_t ch = tid; ch < chunks; ch += nt) {
        float v[8];
        chunk_values<T, kInterleaved>(row, u, ch * 8, act, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) amax = fmaxf(amax, finite_abs(v[j]));
      }
      const float inv =
          fp8_write_dynamic_scale(detail::block_reduce<detail::MaxOp>(amax, partial), scale + r, tid == 0);
      for (int64_t ch = tid; ch < chunks; ch += nt) {
        float v[8];
        chunk_values<T, kInterleaved>(row, u, ch * 8, act, v);
        store_fp8x8(orow + ch * 8, v, inv);
      }
    } else if constexpr (kStage == SwigluRowStage::kRegisters) {
      float v[V][8];
      const float amax = row_values_in_registers<T, kInterleaved, V>(row, u, 0, chunks, act, v);
      const float inv =
          fp8_write_dynamic_scale(detail::block_reduce<detail::MaxOp>(amax, partial), scale + r, tid == 0);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int64_t ch = tid + int64_t(i) * nt;
        if (ch < chunks) store_fp8x8(orow + ch * 8, v[i], inv);
      }
    } else {
      uint4* set = staged + (kStage == SwigluRowStage::kSharedNext ? par * (2 * V * nt) : 0);
      if constexpr (kStage == SwigluRowStage::kShared) stage(r, set);
      detail::cp_async_wait_all();  // this thread's copies of row r (the only group in flight)
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (tid + int64_t(i) * nt < chunks) {
          uint4* slot0 = &set[(2 * i) * nt + tid];
          uint4* slot1 = &set[(2 * i + 1) * nt + tid];
          const uint4 raw[2] = {*slot0, *slot1};
          float g[8], up[8], v[8];
          unpack_gate_up<T, kInterleaved>(raw, g, up);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            v[j] = gated_act_fast(act, g[j], up[j]);
            amax = fmaxf(amax, finite_abs(v[j]));
          }
          *reinterpret_cast<float4*>(slot0) = make_float4(v[0], v[1], v[2], v[3]);
          *reinterpret_cast<float4*>(slot1) = make_float4(v[4], v[5], v[6], v[7]);
        }
      // The other slot set was last read by this thread's stores of the previous row: the next
      // row's copies can start now and overlap the reduction and the stores below.
      if constexpr (kStage == SwigluRowStage::kSharedNext)
        if (r + gridDim.x < rows) stage(r + gridDim.x, staged + (par ^ 1) * (2 * V * nt));
      const float inv =
          fp8_write_dynamic_scale(detail::block_reduce<detail::MaxOp>(amax, partial), scale + r, tid == 0);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int64_t ch = tid + int64_t(i) * nt;
        if (ch < chunks) {
          const float4 a = *reinterpret_cast<const float4*>(&set[(2 * i) * nt + tid]);
          const float4 b = *reinterpret_cast<const float4*>(&set[(2 * i + 1) * nt + tid]);
          const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
          store_fp8x8(orow + ch * 8, v, inv);
        }
      }
    }
  }
}

// FP8 with a dynamic per-row scale, the row split over a cluster of C CTAs (sm_90; the rules
// kClusterTwo / Four / Eight, config.h): CTA rank k holds chunks [k·S, (k+1)·S) of the row
// (S = ceil(chunks / C), the last slice shorter) as fp32 values in registers, V per thread
// (kRegisters' shape on a slice). Each warp's max |v| is pushed into every CTA's shared memory and,
// after one cluster barrier, combined there (common/cluster.cuh: the same bits in every CTA, so one
// scale per row). All CTAs of a cluster walk the same rows (grid-stride by clusters), so the
// barriers match. Pushing the partials (rather than each thread pulling its peers') saves a barrier
// a row (docs/swiglu.md#tuning).
// Compiled into every build; below sm_90 the body is a trap and the launcher never selects it.
template <class T, bool kInterleaved, int V>
__global__ void __launch_bounds__(kRowMaxThreads) swiglu_fp8_row_cluster_kernel(
    const T* __restrict__ in, int64_t ldi, uint8_t* __restrict__ out, int64_t ldo, int64_t rows, int64_t u, int act,
    float* __restrict__ scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  detail::cluster_start_arrive();  // peers must have started before a push reaches them (cluster.cuh)
  detail::pdl_enter();             // before any global access (common/pdl.cuh)
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  __shared__ detail::ClusterWarpPartials<1, detail::kSwigluClusterMaxSize> part;
  const int C = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t chunks = u / 8;
  const int64_t slice = (chunks + C - 1) / C;
  const int64_t first = rank * slice;
  const int64_t len = max(int64_t(0), min(slice, chunks - first));
  const int tid = threadIdx.x, nt = blockDim.x;
  bool started = false;
  int par = 0;
  for (int64_t r = blockIdx.x / C; r < rows; r += gridDim.x / C, par ^= 1) {
    const T* row = in + r * ldi;
    uint8_t* orow = out + r * ldo;
    float v[V][8];
    const float amax[1] = {detail::warp_reduce<detail::MaxOp>(
        row_values_in_registers<T, kInterleaved, V>(row, u, first, len, act, v))};
    if (!started) detail::cluster_start_wait();
    started = true;
    detail::cluster_push(part, par, rank, C, amax);
    detail::cluster_arrive();
    detail::cluster_wait();
    const float inv = fp8_write_dynamic_scale(detail::cluster_combine<detail::MaxOp>(part, par, C, 0), scale + r,
                                              rank == 0 && tid == 0);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int64_t c = tid + int64_t(i) * nt;
      if (c < len) store_fp8x8(orow + (first + c) * 8, v[i], inv);
    }
  }
  if (!started) detail::cluster_start_wait();  // (a cluster past the rows: never launched so)
#else
  // Never launched below sm_90 (the launcher checks the architecture of the loaded code).
  __trap();
#endif
}

}  // namespace blockfuse::swiglu_detail
