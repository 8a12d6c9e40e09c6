// Internal: the attention family's Params (what the validating launcher, attention.cpp, hands to
// both kernels; the sm90a kernel extends it with its TMA descriptors, Sm90Params in
// traits_sm90.cuh) and the table of compiled tile configurations, shared by the heuristic, the
// validation, the launchers and the kernels (so they cannot disagree).
#pragma once

#include <cstdint>

#include "blockfuse/attention.h"

// Pure functions the kernels share with their CPU tests (the tile order, the backward's blocks).
#if defined(__CUDACC__)
#define BLOCKFUSE_ATTN_HD __host__ __device__ __forceinline__
#else
#define BLOCKFUSE_ATTN_HD inline
#endif

namespace blockfuse::attn {

// One compiled (head_dim, block_m, block_n, warps) instantiation of the sm80 kernel.
struct TileConfig {
  int head_dim, block_m, block_n, warps;
};

// The heuristic's choice for each head dim comes first (attention_config(D, 0)); the rest are
// compiled for benchmarking and tuning. At D = 128, 128 x 128 with 8 warps (64 O accumulators and
// 64 scores per thread, 96 KB of shared memory): 1-7 % faster on H100 than FlashAttention-2's
// 128 x 64 / 4 warps at S = 4096 and 16384, causal or not (docs/attention.md#tuning).
// 128 x 128 / 4 warps at D = 64 is FlashAttention-2's.
inline constexpr TileConfig kTileConfigs[] = {
    {64, 128, 128, 4}, {64, 128, 64, 4},
    {128, 128, 128, 8}, {128, 128, 64, 4}, {128, 64, 64, 4},
    {256, 128, 64, 8}, {256, 64, 64, 4},
};
inline constexpr int kNumTileConfigs = sizeof(kTileConfigs) / sizeof(kTileConfigs[0]);

// Shared memory of one block: Q [block_m, D], K and V [block_n, D] each, 2-byte elements (O is
// staged through Q's buffer).
constexpr int smem_bytes(const TileConfig& c) { return (c.block_m + 2 * c.block_n) * c.head_dim * 2; }

// The shapes the sm90a kernel handles (docs/attention.md#design): head_dim 64, 128 or 256,
// batched or varlen, with any mask, window and soft-cap. Host-only, a pure function.
inline bool sm90_supports(int64_t head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

// Whether params.kernel = kAuto runs the sm90a kernel: the build has it, the device is compute
// capability 9.0 exactly (sm_90a code is not forward compatible), the shape is one it handles and its
// shared memory fits. Every shape it handles goes to it: 1.8-2.5x the sm80 kernel on H100 at every
// head dim, batched and varlen (docs/attention.md#tuning). Host-only, a pure function
// (tests/attention/test_attention_heuristic.cpp).
inline bool auto_uses_sm90(bool built, int cc_major, int cc_minor, int64_t head_dim, int smem_needed, int smem_limit) {
  return built && cc_major == 9 && cc_minor == 0 && sm90_supports(head_dim) && smem_needed <= smem_limit;
}

// The sm90a forward kernel's query rows per tile (AttentionParams::sm90_block_m; 0 asks for this
// choice): 128 (two consumer warpgroups of 64 rows), except at D = 64 from 2048 query rows (4096
// when the tiles are walked from a counter, sm90_dynamic_walk), where three warpgroups (192 rows,
// 128 keys a step) load each K and V block for 1.5x the rows, as FlashAttention-3 does. H100, B 2,
// Hq 32, Hkv 32 / 8, causal and not, 192 / 128 rows in one call (docs/attention.md#tuning, "Peeled
// masked blocks: 192 x 128 at D = 64"): S 16384 1.11-1.17x non-causal and 1.10-1.12x causal,
// S 4096 1.12-1.13x and 1.03-1.04x, S 2048 1.00-1.08x and 1.00-1.03x; S 1024 1.00-1.01x
// non-causal but 0.85-0.94x causal (a 192-row tile there is a sixth padding, and there are fewer
// tiles than at 128). Walked from a counter, causal S 2048 runs 128 rows 1.03-1.06x faster than
// 192 (results/attention.json sm90_dynamic_walk). seqlen_q: the batch's query length (varlen: the
// maximum). Host-only, a pure function (tests/attention/test_attention_heuristic.cpp).
inline constexpr int64_t kSm90Rows192FromSeqlen = 2048;
inline constexpr int64_t kSm90Rows192FromSeqlenDynamic = 4096;
inline int sm90_block_m(int64_t head_dim, int requested, int64_t seqlen_q, bool dynamic = false) {
  if (requested != 0) return requested;
  const int64_t from = dynamic ? kSm90Rows192FromSeqlenDynamic : kSm90Rows192FromSeqlen;
  return head_dim == 64 && seqlen_q >= from ? 192 : 128;
}
// Whether the sm90a forward walks a banded (causal / windowed) shape's tiles from the caller's
// counter (AttentionParams::sm90_tile_counter: a persistent grid, each CTA taking the next tile in
// longest-first order) rather than one CTA per tile (AttentionParams::sm90_schedule). Auto: up to
// 4096 query rows at every head dim, where the hardware's dispatch of one-CTA tiles pays a prologue
// and epilogue per tile that the persistent CTA overlaps with its next tile. H100, causal, B 2,
// Hq 32, Hkv 32 / 8, counter / per tile in one call, two runs (results/attention.json
// sm90_dynamic_walk_claim_late):
// S 1024-2048 D 64 1.09-1.14x, D 128 1.09-1.16x, D 256 1.01-1.16x; S 4096 D 64 1.07-1.08x, D 128
// 1.04-1.06x, D 256 0.99 / 1.02x. Kept per tile: S 16384 (0.95-1.03x over the head dims).
inline constexpr int64_t kSm90DynamicToSeqlen = 4096;
inline bool sm90_dynamic_walk(Sm90Schedule schedule, int64_t seqlen_q) {
  if (schedule != Sm90Schedule::kAuto) return schedule == Sm90Schedule::kDynamic;
  return seqlen_q <= kSm90DynamicToSeqlen;
}
// The keys per main-loop step of the sm90a forward tile with block_m query rows (the traits in
// launch_sm90.cuh, static_asserted there).
constexpr int sm90_block_n(int64_t head_dim, int block_m) {
  return head_dim == 256 ? 64 : 128;
}
// What AttentionParams::sm90_block_m may be.
inline bool sm90_block_m_valid(int requested, int64_t head_dim) {
  return requested == 0 || requested == 128 || (requested == 192 && head_dim == 64);
}

// Window bounds as Params stores them: "unbounded" is a value beyond every row.
constexpr int kWindowUnbounded = 1 << 30;

// The sm90a kernel's grid (CTAs along x; each walks tiles blockIdx.x, + gridDim.x, ...). Without a
// causal mask or window every tile does the same work, and a persistent grid (one CTA per SM) lets
// the producer load the next tile under the current epilogue. Under a band the work per tile varies,
// and a static walk balanced worse than the hardware's block scheduler (one CTA per tile, longest
// first): on H100 at D = 128, S = 16384 causal the persistent walk lost up to 13 %, while
// non-causal it gained 0.4-6 % (docs/attention.md#tuning). Host-only, a pure function.
inline int64_t sm90_grid_ctas(int64_t num_tiles, int sm_count, bool banded) {
  constexpr int64_t kMaxGridX = (int64_t(1) << 31) - 1;
  if (banded && num_tiles <= kMaxGridX) return num_tiles;
  return num_tiles < sm_count ? num_tiles : sm_count;
}

// The order of the sm90a kernel's tiles under a band, where each tile is its own CTA and the
// hardware's block scheduler hands them out in blockIdx order: FlashAttention-3's longest-first
// order over L2 sections. The (head, batch) pairs (hb = b · heads_q + head) are cut into sections of
// `section` pairs; within a section the longest query blocks (the last m_block, causal) of every pair
// come first, then the next-longest, and so on, so the long tiles of a section start together and the
// short ones fill the tail, while the section's K and V stay in L2 (sm90_lpt_section). The last
// section may be narrower. Tile t of m_blocks · hb_total: its m_block and hb.
struct TileCoord {
  int m_block, hb;
};
BLOCKFUSE_ATTN_HD TileCoord lpt_tile(int64_t t, int m_blocks, int hb_total, int section) {
  const int64_t per_section = int64_t(section) * m_blocks;
  const int major = int(t / per_section);
  const int first = major * section;
  const int width = hb_total - first < section ? hb_total - first : section;
  const int r = int(t - major * per_section);
  return {m_blocks - 1 - r / width, first + r % width};
}

// The section of lpt_tile, in (head, batch) pairs: FlashAttention-3's rule, as many KV heads as
// have their K and V in 32 MB of L2 (rounded down to a power of two, at least one), times the query
// heads sharing each (group), at most hb_total. Host-only, a pure function
// (tests/attention/test_attention_heuristic.cpp).
inline int sm90_lpt_section(int64_t seqlen_k, int64_t head_dim, int elem_bytes, int group, int hb_total) {
  constexpr int64_t kL2Bytes = int64_t(32) << 20;
  const int64_t kv_head_bytes = 2 * seqlen_k * head_dim * elem_bytes;  // K and V
  int64_t fit = kv_head_bytes > 0 ? kL2Bytes / kv_head_bytes : 1;
  int64_t pow2 = 1;
  while (pow2 * 2 <= fit) pow2 *= 2;
  const int64_t section = pow2 * group;
  return int(section < hb_total ? section : hb_total);
}

// What the kernels are launched with, one struct from the launcher to both kernels. Offsets are in
// elements (int64: tensors may exceed 2^31).
struct Params {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // nullptr: not written
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int64_t lse_batch_stride, lse_head_stride;  // batched: Hq·Sq, Sq; varlen: 0, total_q
  int batch, heads_q, heads_kv, group;        // group = Hq / Hkv
  int seqlen_q, seqlen_k;                     // batched lengths; varlen: the maxima
  int total_q, total_k;                       // varlen: the packed tensors' rows (batched: unused)
  const int32_t* cu_seqlens_q;                // nullptr: batched
  const int32_t* cu_seqlens_k;
  float scale_log2;    // exp2 domain: softmax_scale·log2(e), or softcap·log2(e) with a soft-cap
  float scale_lse;     // natural-log factor of the row max in the LSE: softmax_scale, or softcap
  float softcap_mul;   // with a soft-cap: softmax_scale / softcap (tanh argument); 0: off
  int window_left;     // clamped: -1 -> unbounded is stored as a value beyond every row
  int window_right;
  int32_t* tile_counter;  // AttentionParams::sm90_tile_counter: [0] next tile - gridDim.x, [1] CTAs done
};

}  // namespace blockfuse::attn
