// Internal: the sm90a (Hopper) attention forward kernel: wgmma, TMA and warp specialisation
// (docs/attention.md#design). This file assigns the warp roles; the parts are
//   traits_sm90.cuh     tile, stages, wgmma atoms, shared-memory layouts, the launch parameters;
//   tile_scheduler.cuh  which tiles a CTA walks, and each tile's sequence, mask and key range;
//   mainloop_sm90.cuh   the TMA producer, the wgmma consumers and the softmax between the GEMMs;
//   epilogue_sm90.cuh   O and LSE out.
//
// A CTA of 384 or 512 threads (one per SM: the shared memory allows no more) walks the tiles
// blockIdx.x, + gridDim.x, ...: 128 or 192 query rows of one (batch, head). The grid is persistent
// (one CTA per SM) where every tile does the same work and one CTA per tile under a causal mask or
// a window (attn::sm90_grid_ctas in params.h). Warpgroup 0 is the producer, warpgroups 1 to
// kConsumerWgs (2 or 3) the consumers, 64 query rows each. `setmaxnreg` gives the producer 24
// registers and each consumer thread 240 (two consumers) or 160 (three); at D = 128 the producer 40
// and the consumers 232 (Sm90Traits::kWideProducer, traits_sm90.cuh).
//
// P stays in registers. In the m64nN F32 accumulator layout (GMMA::CLayout_64xN,
// ((4,8,4),(2,2,N/8)) : ((128,1,16),(64,8,512)) in m + 64·n) a thread holds, per 8-column block b,
// columns 8b + 2·(lane % 4) + {0, 1} of rows r and r + 8. The RS A operand of the m64nDk16 wgmma
// holds, per k16 slice, exactly those elements of two adjacent 8-column blocks in the same order,
// so the score fragment ((2,2,N/8), 1, 1) re-read as ((2,2,2), 1, N/16) *is* P's A fragment
// (`acc_as_a_sm90`); tests/attention/test_attention_layout_sm90.cu checks it for every thread.
// TMA loads zero-fill rows past the sequence ends, so the key tail only needs the mask.
//
// No function call may be left in the kernel: a call makes ptxas serialise every wgmma (warning
// C7510). Every part is force-inlined (CUTE_DEVICE).
#pragma once

#include <cstdint>

#include "attention/epilogue_sm90.cuh"
#include "attention/mainloop_sm90.cuh"
#include "attention/mask.cuh"
#include "attention/softmax.cuh"
#include "attention/tile_scheduler.cuh"
#include "attention/traits_sm90.cuh"

namespace blockfuse::attn::sm90 {

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
  using Mainloop = MainloopSm90<Traits>;
  using Epilogue = EpilogueSm90<Traits>;
  using PipelineK = typename Traits::PipelineK;
  using PipelineV = typename Traits::PipelineV;
  using PipeState = typename PipelineK::PipelineState;
  using Storage = typename Traits::SharedStorage;

  extern __shared__ __align__(1024) char smem_raw[];
  Storage& smem = *reinterpret_cast<Storage*>(smem_raw);
  // TMA and wgmma swizzle absolute shared-memory addresses, CuTe's layouts (the epilogue's O
  // stores) swizzle offsets: they agree only on a 1024-byte-aligned base. Fail loudly if not.
  if (threadIdx.x == 0 && (cute::cast_smem_ptr_to_uint(smem_raw) & 1023u) != 0) __trap();

  // Warp-uniform (a shuffle from lane 0): the warpgroup's Q slice, and so the wgmma descriptors built
  // from it, stay in uniform registers.
  const int warp_group = cutlass::canonical_warp_group_idx();
  const int warp_in_group = (threadIdx.x / 32) % 4;

  const bool varlen = p.cu_seqlens_q != nullptr;
  const SoftCap softcap{p.softcap_mul};
  const TileScheduler<kBlockM, kBlockN, Sm90Params<Traits>> sched{p, varlen};

  // Barriers: warp 0 initialises both pipelines (PipelineTmaAsync's constructor) and Q's barriers.
  typename PipelineK::Params pk;
  pk.transaction_bytes = Traits::kKVStageBytes;
  pk.role = warp_group == 0 ? PipelineK::ThreadCategory::Producer : PipelineK::ThreadCategory::Consumer;
  pk.is_leader = threadIdx.x == 0;
  pk.num_consumers = 128 * Traits::kConsumerWgs;
  PipelineK pipe_k(smem.pipe_k, pk, Shape<_1, _1, _1>{});
  PipelineV pipe_v(smem.pipe_v, pk, Shape<_1, _1, _1>{});
  using QBarrier = typename Mainloop::QBarrier;
  using QEmptyBarrier = typename Mainloop::QEmptyBarrier;
  if (threadIdx.x == 0) {
    QBarrier::init(&smem.q_full, 1);
    QEmptyBarrier::init(&smem.q_empty, 128 * Traits::kConsumerWgs);
    for (int s = 0; s < 2; ++s) {
      cutlass::arch::ClusterBarrier::init(&smem.tile_full[s], 1);
      cutlass::arch::ClusterBarrier::init(&smem.tile_empty[s], 128 * Traits::kConsumerWgs + 1);  // + the loader
      cutlass::arch::ClusterBarrier::init(&smem.tile_taken[s], 1);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (warp_group == 0) {
    // ---- producer ----
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (warp_in_group == 0 && threadIdx.x == 0) Mainloop::load(p, smem, pipe_k, pipe_v, sched, varlen);
    if (threadIdx.x == 32 && sched.dynamic()) sched.schedule(smem);  // the dynamic walk's scheduler
    return;
  }

  // ---- consumers ----
  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
  const int wg = warp_group - 1;  // 0 .. kConsumerWgs - 1: this warpgroup's 64-row slice
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

  Tensor rP = make_tensor<Element>(partition_fragment_C(mma_qk, Shape<WgM, BN>{}).layout());
  Tensor tOrP = make_tensor(rP.data(), acc_as_a_sm90(rP.layout()));
  static_assert(decltype(size<2>(tOrP))::value == kBlockN / 16, "one k16 slice of P per 16 keys");
  Mainloop::sched_open(wg);

  int iter = 0;  // as the producer's
  for (int k = 0;; ++k) {
    const int64_t tile = sched.tile_of_step(smem, k);
    if (tile < 0 || tile >= sched.end()) break;
    const Tile tl = sched.tile_at(tile);
    if (sched.tile_is_empty(tl)) continue;
    const int row0 = tl.m_block * kBlockM + wg * Traits::kRowsPerWg + warp_in_group * 16 + lane / 4;

    OnlineSoftmax<2> softmax;
    Mainloop::mma(p, smem, pipe_k, pipe_v, st_k, st_v, mma_qk, mma_pv, tSrQ, tSrK, tOrV, rP, tOrP, acc_o, acc_o_rc,
                  softmax, tl, softcap, varlen, iter, wg, t, row0, col_lane);
    // With O staged apart, mma() released Q after the tile's last S wgmma. Otherwise O goes through
    // Q's buffer: the storing thread arrives once its store has read it (epilogue), the others here.
    if (!Traits::kStageO && t != 0) QEmptyBarrier::arrive(&smem.q_empty);

    Epilogue::store(p, smem, sOw, thr_pv, acc_o, acc_o_rc, softmax, tl, varlen, wg, t, lane, row0);
    ++iter;
  }
  Epilogue::store_tail(t);
#else
  // Compiled for a target without sm90a features: never launched (the dispatcher checks the device).
  __trap();
#endif
}

}  // namespace blockfuse::attn::sm90
