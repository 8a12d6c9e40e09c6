// Internal: the decode loop that decode_gemm (decode_gemm_sm80.cuh) and the fused MLP's gate/up
// phase (fused_mlp/gated_up_mainloop_sm80.cuh) share, and its primitives (sm80+: mma.sync).
//
// Transposed product: yᵀ = W · xᵀ with W rows as the m16 side of m16n8k16 (A) and the token rows
// the n8 side (B). Per 32-k chunk, lane (g = lane / 4, t = lane % 4) loads 16 bytes = 8 k-elements
// [8t, 8t + 8) of W rows g and g + 8 and of x rows g + 8j straight into registers: W with
// ld.global.nc.L1::no_allocate (read once, keep L1 for x), x with the read-only path. A
// permutation of k inside the 32-chunk changes nothing as long as A and B use the same one, so a
// 16-byte load is exactly one lane's fragment of two MMA steps (.x .y step 0, .z .w step 1). U
// chunks are loaded before any MMA: 2·U 16-byte W loads in flight per lane.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace blockfuse::decode {

template <class T>
struct MmaType;
// d += a · b, m16n8k16 with fp32 accumulation, for T's PTX type name (bf16 or f16).
#define BF_DECODE_MMA_M16N8K16(TYPE, NAME)                                                            \
  template <>                                                                                        \
  struct MmaType<TYPE> {                                                                             \
    __device__ __forceinline__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,   \
                                               uint32_t b1) {                                        \
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." NAME "." NAME                            \
                   ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                      \
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                  \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                  \
    }                                                                                                \
  };
BF_DECODE_MMA_M16N8K16(__nv_bfloat16, "bf16")
BF_DECODE_MMA_M16N8K16(__half, "f16")
#undef BF_DECODE_MMA_M16N8K16

// Predicated 16-byte loads (zeros where the guard is false), CUTLASS-style: the predicate lives
// inside the asm, so the compiler emits straight-line predicated loads, not a branch around each.
// W: streamed once — no L1 allocation, and L2::256B asks for the whole 256-byte piece (a warp
// reads each row's next chunks right after). x: the read-only path, cached in L1 (every warp of
// the block re-reads the same x slice).
#define BF_DECODE_LOAD16(NAME, LD)                                                                   \
  __device__ __forceinline__ uint4 NAME(const void* p, bool guard) {                                 \
    uint4 v;                                                                                         \
    asm volatile(                                                                                    \
        "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"                                                 \
        " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"                        \
        " @p " LD " {%0,%1,%2,%3}, [%4];\n}\n"                                                         \
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                                                 \
        : "l"(p), "r"(int(guard)));                                                                  \
    return v;                                                                                        \
  }
BF_DECODE_LOAD16(load_w, "ld.global.nc.L1::no_allocate.L2::256B.v4.u32")
BF_DECODE_LOAD16(load_x, "ld.global.nc.v4.u32")
#undef BF_DECODE_LOAD16

template <class T>
__device__ __forceinline__ void store_y(T* y, float v) { *y = static_cast<T>(v); }
template <>
__device__ __forceinline__ void store_y<__nv_bfloat16>(__nv_bfloat16* y, float v) { *y = __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ void store_y<__half>(__half* y, float v) { *y = __float2half_rn(v); }

// Lane (g, t)'s x rows 8j + g of the NT 8-row token tiles, at column 8t (rows past M read row 0
// and are guarded off: x_ok).
template <class T, int NT>
__device__ __forceinline__ void token_rows(int64_t m, const void* x, int64_t ldx, int g, int t, const T* (&xr)[NT],
                                           bool (&x_ok)[NT]) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    x_ok[j] = 8 * j + g < m;
    xr[j] = static_cast<const T*>(x) + (x_ok[j] ? 8 * j + g : 0) * ldx + 8 * t;
  }
}

// The decode loop: acc[j] += (W rows w0 = g, w1 = g + 8) · (x rows xr[j]) over k in [k_begin, k_end),
// U 32-k chunks a step, every chunk's loads before the step's MMAs. K % 8 == 0, so a lane's 8
// elements are all in the range or all out (then zeros in W and x both: 0 · 0, never 0 · Inf, fills
// the gap). w_ok0 / w_ok1 guard the W rows (a row past N reads zeros).
template <class T, int NT, int U>
__device__ __forceinline__ void decode_mainloop(float (&acc)[NT][4], const T* w0, const T* w1, bool w_ok0, bool w_ok1,
                                                const T* const (&xr)[NT], const bool (&x_ok)[NT], int64_t k_begin,
                                                int64_t k_end, int t) {
  constexpr int kChunk = 32;  // k per 16-byte load of 4 lanes (two k16 MMA steps)
  for (int64_t kb = k_begin; kb < k_end; kb += U * kChunk) {
    uint4 a0[U], a1[U], b[U][NT];
#pragma unroll
    for (int c = 0; c < U; ++c) {
      const int64_t kk = kb + c * kChunk;
      const bool in = kk + 8 * t < k_end;
      a0[c] = load_w(w0 + kk, in && w_ok0);
      a1[c] = load_w(w1 + kk, in && w_ok1);
    }
#pragma unroll
    for (int c = 0; c < U; ++c) {
      const int64_t kk = kb + c * kChunk;
      const bool in = kk + 8 * t < k_end;
#pragma unroll
      for (int j = 0; j < NT; ++j) b[c][j] = load_x(xr[j] + kk, in && x_ok[j]);
    }
#pragma unroll
    for (int c = 0; c < U; ++c) {
      const uint32_t f0[4] = {a0[c].x, a1[c].x, a0[c].y, a1[c].y};  // k16 step 0
      const uint32_t f1[4] = {a0[c].z, a1[c].z, a0[c].w, a1[c].w};  // k16 step 1
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        MmaType<T>::mma(acc[j], f0, b[c][j].x, b[c][j].y);
        MmaType<T>::mma(acc[j], f1, b[c][j].z, b[c][j].w);
      }
    }
  }
}

}  // namespace blockfuse::decode
