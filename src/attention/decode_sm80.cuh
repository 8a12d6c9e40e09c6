// Internal: the decode attention kernels (sm80+: mma.sync m16n8k16, ldmatrix, cp.async; they run
// unchanged on Hopper, where decode is bound by reading the cache, not by the tensor cores).
//
// decode_split_kernel — one CTA per (row block, KV head · split, sequence). Its rows are the
//   Sq · group query rows that share a KV head (row r: query token r / group, head r % group of
//   the group), so each key and value is read from DRAM once for all of them. The CTA walks its
//   split's 64-key tiles through a cp.async pipeline of stages(D) stages; each of the four warps
//   takes 16 keys of a tile (S = Q·Kᵀ, online softmax, O += P·V) and keeps its own running max,
//   sum and output; the warps are merged through shared memory at the end. Keys outside the CTA's
//   visible range (before the left padding's end, past the length, outside the window), and pages
//   a sequence does not own, are zero-filled, never read.
// decode_merge_kernel — one warp per output row, or four where the splits are many: the splits'
//   partial outputs weighted by their log-sum-exps (fixed order: deterministic).
// decode_append_kernel — rotary embedding of the new q and k, and k/v written into the cache.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/decode_params.h"
#include "attention/params.h"
#include "common/cp_async.cuh"
#include "common/decode_loop.cuh"
#include "common/mma_sm80.cuh"

namespace blockfuse::attn::decode {

using blockfuse::detail::cp_async16_zfill;
using blockfuse::detail::cp_async_wait;
using blockfuse::detail::ldsm_x4;
using blockfuse::detail::ldsm_x4_trans;
using blockfuse::detail::pack2;

template <class T, int D, int MF>
struct Traits {
  static constexpr int kRows = 16 * MF;       // query rows per CTA
  static constexpr int kStages = stages(D);
  static constexpr int kChunks = D / 8;       // 16-byte chunks per row
  static constexpr int kKeysPerPass = kThreads / kChunks;
  static constexpr int kPasses = kBlockN / kKeysPerPass;
  static constexpr int kTileElems = kBlockN * D;
  static constexpr int kSmemBytes = smem_bytes(D, MF);
  static_assert(kKeysPerPass * kChunks == kThreads, "a pass covers whole rows");
  // Rows of D elements, 16-byte chunks XOR-swizzled by the row's low three bits: the eight rows
  // an ldmatrix reads at one chunk column hit eight different bank groups.
  __device__ __forceinline__ static int swz(int row, int chunk) { return row * D + ((chunk ^ (row & 7)) << 3); }
};

// Where key j of sequence b lives: (block, row) of the cache view.
struct KeySlot {
  int block, row;
};

// The visible keys of one query: [lo, hi] (inclusive), clamped to [start, len).
__device__ __forceinline__ void visible_range(const Params& p, int start, int len, int t, int& lo, int& hi) {
  const int pos = len - p.seqlen_q + t;  // the query's own position (bottom-right aligned)
  lo = p.window_left >= kWindowUnbounded ? start : max(start, pos - p.window_left);
  hi = p.window_right >= kWindowUnbounded ? len - 1 : min(len - 1, pos + p.window_right);
}

// The length of sequence b the kernels attend to, or -1 when its cache_seqlens value is out of
// range (its rows are then poisoned with NaN).
__device__ __forceinline__ int attended_length(const Params& p, int b) {
  const int len = p.cache_seqlens[b];
  return (len < 0 || len > p.capacity - p.new_tokens) ? -1 : len + p.new_tokens;
}

// kLayout: the cache's layout (KvLayout), a template parameter so that each path carries only its
// own address arithmetic: with one warp per scheduler (a CTA per SM at small batch) the kernel's time
// is its instruction stream's, and the paged path's page division, 64-bit products and checks had
// made it half again as long as the contiguous one (docs/attention.md, Decode).
template <class T, int D, int MF, int kLayout>
__global__ void __launch_bounds__(kThreads) decode_split_kernel(const __grid_constant__ Params p) {
  using Tr = Traits<T, D, MF>;
  using Mma = blockfuse::decode::MmaType<T>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* const s_kv = reinterpret_cast<T*>(smem_raw);
  T* const s_q = s_kv + Tr::kStages * 2 * Tr::kTileElems;

  const int mb = blockIdx.x;
  const int hk = blockIdx.y % p.heads_kv;
  const int split = blockIdx.y / p.heads_kv;
  const int b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int row0 = mb * Tr::kRows;

  const int len_or_bad = attended_length(p, b);
  const int pad = p.cache_leftpad ? p.cache_leftpad[b] : 0;
  bool bad = len_or_bad < 0 || pad < 0 || pad > len_or_bad;
  const int len = bad ? 0 : len_or_bad;
  const int start = bad ? 0 : pad;  // the sequence's first key slot

  // The CTA's key range: the union of its query rows' visible ranges.
  int key_lo, key_hi;  // [key_lo, key_hi)
  {
    const int last_row = min(p.rows, row0 + Tr::kRows) - 1;
    int lo0, hi0, lo1, hi1;
    visible_range(p, start, len, row0 / p.group, lo0, hi0);
    visible_range(p, start, len, last_row / p.group, lo1, hi1);
    key_lo = lo0;
    key_hi = hi1 + 1;
    if (key_hi <= key_lo) key_hi = key_lo;
  }
  const int tile_lo = key_lo / kBlockN;
  const int n_tiles = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN - tile_lo : 0;
  const int per_split = (n_tiles + p.num_splits - 1) / p.num_splits;
  const int t_begin = tile_lo + min(n_tiles, split * per_split);
  const int t_end = tile_lo + min(n_tiles, (split + 1) * per_split);

  // Query tile -> shared memory (rows past p.rows zero-filled).
  for (int idx = tid; idx < Tr::kRows * Tr::kChunks; idx += kThreads) {
    const int r = idx / Tr::kChunks, c = idx % Tr::kChunks;
    const int rg = row0 + r;
    const bool ok = rg < p.rows;
    const int t = ok ? rg / p.group : 0, head = hk * p.group + (ok ? rg % p.group : 0);
    const T* src = static_cast<const T*>(p.q) + b * p.q_batch_stride + t * p.q_row_stride + head * p.q_head_stride + c * 8;
    cp_async16_zfill(s_q + Tr::swz(r, c), src, ok);
  }

  // This thread's part of every tile: chunk `chunk` of keys key_in_pass + kKeysPerPass·i.
  const int chunk = tid % Tr::kChunks, key_in_pass = tid / Tr::kChunks;
  const T* const k_base = static_cast<const T*>(p.k) + hk * p.k_head_stride + chunk * 8;
  const T* const v_base = static_cast<const T*>(p.v) + hk * p.v_head_stride + chunk * 8;
  constexpr bool kPaged = kLayout != kContiguous;
  const int32_t* const table = kPaged ? p.block_table + b * p.block_table_stride : nullptr;
  const int64_t k_seq = int64_t(b) * p.k_block_stride, v_seq = int64_t(b) * p.v_block_stride;  // contiguous
  // Row strides below 2^31 (the launcher checks): key · stride is one 32 x 32 -> 64-bit multiply-add.
  const int k_rs = static_cast<int>(p.k_row_stride), v_rs = static_cast<int>(p.v_row_stride);
  const int page_mask = p.page_size - 1;  // kPagedPow2
  // Page of each of this thread's keys in the next tile to load, read one tile ahead so the
  // block-table lookup's latency is not in front of the copies.
  int page[Tr::kPasses];
  auto lookup = [&](int tile) {
    if constexpr (kLayout == kPagedTile) {  // a page holds the whole tile: one entry
      const int j0 = tile * kBlockN;
      page[0] = (j0 + kBlockN > key_lo && j0 < key_hi) ? __ldg(table + (j0 >> p.page_shift)) : 0;
    } else if constexpr (kPaged) {
#pragma unroll
      for (int i = 0; i < Tr::kPasses; ++i) {
        const int j = tile * kBlockN + key_in_pass + i * Tr::kKeysPerPass;
        const int idx = kLayout == kPagedPow2 ? j >> p.page_shift : j / p.page_size;
        page[i] = (j >= key_lo && j < key_hi) ? __ldg(table + idx) : 0;
      }
    }
  };
  auto load_tile = [&](int tile, int stage) {
    T* const sk = s_kv + stage * 2 * Tr::kTileElems;
    T* const sv = sk + Tr::kTileElems;
    // kPagedTile: the tile's page and first row once; a key's offset is then one multiply-add.
    int64_t k_tile = 0, v_tile = 0;
    bool page_ok = true;
    if constexpr (kLayout == kPagedTile) {
      const unsigned blk = static_cast<unsigned>(page[0]);
      page_ok = blk < static_cast<unsigned>(p.num_blocks);
      const int page_row0 = (tile * kBlockN) & page_mask;
      k_tile = static_cast<int64_t>(static_cast<uint64_t>(blk) * static_cast<uint64_t>(p.k_block_stride)) + int64_t(page_row0) * k_rs;
      v_tile = static_cast<int64_t>(static_cast<uint64_t>(blk) * static_cast<uint64_t>(p.v_block_stride)) + int64_t(page_row0) * v_rs;
    }
#pragma unroll
    for (int i = 0; i < Tr::kPasses; ++i) {
      const int r = key_in_pass + i * Tr::kKeysPerPass;
      const int j = tile * kBlockN + r;
      bool ok = j >= key_lo && j < key_hi;
      int64_t kb, vb;
      if constexpr (kLayout == kPagedTile) {
        if (ok && !page_ok) bad = true, ok = false;
        kb = k_tile + int64_t(r) * k_rs;
        vb = v_tile + int64_t(r) * v_rs;
      } else if constexpr (kPaged) {
        // One unsigned compare: a negative index is a large one.
        const unsigned blk = static_cast<unsigned>(page[i]);
        const int row = kLayout == kPagedPow2 ? j & page_mask : j % p.page_size;
        if (ok && blk >= static_cast<unsigned>(p.num_blocks)) bad = true, ok = false;
        kb = static_cast<int64_t>(static_cast<uint64_t>(blk) * static_cast<uint64_t>(p.k_block_stride)) + int64_t(row) * k_rs;
        vb = static_cast<int64_t>(static_cast<uint64_t>(blk) * static_cast<uint64_t>(p.v_block_stride)) + int64_t(row) * v_rs;
      } else {
        kb = k_seq + int64_t(j) * k_rs;
        vb = v_seq + int64_t(j) * v_rs;
      }
      // A key outside the range is zero-filled from a valid address (the source is not read).
      cp_async16_zfill(sk + Tr::swz(r, chunk), k_base + (ok ? kb : 0), ok);
      cp_async16_zfill(sv + Tr::swz(r, chunk), v_base + (ok ? vb : 0), ok);
    }
  };

  // Prologue: kStages - 1 tiles in flight (the query tile rides in the first group).
  if (t_begin < t_end) lookup(t_begin);
#pragma unroll
  for (int s = 0; s < Tr::kStages - 1; ++s) {
    const int tile = t_begin + s;
    if (tile < t_end) {
      load_tile(tile, s);
      if (tile + 1 < t_end) lookup(tile + 1);
    }
    blockfuse::detail::cp_async_commit();
  }

  // Per thread: rows lane/4 and lane/4 + 8 of each fragment; their visible ranges.
  int row_lo[MF][2], row_hi[MF][2];
#pragma unroll
  for (int f = 0; f < MF; ++f)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rg = row0 + f * 16 + lane / 4 + h * 8;
      if (rg < p.rows) {
        visible_range(p, start, len, rg / p.group, row_lo[f][h], row_hi[f][h]);
      } else {
        row_lo[f][h] = 0, row_hi[f][h] = -1;
      }
    }

  // Query fragments held in registers where they fit beside the accumulators (MF · D <= 128:
  // D / 4 · MF registers), else read from shared memory every tile.
  constexpr bool kQInRegs = MF * D <= 128;
  uint32_t qreg[kQInRegs ? MF : 1][kQInRegs ? D / 16 : 1][4];
  float o[MF][D / 8][4];
  float m[MF][2], l[MF][2];
#pragma unroll
  for (int f = 0; f < MF; ++f) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[f][n][0] = o[f][n][1] = o[f][n][2] = o[f][n][3] = 0.f;
    m[f][0] = m[f][1] = -INFINITY;
    l[f][0] = l[f][1] = 0.f;
  }

  for (int tile = t_begin; tile < t_end; ++tile) {
    const int it = tile - t_begin;
    cp_async_wait<Tr::kStages - 2>();
    __syncthreads();
    {  // refill the stage the previous iteration consumed
      const int next = tile + Tr::kStages - 1;
      if (next < t_end) {
        load_tile(next, (it + Tr::kStages - 1) % Tr::kStages);
        if (next + 1 < t_end) lookup(next + 1);
      }
      blockfuse::detail::cp_async_commit();
    }
    const T* const sk = s_kv + (it % Tr::kStages) * 2 * Tr::kTileElems;
    const T* const sv = sk + Tr::kTileElems;

    // The query fragments into registers once (they sit in the first copy group), where they fit.
    if constexpr (kQInRegs) {
      if (tile == t_begin) {
#pragma unroll
        for (int f = 0; f < MF; ++f)
#pragma unroll
          for (int ks = 0; ks < D / 16; ++ks)
            ldsm_x4(qreg[f][ks], s_q + Tr::swz(f * 16 + lane % 8 + ((lane / 8) % 2) * 8, 2 * ks + lane / 16));
      }
    }
    // S = Q · Kᵀ for this warp's 16 keys: two n8 tiles per row fragment.
    float s[MF][2][4];
#pragma unroll
    for (int f = 0; f < MF; ++f)
#pragma unroll
      for (int n = 0; n < 2; ++n) s[f][n][0] = s[f][n][1] = s[f][n][2] = s[f][n][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t kb[4];
      ldsm_x4(kb, sk + Tr::swz(warp * 16 + (lane / 16) * 8 + lane % 8, 2 * ks + (lane / 8) % 2));
#pragma unroll
      for (int f = 0; f < MF; ++f) {
        uint32_t qa[4];
        if constexpr (kQInRegs) {
          qa[0] = qreg[f][ks][0], qa[1] = qreg[f][ks][1], qa[2] = qreg[f][ks][2], qa[3] = qreg[f][ks][3];
        } else {
          ldsm_x4(qa, s_q + Tr::swz(f * 16 + lane % 8 + ((lane / 8) % 2) * 8, 2 * ks + lane / 16));
        }
        Mma::mma(s[f][0], qa, kb[0], kb[1]);
        Mma::mma(s[f][1], qa, kb[2], kb[3]);
      }
    }

    // Online softmax (exp2 domain), masked per row.
    const int key_base = tile * kBlockN + warp * 16 + (lane % 4) * 2;
    uint32_t pa[MF][4];
#pragma unroll
    for (int f = 0; f < MF; ++f) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = m[f][h];
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float x = s[f][n][2 * h + e];
            if (p.softcap_mul != 0.f) x = tanhf(x * p.softcap_mul);
            x *= p.scale_log2;
            const int j = key_base + n * 8 + e;
            x = (j >= row_lo[f][h] && j <= row_hi[f][h]) ? x : -INFINITY;
            s[f][n][2 * h + e] = x;
            mx = fmaxf(mx, x);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == -INFINITY ? 0.f : mx;
        const float corr = exp2f(m[f][h] - base);
        m[f][h] = mx;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pe = exp2f(s[f][n][2 * h + e] - base);
            s[f][n][2 * h + e] = pe;
            sum += pe;
          }
        l[f][h] = l[f][h] * corr + sum;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) o[f][n][2 * h] *= corr, o[f][n][2 * h + 1] *= corr;
      }
      pa[f][0] = pack2<T>(s[f][0][0], s[f][0][1]);
      pa[f][1] = pack2<T>(s[f][0][2], s[f][0][3]);
      pa[f][2] = pack2<T>(s[f][1][0], s[f][1][1]);
      pa[f][3] = pack2<T>(s[f][1][2], s[f][1][3]);
    }

    // O += P · V over the warp's 16 keys.
#pragma unroll
    for (int dn = 0; dn < D / 16; ++dn) {
      uint32_t vb[4];
      ldsm_x4_trans(vb, sv + Tr::swz(warp * 16 + lane % 8 + ((lane / 8) % 2) * 8, 2 * dn + lane / 16));
#pragma unroll
      for (int f = 0; f < MF; ++f) {
        Mma::mma(o[f][2 * dn], pa[f], vb[0], vb[1]);
        Mma::mma(o[f][2 * dn + 1], pa[f], vb[2], vb[3]);
      }
    }
  }
  blockfuse::detail::cp_async_wait_all();
  bad = __syncthreads_or(bad);

  // Merge the four warps through shared memory: per warp [kRows][D] outputs, then max and sum.
  float* const red_o = reinterpret_cast<float*>(smem_raw);
  float* const red_m = red_o + kWarps * Tr::kRows * D;
  float* const red_l = red_m + kWarps * Tr::kRows;
#pragma unroll
  for (int f = 0; f < MF; ++f)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[f][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = f * 16 + lane / 4 + h * 8;
      float* dst = red_o + (warp * Tr::kRows + r) * D + (lane % 4) * 2;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[f][n][2 * h], o[f][n][2 * h + 1]);
      if (lane % 4 == 0) red_m[warp * Tr::kRows + r] = m[f][h], red_l[warp * Tr::kRows + r] = sum;
    }
  __syncthreads();

  const int rows_total = p.batch * p.seqlen_q * p.heads_q;
  for (int idx = tid; idx < Tr::kRows * (D / 4); idx += kThreads) {
    const int r = idx / (D / 4), d = (idx % (D / 4)) * 4;
    const int rg = row0 + r;
    if (rg >= p.rows) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_m[w * Tr::kRows + r]);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float sum = 0.f, lse = -INFINITY;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float c = exp2f(red_m[w * Tr::kRows + r] - mx);
        sum += red_l[w * Tr::kRows + r] * c;
        const float4 v = *reinterpret_cast<const float4*>(red_o + (w * Tr::kRows + r) * D + d);
        acc.x += v.x * c, acc.y += v.y * c, acc.z += v.z * c, acc.w += v.w * c;
      }
      const float inv = 1.f / sum;
      acc.x *= inv, acc.y *= inv, acc.z *= inv, acc.w *= inv;
      lse = (mx + log2f(sum)) * 0.69314718055994531f;
    }
    if (bad) acc = make_float4(NAN, NAN, NAN, NAN), lse = NAN;
    const int t = rg / p.group, head = hk * p.group + rg % p.group;
    if (p.num_splits == 1) {
      T* dst = static_cast<T*>(p.out) + b * p.o_batch_stride + t * p.o_row_stride + head * p.o_head_stride + d;
      uint2 packed;
      packed.x = pack2<T>(acc.x, acc.y);
      packed.y = pack2<T>(acc.z, acc.w);
      *reinterpret_cast<uint2*>(dst) = packed;
      if (p.lse && d == 0) p.lse[(int64_t(b) * p.heads_q + head) * p.seqlen_q + t] = lse;
    } else {
      const int64_t pr = (int64_t(b) * p.seqlen_q + t) * p.heads_q + head;
      const int64_t sr = int64_t(split) * rows_total + pr;
      *reinterpret_cast<float4*>(p.o_partial + sr * D + d) = acc;
      if (d == 0) p.lse_partial[sr] = lse;
    }
  }
}

// Merges the splits of row pr of [B·Sq·Hq] (D/32 elements per lane). Every warp of a row reads the
// row's LSEs, lane l those of splits l, l + 32, l + 64, l + 96 (kDecodeAttentionMaxSplits = 128),
// and turns them into the normalised weights; the partial outputs are then read with the weights
// broadcast by shuffles, eight splits' loads in flight at once (the loads depend on nothing but the
// split index). kRowWarps warps share a row: warp part takes the splits j ≡ part (mod kRowWarps), so
// the chain of dependent loads is kRowWarps times shorter where the splits are many, and warp 0 adds
// the parts in a fixed order (deterministic). kRowWarps = 1: four rows per CTA.
template <class T, int D, int kRowWarps>
__global__ void __launch_bounds__(128) decode_merge_kernel(const __grid_constant__ Params p) {
  static_assert(kDecodeAttentionMaxSplits <= 128, "four LSEs per lane");
  static_assert(kRowWarps == 1 || kRowWarps == 4, "one warp per row, or the CTA's four");
  constexpr int kPerLane = D / 32;
  const int rows_total = p.batch * p.seqlen_q * p.heads_q;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pr = blockIdx.x * (4 / kRowWarps) + warp / kRowWarps;
  const int part = warp % kRowWarps;
  if (pr >= rows_total) return;  // kRowWarps = 4: the grid has one CTA per row, none returns
  const float* lse_p = p.lse_partial + pr;
  float l[4];
  bool nan = false;
  float mx = -INFINITY;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int s = lane + 32 * c;
    l[c] = s < p.num_splits ? lse_p[int64_t(s) * rows_total] : -INFINITY;
    nan |= l[c] != l[c];
    mx = fmaxf(mx, l[c]);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  nan = __any_sync(0xffffffffu, nan);
  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = nan ? NAN : 0.f;
  float lse = nan ? NAN : -INFINITY;
  if (!nan && mx != -INFINITY) {
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < 4; ++c) sum += __expf(l[c] - mx);  // -inf (no split, or an empty one) -> 0
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    lse = mx + logf(sum);
    float w[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) w[c] = __expf(l[c] - lse);  // the normalised weights
    const float* base = p.o_partial + int64_t(pr) * D + lane * kPerLane;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int n = min(32, p.num_splits - 32 * c);
      if (n <= 0) break;
#pragma unroll 8
      for (int j = part; j < n; j += kRowWarps) {
        const float ws = __shfl_sync(0xffffffffu, w[c], j);
        const float* src = base + int64_t(32 * c + j) * rows_total * D;
#pragma unroll
        for (int i = 0; i < kPerLane; i += 2) {
          const float2 v = *reinterpret_cast<const float2*>(src + i);
          acc[i] += ws * v.x, acc[i + 1] += ws * v.y;
        }
      }
    }
  }
  if constexpr (kRowWarps > 1) {
    __shared__ float parts[kRowWarps][D];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) parts[part][lane * kPerLane + i] = acc[i];
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      float t = parts[0][lane * kPerLane + i];
#pragma unroll
      for (int q = 1; q < kRowWarps; ++q) t += parts[q][lane * kPerLane + i];
      acc[i] = t;
    }
  }
  const int head = pr % p.heads_q, t = (pr / p.heads_q) % p.seqlen_q, b = pr / (p.heads_q * p.seqlen_q);
  T* dst = static_cast<T*>(p.out) + b * p.o_batch_stride + t * p.o_row_stride + head * p.o_head_stride + lane * kPerLane;
#pragma unroll
  for (int i = 0; i < kPerLane; i += 2) *reinterpret_cast<uint32_t*>(dst + i) = pack2<T>(acc[i], acc[i + 1]);
  if (p.lse && lane == 0) p.lse[(int64_t(b) * p.heads_q + head) * p.seqlen_q + t] = lse;
}

template <class T>
__device__ __forceinline__ float load_f(const void* base, int64_t i, bool fp32) {
  return fp32 ? static_cast<const float*>(base)[i] : static_cast<float>(static_cast<const T*>(base)[i]);
}

// One CTA per (sequence, new token): rotary q -> q_out; rotary k_new and v_new -> the cache slot at
// cache_seqlens[b] + t. A sequence whose length or page is out of range writes nothing to the cache
// (the split kernel poisons its rows).
template <class T, int D>
__global__ void __launch_bounds__(256) decode_append_kernel(const __grid_constant__ Params p,
                                                           const __grid_constant__ AppendParams a) {
  const int b = blockIdx.x / p.seqlen_q, t = blockIdx.x % p.seqlen_q;
  const int len = p.cache_seqlens[b];
  const bool len_ok = len >= 0 && len <= p.capacity - p.new_tokens;
  const int pos = len_ok ? len + t : 0;
  int blk = b, row = pos;
  bool write = len_ok;
  if (p.block_table) {
    blk = write ? p.block_table[b * p.block_table_stride + pos / p.page_size] : 0;
    row = pos % p.page_size;
    write = write && blk >= 0 && blk < p.num_blocks;
  }
  const int half = a.rotary_dim / 2;
  const int heads = p.heads_q + 2 * p.heads_kv;
  for (int idx = threadIdx.x; idx < heads * D; idx += blockDim.x) {
    const int h = idx / D, d = idx % D;
    const T* src;
    T* dst;
    bool rot = a.cos != nullptr;
    if (h < p.heads_q) {
      src = static_cast<const T*>(a.q) + b * a.q_batch_stride + t * a.q_row_stride + h * a.q_head_stride;
      dst = static_cast<T*>(a.q_out) + ((int64_t(b) * p.seqlen_q + t) * p.heads_q + h) * D;
    } else if (h < p.heads_q + p.heads_kv) {
      const int hh = h - p.heads_q;
      src = static_cast<const T*>(a.k_new) + b * a.kn_batch_stride + t * a.kn_row_stride + hh * a.kn_head_stride;
      dst = write ? static_cast<T*>(p.k) + int64_t(blk) * p.k_block_stride + int64_t(row) * p.k_row_stride +
                        hh * p.k_head_stride
                  : nullptr;
    } else {
      const int hh = h - p.heads_q - p.heads_kv;
      src = static_cast<const T*>(a.v_new) + b * a.vn_batch_stride + t * a.vn_row_stride + hh * a.vn_head_stride;
      dst = write ? static_cast<T*>(p.v) + int64_t(blk) * p.v_block_stride + int64_t(row) * p.v_row_stride +
                        hh * p.v_head_stride
                  : nullptr;
      rot = false;
    }
    if (dst == nullptr) continue;
    float x = static_cast<float>(src[d]);
    if (rot && d < a.rotary_dim) {
      int i, partner;
      float sign;
      if (a.interleaved) {  // GPT-J: pairs (2i, 2i + 1)
        i = d / 2, partner = d ^ 1, sign = (d & 1) ? 1.f : -1.f;
      } else {  // GPT-NeoX rotate-half: pairs (i, i + R/2)
        const bool lo = d < half;
        i = lo ? d : d - half, partner = lo ? d + half : d - half, sign = lo ? -1.f : 1.f;
      }
      const float c = load_f<T>(a.cos, int64_t(pos) * a.rot_ld + i, a.rot_fp32);
      const float s = load_f<T>(a.sin, int64_t(pos) * a.rot_ld + i, a.rot_fp32);
      x = x * c + sign * static_cast<float>(src[partner]) * s;
    }
    dst[d] = static_cast<T>(x);
  }
}

}  // namespace blockfuse::attn::decode
