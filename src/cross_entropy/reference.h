// Internal: the fp64 CPU reference of cross_entropy_forward_backward (the GPU tests'), on the
// logits' values as floats.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace blockfuse::reference {

// Row r of x [rows, vocab] (row stride ld): loss[r] and, with grad, grad[r * vocab + j] (before the
// output rounding). Ignored rows: loss 0, gradient 0; a label outside [0, vocab): NaN for both.
inline void cross_entropy(const float* x, int64_t rows, int64_t vocab, int64_t ld, const int64_t* labels,
                          int64_t ignore_index, double scale, std::vector<double>& loss, std::vector<double>* grad) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  loss.assign(size_t(rows), 0.0);
  if (grad) grad->assign(size_t(rows * vocab), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ld;
    const int64_t label = labels[r];
    if (label == ignore_index) continue;
    const bool bad = label < 0 || label >= vocab;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < vocab; ++j) mx = std::fmax(mx, double(row[j]));
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(double(row[j]) - mx);
    const double lse = mx + std::log(sum);
    loss[size_t(r)] = bad ? nan : lse - double(row[label]);
    if (grad)
      for (int64_t j = 0; j < vocab; ++j)
        (*grad)[size_t(r * vocab + j)] = bad ? nan : (std::exp(double(row[j]) - lse) - (j == label ? 1.0 : 0.0)) * scale;
  }
}

}  // namespace blockfuse::reference
