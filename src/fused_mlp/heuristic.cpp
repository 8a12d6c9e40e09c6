// The fused MLP's block-size heuristic: a pure function of (M, K, active 16-neuron groups, SMs),
// tested on the CPU (tests/fused_mlp/test_fused_mlp.cpp).
//
// Cost model, in units where one SM streams one byte per unit at its fair share of DRAM bandwidth
// (copy bandwidth / SMs). For neurons_per_block NB in {16, 32, 64}:
//   * blocks = ceil(groups / (NB / 16)), each reading bb = 3 · NB · K · 2 weight bytes;
//   * T_dram = all weight bytes / SMs: no schedule beats the copy rate;
//   * T_sm: two blocks are resident per SM (256 threads, <= 128 registers); the busiest SM runs
//     ceil(blocks / SMs) of them and streams at most kBurst fair shares while others idle at the
//     tail: T_sm = ceil(blocks / SMs) · bb / kBurst;
//   * T_flush: every active block adds its fp32 partial y, M · K · 4 bytes, to the workspace (L2
//     atomics or slot stores, and the last block of a chunk reads it back), charged at kFlushCost
//     times the fair share per byte — the term that makes small blocks expensive at large M
//     (U = 14336, M = 16: 64-neuron blocks flush 59 MB, 16-neuron blocks 235 MB, against 352 MB of
//     weights).
// T = max(T_dram, T_sm) + T_flush; the smallest T wins, ties to the larger block (fewer flushes).
// Sparse union lists with few active groups pick small blocks (more SMs streaming); dense MLPs and
// large M pick 64. The model is fmlp::modeled_time (params.h): the union-list kernel applies it on
// the device to the list's count.
#include "blockfuse/fused_mlp.h"
#include "common/check.h"
#include "fused_mlp/params.h"

namespace blockfuse {

FusedMlpConfig fused_mlp_heuristic(int64_t m, int64_t k, int64_t groups, int sm_count) {
  constexpr const char* fn = "fused_mlp_heuristic";
  using detail::cat;
  if (m < 1 || m > kFusedMlpMaxM) detail::throw_arg(fn, "m", cat("is ", m), cat("1 <= m <= ", kFusedMlpMaxM));
  if (k < 0) detail::throw_arg(fn, "k", cat("is ", k), "k >= 0");
  if (groups < 0) detail::throw_arg(fn, "groups", cat("is ", groups), "groups >= 0");
  if (sm_count < 1) detail::throw_arg(fn, "sm_count", cat("is ", sm_count), "sm_count >= 1");
  FusedMlpConfig best;
  best.neurons_per_block = fmlp::modeled_neurons_per_block(m, k, groups, sm_count);
  return best;
}

}  // namespace blockfuse
