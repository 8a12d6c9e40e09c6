// Internal: the visibility rule as the sm90a dK/dV kernel walks it (keys as rows), and which query
// blocks a key block visits. Pure functions of the lengths and the window, shared by the kernel
// (backward_sm90.cuh) and its CPU tests (tests/attention/test_attention_backward_cpu.cpp).
#pragma once

#include <algorithm>

#include "attention/params.h"

namespace blockfuse::attn {

// Key j is visible to query row i iff lo(i) <= j < hi(i) with shift = len_k − len_q (bottom-right):
// lo(i) = max(0, i + shift − window_left), hi(i) = min(len_k, i + shift + window_right + 1); an
// unbounded side (>= kWindowUnbounded) is no bound. Rows >= len_q see nothing. mask.cuh's rule.
BLOCKFUSE_ATTN_HD bool key_visible(int i, int j, int len_q, int len_k, int window_left, int window_right) {
  // j >= lo(i) and j < hi(i) as the key's offset from the row's diagonal: d = j − (i + shift).
  const int d = j - i - (len_k - len_q);
  return i >= 0 && i < len_q && j >= 0 && j < len_k && (window_left >= kWindowUnbounded || d >= -window_left) &&
         (window_right >= kWindowUnbounded || d <= window_right);
}

// Whether every pair of rows [m0, m0 + bm) × keys [n0, n0 + bn) is visible, so the sm90a kernel can
// skip the per-element test. A pair is visible iff its offset from the diagonal, d = j − i − shift,
// lies in [−window_left, window_right]: the block's smallest d is at its last row and first key, the
// largest at its first row and last key, so those two corners (and the block inside the lengths)
// decide.
BLOCKFUSE_ATTN_HD bool block_fully_visible(int m0, int bm, int n0, int bn, int len_q, int len_k, int window_left,
                                           int window_right) {
  return bm > 0 && bn > 0 && m0 >= 0 && n0 >= 0 && m0 + bm <= len_q && n0 + bn <= len_k &&
         key_visible(m0 + bm - 1, n0, len_q, len_k, window_left, window_right) &&
         key_visible(m0, n0 + bn - 1, len_q, len_k, window_left, window_right);
}

// The bm-row query blocks m with block_fully_visible(m · bm, bm, n0, bn, ...), as [first, end) (empty:
// end <= first): the kernel's per-step test reduced to two comparisons, decided once per key slice.
// Two corners decide a block (above): its last row must see key n0 (m · bm <= n0 − bm + 1 − shift +
// window_left) and its first row key n0 + bn − 1 (m · bm >= n0 + bn − 1 − shift − window_right); and
// the block lies inside the lengths (0 <= m · bm <= len_q − bm). In 64 bits: the bounds may be 2^30.
struct BlockRange {
  int first, end;
};
BLOCKFUSE_ATTN_HD BlockRange fully_visible_query_blocks(int len_q, int len_k, int window_left, int window_right, int n0,
                                                        int bn, int bm) {
  if (bm <= 0 || bn <= 0 || n0 < 0 || int64_t(n0) + bn > len_k || len_q < bm) return {0, 0};
  const int64_t shift = int64_t(len_k) - len_q;
  int64_t lo = 0, hi = int64_t(len_q) - bm;  // m · bm in [lo, hi]
  if (window_right < kWindowUnbounded) {
    const int64_t b = int64_t(n0) + bn - 1 - shift - window_right;
    lo = b > lo ? b : lo;
  }
  if (window_left < kWindowUnbounded) {
    const int64_t b = int64_t(n0) - bm + 1 - shift + window_left;
    hi = b < hi ? b : hi;
  }
  if (hi < lo) return {0, 0};
  return {int((lo + bm - 1) / bm), int(hi / bm + 1)};  // lo >= 0: the ceiling; hi >= lo >= 0: the floor
}

// The block_m-row query blocks [first, first + count) that hold a row seeing a key of
// [n0, n0 + block_n) ∩ [0, len_k); count = 0 when there is none (n0 >= len_k included).
struct QueryBlocks {
  int first, count;
};
BLOCKFUSE_ATTN_HD QueryBlocks query_blocks_of_key_block(int len_q, int len_k, int window_left, int window_right,
                                                        int n0, int block_n, int block_m) {
  if (n0 >= len_k || len_q <= 0) return {0, 0};
  const int shift = len_k - len_q;
  const int last_key = n0 + block_n - 1 < len_k - 1 ? n0 + block_n - 1 : len_k - 1;
  // Rows whose hi(i) > n0 and lo(i) <= last_key.
  int i_lo = window_right >= kWindowUnbounded ? 0 : n0 - shift - window_right;
  i_lo = i_lo > 0 ? i_lo : 0;
  int i_hi = window_left >= kWindowUnbounded ? len_q - 1 : last_key - shift + window_left;
  i_hi = i_hi < len_q - 1 ? i_hi : len_q - 1;
  if (i_hi < i_lo) return {0, 0};
  return {i_lo / block_m, i_hi / block_m - i_lo / block_m + 1};
}

// The block_n-key blocks [first, first + count) that hold a key seen by a row of the block_m-row
// query block starting at row m0 (rows past len_q see nothing); count = 0 when there is none. The
// sm90a kernel's deterministic mode orders each query block's dQ additions over these (dq_turn)
// (query_blocks_of_key_block's converse: block n visits block m iff m's range holds n).
BLOCKFUSE_ATTN_HD QueryBlocks key_blocks_of_query_block(int len_q, int len_k, int window_left, int window_right,
                                                        int m0, int block_m, int block_n) {
  if (m0 >= len_q || len_k <= 0) return {0, 0};
  const int shift = len_k - len_q;
  const int row_hi = m0 + block_m - 1 < len_q - 1 ? m0 + block_m - 1 : len_q - 1;
  // Keys j with j >= lo(m0) and j < hi(row_hi).
  int j_lo = window_left >= kWindowUnbounded ? 0 : m0 + shift - window_left;
  j_lo = j_lo > 0 ? j_lo : 0;
  int j_hi = window_right >= kWindowUnbounded ? len_k : row_hi + shift + window_right + 1;  // exclusive
  j_hi = j_hi < len_k ? j_hi : len_k;
  if (j_hi <= j_lo) return {0, 0};
  return {j_lo / block_n, (j_hi - 1) / block_n - j_lo / block_n + 1};
}

// The deterministic mode's order of a query block's dQ additions: from the last key block it sees
// down to the first (turn 0 is kb.first + kb.count - 1). Under a causal mask a key block's first
// step is its diagonal query block, whose order starts with it, and every later step waits only for
// key block n + 1, which reached that query block one step earlier: each CTA runs its own length.
// Ascending, the diagonal step would wait for every longer key block before it, so each key block
// took as long as the first. The grid launches key blocks last first (deterministic_cta), so a CTA
// waits only for CTAs launched before it, which the hardware dispatches first: never for one that is
// not yet resident. FlashAttention-3's deterministic causal order, for the same reasons.
BLOCKFUSE_ATTN_HD int dq_turn(QueryBlocks kb, int n_block) { return kb.first + kb.count - 1 - n_block; }

// The deterministic mode's (key block, KV head) of grid position (x, y) (z is the sequence). Key
// blocks go last first. Without a mask every key block of a head starts at query block 0, so
// head-major the last in the order waits a step for each before it (a wavefront as long as the
// head's key blocks); key_block_major (the launcher's choice there, where the key blocks fit grid
// y) varies the KV heads fastest, so the CTAs resident at once are a few key blocks of every head
// and one launched later finds those it waits for past its first query block. With a causal mask
// nothing waits either way, and head-major spreads each head's longest key blocks (launched last)
// over the run instead of leaving them all to its end.
struct BwdCta {
  int key_block, head;
};
BLOCKFUSE_ATTN_HD BwdCta deterministic_cta(int x, int y, int grid_x, int grid_y, bool key_block_major) {
  return key_block_major ? BwdCta{grid_y - 1 - y, x} : BwdCta{grid_x - 1 - x, y};
}

// The unordered mode's (key block, KV head) of grid position (x, y) in a grid of grid_x × grid_y.
// Under a mask bounded on the right only (causal, or a left-unbounded window), key block 0 is seen by
// every query block and each later one by fewer. Head-major, the last head's longest CTA would start
// after most of the others and run alone at the end; key_block_major launches the KV heads in
// sections of section_heads (backward_section_heads), each section longest first across its heads
// (the KV heads fastest), so the short CTAs of a section fill in beside the next one's long ones and
// only the last section's shortest end the run. A section rather than every head at once: the CTAs
// in flight then share fewer heads' Q, dO and dQ rows in the L2.
BLOCKFUSE_ATTN_HD BwdCta unordered_cta(int x, int y, int grid_x, int grid_y, bool key_block_major, int section_heads) {
  if (!key_block_major) return BwdCta{x, y};
  const int64_t linear = int64_t(y) * grid_x + x, span = int64_t(section_heads) * grid_y;
  const int section = static_cast<int>(linear / span), first = section * section_heads;
  const int heads = grid_x - first < section_heads ? grid_x - first : section_heads;
  const int r = static_cast<int>(linear - section * span);
  return BwdCta{r / heads, first + r % heads};
}

// KV heads per section of the unordered key-block-major grid: the fewest whose CTAs, longest first,
// outlast the longest of them (a section's work is about key_blocks × heads × half the longest CTA's
// under a causal mask, so key_blocks × heads ≥ 2 × sm_count keeps every SM busy until the next
// section's long CTAs start), every head when that is more than there are.
inline int backward_section_heads(int64_t key_blocks, int heads_kv, int sm_count) {
  if (key_blocks <= 0 || heads_kv <= 1) return 1;
  const int64_t want = (2 * int64_t(sm_count > 0 ? sm_count : 1) + key_blocks - 1) / key_blocks;
  return want >= heads_kv ? heads_kv : static_cast<int>(want);
}

// The launcher's grid order (key_block_major: grid (KV heads, key blocks, sequences)), where the key
// blocks fit grid y (65535 of them: 8.4M keys). Deterministic: without a mask (deterministic_cta says
// why); unordered: under a mask bounded on the right only (unordered_cta).
BLOCKFUSE_ATTN_HD bool backward_key_block_major(bool deterministic, int64_t key_blocks, int window_left,
                                                int window_right) {
  if (key_blocks > 65535) return false;
  if (deterministic) return window_left >= kWindowUnbounded && window_right >= kWindowUnbounded;
  return window_left >= kWindowUnbounded && window_right < kWindowUnbounded;
}

// The sm90a kernel's dq_accum: per query head, rows of D fp32 (a head's rows contiguous, so a CTA's
// 64-row dQ partial is one contiguous span that a single bulk reduction adds), each row's 8-float
// (32-byte) chunks permuted by the row's index modulo 8, so that the 8 rows a warp's accumulator
// stores touch fall on distinct banks of the shared-memory stage that mirrors the span byte for byte.
// The column where (row, col) lives; an involution, so the conversion reads with the same function.
BLOCKFUSE_ATTN_HD int dq_accum_col(int64_t row, int col) { return (((col >> 3) ^ int(row & 7)) << 3) | (col & 7); }

}  // namespace blockfuse::attn
