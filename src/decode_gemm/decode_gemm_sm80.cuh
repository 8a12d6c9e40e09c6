// The decode GEMM kernel (sm80+: mma.sync, so one kernel is correct on Ampere, Ada and Hopper).
//
// Transposed product: yᵀ[N, M] = W[N, K] · xᵀ, so W rows are the M = 16 side of
// mma.m16n8k16 (the A operand) and the token rows the n = 8 side (B): M <= 8 wastes nothing, and
// M <= 32 takes NT = 1..4 n8 tiles. A warp owns 16 rows of W (output columns n) and one K slice;
// a block of WARPS warps covers 16·WARPS columns; gridDim.y = split_k slices of K.
//
// Loads. Per 32-k chunk, lane (g = lane / 4, t = lane % 4) loads 16 bytes = 8 k-elements
// [8t, 8t + 8) of W rows g and g + 8 and of x rows g + 8j, straight into registers (no shared
// memory, no ldmatrix): W with ld.global.nc.L1::no_allocate (read once, keep L1 for x), x with the
// read-only path (x is tiny and every warp of the block re-reads the same slice: L1 hits).
// The m16n8k16 fragments want lane (g, t) to hold logical k {2t, 2t+1, 2t+8, 2t+9} of each k16
// step; a permutation of k inside the 32-chunk changes nothing as long as A and B use the same
// one, so physical k 8t + 4h + 2q + i is taken as logical k 2t + 8q + i of k16 step h (h, q, i in
// {0, 1}): the vector's 32-bit words .x .y feed step 0 (a0a1/b0b1 = .x, a4a5/b2b3 = .y) and .z .w
// step 1 — a 16-byte load is exactly one lane's fragment of two MMA steps.
// U chunks are loaded before any MMA (2·U 16-byte W loads in flight per lane: 16 for NT = 1, 8
// for NT = 2, 3 and 6 for NT = 4, where x takes more registers), with 16 resident warps per SM
// (__launch_bounds__: <= 128 registers, no spills).
//
// Split-K. split == 1 writes y from the accumulators. Otherwise each block writes its fp32
// accumulators to its slot of the workspace (coalesced float4 per lane), fences, and counts
// itself in with an atomicAdd on its N tile's counter; the block that arrives last sums the split
// slots in order s = 0..split-1 (a fixed order: deterministic) with L1-bypassing loads, writes y
// and sets the counter back to 0, so the next call (or a graph replay) finds it zeroed.
//
// Gated epilogue (gated_up's decode path). With w the interleaved gate/up matrix (row 2j = up_j,
// 2j + 1 = gate_j), a warp's 16 columns are 8 (up, gate) pairs, and lane g holds column n0 + g: the
// even-g lanes hold up, the lane 4 above (g + 1) the gate of the same pair. One shuffle brings the
// gate over and the even-g lanes write h[m][(n0 + g) / 2] = act(gate) · up from the fp32 sums, so
// the [M, 2U] product is never stored.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/activation.cuh"
#include "common/decode_loop.cuh"  // MmaType, load_w, load_x, store_y, decode_mainloop
#include "decode_gemm/params.h"

namespace blockfuse::decode {

template <class T, int NT, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, 16 / WARPS) decode_gemm_kernel(const DecodeGemmParams p) {
  // 32-k chunks per step: 2·U W loads in flight per lane, as many as 128 registers allow beside
  // NT·U x vectors (U = 4 at NT = 4 spilled).
  constexpr int U = NT == 1 ? 8 : NT == 4 ? 3 : 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t n0 = (int64_t(blockIdx.x) * WARPS + warp) * kWarpN;
  const int64_t k_begin = min(p.k, int64_t(blockIdx.y) * p.slice);
  const int64_t k_end = min(p.k, k_begin + p.slice);

  // Rows past N / M read nothing and contribute zeros; their outputs are never stored.
  const bool w_ok0 = n0 + g < p.n, w_ok1 = n0 + g + 8 < p.n;
  const T* w0 = static_cast<const T*>(p.w) + (w_ok0 ? n0 + g : 0) * p.ldw + 8 * t;
  const T* w1 = static_cast<const T*>(p.w) + (w_ok1 ? n0 + g + 8 : 0) * p.ldw + 8 * t;
  const T* xr[NT];
  bool x_ok[NT];
  token_rows<T, NT>(p.m, p.x, p.ldx, g, t, xr, x_ok);

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  decode_mainloop<T, NT, U>(acc, w0, w1, w_ok0, w_ok1, xr, x_ok, k_begin, k_end, t);

  // acc[j] = {y[8j + 2t][n0 + g], y[8j + 2t + 1][n0 + g], y[8j + 2t][n0 + g + 8], y[8j + 2t + 1][n0 + g + 8]}.
  if (p.split > 1) {
    float4* slot = reinterpret_cast<float4*>(p.partials) +
                   ((int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * WARPS + warp) * NT * 32 + lane;
#pragma unroll
    for (int j = 0; j < NT; ++j) slot[j * 32] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    __threadfence();  // the partials are visible device-wide before the count says so
    __syncthreads();
    __shared__ int is_last;
    if (threadIdx.x == 0) is_last = atomicAdd(p.counters + blockIdx.x, 1) == p.split - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    const float4* first = reinterpret_cast<const float4*>(p.partials) + (int64_t(blockIdx.x) * WARPS + warp) * NT * 32 + lane;
    const int64_t split_stride = int64_t(gridDim.x) * WARPS * NT * 32;
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll 4  // several splits' loads in flight; the adds stay in order s = 0, 1, ...
    for (int s = 0; s < p.split; ++s) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float4 v = __ldcg(first + s * split_stride + j * 32);  // L2: other SMs wrote it
        acc[j][0] += v.x;
        acc[j][1] += v.y;
        acc[j][2] += v.z;
        acc[j][3] += v.w;
      }
    }
    if (threadIdx.x == 0) p.counters[blockIdx.x] = 0;  // every block of this tile has counted
  }

  T* y = static_cast<T*>(p.y);
  if (p.gated) {
    // N is even (2U), so an up column nn < N always has its gate column nn + 1 < N.
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int64_t m = 8 * j + 2 * t;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float gate = __shfl_down_sync(0xffffffffu, acc[j][e], 4);  // lane g + 1's column
        const int64_t mm = m + (e & 1), nn = n0 + g + (e >> 1) * 8;
        if ((g & 1) == 0 && mm < p.m && nn < p.n) store_y<T>(y + mm * p.ldy + nn / 2, gated_act(p.act, gate, acc[j][e]));
      }
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int64_t m = 8 * j + 2 * t;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t mm = m + (e & 1), nn = n0 + g + (e >> 1) * 8;
      if (mm < p.m && nn < p.n) store_y<T>(y + mm * p.ldy + nn, acc[j][e]);
    }
  }
}

}  // namespace blockfuse::decode
