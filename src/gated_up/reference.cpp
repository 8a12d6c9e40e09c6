// CPU reference of gated_up (see reference.h). Deliberately simple: it is the definition the
// kernel is checked against, not a fast path.
#include "gated_up/reference.h"

#include <math.h>  // expf/tanhf for activation.cuh's host path (it includes only cuda_runtime.h)

#include <vector>

#include "common/check.h"
#include "common/host_float.h"
#include "common/activation.cuh"

namespace blockfuse {
namespace {

// The same rules as gated_up() where they concern the definition (shapes, dtypes, activation), but
// none of the kernel's vector-width rules (K % 8, U % 8, alignment): the reference must be able to
// check any shape a test wants to throw at it. Host memory, so no device checks.
void validate(const char* kFn, const ConstMatrix& x, const ConstMatrix& w, int64_t out_rows, int64_t out_cols,
              Activation act) {
  if (act != Activation::kSiLU && act != Activation::kGeluTanh)
    detail::throw_arg(kFn, "activation", detail::cat("has code ", static_cast<int>(act)),
                      "Activation::kSiLU or Activation::kGeluTanh");
  detail::check_matrix_shape(kFn, "x", x);
  detail::check_matrix_shape(kFn, "w", w);
  detail::check_same_dtype(kFn, "w", w, "x", x.dtype);
  if (w.cols != x.cols)
    detail::throw_arg(kFn, "w", detail::cat("has cols = ", w.cols), detail::cat("w.cols == x.cols (K = ", x.cols, ")"));
  if (out_rows != x.rows)
    detail::throw_arg(kFn, "out", detail::cat("has rows = ", out_rows), detail::cat("out.rows == x.rows (M = ", x.rows, ")"));
  if (w.rows != 2 * out_cols)
    detail::throw_arg(kFn, "w", detail::cat("has rows = ", w.rows),
                      detail::cat("w.rows == 2 * out.cols (= ", 2 * out_cols, "): interleaved [up_0; gate_0; up_1; ...]"));
}

// Calls f(m, j, value) for every output, value unrounded fp32.
template <class F>
void compute(const ConstMatrix& x, const ConstMatrix& w, int64_t U, Activation act, F&& f) {
  const auto* xp = static_cast<const uint16_t*>(x.data);
  const auto* wp = static_cast<const uint16_t*>(w.data);
  const int64_t M = x.rows, K = x.cols;
  std::vector<float> xr(K);  // row m of x, converted once
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) xr[k] = host::to_float(x.dtype, xp[m * x.ld + k]);
    for (int64_t j = 0; j < U; ++j) {
      const uint16_t* wu = wp + (2 * j) * w.ld;
      const uint16_t* wg = wp + (2 * j + 1) * w.ld;
      float su = 0.f, sg = 0.f;
      for (int64_t k = 0; k < K; ++k) {
        su += xr[k] * host::to_float(w.dtype, wu[k]);
        sg += xr[k] * host::to_float(w.dtype, wg[k]);
      }
      f(m, j, gated_act(static_cast<int>(act), sg, su));
    }
  }
}

}  // namespace

void gated_up_reference_host(ConstMatrix x, ConstMatrix w, Matrix out, Activation act) {
  constexpr const char* kFn = "gated_up_reference_host";
  detail::check_matrix_shape(kFn, "out", out);
  validate(kFn, x, w, out.rows, out.cols, act);
  detail::check_same_dtype(kFn, "out", out, "x", x.dtype);
  detail::check_no_overlap(kFn, "out", out, "x", x);
  detail::check_no_overlap(kFn, "out", out, "w", w);
  auto* op = static_cast<uint16_t*>(out.data);
  compute(x, w, out.cols, act, [&](int64_t m, int64_t j, float v) { op[m * out.ld + j] = host::from_float(out.dtype, v); });
}

void gated_up_reference_host_f32(ConstMatrix x, ConstMatrix w, float* out, int64_t ldo, Activation act) {
  constexpr const char* kFn = "gated_up_reference_host_f32";
  // U comes from w here (there is no out matrix); an odd w.rows fails validate's w.rows == 2U.
  const int64_t U = w.rows / 2;
  validate(kFn, x, w, x.rows, U, act);
  if (ldo < U || ldo < 1) detail::throw_arg(kFn, "ldo", detail::cat("= ", ldo), detail::cat("ldo >= max(U, 1) (U = ", U, ")"));
  if (out == nullptr && x.rows > 0 && U > 0) detail::throw_arg(kFn, "out", "is a null pointer", "a host buffer of x.rows * ldo floats");
  compute(x, w, U, act, [&](int64_t m, int64_t j, float v) { out[m * ldo + j] = v; });
}

}  // namespace blockfuse
