// Internal: the score modifiers of the attention kernel — the visibility mask (causal, sliding
// window, sequence tails) and the logit soft-cap — as small policy objects. The kernel calls them
// at one place, between the QKᵀ GEMM and the online softmax (attention_sm80.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cute/tensor.hpp>

namespace blockfuse::attn {

// Key j is visible to query row i iff lo(i) <= j < hi(i) with
//   lo(i) = max(0, i + shift − left),  hi(i) = min(Sk, i + shift + right + 1),  shift = Sk − Sq.
// left/right are clamped so that "unbounded" (stored as a large value) cannot overflow int:
// left >= Sk and right >= Sq already make the bound vacuous for every row i < Sq.
struct VisibilityMask {
  int seqlen_q, seqlen_k, shift, left, right;

  __device__ VisibilityMask(int sq, int sk, int window_left, int window_right)
      : seqlen_q(sq), seqlen_k(sk), shift(sk - sq), left(min(window_left, sk)), right(min(window_right, sq)) {}

  // The key blocks [n_min, n_max) that hold a visible key for some row of query block m_block.
  template <int kBlockM, int kBlockN>
  __device__ void n_block_range(int m_block, int& n_min, int& n_max) const {
    const int row_lo = m_block * kBlockM;
    const int row_hi = min(row_lo + kBlockM, seqlen_q) - 1;
    const int col_lo = max(0, row_lo + shift - left);
    const int col_hi = min(seqlen_k, row_hi + shift + right + 1);  // exclusive
    n_min = col_lo / kBlockN;
    n_max = col_hi <= col_lo ? n_min : (col_hi + kBlockN - 1) / kBlockN;
  }

  // Does block (m_block, n_block) contain an invisible (row, key) pair of a real row? Blocks that
  // do not skip the per-element mask (the interior of the band, i.e. almost every block).
  template <int kBlockM, int kBlockN>
  __device__ bool block_needs_mask(int m_block, int n_block) const {
    const int row_lo = m_block * kBlockM;
    const int row_hi = min(row_lo + kBlockM, seqlen_q) - 1;
    const int col_lo = n_block * kBlockN;
    const int col_hi = col_lo + kBlockN - 1;
    return col_hi >= seqlen_k || col_hi > row_lo + shift + right || col_lo < row_hi + shift - left;
  }

  // Sets invisible scores to −inf. `s` is the accumulator in (row, col) view: ((2, MMA_M), (2, MMA_N))
  // of the m16n8 C fragment; row0/col0: the global row/key of this thread's first element;
  // row_stride: rows between consecutive MMA_M tiles (16 · warps).
  template <class Tensor>
  __device__ void apply(Tensor& s, int row0, int col0, int row_stride) const {
    using namespace cute;
    CUTE_UNROLL
    for (int mi = 0; mi < size<0, 1>(s); ++mi) {
      CUTE_UNROLL
      for (int i = 0; i < size<0, 0>(s); ++i) {
        const int row = row0 + mi * row_stride + i * 8;
        const int lo = max(0, row + shift - left);
        const int hi = min(seqlen_k, row + shift + right + 1);
        CUTE_UNROLL
        for (int nj = 0; nj < size<1, 1>(s); ++nj) {
          CUTE_UNROLL
          for (int j = 0; j < size<1, 0>(s); ++j) {
            const int col = col0 + nj * 8 + j;
            if (col < lo || col >= hi) s(make_coord(i, mi), make_coord(j, nj)) = -INFINITY;
          }
        }
      }
    }
  }
};

// Gemma-2's logit soft-cap: s -> cap · tanh(scale · s / cap). The kernel folds cap into the exp2
// scale (scale_log2 = cap · log2 e), so here only tanh(mul · s) with mul = scale / cap is applied.
struct SoftCap {
  float mul;  // 0: off
  __device__ bool enabled() const { return mul != 0.0f; }
  template <class Tensor>
  __device__ void apply(Tensor& s) const {
    CUTE_UNROLL
    for (int i = 0; i < cute::size(s); ++i) {
      float t;
      asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(s(i) * mul));
      s(i) = t;
    }
  }
};

}  // namespace blockfuse::attn
