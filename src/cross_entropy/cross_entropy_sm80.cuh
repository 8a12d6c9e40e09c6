// Internal: the cross-entropy kernel (blockfuse/cross_entropy.h; sm_80+, nothing arch-specific);
// cross_entropy.cu launches it.
// One CTA a row. Pass 1: each thread an online (max, Σ exp) over its 16-byte chunks, merged over the
// block; the label's logit read by thread 0 before any write. Pass 2, when a gradient is wanted:
// exp(x − lse) · s, minus s at the label, written over the row (the row is re-read, mostly from
// L2 for the rows in flight). exp via exp2 of log2(e)-scaled values.
#pragma once

#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/vec.cuh"

namespace blockfuse::cross_entropy_detail {

using detail::Vec8;

struct Params {
  void* logits;
  int64_t ld;
  int64_t rows;
  int64_t vocab;
  const int64_t* labels;
  int64_t ignore_index;
  float* loss;
  const float* grad_scale;  // nullptr: no gradient
};

constexpr float kLog2e = 1.4426950408889634f;

// (m, s) pairs: the max and the Σ 2^(x·log2e − m) of a set; merging two rescales to the larger max.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;  // both empty
  s = s * exp2f(m - mn) + s2 * exp2f(m2 - mn);
  m = mn;
}

template <class T>
__global__ void __launch_bounds__(512) cross_entropy_kernel(const Params p) {
  __shared__ float red_m[32], red_s[32];
  __shared__ float label_logit;
  const int64_t row = blockIdx.x;
  T* const x = static_cast<T*>(p.logits) + row * p.ld;
  const int64_t label = p.labels[row];
  const bool ignored = label == p.ignore_index;
  const bool bad = !ignored && (label < 0 || label >= p.vocab);
  if (threadIdx.x == 0) label_logit = ignored || bad ? 0.f : static_cast<float>(x[label]);
  const int64_t chunks = p.vocab / 8;
  const uint4* const xv = reinterpret_cast<const uint4*>(x);

  // Pass 1 (log2 units: m is a max of x·log2e).
  float m = -INFINITY, s = 0.f;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    float v[8];
    Vec8<T>::unpack(xv[c], v);
    float cm = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) cm = fmaxf(cm, v[j] * kLog2e);
    if (cm == -INFINITY) continue;  // every logit of the chunk -inf: nothing to add (and no inf − inf)
    float cs = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) cs += exp2f(v[j] * kLog2e - cm);
    merge(m, s, cm, cs);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  __syncthreads();  // also publishes label_logit, read before any thread writes the row below
  m = lane < warps ? red_m[lane] : -INFINITY;
  s = lane < warps ? red_s[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const float lse2 = m + log2f(s);  // log2 of Σ e^x
  if (threadIdx.x == 0)
    p.loss[row] = ignored ? 0.f : bad ? NAN : lse2 / kLog2e - label_logit;
  if (p.grad_scale == nullptr) return;

  // Pass 2: the gradient over the row.
  const float scale = ignored ? 0.f : bad ? NAN : *p.grad_scale;
  uint4* const xw = reinterpret_cast<uint4*>(x);
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    float v[8];
    Vec8<T>::unpack(xw[c], v);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float g = exp2f(v[j] * kLog2e - lse2) * scale;
      if (c * 8 + j == label) g -= scale;
      v[j] = g;
    }
    xw[c] = Vec8<T>::pack(v);
  }
}

}  // namespace blockfuse::cross_entropy_detail
