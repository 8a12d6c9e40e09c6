// Internal: the launch shape add_rmsnorm picks for a row of H elements, per architecture: pure
// functions, CPU-tested (tests: test_add_rmsnorm_config), used by the launcher (add_rmsnorm.cu) and
// printed by `blockfuse bench add-rmsnorm`.
#pragma once

#include <algorithm>
#include <cstdint>

#include "blockfuse/add_rmsnorm.h"

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
//             half the chunks per thread after the row's barrier (H = 16384: 82-86 -> 91-98 % of copy
//             from 2048 rows, H100).
//   kWide:    the kV4Wide idea at every H: v = 1 up to 512 chunks, 2 up to 1024, 4 up to 2048, each
//             x <= 512 threads (H = 4096 -> v1 x 512, 8192 -> v2 x 512).
//   kAuto:    the default, per call (add_rmsnorm_auto_rule below). add_rmsnorm_config reads an
//             unresolved kAuto as kV4Wide. The measurements: docs/add_rmsnorm.md#tuning.
enum class AddRmsNormRule : int { kAuto = -1, kV8 = 0, kV4Wide = 1, kWide = 2 };
constexpr AddRmsNormRule kAddRmsNormDefaultRule = AddRmsNormRule::kAuto;

// kAuto's choice: kWide where it measured faster than kV4Wide on the H100 — calls that preload the
// weight at H <= 4096, H = 8192 without the preload, and 128 < chunks <= 512 from 1536 rows except
// for the dynamic FP8 output (which lost with fp16 input there). docs/add_rmsnorm.md#tuning.
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
// (per-SM bound: H = 16384 at 1-32 rows 6.1-7.1 µs on the H100); a cluster of C CTAs splits each row
// into C slices that exchange partial sums through distributed shared memory, so C SMs fetch the row
// at once. Clusters lose wherever the one-block kernel already fills the GPU, so they are used only
// for H >= 8192 and rows · C <= 2 · SMs (add_rmsnorm_clusters_pay). C grows with H so a CTA keeps
// <= 512 chunks (<= 1024 from H = 32768): H = 8192 -> c4: v2 x 128; 16384 -> c8: v2 x 128;
// 32768 -> c8: v2 x 256; 131072 -> c8: v4 x 512; beyond kAddRmsNormMaxClusterChunks the one-block
// path. 8 CTAs at H = 16384 measured faster than 4 for every output. docs/add_rmsnorm.md#tuning.
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
// default kernel would still wait on an L2 round trip for the weight, which a call of a few rows
// cannot hide (H = 4096, bf16 out, 1 row: 2.40 -> 2.22 µs on the H100). It pays while the call holds
// at most 2^18 chunks (4 MiB of x). At H > 8192 and <= 32 rows the 8-CTA cluster kernel is faster
// still, so it keeps those calls. docs/add_rmsnorm.md#tuning.
constexpr int64_t kAddRmsNormPreloadChunks = int64_t{1} << 18;
constexpr int64_t kAddRmsNormClusterFirstRows = 32;
inline bool add_rmsnorm_preload_weight(int64_t rows, int nchunks, bool clusters_available,
                                       int64_t preload_chunks = kAddRmsNormPreloadChunks) {
  if (nchunks > 2048 || rows * nchunks > preload_chunks) return false;
  return !(clusters_available && nchunks > 1024 && rows <= kAddRmsNormClusterFirstRows);
}

// Whether the one-block kernel stores a row's residual_out before the row's reduction (its stores
// then drain while the block waits at the barriers; the cluster kernel always does) or after it:
// before was faster for the 16-bit output at every size and for the FP8 outputs up to 32 rows, and
// 1-3 % slower for the FP8 outputs from 256 rows. docs/add_rmsnorm.md#tuning.
constexpr int64_t kAddRmsNormEarlyResOutFp8Rows = 32;
// (constexpr: the kernel calls it too, under --expt-relaxed-constexpr.)
constexpr bool add_rmsnorm_early_res_out(bool dtype_out, int64_t rows) {
  return dtype_out || rows <= kAddRmsNormEarlyResOutFp8Rows;
}

// Whether the one-block register kernel (v = 1..8) stores residual_out and out with st.global.cs
// (evict first in L2) instead of plain stores: faster from 1024 rows (H = 8192, 8192 rows, bf16 out:
// 94.8 -> 96.6 % of copy on the H100), slower below, where a call's small output would otherwise stay
// in L2 for the next op. The loop kernel (H > 32768) reads its residual_out back and keeps plain
// stores. docs/add_rmsnorm.md#tuning.
constexpr int64_t kAddRmsNormStreamingStoresRows = 1024;
constexpr bool add_rmsnorm_streaming_stores(int v, int64_t rows) {
  return v >= 1 && v <= 8 && rows >= kAddRmsNormStreamingStoresRows;
}

// Overrides of the launch choices, for the tests and the bench (add_rmsnorm_tuned): the library's
// own calls pass the defaults.
struct AddRmsNormTuning {
  AddRmsNormRule rule = kAddRmsNormDefaultRule;  // the one-block shape rule
  bool clusters = true;  // false: the one-block-per-row (sm_80) kernels on every device
  int64_t preload_chunks = kAddRmsNormPreloadChunks;  // the most rows x chunks that preload the weight
};

// The shape add_rmsnorm launches for `rows` rows of nchunks chunks (every output kind alike) on the
// current device: one block with the weight preloaded for decode-sized calls, else the sm_90 cluster
// shape where the path is available and enabled and pays, else the one-block shape
// (defined in add_rmsnorm.cu; reads the device, so not pure; also printed by the bench).
// dynamic_fp8: the call writes the dynamic-scale FP8 output (add_rmsnorm_auto_rule's exception).
AddRmsNormConfig add_rmsnorm_launch_config(int nchunks, int64_t rows, bool dynamic_fp8 = false,
                                           const AddRmsNormTuning& tuning = {});
// add_rmsnorm / add_rmsnorm_fp8 with the launch choices overridden (tests and bench only).
void add_rmsnorm_tuned(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out, Matrix out,
                       RmsNormOptions opt, const AddRmsNormTuning& tuning, cudaStream_t stream = nullptr);
void add_rmsnorm_fp8_tuned(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out,
                           Fp8Matrix out, Fp8Scale scale, RmsNormOptions opt, const AddRmsNormTuning& tuning,
                           cudaStream_t stream = nullptr);

}  // namespace blockfuse::detail
