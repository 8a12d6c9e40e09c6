// Internal: the cross-entropy kernel's launch shape, a pure function of V (CPU-tested:
// tests/cross_entropy/test_cross_entropy_cpu.cpp).
#pragma once

#include <cstdint>

namespace blockfuse::detail {

// Threads per row: one 16-byte chunk (8 logits) a thread per step, as many steps as it takes. A
// language model's vocabulary (32000-256000: 4000-32000 chunks) gets 512 threads, a few to a few
// tens of steps; small rows get a warp per 8 chunks' worth so that no thread idles the whole row.
inline int cross_entropy_threads(int64_t vocab) {
  const int64_t chunks = vocab / 8;
  if (chunks >= 4096) return 512;
  if (chunks >= 1024) return 256;
  if (chunks >= 256) return 128;
  return 64;
}

}  // namespace blockfuse::detail
