// Internal: one 8-column chunk of gate and up values from a row of the [M, 2U] input, as fp32 —
// 16-byte vector loads in either layout. Shared by the bf16/fp16 and FP8-output kernels.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "common/vec.cuh"

namespace blockfuse {

// The two 16-byte vectors holding columns c..c+7 (c % 8 == 0) of gate and up of `row`, a row of a
// [*, 2U] matrix:
//   stacked:     v[0] = gate[c..c+8) = row[c..c+8),  v[1] = up = row[U+c..U+c+8)
//   interleaved: v[0..1] = row[2c..2c+16) = up_c, gate_c, up_c+1, gate_c+1, ...
// Split from the unpacking so a kernel can issue all of a thread's loads before any math.
template <class T, bool kInterleaved>
__device__ __forceinline__ void load_gate_up_raw(const T* __restrict__ row, int64_t u, int64_t c, uint4 (&v)[2]) {
  if constexpr (kInterleaved) {
    v[0] = *reinterpret_cast<const uint4*>(row + 2 * c);
    v[1] = *reinterpret_cast<const uint4*>(row + 2 * c + 8);
  } else {
    v[0] = *reinterpret_cast<const uint4*>(row + c);
    v[1] = *reinterpret_cast<const uint4*>(row + u + c);
  }
}

// The addresses of those two vectors (for asynchronous copies).
template <class T, bool kInterleaved>
__device__ __forceinline__ void gate_up_addresses(const T* __restrict__ row, int64_t u, int64_t c, const uint4*& a,
                                                  const uint4*& b) {
  if constexpr (kInterleaved) {
    a = reinterpret_cast<const uint4*>(row + 2 * c);
    b = reinterpret_cast<const uint4*>(row + 2 * c + 8);
  } else {
    a = reinterpret_cast<const uint4*>(row + c);
    b = reinterpret_cast<const uint4*>(row + u + c);
  }
}

template <class T, bool kInterleaved>
__device__ __forceinline__ void unpack_gate_up(const uint4 (&v)[2], float (&g)[8], float (&up)[8]) {
  if constexpr (kInterleaved) {
    float e[16];
    detail::Vec8<T>::unpack(v[0], e);
    detail::Vec8<T>::unpack(v[1], e + 8);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      up[i] = e[2 * i];
      g[i] = e[2 * i + 1];
    }
  } else {
    detail::Vec8<T>::unpack(v[0], g);
    detail::Vec8<T>::unpack(v[1], up);
  }
}

template <class T, bool kInterleaved>
__device__ __forceinline__ void load_gate_up_chunk(const T* __restrict__ row, int64_t u, int64_t c,
                                                   float (&g)[8], float (&up)[8]) {
  uint4 v[2];
  load_gate_up_raw<T, kInterleaved>(row, u, c, v);
  unpack_gate_up<T, kInterleaved>(v, g, up);
}

}  // namespace blockfuse
