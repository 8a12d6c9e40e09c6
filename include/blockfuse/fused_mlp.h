// blockfuse/fused_mlp.h — the whole gated MLP of a decode step in one launch, dense or sparse.
//
//   y[M, K] = down( act(x · W_gateᵀ) ⊙ (x · W_upᵀ) ),   M = 1..32 token rows, U neurons.
//
// At decode time an MLP is three weight matrices read once; everything else is small. fused_mlp
// gives each thread block a few groups of 16 neurons: it computes their h = act(gate) · up in fp32
// from the interleaved gate/up rows (tensor cores, fp32 accumulation), rounds h once to the input
// dtype, multiplies it by the same neurons' rows of W_downᵀ and adds the block's fp32 partial y
// into a workspace; the block that completes a 64-column chunk of y last casts it to bf16/fp16 and
// clears the workspace for the next call. h never reaches memory, and one launch does all of it.
//
// Sparse: the same kernel over a list of active neuron blocks (16, 32 or 64 neurons each) reads
// only those neurons' rows of all three matrices — either one list for the batch (the union over
// its tokens) or one list per token (a neuron group then contributes only to the tokens that
// selected it). The router helpers below build either list on the device from x, so a decode step
// needs no host synchronisation and can be captured into a CUDA graph.
//
// Weights:
//   w_gate_up [2U, K]: interleaved, row 2j = up_j, row 2j+1 = gate_j (blockfuse/weight_layout.h builds
//                      it from gate_proj/up_proj — the layout gated_up() uses too).
//   w_down_t  [U, K]:  down_proj.weight [K, U] transposed, neuron-major (transpose_down_proj below),
//                      so a neuron's down row is one contiguous, coalesced read.
//
// Numerics: fp32 accumulation everywhere; h is rounded once to the input dtype (as the unfused
// pipeline stores it); y is rounded once. Reduction::kAtomic adds block partials with fp32 atomics
// (the order, hence the last bits of y, may vary from call to call); Reduction::kDeterministic
// writes each block's partial to its own workspace slot and a second launch on the same stream sums
// the slots in a fixed order (the same inputs and configuration give the same bits), at the cost of
// a larger workspace and the slots' traffic (docs/fused_mlp.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "blockfuse/common.h"

namespace blockfuse {

// The largest M the fused MLP takes: beyond it the weights are read once per ~32 rows anyway.
constexpr int64_t kFusedMlpMaxM = 32;

enum class MlpReduction : int {
  kAtomic = 0,         // fp32 atomics into one [M, K] accumulator (default: fastest)
  kDeterministic = 1,  // per-block slots summed in a fixed order (bitwise reproducible)
};

// Split launches of union lists (M <= 8, sm_90, the heuristic's block size): kAuto splits a list's
// 16-neuron groups over 2-CTA clusters where the list is short; kNever and kAlways force either way
// (for benchmarks and tests; docs/fused_mlp.md#tuning).
enum class MlpSplitRule : int { kAuto = 0, kNever = 1, kAlways = 2 };

// neurons_per_block: 16, 32 or 64 neurons a thread block computes (0: the heuristic's choice).
// split and block_warps override the library's launch rules for benchmarks and tests; the
// defaults are the rules (docs/fused_mlp.md#tuning). block_warps: warps a block at M <= 8, 0 (the
// rule), 8 or 16.
struct FusedMlpConfig {
  int neurons_per_block = 0;
  MlpReduction reduction = MlpReduction::kAtomic;
  MlpSplitRule split = MlpSplitRule::kAuto;
  int block_warps = 0;
};

// One list of active neuron blocks for the whole batch: indices[0 .. *count) are neuron-block
// numbers b (neurons [b·block_size, (b+1)·block_size)), sorted ascending, unique, in [0, U /
// block_size). Both pointers are device memory; *count is read on the device (0 <= *count <=
// capacity; a larger value is clamped to capacity). The contents are trusted: the host cannot
// check them without a synchronisation (fused_mlp_check_blocks validates them on the device).
struct NeuronBlockList {
  const int32_t* indices = nullptr;  // [capacity]
  const int32_t* count = nullptr;    // [1]
  int64_t capacity = 0;              // host-known upper bound on *count (sizes the grid)
  int block_size = 32;               // 16, 32 or 64, dividing U
};

// One list per token: row m of indices ([M, ld], device) holds counts[m] sorted, unique neuron-block
// numbers (0 <= counts[m] <= ld, clamped). Token m's h is zero outside its blocks.
struct PerTokenNeuronBlocks {
  const int32_t* indices = nullptr;  // [M, ld]
  const int32_t* counts = nullptr;   // [M]
  int64_t ld = 0;                    // max blocks per token (row stride of indices)
  int block_size = 32;
};

// The configuration fused_mlp picks for M rows, hidden size K and `groups` active 16-neuron groups
// (U / 16 for the dense MLP) on `sm_count` SMs: a pure function (src/fused_mlp/heuristic.cpp).
FusedMlpConfig fused_mlp_heuristic(int64_t m, int64_t k, int64_t groups, int sm_count);

// Workspace bytes for calls with up to m rows (dense: list_groups = U / 16; union lists: capacity ·
// block_size / 16; per-token lists: U / 16) under `config` (neurons_per_block 0 = the heuristic's
// choice, taken on the current device). Allocate once (16-byte aligned), cudaMemset to zero once;
// every call leaves it zeroed again, so calls can be captured into CUDA graphs and replayed. One
// workspace serves one stream at a time and one K: its regions sit at offsets that depend on K, and
// a call of another K could find an earlier deterministic call's partials where it needs zeros.
size_t fused_mlp_workspace_size(int64_t m, int64_t k, int64_t list_groups, FusedMlpConfig config = {});

// Dense: y = down(act(x·W_gateᵀ) ⊙ x·W_upᵀ). Requirements (checked before anything is launched):
// 1 <= M <= 32; x [M, K], w_gate_up [2U, K], w_down_t [U, K], y [M, K], one dtype (bf16/fp16);
// K % 8 == 0 and U % 16 == 0; x, w_gate_up, w_down_t 16-byte aligned with ld % 8 == 0; y any ld;
// device pointers; y overlapping no input nor the workspace; a zeroed workspace of at least
// fused_mlp_workspace_size(M, K, U / 16, config) bytes.
void fused_mlp(ConstMatrix x, ConstMatrix w_gate_up, ConstMatrix w_down_t, Matrix y, Activation act,
               void* workspace, size_t workspace_bytes, FusedMlpConfig config = {}, cudaStream_t stream = nullptr);

// Sparse, one list for the batch: only the listed neuron blocks (an empty list gives y = 0). The
// block size must divide U; capacity <= U / block_size; workspace for list_groups = capacity ·
// block_size / 16. With neurons_per_block 0 and atomic reduction the block size is chosen on the
// device from *count, and at M <= 8 on sm_90 a list of at most one 16-neuron group per SM has each
// group read by two CTAs (a 2-CTA cluster, half of K each): src/fused_mlp/params.h.
void fused_mlp_sparse(ConstMatrix x, ConstMatrix w_gate_up, ConstMatrix w_down_t, Matrix y, Activation act,
                      NeuronBlockList blocks, void* workspace, size_t workspace_bytes, FusedMlpConfig config = {},
                      cudaStream_t stream = nullptr);

// Sparse, one list per token (indices has M rows): every neuron block selected by at least one token
// is read once; token m gets contributions only from its own blocks. Workspace for U / 16 groups.
void fused_mlp_sparse(ConstMatrix x, ConstMatrix w_gate_up, ConstMatrix w_down_t, Matrix y, Activation act,
                      PerTokenNeuronBlocks blocks, void* workspace, size_t workspace_bytes,
                      FusedMlpConfig config = {}, cudaStream_t stream = nullptr);

// Debug check of device lists (one small kernel + one synchronisation, so not for graphs): throws
// blockfuse::Error naming the first entry that is out of range, unsorted or duplicated, or a count
// outside [0, capacity]. n_blocks = U / block_size. For per-token lists pass rows = M, ld; for a
// union list rows = 1 and ld = capacity.
void fused_mlp_check_blocks(const int32_t* indices, const int32_t* counts, int64_t rows, int64_t ld,
                            int64_t n_blocks, cudaStream_t stream = nullptr);

// ---- router: x -> neuron-block lists on the device (no host sync; graph-capturable) -------------
// Router weight r [U / block_size, K] (one row per neuron block), score[m][b] = sigmoid(x[m]·r[b])
// in fp32. Selection per token: kThreshold keeps the blocks with score > threshold; kTopK keeps the
// top_k highest scores (ties to the lower block index; NaN scores are never selected).
// Outputs (device, any may be null when not wanted):
//   union_indices [n_blocks] + union_count [1]: the sorted union over the tokens (a NeuronBlockList
//     with capacity n_blocks);
//   token_indices [M, n_blocks] + token_counts [M]: each token's sorted list (a PerTokenNeuronBlocks
//     with ld = n_blocks).
// Workspace: router_workspace_size(M, n_blocks) bytes (no zeroing needed). 1 <= M <= 32,
// 1 <= n_blocks <= 8192, K % 8 == 0, x and r 16-byte aligned.
enum class RouterMode : int { kThreshold = 0, kTopK = 1 };
struct RouterOutputs {
  int32_t* union_indices = nullptr;
  int32_t* union_count = nullptr;
  int32_t* token_indices = nullptr;
  int32_t* token_counts = nullptr;
};
size_t router_workspace_size(int64_t m, int64_t n_blocks);
void neuron_block_router(ConstMatrix x, ConstMatrix r, RouterMode mode, float threshold, int top_k,
                         RouterOutputs out, void* workspace, size_t workspace_bytes, cudaStream_t stream = nullptr);

// ---- layout: down_proj.weight [K, U] -> w_down_t [U, K] ----------------------------------------
// A transpose of 2-byte elements (either dtype); out must not overlap down_proj. Device version
// asynchronous on `stream`; the host version on plain host memory.
void transpose_down_proj(ConstMatrix down_proj, Matrix out, cudaStream_t stream = nullptr);
void transpose_down_proj_host(ConstMatrix down_proj, Matrix out);

}  // namespace blockfuse
