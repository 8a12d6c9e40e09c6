// Internal: the per-row steps the add_rmsnorm kernels share (add_rmsnorm_sm80.cuh: one block per
// row; add_rmsnorm_sm90.cuh: a cluster of CTAs per row). A row is handled in 16-byte chunks of 8
// elements; thread t of a block of nt threads holds chunks t + i·nt (i < V) of its slice of `len`
// chunks, as packed dtype bits: the norm is computed from the rounded residual_out, so the rounded
// values are all that needs keeping (4 registers per chunk).
#pragma once

#include <cstdint>

#include "add_rmsnorm/params.h"
#include "common/fp8_device.cuh"
#include "common/vec.cuh"

namespace blockfuse::add_rmsnorm_detail {

using detail::Vec8;
using detail::zero4;

// Row `row` of a [rows, ld] matrix of T, as 16-byte chunks.
template <class T>
__device__ __forceinline__ const uint4* row_chunks(const void* base, int64_t row, int64_t ld) {
  return reinterpret_cast<const uint4*>(static_cast<const T*>(base) + row * ld);
}
template <class T>
__device__ __forceinline__ uint4* row_chunks(void* base, int64_t row, int64_t ld) {
  return reinterpret_cast<uint4*>(static_cast<T*>(base) + row * ld);
}

// r = round(x + residual) for one chunk (x alone when the residual is absent).
template <class T>
__device__ __forceinline__ uint4 add_chunk(const uint4& xv, const uint4& rv, bool has_res) {
  if (!has_res) return xv;
  float a[8], b[8];
  Vec8<T>::unpack(xv, a);
  Vec8<T>::unpack(rv, b);
#pragma unroll
  for (int j = 0; j < 8; ++j) a[j] += b[j];
  return Vec8<T>::pack(a);
}

__device__ __forceinline__ float sumsq8(const float f[8]) {
  float s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s = fmaf(f[j], f[j], s);
  return s;
}

// The row prologue: this thread's chunks of x and of the residual (xr, rr: the slice's first
// chunk; rr nullptr when absent), all loads issued before any math so every chunk of the row is in
// flight at once (streamed: read once). r[i] = round(x + residual); chunks past `len` are 0 and
// add nothing. Returns the thread's partial sum of squares of r.
template <class T, int V>
__device__ __forceinline__ float load_row_sumsq(const uint4* xr, const uint4* rr, int len, uint4 (&r)[V]) {
  const int tid = threadIdx.x, nt = blockDim.x;
  uint4 b[V];
#pragma unroll
  for (int i = 0; i < V; ++i) r[i] = tid + i * nt < len ? __ldcs(xr + tid + i * nt) : zero4();
  if (rr) {
#pragma unroll
    for (int i = 0; i < V; ++i) b[i] = tid + i * nt < len ? __ldcs(rr + tid + i * nt) : zero4();
  }
  float ss = 0;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    r[i] = add_chunk<T>(r[i], b[i], rr != nullptr);
    float f[8];
    Vec8<T>::unpack(r[i], f);
    ss += sumsq8(f);
  }
  return ss;
}

// kStream (here and below): the output stores are st.global.cs, evict first (config.h:
// add_rmsnorm_streaming_stores). A compile-time choice whose plain branch is the code as it was: a
// runtime flag, and even plain stores written through a shared helper, changed the code of the 1-32-row
// kernels and measured up to 0.6 µs slower there (docs/add_rmsnorm.md#tuning).

// Writes this thread's chunks of r (those below `len`) to dst (the slice's first chunk).
template <int V, bool kStream = false>
__device__ __forceinline__ void store_chunks(uint4* dst, int len, const uint4 (&r)[V]) {
  const int tid = threadIdx.x, nt = blockDim.x;
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (tid + i * nt < len) {
      if constexpr (kStream)
        __stcs(dst + tid + i * nt, r[i]);
      else
        dst[tid + i * nt] = r[i];
    }
}

// v = r · inv · g for one chunk; g = w or 1 + w (w: the weight chunk, already in registers).
template <class T>
__device__ __forceinline__ void norm_chunk(const uint4& r, const uint4& w, float inv, bool gemma, float v[8]) {
  float rf[8], g[8];
  Vec8<T>::unpack(r, rf);
  Vec8<T>::unpack(w, g);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = rf[j] * inv * (gemma ? 1.0f + g[j] : g[j]);
}

__device__ __forceinline__ float finite_abs_max8(const float v[8]) {
  float m = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) m = fmaxf(m, finite_abs(v[j]));
  return m;
}

// Stores chunk c (elements 8c..8c+7) of the output row; fp8: q = sat(v · inv_s) with inv_s = 1 / scale
// (common/fp8_device.cuh: non-finite v -> NaN, the quantisation every blockfuse FP8 output uses).
template <class T, AddRmsNormOutput kOut, bool kStream = false>
__device__ __forceinline__ void store_out(const AddRmsNormParams& p, int64_t row, int c, const float v[8], float inv_s) {
  if constexpr (kOut == AddRmsNormOutput::kDtype && kStream) {
    __stcs(reinterpret_cast<uint4*>(static_cast<T*>(p.out) + row * p.ldo) + c, Vec8<T>::pack(v));
  } else if constexpr (kOut == AddRmsNormOutput::kDtype) {
    reinterpret_cast<uint4*>(static_cast<T*>(p.out) + row * p.ldo)[c] = Vec8<T>::pack(v);
  } else if constexpr (kStream) {
    store_fp8x8_streaming(static_cast<uint8_t*>(p.out) + row * p.ldo + 8 * int64_t(c),
                          *reinterpret_cast<const float(*)[8]>(v), inv_s);
  } else {
    store_fp8x8(static_cast<uint8_t*>(p.out) + row * p.ldo + 8 * int64_t(c), *reinterpret_cast<const float(*)[8]>(v), inv_s);
  }
}

// The row epilogue's two passes over this thread's chunks (those below `len`), with the weight
// chunk of chunk i from weight(i):
//   row_amax: max |v| over the finite normalised values (the dynamic FP8 scale's amax);
//   store_row: the normalised values as output chunks first + tid + i·nt.
template <class T, int V, class Weight>
__device__ __forceinline__ float row_amax(const uint4 (&r)[V], int len, Weight weight, float inv, bool gemma) {
  const int tid = threadIdx.x, nt = blockDim.x;
  float m = 0;
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (tid + i * nt < len) {
      float v[8];
      norm_chunk<T>(r[i], weight(i), inv, gemma, v);
      m = fmaxf(m, finite_abs_max8(v));
    }
  return m;
}
// The dynamic FP8 scale's amax from one reduction instead of two. Every v = (r · inv) · g shares
// the row's inv > 0, so max |v| = inv · max |r · g| up to the rounding of the products (an ulp or
// two of the scale, far below an e4m3 step): each thread's partial max |r · g| (finite products
// only) can travel with its partial sum of squares, before inv is known.
// (row_amax with inv = 1: the multiplication by 1 is exact, so the bits are those of max |r · g|.)
template <class T, int V, class Weight>
__device__ __forceinline__ float row_amax_unscaled(const uint4 (&r)[V], int len, Weight weight, bool gemma) {
  return row_amax<T, V>(r, len, weight, 1.0f, gemma);
}
// inv · (the row's max |r · g|) as the amax of the finite v: NaN (inv NaN: a NaN row, every v NaN)
// gives 0 like the finite-only max over v; an overflow is clamped to the largest finite float.
__device__ __forceinline__ float fold_amax(float inv, float max_rg) {
  const float a = inv * max_rg;
  return a == a ? fminf(a, 3.402823466e38f) : 0.0f;
}

template <class T, AddRmsNormOutput kOut, int V, bool kStream = false, class Weight>
__device__ __forceinline__ void store_row(const AddRmsNormParams& p, int64_t row, int first, const uint4 (&r)[V], int len,
                                          Weight weight, float inv, float inv_s) {
  const int tid = threadIdx.x, nt = blockDim.x;
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (tid + i * nt < len) {
      float v[8];
      norm_chunk<T>(r[i], weight(i), inv, p.gemma, v);
      store_out<T, kOut, kStream>(p, row, first + tid + i * nt, v, inv_s);
    }
}

}  // namespace blockfuse::add_rmsnorm_detail
