// Fused residual add + RMSNorm (blockfuse/add_rmsnorm.h): the launcher and the entry points.
//
// One block (or, on sm_90, one cluster of blocks) per row, the row held in registers between the
// fp32 reduction and the writes, so global memory is read once and written once — the minimum
// traffic, which is the whole cost of this memory-bound op. Read in this order:
//   params.h                 the kernels' parameters and output kinds
//   config.h                 the launch shape per architecture (pure, CPU-tested)
//   row.cuh                  the per-row steps both kernel shapes share
//   add_rmsnorm_sm80.cuh     one block per row: register path (H <= 32768) and loop path
//   add_rmsnorm_sm90.cuh     a thread-block cluster per row (few rows of 8192 <= H <= 131072)
//   validate.cpp             the argument checks
//   this file                shape -> kernel instantiation, launch, entry points
//   reference.cpp            the CPU reference
#include "blockfuse/add_rmsnorm.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "add_rmsnorm/add_rmsnorm_sm80.cuh"
#include "add_rmsnorm/add_rmsnorm_sm90.cuh"
#include "add_rmsnorm/config.h"
#include "add_rmsnorm/params.h"
#include "add_rmsnorm/validate.h"
#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"

namespace blockfuse {
namespace {

using add_rmsnorm_detail::add_rmsnorm_cluster;
using add_rmsnorm_detail::add_rmsnorm_loop;
using add_rmsnorm_detail::add_rmsnorm_regs;
using Out = AddRmsNormOutput;

template <class T, int V, Out kOut>
void launch_cluster(const AddRmsNormParams& p, const detail::AddRmsNormConfig& cfg, bool pdl, cudaStream_t stream) {
  // One cluster per row (grid-stride beyond 2^31 - 1 blocks).
  const int64_t clusters = std::min<int64_t>(p.rows, std::numeric_limits<int>::max() / cfg.cluster);
  detail::launch_kernel(add_rmsnorm_cluster<T, V, kOut>, dim3(static_cast<unsigned>(clusters * cfg.cluster)),
                        dim3(static_cast<unsigned>(cfg.threads)), 0, stream, dim3(static_cast<unsigned>(cfg.cluster), 1, 1),
                        pdl, p);
}

// Whether the current device runs the cluster kernels: compute capability >= 9.0 *and* the
// library carries code for them compiled for sm_90+ (a build for sm_80 only runs on a Hopper
// through its compute_80 PTX, where the cluster kernel's body is a trap; ptxVersion is the
// virtual architecture the loaded code was compiled for). Cached per device.
// One answer per device serves both that and PDL (every kernel of the family is compiled for the
// same architectures, so the cluster kernel stands for all).
detail::PerDeviceCache<bool>& sm90_code_cache() {
  static detail::PerDeviceCache<bool> cache;
  return cache;
}
const void* sm90_probe() { return reinterpret_cast<const void*>(add_rmsnorm_cluster<__nv_bfloat16, 2, Out::kDtype>); }
bool cluster_path_available() { return detail::sm90_code_loaded(sm90_code_cache(), sm90_probe()); }

// Whether this device may launch the family's kernels with PDL (common/launch.h: pdl_launchable).
bool pdl_path_available() { return detail::pdl_launchable(sm90_code_cache(), sm90_probe()); }

template <class T, Out kOut>
void launch_shape(const AddRmsNormParams& p, const detail::AddRmsNormConfig& cfg, cudaStream_t stream) {
  const bool pdl = detail::pdl_rows(p.rows) && pdl_path_available();
  if (cfg.cluster > 1) {
    if (cfg.v == 2)
      launch_cluster<T, 2, kOut>(p, cfg, pdl, stream);
    else
      launch_cluster<T, 4, kOut>(p, cfg, pdl, stream);
    BF_CHECK_LAUNCH();
    return;
  }
  // One block per row; beyond 2^31 - 1 rows the blocks loop (grid-stride over rows).
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(p.rows, std::numeric_limits<int>::max()));
  // The weight preload is only chosen for H <= 16384, so V <= 4 (config.h: no V = 8 instance of it).
  auto regs = [&](auto v) {
    constexpr int V = decltype(v)::value;
    if constexpr (V <= 4) {
      if (cfg.preload_w) {
        detail::launch_kernel(add_rmsnorm_regs<T, V, kOut, true>, dim3(blocks), dim3(cfg.threads), 0, stream,
                              dim3(1, 1, 1), pdl, p);
        return;
      }
    }
    if (cfg.streaming_stores) {
      detail::launch_kernel(add_rmsnorm_regs<T, V, kOut, false, true>, dim3(blocks), dim3(cfg.threads), 0, stream,
                            dim3(1, 1, 1), pdl, p);
      return;
    }
    detail::launch_kernel(add_rmsnorm_regs<T, V, kOut>, dim3(blocks), dim3(cfg.threads), 0, stream, dim3(1, 1, 1),
                          pdl, p);
  };
  switch (cfg.v) {
    case 1: regs(std::integral_constant<int, 1>{}); break;
    case 2: regs(std::integral_constant<int, 2>{}); break;
    case 4: regs(std::integral_constant<int, 4>{}); break;
    case 8: regs(std::integral_constant<int, 8>{}); break;
    default:
      detail::launch_kernel(add_rmsnorm_loop<T, kOut>, dim3(blocks), dim3(cfg.threads), 0, stream, dim3(1, 1, 1), pdl, p);
      break;
  }
  BF_CHECK_LAUNCH();
}

template <class T, Out kOut>
void launch(const AddRmsNormParams& p, const detail::AddRmsNormTuning& t, cudaStream_t stream) {
  launch_shape<T, kOut>(p, detail::add_rmsnorm_launch_config(p.h / 8, p.rows, kOut == Out::kFp8DynamicScale, t), stream);
}

template <Out kOut>
void dispatch(DType t, const AddRmsNormParams& p, const detail::AddRmsNormTuning& tuning, cudaStream_t stream) {
  if (t == DType::kBF16)
    launch<__nv_bfloat16, kOut>(p, tuning, stream);
  else
    launch<__half, kOut>(p, tuning, stream);
}

AddRmsNormParams make_params(const ConstMatrix& x, const ConstMatrix& residual, const ConstMatrix& weight,
                             const Matrix& residual_out, void* out, int64_t ldo, float* scale, const RmsNormOptions& opt) {
  AddRmsNormParams p{};
  p.x = x.data;
  p.ldx = x.ld;
  p.res = detail::absent(residual) ? nullptr : residual.data;
  p.ldr = residual.ld;
  p.w = weight.data;
  p.res_out = detail::absent(residual_out) ? nullptr : residual_out.data;
  p.ldro = residual_out.ld;
  p.out = out;
  p.ldo = ldo;
  p.scale = scale;
  p.rows = x.rows;
  p.h = static_cast<int>(x.cols);
  p.eps = opt.eps;
  p.gemma = opt.gemma_one_plus_w;
  return p;
}

}  // namespace

namespace detail {
AddRmsNormConfig add_rmsnorm_launch_config(int nchunks, int64_t rows, bool dynamic_fp8, const AddRmsNormTuning& t) {
  const bool clusters = t.clusters && cluster_path_available();
  const bool preload = add_rmsnorm_preload_weight(rows, nchunks, clusters, t.preload_chunks);
  const AddRmsNormRule rule = t.rule == AddRmsNormRule::kAuto ? add_rmsnorm_auto_rule(nchunks, preload, rows, dynamic_fp8) : t.rule;
  if (preload) {
    AddRmsNormConfig c = add_rmsnorm_config(nchunks, rule);
    c.preload_w = c.v >= 1 && c.v <= 4;  // the kV8 rule's v = 8 (bench and tests only) keeps the weight read late
    return c;
  }
  if (clusters) {
    const AddRmsNormConfig c = add_rmsnorm_config_sm90(nchunks, rule);
    if (add_rmsnorm_clusters_pay(rows, c.cluster, current_device_spec().sm_count)) return c;
  }
  AddRmsNormConfig c = add_rmsnorm_config(nchunks, rule);
  c.streaming_stores = add_rmsnorm_streaming_stores(c.v, rows);
  return c;
}

void add_rmsnorm_tuned(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out, Matrix out,
                       RmsNormOptions opt, const AddRmsNormTuning& tuning, cudaStream_t stream) {
  if (!check_add_rmsnorm_args("add_rmsnorm", x, residual, weight, residual_out, out, opt)) return;
  dispatch<Out::kDtype>(x.dtype, make_params(x, residual, weight, residual_out, out.data, out.ld, nullptr, opt), tuning,
                        stream);
}

void add_rmsnorm_fp8_tuned(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out, Fp8Matrix out,
                           Fp8Scale scale, RmsNormOptions opt, const AddRmsNormTuning& tuning, cudaStream_t stream) {
  if (!check_add_rmsnorm_fp8_args("add_rmsnorm_fp8", x, residual, weight, residual_out, out, scale, opt)) return;
  const AddRmsNormParams p = make_params(x, residual, weight, residual_out, out.data, out.ld, scale.scale, opt);
  if (scale.mode == Fp8ScaleMode::kDynamicPerRow)
    dispatch<Out::kFp8DynamicScale>(x.dtype, p, tuning, stream);
  else
    dispatch<Out::kFp8StaticScale>(x.dtype, p, tuning, stream);
}
}  // namespace detail

void add_rmsnorm(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out, Matrix out,
                 RmsNormOptions opt, cudaStream_t stream) {
  detail::add_rmsnorm_tuned(x, residual, weight, residual_out, out, opt, {}, stream);
}

void add_rmsnorm_fp8(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out, Fp8Matrix out,
                     Fp8Scale scale, RmsNormOptions opt, cudaStream_t stream) {
  detail::add_rmsnorm_fp8_tuned(x, residual, weight, residual_out, out, scale, opt, {}, stream);
}

}  // namespace blockfuse
