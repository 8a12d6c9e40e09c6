// Internal: the launch shape add_rmsnorm picks for a row of H elements (used by the kernels and
// printed by `blockfuse bench add-rmsnorm`).
#pragma once

#include <algorithm>

namespace blockfuse::detail {

constexpr int kAddRmsNormLoopThreads = 512;
constexpr int kAddRmsNormMaxRegisterChunks = 4096;  // 512 threads x 8 chunks: H <= 32768
// Cluster path (sm_90): rows of 384 .. 16384 chunks (3072 <= H <= 131072).
constexpr int kAddRmsNormMinClusterChunks = 384;
constexpr int kAddRmsNormMaxClusterChunks = 16384;  // 8 CTAs x 512 threads x 4 chunks

// v = 16-byte chunks each thread holds in registers (0 = the loop path, for rows longer than
// kAddRmsNormMaxRegisterChunks chunks), threads = block size (a multiple of 32), cluster = CTAs
// sharing one row (1: one block per row; 2, 4, 8: a thread-block cluster, sm_90 only).
struct AddRmsNormConfig {
  int v, threads;
  int cluster = 1;
};

// sm_80 path, one block per row. The smallest v whose block (<= 128, 256, 256, 512 threads for
// v = 1, 2, 4, 8) covers the row: short rows get few registers per thread, long rows enough
// threads to issue every load at once.
// H = 4096 -> v 2 x 256 threads; 3584 -> 2 x 224; 5120 -> 4 x 160; 8192 -> 4 x 256; 16384 -> 8 x 256.
inline AddRmsNormConfig add_rmsnorm_config(int nchunks) {
  auto threads_for = [&](int v) { return std::max(32, (nchunks + v - 1) / v + 31) / 32 * 32; };
  if (nchunks <= 128) return {1, threads_for(1)};
  if (nchunks <= 512) return {2, threads_for(2)};
  if (nchunks <= 1024) return {4, threads_for(4)};
  if (nchunks <= kAddRmsNormMaxRegisterChunks) return {8, threads_for(8)};
  return {0, kAddRmsNormLoopThreads};
}

// sm_90 path. One block per row leaves one SM to move the whole row: at H = 16384 (160 KB of x,
// residual, weight, residual_out and out) a decode step of 1-32 rows took 6-7 µs on the H100,
// per-SM bound, and 2048 rows ran in 5.2 waves of fat blocks (a ~1/6-full last wave: 83 % of copy
// bandwidth). A cluster of C CTAs splits each row into C slices (exchanging the partial sums
// through distributed shared memory), so a row is fetched by C SMs at once and each CTA is small
// (more of them resident, a finer last wave). C grows with H so a CTA keeps <= 512 chunks
// (<= 1024 from H = 32768): v = 2 chunks per thread (x, residual and weight: 6 16-byte loads in
// flight per thread) with <= 256 (C = 2) or <= 512 threads. Rows below 3072 elements keep the
// one-block path (a block of <= 192 threads already issues the whole row at once, and a cluster
// barrier would only add latency); rows beyond kAddRmsNormMaxClusterChunks fall back to it too.
// H = 3584 -> c2: v2 x 128; 4096 -> c2: v2 x 128; 5120 -> c2: v2 x 160; 8192 -> c4: v2 x 128;
// 16384 -> c4: v2 x 256; 32768 -> c8: v2 x 256; 131072 -> c8: v4 x 512.
// The slice of CTA rank k is chunks [k*S, min((k+1)*S, nchunks)), S = ceil(nchunks / C); every
// CTA gets >= 1 chunk (nchunks >= 384 >> C).
inline AddRmsNormConfig add_rmsnorm_config_sm90(int nchunks) {
  if (nchunks < kAddRmsNormMinClusterChunks || nchunks > kAddRmsNormMaxClusterChunks) return add_rmsnorm_config(nchunks);
  const int c = nchunks < 1024 ? 2 : nchunks < 4096 ? 4 : 8;
  const int slice = (nchunks + c - 1) / c;
  const int v = slice <= 1024 ? 2 : 4;
  return {v, std::max(32, ((slice + v - 1) / v + 31) / 32 * 32), c};
}

// The shape add_rmsnorm launches for rows of nchunks chunks on the current device: the sm_90 one
// where the cluster path is available and enabled (defined in add_rmsnorm.cu; for the bench).
AddRmsNormConfig add_rmsnorm_launch_config(int nchunks);
// Tests and the bench only: false makes every device take the one-block-per-row (sm_80) kernels,
// so they are exercised and measured on a Hopper too. Process-wide; default true.
void set_add_rmsnorm_clusters_enabled(bool enabled);

}  // namespace blockfuse::detail
