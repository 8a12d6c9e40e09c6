// Internal: the decode GEMM's launch parameters and the geometry shared by the heuristic, the
// workspace sizing, the validation and the kernel (so the four can never disagree).
#pragma once

#include <cstddef>
#include <cstdint>

#include "blockfuse/decode_gemm.h"

namespace blockfuse::decode {

constexpr int kWarpN = 16;    // output columns (W rows) per warp: the M = 16 side of m16n8k16
constexpr int kTileM = 8;     // token rows per MMA: the n = 8 side; M <= 32 takes 1..4 of them
constexpr int kChunkK = 32;   // k per 16-byte load of 4 lanes (two k16 MMA steps)
// The counters take a fixed region at the start of every workspace, one int per N block of 4-warp
// blocks (the most blocks): 16384 counters, N <= 16384 * 64 = 1048576 columns. Fixed, so that one
// zeroed workspace serves calls of any shape: were the region sized by N, a call with a larger N
// would find an earlier call's partials where its counters start (they are left behind, not
// cleared) and miscount its splits.
constexpr int64_t kMaxCounters = 16384;
constexpr size_t kCounterBytes = size_t(kMaxCounters) * sizeof(int);  // partials start here

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Number of 8-row MMA tiles for M rows.
inline int m_tiles(int64_t m) { return static_cast<int>(ceil_div(m, kTileM)); }
// Output columns one block covers and the number of blocks along N.
inline int64_t block_n(int warps) { return int64_t(kWarpN) * warps; }
inline int64_t n_blocks(int64_t n, int warps) { return ceil_div(n, block_n(warps)); }
// The K range of one split: ceil(K / split) rounded up to whole 32-k chunks.
inline int64_t slice_k(int64_t k, int split) { return ceil_div(ceil_div(k, split), kChunkK) * kChunkK; }
// Every slice non-empty: the last one starts before K (split 1 is always valid, also for K = 0).
inline bool split_is_valid(int64_t k, int split) {
  return split == 1 || (split >= 2 && split <= kDecodeGemmMaxSplitK && (split - 1) * slice_k(k, split) < k);
}
// fp32 partials: per split, per block, per warp, per m-tile, 32 lanes x 4 accumulators.
inline size_t partial_bytes(int64_t m, int64_t n, DecodeGemmConfig c) {
  return size_t(c.split_k) * size_t(n_blocks(n, c.warps_per_block)) * size_t(c.warps_per_block) *
         size_t(m_tiles(m)) * 32 * 4 * sizeof(float);
}
inline size_t workspace_bytes(int64_t m, int64_t n, DecodeGemmConfig c) {
  return c.split_k == 1 ? 0 : kCounterBytes + partial_bytes(m, n, c);
}
// Throws (naming 'config') unless warps_per_block is 4 or 8 and split_k is valid for K
// (heuristic.cpp; shared by decode_gemm and decode_gemm_workspace_size).
void check_config(const char* fn, int64_t k, DecodeGemmConfig c);

// What the kernel is launched with. Element offsets are int64 (W can exceed 2^31 elements).
struct DecodeGemmParams {
  const void* x;  // [m, k], row stride ldx
  const void* w;  // [n, k], row stride ldw
  void* y;        // [m, n], row stride ldy
  int64_t m, n, k;
  int64_t ldx, ldw, ldy;
  int64_t slice;     // K per split (slice_k)
  int split;         // gridDim.y
  int gated;         // 0: y = x·wᵀ [m, n]; 1: w is gated_up's interleaved [2U, K] and y = h [m, n / 2]
  int act;           // gated: the Activation code of act(gate)
  int* counters;     // workspace (split > 1)
  float* partials;   // workspace + kCounterBytes (split > 1)
};

}  // namespace blockfuse::decode
