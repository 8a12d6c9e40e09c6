// The tile configuration of the sm80 attention kernel: a pure function of the head dim (and the
// device generation), tested on the CPU (tests/attention/test_attention_heuristic.cpp).
//
// The choice per head dim is the first row of kTileConfigs for that D (src/attention/params.h):
//   D = 64:  128 x 128, 4 warps — 64 fp32 O accumulators + 64 score registers per thread;
//   D = 128: 128 x 128, 8 warps — 64 O accumulators, 64 score registers; 96 KB shared memory
//            (measured faster than 128 x 64 / 4 warps on the H100; params.h cites the run);
//   D = 256: 128 x 64, 8 warps — 128 KB shared memory, one block per SM.
// Causal and non-causal use the same tiles: the block order puts the long causal rows first, and a
// taller block (fewer, longer blocks) loses more to the diagonal than it gains.
#include "attention/params.h"
#include "common/check.h"

namespace blockfuse {

namespace {
void check_head_dim(const char* fn, int64_t head_dim) {
  if (head_dim != 64 && head_dim != 128 && head_dim != 256)
    detail::throw_arg(fn, "head_dim", detail::cat("is ", head_dim), "64, 128 or 256");
}
}  // namespace

int attention_num_configs(int64_t head_dim) {
  check_head_dim("attention_num_configs", head_dim);
  int n = 0;
  for (const auto& c : attn::kTileConfigs) n += c.head_dim == head_dim;
  return n;
}

AttentionConfig attention_config(int64_t head_dim, int index) {
  check_head_dim("attention_config", head_dim);
  int n = 0;
  for (const auto& c : attn::kTileConfigs) {
    if (c.head_dim != head_dim) continue;
    if (n++ == index) return AttentionConfig{c.block_m, c.block_n, c.warps};
  }
  detail::throw_arg("attention_config", "index", detail::cat("is ", index),
                    detail::cat("0 <= index < ", attention_num_configs(head_dim)));
}

AttentionConfig attention_heuristic(int64_t head_dim, bool /*causal*/, int cc_major, int /*cc_minor*/) {
  check_head_dim("attention_heuristic", head_dim);
  if (cc_major < 8)
    detail::throw_arg("attention_heuristic", "cc_major", detail::cat("is ", cc_major),
                      "compute capability >= 8.0 (mma.sync m16n8k16, cp.async)");
  return attention_config(head_dim, 0);
}

}  // namespace blockfuse
