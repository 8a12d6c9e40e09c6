// Internal: the fp64 reference of blockfuse::rope (the tests'), on one row of x's values as floats.
#pragma once

#include <cstdint>

namespace blockfuse::reference {

// out[0, D) of one row x[0, D) with the position's cos, sin rows (D even; the pairing (i, i + D/2)).
// forward: out = x·cos + rotate_half(x)·sin; backward: out = x·cos + rotate_halfᵀ(x·sin).
inline void rope_row(const float* x, const float* cos, const float* sin, int64_t d, bool backward, double* out) {
  const int64_t h = d / 2;
  for (int64_t i = 0; i < h; ++i) {
    const double x1 = x[i], x2 = x[i + h];
    if (!backward) {
      out[i] = x1 * double(cos[i]) - x2 * double(sin[i]);
      out[i + h] = x2 * double(cos[i + h]) + x1 * double(sin[i + h]);
    } else {
      out[i] = x1 * double(cos[i]) + x2 * double(sin[i + h]);
      out[i + h] = x2 * double(cos[i + h]) - x1 * double(sin[i]);
    }
  }
}

}  // namespace blockfuse::reference
