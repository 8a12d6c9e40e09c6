// Internal: the mainloop of the sm90a attention kernel (attention_sm90.cuh): the TMA producer, the
// wgmma consumers and the online softmax between the two GEMMs.
//
// Producer (one elected thread of warpgroup 0): loads Q (one 64-row TMA box a consumer, on one transaction
// barrier, once the consumers have released the previous tile's Q) and then K[n], V[n] for n from
// the last visible key block down, each into its own ring of kStages shared-memory stages (two
// mbarrier pipelines, so that a consumer waits for exactly the operand it is about to read); it
// runs ahead into the next tile while the consumers finish.
//
// Consumers (warpgroups 1 to kConsumerWgs): each owns 64 query rows (one m64 wgmma atom) and per key block
// issues S = Q·Kᵀ (wgmma, both operands in shared memory), applies the soft-cap and the mask,
// updates the online softmax (softmax.cuh, shared with the sm80 kernel), converts P to 16 bits in
// registers and issues O += P·V (wgmma, A = P from registers, B = Vᵀ read MN-major straight from
// V's stage, so no transposing copy). Overlap (FlashAttention-3's design): inside a warpgroup, step
// n issues S[n] = Q·K[n]ᵀ and O += P[n+1]·V[n+1] together and runs the softmax of S[n] while the
// P·V runs (the O rescale it implies waits until no P·V is in flight); between the warpgroups,
// named barriers make them take turns issuing GEMMs (ping-pong, or round robin with three), so one's
// softmax hides under the others' GEMMs. A K or V stage is released only after the wgmma that read it has retired (a stage
// released earlier could be overwritten by TMA under a live wgmma).
//
// Every function here is force-inlined: a call left in the kernel makes ptxas serialise every wgmma
// (warning C7510).
#pragma once

#include <cmath>
#include <cstdint>

#include "attention/mask.cuh"
#include "attention/softmax.cuh"
#include "attention/tile_scheduler.cuh"
#include "attention/traits_sm90.cuh"

namespace blockfuse::attn::sm90 {

using namespace cute;

// Named barriers of the consumer warpgroups (CUTLASS's user ids: 0-7). 0-2: the epilogue's
// per-warpgroup barriers (wg).
inline constexpr uint32_t kSchedBarrier = 3;  // 3 + wg: the turns of the GEMM issue (below)
inline constexpr uint32_t kZeroBarrier = 6;   // every consumer, after zeroing a varlen tail's V rows

template <class Traits>
struct MainloopSm90 {
  using Element = typename Traits::Element;
  using D = typename Traits::D;
  using BN = typename Traits::BN;
  using WgM = typename Traits::WgM;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  using PipelineK = typename Traits::PipelineK;
  using PipelineV = typename Traits::PipelineV;
  using PipeState = typename PipelineK::PipelineState;
  using Storage = typename Traits::SharedStorage;
  using QBarrier = cutlass::arch::ClusterTransactionBarrier;
  using QEmptyBarrier = cutlass::arch::ClusterBarrier;

  // ---- producer: the whole walk over this CTA's tiles, by the one elected thread ----
  template <class Params, class Scheduler>
  CUTE_DEVICE static void load(Params const& p, Storage& smem, PipelineK& pipe_k, PipelineV& pipe_v,
                               Scheduler const& sched, bool varlen) {
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
    for (int k = 0;; ++k) {
      const int64_t t = sched.tile_of_step(smem, k, /*loader=*/true);
      if (t < 0 || t >= sched.end()) break;
      const Tile tl = sched.tile_at(t);
      if (sched.tile_is_empty(tl)) continue;
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
        copy(p.tma_q.with(smem.q_full), tQgQ(_, _, _, Traits::kConsumerWgs * tl.m_block + s), tQsQ(_, _, _, s));
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

  // ---- consumers ----

  // S = Q·K[stage]ᵀ, issued without waiting (its own commit group, so that warpgroup_wait<1> means
  // "S done, P·V may still run").
  template <class MmaQK, class FragQ, class FragK, class AccS>
  CUTE_DEVICE static void issue_qk(MmaQK& mma_qk, FragQ const& tSrQ, FragK const& tSrK, AccS& acc_s, int stage) {
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
  }

  // O += P·V[stage], issued without waiting.
  template <class MmaPV, class FragP, class FragV, class AccO>
  CUTE_DEVICE static void issue_pv(MmaPV& mma_pv, FragP const& tOrP, FragV const& tOrV, AccO& acc_o, int stage) {
    warpgroup_fence_operand(acc_o);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int k = 0; k < size<2>(tOrP); ++k) cute::gemm(mma_pv, tOrP(_, _, k), tOrV(_, _, k, stage), acc_o);
    warpgroup_commit_batch();
    warpgroup_fence_operand(acc_o);
  }

  // Turns between the consumer warpgroups (ping-pong with two, round robin with three): a
  // warpgroup issues its GEMMs only after the previous one has issued its own, so one's softmax
  // runs under the others' GEMMs. Named barriers kSchedBarrier + wg (256 threads: this warpgroup's
  // sync, the previous one's arrive); warpgroup 0 opens its own once, at the start (sched_open).
  // Every warpgroup runs the same tiles and steps, so the turns keep their order across tiles; the
  // last warpgroup's last arrival is never waited for.
  static constexpr int kWgs = Traits::kConsumerWgs;
  CUTE_DEVICE static void sched_open(int wg) {
    if (wg == 0) cutlass::arch::NamedBarrier::arrive(256, kSchedBarrier);
  }
  CUTE_DEVICE static void sched_wait(int wg) { cutlass::arch::NamedBarrier::arrive_and_wait(256, kSchedBarrier + wg); }
  CUTE_DEVICE static void sched_pass(int wg) {
    cutlass::arch::NamedBarrier::arrive(256, kSchedBarrier + (wg + 1 == kWgs ? 0 : wg + 1));
  }

  // One tile of one consumer warpgroup: O (acc_o) and the softmax statistics over the tile's
  // visible key blocks, from the last to the first. The caller holds the fragments (made once, the
  // pipeline states run on across tiles) and runs the epilogue.
  template <class Params, class MmaQK, class MmaPV, class FragQ, class FragK, class FragV, class RegP, class FragP,
            class AccO, class AccORC>
  CUTE_DEVICE static void mma(Params const& p, Storage& smem, PipelineK& pipe_k, PipelineV& pipe_v, PipeState& st_k,
                              PipeState& st_v, MmaQK& mma_qk, MmaPV& mma_pv, FragQ const& tSrQ, FragK const& tSrK,
                              FragV const& tOrV, RegP& rP, FragP const& tOrP, AccO& acc_o, AccORC& acc_o_rc,
                              OnlineSoftmax<2>& softmax, const Tile& tl, const SoftCap& softcap, bool varlen, int iter,
                              int wg, int t, int row0, int col_lane) {
    const VisibilityMask& mask = tl.mask;
    const int m_block = tl.m_block, n_min = tl.n_min, n_max = tl.n_max;
    // Soft-cap, then the mask where the block needs one (a tail, the diagonal, a window edge).
    auto modify = [&](auto& s, int n_block) {
      if (softcap.enabled()) softcap.apply(s);  // before the mask: tanh(−inf) would be −cap, not −inf
      if (mask.template block_needs_mask<kBlockM, kBlockN>(m_block, n_block))
        mask.apply(s, row0, n_block * kBlockN + col_lane, Traits::kRowsPerWg);
    };

    // With O staged in its own buffer, Q is free once the tile's last S wgmma has retired: the
    // producer then loads the next tile's Q under this tile's last softmax, P·V and epilogue
    // (released after the last P·V, the consumers waited for Q at each tile's start: D 128 S 1024
    // non-causal 1.04-1.16x with it, results/attention.json sm90_q_early). Otherwise O goes through
    // Q's buffer and the epilogue releases it.
    auto release_q = [&] {
      if constexpr (Traits::kStageO) QEmptyBarrier::arrive(&smem.q_empty);
    };
    clear(acc_o);
    CUTE_UNROLL
    for (int i = 0; i < 2; ++i) softmax.row_max[i] = -INFINITY, softmax.row_sum[i] = 0.0f;
    float factor[2];

    QBarrier::wait(&smem.q_full, iter & 1);
    // Varlen: when a sequence's length is not a multiple of kBlockN, its rightmost key box holds the
    // next sequence's first rows. Their P is 0, but 0 · NaN is NaN in the P·V, so a NaN/Inf in a
    // neighbour's V would leak into this sequence: those V rows are zeroed first (K's need nothing,
    // the mask overwrites their scores). The consumer warpgroups share the rows, then all meet.
    if (varlen && n_max > n_min) {
      const int valid = tl.len_k - (n_max - 1) * kBlockN;
      if (valid < kBlockN && tl.offset_k + tl.len_k < p.rows_k) {
        constexpr int kChunks = Traits::kHeadDim / 8;  // 16-byte chunks a row (contiguous under SW128)
        Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutV{});
        pipe_v.consumer_wait(st_v);
        for (int i = wg * 128 + t; i < (kBlockN - valid) * kChunks; i += 128 * kWgs) {
          const int r = valid + i / kChunks, c = (i % kChunks) * 8;
          *reinterpret_cast<uint4*>(raw_pointer_cast(&sV(r, c, st_v.index()))) = make_uint4(0, 0, 0, 0);
        }
        cutlass::arch::fence_view_async_shared();  // generic-proxy writes seen by the wgmma
        cutlass::arch::NamedBarrier::arrive_and_wait(128 * kWgs, kZeroBarrier);
      }
    }
    if (n_max > n_min) {
      // Where a key block's scores become P (Traits::kSoftmaxUnderPV): at the end of its step, or
      // late, at the start of the next one, past the loop's back edge. In the step's basic block
      // ptxas (13.0) hoists the wait for the P·V above the whole softmax (SASS: WARPGROUP.DEPBAR.LE
      // gsb0, 0x0 before the first FMNMX), so only the late conversion runs the softmax under the P·V.
      constexpr bool kLate = Traits::kSoftmaxUnderPV;
      // Late, S lives across steps; otherwise each step makes its own (the SASS of the two-warpgroup
      // kernels changes, and they slow down, with the fragment or the fences below shared).
      Tensor acc_s_carried = partition_fragment_C(mma_qk, Shape<WgM, BN>{});
      auto s_of_step = [](auto& carried, auto& local) -> auto& {
        if constexpr (kLate)
          return carried;
        else
          return local;
      };
      bool v_pending = false;  // late: a P·V, and the V stage it reads, in flight
      // Late: wait for every wgmma, release the V stage the P·V read, convert S to P and rescale O
      // (no P·V runs now, so the rescale leaves the GEMM turn, sched_wait .. sched_pass).
      auto to_p = [&] {
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_s_carried);
        warpgroup_fence_operand(acc_o);
        if (v_pending) {
          pipe_v.consumer_release(st_v);  // the wgmma that read V[n+1] has retired
          ++st_v;
        }
        convert_fragment_into(acc_s_carried, rP);
        softmax.rescale(acc_o_rc, factor);
      };
      {  // the first (rightmost) key block: S and softmax; its P·V is issued in the next step
        Tensor acc_s_local = partition_fragment_C(mma_qk, Shape<WgM, BN>{});
        auto& acc_s = s_of_step(acc_s_carried, acc_s_local);
        pipe_k.consumer_wait(st_k);
        sched_wait(wg);
        issue_qk(mma_qk, tSrQ, tSrK, acc_s, st_k.index());
        sched_pass(wg);
        warpgroup_wait<0>();
        pipe_k.consumer_release(st_k);  // the wgmma that read K[n] has retired
        ++st_k;
        if (n_max - 1 == n_min) release_q();
        Tensor s = make_tensor(acc_s.data(), acc_rowcol_sm90(acc_s.layout()));
        modify(s, n_max - 1);
        softmax.template update_scores<true>(s, p.scale_log2, factor);
        if constexpr (!kLate) convert_fragment_into(acc_s, rP);
      }
      // Step n: S[n] = Q·K[n]ᵀ and O += P[n+1]·V[n+1] in flight together; the softmax of S[n]
      // overlaps the P·V where kLate (above); O is rescaled (by the factor of block n+1) only while no
      // P·V runs.
      // kMasked: the block may hold invisible (row, key) pairs. The masked blocks are the rightmost
      // (the key tail, the causal diagonal) and the leftmost (a window's left edge), so under
      // Traits::kPeelMasked the walk is three loops and the middle one, almost every block, carries
      // no mask code: its registers (row bounds, the apply's temporaries) are what let 192-row tiles
      // keep 128 keys a step at 160 registers a thread (FlashAttention-3's structure).
      auto step = [&](int n, auto kMasked) {
        if constexpr (kLate) to_p();
        Tensor acc_s_local = partition_fragment_C(mma_qk, Shape<WgM, BN>{});
        auto& acc_s = s_of_step(acc_s_carried, acc_s_local);
        pipe_k.consumer_wait(st_k);
        sched_wait(wg);
        issue_qk(mma_qk, tSrQ, tSrK, acc_s, st_k.index());
        if constexpr (!kLate) softmax.rescale(acc_o_rc, factor);
        pipe_v.consumer_wait(st_v);
        issue_pv(mma_pv, tOrP, tOrV, acc_o, st_v.index());
        sched_pass(wg);
        warpgroup_wait<1>();
        if constexpr (kLate) warpgroup_fence_operand(acc_s);
        pipe_k.consumer_release(st_k);
        ++st_k;
        if (n == n_min) release_q();
        Tensor s = make_tensor(acc_s.data(), acc_rowcol_sm90(acc_s.layout()));
        if constexpr (decltype(kMasked)::value)
          modify(s, n);
        else if (softcap.enabled())
          softcap.apply(s);
        softmax.template update_scores<false>(s, p.scale_log2, factor);
        if constexpr (kLate) {
          v_pending = true;
        } else {
          warpgroup_wait<0>();
          pipe_v.consumer_release(st_v);  // the wgmma that read V[n+1] has retired
          ++st_v;
          convert_fragment_into(acc_s, rP);
        }
      };
      if constexpr (Traits::kPeelMasked) {
        auto needs_mask = [&](int n) { return mask.template block_needs_mask<kBlockM, kBlockN>(m_block, n); };
        int n = n_max - 2;
        for (; n >= n_min && needs_mask(n); --n) step(n, cute::true_type{});
        for (; n >= n_min && !needs_mask(n); --n) step(n, cute::false_type{});
        for (; n >= n_min; --n) step(n, cute::true_type{});
      } else {
        for (int n = n_max - 2; n >= n_min; --n) step(n, cute::true_type{});
      }
      if constexpr (kLate)
        to_p();
      else
        softmax.rescale(acc_o_rc, factor);
      // The last P·V.
      pipe_v.consumer_wait(st_v);
      issue_pv(mma_pv, tOrP, tOrV, acc_o, st_v.index());
      warpgroup_wait<0>();
      pipe_v.consumer_release(st_v);
      ++st_v;
    } else {
      release_q();  // no visible keys: Q was never read
    }
  }
};

}  // namespace blockfuse::attn::sm90
