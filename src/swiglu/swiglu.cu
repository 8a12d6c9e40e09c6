// The standalone gated activation: out[M, U] = act(gate) ⊙ up from a [M, 2U] input, stacked or
// interleaved, to bf16/fp16 (swiglu) or FP8 e4m3 (swiglu_fp8). Memory-bound: 16-byte loads, one pass,
// fp32 math, one rounding. The kernels are in kernels.cuh: an elementwise grid-stride kernel for the
// 16-bit and the static-scale FP8 outputs, a block-per-row kernel for the dynamic per-row scale.
#include "blockfuse/swiglu.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"
#include "swiglu/config.h"
#include "swiglu/kernels.cuh"
#include "swiglu/validate.h"

namespace blockfuse {

const char* layout_name(GateUpLayout l) {
  switch (l) {
    case GateUpLayout::kStacked: return "stacked";
    case GateUpLayout::kInterleaved: return "interleaved";
  }
  return "unknown";
}

namespace {

using swiglu_detail::SwigluElementwiseOutput;

// Whether this device may launch the family's kernels with PDL (common/launch.h: pdl_launchable;
// every kernel of the family is compiled for the same architectures, so one stands for all).
bool pdl_path_available() {
  static detail::PerDeviceCache<bool> cache;
  return detail::pdl_launchable(
      cache, reinterpret_cast<const void*>(
                 swiglu_detail::swiglu_elementwise_kernel<__nv_bfloat16, false, SwigluElementwiseOutput::k16Bit, 1>));
}

// Elementwise kernel: the grid config.h's swiglu_elementwise_config picks.
template <class T, SwigluElementwiseOutput kOut>
void launch_elementwise(const ConstMatrix& in, void* out, int64_t ldo, int64_t rows, int64_t u, Activation act,
                        GateUpLayout layout, const float* scale, cudaStream_t stream) {
  using namespace swiglu_detail;
  const detail::SwigluElementwiseConfig cfg = detail::swiglu_elementwise_config(rows * (u / 8));
  auto* ip = static_cast<const T*>(in.data);
  const bool il = layout == GateUpLayout::kInterleaved;
  const bool pdl = detail::pdl_rows(rows) && pdl_path_available();
  auto go = [&](auto kernel, unsigned blocks, int threads) {
    detail::launch_kernel(kernel, dim3(blocks), dim3(threads), 0, stream, dim3(1, 1, 1), pdl, ip, in.ld, out, ldo, rows,
                          u, int(act), scale);
  };
  const unsigned blocks = unsigned(cfg.blocks);
  if (il)
    go(swiglu_elementwise_kernel<T, true, kOut, 1>, blocks, cfg.threads);
  else
    go(swiglu_elementwise_kernel<T, false, kOut, 1>, blocks, cfg.threads);
  BF_CHECK_LAUNCH();
}

// Row kernel: the shape swiglu_fp8_row_config picks (config.h); one block per row up to the rows
// that are resident at once, times a few waves — or, staging the next row, the resident blocks only.
template <class T, bool kIl, int V, swiglu_detail::SwigluRowStage kStage, int kMinBlocks = 1>
void launch_rowwise_k(const ConstMatrix& in, const Fp8Matrix& out, float* scale, Activation act,
                      const detail::SwigluRowConfig& cfg, cudaStream_t stream) {
  using namespace swiglu_detail;
  auto kernel = swiglu_fp8_rowwise_kernel<T, kIl, V, kStage, kMinBlocks>;
  if constexpr (kStage != SwigluRowStage::kRegisters) {
    // Up to kSwigluMaxDynamicSmem (config.h keeps every shape within it); set once per instantiation.
    // Three blocks per SM need the whole carveout for shared memory (3 x 64 KB at U = 16384).
    static const bool opted_in = [&] {
      BF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, detail::kSwigluMaxDynamicSmem));
      if (kMinBlocks > 1)
        BF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared));
      return true;
    }();
    (void)opted_in;
  }
  const int sms = detail::current_device_spec().sm_count;
  const int64_t grid = kStage == SwigluRowStage::kSharedNext
                           ? int64_t(sms) * detail::swiglu_row_blocks_per_sm(cfg.threads, cfg.smem_bytes)
                           : int64_t(sms) * std::max(1, 2048 / cfg.threads) * 8;
  const int64_t blocks = std::min<int64_t>(out.rows, grid);
  detail::launch_kernel(kernel, dim3(unsigned(blocks)), dim3(cfg.threads), cfg.smem_bytes, stream, dim3(1, 1, 1),
                        detail::pdl_rows(out.rows) && pdl_path_available(), static_cast<const T*>(in.data), in.ld, static_cast<uint8_t*>(out.data),
                        out.ld, out.rows, out.cols, int(act), scale);
  BF_CHECK_LAUNCH();
}

template <class T, bool kIl>
void launch_rowwise_l(const ConstMatrix& in, const Fp8Matrix& out, float* scale, Activation act,
                      const detail::SwigluRowConfig& cfg, cudaStream_t stream) {
  using swiglu_detail::SwigluRowStage;
  if (cfg.v == 2)
    launch_rowwise_k<T, kIl, 2, SwigluRowStage::kRegisters>(in, out, scale, act, cfg, stream);
  else if (cfg.stage == 1 && cfg.min_blocks == 3)
    launch_rowwise_k<T, kIl, 4, SwigluRowStage::kShared, 3>(in, out, scale, act, cfg, stream);
  else if (cfg.stage == 2)
    launch_rowwise_k<T, kIl, 4, SwigluRowStage::kSharedNext>(in, out, scale, act, cfg, stream);
  else
    // stage 1, or 0: rows past U = 32768, two passes from global memory (no shared memory used)
    launch_rowwise_k<T, kIl, 4, SwigluRowStage::kShared>(in, out, scale, act, cfg, stream);
}

// The cluster row kernel (kClusterTwo / Four / Eight): cfg.cluster CTAs per row, one row per cluster up to the
// clusters resident at once times a few waves, a grid-stride loop by clusters beyond.
template <class T, bool kIl>
void launch_row_cluster(const ConstMatrix& in, const Fp8Matrix& out, float* scale, Activation act,
                        const detail::SwigluRowConfig& cfg, cudaStream_t stream) {
  const int sms = detail::current_device_spec().sm_count;
  const int64_t clusters = std::min<int64_t>(out.rows, int64_t(std::max(1, sms / cfg.cluster)) * std::max(1, 2048 / cfg.threads) * 8);
  detail::launch_kernel(swiglu_detail::swiglu_fp8_row_cluster_kernel<T, kIl, 2>, dim3(unsigned(clusters * cfg.cluster)),
                        dim3(cfg.threads), 0, stream, dim3(unsigned(cfg.cluster), 1, 1),
                        detail::pdl_rows(out.rows) && pdl_path_available(), static_cast<const T*>(in.data), in.ld,
                        static_cast<uint8_t*>(out.data), out.ld, out.rows, out.cols, int(act), scale);
  BF_CHECK_LAUNCH();
}

// Whether the cluster row kernel may run here: sm_90+ with sm_90 code loaded for it (a build for
// sm_80 only runs on a Hopper through PTX, where the kernel body is a trap).
bool cluster_path_available() {
  static detail::PerDeviceCache<bool> cache;
  return detail::sm90_code_loaded(
      cache, reinterpret_cast<const void*>(swiglu_detail::swiglu_fp8_row_cluster_kernel<__nv_bfloat16, false, 2>));
}

template <class T>
void launch_rowwise(const ConstMatrix& in, const Fp8Matrix& out, float* scale, Activation act, GateUpLayout layout,
                    detail::SwigluRowRule chosen, cudaStream_t stream) {
  const int64_t chunks = out.cols / 8;
  const detail::SwigluRowRule rule =
      detail::resolve_swiglu_fp8_row_rule(chosen, out.rows, chunks, cluster_path_available());
  const detail::SwigluRowConfig cfg = detail::swiglu_fp8_row_config(chunks, rule);
  if (cfg.cluster > 1) {
    if (layout == GateUpLayout::kInterleaved)
      launch_row_cluster<T, true>(in, out, scale, act, cfg, stream);
    else
      launch_row_cluster<T, false>(in, out, scale, act, cfg, stream);
    return;
  }
  if (layout == GateUpLayout::kInterleaved)
    launch_rowwise_l<T, true>(in, out, scale, act, cfg, stream);
  else
    launch_rowwise_l<T, false>(in, out, scale, act, cfg, stream);
}

}  // namespace

namespace detail {

void check_swiglu_codes_and_input(const char* fn, const ConstMatrix& gate_up, Activation act, GateUpLayout layout) {
  if (act != Activation::kSiLU && act != Activation::kGeluTanh)
    throw_arg(fn, "activation", cat("has code ", int(act)), "Activation::kSiLU or Activation::kGeluTanh");
  if (layout != GateUpLayout::kStacked && layout != GateUpLayout::kInterleaved)
    throw_arg(fn, "layout", cat("has code ", int(layout)), "GateUpLayout::kStacked or kInterleaved");
  check_matrix_shape(fn, "gate_up", gate_up);
}

void check_swiglu_shapes(const char* fn, const ConstMatrix& gate_up, int64_t out_rows, int64_t out_cols) {
  if (gate_up.rows != out_rows)
    throw_arg(fn, "out", cat("has rows = ", out_rows), cat("out.rows == gate_up.rows (= ", gate_up.rows, ")"));
  if (gate_up.cols != 2 * out_cols)
    throw_arg(fn, "gate_up", cat("has cols = ", gate_up.cols), cat("gate_up.cols == 2 * out.cols (= ", 2 * out_cols, ")"));
  if (out_cols % 8 != 0)
    throw_arg(fn, "out", cat("has cols U = ", out_cols), "U % 8 == 0 (16-byte vectors)");
  check_alignment(fn, "gate_up", gate_up, 16, 8);
}

}  // namespace detail

void swiglu(ConstMatrix gate_up, Matrix out, Activation act, GateUpLayout layout, cudaStream_t stream) {
  constexpr const char* kFn = "swiglu";
  detail::check_swiglu_codes_and_input(kFn, gate_up, act, layout);
  detail::check_matrix_shape(kFn, "out", out);
  detail::check_same_dtype(kFn, "out", out, "gate_up", gate_up.dtype);
  detail::check_swiglu_shapes(kFn, gate_up, out.rows, out.cols);
  detail::check_alignment(kFn, "out", out, 16, 8);
  if (out.rows == 0 || out.cols == 0) return;
  detail::check_device_matrix(kFn, "gate_up", gate_up);
  detail::check_device_matrix(kFn, "out", out);
  detail::check_no_overlap(kFn, "out", out, "gate_up", gate_up);
  detail::check_compute_capability(kFn, 8, 0);
  if (gate_up.dtype == DType::kBF16)
    launch_elementwise<__nv_bfloat16, SwigluElementwiseOutput::k16Bit>(gate_up, out.data, out.ld, out.rows, out.cols, act, layout, nullptr, stream);
  else
    launch_elementwise<__half, SwigluElementwiseOutput::k16Bit>(gate_up, out.data, out.ld, out.rows, out.cols, act, layout, nullptr, stream);
}

namespace detail {
void swiglu_fp8_tuned(ConstMatrix gate_up, Fp8Matrix out, Fp8Scale scale, Activation act, GateUpLayout layout,
                      const SwigluTuning& tuning, cudaStream_t stream) {
  constexpr const char* kFn = "swiglu_fp8";
  detail::check_swiglu_codes_and_input(kFn, gate_up, act, layout);
  detail::check_fp8_matrix_shape(kFn, "out", out, 8);
  detail::check_swiglu_shapes(kFn, gate_up, out.rows, out.cols);
  detail::check_fp8_scale(kFn, "scale", scale, out.rows, /*on_device=*/false);
  if (out.rows == 0 || out.cols == 0) return;
  detail::check_device_matrix(kFn, "gate_up", gate_up);
  detail::check_device_pointer(kFn, "out", out.data);
  detail::check_fp8_scale(kFn, "scale", scale, out.rows, /*on_device=*/true);
  const detail::Span scales = detail::span_of(scale, out.rows);
  detail::check_no_overlap(kFn, "out", detail::span_of(out), "gate_up", detail::span_of(gate_up));
  detail::check_no_overlap(kFn, "scale", scales, "gate_up", detail::span_of(gate_up));
  detail::check_no_overlap(kFn, "scale", scales, "out", detail::span_of(out));
  detail::check_compute_capability(kFn, 8, 0);
  const bool bf16 = gate_up.dtype == DType::kBF16;
  if (scale.mode == Fp8ScaleMode::kStaticPerTensor) {
    // No row-wide dependency: the elementwise kernel spreads even one row over many SMs.
    if (bf16)
      launch_elementwise<__nv_bfloat16, SwigluElementwiseOutput::kFp8StaticScale>(gate_up, out.data, out.ld, out.rows, out.cols, act, layout, scale.scale, stream);
    else
      launch_elementwise<__half, SwigluElementwiseOutput::kFp8StaticScale>(gate_up, out.data, out.ld, out.rows, out.cols, act, layout, scale.scale, stream);
  } else if (bf16) {
    launch_rowwise<__nv_bfloat16>(gate_up, out, scale.scale, act, layout, tuning.row_rule, stream);
  } else {
    launch_rowwise<__half>(gate_up, out, scale.scale, act, layout, tuning.row_rule, stream);
  }
}
}  // namespace detail

void swiglu_fp8(ConstMatrix gate_up, Fp8Matrix out, Fp8Scale scale, Activation act, GateUpLayout layout,
                cudaStream_t stream) {
  detail::swiglu_fp8_tuned(gate_up, out, scale, act, layout, {}, stream);
}

}  // namespace blockfuse
