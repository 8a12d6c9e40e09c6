// gated_mlp_dgated (blockfuse/gated_up.h): the validation of the gated MLP's fused backward through
// the down projection, then the sm90a launcher (dgated_sm90.cu). Compiled into every build; without
// the sm90a kernels every call is refused once its arguments are checked.
#include <cstdint>

#include "blockfuse/gated_up.h"
#include "common/check.h"
#include "common/device.h"
#include "gated_up/params.h"
#include "gated_up/tile_configs_sm90.h"
#if defined(BLOCKFUSE_HAS_SM90)
#include "gated_up/dgated_sm90.h"
#endif

namespace blockfuse {

namespace {

using detail::absent;
using detail::cat;
using detail::throw_arg;

constexpr const char* kFn = "gated_mlp_dgated";

// Everything but the device checks; returns false when there is nothing to launch (M == 0).
bool check_shapes(const ConstMatrix& dy, const ConstMatrix& w_down, const ConstMatrix& z, const Matrix& dz,
                  const Matrix& h, Activation act) {
  if (act != Activation::kSiLU && act != Activation::kGeluTanh)
    throw_arg(kFn, "activation", cat("has code ", static_cast<int>(act)), "Activation::kSiLU or Activation::kGeluTanh");
  detail::check_matrix_shape(kFn, "dy", dy);
  detail::check_matrix_shape(kFn, "w_down", w_down);
  detail::check_matrix_shape(kFn, "z", z);
  detail::check_matrix_shape(kFn, "dz", dz);
  const bool want_h = !absent(h);
  if (want_h) detail::check_matrix_shape(kFn, "h", h);
  if (dy.dtype != DType::kBF16 && dy.dtype != DType::kFP16)
    throw_arg(kFn, "dy", cat("has dtype ", dtype_name(dy.dtype)), "bf16 or fp16");
  detail::check_same_dtype(kFn, "w_down", w_down, "dy", dy.dtype);
  detail::check_same_dtype(kFn, "z", z, "dy", dy.dtype);
  detail::check_same_dtype(kFn, "dz", dz, "dy", dy.dtype);
  if (want_h) detail::check_same_dtype(kFn, "h", h, "dy", dy.dtype);

  const int64_t M = dy.rows, N = dy.cols, U = w_down.cols;
  if (w_down.rows != N)
    throw_arg(kFn, "w_down", cat("has rows = ", w_down.rows), cat("w_down.rows == dy.cols (N = ", N, ")"));
  if (N < 8 || N % 8 != 0) throw_arg(kFn, "dy", cat("has cols N = ", N), "N >= 8 and N % 8 == 0 (16-byte TMA rows)");
  if (U < 8 || U % 8 != 0)
    throw_arg(kFn, "w_down", cat("has cols U = ", U), "U >= 8 and U % 8 == 0 (16-byte TMA rows)");
  if (z.rows != M || z.cols != 2 * U)
    throw_arg(kFn, "z", cat("is ", z.rows, " x ", z.cols), cat(M, " x ", 2 * U, " (dy.rows x 2 · w_down.cols)"));
  if (dz.rows != M || dz.cols != 2 * U)
    throw_arg(kFn, "dz", cat("is ", dz.rows, " x ", dz.cols), cat(M, " x ", 2 * U, " (the shape of z)"));
  if (want_h && (h.rows != M || h.cols != U))
    throw_arg(kFn, "h", cat("is ", h.rows, " x ", h.cols), cat(M, " x ", U, " (dy.rows x w_down.cols), or absent"));
  if (M > (int64_t{1} << 31) - 1) throw_arg(kFn, "dy", cat("has rows M = ", M), "M < 2^31");
  detail::check_alignment(kFn, "dy", dy, 16, 8);
  detail::check_alignment(kFn, "w_down", w_down, 16, 8);
  detail::check_alignment(kFn, "z", z, 16, 8);
  detail::check_alignment(kFn, "dz", dz, 16, 8);
  if (want_h) detail::check_alignment(kFn, "h", h, 16, 8);
  if (M == 0) return false;
  // dz may be z exactly (each element is read, then written, by one thread), nothing else overlaps.
  const bool in_place = dz.data == z.data && dz.ld == z.ld;
  detail::check_no_overlap(kFn, "dz", dz, "dy", dy);
  detail::check_no_overlap(kFn, "dz", dz, "w_down", w_down);
  if (!in_place) detail::check_no_overlap(kFn, "dz", dz, "z", z);
  if (want_h) {
    detail::check_no_overlap(kFn, "h", h, "dy", dy);
    detail::check_no_overlap(kFn, "h", h, "w_down", w_down);
    detail::check_no_overlap(kFn, "h", h, "z", z);
    detail::check_no_overlap(kFn, "h", h, "dz", dz);
  }
  return true;
}

}  // namespace

bool gated_mlp_dgated_available(int device) {
#if defined(BLOCKFUSE_HAS_SM90)
  const detail::DeviceSpec s = device < 0 ? detail::current_device_spec() : detail::device_spec(device);
  return s.cc_major == 9 && s.cc_minor == 0;
#else
  (void)device;
  return false;
#endif
}

void gated_mlp_dgated(ConstMatrix dy, ConstMatrix w_down, ConstMatrix z, Matrix dz, Matrix h, Activation act,
                      cudaStream_t stream) {
  if (!check_shapes(dy, w_down, z, dz, h, act)) return;
  detail::check_device_matrix(kFn, "dy", dy);
  detail::check_device_matrix(kFn, "w_down", w_down);
  detail::check_device_matrix(kFn, "z", z);
  detail::check_device_matrix(kFn, "dz", dz);
  if (!absent(h)) detail::check_device_matrix(kFn, "h", h);
  if (!gated_mlp_dgated_available())
    throw Error(cat(kFn, ": needs a device of compute capability 9.0 and a build with the sm90a kernels (90 in "
                    "BLOCKFUSE_CUDA_ARCHS); this one ",
                    gated_up_has_sm90() ? "runs on another device" : "has none", " (gated_mlp_dgated_available)"));
#if defined(BLOCKFUSE_HAS_SM90)
  DGatedParams p{};
  p.dy = dy.data;
  p.w_down = w_down.data;
  p.z = z.data;
  p.dz = dz.data;
  p.h = absent(h) ? nullptr : h.data;
  p.m = dy.rows;
  p.n = dy.cols;
  p.u = w_down.cols;
  p.lddy = dy.ld;
  p.ldw = w_down.ld;
  p.ldz = z.ld;
  p.lddz = dz.ld;
  p.ldh = absent(h) ? 0 : h.ld;
  p.act = static_cast<int>(act);
  p.max_swizzle = sm90::dgated_max_swizzle(p.m, p.u, detail::current_device_spec().sm_count);
  sm90::launch_dgated(dy.dtype, p, stream);
#else
  (void)stream;
#endif
}

}  // namespace blockfuse
