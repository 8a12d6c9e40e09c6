// Internal: the register-level helpers of the sm80 attention kernel's main loop (attention_sm80.cuh):
// the two GEMMs (ldmatrix + mma.sync, the next k-slice's loads issued before the current MMAs) and
// the predicated tile copy for the Q, K and V tails.
#pragma once

#include "attention/traits_sm80.cuh"

namespace blockfuse::attn {

using namespace cute;

// acc += A·B with both operands read from shared memory, the next k-slice's ldmatrix issued
// before the current slice's MMAs.
template <class Acc, class RA, class RB, class SA, class SB, class Mma, class CA, class CB, class TA, class TB>
__device__ void gemm_ss(Acc& acc, RA& rA, RB& rB, SA const& sA, SB const& sB, Mma const& mma,
                        CA const& copy_a, CB const& copy_b, TA const& thr_a, TB const& thr_b) {
  auto rA_v = thr_a.retile_D(rA);
  auto rB_v = thr_b.retile_D(rB);
  copy(copy_a, sA(_, _, _0{}), rA_v(_, _, _0{}));
  copy(copy_b, sB(_, _, _0{}), rB_v(_, _, _0{}));
  CUTE_UNROLL
  for (int i = 0; i < size<2>(rA); ++i) {
    if (i < size<2>(rA) - 1) {
      copy(copy_a, sA(_, _, i + 1), rA_v(_, _, i + 1));
      copy(copy_b, sB(_, _, i + 1), rB_v(_, _, i + 1));
    }
    cute::gemm(mma, rA(_, _, i), rB(_, _, i), acc);
  }
}

// acc += A·B with A in registers (P) and B read from shared memory.
template <class Acc, class RA, class RB, class SB, class Mma, class CB, class TB>
__device__ void gemm_rs(Acc& acc, RA const& rA, RB& rB, SB const& sB, Mma const& mma, CB const& copy_b,
                        TB const& thr_b) {
  auto rB_v = thr_b.retile_D(rB);
  copy(copy_b, sB(_, _, _0{}), rB_v(_, _, _0{}));
  CUTE_UNROLL
  for (int i = 0; i < size<2>(rA); ++i) {
    if (i < size<2>(rA) - 1) copy(copy_b, sB(_, _, i + 1), rB_v(_, _, i + 1));
    cute::gemm(mma, rA(_, _, i), rB(_, _, i), acc);
  }
}

// Copies a [rows, cols] tile partitioned by a tiled copy, rows at or beyond `max_rows` skipped
// (and zero-filled in the destination when kClear): the tails of Q, K and V.
template <bool kClear, class TiledCopy, class S, class D, class C>
__device__ void copy_rows(TiledCopy const& tc, S const& src, D& dst, C const& ident, int max_rows) {
  CUTE_UNROLL
  for (int m = 0; m < size<1>(src); ++m) {
    if (get<0>(ident(0, m, 0)) < max_rows) {
      CUTE_UNROLL
      for (int k = 0; k < size<2>(src); ++k) copy(tc, src(_, m, k), dst(_, m, k));
    } else if (kClear) {
      clear(dst(_, m, _));
    }
  }
}

}  // namespace blockfuse::attn
