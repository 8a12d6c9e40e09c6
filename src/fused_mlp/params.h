// Internal: the fused MLP's launch parameters and the geometry shared by the heuristic, the
// workspace sizing, the validation and the kernel (so the four can never disagree).
#pragma once

#include <cstddef>
#include <cstdint>

#include "blockfuse/fused_mlp.h"

namespace blockfuse::fmlp {

constexpr int kWarps = 8;            // warps per block (256 threads, two blocks per SM at <= 128 registers)
constexpr int kGroup = 16;           // neurons per group: the k = 16 side of the down projection's MMA
constexpr int kChunk = 64;           // y columns per chunk: 8 lanes x 8 consecutive columns (16-byte loads)
constexpr int kAlign = 256;          // workspace sections start on this boundary
constexpr int kMaxRows = 32;         // the most tokens (M) one call takes

#ifdef __CUDACC__
#define BF_FMLP_HD __host__ __device__
#else
#define BF_FMLP_HD
#endif
BF_FMLP_HD inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline size_t round_up(size_t a, size_t b) { return (a + b - 1) / b * b; }

// 16-neuron groups per block, blocks in the grid (at least one: it writes y = 0 when nothing is
// active), 64-column chunks of y (one completion counter each).
inline int groups_per_block(int neurons_per_block) { return neurons_per_block / kGroup; }
inline int64_t grid_blocks(int64_t list_groups, int neurons_per_block) {
  const int64_t b = ceil_div(list_groups, groups_per_block(neurons_per_block));
  return b < 1 ? 1 : b;
}
inline int64_t chunks(int64_t k) { return ceil_div(k, kChunk); }

// The heuristic's cost model (documented in heuristic.cpp), here so that the host heuristic and the
// union-list kernel, which applies it on the device to the list's count, can never disagree.
constexpr double kBurst = 2.0;      // the most an SM streams at the tail, in fair shares
constexpr double kFlushCost = 0.5;  // L2 traffic per byte relative to a DRAM byte
BF_FMLP_HD inline double modeled_time(int64_t m, int64_t k, int64_t groups, int sms, int nb) {
  const double weight = 3.0 * 2.0 * double(groups) * 16.0 * double(k);
  int64_t blocks = ceil_div(groups, nb / kGroup);
  blocks = blocks < 1 ? 1 : blocks;
  const double bb = 3.0 * 2.0 * double(nb) * double(k);
  const double t_dram = weight / sms;
  const double t_sm = double(ceil_div(blocks, int64_t(sms))) * bb / kBurst;
  const double t_flush = kFlushCost * double(blocks) * double(m) * double(k) * 4.0 / sms;
  return (t_dram > t_sm ? t_dram : t_sm) + t_flush;
}
// Neurons per block (64, 32 or 16) with the smallest modeled time; ties (within 1 %) to the larger.
BF_FMLP_HD inline int modeled_neurons_per_block(int64_t m, int64_t k, int64_t groups, int sms) {
  k = k < 8 ? 8 : k;
  int best = 64;
  double best_t = modeled_time(m, k, groups, sms, 64);
  for (int nb = 32; nb >= 16; nb /= 2) {
    const double t = modeled_time(m, k, groups, sms, nb);
    if (t < best_t * 0.99) {
      best_t = t;
      best = nb;
    }
  }
  return best;
}

// Split launches (fused_mlp_sm80.cuh): a union list with the heuristic's block size at M <= 8 on
// sm_90 is launched as clusters of 2 CTAs, and a cluster shares one 16-neuron group between its two
// CTAs (each reads half of K of the group's rows) where the list has at most one group per SM: an
// unsplit 16-neuron block streams only about 25-33 GB/s, so a list of fewer groups than SMs is bound
// by the rate of a block, not by DRAM (90 / 95 %-sparse lists at M <= 8 1.16-1.47x faster on H100;
// splitting every list was slower where a list has more groups than SMs, hence the bound). With
// blocks of W > 8 warps (one an SM) a list splits only where its 2-CTA units still fit one wave,
// listed_groups · W / 8 <= SMs. docs/fused_mlp.md#tuning.
constexpr int kSplitMaxRows = 8;  // M up to one 8-token MMA tile
constexpr int kSplitCtas = 2;     // CTAs a split unit's cluster holds (each half of K)
BF_FMLP_HD inline bool split_groups(int64_t listed_groups, int sms, int warps = kWarps) {
  return listed_groups * (warps / kWarps) <= sms;
}

// Workspace: [counters: int per chunk][fp32 y accumulator [m, K] (atomic)][deterministic: int flag
// per block and the count of blocks taking part, then fp32 partials [blocks][m][K], after room for
// the largest accumulator (kMaxRows)]. The two regions never overlap, so one workspace serves both
// reductions and every M: the atomic accumulator must be zero before a call (the last block clears
// what it used), the deterministic region is written before it is read.
inline size_t counter_bytes(int64_t k) { return round_up(size_t(chunks(k)) * sizeof(int), kAlign); }
inline size_t flag_bytes(int64_t blocks) { return round_up(size_t(blocks + 1) * sizeof(int), kAlign); }
// Where the deterministic region starts: after the counters and the largest atomic accumulator.
inline size_t deterministic_offset(int64_t k) {
  return counter_bytes(k) + round_up(size_t(kMaxRows) * size_t(k) * sizeof(float), kAlign);
}
inline size_t workspace_bytes(int64_t m, int64_t k, int64_t list_groups, int neurons_per_block, MlpReduction r) {
  if (m <= 0 || k <= 0) return 0;
  const int64_t blocks = grid_blocks(list_groups, neurons_per_block);
  if (r == MlpReduction::kAtomic) return counter_bytes(k) + size_t(m) * size_t(k) * sizeof(float);
  return deterministic_offset(k) + flag_bytes(blocks) + size_t(blocks) * size_t(m) * size_t(k) * sizeof(float);
}

// The deterministic mode's second launch (fused_mlp_sum_kernel): kSumThreads a block, and L lanes
// sharing each output quad of y's m·K/4 (a power of two, 1-32): the fewest that give the launch
// kSumThreadsPerSm threads an SM (a full H100 SM's worth), but no more lanes than blocks to sum.
// Pure, CPU-tested (SumLanes).
constexpr int kSumThreads = 256;
constexpr int64_t kSumThreadsPerSm = 2048;
inline int sum_lanes(int64_t m, int64_t k, int64_t blocks, int sms) {
  const int64_t items = m * (k / 4), want = int64_t(sms < 1 ? 1 : sms) * kSumThreadsPerSm;
  int lanes = 1;
  while (lanes < 32 && items * lanes < want && 2 * lanes <= blocks) lanes *= 2;
  return lanes;
}
// Its grid: a warp takes 32 / L quads.
inline int64_t sum_grid(int64_t m, int64_t k, int lanes) {
  const int64_t warps = ceil_div(m * (k / 4), 32 / lanes);
  return ceil_div(warps * 32, kSumThreads);
}

enum class ListMode : int { kDense = 0, kUnion = 1, kPerToken = 2 };

// What the kernel is launched with. Element offsets are int64 (weights can exceed 2^31 elements).
struct FusedMlpParams {
  const void* x;    // [m, k], ldx
  const void* wgu;  // [2u, k], ldgu (row 2j = up_j, 2j+1 = gate_j)
  const void* wd;   // [u, k], ldd (down_proj.weight transposed)
  void* y;          // [m, k], ldy
  int64_t m, k, u;
  int64_t ldx, ldgu, ldd, ldy;
  int act;                 // Activation code
  ListMode mode;
  const int32_t* idx;      // union: [capacity]; per-token: [m, idx_ld]
  const int32_t* cnt;      // union: [1]; per-token: [m]
  int64_t idx_ld;          // per-token row stride
  int64_t capacity;        // union: entries the grid covers
  int list_groups_per_block;  // block_size / 16 of the list (1 for dense)
  int64_t list_blocks;     // U / block_size: valid block numbers are [0, list_blocks)
  int64_t groups;          // 16-neuron groups the grid covers
  // Union lists with the heuristic's block size: the grid has one block per listed group (the most
  // a list of `capacity` entries needs) and the kernel picks the groups per block from the list's
  // count with modeled_neurons_per_block (sm_count: the device's SMs).
  int dynamic_groups;
  int sm_count;
  // Union lists: the CTAs of a cluster launch (1 or 2) and, with 2, whether every unit splits
  // (split_always: FusedMlpConfig::split kAlways) or only lists within split_groups.
  int split;
  int split_always;
  int warps;               // warps a block (the launcher's choice: auto_block_warps or the config's)
  int deterministic;
  int* counters;           // [chunks(k)]
  float* acc;              // atomic: [m, k]
  int* flags;              // deterministic: [gridDim.x]
  int* det_blocks;         // deterministic: the blocks that take part (written by unit 0)
  float* partials;         // deterministic: [gridDim.x, m, k]
};

// The split rule a call takes (FusedMlpConfig::split): kAuto (split_groups), kNever, kAlways
// (every union-list call that may split does, 16-neuron groups whatever the count).
using SplitRule = MlpSplitRule;

// Warps a block at M <= 8 (one token tile): kWarps (two blocks an SM) or 16 (one block an SM; the
// kernel's W). 16-warp blocks keep 4 gate/up loads a lane in flight and 2 down slots, which is what
// a warp's streaming rate uses (about 4 GB/s per warp
// with up to 4 loads a lane in flight). The rule: 16 warps at M <= 8 on sm_90+ for union lists with
// the heuristic's block size and in the deterministic mode, and for dense and per-token grids where
// the device's peak DRAM bandwidth is at most kWideGridMaxGBpsPerSm a SM (H100 SXM: 25.4; 2-7 %
// faster dense, up to 10 % per-token, 3-12 % union lists); 8 for dense and per-token grids on faster
// memory (H200: 36.4, where 16 warps were up to 7 % slower: two 8-warp blocks keep more bytes in
// flight), where the bandwidth is unknown, for more token tiles, and below sm_90 (not measured).
// (32-warp blocks were slower than 16 almost everywhere and spilled: removed.) docs/fused_mlp.md#tuning.
constexpr int kMaxBlockWarps = 16;
constexpr double kWideGridMaxGBpsPerSm = 30.0;
// dram_gbps_per_sm: the device's peak DRAM GB/s over its SMs (dram_gbps_per_sm below; 0: unknown).
inline int auto_block_warps(int64_t m, int cc_major, bool union_list, bool deterministic = false,
                            double dram_gbps_per_sm = 0) {
  const bool wide_grid = dram_gbps_per_sm > 0 && dram_gbps_per_sm <= kWideGridMaxGBpsPerSm;
  return (union_list || deterministic || wide_grid) && m <= kSplitMaxRows && cc_major >= 9 ? 16 : kWarps;
}
// FusedMlpConfig::block_warps: 0 (kAutoBlockWarps, the default: auto_block_warps), or 8 or 16 at
// M <= 8 whatever the launch.
constexpr int kAutoBlockWarps = 0;
// Whether `warps` is a valid FusedMlpConfig::block_warps.
inline bool valid_block_warps(int warps) {
  return warps == kAutoBlockWarps || warps == kWarps || warps == kMaxBlockWarps;
}
// The warps a launch takes: 8 above M = 8, else `forced` where it is not kAutoBlockWarps (the
// config's block_warps), else the rule (the launcher's choice; the bench reports the split from it).
inline int launch_block_warps(int64_t m, int cc_major, bool union_list, bool deterministic, double dram_gbps_per_sm,
                              int forced = kAutoBlockWarps) {
  return m > kSplitMaxRows ? kWarps
         : forced != kAutoBlockWarps ? forced
                                     : auto_block_warps(m, cc_major, union_list, deterministic, dram_gbps_per_sm);
}
// Peak DRAM GB/s a SM from a device's peak bandwidth and SM count (0 where either is unknown).
inline double dram_gbps_per_sm(double dram_gbps, int sm_count) { return sm_count > 0 ? dram_gbps / sm_count : 0.0; }

// Whether a union-list call (the heuristic's block size) of m rows launches as 2-CTA clusters under
// `rule`, where `sm90` says split launches can run (the launcher: sm_90 code on an sm_90+ device).
inline bool split_launch(int64_t m, SplitRule rule, bool sm90) {
  return m <= kSplitMaxRows && rule != SplitRule::kNever && sm90;
}
// Whether such a call with `listed_groups` 16-neuron groups in its list splits them (the device's
// choice in the kernel, from the count it reads; the bench reports the block size from it).
// `warps`: the block's (split_groups).
inline bool split_units(int64_t m, SplitRule rule, bool sm90, int64_t listed_groups, int sms, int warps = kWarps) {
  return split_launch(m, rule, sm90) && (rule == SplitRule::kAlways || split_groups(listed_groups, sms, warps));
}

}  // namespace blockfuse::fmlp
