// Internal: the launch shape add_rmsnorm picks for a row of H elements, per architecture: pure
// functions, CPU-tested (tests: test_add_rmsnorm_config), used by the launcher (add_rmsnorm.cu) and
// printed by `blockfuse bench add-rmsnorm`.
#pragma once

#include <algorithm>
#include <cstdint>

namespace blockfuse::detail {

constexpr int kAddRmsNormLoopThreads = 512;
constexpr int kAddRmsNormMaxRegisterChunks = 4096;  // 512 threads x 8 chunks: H <= 32768
// Cluster path (sm_90): rows of 1024 .. 16384 chunks (8192 <= H <= 131072).
constexpr int kAddRmsNormMinClusterChunks = 1024;  // H >= 8192
constexpr int kAddRmsNormMaxClusterChunks = 16384;  // 8 CTAs x 512 threads x 4 chunks

// v = 16-byte chunks each thread holds in registers (0 = the loop path, for rows longer than
// kAddRmsNormMaxRegisterChunks chunks), threads = block size (a multiple of 32), cluster = CTAs
// sharing one row (1: one block per row; 2, 4, 8: a thread-block cluster, sm_90 only).
// preload_w: the one-block kernel loads its weight chunks into registers with the row's chunks (decode-
// sized calls, add_rmsnorm_preload_weight below) instead of after the reduction.
struct AddRmsNormConfig {
  int v, threads;
  int cluster = 1;
  bool preload_w = false;
  bool streaming_stores = false;  // add_rmsnorm_streaming_stores
};

// Which v the one-block shape gives rows (tuning story: docs/add_rmsnorm.md#tuning):
//   kV8:      v = 8 x <= 256 threads at 1024 < chunks <= 2048 (8192 < H <= 16384);
//   kV4Wide:  v = 4 x <= 512 threads there: the same 3 blocks per SM, twice the warps, half the
//             chunks per thread to convert and store after the row's barrier (H = 16384: 82-86 ->
//             91-98 % of copy at 2048-32768 rows on the H100);
//   kWide:    the kV4Wide idea at every H: v = 1 up to 512 chunks, 2 up to 1024, 4 up to 2048, each
//             x <= 512 threads (H = 4096 -> v1 x 512, 8192 -> v2 x 512);
//   kAuto:    the default, per call (add_rmsnorm_auto_rule below): kWide where it measured faster,
//             kV4Wide elsewhere. add_rmsnorm_config reads an unresolved kAuto as kV4Wide.
// The bench and the tests override it per call (tuning.h: AddRmsNormTuning).
enum class AddRmsNormRule : int { kAuto = -1, kV8 = 0, kV4Wide = 1, kWide = 2 };
constexpr AddRmsNormRule kAddRmsNormDefaultRule = AddRmsNormRule::kAuto;

// kAuto's choice: kWide for H = 8192 without the weight preload (256-32768 rows up to 4.5 points of
// copy faster on the H100), for H = 4096 with the preload (0.1-0.2 µs faster at 1-32 rows) and for
// H = 2048-4096 from 1536 rows except the dynamic FP8 output (0.8-4 points faster; with fp16 input
// the dynamic output lost up to 3 points); kV4Wide elsewhere (docs/add_rmsnorm.md#tuning).
constexpr int64_t kAddRmsNormWideFromRows = 1536;
inline AddRmsNormRule add_rmsnorm_auto_rule(int nchunks, bool preload_w, int64_t rows = 0, bool dynamic_fp8 = false) {
  if (preload_w) return nchunks <= 512 ? AddRmsNormRule::kWide : AddRmsNormRule::kV4Wide;
  if (nchunks > 128 && nchunks <= 512 && rows >= kAddRmsNormWideFromRows && !dynamic_fp8) return AddRmsNormRule::kWide;
  return nchunks > 512 && nchunks <= 1024 ? AddRmsNormRule::kWide : AddRmsNormRule::kV4Wide;
}

// sm_80 path, one block per row. The smallest v whose block (<= 128, 256, 256 (512 for kV4Wide),
// 512 threads for v = 1, 2, 4, 8) covers the row: short rows get few registers per thread, long
// rows enough threads to issue every load at once.
// H = 4096 -> v 2 x 256 threads; 3584 -> 2 x 224; 5120 -> 4 x 160; 8192 -> 4 x 256;
// 16384 -> 8 x 256 (kV8) or 4 x 512 (kV4Wide).
inline AddRmsNormConfig add_rmsnorm_config(int nchunks, AddRmsNormRule rule = kAddRmsNormDefaultRule) {
  auto threads_for = [&](int v) { return std::max(32, (nchunks + v - 1) / v + 31) / 32 * 32; };
  if (rule == AddRmsNormRule::kWide && nchunks <= 2048) {
    const int v = nchunks <= 512 ? 1 : nchunks <= 1024 ? 2 : 4;
    return {v, threads_for(v)};
  }
  if (nchunks <= 128) return {1, threads_for(1)};
  if (nchunks <= 512) return {2, threads_for(2)};
  if (nchunks <= (rule == AddRmsNormRule::kV8 ? 1024 : 2048)) return {4, threads_for(4)};
  if (nchunks <= kAddRmsNormMaxRegisterChunks) return {8, threads_for(8)};
  return {0, kAddRmsNormLoopThreads};
}

// sm_90 path for decode-sized row counts. One block per row leaves one SM to move the whole row
// (H = 16384, 1-32 rows: 6.1-7.1 µs on the H100, per-SM bound). A cluster of C CTAs splits each row
// into C slices (exchanging the partial sums through distributed shared memory), so a row is fetched
// by C SMs at once. Clusters lose wherever the one-block kernel already has enough rows to fill the
// GPU (H = 16384: 256-32768 rows 8-30 % slower), so they are used only for H >= 8192 and
// rows · C <= 2 · SMs (add_rmsnorm_clusters_pay). C grows with H so a CTA keeps <= 512 chunks
// (<= 1024 from H = 32768): v = 2 chunks per thread. H = 8192 -> c4: v2 x 128; 16384 -> c8: v2 x 128
// (8 CTAs measured 0.15 µs faster than 4 at 1-8 rows); 32768 -> c8: v2 x 256; 131072 -> c8: v4 x 512;
// beyond kAddRmsNormMaxClusterChunks the one-block path (docs/add_rmsnorm.md#tuning).
// The slice of CTA rank k is chunks [k*S, min((k+1)*S, nchunks)), S = ceil(nchunks / C); every
// CTA gets >= 1 chunk (nchunks >= 1024 >> C).
inline AddRmsNormConfig add_rmsnorm_config_sm90(int nchunks, AddRmsNormRule rule = kAddRmsNormDefaultRule) {
  if (nchunks < kAddRmsNormMinClusterChunks || nchunks > kAddRmsNormMaxClusterChunks) return add_rmsnorm_config(nchunks, rule);
  const int c = nchunks < 2048 ? 4 : 8;
  const int slice = (nchunks + c - 1) / c;
  const int v = slice <= 1024 ? 2 : 4;
  return {v, std::max(32, ((slice + v - 1) / v + 31) / 32 * 32), c};
}

// Whether a cluster of `cluster` CTAs per row beats one block per row for `rows` rows: only while
// the rows alone leave most SMs idle (measured above).
inline bool add_rmsnorm_clusters_pay(int64_t rows, int cluster, int sm_count) {
  return cluster > 1 && rows * cluster <= 2 * int64_t(sm_count);
}

// Decode-sized calls: one block per row with the weight loaded up front. After the reduction the
// default kernel still waits on an L2 round trip for the weight, which a call of a few rows cannot
// hide; loading it with the row removes that wait (H = 4096, 1-32 rows: 0.15-0.26 µs faster on the
// H100). It pays while the call holds at most 2^18 chunks (4 MiB of x; faster up to 512 rows of
// H = 4096, 256 of 8192, 128 of 16384, slower beyond). Rows of H > 8192 (up to 16384) take the
// cluster kernel instead at <= 32 rows where clusters can run: up to 1 µs faster than the preloaded
// one-block kernel for every output (docs/add_rmsnorm.md#tuning).
constexpr int64_t kAddRmsNormPreloadChunks = int64_t{1} << 18;
constexpr int64_t kAddRmsNormClusterFirstRows = 32;
inline bool add_rmsnorm_preload_weight(int64_t rows, int nchunks, bool clusters_available,
                                       int64_t preload_chunks = kAddRmsNormPreloadChunks) {
  if (nchunks > 2048 || rows * nchunks > preload_chunks) return false;
  return !(clusters_available && nchunks > 1024 && rows <= kAddRmsNormClusterFirstRows);
}

// Whether the one-block kernel stores a row's residual_out before the row's reduction (its stores
// then drain while the block waits at the barriers; the cluster kernel always does) or after it.
// Before is faster for the 16-bit output at 1-256 rows (up to 0.44 µs on the H100) and within 1 %
// from 2048; for the FP8 outputs faster at 1-32 rows and 1-3 % slower from 256
// (docs/add_rmsnorm.md#tuning).
constexpr int64_t kAddRmsNormEarlyResOutFp8Rows = 32;
// (constexpr: the kernel calls it too, under --expt-relaxed-constexpr.)
constexpr bool add_rmsnorm_early_res_out(bool dtype_out, int64_t rows) {
  return dtype_out || rows <= kAddRmsNormEarlyResOutFp8Rows;
}

// Whether the one-block register kernel (v = 1..8) stores residual_out and out with st.global.cs
// (evict first in L2) instead of plain stores: 0.3-2.3 points of copy faster from 1024 rows on the
// H100, but slower at 257-512 rows and up to 0.5 µs slower at 1-32, where a call's small output no
// longer stays in L2 for the next. The loop kernel (H > 32768) reads its residual_out back and keeps
// plain stores (docs/add_rmsnorm.md#tuning).
constexpr int64_t kAddRmsNormStreamingStoresRows = 1024;
constexpr bool add_rmsnorm_streaming_stores(int v, int64_t rows) {
  return v >= 1 && v <= 8 && rows >= kAddRmsNormStreamingStoresRows;
}

// ---- Backward (backward_sm80.cuh) -----------------------------------------------------------------
// The backward kernel holds a row's dy, h and weight chunks (and d_residual_out's) in registers plus
// V · 8 fp32 dweight accumulators per thread, so it keeps at most 2 chunks per thread (512 threads:
// H <= 8192); v = 1 up to 512 chunks, 2 up to 1024, each x <= 512 threads (the forward's kWide shape).
// ptxas (sm_80): v = 1 60-63 registers, v = 2 91-117, no spills; v = 4 hit the 128-register cap of
// 512 threads and spilled 44-228 bytes, so wider rows take the loop kernel, which re-reads the row
// (mostly from L2) and accumulates its dweight partials in the workspace. Not yet measured on a GPU
// (docs/add_rmsnorm.md#backward).
constexpr int kRmsNormBwdMaxRegisterChunks = 1024;
// Rows of the register kernel in flight per CTA (cp.async into shared memory, backward_sm80.cuh):
// 2 · 3 · 16 bytes a chunk, 96 KB at H = 8192 with d_residual_out (within sm_86's 99 KB).
constexpr int kRmsNormBwdStages = 2;
inline AddRmsNormConfig rmsnorm_backward_config(int nchunks) {
  if (nchunks > kRmsNormBwdMaxRegisterChunks) return {0, kAddRmsNormLoopThreads};
  const int v = nchunks <= 512 ? 1 : 2;
  return {v, std::max(32, ((nchunks + v - 1) / v + 31) / 32 * 32)};
}

// How many CTAs the backward kernel runs for `rows` rows (CTA b takes rows b, b + C, b + 2C, ...),
// which is also the number of rows of fp32 dweight partials [C, H] the reduction adds. A pure function
// of rows, so the workspace size and every summation order are the same on every device: one row per
// CTA up to kRmsNormBwdMinCtas rows (decode-sized calls: every row starts at once), then about
// kRmsNormBwdRowsPerCta rows per CTA, capped at kRmsNormBwdMaxCtas. The partials cost C · H · 8 bytes
// (fp32, written then read) against >= 3 · M · H · 2 for dy, h and dh: 2048 rows (264 CTAs) 17 %,
// 8192 rows 4 % (264 CTAs), 32768 rows (1024 CTAs) 4 %. 32 rows per CTA over 8 (H100, one call, the
// kernel unchanged; docs/add_rmsnorm.md, "CTA count"): +4-8 points of copy at 4096 and 8192 rows,
// equal at 2048 and 32768, where the count is the same.
constexpr int64_t kRmsNormBwdMinCtas = 264;     // 2 per SM of an H100 (132 SMs)
constexpr int64_t kRmsNormBwdRowsPerCta = 32;
constexpr int64_t kRmsNormBwdMaxCtas = 1024;
inline int64_t rmsnorm_backward_ctas(int64_t rows) {
  if (rows <= kRmsNormBwdMinCtas) return std::max<int64_t>(rows, 0);
  const int64_t c = (rows + kRmsNormBwdRowsPerCta - 1) / kRmsNormBwdRowsPerCta;
  return std::min(kRmsNormBwdMaxCtas, std::max(kRmsNormBwdMinCtas, c));
}

// The dweight reduction kernel: blocks of kRmsNormBwdReduceCols columns x kRmsNormBwdReduceGroups
// groups; group k adds partial rows k, k + G, k + 2G, ... in that order, then thread group 0 adds the
// G sums in order 0..G-1 (fixed: independent of the device and of the timing). 32 groups (1024
// threads a block) over 8: +1-3 points of copy from 8192 rows, equal at 2048 (H100, one call beside
// the 8-group kernel: docs/add_rmsnorm.md, "dweight in 32 groups").
constexpr int kRmsNormBwdReduceCols = 32;
constexpr int kRmsNormBwdReduceGroups = 32;

}  // namespace blockfuse::detail
