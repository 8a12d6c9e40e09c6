// Internal: the launch shape add_rmsnorm picks for a row of H elements (used by the kernels and
// printed by `blockfuse bench add-rmsnorm`).
#pragma once

#include <algorithm>

namespace blockfuse::detail {

constexpr int kAddRmsNormLoopThreads = 512;
constexpr int kAddRmsNormMaxRegisterChunks = 4096;  // 512 threads x 8 chunks: H <= 32768

// One block per row. v = 16-byte chunks each thread holds in registers (0 = the loop path, for
// rows longer than kAddRmsNormMaxRegisterChunks chunks), threads = block size (a multiple of 32).
// The smallest v whose block (<= 128, 256, 256, 512 threads for v = 1, 2, 4, 8) covers the row:
// short rows get few registers per thread, long rows enough threads to issue every load at once.
// H = 4096 -> v 2 x 256 threads; 3584 -> 2 x 224; 5120 -> 4 x 160; 8192 -> 4 x 256; 16384 -> 8 x 256.
struct AddRmsNormConfig {
  int v, threads;
};
inline AddRmsNormConfig add_rmsnorm_config(int nchunks) {
  auto threads_for = [&](int v) { return std::max(32, (nchunks + v - 1) / v + 31) / 32 * 32; };
  if (nchunks <= 128) return {1, threads_for(1)};
  if (nchunks <= 512) return {2, threads_for(2)};
  if (nchunks <= 1024) return {4, threads_for(4)};
  if (nchunks <= kAddRmsNormMaxRegisterChunks) return {8, threads_for(8)};
  return {0, kAddRmsNormLoopThreads};
}

}  // namespace blockfuse::detail
