// Internal: the epilogue of the sm90a attention kernel (attention_sm90.cuh), per consumer
// warpgroup and tile: O /= row sum (0 for a row that saw no key, LSE −inf; NaN propagates), O
// converted to 16 bits into the warpgroup's own 64-row O staging slice (swizzled as TMA expects;
// the previous tile's store has read it by then), then one TMA store of the slice, which clips rows
// >= seqlen_q and completes under the next tile's main loop (varlen: predicated 16-byte stores of
// the sequence's rows instead). The row's LSE goes straight to global memory.
//
// The reciprocal and the logarithm are the approximate MUFU forms (OnlineSoftmax::finalize<true>):
// a library call left in the kernel makes ptxas serialise every wgmma (warning C7510).
#pragma once

#include <cstdint>

#include "attention/softmax.cuh"
#include "attention/tile_scheduler.cuh"
#include "attention/traits_sm90.cuh"

namespace blockfuse::attn::sm90 {

using namespace cute;

template <class Traits>
struct EpilogueSm90 {
  using Element = typename Traits::Element;
  using D = typename Traits::D;
  using WgM = typename Traits::WgM;
  static constexpr int kBlockM = Traits::kBlockM;
  using QEmptyBarrier = cutlass::arch::ClusterBarrier;

  // One tile of warpgroup wg (thread t of its 128, lane of its warp): finalises the softmax and
  // stores O (sOw: the warpgroup's staging slice; thr_pv: the P·V MMA's thread slice) and the LSE.
  template <class Params, class SmemO, class ThrPV, class AccO, class AccORC>
  CUTE_DEVICE static void store(Params const& p, typename Traits::SharedStorage& smem, SmemO& sOw, ThrPV const& thr_pv,
                                AccO& acc_o, AccORC& acc_o_rc, OnlineSoftmax<2>& softmax, const Tile& tl, bool varlen,
                                int wg, int t, int lane, int row0) {
    const int m_block = tl.m_block;
    float lse[2];
    softmax.template finalize<true>(acc_o_rc, p.scale_lse, lse);

    // O -> this warpgroup's O slice, once the previous tile's TMA store has read it (it had a
    // whole main loop to do so), then one TMA store, which clips rows >= seqlen_q.
    if (t == 0) tma_store_wait<0>();
    cutlass::arch::NamedBarrier::arrive_and_wait(128, wg);
    Tensor rO = convert_fragment<Element>(acc_o);
    Tensor tOsO = thr_pv.partition_C(sOw);
    copy(rO, tOsO);
    // Generic-proxy writes made visible to TMA (the async proxy) by each writer, then all 128
    // writers done before the one thread stores.
    cutlass::arch::fence_view_async_shared();
    cutlass::arch::NamedBarrier::arrive_and_wait(128, wg);
    if (varlen) {
      // A TMA box cannot stop at the sequence's end (the next sequence's rows follow), so each
      // thread stores 16-byte chunks of the rows below len_q. The SW128 swizzle permutes whole
      // 16-byte chunks, so a chunk is contiguous in shared memory too.
      constexpr int kChunks = Traits::kHeadDim / 8;
      const int rows_here = tl.len_q - (m_block * kBlockM + wg * Traits::kRowsPerWg);
      for (int i = t; i < Traits::kRowsPerWg * kChunks; i += 128) {
        const int r = i / kChunks, c = (i % kChunks) * 8;
        if (r >= rows_here) break;  // i grows with r
        const uint4 v = *reinterpret_cast<const uint4*>(raw_pointer_cast(&sOw(r, c)));
        Element* dst = static_cast<Element*>(p.out) +
                       int64_t(tl.offset_q + m_block * kBlockM + wg * Traits::kRowsPerWg + r) * p.o_row_stride +
                       int64_t(tl.head) * p.o_head_stride + c;
        *reinterpret_cast<uint4*>(dst) = v;
      }
      if (!Traits::kStageO) {  // O went through Q's buffer: release it once every thread has read it
        cutlass::arch::NamedBarrier::arrive_and_wait(128, wg);
        if (t == 0) QEmptyBarrier::arrive(&smem.q_empty);
      }
    } else if (t == 0) {
      Tensor mO = p.tma_o.get_tma_tensor(make_shape(p.rows_q, D{}, p.heads_q, p.batch));
      Tensor gO = local_tile(mO(_, _, tl.head, tl.b), Shape<WgM, D>{},
                             make_coord(Traits::kConsumerWgs * m_block + wg, _0{}));
      auto tma_o = p.tma_o.get_slice(_0{});
      copy(p.tma_o, tma_o.partition_S(sOw), tma_o.partition_D(gO));
      tma_store_arrive();
      if (!Traits::kStageO) {
        tma_store_wait<0>();
        QEmptyBarrier::arrive(&smem.q_empty);
      }
    }

    if (p.lse != nullptr && lane % 4 == 0) {
      const int64_t lse_off =
          int64_t(tl.b) * p.lse_batch_stride + int64_t(tl.head) * p.lse_head_stride + tl.offset_q;
      CUTE_UNROLL
      for (int mi = 0; mi < 2; ++mi) {
        const int r = row0 + mi * 8;
        if (r < tl.len_q) p.lse[lse_off + r] = lse[mi];
      }
    }
  }

  // After the last tile: the block's shared memory must outlive the last TMA store's reads of it.
  CUTE_DEVICE static void store_tail(int t) {
    if (t == 0) tma_store_wait<0>();
  }
};

}  // namespace blockfuse::attn::sm90
