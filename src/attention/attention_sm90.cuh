// Internal: the sm90a (Hopper) attention forward kernel: wgmma, TMA and warp specialisation
// (docs/attention.md#design).
//
// A CTA of 384 threads (one per SM: the shared memory allows no more) walks the tiles blockIdx.x,
// + gridDim.x, ...: 128 query rows of one (batch, head). The grid is persistent (one CTA per SM)
// where every tile does the same work and one CTA per tile under a causal mask or a window
// (attn::sm90_grid_ctas in params.h, measured). Per tile:
//   warpgroup 0, the producer: one elected thread loads Q (two 64-row TMA boxes on one
//     transaction barrier, once the consumers have released the previous tile's Q) and then
//     K[n], V[n] for n from the last visible key block down, each into its own ring of kStages
//     shared-memory stages (two mbarrier pipelines, so that a consumer waits for exactly the
//     operand it is about to read); it runs ahead into the next tile while the consumers finish;
//   warpgroups 1 and 2, the consumers: each owns 64 query rows (one m64 wgmma atom) and per key
//     block issues S = Q·Kᵀ (wgmma, both operands in shared memory), applies the soft-cap and the
//     mask, updates the online softmax (softmax.cuh, shared with the sm80 kernel), converts P to
//     16 bits in registers and issues O += P·V (wgmma, A = P from registers, B = Vᵀ read MN-major
//     straight from V's stage, so no transposing copy).
// `setmaxnreg` gives the producer 24 registers and each consumer thread 240.
// Overlap (FlashAttention-3's design, docs/attention.md#design): inside a warpgroup,
// step n issues S[n] = Q·K[n]ᵀ and O += P[n+1]·V[n+1] together and runs the softmax of S[n] while
// the P·V runs (the O rescale it implies waits until no P·V is in flight); between the two
// warpgroups, named barriers make them take turns issuing GEMMs (ping-pong), so one's softmax
// hides under the other's GEMMs. A K or V stage is released only after the wgmma that read it has
// retired (a stage released earlier could be overwritten by TMA under a live wgmma).
//
// P stays in registers. In the m64nN F32 accumulator layout (GMMA::CLayout_64xN,
// ((4,8,4),(2,2,N/8)) : ((128,1,16),(64,8,512)) in m + 64·n) a thread holds, per 8-column block b,
// columns 8b + 2·(lane % 4) + {0, 1} of rows r and r + 8. The RS A operand of the m64nDk16 wgmma
// holds, per k16 slice, exactly those elements of two adjacent 8-column blocks in the same order,
// so the score fragment ((2,2,N/8), 1, 1) re-read as ((2,2,2), 1, N/16) *is* P's A fragment
// (`acc_as_a_sm90`); tests/attention/test_attention_layout_sm90.cu checks it for every thread.
//
// Epilogue, per consumer warpgroup: O /= row sum (0 for a row that saw no key, LSE −inf; NaN
// propagates), O converted to 16 bits into the warpgroup's own 64-row O staging slice (swizzled as
// TMA expects; the previous tile's store has read it by then), then one TMA store of the slice,
// which clips rows >= seqlen_q and completes under the next tile's main loop.
// TMA loads zero-fill rows past the sequence ends, so the key tail only needs the mask.
//
// No function call may be left in the kernel: a call makes ptxas serialise every wgmma (warning
// C7510). Hence the epilogue's reciprocal and logarithm are the approximate MUFU forms
// (OnlineSoftmax::finalize<true>).
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

#include "attention/mask.cuh"
#include "attention/softmax.cuh"
#include "attention/traits_sm90.cuh"

namespace blockfuse::attn::sm90 {

using namespace cute;

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    attention_fwd_sm90(const __grid_constant__ Sm90Params<Traits> p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = typename Traits::Element;
  using D = typename Traits::D;
  using BN = typename Traits::BN;
  using WgM = typename Traits::WgM;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  using PipelineK = typename Traits::PipelineK;
  using PipelineV = typename Traits::PipelineV;
  using PipeState = typename PipelineK::PipelineState;
  using Storage = typename Traits::SharedStorage;

  extern __shared__ __align__(1024) char smem_raw[];
  Storage& smem = *reinterpret_cast<Storage*>(smem_raw);
  // TMA and wgmma swizzle absolute shared-memory addresses, CuTe's layouts (the epilogue's O
  // stores) swizzle offsets: they agree only on a 1024-byte-aligned base. Fail loudly if not.
  if (threadIdx.x == 0 && (cute::cast_smem_ptr_to_uint(smem_raw) & 1023u) != 0) __trap();

  const int warp_group = threadIdx.x / 128;
  const int warp_in_group = (threadIdx.x / 32) % 4;

  // CTA i computes tiles i, i + gridDim.x, ... (the grid rule: header). A tile is (m_block, head, b), m fastest
  // and reversed: the CTAs running together share one head's K and V in L2, and under a causal
  // mask the longest query blocks start first. The producer and the consumers derive a tile's
  // sequence, mask and key-block range from the same call, so they agree. Varlen: sequence b is
  // rows [cu[b], cu[b+1]) of the packed tensors; a tile past its sequence's end is skipped by both.
  const bool varlen = p.cu_seqlens_q != nullptr;
  const SoftCap softcap{p.softcap_mul};
  struct Tile {
    int m_block, head, b, n_min, n_max;
    int offset_q, offset_k, len_q, len_k;  // batched: 0, 0, seqlen_q, seqlen_k
    VisibilityMask mask;
  };
  auto tile_at = [&](int64_t t) {
    const int m_block = p.m_blocks - 1 - int(t % p.m_blocks);
    const int64_t hb = t / p.m_blocks;
    const int head = int(hb % p.heads_q), b = int(hb / p.heads_q);
    int offset_q = 0, offset_k = 0, len_q = p.seqlen_q, len_k = p.seqlen_k;
    if (varlen) {
      offset_q = p.cu_seqlens_q[b];
      len_q = p.cu_seqlens_q[b + 1] - offset_q;
      offset_k = p.cu_seqlens_k[b];
      len_k = p.cu_seqlens_k[b + 1] - offset_k;
    }
    Tile tl{m_block, head, b, 0, 0, offset_q, offset_k, len_q, len_k,
            VisibilityMask(len_q, len_k, p.window_left, p.window_right)};
    tl.mask.template n_block_range<kBlockM, kBlockN>(m_block, tl.n_min, tl.n_max);
    return tl;
  };
  auto tile_is_empty = [](const Tile& tl) { return tl.m_block * kBlockM >= tl.len_q; };

  // Barriers: warp 0 initialises both pipelines (PipelineTmaAsync's constructor) and Q's barriers.
  typename PipelineK::Params pk;
  pk.transaction_bytes = Traits::kKVStageBytes;
  pk.role = warp_group == 0 ? PipelineK::ThreadCategory::Producer : PipelineK::ThreadCategory::Consumer;
  pk.is_leader = threadIdx.x == 0;
  pk.num_consumers = 128 * Traits::kConsumerWgs;
  PipelineK pipe_k(smem.pipe_k, pk, Shape<_1, _1, _1>{});
  PipelineV pipe_v(smem.pipe_v, pk, Shape<_1, _1, _1>{});
  using QBarrier = cutlass::arch::ClusterTransactionBarrier;
  using QEmptyBarrier = cutlass::arch::ClusterBarrier;
  if (threadIdx.x == 0) {
    QBarrier::init(&smem.q_full, 1);
    QEmptyBarrier::init(&smem.q_empty, 128 * Traits::kConsumerWgs);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (warp_group == 0) {
    // ---- producer ----
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (warp_in_group == 0 && threadIdx.x == 0) {
      Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQ{});
      Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutK{});
      Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutV{});
      const int views = varlen ? 1 : p.batch;
      Tensor mQ = p.tma_q.get_tma_tensor(make_shape(p.rows_q, D{}, p.heads_q, views));
      Tensor mK = p.tma_k.get_tma_tensor(make_shape(p.rows_k, D{}, p.heads_kv, views));
      Tensor mV = p.tma_v.get_tma_tensor(make_shape(p.rows_k, D{}, p.heads_kv, views));
      auto tma_q = p.tma_q.get_slice(_0{});
      auto tma_k = p.tma_k.get_slice(_0{});
      auto tma_v = p.tma_v.get_slice(_0{});
      Tensor tQsQ = tma_q.partition_D(sQ);  // (TMA, 1, 1, 2)
      Tensor tKsK = tma_k.partition_D(sK);  // (TMA, 1, 1, stages)
      Tensor tVsV = tma_v.partition_D(sV);
      PipeState st_k = cutlass::make_producer_start_state<PipelineK>();
      PipeState st_v = cutlass::make_producer_start_state<PipelineV>();
      int iter = 0;  // tiles processed (skipped ones not counted): the Q barriers' phase
      for (int64_t t = blockIdx.x; t < p.num_tiles; t += gridDim.x) {
        const Tile tl = tile_at(t);
        if (tile_is_empty(tl)) continue;
        const int head_kv = tl.head / p.group;
        const int view = varlen ? 0 : tl.b;
        // Varlen: the sequence's rows start at its offset; boxes running past its end read the next
        // sequence's rows (masked: keys by the mask, query rows never stored) or zeros past the tensor.
        Tensor tQgQ = tma_q.partition_S(local_tile(domain_offset(make_coord(tl.offset_q, _0{}), mQ(_, _, tl.head, view)),
                                                   Shape<WgM, D>{}, make_coord(_, _0{})));
        Tensor tKgK = tma_k.partition_S(local_tile(domain_offset(make_coord(tl.offset_k, _0{}), mK(_, _, head_kv, view)),
                                                   Shape<BN, D>{}, make_coord(_, _0{})));
        Tensor tVgV = tma_v.partition_S(local_tile(domain_offset(make_coord(tl.offset_k, _0{}), mV(_, _, head_kv, view)),
                                                   Shape<BN, D>{}, make_coord(_, _0{})));
        // Q always, even for a tile without visible keys (the consumers wait for it either way),
        // once both consumer warpgroups are done with the previous tile's Q. Boxes past seqlen_q
        // are zero-filled and still count their bytes.
        if (iter > 0) QEmptyBarrier::wait(&smem.q_empty, (iter - 1) & 1);
        QBarrier::arrive_and_expect_tx(&smem.q_full, Traits::kQBytes);
        CUTE_UNROLL
        for (int s = 0; s < Traits::kConsumerWgs; ++s)
          copy(p.tma_q.with(smem.q_full), tQgQ(_, _, _, 2 * tl.m_block + s), tQsQ(_, _, _, s));
        for (int n = tl.n_max - 1; n >= tl.n_min; --n) {
          pipe_k.producer_acquire(st_k);
          copy(p.tma_k.with(*pipe_k.producer_get_barrier(st_k)), tKgK(_, _, _, n), tKsK(_, _, _, st_k.index()));
          ++st_k;
          pipe_v.producer_acquire(st_v);
          copy(p.tma_v.with(*pipe_v.producer_get_barrier(st_v)), tVgV(_, _, _, n), tVsV(_, _, _, st_v.index()));
          ++st_v;
        }
        ++iter;
      }
    }
    return;
  }

  // ---- consumers ----
  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
  const int wg = warp_group - 1;  // 0 or 1: this warpgroup's 64-row slice
  const int t = threadIdx.x % 128;
  const int lane = threadIdx.x % 32;

  Tensor sQw = make_tensor(make_smem_ptr(smem.q.data() + wg * cosize_v<typename Traits::SmemLayoutQSlice>),
                           typename Traits::SmemLayoutQSlice{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutVt{});

  typename Traits::TiledMmaQK mma_qk;
  typename Traits::TiledMmaPV mma_pv;
  auto thr_qk = mma_qk.get_thread_slice(t);
  auto thr_pv = mma_pv.get_thread_slice(t);
  Tensor tSrQ = thr_qk.make_fragment_A(thr_qk.partition_A(sQw));  // descriptors (MMA, 1, D/16)
  Tensor tSrK = thr_qk.make_fragment_B(thr_qk.partition_B(sK));   // (MMA, 1, D/16, stages)
  Tensor tOrV = thr_pv.make_fragment_B(thr_pv.partition_B(sVt));  // (MMA, 1, BN/16, stages)
  Element* const o_base = Traits::kStageO ? smem.o.data() : smem.q.data();
  Tensor sOw = make_tensor(make_smem_ptr(o_base + wg * cosize_v<typename Traits::SmemLayoutQSlice>),
                           typename Traits::SmemLayoutQSlice{});
  Tensor acc_o = partition_fragment_C(mma_pv, Shape<WgM, D>{});
  Tensor acc_o_rc = make_tensor(acc_o.data(), acc_rowcol_sm90(acc_o.layout()));
  const int col_lane = (lane % 4) * 2;
  PipeState st_k, st_v;  // consumers start at phase 0; the states run on across tiles

  // The GEMMs of one step, issued without waiting (each its own commit group, so that
  // warpgroup_wait<1> means "S done, P·V may still run").
  auto issue_qk = [&](auto& acc_s, int stage) {
    warpgroup_fence_operand(acc_s);
    warpgroup_arrive();
    mma_qk.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int k = 0; k < size<2>(tSrQ); ++k) {
      cute::gemm(mma_qk, tSrQ(_, _, k), tSrK(_, _, k, stage), acc_s);
      mma_qk.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_fence_operand(acc_s);
  };
  Tensor rP = make_tensor<Element>(partition_fragment_C(mma_qk, Shape<WgM, BN>{}).layout());
  Tensor tOrP = make_tensor(rP.data(), acc_as_a_sm90(rP.layout()));
  static_assert(decltype(size<2>(tOrP))::value == kBlockN / 16, "one k16 slice of P per 16 keys");
  auto issue_pv = [&](int stage) {
    warpgroup_fence_operand(acc_o);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int k = 0; k < size<2>(tOrP); ++k) cute::gemm(mma_pv, tOrP(_, _, k), tOrV(_, _, k, stage), acc_o);
    warpgroup_commit_batch();
    warpgroup_fence_operand(acc_o);
  };
  // Ping-pong between the two consumer warpgroups: a warpgroup issues its GEMMs only after the
  // other has issued its own, so one's softmax runs under the other's GEMMs. Named barriers
  // kSchedBarrier + wg (256 threads: this warpgroup's sync, the other's arrive); warpgroup 0 opens
  // its own once, at the start. Both warpgroups run the same tiles and steps, so the turns
  // alternate across tiles; warpgroup 1's last arrival is never waited for.
  constexpr uint32_t kSchedBarrier = 2;  // 0 and 1: the epilogue's per-warpgroup barriers
  constexpr uint32_t kZeroBarrier = 4;   // both consumers, after zeroing a varlen tail's V rows (below)
  auto sched_wait = [&] { cutlass::arch::NamedBarrier::arrive_and_wait(256, kSchedBarrier + wg); };
  auto sched_pass = [&] { cutlass::arch::NamedBarrier::arrive(256, kSchedBarrier + (1 - wg)); };
  if (wg == 0) cutlass::arch::NamedBarrier::arrive(256, kSchedBarrier);

  int iter = 0;  // as the producer's
  for (int64_t tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x) {
    const Tile tl = tile_at(tile);
    if (tile_is_empty(tl)) continue;
    const VisibilityMask& mask = tl.mask;
    const int m_block = tl.m_block, n_min = tl.n_min, n_max = tl.n_max;
    const int row0 = m_block * kBlockM + wg * Traits::kRowsPerWg + warp_in_group * 16 + lane / 4;
    // Soft-cap, then the mask where the block needs one (a tail, the diagonal, a window edge).
    auto modify = [&](auto& s, int n_block) {
      if (softcap.enabled()) softcap.apply(s);  // before the mask: tanh(−inf) would be −cap, not −inf
      if (mask.template block_needs_mask<kBlockM, kBlockN>(m_block, n_block))
        mask.apply(s, row0, n_block * kBlockN + col_lane, Traits::kRowsPerWg);
    };

    clear(acc_o);
    OnlineSoftmax<2> softmax;
    CUTE_UNROLL
    for (int i = 0; i < 2; ++i) softmax.row_max[i] = -INFINITY, softmax.row_sum[i] = 0.0f;
    float factor[2];

    QBarrier::wait(&smem.q_full, iter & 1);
    // Varlen: when a sequence's length is not a multiple of kBlockN, its rightmost key box holds the
    // next sequence's first rows. Their P is 0, but 0 · NaN is NaN in the P·V, so a NaN/Inf in a
    // neighbour's V would leak into this sequence: those V rows are zeroed first (K's need nothing,
    // the mask overwrites their scores). Each consumer warpgroup zeroes half, then both meet.
    if (varlen && n_max > n_min) {
      const int valid = tl.len_k - (n_max - 1) * kBlockN;
      if (valid < kBlockN && tl.offset_k + tl.len_k < p.rows_k) {
        constexpr int kChunks = Traits::kHeadDim / 8;  // 16-byte chunks a row (contiguous under SW128)
        Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutV{});
        pipe_v.consumer_wait(st_v);
        for (int i = wg * 128 + t; i < (kBlockN - valid) * kChunks; i += 256) {
          const int r = valid + i / kChunks, c = (i % kChunks) * 8;
          *reinterpret_cast<uint4*>(raw_pointer_cast(&sV(r, c, st_v.index()))) = make_uint4(0, 0, 0, 0);
        }
        cutlass::arch::fence_view_async_shared();  // generic-proxy writes seen by the wgmma
        cutlass::arch::NamedBarrier::arrive_and_wait(256, kZeroBarrier);
      }
    }
    if (n_max > n_min) {
      {  // the first (rightmost) key block: S, softmax, P; its P·V is issued in the next step
        Tensor acc_s = partition_fragment_C(mma_qk, Shape<WgM, BN>{});
        pipe_k.consumer_wait(st_k);
        sched_wait();
        issue_qk(acc_s, st_k.index());
        sched_pass();
        warpgroup_wait<0>();
        pipe_k.consumer_release(st_k);  // the wgmma that read K[n] has retired
        ++st_k;
        Tensor s = make_tensor(acc_s.data(), acc_rowcol_sm90(acc_s.layout()));
        modify(s, n_max - 1);
        softmax.template update_scores<true>(s, p.scale_log2, factor);
        convert_fragment_into(acc_s, rP);
      }
      // Step n: S[n] = Q·K[n]ᵀ and O += P[n+1]·V[n+1] in flight together; the softmax of S[n]
      // overlaps the P·V; O is rescaled (by the factor of block n+1) only while no P·V runs.
      for (int n = n_max - 2; n >= n_min; --n) {
        Tensor acc_s = partition_fragment_C(mma_qk, Shape<WgM, BN>{});
        pipe_k.consumer_wait(st_k);
        sched_wait();
        issue_qk(acc_s, st_k.index());
        softmax.rescale(acc_o_rc, factor);
        pipe_v.consumer_wait(st_v);
        issue_pv(st_v.index());
        sched_pass();
        warpgroup_wait<1>();
        pipe_k.consumer_release(st_k);
        ++st_k;
        Tensor s = make_tensor(acc_s.data(), acc_rowcol_sm90(acc_s.layout()));
        modify(s, n);
        softmax.template update_scores<false>(s, p.scale_log2, factor);
        warpgroup_wait<0>();
        pipe_v.consumer_release(st_v);  // the wgmma that read V[n+1] has retired
        ++st_v;
        convert_fragment_into(acc_s, rP);
      }
      // The last P·V.
      softmax.rescale(acc_o_rc, factor);
      pipe_v.consumer_wait(st_v);
      issue_pv(st_v.index());
      warpgroup_wait<0>();
      pipe_v.consumer_release(st_v);
      ++st_v;
    }
    // Every wgmma that read Q has retired: the producer may load the next tile's Q, unless O is
    // staged in Q's buffer: then the storing thread arrives once its store has read it (below).
    if (Traits::kStageO || t != 0) QEmptyBarrier::arrive(&smem.q_empty);

    // ---- epilogue ----
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
        Element* dst = p.out + int64_t(tl.offset_q + m_block * kBlockM + wg * Traits::kRowsPerWg + r) * p.o_row_stride +
                       int64_t(tl.head) * p.o_head_stride + c;
        *reinterpret_cast<uint4*>(dst) = v;
      }
      if (!Traits::kStageO) {  // O went through Q's buffer: release it once every thread has read it
        cutlass::arch::NamedBarrier::arrive_and_wait(128, wg);
        if (t == 0) QEmptyBarrier::arrive(&smem.q_empty);
      }
    } else if (t == 0) {
      Tensor mO = p.tma_o.get_tma_tensor(make_shape(p.rows_q, D{}, p.heads_q, p.batch));
      Tensor gO = local_tile(mO(_, _, tl.head, tl.b), Shape<WgM, D>{}, make_coord(2 * m_block + wg, _0{}));
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
    ++iter;
  }
  // The block's shared memory must outlive the last TMA store's reads of it.
  if (t == 0) tma_store_wait<0>();
#else
  // Compiled for a target without sm90a features: never launched (the dispatcher checks the device).
  __trap();
#endif
}

}  // namespace blockfuse::attn::sm90
