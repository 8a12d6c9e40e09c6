// CPU reference of swiglu / swiglu_fp8 (see reference.h): the definition, not a fast path.
#include "swiglu/reference.h"

#include <math.h>  // expf/tanhf for activation.cuh's host path

#include <algorithm>
#include <vector>

#include "common/check.h"
#include "common/fp8_host.h"
#include "common/host_float.h"
#include "common/activation.cuh"

namespace blockfuse {
namespace {

void validate(const char* fn, const ConstMatrix& in, int64_t ldo, Activation act, GateUpLayout layout) {
  if (act != Activation::kSiLU && act != Activation::kGeluTanh)
    detail::throw_arg(fn, "activation", detail::cat("has code ", int(act)), "Activation::kSiLU or Activation::kGeluTanh");
  if (layout != GateUpLayout::kStacked && layout != GateUpLayout::kInterleaved)
    detail::throw_arg(fn, "layout", detail::cat("has code ", int(layout)), "GateUpLayout::kStacked or kInterleaved");
  detail::check_matrix_shape(fn, "gate_up", in);
  if (in.cols % 2 != 0)
    detail::throw_arg(fn, "gate_up", detail::cat("has cols = ", in.cols), "an even number of columns (2U)");
  if (ldo < in.cols / 2) detail::throw_arg(fn, "out", detail::cat("has ld = ", ldo), detail::cat("ld >= U (= ", in.cols / 2, ")"));
}

float element(const ConstMatrix& in, int64_t r, int64_t c) {
  return host::to_float(in.dtype, static_cast<const uint16_t*>(in.data)[r * in.ld + c]);
}

}  // namespace

void swiglu_reference_host_f32(ConstMatrix in, float* out, int64_t ldo, Activation act, GateUpLayout layout) {
  validate("swiglu_reference_host_f32", in, ldo, act, layout);
  const int64_t u = in.cols / 2;
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t j = 0; j < u; ++j) {
      const bool il = layout == GateUpLayout::kInterleaved;
      const float g = element(in, r, il ? 2 * j + 1 : j);
      const float up = element(in, r, il ? 2 * j : u + j);
      out[r * ldo + j] = gated_act(int(act), g, up);
    }
}

void swiglu_reference_host(ConstMatrix in, Matrix out, Activation act, GateUpLayout layout) {
  constexpr const char* kFn = "swiglu_reference_host";
  detail::check_matrix_shape(kFn, "out", out);
  if (out.rows != in.rows || 2 * out.cols != in.cols)
    detail::throw_arg(kFn, "out", detail::cat("is ", out.rows, " x ", out.cols),
                      detail::cat("[gate_up.rows, gate_up.cols / 2] = [", in.rows, ", ", in.cols / 2, "]"));
  std::vector<float> v(static_cast<size_t>(in.rows * out.cols));
  swiglu_reference_host_f32(in, v.data(), out.cols, act, layout);
  auto* o = static_cast<uint16_t*>(out.data);
  for (int64_t r = 0; r < out.rows; ++r)
    for (int64_t j = 0; j < out.cols; ++j) o[r * out.ld + j] = host::from_float(out.dtype, v[size_t(r * out.cols + j)]);
}

void swiglu_backward_reference_host(ConstMatrix dh, ConstMatrix in, double* dout, int64_t ldo, Activation act,
                                    GateUpLayout layout) {
  constexpr const char* kFn = "swiglu_backward_reference_host";
  validate(kFn, in, ldo / 2, act, layout);
  detail::check_matrix_shape(kFn, "dh", dh);
  if (dh.rows != in.rows || 2 * dh.cols != in.cols)
    detail::throw_arg(kFn, "dh", detail::cat("is ", dh.rows, " x ", dh.cols),
                      detail::cat("[gate_up.rows, gate_up.cols / 2] = [", in.rows, ", ", in.cols / 2, "]"));
  const int64_t u = dh.cols;
  const bool il = layout == GateUpLayout::kInterleaved;
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t j = 0; j < u; ++j) {
      const int64_t gc = il ? 2 * j + 1 : j, uc = il ? 2 * j : u + j;
      const double g = element(in, r, gc), up = element(in, r, uc), d = element(dh, r, j);
      dout[r * ldo + gc] = d * up * act_grad_f64(act, g);
      dout[r * ldo + uc] = d * act_f64(act, g);
    }
}

void swiglu_fp8_reference_host(ConstMatrix in, uint8_t* out, int64_t ldo, Fp8ScaleMode mode, float* scales,
                               Activation act, GateUpLayout layout) {
  const int64_t u = in.cols / 2;
  std::vector<float> v(static_cast<size_t>(in.rows * u));
  swiglu_reference_host_f32(in, v.data(), u, act, layout);
  for (int64_t r = 0; r < in.rows; ++r) {
    const float* row = v.data() + r * u;
    float s = scales[0];
    if (mode == Fp8ScaleMode::kDynamicPerRow) {
      float amax = 0.0f;
      for (int64_t j = 0; j < u; ++j)
        if (std::isfinite(row[j])) amax = std::max(amax, std::fabs(row[j]));
      s = scales[r] = host::fp8_dynamic_scale(amax);
    }
    for (int64_t j = 0; j < u; ++j) out[r * ldo + j] = host::fp8_quantize(row[j], s);
  }
}

}  // namespace blockfuse
