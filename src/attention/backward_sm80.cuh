// Internal: the attention backward on sm80+ (mma.sync m16n8k16, ldmatrix, cp.async; FlashAttention-2's
// algorithm, written without atomics so that it is deterministic):
//
//   bwd_dsum_kernel   Dsum_i = Σ_d dO_i·O_i per query row (fp32), one warp per row.
//   bwd_dkdv_kernel   one CTA per (64-key block, KV head, sequence): K and V of the block stay in
//                     shared memory; for each query head of the KV group and each 64-row query block
//                     that sees a key of the block (cp.async double buffer of Q and dO), each of the
//                     four warps recomputes Pᵀ for its 16 keys (Sᵀ = K·Qᵀ, exp2 against the forward's
//                     LSE) and accumulates dV += Pᵀ·dO, dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − Dsum), dK += dSᵀ·Q
//                     in fp32 registers. Summing over the group's heads in the loop is GQA's dK/dV.
//   bwd_dq_kernel     one CTA per (64-row query block, query head, sequence): Q and dO stay in shared
//                     memory; for each visible 64-key block (double buffer of K and V), each warp
//                     recomputes P for its 16 rows, dP = dO·Vᵀ, dS, and dQ += dS·K in fp32 registers.
//
// P is recomputed in both kernels instead of accumulating dQ with atomics: deterministic (the same
// inputs give the same bits) at the cost of a second QKᵀ and dO·Vᵀ. The non-deterministic mode
// (AttentionParams::deterministic = false) is FlashAttention-2's: the dK/dV kernel also stages dSᵀ in
// shared memory and adds dQ += dS·K for its 64 keys into an fp32 buffer with atomics
// (bwd_dkdv_kernel<..., true>), and bwd_dq_convert_kernel scales and rounds it into dq: five S²·D
// products instead of seven, with dq's bits depending on the order the atomics land in. With a soft-cap the score is
// cap·tanh(scale·qk / cap), whose derivative scale·(1 − tanh²) multiplies dS (tanh kept as fp16 pairs);
// the kernels are compiled with and without it (kSoftcap), so a call without one carries none of it.
// Supported head dims: 64 and 128 (dK and dV of 16 keys × D in fp32 registers per warp).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/backward_blocks.h"
#include "attention/backward_params.h"
#include "attention/params.h"
#include "common/cp_async.cuh"
#include "common/decode_loop.cuh"
#include "common/mma_sm80.cuh"

namespace blockfuse::attn::bwd {

using blockfuse::detail::cp_async16_zfill;
using blockfuse::detail::cp_async4_zfill;
using blockfuse::detail::cp_async_wait;
using blockfuse::detail::ldsm_x4;
using blockfuse::detail::ldsm_x4_trans;
using blockfuse::detail::pack2;

inline constexpr int kBlock = 64;  // keys per dK/dV CTA, query rows per dQ CTA, and the tiles they walk
inline constexpr int kThreads = 128;
// CTAs a multiprocessor keeps resident (__launch_bounds__' second argument): three at D = 64, where the
// kernels fit 168 registers (12 warps a multiprocessor, against 8 at 196-228 registers without the
// bound), one at D = 128 (255 registers).
template <int D>
inline constexpr int kMinBlocks = D == 64 ? 3 : 1;

// Rows of D elements, 16-byte chunks XOR-swizzled by the row's low three bits (conflict-free ldmatrix).
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// A [kBlock, D] tile of rows [row0, row0 + kBlock) of a strided view into shared memory; rows at or
// past `rows` are zero-filled (not read).
template <class T, int D>
__device__ __forceinline__ void load_tile(T* smem, const T* base, int64_t row_stride, int row0, int rows) {
  constexpr int kChunks = D / 8;
  for (int idx = threadIdx.x; idx < kBlock * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const bool ok = row0 + r < rows;
    cp_async16_zfill(smem + swz<D>(r, c), base + (ok ? int64_t(row0 + r) * row_stride + c * 8 : 0), ok);
  }
}

// Per-sequence geometry: lengths, element offsets of row 0 of this (sequence, head) in each tensor,
// and the LSE / Dsum offset.
struct Seq {
  int sq, sk;
  int64_t q, k, v, o, dO, dq, dk, dv, lse;
};

__device__ __forceinline__ Seq sequence(const BwdParams& p, int b, int head_q, int head_kv) {
  Seq s;
  s.sq = p.seqlen_q, s.sk = p.seqlen_k;
  int64_t q0 = 0, k0 = 0;
  s.lse = int64_t(b) * p.lse_batch_stride + int64_t(head_q) * p.lse_head_stride;
  int64_t bq = b, bk = b;
  if (p.cu_seqlens_q != nullptr) {
    q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    s.sq = p.cu_seqlens_q[b + 1] - int(q0), s.sk = p.cu_seqlens_k[b + 1] - int(k0);
    s.lse = q0 + int64_t(head_q) * p.lse_head_stride;
    bq = bk = 0;
  }
  s.q = bq * p.q_batch_stride + q0 * p.q_row_stride + int64_t(head_q) * p.q_head_stride;
  s.o = bq * p.o_batch_stride + q0 * p.o_row_stride + int64_t(head_q) * p.o_head_stride;
  s.dO = bq * p.do_batch_stride + q0 * p.do_row_stride + int64_t(head_q) * p.do_head_stride;
  s.dq = bq * p.dq_batch_stride + q0 * p.dq_row_stride + int64_t(head_q) * p.dq_head_stride;
  s.k = bk * p.k_batch_stride + k0 * p.k_row_stride + int64_t(head_kv) * p.k_head_stride;
  s.v = bk * p.v_batch_stride + k0 * p.v_row_stride + int64_t(head_kv) * p.v_head_stride;
  s.dk = bk * p.dk_batch_stride + k0 * p.dk_row_stride + int64_t(head_kv) * p.dk_head_stride;
  s.dv = bk * p.dv_batch_stride + k0 * p.dv_row_stride + int64_t(head_kv) * p.dv_head_stride;
  return s;
}

// Key j visible to query i (the forward's rule, bottom-right aligned): lo(i) <= j <= hi(i).
__device__ __forceinline__ int key_lo(const BwdParams& p, const Seq& s, int i) {
  return p.window_left >= kWindowUnbounded ? 0 : max(0, i + s.sk - s.sq - p.window_left);
}
__device__ __forceinline__ int key_hi(const BwdParams& p, const Seq& s, int i) {
  return p.window_right >= kWindowUnbounded ? s.sk - 1 : min(s.sk - 1, i + s.sk - s.sq + p.window_right);
}

// ---- Dsum = rowsum(dO ∘ O) -----------------------------------------------------------------------

// Grid (ceil(rows / 4), Hq, batch); rows = Sq (batched) or the packed total (varlen, batch 1).
template <class T, int D>
__global__ void __launch_bounds__(128) bwd_dsum_kernel(const __grid_constant__ BwdParams p, int rows) {
  const int i = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = blockIdx.y, b = blockIdx.z;
  if (i >= rows) return;
  const T* o = static_cast<const T*>(p.out) + int64_t(b) * p.o_batch_stride + int64_t(i) * p.o_row_stride +
               int64_t(head) * p.o_head_stride;
  const T* d = static_cast<const T*>(p.dout) + int64_t(b) * p.do_batch_stride + int64_t(i) * p.do_row_stride +
               int64_t(head) * p.do_head_stride;
  float acc = 0.f;
#pragma unroll
  for (int e = lane * 2; e < D; e += 64) {
    acc += static_cast<float>(o[e]) * static_cast<float>(d[e]);
    acc += static_cast<float>(o[e + 1]) * static_cast<float>(d[e + 1]);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) p.dsum[int64_t(b) * p.lse_batch_stride + int64_t(head) * p.lse_head_stride + i] = acc;
}

// ---- shared pieces of the two main kernels ----------------------------------------------------------

// The probabilities of one warp's 16 × 64 score block `s` (m16n8 accumulators, 8 n-tiles), in place:
// P = exp2(x·scale_log2 − lse_log2) where visible, else 0; x = tanh(qk·softcap_mul) with a soft-cap
// (its value kept in `t` as fp16 pairs for the derivative). `row_of(h)` / `col_of(n, e)` give the
// global query row and key of element (n-tile n, element e; h = e / 2 selects the row half);
// `lse_log2_of(h, n, e)` the row's LSE in exp2 units. kMasked = false where the whole 64 × 64 block is
// visible (block_fully_visible): no per-element test.
// tanh as the forward computes it (attn::SoftCap, mask.cuh: tanh.approx.f32, about 2^-11 relative
// error): the recomputed P must match the forward's LSE, and tanhf would differ by up to cap · 2^-11
// in the logit where tanh saturates.
__device__ __forceinline__ float fast_tanh(float x) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));
  return t;
}

template <bool kSoftcap, bool kMasked, class RowCol, class Lse>
__device__ __forceinline__ void probabilities(const BwdParams& p, const Seq& sq, float (&s)[8][4], uint32_t (&t)[8][2],
                                              RowCol&& row_col, Lse&& lse_log2_of) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int i, j;
      row_col(n, e, i, j);
      float x = s[n][e];
      if constexpr (kSoftcap) x = fast_tanh(x * p.softcap_mul);
      const bool vis = !kMasked || (i < sq.sq && j < sq.sk && j >= key_lo(p, sq, i) && j <= key_hi(p, sq, i));
      const float lse2 = lse_log2_of(n, e);
      s[n][e] = vis ? exp2f(x * p.scale_log2 - lse2) : 0.f;
      if constexpr (kSoftcap) {
        // 1 − tanh² for dS, as fp16 (|tanh| <= 1: error below 1e-3 of the derivative).
        __half* th = reinterpret_cast<__half*>(&t[n][e / 2]);
        th[e % 2] = __float2half_rn(1.f - x * x);
      }
    }
}

// dS = P ∘ (dP − Dsum) [∘ (1 − tanh²)], in place of dP.
template <bool kSoftcap, class DsumOf>
__device__ __forceinline__ void grad_scores(const BwdParams& p, const float (&pr)[8][4], float (&dp)[8][4],
                                            const uint32_t (&t)[8][2], DsumOf&& dsum_of) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float ds = pr[n][e] * (dp[n][e] - dsum_of(n, e));
      if constexpr (kSoftcap) {
        const __half* th = reinterpret_cast<const __half*>(&t[n][e / 2]);
        ds *= __half2float(th[e % 2]);
      }
      dp[n][e] = ds;
    }
}

// The A fragments of a 16 × 64 accumulator block (k = the 64 columns, four k-steps of 16).
template <class T>
__device__ __forceinline__ void to_a_frags(const float (&s)[8][4], uint32_t (&a)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    a[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    a[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    a[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// acc[16 × 64] = A[16 rows of sa, from row a0] · B[64 rows of sb]ᵀ over D (both tiles [rows][D] in
// shared memory): A from ldmatrix of sa's rows, B from ldmatrix of sb's rows (the "col" operand).
template <class T, int D>
__device__ __forceinline__ void gemm_abt(float (&acc)[8][4], const T* sa, int a0, const T* sb, int lane) {
  using Mma = blockfuse::decode::MmaType<T>;
#pragma unroll
  for (int n = 0; n < 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t a[4];
    ldsm_x4(a, sa + swz<D>(a0 + lane % 8 + ((lane / 8) % 2) * 8, 2 * ks + lane / 16));
#pragma unroll
    for (int nq = 0; nq < 4; ++nq) {
      uint32_t b[4];
      ldsm_x4(b, sb + swz<D>(nq * 16 + (lane / 16) * 8 + lane % 8, 2 * ks + (lane / 8) % 2));
      Mma::mma(acc[2 * nq], a, b[0], b[1]);
      Mma::mma(acc[2 * nq + 1], a, b[2], b[3]);
    }
  }
}

// acc[16 × D] += A (register fragments, k = 64 rows of sb) · sb[64][D] (ldmatrix.trans: sb's rows are k).
template <class T, int D>
__device__ __forceinline__ void gemm_a_b(float (&acc)[D / 8][4], const uint32_t (&a)[4][4], const T* sb, int lane) {
  using Mma = blockfuse::decode::MmaType<T>;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int dn = 0; dn < D / 16; ++dn) {
      uint32_t b[4];
      ldsm_x4_trans(b, sb + swz<D>(kk * 16 + lane % 8 + ((lane / 8) % 2) * 8, 2 * dn + lane / 16));
      Mma::mma(acc[2 * dn], a[kk], b[0], b[1]);
      Mma::mma(acc[2 * dn + 1], a[kk], b[2], b[3]);
    }
}

// acc[16 × N] = A (register fragments, k = 64 rows of sb) · sb[64][c0, c0 + N) (sb rows of D
// elements): gemm_a_b on a column slice, so that a second accumulator fits beside dK and dV.
template <class T, int D, int N>
__device__ __forceinline__ void gemm_a_b_slice(float (&acc)[N / 8][4], const uint32_t (&a)[4][4], const T* sb, int c0,
                                               int lane) {
  using Mma = blockfuse::decode::MmaType<T>;
#pragma unroll
  for (int n = 0; n < N / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int dn = 0; dn < N / 16; ++dn) {
      uint32_t b[4];
      ldsm_x4_trans(b, sb + swz<D>(kk * 16 + lane % 8 + ((lane / 8) % 2) * 8, c0 / 8 + 2 * dn + lane / 16));
      Mma::mma(acc[2 * dn], a[kk], b[0], b[1]);
      Mma::mma(acc[2 * dn + 1], a[kk], b[2], b[3]);
    }
}

// Stores a warp's 16 × D fp32 accumulator (scaled) as T rows row0 + r (r < 16) of a strided view,
// rows at or past `rows` skipped.
template <class T, int D>
__device__ __forceinline__ void store_rows(T* base, int64_t row_stride, int row0, int rows, const float (&acc)[D / 8][4],
                                           float scale, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row0 + lane / 4 + 8 * h;
    if (r >= rows) continue;
    T* dst = base + int64_t(r) * row_stride + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(dst + n * 8) = pack2<T>(acc[n][2 * h] * scale, acc[n][2 * h + 1] * scale);
  }
}

// ---- dK, dV --------------------------------------------------------------------------------------

// Shared memory: K, V [64][D]; two stages of Q, dO [64][D] and LSE (exp2 units), Dsum [64]. With
// kAtomicDq, dSᵀ [64 keys][64 queries] goes over the step's dO tile once nothing reads it, so both
// modes fit the 99 KB a block gets on sm_86 / sm_89 at D = 128 (99,328 bytes).
template <int D>
constexpr int dkdv_smem_bytes() {
  return (2 + 2 * 2) * kBlock * D * 2 + 2 * 2 * kBlock * 4;
}

template <class T, int D, bool kAtomicDq, bool kSoftcap>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>) bwd_dkdv_kernel(const __grid_constant__ BwdParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* const sK = reinterpret_cast<T*>(smem_raw);
  T* const sV = sK + kBlock * D;
  T* const sQ0 = sV + kBlock * D;  // stage s: sQ0 + s·2·kBlock·D (Q), then dO
  float* const sStat0 = reinterpret_cast<float*>(sQ0 + 2 * 2 * kBlock * D);  // stage s: LSE [64], Dsum [64]
  const int n_block = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Seq s0 = sequence(p, b, hk * p.group, hk);
  const int n0 = n_block * kBlock;
  if (n0 >= s0.sk) return;

  load_tile<T, D>(sK, static_cast<const T*>(p.k) + s0.k, p.k_row_stride, n0, s0.sk);
  load_tile<T, D>(sV, static_cast<const T*>(p.v) + s0.v, p.v_row_stride, n0, s0.sk);
  blockfuse::detail::cp_async_commit();

  // The query rows that see a key of [n0, n0 + 64): i with lo(i) <= n0 + 63 and hi(i) >= n0.
  const int shift = s0.sk - s0.sq;
  const int i_lo = p.window_right >= kWindowUnbounded ? 0 : max(0, n0 - shift - p.window_right);
  const int i_hi = p.window_left >= kWindowUnbounded ? s0.sq - 1 : min(s0.sq - 1, n0 + kBlock - 1 - shift + p.window_left);
  const int m_first = i_lo / kBlock, m_last = i_hi < i_lo ? m_first - 1 : i_hi / kBlock;
  const int m_count = m_last - m_first + 1;
  const int steps = m_count > 0 ? m_count * p.group : 0;  // (head of the group, query block) pairs

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;

  auto load_step = [&](int step, int stage) {
    const int g = step / m_count, m = m_first + step % m_count;
    const Seq s = sequence(p, b, hk * p.group + g, hk);
    T* const sQ = sQ0 + stage * 2 * kBlock * D;
    T* const sO = sQ + kBlock * D;
    float* const st = sStat0 + stage * 2 * kBlock;
    load_tile<T, D>(sQ, static_cast<const T*>(p.q) + s.q, p.q_row_stride, m * kBlock, s.sq);
    load_tile<T, D>(sO, static_cast<const T*>(p.dout) + s.dO, p.do_row_stride, m * kBlock, s.sq);
    // The rows' LSE (threads 0-63) and Dsum (64-127) in the same copy group as the tiles: a plain load
    // here would hold its warps at the store into shared memory for the load's whole latency, every step.
    static_assert(kThreads == 2 * kBlock, "one thread per row and statistic");
    const int r = threadIdx.x % kBlock, i = m * kBlock + r;
    const bool ok = i < s.sq;
    cp_async4_zfill(st + threadIdx.x, (threadIdx.x < kBlock ? p.lse : p.dsum) + s.lse + (ok ? i : 0), ok);
  };
  if (steps > 0) load_step(0, 0);
  blockfuse::detail::cp_async_commit();

  for (int step = 0; step < steps; ++step) {
    const int stage = step % 2;
    if (step + 1 < steps) load_step(step + 1, stage ^ 1);
    blockfuse::detail::cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int g = step / m_count, m = m_first + step % m_count;
    const Seq s = sequence(p, b, hk * p.group + g, hk);
    const T* const sQ = sQ0 + stage * 2 * kBlock * D;
    const T* const sO = sQ + kBlock * D;
    const float* const st = sStat0 + stage * 2 * kBlock;

    // Sᵀ for this warp's keys (rows of sK) against the block's 64 queries, then Pᵀ.
    float pt[8][4];
    uint32_t th[8][2];
    gemm_abt<T, D>(pt, sK, warp * 16, sQ, lane);
    {
      auto row_col = [&](int n, int e, int& i, int& j) {
        j = n0 + warp * 16 + lane / 4 + (e >= 2 ? 8 : 0);
        i = m * kBlock + n * 8 + (lane % 4) * 2 + (e & 1);
      };
      auto lse_of = [&](int n, int e) { return st[n * 8 + (lane % 4) * 2 + (e & 1)] * 1.4426950408889634f; };
      if (block_fully_visible(m * kBlock, kBlock, n0, kBlock, s.sq, s.sk, p.window_left, p.window_right))
        probabilities<kSoftcap, false>(p, s, pt, th, row_col, lse_of);
      else
        probabilities<kSoftcap, true>(p, s, pt, th, row_col, lse_of);
    }
    uint32_t a[4][4];
    to_a_frags<T>(pt, a);
    gemm_a_b<T, D>(dv, a, sO, lane);  // dV += Pᵀ·dO

    float dpt[8][4];
    gemm_abt<T, D>(dpt, sV, warp * 16, sO, lane);  // dPᵀ = V·dOᵀ
    grad_scores<kSoftcap>(p, pt, dpt, th, [&](int n, int e) { return st[kBlock + n * 8 + (lane % 4) * 2 + (e & 1)]; });
    to_a_frags<T>(dpt, a);
    gemm_a_b<T, D>(dk, a, sQ, lane);  // dK += dSᵀ·Q
    if constexpr (kAtomicDq) {
      // dSᵀ of this warp's 16 keys into shared memory (the same rounding as dK's operand), over this
      // step's dO tile (every warp is past dV += Pᵀ·dO and dPᵀ = V·dOᵀ after the barrier), then each
      // warp takes 16 query rows: dQ[16 × D] = dS[16 × 64 keys] · K[64 × D], A by ldmatrix.trans of
      // dSᵀ, added into dq_accum.
      T* const sdS = sQ0 + stage * 2 * kBlock * D + kBlock * D;
      __syncthreads();
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<uint32_t*>(sdS + swz<kBlock>(warp * 16 + lane / 4 + 8 * h, n) + (lane % 4) * 2) =
              pack2<T>(dpt[n][2 * h], dpt[n][2 * h + 1]);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        ldsm_x4_trans(a[kk], sdS + swz<kBlock>(kk * 16 + lane % 8 + (lane / 16) * 8, warp * 2 + (lane / 8) % 2));
      const int64_t q_row0 = p.cu_seqlens_q != nullptr ? int64_t(p.cu_seqlens_q[b]) : int64_t(b) * p.seqlen_q;
      const int64_t row_elems = int64_t(p.heads_q) * D;
      float* const acc = p.dq_accum + q_row0 * row_elems + int64_t(hk * p.group + g) * D + (lane % 4) * 2;
      // 64 columns at a time: 32 more fp32 registers beside dK and dV, not D / 2 (D = 64 then does not
      // spill; D = 128 spills as the deterministic kernels do: docs/attention.md#backward-sm80).
      constexpr int kSlice = 64;
#pragma unroll
      for (int c0 = 0; c0 < D; c0 += kSlice) {
        float dq[kSlice / 8][4];
        gemm_a_b_slice<T, D, kSlice>(dq, a, sK, c0, lane);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = m * kBlock + warp * 16 + lane / 4 + 8 * h;
          if (i >= s.sq) continue;
          float* const row = acc + int64_t(i) * row_elems + c0;
#pragma unroll
          for (int n = 0; n < kSlice / 8; ++n) {
            atomicAdd(row + n * 8, dq[n][2 * h]);
            atomicAdd(row + n * 8 + 1, dq[n][2 * h + 1]);
          }
        }
      }
    }
    __syncthreads();  // the stage (and dSᵀ) are refilled by the next step
  }
  blockfuse::detail::cp_async_wait_all();

  store_rows<T, D>(static_cast<T*>(p.dk) + s0.dk + int64_t(n0) * p.dk_row_stride, p.dk_row_stride, warp * 16,
                   s0.sk - n0, dk, p.scale, lane);
  store_rows<T, D>(static_cast<T*>(p.dv) + s0.dv + int64_t(n0) * p.dv_row_stride, p.dv_row_stride, warp * 16,
                   s0.sk - n0, dv, 1.f, lane);
}

// ---- dQ from the atomics' buffer ---------------------------------------------------------------------

// dq = dq_accum · scale, rounded: grid (ceil(rows · D / 8 / 128), Hq, batch), rows as bwd_dsum_kernel's
// (Sq per sequence, or the packed total with batch 1), 8 columns per thread (one chunk of
// dq_accum_col's order in the sm90a layout).
template <class T, int D>
__global__ void __launch_bounds__(128) bwd_dq_convert_kernel(const __grid_constant__ BwdParams p, int rows) {
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (row, chunk of 8)
  if (idx >= int64_t(rows) * (D / 8)) return;
  const int r = int(idx / (D / 8)), c = int(idx % (D / 8)) * 8;
  const int64_t row = int64_t(b) * rows + r;
  const float* src = p.dq_accum_head_rows > 0 ? p.dq_accum + (h * p.dq_accum_head_rows + row) * D + dq_accum_col(row, c)
                                              : p.dq_accum + (row * p.heads_q + h) * D + c;
  T* dst = static_cast<T*>(p.dq) + int64_t(b) * p.dq_batch_stride + int64_t(r) * p.dq_row_stride +
           int64_t(h) * p.dq_head_stride + c;
  const float4 x0 = *reinterpret_cast<const float4*>(src), x1 = *reinterpret_cast<const float4*>(src + 4);
  uint4 out;
  out.x = pack2<T>(x0.x * p.scale, x0.y * p.scale);
  out.y = pack2<T>(x0.z * p.scale, x0.w * p.scale);
  out.z = pack2<T>(x1.x * p.scale, x1.y * p.scale);
  out.w = pack2<T>(x1.z * p.scale, x1.w * p.scale);
  *reinterpret_cast<uint4*>(dst) = out;
}

// ---- dQ ------------------------------------------------------------------------------------------

// Shared memory: Q, dO [64][D]; two stages of K, V [64][D].
template <int D>
constexpr int dq_smem_bytes() {
  return (2 + 2 * 2) * kBlock * D * 2;
}

template <class T, int D, bool kSoftcap>
__global__ void __launch_bounds__(kThreads, kMinBlocks<D>) bwd_dq_kernel(const __grid_constant__ BwdParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* const sQ = reinterpret_cast<T*>(smem_raw);
  T* const sO = sQ + kBlock * D;
  T* const sKV0 = sO + kBlock * D;  // stage s: K at sKV0 + s·2·kBlock·D, then V
  const int m_block = blockIdx.x, head = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Seq s = sequence(p, b, head, head / p.group);
  const int m0 = m_block * kBlock;
  if (m0 >= s.sq) return;

  load_tile<T, D>(sQ, static_cast<const T*>(p.q) + s.q, p.q_row_stride, m0, s.sq);
  load_tile<T, D>(sO, static_cast<const T*>(p.dout) + s.dO, p.do_row_stride, m0, s.sq);
  // This thread's rows (lane / 4 and + 8 of the warp's 16): LSE (exp2 units) and Dsum.
  float lse2[2], dsum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = m0 + warp * 16 + lane / 4 + 8 * h;
    const bool ok = i < s.sq;
    lse2[h] = ok ? p.lse[s.lse + i] * 1.4426950408889634f : 0.f;
    dsum[h] = ok ? p.dsum[s.lse + i] : 0.f;
  }
  // Keys any row of the block sees.
  const int row_last = min(s.sq, m0 + kBlock) - 1;
  const int j_lo = key_lo(p, s, m0), j_hi = key_hi(p, s, row_last);
  const int n_first = j_lo / kBlock, n_last = j_hi < j_lo ? n_first - 1 : j_hi / kBlock;
  const int steps = n_last - n_first + 1;

  auto load_step = [&](int step, int stage) {
    T* const sK = sKV0 + stage * 2 * kBlock * D;
    load_tile<T, D>(sK, static_cast<const T*>(p.k) + s.k, p.k_row_stride, (n_first + step) * kBlock, s.sk);
    load_tile<T, D>(sK + kBlock * D, static_cast<const T*>(p.v) + s.v, p.v_row_stride, (n_first + step) * kBlock, s.sk);
  };
  if (steps > 0) load_step(0, 0);
  blockfuse::detail::cp_async_commit();

  float dq[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;

  for (int step = 0; step < steps; ++step) {
    const int stage = step % 2;
    if (step + 1 < steps) load_step(step + 1, stage ^ 1);
    blockfuse::detail::cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* const sK = sKV0 + stage * 2 * kBlock * D;
    const T* const sV = sK + kBlock * D;
    const int n0 = (n_first + step) * kBlock;

    float pr[8][4];
    uint32_t th[8][2];
    gemm_abt<T, D>(pr, sQ, warp * 16, sK, lane);  // S = Q·Kᵀ
    {
      auto row_col = [&](int n, int e, int& i, int& j) {
        i = m0 + warp * 16 + lane / 4 + (e >= 2 ? 8 : 0);
        j = n0 + n * 8 + (lane % 4) * 2 + (e & 1);
      };
      auto lse_of = [&](int, int e) { return lse2[e / 2]; };
      if (block_fully_visible(m0, kBlock, n0, kBlock, s.sq, s.sk, p.window_left, p.window_right))
        probabilities<kSoftcap, false>(p, s, pr, th, row_col, lse_of);
      else
        probabilities<kSoftcap, true>(p, s, pr, th, row_col, lse_of);
    }
    float dp[8][4];
    gemm_abt<T, D>(dp, sO, warp * 16, sV, lane);  // dP = dO·Vᵀ
    grad_scores<kSoftcap>(p, pr, dp, th, [&](int, int e) { return dsum[e / 2]; });
    uint32_t a[4][4];
    to_a_frags<T>(dp, a);
    gemm_a_b<T, D>(dq, a, sK, lane);  // dQ += dS·K
    __syncthreads();
  }
  blockfuse::detail::cp_async_wait_all();
  store_rows<T, D>(static_cast<T*>(p.dq) + s.dq + int64_t(m0) * p.dq_row_stride, p.dq_row_stride, warp * 16,
                   s.sq - m0, dq, p.scale, lane);
}

}  // namespace blockfuse::attn::bwd
