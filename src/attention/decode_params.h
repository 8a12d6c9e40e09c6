// Internal: the decode attention path's Params (what decode_attention.cpp hands to the split kernel,
// the merge kernel and the append kernel), its tile constants, and the pure functions the launcher,
// the heuristic and the CPU tests share.
#pragma once

#include <cstddef>
#include <cstdint>

#include "blockfuse/decode_attention.h"

namespace blockfuse::attn::decode {

// Keys per pipeline stage; each of the four warps takes 16 of them (one m16n8k16 k-step of P·V).
// Eight warps with 128-key tiles, or four stages, measured no faster on the H100
// (docs/attention.md#decode).
inline constexpr int kWarps = 4;
inline constexpr int kBlockN = 16 * kWarps;
inline constexpr int kThreads = 32 * kWarps;

// From this many splits the merge kernel gives each row four warps (each a quarter of the splits):
// one warp's chain of dependent loads over 128 splits was most of an MQA call's time at B = 1
// (docs/attention.md#decode, Tuning). Below it one warp per row, four rows per CTA.
inline constexpr int kMergeRowWarpsFrom = 32;

// Query rows of one CTA are 16·m_frags (one MMA row tile per fragment): at most 256 / D fragments,
// so the fp32 output accumulator stays at 128 registers per thread at every head dim.
constexpr int max_m_frags(int head_dim) { return 256 / head_dim; }
// Stages of the cp.async pipeline: about 96 KB of K+V in flight per CTA (two CTAs per SM at
// D <= 128), which covers the HBM latency-bandwidth product of one SM several times over.
constexpr int stages(int head_dim) { return head_dim == 64 ? 6 : head_dim == 128 ? 3 : 2; }
// Shared memory of one CTA: the pipeline's K and V stages plus the query tile; the warps' partial
// outputs are merged through the (then idle) pipeline buffers.
constexpr int smem_bytes(int head_dim, int m_frags) {
  const int pipeline = stages(head_dim) * 2 * kBlockN * head_dim * 2 + 16 * m_frags * head_dim * 2;
  const int merge = kWarps * 16 * m_frags * (head_dim + 2) * 4;
  return pipeline > merge ? pipeline : merge;
}
// The smallest number of 16-row fragments that covers `rows` rows, capped at the head dim's maximum.
constexpr int m_frags_for(int64_t rows, int head_dim) {
  const int64_t f = (rows + 15) / 16;
  return f >= max_m_frags(head_dim) ? max_m_frags(head_dim) : (f == 3 ? 4 : static_cast<int>(f));
}
// K + V bytes one call reads (bf16 / fp16 caches) for `keys` keys of every sequence.
constexpr int64_t cache_read_bytes(int64_t batch, int64_t heads_kv, int64_t keys, int64_t head_dim) {
  return batch * heads_kv * keys * head_dim * 2 * 2;
}
// Up to this K + V read, 17-32 rows per KV head (MQA's 32 query heads) go as two 16-row CTAs rather
// than one of 32: a split CTA's time follows its instruction stream, which 16 rows halve, and the
// second CTA's read of the same keys hits L2. Measured on the H100 (50 MB L2; docs/attention.md#decode,
// "Row blocks for MQA"): 1.21-1.35x at B 1 from S 1k to 32k, 1.06-1.35x at B 8 to S 8k, 1.14x at
// B 32 S 1k; from 64 MiB, where the second read misses L2, 0.77-0.98x.
inline constexpr int64_t kRowBlocksMaxCacheBytes = int64_t(32) << 20;
constexpr int m_frags_for(int64_t rows, int head_dim, int64_t cache_bytes) {
  const int f = m_frags_for(rows, head_dim);
  return f == 2 && cache_bytes <= kRowBlocksMaxCacheBytes ? 1 : f;
}

// Splits of the key range for `units` CTAs per split (batch · Hkv · row blocks) over `tiles`
// 64-key tiles on `sm_count` SMs: the smallest count whose grid fills the SMs, one CTA each, at
// least 95 % as well as the best count does (a partly filled second wave runs at the speed of
// its fullest SM). On the H100 at batch 1, Hkv = 8, D = 128, 16 splits (128 CTAs) read the cache
// at 2.4-2.9 TB/s from S = 32768, where 24 splits lost 11-15 % and 33 (two CTAs per SM) 5-9 %
// (docs/attention.md#decode). At least kMinTilesPerSplit tiles per split: a split of one tile is
// mostly its fixed cost (the query load, the pipeline's ramp, a partial written and merged), and two
// tiles per split measured faster or equal wherever one-tile splits were chosen (B = 1, S = 1k:
// 8 splits 7.7 µs against 16 splits' 8.2-8.5; MQA, S = 8k: 64 splits 14.2 µs against 122's 16.7).
// At most kDecodeAttentionMaxSplits. Host-only, a pure function
// (tests/attention/test_decode_attention_heuristic.cpp).
inline constexpr int64_t kMinTilesPerSplit = 2;
inline int num_splits(int64_t units, int64_t tiles, int sm_count) {
  const int64_t cap = tiles / kMinTilesPerSplit;
  if (units >= sm_count || cap <= 1) return 1;
  const int64_t max_s = cap < kDecodeAttentionMaxSplits ? cap : kDecodeAttentionMaxSplits;
  auto efficiency = [&](int64_t s) {
    const int64_t ctas = units * s;
    return static_cast<double>(ctas) / static_cast<double>((ctas + sm_count - 1) / sm_count * sm_count);
  };
  double best = 0.0;
  for (int64_t s = 1; s <= max_s; ++s) best = efficiency(s) > best ? efficiency(s) : best;
  for (int64_t s = 1; s <= max_s; ++s)
    if (efficiency(s) >= 0.95 * best) return static_cast<int>(s);
  return static_cast<int>(max_s);
}

// Paged caches whose pages are smaller than a tile, or no power of two, cost the split kernel a
// table entry and a shift and mask (or a division) per key; at one CTA per SM its time follows its
// instruction count, so these layouts aim at two CTAs per SM where two fit (page 16, D 128, H100,
// B 1 / 8: 0.89-0.91x of contiguous at one CTA per SM, 0.92-0.95x with 32 splits; docs/attention.md,
// "Paged, the instruction stream"). page_size 0: contiguous. (The page-size test mirrors kv_layout's:
// test_decode_attention_heuristic.cpp checks they agree.)
inline bool small_pages(int64_t page_size) {
  return page_size > 0 && (page_size < kBlockN || (page_size & (page_size - 1)) != 0);
}
// CTAs of `smem` bytes one SM of `smem_per_sm` bytes holds (1 KB reserved per CTA); 0 bytes
// (unknown): one.
inline int64_t ctas_per_sm(int64_t smem_per_sm, int smem) {
  const int64_t n = smem_per_sm / (int64_t(smem) + 1024);
  return n > 1 ? n : 1;
}
inline int num_splits(int64_t units, int64_t tiles, int sm_count, int64_t page_size, int64_t ctas_per_sm) {
  return num_splits(units, tiles, small_pages(page_size) && ctas_per_sm >= 2 ? 2 * sm_count : sm_count);
}

// What the kernels are launched with. Offsets and strides in elements.
struct Params {
  const void* q;  // [B, Sq, Hq, D] (the rotated copy in the workspace with a kv-cache append)
  void* k;        // caches: contiguous [B, S_max, Hkv, D] or paged [num_blocks, page, Hkv, D]
  void* v;
  void* out;
  float* lse;  // [B, Hq, Sq] or nullptr
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_block_stride, k_row_stride, k_head_stride;  // block = batch (contiguous) or page
  int64_t v_block_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  const int32_t* cache_seqlens;  // [B]
  const int32_t* cache_leftpad;  // [B] first key slot of each sequence, or nullptr (0)
  const int32_t* block_table;    // nullptr: contiguous
  int64_t block_table_stride;
  int page_size;    // paged: rows per page; contiguous: S_max
  int page_shift;   // log2(page_size) for a power of two (shift and mask, not a division); else -1
  int num_blocks;   // paged: pages in the cache; contiguous: B
  int capacity;     // keys a sequence can hold: S_max, or max_blocks · page_size
  int batch, seqlen_q, heads_q, heads_kv, group;  // group = Hq / Hkv
  int rows;         // rows per KV head: Sq · group
  int new_tokens;   // keys appended before attention (with_kvcache: Sq; else 0)
  int num_splits;
  float* o_partial;    // [num_splits, B·Sq·Hq, D] fp32 (num_splits > 1)
  float* lse_partial;  // [num_splits, B·Sq·Hq]
  float scale_log2, softcap_mul;  // as the forward's Params (softcap_mul 0: off)
  int window_left, window_right;  // kWindowUnbounded for unbounded
};

// The cache layouts the split kernel is instantiated for: contiguous; paged with power-of-two pages
// of at least a tile (kBlockN keys: a tile lies in one page, one table entry per tile); with smaller
// power-of-two pages (shift and mask per key); with any page size (division per key).
enum KvLayout : int { kContiguous = 0, kPagedPow2 = 1, kPagedAny = 2, kPagedTile = 3 };

inline int kv_layout(const Params& p) {
  if (p.block_table == nullptr) return kContiguous;
  if (p.page_shift < 0) return kPagedAny;
  return p.page_size >= kBlockN ? kPagedTile : kPagedPow2;
}

// The append step of decode_attention_with_kvcache: rotary embedding of q and k_new, q's rotated
// copy into q_out, k_new / v_new into the cache at cache_seqlens[b] + t.
struct AppendParams {
  const void* q;
  const void* k_new;
  const void* v_new;
  void* q_out;  // [B, Sq, Hq, D] contiguous
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t kn_batch_stride, kn_row_stride, kn_head_stride;
  int64_t vn_batch_stride, vn_row_stride, vn_head_stride;
  const void* cos;  // nullptr: no rotary
  const void* sin;
  int64_t rot_ld;
  int rotary_dim, max_positions;
  bool rot_fp32, interleaved;
};

// Workspace layout: partial outputs, partial LSEs, then the rotated q, each 16-byte aligned.
constexpr size_t align16(size_t n) { return (n + 15) / 16 * 16; }
inline size_t workspace_bytes(int64_t rows_total, int64_t head_dim, int splits, bool with_q) {
  size_t n = 0;
  if (splits > 1) n += align16(sizeof(float) * splits * rows_total * head_dim) + align16(sizeof(float) * splits * rows_total);
  if (with_q) n += align16(2 * rows_total * head_dim);
  return n;
}

}  // namespace blockfuse::attn::decode
