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

// A register fragment converted element-wise (fp32 -> bf16/fp16, packed conversions), same layout.
template <class To, class Engine, class Layout>
__device__ auto convert_fragment(Tensor<Engine, Layout> const& t) {
  using From = typename Engine::value_type;
  constexpr int N = decltype(size(t))::value;
  Tensor out = make_tensor<To>(t.layout());
  cutlass::NumericArrayConverter<To, From, N> op;
  *reinterpret_cast<cutlass::Array<To, N>*>(out.data()) = op(*reinterpret_cast<const cutlass::Array<From, N>*>(t.data()));
  return out;
}

// 2^x by the MUFU unit (flush-to-zero): the softmax's exponentials, the scale folded into the FFMA
// that produces x.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
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
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      float m = kFirst ? -INFINITY : row_max[mi];
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(s); ++ni) m = fmaxf(m, s(mi, ni));
      m = quad_max(m);
      // A row with every score −inf so far: subtract 0, not −inf (exp2 would give NaN).
      const float m_scaled = m == -INFINITY ? 0.0f : m * scale_log2;
      if (!kFirst) {
        // Nothing accumulated yet (every earlier score −inf): the factor is 0, not exp2(0 − m).
        const float r = row_max[mi] == -INFINITY ? 0.0f : fast_exp2(row_max[mi] * scale_log2 - m_scaled);
        row_sum[mi] *= r;
        CUTE_UNROLL
        for (int ni = 0; ni < size<1>(o); ++ni) o(mi, ni) *= r;
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
