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

// Which v the one-block shape gives rows of 1024 < chunks <= 2048 (8192 < H <= 16384):
//   kV8:      v = 8 x <= 256 threads (H = 16384: 75-82 registers, ptxas sm_90);
//   kV4Wide:  v = 4 x <= 512 threads (40-53 registers): the same 3 blocks per SM, twice the warps,
//             half the chunks per thread to convert and store after the row's barrier.
// Measured on the H100 in one call, same buffer placement (results/gpu/memory_bound_h100/
// add_rmsnorm_v8_two.json vs add_rmsnorm_v4wide_one.json), H = 16384, % of copy at 2048 / 8192 /
// 32768 rows: bf16 out 81.8 / 84.3 / 85.6 -> 91.4 / 96.7 / 97.9, FP8 static 78.6 / 82.7 / 84.4 ->
// 90.0 / 96.8 / 98.6. Process-wide override for the bench and the tests (set_add_rmsnorm_rule).
//   kWide:    the kV4Wide idea at every H: v = 1 up to 512 chunks, 2 up to 1024, 4 up to 2048, each
//             x <= 512 threads (H = 4096 -> v1 x 512, 8192 -> v2 x 512).
//   kAuto:    the default, per call (add_rmsnorm_auto_rule below): kWide where it measured faster,
//             kV4Wide elsewhere. add_rmsnorm_config reads an unresolved kAuto as kV4Wide.
enum class AddRmsNormRule : int { kAuto = -1, kV8 = 0, kV4Wide = 1, kWide = 2 };
constexpr AddRmsNormRule kAddRmsNormDefaultRule = AddRmsNormRule::kAuto;

// kAuto's choice. kWide against kV4Wide on the H100, one call each side by side
// (results/gpu/session7_h100/run9 for 2048-32768 rows, run10 for 1-256 rows, C++ bench, every output):
//   calls that preload the weight (measured at 1-32 rows): H = 4096 v1 x 512 is 0.1-0.2 µs faster
//     (bf16, 1 row: 2.05 -> 1.93 µs), H = 8192 v2 x 512 0.08-0.15 µs slower;
//   the others: H = 8192 v2 x 512 is faster (256 rows 11.70 -> 10.78 µs; % of copy at 2048 / 8192 /
//     32768 rows, bf16 out, 83.0 / 93.6 / 94.9 -> 87.4 / 95.5 / 97.9), H = 4096 v1 x 512 is slower
//     at 256 rows (8.13 -> 11.39 µs) and within +-1.5 points from 2048 rows.
// H = 16384 is v4 x 512 under both.
// Session 15 measured it again with streaming stores, H = 2048 / 3584 / 4096 (128 < chunks <= 512) from
// 1536 rows, bf16 and fp16, every output, two runs each (results/gpu/session15_h100/call7/table.txt; the
// lower run, % of copy): kWide moved more for the 16-bit and static FP8 outputs at every point (bf16,
// H = 4096, bf16 / static out: 1536 rows 69.1 / 66.3 -> 73.4 / 69.4, 2048 rows 78.8 / 74.5 -> 80.4 / 76.7,
// 8192 rows 93.4 / 92.6 -> 94.2 / 93.3, 32768 rows 98.4 / 99.1 -> 98.9 / 99.2; H = 3584, 2048 rows, bf16
// out 74.4 -> 77.2); the dynamic FP8 output gained with bf16 input but lost with fp16 (H = 3584 x 32768
// rows 95.1 -> 92.3, H = 4096 96.4 -> 95.2). At 1024 rows of H = 4096 the bf16 output lost (66.4 ->
// 65.4, call6/table.txt). So kWide there from 1536 rows, except for the dynamic FP8 output.
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

// sm_90 path for decode-sized row counts. One block per row leaves one SM to move the whole row: at
// H = 16384 (160 KB of x, residual, weight, residual_out and out) a decode step of 1-32 rows takes
// 6.1-7.1 µs on the H100, per-SM bound (results/gpu/experiments/add_rmsnorm_v1_one_block.json). A
// cluster of C CTAs splits each row into C slices (exchanging the partial sums through distributed
// shared memory), so a row is fetched by C SMs at once: 3.7-4.5 µs, 5.0-5.8 with the dynamic FP8
// scale's second exchange (results/gpu/bench_add_rmsnorm_h100.json). Clusters lose wherever the
// one-block kernel already has enough rows to fill the GPU (H = 16384: 256-32768 rows 8-30 %
// slower; H = 4096, C = 2: slower at every row count, 1 row 2.99 vs 2.30 µs;
// results/gpu/experiments/add_rmsnorm_clusters_everywhere_weight_preload.json), so they are used
// only for H >= 8192 and rows · C <= 2 · SMs (add_rmsnorm_clusters_pay). C grows with H so a CTA
// keeps <= 512 chunks (<= 1024 from H = 32768): v = 2 chunks per thread. H = 8192 -> c4: v2 x 128;
// 16384 -> c8: v2 x 128; 32768 -> c8: v2 x 256; 131072 -> c8: v4 x 512; beyond
// kAddRmsNormMaxClusterChunks the one-block path. H = 16384 took 4 CTAs until session 13; 8 measured
// faster at 1 / 8 / 32 rows for every output (results/gpu/session13_h100/exp3/table.txt, H100, two
// runs: bf16 out 2.72 / 2.78 / 3.22 -> 2.56 / 2.59 / 3.22 µs, dynamic FP8 3.37 / 3.41 / 4.02 -> 3.22
// / 3.21 / 3.80).
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
// hide; loading it with the row removes that wait. H100, µs per call at 1 / 8 / 32 rows in a CUDA
// graph (results/gpu/memory_bound_h100/next_row/call2/add_rmsnorm_small_*.json):
//   H = 4096   bf16 out 2.40 / 2.47 / 2.55 -> 2.22 / 2.28 / 2.40; dynamic FP8 2.62 / 2.68 / 2.75 -> 2.36 / 2.43 / 2.53
//   H = 8192   (was the 4-CTA cluster) bf16 3.28 / 3.31 / 3.78 -> 2.52 / 2.65 / 2.93; dynamic 3.61 / 3.80 / 4.15 -> 2.98 / 3.09 / 3.22
//   H = 16384  (vs the cluster) bf16 3.70 / 3.74 / 4.49 -> 3.53 / 3.80 / 4.14; static 3.89 / 3.94 / 4.63 -> 3.51 / 3.75 / 3.95;
//              dynamic 4.05 / 4.09 / 4.81 -> 4.20 / 4.43 / 4.67: the cluster kernel stayed for dynamic FP8 at <= 8 rows.
// Beyond decode sizes (session 7, results/gpu/session7_h100/run14: every point up to 512 rows timed as
// CUDA-graph replays over rotated inputs, preload vs not in one call, µs, bf16 / static FP8 out):
//   H = 4096   faster with it at 64-512 rows (256: 5.20 / 5.41 -> 4.88 / 4.68; 512: 8.66 / 8.40 -> 7.40 / 7.43)
//   H = 8192   faster at 64-256 (64: 5.02 -> 3.86, against the cluster; 256: 7.82 / 8.01 -> 7.76 / 7.19),
//              slower at 512 (12.87 -> 14.44)
//   H = 16384  faster at 64-128 (128: 9.18 -> 8.18), slower at 256 (13.56 -> 14.88)
// i.e. while the call holds at most 2^18 chunks (4 MiB of x): rows * chunks <= kAddRmsNormPreloadChunks.
// (Until session 7 it stopped at 32 rows, from an events-per-call measurement at 256 rows that carried
// a launch per call.) Rows past 2048 chunks (H > 16384) were not measured with it.
// Session 13: the cluster kernel's push exchange (add_rmsnorm_sm90.cuh) against main's, two runs each
// in one call (H100, results/gpu/session13_h100/exp2, table.txt; µs at 1 / 8 / 32 rows): with the
// preload off (the cluster kernel wherever it pays) H = 16384 bf16 out 3.47 / 3.52 / 4.22 -> 2.71 /
// 2.77 / 3.21 and static FP8 3.61 / 3.64 / 4.38 -> 2.89 / 2.95 / 3.47, against the preloaded one-block
// kernel's 2.98 / 3.12 / 3.32 and 3.13 / 3.22 / 3.36; dynamic FP8 3.33 / 3.42 / 4.02 against 4.02 at
// 32 rows. At H = 8192 the one-block kernel stays ahead (bf16 2.25 / 2.36 / 2.41 against 2.49 / 2.53
// / 2.78). So every output of H > 8192 takes the cluster kernel at <= 8 rows (until then only the
// dynamic FP8 one), and the preloaded one-block kernel from 9 rows (9-31 not measured).
// With 8 CTAs a row at H = 16384 (exp3/table.txt) the cluster kernel also wins at 32 rows: bf16 3.22
// against 3.34 µs, static FP8 3.34 against 3.37, dynamic 3.80 against 4.02. So clusters take
// H > 8192 up to 32 rows (9-31 not measured; add_rmsnorm_clusters_pay allows 33 rows of 8 CTAs).
constexpr int64_t kAddRmsNormPreloadChunks = int64_t{1} << 18;
constexpr int64_t kAddRmsNormClusterFirstRows = 32;
inline bool add_rmsnorm_preload_weight(int64_t rows, int nchunks, bool clusters_available,
                                       int64_t preload_chunks = kAddRmsNormPreloadChunks) {
  if (nchunks > 2048 || rows * nchunks > preload_chunks) return false;
  return !(clusters_available && nchunks > 1024 && rows <= kAddRmsNormClusterFirstRows);
}

// Whether the one-block kernel stores a row's residual_out before the row's reduction (its stores
// then drain while the block waits at the barriers; the cluster kernel always does) or after it.
// Before against after on the H100, one call, two runs each (results/gpu/session8_h100/exp4, µs):
//   16-bit output: faster at 1-256 rows (H = 4096 1 / 256 rows 1.92 / 4.87 -> 1.87 / 4.72; H = 8192
//     2.36 / 7.72 -> 2.25 / 7.28; H = 16384 1 / 32 rows 3.21 / 3.68 -> 3.00 / 3.33), within 1 % from 2048;
//   FP8 outputs: faster at 1-32 rows (dynamic, H = 16384, 32 rows: 4.25 -> 3.99), 1-3 % slower at 256
//     and 2048 rows of H = 4096 / 8192 (dynamic, H = 4096, 2048 rows: 27.0 -> 27.8).
constexpr int64_t kAddRmsNormEarlyResOutFp8Rows = 32;
// (constexpr: the kernel calls it too, under --expt-relaxed-constexpr.)
constexpr bool add_rmsnorm_early_res_out(bool dtype_out, int64_t rows) {
  return dtype_out || rows <= kAddRmsNormEarlyResOutFp8Rows;
}

// Whether the one-block register kernel (v = 1..8) stores residual_out and out with st.global.cs
// (evict first in L2) instead of plain stores. H100, one call each, two runs, plain -> streaming
// (results/gpu/session14_h100/exp2/table.txt, exp3/table.txt; the lower run), % of copy for the bf16 /
// static FP8 / dynamic FP8 outputs:
//   2048 rows: H = 4096 77.0 / 73.5 / 71.6 -> 78.0 / 74.2 / 72.5, H = 8192 86.7 / 84.7 / 82.9 -> 88.2 / 86.3 / 82.8,
//              H = 16384 90.8 / 89.3 / 87.8 -> 92.5 / 90.8 / 87.4;
//   8192 rows: H = 4096 90.8 / 89.0 / 88.8 -> 93.1 / 92.4 / 88.9, H = 8192 94.8 / 94.3 / 93.9 -> 96.6 / 96.8 / 94.9,
//              H = 16384 96.0 / 96.6 / 95.4 -> 98.1 / 98.7 / 96.9;
//   but 256 rows of H = 8192 76.4 / 66.7 / 63.2 -> 66.4 / 59.3 / 61.7, and up to 0.5 µs slower at 1-32 rows
//   (H = 8192, 1 row: 2.25 -> 2.75 µs), where a call's small output no longer stays in L2 for the next.
// Between 257 and 2048 rows (session 15, results/gpu/session15_h100/call1/table.txt, the same form, two
// runs each; the lower run):
//   1024 rows: equal or faster for every H and output (H = 16384 bf16 85.5 -> 86.4, static FP8 83.2 ->
//              84.1; H = 8192 79.7 / 74.6 / 72.4 -> 80.0 / 75.2 / 72.6; H = 4096 within the runs' spread);
//   1536 rows: 0.3-2.3 points faster (H = 16384 static FP8 86.6 -> 88.9);
//   512 rows:  the static FP8 output slower (H = 4096 49.9 -> 47.2, H = 16384 72.5 -> 71.4);
//   257 rows:  slower (H = 8192 bf16 53.3 -> 50.7).
// So from 1024 rows (513-1023 not measured). The loop kernel (H > 32768) reads its residual_out back
// and keeps plain stores (not measured).
constexpr int64_t kAddRmsNormStreamingStoresRows = 1024;
constexpr bool add_rmsnorm_streaming_stores(int v, int64_t rows) {
  return v >= 1 && v <= 8 && rows >= kAddRmsNormStreamingStoresRows;
}

}  // namespace blockfuse::detail
