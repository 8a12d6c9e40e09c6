// add_rmsnorm's argument checks (validate.h).
#include "add_rmsnorm/validate.h"

#include <cmath>

#include "common/check.h"

namespace blockfuse::detail {
namespace {

// A view of `ref`'s dtype and shape (ref_name: x, or dy in the backward), 16-byte vectors; absent_use:
// when an empty view is accepted instead (nullptr: never).
void check_like(const char* fn, const char* arg, const ConstMatrix& m, const char* ref_name, const ConstMatrix& ref,
                const char* absent_use) {
  check_matrix_shape(fn, arg, m);
  check_same_dtype(fn, arg, m, ref_name, ref.dtype);
  if (m.rows != ref.rows || m.cols != ref.cols)
    throw_arg(fn, arg, cat("is [", m.rows, ", ", m.cols, "]"),
              absent_use ? cat("the shape of '", ref_name, "' [", ref.rows, ", ", ref.cols,
                               "], or an empty view (data == nullptr, rows == 0) ", absent_use)
                         : cat("the shape of '", ref_name, "' [", ref.rows, ", ", ref.cols, "]"));
  check_alignment(fn, arg, m, 16, 8);
}

// The checks the forward and the backward make alike: eps; the leading [M, H] matrix (x or dy: H a
// multiple of 8, 16-byte vectors); the weight [1, H] of its dtype.
void check_eps(const char* fn, const RmsNormOptions& opt) {
  if (!(opt.eps > 0.0f) || !std::isfinite(opt.eps)) throw_arg(fn, "opt.eps", cat("is ", opt.eps), "a finite eps > 0");
}
void check_rows(const char* fn, const char* arg, const ConstMatrix& m) {
  check_matrix_shape(fn, arg, m);
  if (m.cols <= 0 || m.cols % 8 != 0)
    throw_arg(fn, arg, cat("has cols H = ", m.cols), "H > 0 and H % 8 == 0 (16-byte vectors)");
  if (m.cols > (int64_t{1} << 30)) throw_arg(fn, arg, cat("has cols H = ", m.cols), "H <= 2^30");
  check_alignment(fn, arg, m, 16, 8);
}
void check_weight(const char* fn, const ConstMatrix& weight, const char* lead_name, const ConstMatrix& lead) {
  check_matrix_shape(fn, "weight", weight);
  check_same_dtype(fn, "weight", weight, lead_name, lead.dtype);
  if (weight.rows != 1 || weight.cols != lead.cols)
    throw_arg(fn, "weight", cat("is [", weight.rows, ", ", weight.cols, "]"), cat("[1, H] (= [1, ", lead.cols, "])"));
  check_alignment(fn, "weight", weight, 16, 8);
}

// Everything about x, residual, weight, residual_out and opt that both entry points share; the
// pointer-only checks (no CUDA call).
void check_inputs(const char* fn, const ConstMatrix& x, const ConstMatrix& residual, const ConstMatrix& weight,
                  const Matrix& residual_out, const RmsNormOptions& opt) {
  check_eps(fn, opt);
  check_rows(fn, "x", x);
  if (!absent(residual)) check_like(fn, "residual", residual, "x", x, "for no residual");
  check_weight(fn, weight, "x", x);
  if (!absent(residual_out)) {
    check_like(fn, "residual_out", residual_out, "x", x, "to skip it");
    // In place on the residual stream: the exact alias is fine (each element is read before the
    // same thread writes it); a shifted or differently strided overlap would read written values.
    const bool exact_alias = !absent(residual) && residual_out.data == residual.data && residual_out.ld == residual.ld;
    if (!exact_alias && !absent(residual)) check_no_overlap(fn, "residual_out", residual_out, "residual", residual);
    check_no_overlap(fn, "residual_out", residual_out, "x", x);
    check_no_overlap(fn, "residual_out", residual_out, "weight", weight);
  }
}

void check_out_shape(const char* fn, int64_t rows, int64_t cols, const ConstMatrix& x) {
  if (rows != x.rows || cols != x.cols)
    throw_arg(fn, "out", cat("is [", rows, ", ", cols, "]"), cat("the shape of 'x' [", x.rows, ", ", x.cols, "]"));
}

// `out` (bf16/fp16 or e4m3 bytes, as a byte span) must not overlap anything.
void check_out_overlaps(const char* fn, const Span& out, const ConstMatrix& x, const ConstMatrix& residual,
                        const ConstMatrix& weight, const ConstMatrix& residual_out) {
  check_no_overlap(fn, "out", out, "x", span_of(x));
  if (!absent(residual)) check_no_overlap(fn, "out", out, "residual", span_of(residual));
  check_no_overlap(fn, "out", out, "weight", span_of(weight));
  if (!absent(residual_out)) check_no_overlap(fn, "out", out, "residual_out", span_of(residual_out));
}

void check_input_devices(const char* fn, const ConstMatrix& x, const ConstMatrix& residual, const ConstMatrix& weight,
                         const ConstMatrix& residual_out) {
  check_device_matrix(fn, "x", x);
  if (!absent(residual)) check_device_matrix(fn, "residual", residual);
  check_device_matrix(fn, "weight", weight);
  if (!absent(residual_out)) check_device_matrix(fn, "residual_out", residual_out);
}

}  // namespace

bool check_add_rmsnorm_args(const char* fn, const ConstMatrix& x, const ConstMatrix& residual, const ConstMatrix& weight,
                            const Matrix& residual_out, const Matrix& out, const RmsNormOptions& opt) {
  check_inputs(fn, x, residual, weight, residual_out, opt);
  check_matrix_shape(fn, "out", out);
  check_same_dtype(fn, "out", out, "x", x.dtype);
  check_out_shape(fn, out.rows, out.cols, x);
  check_alignment(fn, "out", out, 16, 8);
  check_out_overlaps(fn, span_of(out), x, residual, weight, residual_out);
  if (x.rows == 0) return false;
  check_input_devices(fn, x, residual, weight, residual_out);
  check_device_matrix(fn, "out", out);
  check_compute_capability(fn, 8, 0);
  return true;
}

bool check_add_rmsnorm_fp8_args(const char* fn, const ConstMatrix& x, const ConstMatrix& residual,
                                const ConstMatrix& weight, const Matrix& residual_out, const Fp8Matrix& out,
                                const Fp8Scale& scale, const RmsNormOptions& opt) {
  check_inputs(fn, x, residual, weight, residual_out, opt);
  // 8-byte stores per chunk; the pointer 16-byte aligned as the header documents.
  check_out_shape(fn, out.rows, out.cols, x);
  check_fp8_matrix_shape(fn, "out", out, 8);
  check_pointer_alignment(fn, "out", out.data, 16);
  check_fp8_scale_mode(fn, "scale.mode", scale.mode);
  const bool dynamic = scale.mode == Fp8ScaleMode::kDynamicPerRow;
  // Zero rows write no dynamic scale: the pointer may then be null.
  check_fp8_scale_pointer(fn, "scale.scale", scale, x.rows, /*null_ok=*/dynamic && x.rows == 0);
  const Span ov = span_of(out);
  check_out_overlaps(fn, ov, x, residual, weight, residual_out);
  const Span sv = span_of(scale, x.rows);
  // A written scale array must overlap nothing; the static scale (read) must only not be written.
  check_no_overlap(fn, "scale.scale", sv, "out", ov);
  if (!absent(residual_out)) check_no_overlap(fn, "scale.scale", sv, "residual_out", span_of(residual_out));
  if (dynamic) {
    check_no_overlap(fn, "scale.scale", sv, "x", span_of(x));
    if (!absent(residual)) check_no_overlap(fn, "scale.scale", sv, "residual", span_of(residual));
    check_no_overlap(fn, "scale.scale", sv, "weight", span_of(weight));
  }
  if (x.rows == 0) return false;
  check_input_devices(fn, x, residual, weight, residual_out);
  check_device_pointer(fn, "out", out.data);
  check_device_pointer(fn, "scale.scale", scale.scale);
  check_compute_capability(fn, 8, 0);
  return true;
}

bool check_rmsnorm_backward_args(const char* fn, const char* h_name, const char* dh_name, const ConstMatrix& dy,
                                 const ConstMatrix& dres, const ConstMatrix& h, const ConstMatrix& weight,
                                 const Matrix& dh, const Matrix& dweight, const void* workspace,
                                 size_t workspace_bytes, const RmsNormOptions& opt) {
  check_eps(fn, opt);
  check_rows(fn, "dy", dy);
  check_like(fn, h_name, h, "dy", dy, nullptr);
  if (!absent(dres)) check_like(fn, "d_residual_out", dres, "dy", dy, "when residual_out has no gradient");
  check_weight(fn, weight, "dy", dy);
  const bool want_dh = !absent(dh), want_dw = !absent(dweight);
  if (!want_dh && !want_dw)
    throw_arg(fn, "dweight", cat("is absent and so is '", dh_name, "'"), "at least one output to write");
  if (want_dh) {
    check_like(fn, dh_name, dh, "dy", dy, "when no input needs a gradient");
    // In place: the exact alias of dy or d_residual_out is fine (each element is read before the
    // thread that reads it writes it); any other overlap is not.
    const auto exact = [&](const ConstMatrix& m) { return dh.data == m.data && dh.ld == m.ld; };
    if (!exact(dy)) check_no_overlap(fn, dh_name, dh, "dy", dy);
    if (!absent(dres) && !exact(dres)) check_no_overlap(fn, dh_name, dh, "d_residual_out", dres);
    check_no_overlap(fn, dh_name, dh, h_name, h);
    check_no_overlap(fn, dh_name, dh, "weight", weight);
  }
  if (want_dw) {
    check_matrix_shape(fn, "dweight", dweight);
    check_same_dtype(fn, "dweight", dweight, "dy", dy.dtype);
    if (dweight.rows != 1 || dweight.cols != dy.cols)
      throw_arg(fn, "dweight", cat("is [", dweight.rows, ", ", dweight.cols, "]"), cat("[1, H] (= [1, ", dy.cols, "])"));
    check_alignment(fn, "dweight", dweight, 16, 8);
    check_no_overlap(fn, "dweight", dweight, "dy", dy);
    check_no_overlap(fn, "dweight", dweight, h_name, h);
    if (!absent(dres)) check_no_overlap(fn, "dweight", dweight, "d_residual_out", dres);
    check_no_overlap(fn, "dweight", dweight, "weight", weight);
    if (want_dh) check_no_overlap(fn, "dweight", dweight, dh_name, dh);
    const size_t need = rmsnorm_backward_workspace_bytes(dy.rows, dy.cols);
    if (workspace_bytes < need)
      throw_arg(fn, "workspace_bytes", cat("is ", static_cast<uint64_t>(workspace_bytes)),
                cat(">= rmsnorm_backward_workspace_bytes(M, H) = ", static_cast<uint64_t>(need), " (M = ", dy.rows,
                    ", H = ", dy.cols, ")"));
    if (need > 0) {
      if (workspace == nullptr) throw_arg(fn, "workspace", "is nullptr", "device memory for the dweight partials");
      check_pointer_alignment(fn, "workspace", workspace, 16);
      const Span ws = span_of_bytes(workspace, static_cast<int64_t>(need));
      check_no_overlap(fn, "workspace", ws, "dy", span_of(dy));
      check_no_overlap(fn, "workspace", ws, h_name, span_of(h));
      if (!absent(dres)) check_no_overlap(fn, "workspace", ws, "d_residual_out", span_of(dres));
      check_no_overlap(fn, "workspace", ws, "weight", span_of(weight));
      if (want_dh) check_no_overlap(fn, "workspace", ws, dh_name, span_of(dh));
      check_no_overlap(fn, "workspace", ws, "dweight", span_of(dweight));
    }
  }
  if (dy.rows == 0) {
    if (want_dw) check_device_matrix(fn, "dweight", dweight);
    return false;
  }
  check_device_matrix(fn, "dy", dy);
  check_device_matrix(fn, h_name, h);
  if (!absent(dres)) check_device_matrix(fn, "d_residual_out", dres);
  check_device_matrix(fn, "weight", weight);
  if (want_dh) check_device_matrix(fn, dh_name, dh);
  if (want_dw) {
    check_device_matrix(fn, "dweight", dweight);
    check_device_pointer(fn, "workspace", workspace);
  }
  check_compute_capability(fn, 8, 0);
  return true;
}

}  // namespace blockfuse::detail
