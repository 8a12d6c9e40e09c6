// gated_up_fp8(): argument validation and dispatch of the FP8 (e4m3) fused gated up-projection.
// Nothing is launched until every argument has been checked. The kernel is sm90a only
// (gated_up_fp8_sm90.cuh, tile table tile_configs_fp8_sm90.h, heuristic_fp8_sm90.cpp); the dynamic
// per-row e4m3 output adds a row kernel after it (rowwise_fp8.cu); the CPU reference is
// reference_fp8.cpp.
#include "blockfuse/gated_up_fp8.h"

#include "blockfuse/gated_up.h"

#include "common/check.h"
#include "common/device.h"
#include "gated_up/params.h"
#include "gated_up/rowwise_fp8.h"
#include "gated_up/tile_configs_fp8_sm90.h"
#if defined(BLOCKFUSE_HAS_SM90)
#include "gated_up/launch_fp8_sm90.h"
#endif

namespace blockfuse {

// fp8_input_scale_mode_name is in common/fp8.cpp, beside the other FP8 enum names.

// The FP8 kernels are compiled exactly when the 16-bit sm90a ones are (the same CMake switch).
bool gated_up_fp8_has_sm90() { return gated_up_has_sm90(); }

int gated_up_fp8_num_tile_configs() { return kNumSm90Fp8TileConfigs; }

namespace {

using detail::cat;
using detail::Span;
using detail::throw_arg;

constexpr const char* kFn = "gated_up_fp8";

// Shape and alignment of an e4m3 input: rows, cols >= 0, ld >= cols, a non-null pointer when
// non-empty, 16-byte aligned with ld % 16 == 0 (TMA: 16-byte aligned base and row stride).
void check_fp8_input(const char* arg, const Fp8ConstMatrix& m) {
  // The shape rules of an FP8 matrix (common/fp8.cpp; alignment 1 there: the TMA rule follows).
  detail::check_fp8_matrix_shape(kFn, arg, Fp8Matrix{const_cast<void*>(m.data), m.rows, m.cols, m.ld}, 1);
  detail::check_pointer_alignment(kFn, arg, m.data, 16);
  if (m.ld % 16 != 0)
    throw_arg(kFn, arg, cat("has row stride ld = ", m.ld), "ld % 16 == 0 (TMA needs 16-byte aligned rows of e4m3)");
}

Span span_of_input(const Fp8ConstMatrix& m) {
  if (m.rows == 0 || m.cols == 0) return detail::span_of_bytes(m.data, 0);
  return detail::span_of_bytes(m.data, (m.rows - 1) * m.ld + m.cols);
}

// An input scale: a known mode, a non-null pointer, 4-byte aligned (8 for w's per-channel pairs).
void check_input_scale(const char* arg, const Fp8InputScale& s, int64_t rows, const char* rows_what, int align) {
  if (s.mode != Fp8InputScaleMode::kPerTensor && s.mode != Fp8InputScaleMode::kPerRow)
    throw_arg(kFn, arg, cat("has mode code ", static_cast<int>(s.mode)),
              "Fp8InputScaleMode::kPerTensor or Fp8InputScaleMode::kPerRow");
  if (s.scale == nullptr)
    throw_arg(kFn, arg, "has a null scale pointer",
              s.mode == Fp8InputScaleMode::kPerTensor ? std::string("a device pointer to 1 float")
                                                      : cat("a device pointer to ", rows, " floats (", rows_what, ")"));
  const int a = s.mode == Fp8InputScaleMode::kPerRow ? align : 4;
  if (reinterpret_cast<std::uintptr_t>(s.scale) % a != 0)
    throw_arg(kFn, arg, cat("scale pointer ", static_cast<const void*>(s.scale), " is not ", a, "-byte aligned"),
              cat("a ", a, "-byte aligned float pointer"));
}

Span span_of_input_scale(const Fp8InputScale& s, int64_t rows) {
  return detail::span_of_bytes(s.scale, int64_t(sizeof(float)) * (s.mode == Fp8InputScaleMode::kPerRow ? rows : 1));
}

struct OutView {
  const char* name;  // "out"
  void* data;
  int64_t rows, cols, ld;
  bool fp8;
  Span span;
};

// Everything but the output's own type checks, shared by both entry points.
// out_scale: the e4m3 output's scale (null for bf16) and the bytes it spans (4, or 4·M when per row:
// written, so it must not overlap the inputs either).
GatedUpFp8Params validate(const Fp8ConstMatrix& x, const Fp8InputScale& xs, const Fp8ConstMatrix& w,
                          const Fp8InputScale& ws, const OutView& out, const float* out_scale, Span out_scale_span,
                          Activation act, const GatedUpFp8Options& opt) {
  if (act != Activation::kSiLU && act != Activation::kGeluTanh)
    throw_arg(kFn, "activation", cat("has code ", static_cast<int>(act)), "Activation::kSiLU or Activation::kGeluTanh");
  if (opt.tile_config < -1 || opt.tile_config >= kNumSm90Fp8TileConfigs)
    throw_arg(kFn, "options.tile_config", cat("= ", opt.tile_config),
              cat("-1 (heuristic) or 0 <= tile_config < ", kNumSm90Fp8TileConfigs));
  if (!sm90_raster_valid(opt.sm90_raster))
    throw_arg(kFn, "options.sm90_raster", cat("has code ", static_cast<int>(opt.sm90_raster)), "kAuto, kAlongM or kAlongN");
  check_fp8_input("x", x);
  check_fp8_input("w", w);
  const int64_t M = x.rows, K = x.cols, U = out.cols;
  if (w.cols != K) throw_arg(kFn, "w", cat("has cols = ", w.cols), cat("w.cols == x.cols (K = ", K, ")"));
  if (out.rows != M) throw_arg(kFn, out.name, cat("has rows = ", out.rows), cat("out.rows == x.rows (M = ", M, ")"));
  if (w.rows != 2 * U)
    throw_arg(kFn, "w", cat("has rows = ", w.rows),
              cat("w.rows == 2 * out.cols (= ", 2 * U, "): interleaved [up_0; gate_0; up_1; ...]"));
  if (K < 16 || K % 16 != 0)
    throw_arg(kFn, "x", cat("has cols K = ", K), "K >= 16 and K % 16 == 0 (TMA: 16-byte aligned e4m3 rows)");
  // The TMA store moves each output row in 16-byte units up to the row's end rounded up to 16 bytes
  // (CUTLASS requires the same of a TMA-stored D extent): U·sizeof(out) % 16 == 0, or the bytes
  // past U up to that boundary are overwritten (seen on the H100 with e4m3 outputs and U % 16 == 8).
  const int64_t u_align = out.fp8 ? 16 : 8;
  if (U < u_align || U % u_align != 0)
    throw_arg(kFn, out.name, cat("has cols U = ", U),
              cat("U >= ", u_align, " and U % ", u_align, " == 0 (", out.fp8 ? "e4m3" : "bf16",
                  " output: 16-byte rows for the TMA store)"));
  if (M > (int64_t{1} << 31) - 1) throw_arg(kFn, "x", cat("has rows M = ", M), "M < 2^31");
  check_input_scale("x_scale", xs, M, "one per row of x", 4);
  check_input_scale("w_scale", ws, 2 * U, "one per row of the interleaved w", 8);

  if (!gated_up_fp8_has_sm90())
    throw Error(cat("blockfuse::", kFn, ": not supported by this build: the FP8 kernel is sm90a (Hopper) only and "
                    "this library was built without it; required: a build with 90 in BLOCKFUSE_CUDA_ARCHS "
                    "(BLOCKFUSE_SM90=AUTO) or BLOCKFUSE_SM90=ON"));

  GatedUpFp8Params p{};
  p.x = x.data;
  p.w = w.data;
  p.out = out.data;
  p.m = M;
  p.k = K;
  p.u = U;
  p.ldx = x.ld;
  p.ldw = w.ld;
  p.ldo = out.ld;
  p.act = static_cast<int>(act);
  p.x_scale = xs.scale;
  p.w_scale = ws.scale;
  p.x_per_row = xs.mode == Fp8InputScaleMode::kPerRow;
  p.w_per_channel = ws.mode == Fp8InputScaleMode::kPerRow;
  p.out_fp8 = out.fp8;
  p.out_scale = out_scale;
  if (M == 0) return p;  // nothing to launch: pointers may be anything

  detail::check_device_pointer(kFn, "x", x.data);
  detail::check_device_pointer(kFn, "w", w.data);
  detail::check_device_pointer(kFn, out.name, out.data);
  detail::check_device_pointer(kFn, "x_scale", xs.scale);
  detail::check_device_pointer(kFn, "w_scale", ws.scale);
  if (out_scale) detail::check_device_pointer(kFn, "out_scale", out_scale);
  detail::check_no_overlap(kFn, out.name, out.span, "x", span_of_input(x));
  detail::check_no_overlap(kFn, out.name, out.span, "w", span_of_input(w));
  detail::check_no_overlap(kFn, out.name, out.span, "x_scale", span_of_input_scale(xs, M));
  detail::check_no_overlap(kFn, out.name, out.span, "w_scale", span_of_input_scale(ws, 2 * U));
  if (out_scale) {
    detail::check_no_overlap(kFn, out.name, out.span, "out_scale", out_scale_span);
    detail::check_no_overlap(kFn, "out_scale", out_scale_span, "x", span_of_input(x));
    detail::check_no_overlap(kFn, "out_scale", out_scale_span, "w", span_of_input(w));
    detail::check_no_overlap(kFn, "out_scale", out_scale_span, "x_scale", span_of_input_scale(xs, M));
    detail::check_no_overlap(kFn, "out_scale", out_scale_span, "w_scale", span_of_input_scale(ws, 2 * U));
  }
  const detail::DeviceSpec dev = detail::current_device_spec();
  if (!(dev.cc_major == 9 && dev.cc_minor == 0))
    throw Error(cat("blockfuse::", kFn, ": not supported on the current device (compute capability ", dev.cc_major, ".",
                    dev.cc_minor, "); required: compute capability 9.0 (the FP8 kernel is sm_90a code: wgmma/TMA)"));
  return p;
}

void dispatch(GatedUpFp8Params& p, const GatedUpFp8Options& opt, cudaStream_t stream) {
#if defined(BLOCKFUSE_HAS_SM90)
  const detail::DeviceSpec dev = detail::current_device_spec();
  const int c = opt.tile_config >= 0 ? opt.tile_config : choose_gated_up_fp8_sm90_tile_config({p.m, p.k, p.u}, dev);
  const int smem = sm90::smem_bytes_fp8(c, p.out_fp8);
  if (smem > dev.max_smem_per_block)
    throw_arg(kFn, "options.tile_config", cat("= ", c, " needs ", smem, " bytes of shared memory"),
              cat("a config that fits this device's ", dev.max_smem_per_block, " bytes per block"));
  p.sm90_max_swizzle = sm90_choose_swizzle(p.m, p.u, kSm90Fp8TileConfigs[c], dev.sm_count);
  p.sm90_raster = sm90_raster_for(kSm90Fp8TileConfigs[c], opt.sm90_raster);
  sm90::launch_gated_up_fp8(c, p, stream);
#else
  (void)p, (void)opt, (void)stream;  // validate() has thrown already
#endif
}

}  // namespace

void gated_up_fp8(Fp8ConstMatrix x, Fp8InputScale x_scale, Fp8ConstMatrix w, Fp8InputScale w_scale, Matrix out,
                  Activation act, cudaStream_t stream, const GatedUpFp8Options& options) {
  detail::check_matrix_shape(kFn, "out", out);
  if (out.dtype != DType::kBF16)
    throw_arg(kFn, "out", cat("has dtype ", dtype_name(out.dtype)), "bf16 (or the e4m3 overload of gated_up_fp8)");
  detail::check_alignment(kFn, "out", out, 16, 8);
  const OutView ov{"out", out.data, out.rows, out.cols, out.ld, false, detail::span_of(ConstMatrix(out))};
  GatedUpFp8Params p = validate(x, x_scale, w, w_scale, ov, nullptr, Span{}, act, options);
  if (p.m == 0) return;
  dispatch(p, options, stream);
}

void gated_up_fp8(Fp8ConstMatrix x, Fp8InputScale x_scale, Fp8ConstMatrix w, Fp8InputScale w_scale, Fp8Matrix out,
                  Fp8Scale out_scale, Activation act, cudaStream_t stream, const GatedUpFp8Options& options) {
  detail::check_fp8_matrix_shape(kFn, "out", out, 16);
  detail::check_fp8_scale_mode(kFn, "out_scale", out_scale.mode);
  if (out_scale.mode == Fp8ScaleMode::kDynamicPerRow)
    throw_arg(kFn, "out_scale", "has mode kDynamicPerRow, which needs a workspace (a row's amax spans every N tile of "
                                "the row: the GEMM stores h in bf16 and a row kernel quantises it)",
              "the gated_up_fp8 overload with a workspace of gated_up_fp8_workspace_size(M, U, kDynamicPerRow) bytes, "
              "or Fp8ScaleMode::kStaticPerTensor");
  gated_up_fp8(x, x_scale, w, w_scale, out, out_scale, act, nullptr, 0, stream, options);
}

size_t gated_up_fp8_workspace_size(int64_t m, int64_t u, Fp8ScaleMode out_scale_mode) {
  constexpr const char* fn = "gated_up_fp8_workspace_size";
  if (m < 0) throw_arg(fn, "m", cat("= ", m), "m >= 0");
  if (u < 0) throw_arg(fn, "u", cat("= ", u), "u >= 0");
  detail::check_fp8_scale_mode(fn, "out_scale_mode", out_scale_mode);
  if (out_scale_mode != Fp8ScaleMode::kDynamicPerRow || m == 0 || u == 0) return 0;
  if (m > (int64_t{1} << 40) / u) throw_arg(fn, "m", cat("= ", m, " with u = ", u), "m * u < 2^40");
  return static_cast<size_t>((m * u * 2 + 255) / 256 * 256);
}

void gated_up_fp8(Fp8ConstMatrix x, Fp8InputScale x_scale, Fp8ConstMatrix w, Fp8InputScale w_scale, Fp8Matrix out,
                  Fp8Scale out_scale, Activation act, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                  const GatedUpFp8Options& options) {
  detail::check_fp8_matrix_shape(kFn, "out", out, 16);
  detail::check_fp8_scale_mode(kFn, "out_scale", out_scale.mode);
  detail::check_fp8_scale_pointer(kFn, "out_scale", out_scale, out.rows, /*null_ok=*/false);
  const bool dynamic = out_scale.mode == Fp8ScaleMode::kDynamicPerRow;
  const int64_t M = out.rows, U = out.cols;
  // The workspace's size and alignment first (no CUDA call needed); where it lives after validate().
  const size_t need = dynamic ? gated_up_fp8_workspace_size(M, U, out_scale.mode) : 0;
  if (need > 0) {
    if (workspace == nullptr)
      throw_arg(kFn, "workspace", "is null",
                cat("a device buffer of gated_up_fp8_workspace_size(M, U, kDynamicPerRow) = ", need,
                    " bytes for the dynamic per-row e4m3 output"));
    if (workspace_bytes < need)
      throw_arg(kFn, "workspace", cat("has ", workspace_bytes, " bytes"),
                cat("at least gated_up_fp8_workspace_size(M, U, kDynamicPerRow) = ", need, " bytes (h in bf16: M = ", M,
                    ", U = ", U, ")"));
    detail::check_pointer_alignment(kFn, "workspace", workspace, 16);
  }
  const OutView ov{"out", out.data, out.rows, out.cols, out.ld, true, detail::span_of(out)};
  GatedUpFp8Params p =
      validate(x, x_scale, w, w_scale, ov, out_scale.scale, detail::span_of(out_scale, M), act, options);
  if (p.m == 0) return;  // nothing to launch: pointers, the workspace's included, may be anything
  if (!dynamic) {
    dispatch(p, options, stream);
    return;
  }
  // kDynamicPerRow: the GEMM's bf16 output goes to the workspace ([M, U], row stride U), then the row
  // kernel quantises it into out and writes the scales.
  detail::check_device_pointer(kFn, "workspace", workspace);
  const Span ws_span = detail::span_of_bytes(workspace, int64_t(need));
  detail::check_no_overlap(kFn, "workspace", ws_span, "x", span_of_input(x));
  detail::check_no_overlap(kFn, "workspace", ws_span, "w", span_of_input(w));
  detail::check_no_overlap(kFn, "workspace", ws_span, "x_scale", span_of_input_scale(x_scale, M));
  detail::check_no_overlap(kFn, "workspace", ws_span, "w_scale", span_of_input_scale(w_scale, 2 * U));
  detail::check_no_overlap(kFn, "workspace", ws_span, "out", detail::span_of(out));
  detail::check_no_overlap(kFn, "workspace", ws_span, "out_scale", detail::span_of(out_scale, M));
  p.out = workspace;
  p.ldo = U;
  p.out_fp8 = false;
  p.out_scale = nullptr;
  dispatch(p, options, stream);
  detail::launch_rowwise_fp8(workspace, U, out.data, out.ld, M, U / 8, out_scale.scale, stream);
}

}  // namespace blockfuse
