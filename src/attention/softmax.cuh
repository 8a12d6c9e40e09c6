// Internal: the register-level softmax helpers of the attention kernels, shared by the sm80
// (mma.sync) and sm90a (wgmma) forward kernels. Both accumulator layouts spread one query row over
// the 4 lanes of a quad (two rows per thread per 16-row slice: r and r + 8), so the row reductions
// and the online-softmax update are the same code; each kernel passes its own (row, col) view.
#pragma once

#include <cmath>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>

namespace blockfuse::attn {

using namespace cute;

// A register fragment converted element-wise into `out` (fp32 -> bf16/fp16, packed conversions;
// the same number of elements, in the same order).
template <class Engine, class Layout, class OutEngine, class OutLayout>
__device__ void convert_fragment_into(Tensor<Engine, Layout> const& t, Tensor<OutEngine, OutLayout>& out) {
  using From = typename Engine::value_type;
  using To = typename OutEngine::value_type;
  constexpr int N = decltype(size(t))::value;
  static_assert(decltype(size(out))::value == N, "same element count");
  cutlass::NumericArrayConverter<To, From, N> op;
  *reinterpret_cast<cutlass::Array<To, N>*>(out.data()) = op(*reinterpret_cast<const cutlass::Array<From, N>*>(t.data()));
}

// The same into a new fragment of t's layout.
template <class To, class Engine, class Layout>
__device__ auto convert_fragment(Tensor<Engine, Layout> const& t) {
  Tensor out = make_tensor<To>(t.layout());
  convert_fragment_into(t, out);
  return out;
}

// 2^x by the MUFU unit (flush-to-zero): the softmax's exponentials, the scale folded into the FFMA
// that produces x.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1/s without IEEE division (whose slow path is a call, which makes ptxas serialise the sm90a
// kernel's wgmmas): the approximate reciprocal and one Newton step; NaN stays NaN.
__device__ __forceinline__ float reciprocal_fast(float s) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
  return fmaf(r, fmaf(-s, r, 1.0f), r);
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 2);
  return x + __shfl_xor_sync(0xffffffff, x, 1);
}

// Online softmax state of this thread's rows (2 per MMA_M tile): running max (in score units)
// and running sum of exp2(s·scale_log2 − max·scale_log2) over this thread's columns.
template <int kRows>
struct OnlineSoftmax {
  float row_max[kRows];
  float row_sum[kRows];

  // Folds the new score block (rowcol view, modified in place into P) into the state; rescales O.
  template <bool kFirst, class S, class O>
  __device__ void update(S& s, O& o, float scale_log2) {
    float factor[kRows];
    update_scores<kFirst>(s, scale_log2, factor);
    if (!kFirst) rescale(o, factor);
  }

  // O *= factor, row by row (rowcol view).
  template <class O>
  __device__ static void rescale(O& o, const float (&factor)[kRows]) {
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(o); ++ni) o(mi, ni) *= factor[mi];
    }
  }

  // The end of the rows: O /= row sum, lse = the natural-log LSE. A row that saw no key gets O = 0
  // and LSE −inf; NaN propagates. kNoCalls: the MUFU reciprocal and logarithm instead of the IEEE
  // division and logf (the sm90a kernel, where a call would serialise its wgmmas).
  template <bool kNoCalls, class O>
  __device__ void finalize(O& o, float scale_lse, float (&lse)[kRows]) const {
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const float sum = quad_sum(row_sum[mi]);
      const float inv = sum == 0.0f ? 0.0f : (kNoCalls ? reciprocal_fast(sum) : 1.0f / sum);
      lse[mi] = sum == 0.0f ? -INFINITY : row_max[mi] * scale_lse + (kNoCalls ? __logf(sum) : logf(sum));
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(o); ++ni) o(mi, ni) *= inv;
    }
  }

  // update() without touching O: the factor O must be multiplied by before this block's P·V is
  // added goes to `factor` (1 for the first block). The sm90a kernel applies it later, while the
  // previous P·V no longer runs.
  template <bool kFirst, class S>
  __device__ void update_scores(S& s, float scale_log2, float (&factor)[kRows]) {
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      float m = kFirst ? -INFINITY : row_max[mi];
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(s); ++ni) m = fmaxf(m, s(mi, ni));
      m = quad_max(m);
      // A row with every score −inf so far: subtract 0, not −inf (exp2 would give NaN).
      const float m_scaled = m == -INFINITY ? 0.0f : m * scale_log2;
      factor[mi] = 1.0f;
      if (!kFirst) {
        // Nothing accumulated yet (every earlier score −inf): the factor is 0, not exp2(0 − m).
        const float r = row_max[mi] == -INFINITY ? 0.0f : fast_exp2(row_max[mi] * scale_log2 - m_scaled);
        row_sum[mi] *= r;
        factor[mi] = r;
      }
      row_max[mi] = m;
      float sum = kFirst ? 0.0f : row_sum[mi];
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(s); ++ni) {
        s(mi, ni) = fast_exp2(s(mi, ni) * scale_log2 - m_scaled);
        sum += s(mi, ni);
      }
      row_sum[mi] = sum;
    }
  }
};

}  // namespace blockfuse::attn
