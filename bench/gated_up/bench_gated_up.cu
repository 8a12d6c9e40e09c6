// `blockfuse bench gated-up`: the fused gated up-projection against what a user runs today.
//   (a) cuBLAS GEMM  x[M,K] · W[2U,K]ᵀ -> C[M,2U]          (the stacked [gate; up] weight a user has)
//   (b) (a) + blockfuse::swiglu(C, stacked) -> h[M,U]      (the unfused pipeline, timed as one region)
//   (c) blockfuse::gated_up(x, W_interleaved) -> h[M,U]    (fused: C never exists; on sm90 with the
//       workspace of gated_up_workspace_size(M, K, U, -1, options), as the torch binding passes it, so
//       without --tile-config the heuristic's stream-K row runs where it picks one)
// All three are charged FLOPs = 2·M·K·2U, so (b)'s figure is its effective rate. CUDA events around
// each call, warm-up first, the median of --reps repetitions, the three interleaved (--order); x is rotated over enough copies to
// span 3x L2 (the weights, >= 235 MB for every model here, already dwarf L2). Inputs are random,
// never zeros. Before a point is timed, the fused output and (b)'s output are checked against the
// fp32 cuBLAS reference on the first and last 256 rows; any failure makes the command exit 1.
//
// Output: a table on stdout, progress on stderr, and with --json FILE one self-contained object per
// row (model, shape, dtype, activation, kernel and tile, ms and TFLOP/s of a/b/c, ratios, activation
// bytes, verification) plus the run's device, date and ceilings — the rows scripts/gpu-check
// collects into its GPU evidence file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "blockfuse/blockfuse.h"
#include "harness.h"
#include "common/device.h"
#include "gated_up/params.h"
#include "gated_up/tile_configs_sm80.h"
#include "gated_up/tile_configs_sm90.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

struct Model {
  const char* key;   // --models name
  const char* name;  // as printed
  int64_t k, u;
  Activation act;
};
// The gated-MLP shapes of the models blockfuse targets.
const Model kModels[] = {
    {"8b", "Llama-3 8B", 4096, 14336, Activation::kSiLU},
    {"70b", "Llama-3 70B", 8192, 28672, Activation::kSiLU},
    {"405b", "Llama-3.1 405B", 16384, 53248, Activation::kSiLU},
    {"gemma27b", "Gemma-2 27B", 4608, 36864, Activation::kGeluTanh},
    {"qwen2-7b", "Qwen2 7B", 3584, 18944, Activation::kSiLU},
    {"qwen2-72b", "Qwen2 72B", 8192, 29568, Activation::kSiLU},
    {"mistral7b", "Mistral 7B", 4096, 14336, Activation::kSiLU},  // Llama-3 8B's MLP shape
};

// Checks rows [0, 256) and [M - 256, M) of `h` (fewer when M < 512) against the fp32 reference
// act(x·w_gateᵀ)·(x·w_upᵀ), per element and in relative L2 (testing::compare).
Check verify_rows(ConstMatrix x, ConstMatrix w_inter, ConstMatrix h, Activation act, const testing::Tolerance& tol,
                  cudaStream_t s, int64_t* rows_checked) {
  Check v;
  const int64_t M = x.rows, U = h.cols;
  const int64_t r0 = std::min<int64_t>(M, 256), r1 = std::min<int64_t>(M - r0, 256);
  testing::DeviceBuffer<float> ref(size_t(std::max<int64_t>(r0, 1)) * size_t(U));
  const size_t es = dtype_size(x.dtype);
  *rows_checked = 0;
  for (int part = 0; part < 2; ++part) {
    const int64_t first = part == 0 ? 0 : M - r1, rows = part == 0 ? r0 : r1;
    if (rows == 0) continue;
    const ConstMatrix xs{static_cast<const char*>(x.data) + first * x.ld * es, x.dtype, rows, x.cols, x.ld};
    const ConstMatrix hs{static_cast<const char*>(h.data) + first * h.ld * es, h.dtype, rows, h.cols, h.ld};
    testing::gated_up_reference_gpu(xs, w_inter, ref.data(), U, act, s);
    v += to_check(testing::compare(hs, ref.data(), U, tol, s), 1e30, first);
    *rows_checked += rows;
  }
  if (v.rel_l2 > 1e-2) v.fail("relative L2 error " + fmt(v.rel_l2, 5) + " > 1e-2");
  return v;
}

std::string tile_string(int cfg, bool sm90 = false) {
  if (sm90) {
    const Sm90TileConfigRow& r = kSm90TileConfigs[cfg];
    return "sm90 " + std::to_string(r.bm) + "x" + std::to_string(r.bn) + "x" + std::to_string(r.bk) + (r.pingpong ? " pingpong" : r.split_n ? " coopN" : " coop") +
           " c" + std::to_string(r.cluster_m) + "x" + std::to_string(r.cluster_n);
  }
  const GatedUpTileConfig t = gated_up_tile_config(cfg);
  return std::to_string(t.block_m) + "x" + std::to_string(t.block_n) + "x" + std::to_string(t.block_k) + " s" +
         std::to_string(t.stages) + " w" + std::to_string(t.warps_m) + "x" + std::to_string(t.warps_n);
}

class GatedUpBench final : public BenchCommand {
  std::vector<std::string> models_ = {"8b", "70b", "405b", "gemma27b"};
  std::vector<int64_t> tokens_ = {512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
  std::string dtype_ = "bf16", kernel_ = "auto", raster_ = "auto";
  int tile_config_ = -1;

  bool compares_variants() const override { return true; }
  void options(Options& o) override {
    o.about("TFLOP/s of (a) cuBLAS GEMM into [M, 2U], (b) (a) + blockfuse::swiglu (the unfused pipeline), (c) the fused "
            "blockfuse::gated_up; ratios c/a, c/b; activation bytes each allocates. A point that does not fit free "
            "device memory is skipped, saying so.");
    std::vector<std::string> keys;
    for (const auto& md : kModels) keys.push_back(md.key);
    o.words("--models", models_, keys, "models", std::vector<std::string>{"8b", "70b"});
    o.ints("--tokens", tokens_, 1, int64_t{1} << 30, "token counts M", std::vector<int64_t>{1024, 4096});
    o.choice("--dtype", dtype_, {"bf16", "fp16"}, "element type");
    o.choice("--kernel", kernel_, {"auto", "sm80", "sm90", "decode"},
             "which fused kernel (auto = decode up to 32 rows, above sm90 on compute capability 9.0 when built, else sm80)");
    o.integer("--tile-config", tile_config_, -1, 1000, "force GatedUpOptions::tile_config (-1: the heuristic)");
    o.choice("--raster", raster_, {"auto", "m", "n"},
             "force GatedUpOptions::sm90_raster: the sm90 kernel's tile order along M or N (auto: the tile row's); "
             "points another kernel runs are skipped");
  }

  void run(Bench& b) override {
    if (kernel_ == "sm90" && !gated_up_has_sm90()) throw Error("--kernel sm90: this build has no sm90a kernel");
    if (kernel_ == "decode" && tile_config_ >= 0) throw Error("--tile-config: the decode kernel has no tile table (-1 only)");
    if (raster_ != "auto" && (kernel_ == "sm80" || kernel_ == "decode"))
      throw Error("--raster " + raster_ + ": only the sm90 kernel takes a raster (--kernel " + kernel_ + ")");
    const int n_cfg = kernel_ == "sm90" ? kNumSm90TileConfigs : gated_up_num_tile_configs();
    if (tile_config_ >= n_cfg)
      throw Error("--tile-config " + std::to_string(tile_config_) + ": required -1 (heuristic) or 0.." + std::to_string(n_cfg - 1));
    const DType dt = dtype_ == "bf16" ? DType::kBF16 : DType::kFP16;
    const double matrix = b.matrix_tflops(), copy = b.copy_gbs();
    b.title("blockfuse bench gated-up — " + b.device().name + " (cc " + b.device().cc + "), " + dtype_ +
            "; TFLOP/s = 2·M·K·2U / median of " + std::to_string(b.reps()) + " (after " + std::to_string(b.warmup()) +
            " warm-up)");
    b.title("a = cuBLAS GEMM into [M, 2U]; b = a + blockfuse::swiglu; c = fused gated_up. act MiB = activation bytes each allocates.");
    if (matrix > 0)
      b.title("ceilings this run: cuBLAS 8192^3 bf16 " + fmt(matrix, 0) + " TFLOP/s, device copy " + fmt(copy, 0) +
              " GB/s; c %ceil = c / matrix ceiling; c %copy = weight bytes / c's time / copy (the decode figure)");
    b.columns({"model", "M", "a cuBLAS", "b +swiglu", "c fused", "c/a", "c/b", "c %ceil", "c us", "c %copy", "act MiB a/b/c", "tile",
               "verified"});
    b.info()["dtype"] = dtype_;
    b.info()["raster"] = raster_;
    for (const auto& key : models_)
      for (const auto& md : kModels)
        if (key == md.key) model(b, md, dt);
  }

  void model(Bench& b, const Model& md, DType dt) {
    using testing::DeviceBuffer;
    const cudaStream_t s = b.stream();
    const int64_t K = md.k, U = md.u;
    const size_t es = dtype_size(dt), w_elems = size_t(2 * U) * size_t(K);
    if (!b.fits(2 * es * w_elems, std::string(md.name) + " (two weight copies)")) return;
    // The unfused user holds the stacked [gate; up] weight; the fused path its interleaved copy.
    DeviceBuffer<uint16_t> w_stacked(w_elems), w_inter(w_elems);
    const float wb = 1.0f / std::sqrt(float(K));  // nn.Linear's default init range
    testing::fill_uniform(make_matrix(w_stacked.data(), dt, 2 * U, K), -wb, wb, 7 + uint64_t(K), s);
    interleave_stacked_gate_up(make_matrix(static_cast<const void*>(w_stacked.data()), dt, 2 * U, K),
                               make_matrix(w_inter.data(), dt, 2 * U, K), s);
    const ConstMatrix W = make_matrix(static_cast<const void*>(w_inter.data()), dt, 2 * U, K);
    const detail::DeviceSpec spec = detail::current_device_spec();
    // bf16 keeps 8 significand bits: one output rounding is <= 2^-9 relative, so 2 roundings leave
    // room for fp32 accumulation-order differences; atol covers outputs near zero (typical |h| here
    // is ~0.05, so atol is 0.2 % (bf16) / 0.04 % (fp16) of it).
    const testing::Tolerance tol = testing::tolerance(dt, 2, dt == DType::kBF16 ? 1e-4 : 2e-5);

    for (int64_t M : tokens_) {
      const size_t x_elems = size_t(M) * size_t(K), c_elems = size_t(M) * size_t(2 * U), h_elems = size_t(M) * size_t(U);
      const int sets = rotation_sets(int64_t(es * x_elems), 16);
      // x copies, C, two outputs, the reference's fp32 [256, 2U] workspace and [256, U] result.
      const std::string point = std::string(md.name) + " M=" + std::to_string(M);
      if (!b.fits(es * (size_t(sets) * x_elems + c_elems + 2 * h_elems) + sizeof(float) * 256 * 3 * size_t(U), point))
        continue;
          // auto = what gated_up's kAuto runs (choose_gated_up_kernel): the decode kernel up to 32 rows,
      // above sm90 on compute capability 9.0 when built, else sm80.
      const GatedUpKernel kern = kernel_ == "sm80"     ? GatedUpKernel::kSm80
                                 : kernel_ == "sm90"   ? GatedUpKernel::kSm90
                                 : kernel_ == "decode" ? GatedUpKernel::kDecode
                                                       : choose_gated_up_kernel(M, tile_config_, gated_up_has_sm90(), spec.cc_major, spec.cc_minor);
      const bool use90 = kern == GatedUpKernel::kSm90, decode = kern == GatedUpKernel::kDecode;
      if (decode && M > kDecodeGemmMaxM) {
        b.log("%s: --kernel decode takes M <= %ld; skipped", point.c_str(), long(kDecodeGemmMaxM));
        continue;
      }
      if (raster_ != "auto" && !use90) {
        b.log("%s: --raster %s takes the sm90 kernel, and %s runs here; skipped", point.c_str(), raster_.c_str(),
              kernel_name(kern));
        continue;
      }
      GatedUpOptions opt;
      opt.tile_config = tile_config_;
      opt.kernel = kern;
      opt.sm90_raster = raster_ == "m" ? Sm90Raster::kAlongM : raster_ == "n" ? Sm90Raster::kAlongN : Sm90Raster::kAuto;
      // A workspace wherever the sm90 kernel runs, sized by the options overload: a forced stream-K
      // row's, or (the heuristic, no --tile-config) the stream-K row's where the heuristic with a
      // workspace picks it — what a caller that passes one (the torch binding) runs.
      const size_t ws_bytes = use90 ? gated_up_workspace_size(M, K, U, -1, opt) : 0;
      // The heuristic's rows without a workspace and with gated_up_workspace_size(M, K, U, -1, {})
      // bytes (the same on sm80 and decode). Without --tile-config the latter runs: ws_bytes holds it.
      const int heur_cfg = decode ? -1
                           : use90 ? choose_gated_up_sm90_tile_config({M, K, U}, spec)
                                   : choose_gated_up_sm80_tile_config({M, K, U}, spec);
      const int ws_heur_cfg = use90 ? choose_gated_up_sm90_tile_config({M, K, U}, spec, /*with_workspace=*/true) : heur_cfg;
      const int cfg = decode || tile_config_ >= 0 ? tile_config_ : ws_heur_cfg;
      const std::string tile = decode ? "decode split 1" : tile_string(cfg, use90);
      b.log("%s K=%ld U=%ld %s tile %d (%s), %d x-copies: verifying...", point.c_str(), long(K), long(U),
            activation_name(md.act), cfg, tile.c_str(), sets);
      std::vector<DeviceBuffer<uint16_t>> xs;
      for (int i = 0; i < sets; ++i) {
        xs.emplace_back(x_elems);
        testing::fill_uniform(make_matrix(xs.back().data(), dt, M, K), -1.f, 1.f, 1000003ull * uint64_t(M) + uint64_t(i), s);
      }
      DeviceBuffer<uint16_t> c(c_elems), hb(h_elems), hf(h_elems);
      auto X = [&](int i) { return make_matrix(static_cast<const void*>(xs[size_t(i % sets)].data()), dt, M, K); };
      auto gemm = [&](int i) { b.linear(xs[size_t(i % sets)].data(), w_stacked.data(), c.data(), M, 2 * U, K, dt, dt == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F); };
      auto unfused = [&](int i) {
        gemm(i);
        swiglu(make_matrix(static_cast<const void*>(c.data()), dt, M, 2 * U), make_matrix(hb.data(), dt, M, U), md.act,
               GateUpLayout::kStacked, s);
      };
      DeviceBuffer<unsigned char> ws(ws_bytes > 0 ? ws_bytes : 16);
      if (ws_bytes > 0) BENCH_CUDA(cudaMemsetAsync(ws.data(), 0, ws_bytes, s));
      auto fused = [&](int i) {
        if (ws_bytes > 0)
          gated_up(X(i), W, make_matrix(hf.data(), dt, M, U), md.act, ws.data(), ws_bytes, s, opt);
        else
          gated_up(X(i), W, make_matrix(hf.data(), dt, M, U), md.act, s, opt);
      };

      // Verify both pipelines first, outputs poisoned with NaN so an unwritten element shows.
      testing::fill_bits(make_matrix(hf.data(), dt, M, U), testing::nan_bits(dt), s);
      testing::fill_bits(make_matrix(hb.data(), dt, M, U), testing::nan_bits(dt), s);
      fused(0);
      unfused(0);
      int64_t rows_checked = 0, rows_b = 0;
      const Check vf = verify_rows(X(0), W, make_matrix(static_cast<const void*>(hf.data()), dt, M, U), md.act, tol, s, &rows_checked);
      // (b) rounds C to 16 bits before the gate (two more roundings than (c)): a 4x wider band.
      const Check vb = verify_rows(X(0), W, make_matrix(static_cast<const void*>(hb.data()), dt, M, U), md.act,
                                   testing::Tolerance{tol.atol, 4 * tol.rtol}, s, &rows_b);
      const bool ok = b.verify(point + " (c fused)", vf) & b.verify(point + " (b unfused)", vb);

      const std::vector<Timing> t = b.time_all({gemm, unfused, fused}, Method::events());
      const Timing &ta = t[0], &tb = t[1], &tc = t[2];
      const double flops = 2.0 * double(M) * double(K) * 2.0 * double(U);
      auto tf = [&](const Timing& t) { return flops / (t.median_ms * 1e-3) / 1e12; };
      // GB/s of the weight alone (read once per call): the figure that matters at decode sizes.
      auto w_gbs = [&](const Timing& t) { return double(es * w_elems) / (t.median_ms * 1e-3) / 1e9; };
      const double bytes_a = double(es * c_elems), bytes_b = double(es * (c_elems + h_elems)), bytes_c = double(es * h_elems);
      const double matrix = b.matrix_tflops();
      b.log("%s: a %.1f  b %.1f  c %.1f TFLOP/s  c/a %.3f  c/b %.3f  %s", point.c_str(), tf(ta), tf(tb), tf(tc),
            ta.median_ms / tc.median_ms, tb.median_ms / tc.median_ms, ok ? "verified" : "VERIFY FAILED");
      auto r = b.row({md.name, std::to_string(M), fmt(tf(ta)), fmt(tf(tb)), fmt(tf(tc)), fmt(ta.median_ms / tc.median_ms, 3),
                      fmt(tb.median_ms / tc.median_ms, 3), b.pct_of_matrix(tf(tc)), fmt(tc.median_ms * 1e3, 1),
                      fmt(100 * w_gbs(tc) / b.copy_gbs(), 1),
                      fmt(bytes_a / 1048576, 0) + "/" + fmt(bytes_b / 1048576, 0) + "/" + fmt(bytes_c / 1048576, 0),
                      decode ? std::string("decode") : (use90 ? "sm90:" : "sm80:") + std::to_string(cfg), ok ? "yes" : "NO"});
      r.set("model", md.name).set("M", M).set("K", K).set("U", U).set("dtype", dtype_)
          .set("activation", activation_name(md.act))
          .set("kernel", std::string("blockfuse::gated_up ") + kernel_name(kern))
          .set("tile_config", cfg).set("tile_config_forced", tile_config_ >= 0).set("tile", tile)
          .set("heuristic_tile_config", heur_cfg)  // the heuristic's row without a workspace
          .set("workspace_tile_config", ws_heur_cfg)  // ... with one (the row that ran unless forced)
          .set("workspace_bytes", int64_t(ws_bytes))
          .set("baseline_gemm", "cublasGemmEx CUBLAS_COMPUTE_32F CUBLAS_GEMM_DEFAULT, 32 MiB workspace, stacked weight")
          .set("baseline_swiglu", "blockfuse::swiglu (stacked)")
          .set("flops", flops)
          .set("a_cublas_ms", ta.median_ms).set("b_unfused_ms", tb.median_ms).set("c_fused_ms", tc.median_ms)
          .set("a_cublas_min_ms", ta.min_ms).set("b_unfused_min_ms", tb.min_ms).set("c_fused_min_ms", tc.min_ms)
          .set("c_fused_us", tc.median_ms * 1e3).set("c_weight_gbs", w_gbs(tc)).set("c_weight_frac_of_copy", w_gbs(tc) / b.copy_gbs())
          .set("a_cublas_tflops", tf(ta)).set("b_unfused_tflops", tf(tb)).set("c_fused_tflops", tf(tc))
          .set("c_over_a", ta.median_ms / tc.median_ms).set("c_over_b", tb.median_ms / tc.median_ms)
          .set("act_bytes_a", int64_t(bytes_a)).set("act_bytes_b", int64_t(bytes_b)).set("act_bytes_c", int64_t(bytes_c))
          .set("act_bytes_b_over_c", bytes_b / bytes_c)
          .set("reps", b.reps()).set("warmup", b.warmup()).set("x_rotation_sets", sets)
          .set("verified", ok).set("verified_rows", rows_checked)
          .set("fused_rel_l2", vf.rel_l2).set("fused_max_abs_diff", vf.max_abs).set("unfused_rel_l2", vb.rel_l2);
      if (matrix > 0)
        r.set("matrix_ceiling_tflops", matrix).set("copy_ceiling_gbs", b.copy_gbs())
            .set("c_frac_of_matrix_ceiling", tf(tc) / matrix).set("a_frac_of_matrix_ceiling", tf(ta) / matrix);
      if (!ok) r.set("verify_error", vf.what + vb.what);
    }
  }
};

BLOCKFUSE_COMMAND(GatedUpBench, "bench gated-up", "TFLOP/s of the fused gated up-projection vs cuBLAS GEMM (+ swiglu)");

}  // namespace
}  // namespace blockfuse::bench
