// Internal: one 16-byte vector of 8 bf16/fp16 elements <-> 8 floats, the unit every memory-bound
// kernel moves. Pairs go through the 2-wide intrinsics (one instruction per pair).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace blockfuse::detail {

// The 2-wide type of T and its conversions.
template <class T> struct Pair2;
template <> struct Pair2<__nv_bfloat16> {
  using Type = __nv_bfloat162;
  static __device__ __forceinline__ float2 to_float2(Type v) { return __bfloat1622float2(v); }
  static __device__ __forceinline__ Type from_floats(float a, float b) { return __floats2bfloat162_rn(a, b); }
};
template <> struct Pair2<__half> {
  using Type = __half2;
  static __device__ __forceinline__ float2 to_float2(Type v) { return __half22float2(v); }
  static __device__ __forceinline__ Type from_floats(float a, float b) { return __floats2half2_rn(a, b); }
};

template <class T> struct Vec8 {
  using P = Pair2<T>;
  static __device__ __forceinline__ void unpack(const uint4& v, float f[8]) {
    const auto* p = reinterpret_cast<const typename P::Type*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) { const float2 t = P::to_float2(p[i]); f[2 * i] = t.x; f[2 * i + 1] = t.y; }
  }
  static __device__ __forceinline__ uint4 pack(const float f[8]) {
    uint4 v;
    auto* p = reinterpret_cast<typename P::Type*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = P::from_floats(f[2 * i], f[2 * i + 1]);
    return v;
  }
};

__device__ __forceinline__ uint4 zero4() { return make_uint4(0u, 0u, 0u, 0u); }

}  // namespace blockfuse::detail
