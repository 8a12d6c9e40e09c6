// The fp64 CPU reference of the fused MLP (see reference.h).
#include "fused_mlp/reference.h"

#include <cmath>
#include <vector>

#include "common/activation.cuh"
#include "common/check.h"
#include "common/host_float.h"

namespace blockfuse::fmlp {

namespace {

std::vector<double> row_f64(const ConstMatrix& a, int64_t r) {
  std::vector<double> v(size_t(a.cols));
  const auto* b = static_cast<const uint16_t*>(a.data) + r * a.ld;
  for (int64_t c = 0; c < a.cols; ++c) v[size_t(c)] = host::to_float(a.dtype, b[c]);
  return v;
}

}  // namespace

void reference(const ConstMatrix& x, const ConstMatrix& wgu, const ConstMatrix& wd, Activation act,
               const unsigned char* neuron_on, double* y, int64_t ldy, double* abs_sum) {
  const int64_t m_rows = x.rows, k = x.cols, u = wd.rows;
  if (wgu.cols != k || wd.cols != k || wgu.rows != 2 * u || wgu.dtype != x.dtype || wd.dtype != x.dtype)
    throw Error(detail::cat("fmlp::reference: x [", m_rows, ", ", k, "], w_gate_up [", wgu.rows, ", ", wgu.cols,
                            "], w_down_t [", wd.rows, ", ", wd.cols, "] do not form an MLP"));
  std::vector<std::vector<double>> xr;
  for (int64_t m = 0; m < m_rows; ++m) xr.push_back(row_f64(x, m));
  std::vector<double> h(size_t(m_rows * u), 0.0);
  for (int64_t n = 0; n < u; ++n) {
    const std::vector<double> up = row_f64(wgu, 2 * n), gate = row_f64(wgu, 2 * n + 1);
    for (int64_t m = 0; m < m_rows; ++m) {
      if (neuron_on && !neuron_on[m * u + n]) continue;
      double su = 0, sg = 0;
      for (int64_t c = 0; c < k; ++c) {
        su += xr[size_t(m)][size_t(c)] * up[size_t(c)];
        sg += xr[size_t(m)][size_t(c)] * gate[size_t(c)];
      }
      h[size_t(m * u + n)] = act_f64(act, sg) * su;
    }
  }
  for (int64_t m = 0; m < m_rows; ++m)
    for (int64_t c = 0; c < k; ++c) {
      y[m * ldy + c] = 0;
      if (abs_sum) abs_sum[m * ldy + c] = 0;
    }
  for (int64_t n = 0; n < u; ++n) {
    const std::vector<double> d = row_f64(wd, n);
    for (int64_t m = 0; m < m_rows; ++m) {
      if (neuron_on && !neuron_on[m * u + n]) continue;
      const double hv = h[size_t(m * u + n)];
      for (int64_t c = 0; c < k; ++c) {
        const double p = hv * d[size_t(c)];
        y[m * ldy + c] += p;
        if (abs_sum) abs_sum[m * ldy + c] += std::fabs(p);
      }
    }
  }
}

void neuron_mask_from_blocks(const int32_t* indices, const int32_t* counts, int64_t ld, bool per_token, int64_t m,
                             int64_t u, int block_size, unsigned char* mask) {
  for (int64_t i = 0; i < m * u; ++i) mask[i] = 0;
  for (int64_t r = 0; r < m; ++r) {
    const int64_t row = per_token ? r : 0;
    for (int64_t i = 0; i < counts[row]; ++i) {
      const int64_t b = indices[row * ld + i];
      for (int64_t n = b * block_size; n < (b + 1) * block_size && n < u; ++n) mask[r * u + n] = 1;
    }
  }
}

}  // namespace blockfuse::fmlp
