// Internal: the compile-time configuration of the sm90a attention kernel (tile, stages, wgmma
// atoms, shared-memory layouts, TMA descriptor types) and the kernel's launch parameters. The kernel
// itself is attention_sm90.cuh; its parts are mainloop_sm90.cuh, epilogue_sm90.cuh and
// tile_scheduler.cuh.
#pragma once

#include <cmath>
#include <cstdint>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>

#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "cutlass/pipeline/pipeline.hpp"

#include "attention/params.h"

namespace blockfuse::attn::sm90 {

using namespace cute;

// The fp32 accumulator of an m64 wgmma, ((2,2,N/8), 1, 1), viewed as (row, col) =
// ((2, 1), (2, N/8)): rows r, r + 8; columns 2·(lane % 4) + {0, 1} + 8b. The column mode has the
// (pair, 8-block) shape of the sm80 view, so VisibilityMask::apply and OnlineSoftmax work on it.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_rowcol_sm90(Layout acc) {
  static_assert(decltype(rank<0>(acc))::value == 3, "an m64 GMMA accumulator: ((2,2,N/8), MMA_M, MMA_N)");
  static_assert(decltype(size<1>(acc))::value == 1 && decltype(size<2>(acc))::value == 1,
                "one m64 atom per warpgroup, the whole N in one atom");
  return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)), make_layout(get<0, 0>(acc), get<0, 2>(acc)));
}

// The score accumulator ((2,2,N/8), 1, 1) re-read as the A operand of P·V, ((2,2,2), 1, N/16):
// two adjacent 8-column blocks form one k16 slice (see the header).
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_as_a_sm90(Layout acc) {
  auto v = get<0>(acc);
  auto blocks = get<0>(logical_divide(get<2>(v), Shape<_2>{}));  // (2, N/16)
  return make_layout(make_layout(get<0>(v), get<1>(v), get<0>(blocks)), get<1>(acc), get<1>(blocks));
}

// A global tensor as TMA sees it: (rows, D, heads, batch), strides in elements (the forward's and
// the backward's TMA views). TMA coordinates are int32: the validation keeps lengths below 2^30 and
// heads, batch below 2^16. It allows any stride (a multiple of 8 elements) for a mode of extent 1,
// 0 included; such a mode is only ever addressed at 0, so a zero stride becomes 8 elements (16
// bytes), which every TMA descriptor accepts.
template <int kHeadDim, class T>
auto tma_gmem_view(T* ptr, int32_t rows, int32_t heads, int32_t batch, int64_t row_stride, int64_t head_stride,
                   int64_t batch_stride) {
  auto st = [](int64_t s) { return s != 0 ? s : int64_t(8); };
  return make_tensor(make_gmem_ptr(ptr), Shape<int32_t, Int<kHeadDim>, int32_t, int32_t>{rows, Int<kHeadDim>{}, heads, batch},
                     Stride<int64_t, _1, int64_t, int64_t>{st(row_stride), _1{}, st(head_stride), st(batch_stride)});
}

// The TMA views of q, k and v that both passes load: one view per sequence of the batch, or one of
// every packed row (varlen); rows_q / rows_k are the views' row counts, views their number (the
// forward's out and the backward's dout take rows_q and views too).
template <int kHeadDim, class Element>
struct QkvTmaViews {
  using View = decltype(tma_gmem_view<kHeadDim>(static_cast<const Element*>(nullptr), 0, 0, 0, 0, 0, 0));
  int rows_q, rows_k, views;
  View q, k, v;
};
template <int kHeadDim, class Element>
QkvTmaViews<kHeadDim, Element> qkv_tma_views(const Params& a) {
  const bool varlen = a.cu_seqlens_q != nullptr;
  const int rows_q = varlen ? a.total_q : a.seqlen_q, rows_k = varlen ? a.total_k : a.seqlen_k;
  const int views = varlen ? 1 : a.batch;
  return {rows_q,
          rows_k,
          views,
          tma_gmem_view<kHeadDim>(static_cast<const Element*>(a.q), rows_q, a.heads_q, views, a.q_row_stride,
                                  a.q_head_stride, a.q_batch_stride),
          tma_gmem_view<kHeadDim>(static_cast<const Element*>(a.k), rows_k, a.heads_kv, views, a.k_row_stride,
                                  a.k_head_stride, a.k_batch_stride),
          tma_gmem_view<kHeadDim>(static_cast<const Element*>(a.v), rows_k, a.heads_kv, views, a.v_row_stride,
                                  a.v_head_stride, a.v_batch_stride)};
}

// The kernel's compile-time configuration for one (dtype, head dim, key block, stages, consumer
// warpgroups). kStageO: O is staged in its own buffer (the producer may load the next tile's Q
// while the O store still reads it); false: in Q's buffer, which the next Q waits for (D = 256,
// where a separate O buffer does not fit beside two K and two V stages). kConsumerWgs: 2 (128 query
// rows a tile) or 3 (192 rows: D = 64, where a key block carries half the work of D = 128 and a
// third warpgroup spreads each K and V load over 1.5x the rows, as FlashAttention-3 does).
template <class Element_, int kHeadDim_, int kBlockN_, int kStages_, bool kStageO_ = true, int kConsumerWgs_ = 2>
struct Sm90Traits {
  using Element = Element_;  // cutlass::bfloat16_t or cutlass::half_t
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumerWgs = kConsumerWgs_;
  static constexpr int kRowsPerWg = 64;                 // one m64 wgmma atom per consumer warpgroup
  static constexpr int kBlockM = kRowsPerWg * kConsumerWgs;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr bool kStageO = kStageO_;
  static constexpr int kThreads = 128 * (1 + kConsumerWgs);
  // setmaxnreg: the producer keeps 24 registers and the consumers share the rest of the 64 K
  // register file (2 x 240 or 3 x 160, each with 24 · 128 for the producer, <= 65536). At D = 128 the
  // producer gets 40 and the consumers 232: at 24 its TMA and scheduler code spilled 104 bytes.
  static constexpr bool kWideProducer = kConsumerWgs == 2 && kHeadDim == 128;
  static constexpr int kProducerRegs = kWideProducer ? 40 : 24;
  static constexpr int kConsumerRegs = kConsumerWgs == 2 ? (kWideProducer ? 232 : 240) : 160;
  // The main loop walks the masked key blocks in their own loops (mainloop_sm90.cuh) where the
  // consumers have 160 registers: the mask code's registers are what would spill at 192 x 128. At
  // two warpgroups (240 registers) the one loop measured 2-3 % faster at D = 64 and even at D = 128 /
  // 256 (docs/attention.md#tuning, "Peeled masked blocks").
  static constexpr bool kPeelMasked = kConsumerWgs == 3;
  // A key block's scores become P at the start of the next step (mainloop_sm90.cuh), so that its
  // softmax runs under the P·V, and O is rescaled outside the GEMM turn. At three warpgroups (D = 64,
  // 192-row tiles) that measured 0.94-0.97x the time at S 2048 / 4096 (0.89-1.02x at 16384, main's
  // own spread there); at two (D 64 / 128 / 256, 128-row tiles), 1.01-1.10x (H200,
  // results/attention.json sm90_softmax_under_pv).
  static constexpr bool kSoftmaxUnderPV = kConsumerWgs == 3;
  static_assert(kConsumerWgs == 2 || kConsumerWgs == 3, "two or three consumer warpgroups");
  static_assert(128 * (kProducerRegs + kConsumerWgs * kConsumerRegs) <= 65536, "the register file");
  static_assert(kHeadDim % 64 == 0 && kBlockN % 16 == 0, "whole SW128 atoms and k16 slices");

  using D = Int<kHeadDim>;
  using BN = Int<kBlockN>;
  using WgM = Int<kRowsPerWg>;

  // S = Q·Kᵀ per warpgroup: m64 n=BN k=D, Q and K both K-major in shared memory.
  using TiledMmaQK = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<WgM, BN, D>>()));
  // O += P·V per warpgroup: m64 n=D k=BN, P from registers, Vᵀ MN-major in shared memory.
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<WgM, D, BN>, GMMA::Major::K, GMMA::Major::MN>()));

  // Shared memory: 128-byte-swizzled K-major tiles (what both TMA and wgmma read). Q is two
  // 64-row slices, one per consumer warpgroup, each contiguous so that it is one TMA box and later
  // the warpgroup's O staging buffer.
  using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<WgM, D, Int<kConsumerWgs>>{}));
  using SmemLayoutQSlice = decltype(tile_to_shape(SmemAtom{}, Shape<WgM, D>{}));
  using SmemLayoutK = decltype(tile_to_shape(SmemAtom{}, Shape<BN, D, Int<kStages>>{}));
  using SmemLayoutKStage = decltype(tile_to_shape(SmemAtom{}, Shape<BN, D>{}));
  using SmemLayoutV = SmemLayoutK;
  // Vᵀ (D, BN, stages) over V's buffer: the B operand of P·V, MN-major (D contiguous).
  using SmemLayoutVt = decltype(composition(
      SmemLayoutV{}, make_ordered_layout(Shape<D, BN, Int<kStages>>{}, Step<_2, _1, _3>{})));

  using PipelineK = cutlass::PipelineTmaAsync<kStages>;
  using PipelineV = cutlass::PipelineTmaAsync<kStages>;

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    // O staging, one slice per warpgroup (a placeholder without kStageO: O then goes through Q's buffer)
    alignas(1024) cute::array_aligned<Element, kStageO ? cosize_v<SmemLayoutQ> : 8, 1024> o;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>, 1024> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutV>, 1024> v;
    typename PipelineK::SharedStorage pipe_k;
    typename PipelineV::SharedStorage pipe_v;
    uint64_t q_full;   // ClusterTransactionBarrier::ValueType: Q of the current tile landed
    uint64_t q_empty;  // ClusterBarrier::ValueType: both consumer warpgroups are done reading Q
    // The dynamic walk (tile_scheduler.cuh): the tile the producer took, two slots in turn.
    int64_t tile_slot[2];
    uint64_t tile_full[2];   // ClusterBarrier: the producer wrote the slot
    uint64_t tile_empty[2];  // ClusterBarrier: every consumer thread read it
    uint64_t tile_taken[2];  // ClusterBarrier: the loading thread read it (the next claim waits for it)
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "Hopper allows 227 KB of shared memory per block");
  static_assert(cosize_v<SmemLayoutQSlice> * int(sizeof(Element)) % 1024 == 0 &&
                    cosize_v<SmemLayoutKStage> * int(sizeof(Element)) % 1024 == 0,
                "every slice and stage starts on a 1024-byte swizzle-pattern boundary");

  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKVStageBytes = kBlockN * kHeadDim * sizeof(Element);

  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, tma_gmem_view<kHeadDim>(static_cast<const Element*>(nullptr), 0, 0, 0, 0, 0, 0),
                                      SmemLayoutQSlice{}));
  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, tma_gmem_view<kHeadDim>(static_cast<const Element*>(nullptr), 0, 0, 0, 0, 0, 0),
                                       SmemLayoutKStage{}));
  using TmaO = decltype(make_tma_copy(SM90_TMA_STORE{}, tma_gmem_view<kHeadDim>(static_cast<Element*>(nullptr), 0, 0, 0, 0, 0, 0),
                                      SmemLayoutQSlice{}));
};

// What the kernel is launched with: the family's Params plus what the host derives from them (a
// __grid_constant__ parameter: the TMA descriptors are read from it by address).
template <class Traits>
struct Sm90Params : Params {
  typename Traits::TmaQ tma_q;
  typename Traits::TmaKV tma_k;
  typename Traits::TmaKV tma_v;
  typename Traits::TmaO tma_o;
  int rows_q = 0, rows_k = 0;  // rows of the TMA views: seqlen (batched) or total (varlen)
  int m_blocks = 0;            // ceil(seqlen_q / kBlockM)
  int64_t num_tiles = 0;       // m_blocks · heads_q · batch
  int lpt_section = 0;         // > 0: tiles in lpt_tile's order (params.h); 0: m fastest
};

}  // namespace blockfuse::attn::sm90
