// Internal: the launch shape of swiglu_fp8's dynamic-scale row kernel (kernels.cuh): pure, CPU-tested
// (tests: test_swiglu_config), used by the launcher (swiglu.cu) and printed by `blockfuse bench swiglu`.
#pragma once

#include <algorithm>
#include <cstdint>

#include "blockfuse/swiglu.h"

namespace blockfuse::detail {

constexpr int kSwigluRowMaxThreads = 1024;
// kFourSharedThree's block-size bound: 3 blocks of <= 512 threads at <= 40 registers fit an SM's 64K.
constexpr int kSwigluThreeBlockThreads = 512;
// The dynamic shared memory a block may opt into on sm_90 (227 KB) less the row kernel's static 128 bytes.
constexpr int kSwigluMaxDynamicSmem = 232448 - 1024;

// Which rule picks the row kernel's shape (chunks > 1024, i.e. U > 8192; narrower rows take 2 chunks
// per thread in registers under every rule):
//   kTwoChunks        2 chunks per thread in registers, up to 1024 threads (U > 16384 re-reads the row)
//   kFourShared       4 chunks per thread, copied into shared memory and their fp32 results kept
//                     there (kernels.cuh: the register version spills under the 64-register cap);
//                     a block per row
//   kFourSharedNext   as kFourShared with two slot sets, each block also copying its next row while
//                     it reduces and stores the current one; a persistent grid (the blocks resident
//                     at once); where two sets exceed 227 KB (U > 28416), kFourShared
//   kFourSharedThree  as kFourShared, compiled for 3 blocks per SM (<= 40 registers, the whole
//                     shared-memory carveout) where a block has <= 512 threads (U <= 16384); wider
//                     rows as kFourShared (kFourShared ran at 2 blocks per SM, bound by both its 44
//                     registers and the carveout)
//   kClusterTwo       (sm_90) the row split over a cluster of 2 CTAs, each holding its half as
//                     kTwoChunks does, the halves' amax exchanged through distributed shared memory:
//                     for 1-32 rows, where one SM computing a whole wide row is the time. Rows of
//                     U <= 8192 and U > 32768 take kFourShared's shape, and so does every row on a
//                     device or build without sm_90 code (the launcher checks)
//   kClusterFour      (sm_90) as kClusterTwo over 4 CTAs (8192 < U <= 65536)
//   kClusterEight     (sm_90) as kClusterTwo over 8 CTAs, the portable limit (8192 < U <= 131072)
//   kAuto             the default: swiglu_fp8_auto_row_rule below picks per call
// The measurements behind each: docs/swiglu.md#tuning.
enum class SwigluRowRule : int {
  kAuto = -1,
  kTwoChunks = 0,
  kFourShared = 1,
  kFourSharedNext = 2,
  kFourSharedThree = 3,
  kClusterTwo = 4,
  kClusterFour = 5,
  kClusterEight = 6
};
constexpr SwigluRowRule kSwigluDefaultRowRule = SwigluRowRule::kAuto;

// The rule kAuto picks for `rows` rows of `chunks` 16-byte output chunks (H100): kFourSharedThree
// from 4096 rows (94.6 / 95.7 % of copy against kFourShared's 86.8 / 90.7 at 8192 rows of U = 14336 /
// 16384); kClusterEight at 1-32 rows of 12288 < U <= 131072 (the fastest rule there: U = 14336, 1 row
// 2.62 against 3.13 µs); kFourShared for rows wider than 2048 chunks or from 1024 rows; kTwoChunks
// for 1-1023 rows of U <= 16384. docs/swiglu.md#tuning.
constexpr int64_t kSwigluClusterMinChunks = 1025;  // the cluster rules from U > 8192
constexpr int kSwigluClusterMaxSize = 8;           // CTAs per row of the widest cluster rule
// CTAs per row of a cluster rule; 1 for the others.
constexpr int swiglu_cluster_size(SwigluRowRule rule) {
  return rule == SwigluRowRule::kClusterTwo    ? 2
         : rule == SwigluRowRule::kClusterFour ? 4
         : rule == SwigluRowRule::kClusterEight ? kSwigluClusterMaxSize
                                                 : 1;
}

// The widest rows a cluster of `size` CTAs holds in registers (2 chunks per thread): U <= 32768 for
// kClusterTwo, U <= 65536 for kClusterFour, U <= 131072 for kClusterEight.
constexpr int64_t swiglu_cluster_max_chunks(int size) { return int64_t(size) * 2 * int64_t(kSwigluRowMaxThreads); }
constexpr int64_t kSwigluClusterMaxRows = 32;
constexpr int64_t kSwigluClusterAutoMinChunks = 1537;  // kAuto's cluster rule from U > 12288
// `clusters`: whether the cluster kernel may run (sm_90 code on an sm_90+ device); without it 1-32
// rows take the one-CTA choice they had before the cluster rules.
inline SwigluRowRule swiglu_fp8_auto_row_rule(int64_t rows, int64_t chunks, bool clusters) {
  if (rows >= 4096 && chunks > 1024) return SwigluRowRule::kFourSharedThree;
  if (clusters && rows <= kSwigluClusterMaxRows && chunks >= kSwigluClusterAutoMinChunks &&
      chunks <= swiglu_cluster_max_chunks(kSwigluClusterMaxSize))
    return SwigluRowRule::kClusterEight;
  return chunks > 2048 || rows >= 1024 ? SwigluRowRule::kFourShared : SwigluRowRule::kTwoChunks;
}
// The rule a call runs with: `rule`, or the automatic choice when it is kAuto. An explicit cluster
// rule where clusters cannot run takes kFourShared's shape (the launcher; swiglu_fp8_row_config
// does the same past a rule's widths).
inline SwigluRowRule resolve_swiglu_fp8_row_rule(SwigluRowRule rule, int64_t rows, int64_t chunks, bool clusters) {
  if (rule == SwigluRowRule::kAuto) return swiglu_fp8_auto_row_rule(rows, chunks, clusters);
  return swiglu_cluster_size(rule) > 1 && !clusters ? SwigluRowRule::kFourShared : rule;
}

// v = 16-byte output chunks (8 columns) each thread keeps in registers as fp32, threads = block size
// (whole warps, <= 1024); in_registers false: the row is wider than threads x v chunks and the kernel
// computes it twice (amax pass, store pass) from global memory. stage: 0 registers, 1 shared, 2 shared
// + next row (SwigluRowStage, kernels.cuh); smem_bytes: the dynamic shared memory it needs (one or two
// sets of v x 2 x 16 bytes per thread).
// min_blocks: the blocks per SM the kernel is compiled for (3: kFourSharedThree, <= 512 threads).
// cluster: CTAs per row (2 / 4 / 8: kClusterTwo / Four / Eight; v, threads and in_registers then describe
// one CTA's slice of ceil(chunks / cluster) chunks).
struct SwigluRowConfig {
  int v, threads;
  bool in_registers;
  int stage = 0;
  int smem_bytes = 0;
  int min_blocks = 1;
  int cluster = 1;
};

// One block of <= 1024 threads owns a row; __launch_bounds__(1024) caps a thread at 64 registers,
// so an SM holds 2048 threads' worth of one or two blocks. With 2 chunks per thread a row of
// U = 16384 needs 1024 threads: one block per SM, whose load, math, reduction and store phases then
// run one after the other with nothing else to fill the SM's share of DRAM bandwidth meanwhile
// (80 / 85 % of a same-size copy at 2048 / 8192 rows). With 4 chunks per thread from U > 8192
// (32 fp32 values), U = 14336 / 16384 take 448 / 512 threads and two blocks share an SM (one
// loads while the other reduces and stores), and rows up to U = 32768 (28672: 896 threads) stay
// on chip instead of being read twice.

inline SwigluRowConfig swiglu_fp8_row_config(int64_t chunks, SwigluRowRule rule) {
  if (const int size = swiglu_cluster_size(rule); size > 1) {
    if (chunks >= kSwigluClusterMinChunks && chunks <= swiglu_cluster_max_chunks(size)) {
      const int64_t slice = (chunks + size - 1) / size;
      const int threads = static_cast<int>(std::clamp<int64_t>(((slice + 1) / 2 + 31) / 32 * 32, 32, kSwigluRowMaxThreads));
      SwigluRowConfig c{2, threads, slice <= int64_t(threads) * 2};
      c.cluster = size;
      return c;
    }
    rule = SwigluRowRule::kFourShared;  // (for U <= 8192 the same shape as kTwoChunks')
  }
  const bool four = rule != SwigluRowRule::kTwoChunks && chunks > 1024;
  const int v = four ? 4 : 2;
  const int64_t want = (chunks + v - 1) / v;
  const int threads = static_cast<int>(std::clamp<int64_t>((want + 31) / 32 * 32, 32, kSwigluRowMaxThreads));
  SwigluRowConfig c{v, threads, chunks <= int64_t(threads) * v};
  if (four && c.in_registers) {
    const int set = v * 2 * 16 * threads;  // [v][gate, up][threads] 16-byte slots
    c.stage = rule == SwigluRowRule::kFourSharedNext && 2 * set <= kSwigluMaxDynamicSmem ? 2 : 1;
    c.smem_bytes = c.stage == 2 ? 2 * set : set;
    if (rule == SwigluRowRule::kFourSharedThree && threads <= kSwigluThreeBlockThreads) c.min_blocks = 3;
  }
  return c;
}

// Blocks of `threads` threads (64 registers each) and smem_bytes of dynamic shared memory resident
// per SM: the persistent grid of the kFourSharedNext rule.
inline int swiglu_row_blocks_per_sm(int threads, int smem_bytes) {
  const int by_regs = 65536 / (64 * threads);
  const int by_smem = 233472 / (smem_bytes + 1024);  // 228 KB per SM, 1 KB reserved per block
  return std::max(1, std::min(by_regs, by_smem));
}

// Overrides of the launch choices, for the tests and the bench (swiglu_fp8_tuned): the library's own
// calls pass the defaults.
struct SwigluTuning {
  SwigluRowRule row_rule = kSwigluDefaultRowRule;  // the dynamic-scale row kernel's rule
};
// swiglu_fp8 with the launch choices overridden (tests and bench only).
void swiglu_fp8_tuned(ConstMatrix gate_up, Fp8Matrix out, Fp8Scale scale, Activation act, GateUpLayout layout,
                      const SwigluTuning& tuning, cudaStream_t stream = nullptr);

// ---- the elementwise kernel (16-bit and static-scale FP8 outputs) -------------------------------
// One chunk (8 columns) per thread in 128-thread blocks, ceil(chunks / 128) blocks (a grid-stride
// loop past 2^31 - 1 blocks): at every measured size from 1 to 32768 rows as fast as or faster than
// two chunks per thread on a capped grid (U = 14336, 32768 rows: 3053 GB/s on the H100).
// docs/swiglu.md#tuning.
constexpr int kSwigluElementwiseThreads = 256;  // the kernel's __launch_bounds__
constexpr int kSwigluSmallBlockThreads = 128;

struct SwigluElementwiseConfig {
  int64_t blocks;
  int threads;
};

inline SwigluElementwiseConfig swiglu_elementwise_config(int64_t total_chunks) {
  constexpr int64_t kMaxGrid = 2147483647;  // beyond it the grid-stride loop covers the rest
  return {std::min<int64_t>((total_chunks + kSwigluSmallBlockThreads - 1) / kSwigluSmallBlockThreads, kMaxGrid),
          kSwigluSmallBlockThreads};
}

}  // namespace blockfuse::detail
