// gated_up(): argument validation and kernel/tile dispatch. Nothing is launched until every
// argument has been checked. Read in this order:
//   params.h                         the kernels' parameters
//   tile_configs_sm80.h, heuristic_sm80.cpp   sm80 tile table and its pure heuristic
//   tile_configs_sm90.h, heuristic_sm90.cpp   sm90a tile table, scheduler model, heuristic
//   gated_up_sm80.cuh, launch_sm80*          the portable mma.sync kernel and its launch
//   gated_up_sm90.cuh (kernel type), epilogue_sm90.cuh + gating_sm90.cuh (the gated epilogue
//   collective), launch_*sm90*       the Hopper wgmma/TMA kernel and its launch
//   ../decode_gemm/launch.h          the decode kernel (M <= 32) with its gated epilogue
//   this file                        validation, kernel choice, dispatch
//   reference.cpp                    the CPU reference; weight_layout.cpp the weight interleaving
#include "blockfuse/gated_up.h"

#include <algorithm>
#include <cstdint>

#include "common/check.h"
#include "common/device.h"
#include "decode_gemm/launch.h"
#include "decode_gemm/params.h"
#include "gated_up/launch_sm80.h"
#include "gated_up/params.h"
#include "gated_up/tile_configs_sm80.h"
#include "gated_up/tile_configs_sm90.h"
#if defined(BLOCKFUSE_HAS_SM90)
#include "gated_up/launch_sm90.h"
#endif

namespace blockfuse {

const char* kernel_name(GatedUpKernel k) {
  switch (k) {
    case GatedUpKernel::kAuto: return "auto";
    case GatedUpKernel::kSm80: return "sm80";
    case GatedUpKernel::kSm90: return "sm90";
    case GatedUpKernel::kDecode: return "decode";
  }
  return "unknown";
}

bool gated_up_has_sm90() {
#if defined(BLOCKFUSE_HAS_SM90)
  return true;
#else
  return false;
#endif
}

GatedUpKernel choose_gated_up_kernel(int64_t m, int tile_config, bool has_sm90, int cc_major, int cc_minor) {
  if (m <= kDecodeGemmMaxM && tile_config < 0) return GatedUpKernel::kDecode;
  return has_sm90 && cc_major == 9 && cc_minor == 0 ? GatedUpKernel::kSm90 : GatedUpKernel::kSm80;
}

namespace {

using detail::cat;
using detail::throw_arg;

constexpr const char* kFn = "gated_up";

void validate(const ConstMatrix& x, const ConstMatrix& w, const Matrix& out, Activation act,
              const GatedUpOptions& opt) {
  if (act != Activation::kSiLU && act != Activation::kGeluTanh)
    throw_arg(kFn, "activation", cat("has code ", static_cast<int>(act)), "Activation::kSiLU or Activation::kGeluTanh");
  if (opt.kernel != GatedUpKernel::kAuto && opt.kernel != GatedUpKernel::kSm80 && opt.kernel != GatedUpKernel::kSm90 &&
      opt.kernel != GatedUpKernel::kDecode)
    throw_arg(kFn, "options.kernel", cat("has code ", static_cast<int>(opt.kernel)), "kAuto, kSm80, kSm90 or kDecode");
  if (opt.kernel == GatedUpKernel::kSm90 && !gated_up_has_sm90())
    throw_arg(kFn, "options.kernel", "= kSm90, but this build has no sm90a kernel",
              "a build with 90 in BLOCKFUSE_CUDA_ARCHS (BLOCKFUSE_SM90=AUTO, the default) or BLOCKFUSE_SM90=ON");
  const int n_configs = opt.kernel == GatedUpKernel::kSm90     ? kNumSm90TileConfigs
                        : opt.kernel == GatedUpKernel::kDecode ? 0
                                                               : kNumSm80TileConfigs;
  if (opt.tile_config < -1 || opt.tile_config >= n_configs)
    throw_arg(kFn, "options.tile_config", cat("= ", opt.tile_config),
              cat("-1 (heuristic) or 0 <= tile_config < ", n_configs, " for kernel ", kernel_name(opt.kernel)));
  if (!sm90_raster_valid(opt.sm90_raster))
    throw_arg(kFn, "options.sm90_raster", cat("has code ", static_cast<int>(opt.sm90_raster)), "kAuto, kAlongM or kAlongN");
  if (opt.sm90_raster != Sm90Raster::kAuto && (opt.kernel == GatedUpKernel::kSm80 || opt.kernel == GatedUpKernel::kDecode))
    throw_arg(kFn, "options.sm90_raster", cat("= ", static_cast<int>(opt.sm90_raster), " with options.kernel = ", kernel_name(opt.kernel)),
              "Sm90Raster::kAuto unless the sm90 kernel runs");

  detail::check_matrix_shape(kFn, "x", x);
  detail::check_matrix_shape(kFn, "w", w);
  detail::check_matrix_shape(kFn, "out", out);
  detail::check_same_dtype(kFn, "w", w, "x", x.dtype);
  detail::check_same_dtype(kFn, "out", out, "x", x.dtype);

  const int64_t M = x.rows, K = x.cols, U = out.cols;
  if (w.cols != K)
    throw_arg(kFn, "w", cat("has cols = ", w.cols), cat("w.cols == x.cols (K = ", K, ")"));
  if (out.rows != M)
    throw_arg(kFn, "out", cat("has rows = ", out.rows), cat("out.rows == x.rows (M = ", M, ")"));
  if (w.rows != 2 * U)
    throw_arg(kFn, "w", cat("has rows = ", w.rows),
              cat("w.rows == 2 * out.cols (= ", 2 * U, "): interleaved [up_0; gate_0; up_1; ...]"));
  if (K < 8 || K % 8 != 0)
    throw_arg(kFn, "x", cat("has cols K = ", K), "K >= 8 and K % 8 == 0 (16-byte vector loads)");
  if (U < 8 || U % 8 != 0)
    throw_arg(kFn, "out", cat("has cols U = ", U), "U >= 8 and U % 8 == 0 (16-byte vector stores)");
  if (M > (int64_t{1} << 31) - 1)
    throw_arg(kFn, "x", cat("has rows M = ", M), "M < 2^31");
  if (opt.kernel == GatedUpKernel::kDecode && M > kDecodeGemmMaxM)
    throw_arg(kFn, "x", cat("has rows M = ", M, " with options.kernel = kDecode"),
              cat("M <= ", kDecodeGemmMaxM, " (the decode kernel; kAuto picks a GEMM kernel above)"));
  detail::check_alignment(kFn, "x", x, 16, 8);
  detail::check_alignment(kFn, "w", w, 16, 8);
  detail::check_alignment(kFn, "out", out, 16, 8);
  if (M == 0) return;  // nothing to launch: pointers may be anything
  detail::check_device_matrix(kFn, "x", x);
  detail::check_device_matrix(kFn, "w", w);
  detail::check_device_matrix(kFn, "out", out);
  detail::check_no_overlap(kFn, "out", out, "x", x);
  detail::check_no_overlap(kFn, "out", out, "w", w);
  detail::check_compute_capability(kFn, 8, 0);
}

}  // namespace

void gated_up(ConstMatrix x, ConstMatrix w, Matrix out, Activation act, cudaStream_t stream,
              const GatedUpOptions& options) {
  gated_up(x, w, out, act, nullptr, 0, stream, options);
}

size_t gated_up_workspace_size(int64_t m, int64_t k, int64_t u, int device) {
  constexpr const char* fn = "gated_up_workspace_size";
  if (m < 0) throw_arg(fn, "m", cat("is ", m), "m >= 0");
  if (k < 0 || k % 8 != 0) throw_arg(fn, "k", cat("is ", k), "k >= 0 and k % 8 == 0");
  if (u < 0) throw_arg(fn, "u", cat("is ", u), "u >= 0");
  return decode_gemm_workspace_size(std::min<int64_t>(m, kDecodeGemmMaxM), 2 * u, k, device);
}

namespace {

// Where an sm90 stream-K row's workspace starts: after the decode kernel's region (256-byte aligned),
// so a workspace shared with the decode path keeps the zeroed counters that path relies on. At
// least past the counters' fixed region (decode_gemm/params.h: the same for every shape) even where
// this shape's decode call does not split (region 0: Llama-3 70B, 405B): a workspace shared with
// decode_gemm or gated_up calls of other shapes (the torch binding's) must keep those counters zero;
// the partials after them need not be.
size_t sm90_workspace_offset(int64_t k, int64_t u, int device) {
  const size_t decode = std::max(decode_gemm_workspace_size(kDecodeGemmMaxM, 2 * u, k, device), decode::kCounterBytes);
  return (decode + 255) / 256 * 256;
}

#if defined(BLOCKFUSE_HAS_SM90)
GatedUpParams sm90_shape_params(int64_t m, int64_t k, int64_t u, int config, int sm_count) {
  GatedUpParams p{};
  p.m = m;
  p.k = k;
  p.u = u;
  p.ldx = k;
  p.ldw = k;
  p.ldo = u;
  p.sm90_max_swizzle = sm90_choose_swizzle(m, u, kSm90TileConfigs[config], sm_count);
  p.sm90_raster = sm90_raster_for(kSm90TileConfigs[config], Sm90Raster::kAuto);
  return p;
}

// The heuristic's stream-K row for a call with a workspace (the with-workspace table's, where it has
// one that fits the device's shared memory) and the workspace bytes it needs, decode region
// included; row -1 where the heuristic with a workspace picks no stream-K row. The one place both
// gated_up_workspace_size and gated_up decide it, so the size promised is the size checked.
struct Sm90StreamKPick {
  int row = -1;
  size_t bytes = 0;
};
Sm90StreamKPick sm90_heuristic_stream_k(const GatedUpProblem& p, const detail::DeviceSpec& dev, int device) {
  const int c = choose_gated_up_sm90_tile_config(p, dev, /*with_workspace=*/true);
  if (!kSm90TileConfigs[c].stream_k || sm90::smem_bytes(c) > dev.max_smem_per_block) return {};
  return {c, sm90_workspace_offset(p.k, p.u, device) + sm90::workspace_bytes(c, sm90_shape_params(p.m, p.k, p.u, c, dev.sm_count))};
}
#endif

}  // namespace

size_t gated_up_workspace_size(int64_t m, int64_t k, int64_t u, int device, const GatedUpOptions& options) {
  constexpr const char* fn = "gated_up_workspace_size";
  const size_t base = gated_up_workspace_size(m, k, u, device);
  const bool sm90_row = options.kernel == GatedUpKernel::kSm90 && options.tile_config >= 0;
  if (!sm90_row) {
    // The heuristic with a workspace: room for the stream-K row where it picks it at m rows on
    // `device` (the sm90 path: above the decode kernel's rows, compute capability 9.0).
    const bool heuristic_sm90 = options.tile_config == -1 &&
                                (options.kernel == GatedUpKernel::kAuto || options.kernel == GatedUpKernel::kSm90) &&
                                m > kDecodeGemmMaxM && gated_up_has_sm90();
    if (!heuristic_sm90) return base;
#if defined(BLOCKFUSE_HAS_SM90)
    const detail::DeviceSpec dev = detail::device_spec(device >= 0 ? device : detail::current_device());
    if (!(dev.cc_major == 9 && dev.cc_minor == 0)) return base;
    const Sm90StreamKPick sk = sm90_heuristic_stream_k(GatedUpProblem{m, k, u}, dev, device);
    return sk.row < 0 ? base : std::max(base, sk.bytes);
#else
    return base;
#endif
  }
  if (options.tile_config >= kNumSm90TileConfigs)
    throw_arg(fn, "options.tile_config", cat("= ", options.tile_config),
              cat("0 <= tile_config < ", kNumSm90TileConfigs, " for kernel sm90"));
  if (!kSm90TileConfigs[options.tile_config].stream_k || m == 0) return base;
#if defined(BLOCKFUSE_HAS_SM90)
  const int sms = detail::device_spec(device >= 0 ? device : detail::current_device()).sm_count;
  const size_t need = sm90::workspace_bytes(options.tile_config, sm90_shape_params(m, k, u, options.tile_config, sms));
  return std::max(base, sm90_workspace_offset(k, u, device) + need);
#else
  throw_arg(fn, "options.kernel", "= kSm90 in a library built without the sm90a kernels",
            "a build with BLOCKFUSE_SM90 (architecture 90 in BLOCKFUSE_CUDA_ARCHS)");
#endif
}

void gated_up(ConstMatrix x, ConstMatrix w, Matrix out, Activation act, void* workspace, size_t workspace_bytes,
              cudaStream_t stream, const GatedUpOptions& options) {
  validate(x, w, out, act, options);
  if (x.rows == 0) return;

  const detail::DeviceSpec dev = detail::current_device_spec();
  const GatedUpKernel kernel = options.kernel != GatedUpKernel::kAuto
                                   ? options.kernel
                                   : choose_gated_up_kernel(x.rows, options.tile_config, gated_up_has_sm90(),
                                                            dev.cc_major, dev.cc_minor);
  if (kernel != GatedUpKernel::kSm90 && options.sm90_raster != Sm90Raster::kAuto)
    throw_arg(kFn, "options.sm90_raster", cat("= ", static_cast<int>(options.sm90_raster), ", but this call runs the ",
                                              kernel_name(kernel), " kernel (M = ", x.rows, ")"),
              "Sm90Raster::kAuto unless the sm90 kernel runs (M > 32 on compute capability 9.0, sm90a build)");
  if (kernel == GatedUpKernel::kDecode) {
    const DecodeGemmConfig c = decode::choose_config(x.rows, w.rows, x.cols, dev.sm_count,
                                                     workspace != nullptr ? kDecodeGemmMaxSplitK : 1);
    decode::check_workspace(kFn, x, w, out, workspace, workspace_bytes, c);
    decode::launch(kFn, x, w, out, workspace, c, {true, static_cast<int>(act)}, stream);
    return;
  }

  const GatedUpProblem prob{x.rows, x.cols, out.cols};
  GatedUpParams params{};
  params.x = x.data;
  params.w = w.data;
  params.out = out.data;
  params.m = x.rows;
  params.k = x.cols;
  params.u = out.cols;
  params.ldx = x.ld;
  params.ldw = w.ld;
  params.ldo = out.ld;
  params.act = static_cast<int>(act);
  if (kernel == GatedUpKernel::kSm90 && !(dev.cc_major == 9 && dev.cc_minor == 0))
    throw_arg(kFn, "options.kernel", cat("= kSm90 on a device of compute capability ", dev.cc_major, ".", dev.cc_minor),
              "compute capability 9.0 (sm_90a code: wgmma/TMA)");
#if defined(BLOCKFUSE_HAS_SM90)
  if (kernel == GatedUpKernel::kSm90) {
    int c90 = options.tile_config;
    if (c90 < 0) {
      // With a workspace: the heuristic's stream-K row where it has one and the workspace holds it
      // (16-byte aligned); otherwise, silently, the row chosen without (the heuristic never turns a
      // valid call into an error).
      const bool usable = workspace != nullptr && reinterpret_cast<uintptr_t>(workspace) % 16 == 0;
      const Sm90StreamKPick sk = usable ? sm90_heuristic_stream_k(prob, dev, -1) : Sm90StreamKPick{};
      c90 = sk.row >= 0 && workspace_bytes >= sk.bytes ? sk.row : choose_gated_up_sm90_tile_config(prob, dev);
    }
    if (sm90::smem_bytes(c90) > dev.max_smem_per_block)
      throw_arg(kFn, "options.tile_config", cat("= ", c90, " (sm90) needs ", sm90::smem_bytes(c90), " bytes of shared memory"),
                cat("a config that fits this device's ", dev.max_smem_per_block, " bytes per block"));
    // The scheduler's max swizzle (sm90_choose_swizzle: the largest that adds no more than 1 % tiles and waves).
    params.sm90_max_swizzle = sm90_choose_swizzle(x.rows, out.cols, kSm90TileConfigs[c90], dev.sm_count);
    params.sm90_raster = sm90_raster_for(kSm90TileConfigs[c90], options.sm90_raster);
    const size_t need = sm90::workspace_bytes(c90, params);
    if (need > 0) {  // a stream-K row: its region after the decode kernel's
      const size_t offset = sm90_workspace_offset(x.cols, out.cols, -1), total = offset + need;
      if (workspace == nullptr || workspace_bytes < total)
        throw_arg(kFn, "workspace", cat("is ", workspace == nullptr ? "null" : cat(workspace_bytes, " bytes")),
                  cat(total, " bytes for sm90 tile config ", c90, " (stream-K) at M = ", x.rows,
                      ": gated_up_workspace_size(m, k, u, device, options)"));
      if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
        throw_arg(kFn, "workspace", cat("is at address ", workspace), "a 16-byte-aligned pointer");
      params.sm90_workspace = static_cast<char*>(workspace) + offset;
      params.sm90_workspace_bytes = need;
    }
    sm90::launch_gated_up(x.dtype, c90, params, stream);
    return;
  }
#endif
  const int config = options.tile_config >= 0 ? options.tile_config : choose_gated_up_sm80_tile_config(prob, dev);
  const int smem = tile_config_smem_bytes(kSm80TileConfigs[config]);
  if (smem > dev.max_smem_per_block)
    throw_arg(kFn, "options.tile_config", cat("= ", config, " needs ", smem, " bytes of shared memory"),
              cat("a config that fits this device's ", dev.max_smem_per_block, " bytes per block"));

  params.sm80_raster_group = kSm80RasterGroup;
  if (x.dtype == DType::kBF16)
    sm80::launch_gated_up_bf16(config, params, stream);
  else
    sm80::launch_gated_up_fp16(config, params, stream);
}

}  // namespace blockfuse
