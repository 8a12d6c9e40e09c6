// The fp64 CPU reference of decode_gemm (see reference.h).
#include "decode_gemm/reference.h"

#include <cmath>
#include <vector>

#include "common/check.h"
#include "common/host_float.h"

namespace blockfuse::decode {

void reference(const ConstMatrix& x, const ConstMatrix& w, double* y, int64_t ldy, double* abs_sum) {
  if (x.cols != w.cols || x.dtype != w.dtype)
    throw Error(detail::cat("decode::reference: x [", x.rows, ", ", x.cols, "] and w [", w.rows, ", ", w.cols,
                            "] need equal K and dtype"));
  const auto* xb = static_cast<const uint16_t*>(x.data);
  const auto* wb = static_cast<const uint16_t*>(w.data);
  std::vector<double> xr(size_t(x.cols));
  for (int64_t m = 0; m < x.rows; ++m) {
    for (int64_t k = 0; k < x.cols; ++k) xr[size_t(k)] = host::to_float(x.dtype, xb[m * x.ld + k]);
    for (int64_t n = 0; n < w.rows; ++n) {
      double s = 0, a = 0;
      const uint16_t* wr = wb + n * w.ld;
      for (int64_t k = 0; k < x.cols; ++k) {
        const double p = xr[size_t(k)] * double(host::to_float(w.dtype, wr[k]));
        s += p;
        a += std::fabs(p);
      }
      y[m * ldy + n] = s;
      if (abs_sum) abs_sum[m * ldy + n] = a;
    }
  }
}

}  // namespace blockfuse::decode
