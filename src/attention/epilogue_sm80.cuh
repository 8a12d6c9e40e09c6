// Internal: the epilogue of the sm80 attention kernel (attention_sm80.cuh): O /= row sum once at
// the end, converted, staged through shared memory (Q's buffer) and stored with 16-byte vectors;
// LSE = m·scale + log(sum) per row. A block whose rows see no key stores O = 0, LSE = −inf.
#pragma once

#include <cmath>
#include <cstdint>

#include "attention/softmax.cuh"
#include "attention/traits_sm80.cuh"

namespace blockfuse::attn {

using namespace cute;

template <class Traits>
struct EpilogueSm80 {
  using Element = typename Traits::Element;

  // No visible key for any row of this block (rows_here valid rows of gO): out = 0, LSE = −inf.
  template <class Params, class GO, class CopyO, class ThrO, class CO>
  CUTE_DEVICE static void store_empty(Params const& p, GO& gO, CopyO const& gmem_copy_o, ThrO const& gmem_thr_o,
                                      CO const& cO, int64_t lse_off, int m_block, int rows_here, int tid) {
    Tensor tOgO = gmem_thr_o.partition_D(gO);
    Tensor tOcO = gmem_thr_o.partition_D(cO);
    Tensor zero = make_tensor<Element>(shape(tOgO(_, 0, 0)));
    clear(zero);
    CUTE_UNROLL
    for (int m = 0; m < size<1>(tOgO); ++m)
      if (get<0>(tOcO(0, m, 0)) < rows_here) {
        CUTE_UNROLL
        for (int k = 0; k < size<2>(tOgO); ++k) copy(gmem_copy_o, zero, tOgO(_, m, k));
      }
    if (p.lse != nullptr)
      for (int r = tid; r < rows_here; r += Traits::kNThreads)
        p.lse[lse_off + m_block * Traits::kBlockM + r] = -INFINITY;
  }

  // O /= sum, LSE, O -> smem (Q's buffer, sQ) -> global (gO) in 16-byte vectors.
  // gmem_copy_o, gmem_thr_o, cO: the global O copy, made by the caller before the main loop.
  template <class Params, class AccO, class Softmax, class Mma, class SQ, class GO, class CopyO, class ThrO, class CO>
  CUTE_DEVICE static void store(Params const& p, AccO& acc_o, Softmax& softmax, Mma const& mma, SQ& sQ, GO& gO,
                                CopyO const& gmem_copy_o, ThrO const& gmem_thr_o, CO const& cO, int64_t lse_off,
                                int m_block, int rows_here, int tid) {
    Tensor acc_o_rc = make_tensor(acc_o.data(), acc_rowcol(acc_o.layout()));
    const int lane = tid % 32;

    float lse[Traits::kRows];
    softmax.template finalize<false>(acc_o_rc, p.scale_lse, lse);

    Tensor rO = convert_fragment<Element>(acc_o);
    Tensor sO = make_tensor(sQ.data(), typename Traits::SmemLayoutO{});
    auto smem_copy_o = make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, mma);
    auto smem_thr_o = smem_copy_o.get_thread_slice(tid);
    Tensor taccOrO = smem_thr_o.retile_S(rO);
    Tensor taccOsO = smem_thr_o.partition_D(sO);
    // Each warp writes only the rows of Q it read (the swizzle permutes within a row): no barrier
    // is needed between the last Q read and this write.
    copy(smem_copy_o, taccOrO, taccOsO);

    if (p.lse != nullptr && lane % 4 == 0) {
      CUTE_UNROLL
      for (int mi = 0; mi < Traits::kRows; ++mi) {
        const int r = (tid / 32) * 16 + lane / 4 + (mi / 2) * 16 * Traits::kNWarps + (mi % 2) * 8;
        if (r < rows_here) p.lse[lse_off + m_block * Traits::kBlockM + r] = lse[mi];
      }
    }

    __syncthreads();
    Tensor tOsO = gmem_thr_o.partition_S(sO);
    Tensor tOgO = gmem_thr_o.partition_D(gO);
    Tensor tOcO = gmem_thr_o.partition_D(cO);
    Tensor tOrO = make_tensor<Element>(shape(tOgO));
    copy(gmem_copy_o, tOsO, tOrO);
    CUTE_UNROLL
    for (int m = 0; m < size<1>(tOgO); ++m)
      if (get<0>(tOcO(0, m, 0)) < rows_here) {
        CUTE_UNROLL
        for (int k = 0; k < size<2>(tOgO); ++k) copy(gmem_copy_o, tOrO(_, m, k), tOgO(_, m, k));
      }
  }
};

}  // namespace blockfuse::attn
