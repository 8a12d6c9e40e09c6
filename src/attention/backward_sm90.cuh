// Internal: the sm90a (Hopper) attention backward's dK/dV kernel: wgmma, TMA and warp
// specialisation, FlashAttention-3's design (docs/attention.md#backward-sm90a). dQ goes into
// BwdParams::dq_accum by fp32 bulk reductions of staged blocks, in any order (non-deterministic mode)
// or, with kDeterministic, one key block after another per query block (the last first: dq_turn),
// ordered by a counter per (query block, head) (FlashAttention-3's deterministic mode). The Dsum pass
// before it and the dQ conversion after it are the sm80 family's kernels (backward_sm80.cuh), which
// are plain CUDA.
//
// One CTA per (128-key block, KV head, sequence), 384 threads: warpgroup 0 is the producer (one
// thread issues every TMA load) and, in the deterministic mode, the dQ writer (warp 1: the turns and
// the bulk reductions of the consumers' staged dQ), warpgroups 1 and 2 the consumers, 64 keys each (every
// wgmma is an m64 atom with the keys as its rows). K and V of the block are loaded once; then, for
// every query head of the KV group and every 64-row query block that sees a key of the block, Q and
// dO stream through a ring of kStages stages. Per step each consumer warpgroup computes, with the
// keys as rows (the transposed problem, so dK and dV accumulate in registers):
//   Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ   SS wgmma, both operands K-major in shared memory;
//   Pᵀ = exp2(Sᵀ·scale_log2 − lse·log2 e) where visible, dSᵀ = Pᵀ ∘ (dPᵀ − Dsum) [∘ (1 − tanh²)];
//   dV += Pᵀ·dO, dK += dSᵀ·Q     RS wgmma: A from registers (the m64n64 accumulator *is* the A
//                                 fragment, acc_as_a_sm90), B = dOᵀ / Qᵀ read MN-major from the stage;
//   dQ += dS·K                    dSᵀ written to shared memory (MN-major for A); SS wgmma, D/2
//                                 columns a warpgroup over both warpgroups' keys; staged in shared
//                                 memory in dq_accum's own layout (dq_accum_col) and added by one
//                                 cp.reduce.async.bulk of the CTA's whole 64-row block.
// dK (× scale) and dV are stored from registers at the end: rows past the sequence are not stored.
// Masked and out-of-sequence pairs get P = dS = 0 explicitly (not by multiplying: 0 · NaN is NaN).
// TMA zero-fills rows past the tensors. Varlen: a box running past a sequence's end reads the next
// sequence's rows, which the consumers zero in shared memory (K, V once; Q and dO per partial block)
// before any wgmma reads them, since 0 · NaN = NaN in the products.
//
// No function call may be left in the kernel (a call makes ptxas serialise every wgmma, warning
// C7510): every part is force-inlined.
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

#include "attention/backward_blocks.h"
#include "attention/backward_params.h"
#include "attention/mask.cuh"
#include "attention/softmax.cuh"
#include "attention/traits_sm90.cuh"

namespace blockfuse::attn::sm90::bwd {

using namespace cute;

template <class Element_, int kHeadDim_, int kStages_>
struct BwdTraits {
  using Element = Element_;  // cutlass::bfloat16_t or cutlass::half_t
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = 128;  // keys per CTA: two consumer warpgroups of 64
  static constexpr int kKeysPerWg = 64;
  static constexpr int kBlockM = 64;   // query rows per step
  static constexpr int kStages = kStages_;
  static constexpr int kConsumerWgs = 2;
  static constexpr int kThreads = 128 * (1 + kConsumerWgs);
  // 24 · 128 + 240 · 256 = 168 · 384, what the launch allocates (__launch_bounds__ of 384 threads):
  // the consumers' setmaxnreg.inc waits until the producer's dec has released the difference, so a
  // larger producer count hangs the CTA. (At 24 the deterministic kernels spill 8 (D = 64) and 20
  // (D = 128) bytes in the producer warpgroup: a few local accesses a step.)
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "the backward's head dims");

  using D = Int<kHeadDim>;
  using BM = Int<kBlockM>;
  using WgN = Int<kKeysPerWg>;

  // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: m64 (keys) n64 (queries) k = D, both K-major.
  using TiledMmaSdP = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<WgN, BM, D>>()));
  // dV += Pᵀ·dO and dK += dSᵀ·Q: m64 (keys) n = D k64 (queries); A from registers, B MN-major.
  using TiledMmaKV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<WgN, D, BM>, GMMA::Major::K, GMMA::Major::MN>()));
  // dQ = dS·K by columns (FlashAttention-3's split): warpgroup w computes D's columns
  // [w·D/2, (w + 1)·D/2) over all 128 keys of the block (both warpgroups' dS, two calls of k64), so
  // a step adds each query row's dQ once per CTA (16 or 32 accumulator registers beside dK and dV).
  // A = dS and B = Kᵀ, both MN-major; a column half of Kᵀ must be whole swizzle atoms along D: at
  // D = 128 64 columns of the 128-byte swizzle, at D = 64 32 columns, so K is stored with the
  // 64-byte swizzle there (SmemAtomK; with the 128-byte one each warpgroup took all 64 columns over
  // its own keys and the CTA reduced two partials a step).
  static constexpr int kDqSlice = kHeadDim / 2;
  using TiledMmaDQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<BM, Int<kDqSlice>, WgN>, GMMA::Major::MN, GMMA::Major::MN>()));

  using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemAtomK = conditional_t<kHeadDim == 64, GMMA::Layout_K_SW64_Atom<Element>, SmemAtom>;
  // A 64 × D box (every TMA load: a K or V slice, a Q or dO stage), K's with its own swizzle.
  using SmemLayoutBox = decltype(tile_to_shape(SmemAtom{}, Shape<_64, D>{}));
  using SmemLayoutBoxK = decltype(tile_to_shape(SmemAtomK{}, Shape<_64, D>{}));
  // K and V: one 64-key slice per consumer warpgroup, each contiguous.
  using SmemLayoutK = decltype(tile_to_shape(SmemAtomK{}, Shape<WgN, D, Int<kConsumerWgs>>{}));
  using SmemLayoutV = decltype(tile_to_shape(SmemAtom{}, Shape<WgN, D, Int<kConsumerWgs>>{}));
  // Kᵀ (D, keys) over one slice: the B operand of dQ, MN-major (D contiguous).
  using SmemLayoutKt = decltype(composition(SmemLayoutBoxK{}, make_ordered_layout(Shape<D, WgN>{}, Step<_2, _1>{})));
  // Q and dO stages (queries, D, stages), and their transposed views (D, queries, stages).
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<BM, D, Int<kStages>>{}));
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_ordered_layout(Shape<D, BM, Int<kStages>>{}, Step<_2, _1, _3>{})));
  // dS (queries, keys) of one warpgroup, MN-major (queries contiguous): the A operand of dQ.
  using SmemLayoutDS = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{}, Shape<BM, WgN>{}));

  using PipelineQdO = cutlass::PipelineTmaAsync<kStages>;

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>, 1024> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutV>, 1024> v;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>, 1024> dout;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutDS> * kConsumerWgs, 1024> ds;
    // Per step parity and warpgroup: the step's LSE (exp2 units), then Dsum (read as pairs).
    alignas(16) float stats[2][kConsumerWgs][2][kBlockM];
    // A step's dQ block, [64][D] fp32 in dq_accum's layout (each row's 32-byte chunks permuted by
    // the global row % 8, dq_accum_col: the 8 rows of a warp's float2 stores then hit distinct banks),
    // each warpgroup's columns; added into dq_accum's contiguous 64-row span by one bulk reduction
    // (cp.reduce.async.bulk).
    alignas(128) float dq_stage[kBlockM * kHeadDim];
    typename PipelineQdO::SharedStorage pipe;
    uint64_t kv_full;  // ClusterTransactionBarrier::ValueType: K and V of the block landed
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "Hopper allows 227 KB of shared memory per block");
  static_assert(cosize_v<SmemLayoutBox> * int(sizeof(Element)) % 1024 == 0 &&
                    cosize_v<SmemLayoutBoxK> == cosize_v<SmemLayoutBox> &&
                    cosize_v<SmemLayoutDS> * int(sizeof(Element)) % 1024 == 0,
                "every slice, stage and dS buffer starts on a 1024-byte swizzle-pattern boundary");

  static constexpr uint32_t kBoxBytes = 64 * kHeadDim * sizeof(Element);
  static_assert(sizeof(Element) == 2 && kBlockM == 64, "ds_byte_offset: 16-bit dS, one swizzle atom of queries");

  using Tma = decltype(make_tma_copy(SM90_TMA_LOAD{},
                                     tma_gmem_view<kHeadDim>(static_cast<const Element*>(nullptr), 0, 0, 0, 0, 0, 0),
                                     SmemLayoutBox{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{},
                                      tma_gmem_view<kHeadDim>(static_cast<const Element*>(nullptr), 0, 0, 0, 0, 0, 0),
                                      SmemLayoutBoxK{}));
};

template <class Traits>
struct BwdSm90Params : BwdParams {
  typename Traits::Tma tma_q;
  typename Traits::TmaK tma_k;
  typename Traits::Tma tma_v, tma_do;
  int rows_q = 0, rows_k = 0;  // rows of the TMA views: seqlen (batched) or total (varlen)
  bool key_block_major = false;  // grid (heads_kv, key blocks, batch): backward_key_block_major
  int section_heads = 1;         // unordered, key_block_major: KV heads per section (unordered_cta)
};

// Byte offset of dS element (query q, key k) in a warpgroup's buffer (SmemLayoutDS: 16-bit, MN-major,
// 128-byte swizzle, 64 queries deep, from a 1024-byte aligned base): key k's row of 128 bytes, whose
// 16-byte chunks the swizzle permutes by k % 8. tests/attention/test_attention_backward_layout_sm90.cu
// checks it against cute's layout.
CUTE_HOST_DEVICE constexpr uint32_t ds_byte_offset(int q, int k) {
  return uint32_t(k) * 128u + ((uint32_t(q / 8) ^ uint32_t(k % 8)) << 4) + uint32_t(q % 8) * 2u;
}

// dSᵀ's store by stmatrix: a warp's 16 keys × 64 queries are sixteen 8×8 (key, query) matrices (i, bb):
// keys 16 · warp + 8i + (0..7), queries 8bb + (0..7), whose fragment in a lane (row lane / 4, columns
// 2 (lane % 4) + 0, 1) is the accumulator's pair (i, bb). stmatrix.x4 number g (0..3) stores the
// matrices (i, bb) = (j % 2, 2g + j / 2) from registers j = 0..3; lane l gives the address of row l % 8
// of matrix l / 8, one 16-byte chunk (a key's 8 queries stay contiguous under the swizzle). The offset
// for g is that for 0 XOR g · 32 (the chunk bits of the rest are clear). tests/attention/
// test_attention_backward_layout_sm90.cu replays the instruction's semantics against cute's layouts.
CUTE_HOST_DEVICE constexpr uint32_t ds_stsm_row_offset(int warp_in_group, int lane, int g) {
  return ds_byte_offset((2 * g + lane / 16) * 8, warp_in_group * 16 + 8 * ((lane / 8) % 2) + lane % 8);
}

// Named barriers (cutlass::arch::NamedBarrier ids, which it offsets past the 8 it reserves, so none
// is __syncthreads' 0).
inline constexpr uint32_t kWgBarrier = 2;    // 2 + wg: one consumer warpgroup (128 threads)
inline constexpr uint32_t kBothBarrier = 4;  // both consumer warpgroups (256 threads)
// The dQ writer's handshake with the consumers (the deterministic mode): "full", the stage written
// (the consumers arrive, the writer waits); "empty", the writer's bulk reduction has read it (the
// writer arrives, the consumers wait before writing it again).
inline constexpr uint32_t kDqFullBarrier = 0;
inline constexpr uint32_t kDqEmptyBarrier = 5;

// One sequence's geometry as this CTA sees it.
struct BwdSeq {
  int len_q, len_k, offset_q, offset_k;
  int m_first, m_count;  // the query blocks that see a key of this CTA's block
};

template <class Params>
CUTE_DEVICE BwdSeq bwd_sequence(Params const& p, int b, int n0) {
  BwdSeq s{p.seqlen_q, p.seqlen_k, 0, 0, 0, 0};
  if (p.cu_seqlens_q != nullptr) {
    s.offset_q = p.cu_seqlens_q[b], s.len_q = p.cu_seqlens_q[b + 1] - s.offset_q;
    s.offset_k = p.cu_seqlens_k[b], s.len_k = p.cu_seqlens_k[b + 1] - s.offset_k;
  }
  const QueryBlocks qb = query_blocks_of_key_block(s.len_q, s.len_k, p.window_left, p.window_right, n0, 128, 64);
  s.m_first = qb.first, s.m_count = qb.count;
  return s;
}

template <class Mma, class FragA, class FragB, class Acc>
CUTE_DEVICE void gemm_ss(Mma& mma, FragA const& tA, FragB const& tB, Acc& acc, bool zero) {
  warpgroup_fence_operand(acc);
  warpgroup_arrive();
  mma.accumulate_ = zero ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(tA); ++k) {
    cute::gemm(mma, tA(_, _, k), tB(_, _, k), acc);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(acc);
}

// Deterministic mode: the counter of a (query block, head) reaches `expected` when every earlier
// addition in dq_turn's order has been made (one per key block: the CTA adds one block a step). The
// dQ writer's thread spins with acquire loads. Deadlock-free because a CTA waits only for CTAs
// launched before it (later key blocks of the same KV head and sequence, launched first), which the
// hardware dispatches first.
// A wait gives up after 2^27 polls (each after a 64 ns back-off: several seconds; a legitimate wait
// is the steps of the earlier key blocks, microseconds to milliseconds) and adds out of turn: a broken
// order then costs dq's repeatability, which the GPU tests check, instead of hanging the launch. (A
// __trap there, or a clock64 bound, made ptxas spill 1.6 KB in this kernel.)
CUTE_DEVICE void dq_turn_wait(const int* sem, int expected) {
  for (uint32_t polls = 0;; ++polls) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(sem) : "memory");
    if (v >= expected) break;
    if (polls >= (1u << 27)) break;
    __nanosleep(64);
  }
}

// Adds a staged 64-row dQ block into dq_accum's contiguous span at `dst` by one bulk reduction, as
// its own bulk group (the writer warp and the unordered mode's issuing thread both).
CUTE_DEVICE void dq_reduce_block(float* dst, const float* stage, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
               ::"l"(dst), "r"(cute::cast_smem_ptr_to_uint(stage)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

template <class Traits, bool kDeterministic>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    attention_bwd_dkdv_sm90(const __grid_constant__ BwdSm90Params<Traits> p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = typename Traits::Element;
  using D = typename Traits::D;
  using BM = typename Traits::BM;
  using WgN = typename Traits::WgN;
  constexpr int kHeadDim = Traits::kHeadDim;
  using Pipeline = typename Traits::PipelineQdO;
  using PipeState = typename Pipeline::PipelineState;
  using Storage = typename Traits::SharedStorage;
  using KVBarrier = cutlass::arch::ClusterTransactionBarrier;

  extern __shared__ __align__(1024) char smem_raw[];
  Storage& smem = *reinterpret_cast<Storage*>(smem_raw);
  if (threadIdx.x == 0 && (cute::cast_smem_ptr_to_uint(smem_raw) & 1023u) != 0) __trap();

  const BwdCta cta = kDeterministic ? deterministic_cta(blockIdx.x, blockIdx.y, gridDim.x, gridDim.y, p.key_block_major)
                                    : unordered_cta(blockIdx.x, blockIdx.y, gridDim.x, gridDim.y, p.key_block_major, p.section_heads);
  const int n_block = cta.key_block, hk = cta.head, b = blockIdx.z;
  const int n0 = n_block * Traits::kBlockN;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const BwdSeq sq = bwd_sequence(p, b, n0);
  if (n0 >= sq.len_k) return;  // a varlen sequence shorter than the grid's longest: every thread leaves
  const int steps = sq.m_count * p.group;  // (query head of the group, query block), block fastest

  // Warp-uniform (a shuffle from lane 0): the warpgroup's shared-memory slices, and so the wgmma
  // descriptors built from them, stay in uniform registers (from threadIdx.x / 128, an R2UR a wgmma).
  const int warp_group = cutlass::canonical_warp_group_idx();
  typename Pipeline::Params pp;
  pp.transaction_bytes = 2 * Traits::kBoxBytes;  // Q and dO of one step on one barrier
  pp.role = warp_group == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = 128 * Traits::kConsumerWgs;
  Pipeline pipe(smem.pipe, pp, Shape<_1, _1, _1>{});
  if (threadIdx.x == 0) {
    KVBarrier::init(&smem.kv_full, 1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  const int view = varlen ? 0 : b;
  const int64_t q_row0 = varlen ? int64_t(sq.offset_q) : int64_t(b) * p.seqlen_q;  // dq_accum's row of query 0
  // dq_accum's span of (query head, 64-row block m), and the bytes of one block.
  auto dq_block = [&](int head, int m) {
    return p.dq_accum + (int64_t(head) * p.dq_accum_head_rows + q_row0 + int64_t(m) * Traits::kBlockM) * kHeadDim;
  };
  constexpr uint32_t kDqBlockBytes = Traits::kBlockM * kHeadDim * sizeof(float);
  // The threads of a handshake with the writer warp: both consumer warpgroups and the writer warp.
  constexpr int kDqHandshake = 256 + 32;
  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (steps == 0) return;
    if constexpr (kDeterministic) {
      if (threadIdx.x / 32 == 1) {
        // ---- dQ writer (warp 1; the deterministic mode) ----
        // Per step: wait until the consumers have written the stage, wait for the turn (one addition
        // per key block), add it into dq_accum's block by one bulk reduction, wait until that is
        // complete, pass the turn, and hand the stage back. The consumers wait only when the writer
        // is a whole step behind. (The unordered mode has no turns: there a consumer thread issues
        // the reduction, which measured 4-6 % faster than the writer on the H100; docs/attention.md.)
        const bool leader = threadIdx.x % 32 == 0;
        for (int step = 0; step < steps; ++step) {
          const int head = hk * p.group + step / sq.m_count, m = sq.m_first + step % sq.m_count;
          int turn = 0;
          int* sem = nullptr;
          if (leader) {
            const QueryBlocks kb = key_blocks_of_query_block(sq.len_q, sq.len_k, p.window_left, p.window_right,
                                                             m * Traits::kBlockM, Traits::kBlockM, Traits::kBlockN);
            turn = dq_turn(kb, n_block);
            sem = p.dq_semaphore + (q_row0 + int64_t(m) * Traits::kBlockM) * p.heads_q + head;
          }
          cutlass::arch::NamedBarrier::arrive_and_wait(kDqHandshake, kDqFullBarrier);
          if (leader) {
            dq_turn_wait(sem, turn);
            // The acquire above ordered before this thread's async-proxy reduction of the same rows.
            asm volatile("fence.proxy.async.global;" ::: "memory");
            dq_reduce_block(dq_block(head, m), smem.dq_stage, kDqBlockBytes);
            // The reduction complete (not only read) and ordered before the release that passes the
            // turn (FlashAttention-3's deterministic dQ does the same with its TMA reductions).
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
            asm volatile("fence.proxy.async.global;" ::: "memory");
            __threadfence();
            asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(sem) : "memory");
          }
          __syncwarp();
          if (step + 1 < steps) cutlass::arch::NamedBarrier::arrive(kDqHandshake, kDqEmptyBarrier);
        }
        return;
      }
    }
    // ---- producer (thread 0) ----
    if (threadIdx.x != 0) return;
    Tensor mQ = p.tma_q.get_tma_tensor(make_shape(p.rows_q, D{}, p.heads_q, varlen ? 1 : p.batch));
    Tensor mdO = p.tma_do.get_tma_tensor(make_shape(p.rows_q, D{}, p.heads_q, varlen ? 1 : p.batch));
    Tensor mK = p.tma_k.get_tma_tensor(make_shape(p.rows_k, D{}, p.heads_kv, varlen ? 1 : p.batch));
    Tensor mV = p.tma_v.get_tma_tensor(make_shape(p.rows_k, D{}, p.heads_kv, varlen ? 1 : p.batch));
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutK{});
    Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Traits::SmemLayoutV{});
    Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQ{});
    Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename Traits::SmemLayoutQ{});
    auto tma_k = p.tma_k.get_slice(_0{});
    auto tma_v = p.tma_v.get_slice(_0{});
    auto tma_q = p.tma_q.get_slice(_0{});
    auto tma_do = p.tma_do.get_slice(_0{});
    Tensor tKgK = tma_k.partition_S(local_tile(domain_offset(make_coord(sq.offset_k, _0{}), mK(_, _, hk, view)),
                                               Shape<_64, D>{}, make_coord(_, _0{})));
    Tensor tVgV = tma_v.partition_S(local_tile(domain_offset(make_coord(sq.offset_k, _0{}), mV(_, _, hk, view)),
                                               Shape<_64, D>{}, make_coord(_, _0{})));
    Tensor tKsK = tma_k.partition_D(sK);
    Tensor tVsV = tma_v.partition_D(sV);
    KVBarrier::arrive_and_expect_tx(&smem.kv_full, 4 * Traits::kBoxBytes);
    CUTE_UNROLL
    for (int s = 0; s < Traits::kConsumerWgs; ++s) {
      copy(p.tma_k.with(smem.kv_full), tKgK(_, _, _, 2 * n_block + s), tKsK(_, _, _, s));
      copy(p.tma_v.with(smem.kv_full), tVgV(_, _, _, 2 * n_block + s), tVsV(_, _, _, s));
    }
    Tensor tQsQ = tma_q.partition_D(sQ);
    Tensor tdOsdO = tma_do.partition_D(sdO);
    PipeState st = cutlass::make_producer_start_state<Pipeline>();
    for (int step = 0; step < steps; ++step) {
      const int head = hk * p.group + step / sq.m_count, m = sq.m_first + step % sq.m_count;
      Tensor tQgQ = tma_q.partition_S(local_tile(domain_offset(make_coord(sq.offset_q, _0{}), mQ(_, _, head, view)),
                                                 Shape<_64, D>{}, make_coord(_, _0{})));
      Tensor tdOgdO = tma_do.partition_S(local_tile(
          domain_offset(make_coord(sq.offset_q, _0{}), mdO(_, _, head, view)), Shape<_64, D>{}, make_coord(_, _0{})));
      pipe.producer_acquire(st);
      copy(p.tma_q.with(*pipe.producer_get_barrier(st)), tQgQ(_, _, _, m), tQsQ(_, _, _, st.index()));
      copy(p.tma_do.with(*pipe.producer_get_barrier(st)), tdOgdO(_, _, _, m), tdOsdO(_, _, _, st.index()));
      ++st;
    }
    return;
  }

  // ---- consumers ----
  cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
  const int wg = warp_group - 1;
  const int t = threadIdx.x % 128;
  const int lane = threadIdx.x % 32;
  const int warp_in_group = t / 32;
  const int key_row0 = wg * Traits::kKeysPerWg + warp_in_group * 16 + lane / 4;  // within the block
  const int col_lane = (lane % 4) * 2;

  typename Traits::TiledMmaSdP mma_sdp;
  typename Traits::TiledMmaKV mma_kv;
  typename Traits::TiledMmaDQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(t);
  auto thr_kv = mma_kv.get_thread_slice(t);
  auto thr_dq = mma_dq.get_thread_slice(t);
  constexpr int kSlice = cosize_v<typename Traits::SmemLayoutBox>;
  Tensor sKw = make_tensor(make_smem_ptr(smem.k.data() + wg * kSlice), typename Traits::SmemLayoutBoxK{});
  Tensor sVw = make_tensor(make_smem_ptr(smem.v.data() + wg * kSlice), typename Traits::SmemLayoutBox{});
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename Traits::SmemLayoutQ{});
  Tensor sQt = make_tensor(make_smem_ptr(smem.q.data()), typename Traits::SmemLayoutQt{});
  Tensor sdOt = make_tensor(make_smem_ptr(smem.dout.data()), typename Traits::SmemLayoutQt{});
  // The CTA's dQ stage, which the writer warp adds into dq_accum in the deterministic mode, and
  // otherwise dq_issuer (the CTA's thread 0) with one bulk reduction a step.
  float* const dq_stage = smem.dq_stage;
  const bool dq_issuer = !kDeterministic && t == 0 && wg == 0;

  Tensor tSrK = thr_sdp.make_fragment_A(thr_sdp.partition_A(sKw));    // (MMA, 1, D/16)
  Tensor tSrV = thr_sdp.make_fragment_A(thr_sdp.partition_A(sVw));
  Tensor tSrQ = thr_sdp.make_fragment_B(thr_sdp.partition_B(sQ));     // (MMA, 1, D/16, stages)
  Tensor tSrdO = thr_sdp.make_fragment_B(thr_sdp.partition_B(sdO));
  Tensor tKVrdOt = thr_kv.make_fragment_B(thr_kv.partition_B(sdOt));  // (MMA, 1, BM/16, stages)
  Tensor tKVrQt = thr_kv.make_fragment_B(thr_kv.partition_B(sQt));
  // dQ: both warpgroups' dS and K slices, this warpgroup's columns of Kᵀ.
  const int dq_col0 = wg * Traits::kDqSlice;
  constexpr int kDsSlice = cosize_v<typename Traits::SmemLayoutDS>;
  Tensor tQrdS0 = thr_dq.make_fragment_A(
      thr_dq.partition_A(make_tensor(make_smem_ptr(smem.ds.data()), typename Traits::SmemLayoutDS{})));
  Tensor tQrdS1 = thr_dq.make_fragment_A(
      thr_dq.partition_A(make_tensor(make_smem_ptr(smem.ds.data() + kDsSlice), typename Traits::SmemLayoutDS{})));
  // Kᵀ of K slices 0 and 1, this warpgroup's columns.
  Tensor sKt0 = make_tensor(make_smem_ptr(smem.k.data()), typename Traits::SmemLayoutKt{});
  Tensor sKt1 = make_tensor(make_smem_ptr(smem.k.data() + kSlice), typename Traits::SmemLayoutKt{});
  Tensor tQrKt0 = thr_dq.make_fragment_B(thr_dq.partition_B(
      local_tile(sKt0, Shape<Int<Traits::kDqSlice>, WgN>{}, make_coord(dq_col0 / Traits::kDqSlice, _0{}))));
  Tensor tQrKt1 = thr_dq.make_fragment_B(thr_dq.partition_B(
      local_tile(sKt1, Shape<Int<Traits::kDqSlice>, WgN>{}, make_coord(dq_col0 / Traits::kDqSlice, _0{}))));

  Tensor acc_dv = partition_fragment_C(mma_kv, Shape<WgN, D>{});
  Tensor acc_dk = partition_fragment_C(mma_kv, Shape<WgN, D>{});
  clear(acc_dv);
  clear(acc_dk);
  Tensor rP = make_tensor<Element>(partition_fragment_C(mma_sdp, Shape<WgN, BM>{}).layout());
  Tensor rdS = make_tensor<Element>(partition_fragment_C(mma_sdp, Shape<WgN, BM>{}).layout());
  Tensor tKVrP = make_tensor(rP.data(), acc_as_a_sm90(rP.layout()));
  Tensor tKVrdS = make_tensor(rdS.data(), acc_as_a_sm90(rdS.layout()));
  static_assert(decltype(size<2>(tKVrP))::value == Traits::kBlockM / 16, "one k16 slice of P per 16 queries");

  const SoftCap softcap{p.softcap_mul};
  const int64_t lse_base =
      varlen ? int64_t(sq.offset_q) : int64_t(b) * p.lse_batch_stride;  // + head · lse_head_stride + row
  // This thread's stage rows (16 · warp + lane / 4 + 8i of a block starting at a multiple of 64) all
  // have global row % 8 = dq_swz: dq_accum_col's permutation for them.
  const int dq_swz = int((q_row0 + lane / 4) & 7);

  if (steps > 0) {
    KVBarrier::wait(&smem.kv_full, 0);
    // Varlen: K / V rows of the block past the sequence's end hold the next sequence's rows; zero
    // them (this warpgroup's slice) before any wgmma reads them (the other warpgroup's dQ reads this
    // K slice only after the both-warpgroup barrier of its first step).
    const int valid_k = sq.len_k - n0 - wg * Traits::kKeysPerWg;
    if (varlen && valid_k < Traits::kKeysPerWg && sq.offset_k + sq.len_k < p.rows_k) {
      constexpr int kChunks = kHeadDim / 8;
      for (int i = t; i < (Traits::kKeysPerWg - max(valid_k, 0)) * kChunks; i += 128) {
        const int r = max(valid_k, 0) + i / kChunks, c = (i % kChunks) * 8;
        *reinterpret_cast<uint4*>(raw_pointer_cast(&sKw(r, c))) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(raw_pointer_cast(&sVw(r, c))) = make_uint4(0, 0, 0, 0);
      }
      cutlass::arch::fence_view_async_shared();
      cutlass::arch::NamedBarrier::arrive_and_wait(128, kWgBarrier + wg);
    }
  }

  // Thread t's statistic of a step: the LSE (t < 64) or Dsum of query row t % 64 of the step's
  // block, 0 past the sequence, loaded a step ahead so that the step's work hides its latency.
  // A step's (query head, query block), carried from step to step (block fastest) rather than
  // divided out of the step index: an integer division a step in the consumers' issue stream.
  struct StepAt {
    int head, m;
  };
  auto next_step = [&](StepAt a) {
    return a.m + 1 < sq.m_first + sq.m_count ? StepAt{a.head, a.m + 1} : StepAt{a.head + 1, sq.m_first};
  };
  // Dsum is laid out like the LSE: one source pointer a thread, chosen once.
  const float* const stat_src = (t < Traits::kBlockM ? p.lse : p.dsum) + lse_base;
  auto load_stat = [&](StepAt at) -> float {
    const int i = at.m * Traits::kBlockM + t % Traits::kBlockM;
    return i < sq.len_q ? stat_src[int64_t(at.head) * p.lse_head_stride + i] : 0.f;
  };
  StepAt at{hk * p.group, sq.m_first};
  // The query blocks this warpgroup's key slice sees whole (block_fully_visible, decided once).
  const BlockRange full = fully_visible_query_blocks(sq.len_q, sq.len_k, p.window_left, p.window_right,
                                                     n0 + wg * Traits::kKeysPerWg, Traits::kKeysPerWg, Traits::kBlockM);
  float stat_next = steps > 0 ? load_stat(at) : 0.f;
  // Thread t's statistic into the buffer of a step's parity, the LSE scaled to exp2 units here, long
  // after its load (scaled at the load, the product waited for it: 3 % of the consumers' time). The
  // buffer's previous readers, two steps back, are past the barrier that ended their step, and the
  // step's readers come after the barrier that ends the one before it: no barrier of its own.
  // (Its address and scale chosen once: x · 1 is x, bit for bit.)
  float* const stat_dst = &smem.stats[0][wg][t / Traits::kBlockM][t % Traits::kBlockM];
  constexpr int kStatParity = Traits::kConsumerWgs * 2 * Traits::kBlockM;  // floats between the parities
  static_assert(sizeof(Storage::stats[0]) == kStatParity * sizeof(float), "stats[parity][wg][lse/dsum][row]");
  const float stat_scale = t < Traits::kBlockM ? 1.4426950408889634f : 1.f;
  auto store_stat = [&](int step, float x) { stat_dst[(step & 1) * kStatParity] = x * stat_scale; };
  if (steps > 0) {
    store_stat(0, stat_next);
    cutlass::arch::NamedBarrier::arrive_and_wait(128, kWgBarrier + wg);
  }

  PipeState st;
  for (int step = 0; step < steps; ++step, at = next_step(at)) {
    const int head = at.head, m = at.m;
    const int stage = st.index();
    pipe.consumer_wait(st);
    // Varlen: the block's query rows past the sequence's end (the next sequence's) zeroed in Q and
    // dO, half by each warpgroup, before either reads them.
    const int valid_q = sq.len_q - m * Traits::kBlockM;
    if (varlen && valid_q < Traits::kBlockM && sq.offset_q + sq.len_q < p.rows_q) {
      constexpr int kChunks = kHeadDim / 8;
      for (int i = wg * 128 + t; i < (Traits::kBlockM - valid_q) * kChunks; i += 256) {
        const int r = valid_q + i / kChunks, c = (i % kChunks) * 8;
        *reinterpret_cast<uint4*>(raw_pointer_cast(&sQ(r, c, stage))) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(raw_pointer_cast(&sdO(r, c, stage))) = make_uint4(0, 0, 0, 0);
      }
      cutlass::arch::fence_view_async_shared();
      cutlass::arch::NamedBarrier::arrive_and_wait(256, kBothBarrier);
    }

    Tensor acc_s = partition_fragment_C(mma_sdp, Shape<WgN, BM>{});
    Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<WgN, BM>{});
    gemm_ss(mma_sdp, tSrK, tSrQ(_, _, _, stage), acc_s, true);
    gemm_ss(mma_sdp, tSrV, tSrdO(_, _, _, stage), acc_dp, true);

    // The next step's LSE / Dsum load, whose latency this step's work hides; it is stored at the
    // step's end (store_stat). This step's were stored a step ago, read below by column.
    constexpr int kBlocks = Traits::kBlockM / 8;
    if (step + 1 < steps) stat_next = load_stat(next_step(at));
    const float* const lse2 = smem.stats[step & 1][wg][0];
    const float* const dsum = smem.stats[step & 1][wg][1];

    Tensor s = make_tensor(acc_s.data(), acc_rowcol_sm90(acc_s.layout()));
    Tensor dp = make_tensor(acc_dp.data(), acc_rowcol_sm90(acc_dp.layout()));
    if (!softcap.enabled()) {
      // Pᵀ while dPᵀ's wgmma still runs, then dSᵀ.
      warpgroup_wait<1>();  // Sᵀ done
      warpgroup_fence_operand(acc_s);
      // Most blocks of a long sequence are wholly visible: those skip the per-element test, here and
      // in dSᵀ below.
      const bool whole = m >= full.first && m < full.end;
      if (whole) {
        CUTE_UNROLL
        for (int i = 0; i < 2; ++i)
          CUTE_UNROLL
          for (int bb = 0; bb < kBlocks; ++bb)
            CUTE_UNROLL
            for (int j = 0; j < 2; ++j) {
              const int c = bb * 8 + col_lane + j;
              s(make_coord(i, 0), make_coord(j, bb)) = fast_exp2(s(make_coord(i, 0), make_coord(j, bb)) * p.scale_log2 - lse2[c]);
            }
      } else {
        CUTE_UNROLL
        for (int i = 0; i < 2; ++i) {
          const int key = n0 + key_row0 + 8 * i;
          CUTE_UNROLL
          for (int bb = 0; bb < kBlocks; ++bb)
            CUTE_UNROLL
            for (int j = 0; j < 2; ++j) {
              const int c = bb * 8 + col_lane + j, q = m * Traits::kBlockM + c;
              const bool vis = key_visible(q, key, sq.len_q, sq.len_k, p.window_left, p.window_right);
              s(make_coord(i, 0), make_coord(j, bb)) =
                  vis ? fast_exp2(s(make_coord(i, 0), make_coord(j, bb)) * p.scale_log2 - lse2[c]) : 0.f;
            }
        }
      }
      warpgroup_wait<0>();  // dPᵀ done
      warpgroup_fence_operand(acc_dp);
      // This thread's Dsum values first, unconditionally, as pairs: read inside the select below,
      // each would be a predicated load of its own.
      float2 dsum2[kBlocks];
      CUTE_UNROLL
      for (int bb = 0; bb < kBlocks; ++bb) dsum2[bb] = *reinterpret_cast<const float2*>(dsum + bb * 8 + col_lane);
      // dSᵀ = Pᵀ (dPᵀ − Dsum), as PyTorch computes it. Where pairs are masked it is 0 wherever Pᵀ is:
      // an invisible pair's dPᵀ may hold anything (rows zero-filled past a tensor, another sequence's
      // V). A wholly visible block skips that select (two instructions an element): there a visible
      // pair whose P underflowed gives 0 · (dPᵀ − Dsum), NaN only for an infinite dPᵀ, as in PyTorch.
      auto ds_pass = [&](auto kGuard) {
        CUTE_UNROLL
        for (int i = 0; i < 2; ++i)
          CUTE_UNROLL
          for (int bb = 0; bb < kBlocks; ++bb)
            CUTE_UNROLL
            for (int j = 0; j < 2; ++j) {
              const float pr = s(make_coord(i, 0), make_coord(j, bb));
              const float ds = pr * (dp(make_coord(i, 0), make_coord(j, bb)) - (j == 0 ? dsum2[bb].x : dsum2[bb].y));
              dp(make_coord(i, 0), make_coord(j, bb)) = decltype(kGuard)::value && pr == 0.f ? 0.f : ds;
            }
      };
      if (whole)
        ds_pass(cute::false_type{});
      else
        ds_pass(cute::true_type{});
    } else {
      warpgroup_wait<0>();  // Sᵀ and dPᵀ done
      // Pᵀ and dSᵀ in one pass (the tanh of a soft-cap is needed by both and kept by neither).
      CUTE_UNROLL
      for (int i = 0; i < 2; ++i) {
        const int key = n0 + key_row0 + 8 * i;
        CUTE_UNROLL
        for (int bb = 0; bb < kBlocks; ++bb)
          CUTE_UNROLL
          for (int j = 0; j < 2; ++j) {
            const int c = bb * 8 + col_lane + j, q = m * Traits::kBlockM + c;
            float x;
            asm("tanh.approx.f32 %0, %1;" : "=f"(x) : "f"(s(make_coord(i, 0), make_coord(j, bb)) * p.softcap_mul));
            const float dtanh = 1.f - x * x;
            const bool vis = key_visible(q, key, sq.len_q, sq.len_k, p.window_left, p.window_right);
            const float pr = vis ? fast_exp2(x * p.scale_log2 - lse2[c]) : 0.f;
            s(make_coord(i, 0), make_coord(j, bb)) = pr;
            dp(make_coord(i, 0), make_coord(j, bb)) =
                vis ? pr * (dp(make_coord(i, 0), make_coord(j, bb)) - dsum[c]) * dtanh : 0.f;
          }
      }
    }
    convert_fragment_into(acc_s, rP);
    convert_fragment_into(acc_dp, rdS);

    // dV += Pᵀ·dO (A from registers), running while dSᵀ is stored.
    warpgroup_fence_operand(acc_dv);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int k = 0; k < size<2>(tKVrP); ++k) cute::gemm(mma_kv, tKVrP(_, _, k), tKVrdOt(_, _, k, stage), acc_dv);
    warpgroup_commit_batch();
    warpgroup_fence_operand(acc_dv);

    // dSᵀ into shared memory as dS (queries, keys), from its 16-bit copy, before the dK wgmma takes
    // that copy as its A fragment (its registers may not be read until the wgmma retires); the
    // previous step's dQ wgmmas, which read this buffer, have retired (the barrier at its end).
    Tensor ds16 = make_tensor(rdS.data(), acc_rowcol_sm90(rdS.layout()));
    // Four stmatrix.x4 a warp (ds_stsm_row_offset) rather than sixteen 32-bit stores.
    {
      static_assert(kBlocks == 8, "four stmatrix.x4 of four 8x8 matrices cover a warp's 16 keys x 64 queries");
      const uint32_t row0 = cute::cast_smem_ptr_to_uint(smem.ds.data() + wg * cosize_v<typename Traits::SmemLayoutDS>) +
                            ds_stsm_row_offset(warp_in_group, lane, 0);
      CUTE_UNROLL
      for (int g = 0; g < 4; ++g) {
        uint32_t r[4];
        CUTE_UNROLL
        for (int j = 0; j < 4; ++j) {
          Element pair[2] = {ds16(make_coord(j % 2, 0), make_coord(0, 2 * g + j / 2)),
                             ds16(make_coord(j % 2, 0), make_coord(1, 2 * g + j / 2))};
          r[j] = *reinterpret_cast<uint32_t*>(pair);
        }
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(row0 ^ uint32_t(g << 5)),
                     "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                     : "memory");
      }
    }
    cutlass::arch::fence_view_async_shared();

    // Unordered: the previous step's bulk reduction has read the stage before it is written again
    // (the barrier below publishes that to the threads that write it; no pending group at step 0).
    if (dq_issuer) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    cutlass::arch::NamedBarrier::arrive_and_wait(256, kBothBarrier);  // both warpgroups' dS written

    // dQ (64 queries × this warpgroup's D/2 columns), then dK += dSᵀ·Q (A from registers); dQ goes
    // to the stage while dK's wgmma runs. The Q / dO stage is released once every wgmma that read it
    // (dV, dK) has retired.
    Tensor acc_dq = partition_fragment_C(mma_dq, Shape<BM, Int<Traits::kDqSlice>>{});
    gemm_ss(mma_dq, tQrdS0, tQrKt0, acc_dq, true);
    gemm_ss(mma_dq, tQrdS1, tQrKt1, acc_dq, false);
    warpgroup_fence_operand(acc_dk);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int k = 0; k < size<2>(tKVrdS); ++k) cute::gemm(mma_kv, tKVrdS(_, _, k), tKVrQt(_, _, k, stage), acc_dk);
    warpgroup_commit_batch();
    warpgroup_fence_operand(acc_dk);
    warpgroup_wait<1>();  // dV and dQ done; dK may still run
    warpgroup_fence_operand(acc_dq);
    Tensor dq = make_tensor(acc_dq.data(), acc_rowcol_sm90(acc_dq.layout()));
    // The partial into the stage, in dq_accum's layout, then into dq_accum by one bulk reduction of
    // the whole block. Rows past the sequence are stored as 0: the block's span may run into the next
    // sequence's rows (or the 64 padding rows past the last), where adding +0 changes nothing, while
    // their computed partial could be NaN from an infinite key. The barrier at the step's end also
    // orders every dQ wgmma (they read both warpgroups' dS) before the next step rewrites dS, and this
    // step's reads of the stats before the step after it rewrites their buffer.
    // Chunk bb of this thread's columns sits at byte (row base + dq_accum_col's chunk) = the bb = 0
    // address XOR bb · 32: bb's bits (5-6 at D = 64, 5-7 at 128) are clear in the row base and in
    // dq_col0's chunk offset (128 or 256 bytes for warpgroup 1).
    const int valid_rows = sq.len_q - m * Traits::kBlockM;
    // Deterministic: the writer has read the previous step's block out of the stage.
    if (kDeterministic && step > 0) cutlass::arch::NamedBarrier::arrive_and_wait(kDqHandshake, kDqEmptyBarrier);
    // Only a sequence's last query block has such rows: the select an element stays off the other
    // steps' path.
    if (valid_rows < Traits::kBlockM) {
      CUTE_UNROLL
      for (int i = 0; i < 2; ++i)
        if (warp_in_group * 16 + lane / 4 + 8 * i >= valid_rows) {
          CUTE_UNROLL
          for (int bb = 0; bb < Traits::kDqSlice / 8; ++bb)
            dq(make_coord(i, 0), make_coord(0, bb)) = dq(make_coord(i, 0), make_coord(1, bb)) = 0.f;
        }
    }
    CUTE_UNROLL
    for (int i = 0; i < 2; ++i) {
      const int r = warp_in_group * 16 + lane / 4 + 8 * i;
      const uint32_t addr0 = cute::cast_smem_ptr_to_uint(dq_stage) +
                             uint32_t((r * kHeadDim + dq_accum_col(dq_swz, dq_col0 + col_lane)) * sizeof(float));
      CUTE_UNROLL
      for (int bb = 0; bb < Traits::kDqSlice / 8; ++bb) {
        const float x = dq(make_coord(i, 0), make_coord(0, bb)), y = dq(make_coord(i, 0), make_coord(1, bb));
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr0 ^ uint32_t(bb << 5)), "f"(x), "f"(y) : "memory");
      }
    }
    warpgroup_wait<0>();
    pipe.consumer_release(st);
    ++st;
    cutlass::arch::fence_view_async_shared();  // the generic-proxy writes seen by the bulk copy
    // Deterministic: stage written, the writer warp takes it once every consumer thread has arrived.
    if constexpr (kDeterministic) cutlass::arch::NamedBarrier::arrive(kDqHandshake, kDqFullBarrier);
    if (step + 1 < steps) store_stat(step + 1, stat_next);
    cutlass::arch::NamedBarrier::arrive_and_wait(256, kBothBarrier);
    if (dq_issuer) dq_reduce_block(dq_block(head, m), dq_stage, kDqBlockBytes);
  }
  if (dq_issuer) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // complete before the CTA exits

  // dK (× scale) and dV out, rows past the sequence not stored.
  Tensor dk = make_tensor(acc_dk.data(), acc_rowcol_sm90(acc_dk.layout()));
  Tensor dv = make_tensor(acc_dv.data(), acc_rowcol_sm90(acc_dv.layout()));
  const int64_t k_batch = varlen ? 0 : int64_t(b);
  Element* const dk_base = static_cast<Element*>(p.dk) + k_batch * p.dk_batch_stride + int64_t(hk) * p.dk_head_stride;
  Element* const dv_base = static_cast<Element*>(p.dv) + k_batch * p.dv_batch_stride + int64_t(hk) * p.dv_head_stride;
  CUTE_UNROLL
  for (int i = 0; i < 2; ++i) {
    const int key = n0 + key_row0 + 8 * i;
    if (key >= sq.len_k) continue;
    const int64_t row = int64_t(sq.offset_k) + key;
    CUTE_UNROLL
    for (int bb = 0; bb < kHeadDim / 8; ++bb) {
      const int c = bb * 8 + col_lane;
      Element k2[2] = {Element(dk(make_coord(i, 0), make_coord(0, bb)) * p.scale),
                       Element(dk(make_coord(i, 0), make_coord(1, bb)) * p.scale)};
      Element v2[2] = {Element(dv(make_coord(i, 0), make_coord(0, bb))), Element(dv(make_coord(i, 0), make_coord(1, bb)))};
      *reinterpret_cast<uint32_t*>(dk_base + row * p.dk_row_stride + c) = *reinterpret_cast<uint32_t*>(k2);
      *reinterpret_cast<uint32_t*>(dv_base + row * p.dv_row_stride + c) = *reinterpret_cast<uint32_t*>(v2);
    }
  }
#else
  __trap();  // compiled for a target without sm90a features: never launched (the dispatcher checks)
#endif
}

}  // namespace blockfuse::attn::sm90::bwd
