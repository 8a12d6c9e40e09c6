// `blockfuse bench gated-up`: the fused gated up-projection against what a user runs today.
//   (a) cuBLAS GEMM  x[M,K] · W[2U,K]ᵀ -> C[M,2U]          (the stacked [gate; up] weight a user has)
//   (b) (a) + blockfuse::swiglu(C, stacked) -> h[M,U]      (the unfused pipeline, timed as one region)
//   (c) blockfuse::gated_up(x, W_interleaved) -> h[M,U]    (fused: C never exists)
// All three are charged FLOPs = 2·M·K·2U, so (b)'s figure is its effective rate. CUDA events around
// each call, warm-up first, the median of --reps repetitions; x is rotated over enough copies to
// span 3x L2 (the weights, >= 235 MB for every model here, already dwarf L2). Inputs are random,
// never zeros. Before a point is timed, the fused output and (b)'s output are checked against the
// fp32 cuBLAS reference on the first and last 256 rows; any failure makes the command exit 1.
//
// Output: a table on stdout, progress on stderr, and with --json FILE one self-contained object per
// row (model, shape, dtype, activation, kernel and tile, ms and TFLOP/s of a/b/c, ratios, activation
// bytes, verification) plus the run's device, date and ceilings — the rows scripts/gpu-check
// collects into results/gpu/latest.json.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "blockfuse/blockfuse.h"
#include "commands.h"
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
// The gated-MLP shapes of BENCHMARKING.md.
const Model kModels[] = {
    {"8b", "Llama-3 8B", 4096, 14336, Activation::kSiLU},
    {"70b", "Llama-3 70B", 8192, 28672, Activation::kSiLU},
    {"405b", "Llama-3.1 405B", 16384, 53248, Activation::kSiLU},
    {"gemma27b", "Gemma-2 27B", 4608, 36864, Activation::kGeluTanh},
};

#define CUBLAS_OK(expr)                                                                                  \
  do {                                                                                                   \
    const cublasStatus_t s_ = (expr);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                                     \
      throw Error(std::string("cuBLAS status ") + std::to_string(int(s_)) + " in " #expr);              \
  } while (0)

struct Verify {
  bool ok = true;
  double rel_l2 = 0, max_abs = 0;
  int64_t rows = 0;
  std::string what;
};

// Checks rows [0, 256) and [M - 256, M) of `h` (fewer when M < 512) against the fp32 reference
// act(x·w_gateᵀ)·(x·w_upᵀ). Tolerance |h - ref| <= atol + rtol·|ref| per element, plus a
// relative-L2 bound that catches a systematically wrong result hiding inside the per-element band.
Verify verify_rows(ConstMatrix x, ConstMatrix w_inter, ConstMatrix h, Activation act, double atol, double rtol,
                   cudaStream_t s) {
  Verify v;
  const int64_t M = x.rows, U = h.cols;
  const int64_t r0 = std::min<int64_t>(M, 256), r1 = std::min<int64_t>(M - r0, 256);
  DevBuf ref(sizeof(float) * size_t(std::max<int64_t>(r0, 1)) * U);
  double sq = 0, sq_ref = 0;
  const size_t es = dtype_size(x.dtype);
  for (int part = 0; part < 2; ++part) {
    const int64_t first = part == 0 ? 0 : M - r1, rows = part == 0 ? r0 : r1;
    if (rows == 0) continue;
    const ConstMatrix xs{static_cast<const char*>(x.data) + first * x.ld * es, x.dtype, rows, x.cols, x.ld};
    const ConstMatrix hs{static_cast<const char*>(h.data) + first * h.ld * es, h.dtype, rows, h.cols, h.ld};
    testing::gated_up_reference_gpu(xs, w_inter, static_cast<float*>(ref.p), U, act, s);
    const testing::CompareStats st = testing::compare(hs, static_cast<const float*>(ref.p), U, atol, rtol, s);
    BENCH_CUDA(cudaStreamSynchronize(s));
    sq += st.sum_sq_diff;
    sq_ref += st.sum_sq_ref;
    v.rows += rows;
    v.max_abs = std::max(v.max_abs, st.max_abs_diff);
    if (st.violations || st.nonfinite) {
      v.ok = false;
      v.what += "rows " + std::to_string(first) + ".." + std::to_string(first + rows - 1) + ": " +
                std::to_string(st.violations) + " of " + std::to_string(st.count) + " out of tolerance, " +
                std::to_string(st.nonfinite) + " non-finite, first at (" + std::to_string(first + st.first_bad_row) +
                ", " + std::to_string(st.first_bad_col) + "), max |diff| " + fmt(st.max_abs_diff, 6) + "; ";
    }
  }
  v.rel_l2 = sq_ref > 0 ? std::sqrt(sq / sq_ref) : 0;
  if (v.rel_l2 > 1e-2) {
    v.ok = false;
    v.what += "relative L2 error " + fmt(v.rel_l2, 5) + " > 1e-2; ";
  }
  return v;
}

void print_help() {
  std::printf(
      "blockfuse bench gated-up [options]\n"
      "  TFLOP/s of (a) cuBLAS GEMM into [M, 2U], (b) (a) + blockfuse::swiglu (the unfused pipeline),\n"
      "  (c) the fused blockfuse::gated_up; ratios c/a, c/b; activation bytes each allocates.\n"
      "  --models LIST        8b,70b,405b,gemma27b (default: all)\n"
      "  --tokens LIST        token counts M (default 512,1024,2048,4096,8192,16384,32768,65536;\n"
      "                       a point that does not fit free device memory is skipped, saying so)\n"
      "  --reps N             timed repetitions per variant, median reported (default 50)\n"
      "  --warmup N           untimed calls first (default 5)\n"
      "  --dtype bf16|fp16    (default bf16)\n"
      "  --kernel auto|sm80|sm90 which fused kernel (auto = sm90 on compute capability 9.0 when built, else sm80)\n"
      "  --tile-config N      force GatedUpOptions::tile_config (default: the heuristic)\n"
      "  --quick              8b and 70b at 1024 and 4096 tokens, 20 reps (explicit options win)\n"
      "  --no-ceilings        skip measuring the cuBLAS 8192^3 and copy-bandwidth ceilings\n"
      "  --json FILE          write the run and its rows as JSON\n"
      "Exit status: 0 ok, 1 a verification failed or an error, 2 no usable GPU.\n");
}

std::string tile_string(int cfg, bool sm90 = false) {
  if (sm90) {
    const Sm90TileConfigRow& r = kSm90TileConfigs[cfg];
    return "sm90 " + std::to_string(r.bm) + "x" + std::to_string(r.bn) + "x" + std::to_string(r.bk) + (r.pingpong ? " pingpong" : " coop") +
           " c" + std::to_string(r.cluster_m) + "x" + std::to_string(r.cluster_n);
  }
  const GatedUpTileConfig t = gated_up_tile_config(cfg);
  return std::to_string(t.block_m) + "x" + std::to_string(t.block_n) + "x" + std::to_string(t.block_k) + " s" +
         std::to_string(t.stages) + " w" + std::to_string(t.warps_m) + "x" + std::to_string(t.warps_n);
}

int run(const Args& args) {
  if (args.has("help") || args.has("h")) {
    print_help();
    return 0;
  }
  // Options are checked before the GPU is touched, so a typo fails at once on any machine.
  const bool quick = args.has("quick");
  const std::vector<std::string> model_keys = args.get_list(
      "models", quick ? std::vector<std::string>{"8b", "70b"} : std::vector<std::string>{"8b", "70b", "405b", "gemma27b"});
  std::vector<const Model*> models;
  for (const auto& key : model_keys) {
    const Model* md = nullptr;
    for (const auto& m : kModels)
      if (key == m.key) md = &m;
    if (!md) throw Error("--models: unknown model '" + key + "' (known: 8b, 70b, 405b, gemma27b)");
    models.push_back(md);
  }
  const std::vector<int64_t> tokens = args.get_int_list(
      "tokens", quick ? std::vector<int64_t>{1024, 4096}
                      : std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384, 32768, 65536});
  for (int64_t m : tokens)
    if (m < 1 || m > (int64_t{1} << 30)) throw Error("--tokens: " + std::to_string(m) + " is not in [1, 2^30]");
  const int reps = static_cast<int>(args.get_int("reps", quick ? 20 : 50));
  const int warmup = static_cast<int>(args.get_int("warmup", 5));
  if (reps < 1 || warmup < 0) throw Error("--reps must be >= 1 and --warmup >= 0");
  const std::string dts = args.get("dtype", "bf16");
  if (dts != "bf16" && dts != "fp16") throw Error("--dtype must be bf16 or fp16, got '" + dts + "'");
  const DType dt = dts == "bf16" ? DType::kBF16 : DType::kFP16;
  const std::string kernel_opt = args.get("kernel", "auto");
  if (kernel_opt != "auto" && kernel_opt != "sm80" && kernel_opt != "sm90")
    throw Error("--kernel must be auto, sm80 or sm90, got '" + kernel_opt + "'");
  if (kernel_opt == "sm90" && !gated_up_has_sm90()) throw Error("--kernel sm90: this build has no sm90a kernel");
  const int forced = static_cast<int>(args.get_int("tile-config", -1));
  const int n_cfg = kernel_opt == "sm90" ? kNumSm90TileConfigs : gated_up_num_tile_configs();
  if (forced < -1 || forced >= n_cfg)
    throw Error("--tile-config " + std::to_string(forced) + ": required -1 (heuristic) or 0.." + std::to_string(n_cfg - 1));
  if (args.has("json") && args.get("json").empty()) throw Error("--json needs a file name");

  if (!require_gpu("blockfuse bench gated-up")) return 2;

  cudaStream_t s = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> stream_guard(s, [](cudaStream_t x) { cudaStreamDestroy(x); });
  cublasHandle_t handle = nullptr;
  CUBLAS_OK(cublasCreate(&handle));
  std::unique_ptr<cublasContext, void (*)(cublasHandle_t)> handle_guard(handle, [](cublasHandle_t x) { cublasDestroy(x); });
  CUBLAS_OK(cublasSetStream(handle, s));
  // cuBLAS's default algorithm with the 32 MiB workspace NVIDIA recommends for Hopper: the GEMM a
  // user gets from torch.nn.functional.linear.
  DevBuf cublas_ws(32u << 20);
  CUBLAS_OK(cublasSetWorkspace(handle, cublas_ws.p, cublas_ws.bytes));

  const std::string dev_name = device_name(), date = now_iso8601();
  int dev_id = 0;
  BENCH_CUDA(cudaGetDevice(&dev_id));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, dev_id));
  const std::string cc = std::to_string(prop.major) + "." + std::to_string(prop.minor);

  double matrix_ceiling = 0, copy_ceiling = 0;
  if (!args.has("no-ceilings")) {
    std::fprintf(stderr, "[gated-up] measuring ceilings (cuBLAS 8192^3 bf16, 1 GiB device copy)...\n");
    matrix_ceiling = measure_cublas_bf16_tflops(s);
    copy_ceiling = measure_copy_bandwidth_gbs(s);
    std::fprintf(stderr, "[gated-up] ceilings: %.0f TFLOP/s, %.0f GB/s\n", matrix_ceiling, copy_ceiling);
  }
  const DeviceSpec spec = current_device_spec();
  const cudaDataType_t ct = dt == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const size_t es = dtype_size(dt);
  // bf16 keeps 8 mantissa bits: one output rounding is <= 2^-9 relative, so 2^-7 leaves room for
  // fp32 accumulation-order differences; fp16 keeps 11. atol covers outputs near zero: typical
  // |h| here is ~0.05 (gate and up have std ~1/3), so atol is 0.2% (bf16) / 0.04% (fp16) of it.
  const double rtol = dt == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024;
  const double atol = dt == DType::kBF16 ? 1e-4 : 2e-5;

  Table table({"model", "M", "a cuBLAS", "b +swiglu", "c fused", "c/a", "c/b", "c %ceil", "act MiB a/b/c", "tile",
               "verified"});
  Json rows = Json::array();
  bool all_ok = true;
  int points = 0, skipped = 0;
  for (const Model* md : models) {
    const int64_t K = md->k, U = md->u;
    const size_t w_bytes = es * size_t(2 * U) * size_t(K);
    size_t free_b = 0, total_b = 0;
    BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (2 * w_bytes + (512u << 20) > free_b) {
      std::fprintf(stderr, "[gated-up] skip %s: its two weight copies need %.1f GiB, %.1f GiB free\n", md->name,
                   2 * w_bytes / 1073741824.0, free_b / 1073741824.0);
      skipped += int(tokens.size());
      continue;
    }
    // The unfused user holds the stacked [gate; up] weight; the fused path its interleaved copy.
    DevBuf w_stacked(w_bytes), w_inter(w_bytes);
    const float wb = 1.0f / std::sqrt(float(K));  // nn.Linear's default init range
    testing::fill_uniform(make_matrix(w_stacked.p, dt, 2 * U, K), -wb, wb, 7 + uint64_t(K), s);
    interleave_stacked_gate_up(make_matrix(static_cast<const void*>(w_stacked.p), dt, 2 * U, K),
                               make_matrix(w_inter.p, dt, 2 * U, K), s);
    BENCH_CUDA(cudaStreamSynchronize(s));
    const ConstMatrix W = make_matrix(static_cast<const void*>(w_inter.p), dt, 2 * U, K);

    for (int64_t M : tokens) {
      const size_t x_bytes = es * size_t(M) * size_t(K);
      const int sets = rotation_sets(int64_t(x_bytes), 16);
      const size_t c_bytes = es * size_t(M) * size_t(2 * U), h_bytes = es * size_t(M) * size_t(U);
      // x copies, C, two outputs, the reference's fp32 [256, 2U] workspace and [256, U] result, and
      // 256 MiB for cuBLAS and the allocator.
      const size_t need = size_t(sets) * x_bytes + c_bytes + 2 * h_bytes + sizeof(float) * 256 * 3 * size_t(U) +
                          (256u << 20);
      BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
      if (need > free_b) {
        std::fprintf(stderr, "[gated-up] skip %s M=%ld: needs %.1f GiB, %.1f GiB free\n", md->name, long(M),
                     need / 1073741824.0, free_b / 1073741824.0);
        ++skipped;
        continue;
      }
      if (M > (int64_t{1} << 31) - 1 || 2 * U > (int64_t{1} << 31) - 1) throw Error("shape too large for cuBLAS int");
      // auto = what gated_up's kAuto runs: sm90 on compute capability 9.0 when built, else sm80.
      const bool use90 = kernel_opt == "sm90" || (kernel_opt == "auto" && gated_up_has_sm90() &&
                                                    spec.cc_major == 9 && spec.cc_minor == 0);
      const GatedUpKernel kern = use90 ? GatedUpKernel::kSm90 : GatedUpKernel::kSm80;
      const int cfg = forced >= 0 ? forced : use90 ? choose_gated_up_sm90_tile_config({M, K, U}, spec) : choose_gated_up_tile_config({M, K, U}, spec);
      std::fprintf(stderr, "[gated-up] %s M=%ld K=%ld U=%ld %s tile %d (%s), %d x-copies: verifying...\n", md->name,
                   long(M), long(K), long(U), activation_name(md->act), cfg, tile_string(cfg, use90).c_str(), sets);

      std::vector<std::unique_ptr<DevBuf>> xs;
      for (int i = 0; i < sets; ++i) {
        xs.push_back(std::make_unique<DevBuf>(x_bytes));
        testing::fill_uniform(make_matrix(xs.back()->p, dt, M, K), -1.f, 1.f, 1000003ull * uint64_t(M) + uint64_t(i), s);
      }
      DevBuf c(c_bytes), hb(h_bytes), hf(h_bytes);
      auto X = [&](int i) { return make_matrix(static_cast<const void*>(xs[size_t(i % sets)]->p), dt, M, K); };
      GatedUpOptions opt;
      opt.tile_config = forced;
      opt.kernel = kernel_opt == "sm80" ? GatedUpKernel::kSm80 : kernel_opt == "sm90" ? GatedUpKernel::kSm90 : GatedUpKernel::kAuto;

      const float one = 1.f, zero = 0.f;
      // Column-major view: C^T[2U, M] = W[2U, K] · x^T, i.e. row-major C[M, 2U] = x · Wᵀ.
      auto gemm = [&](int i) {
        CUBLAS_OK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(2 * U), int(M), int(K), &one, w_stacked.p, ct,
                               int(K), xs[size_t(i % sets)]->p, ct, int(K), &zero, c.p, ct, int(2 * U),
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      auto unfused = [&](int i) {
        gemm(i);
        swiglu(make_matrix(static_cast<const void*>(c.p), dt, M, 2 * U), make_matrix(hb.p, dt, M, U), md->act,
               GateUpLayout::kStacked, s);
      };
      auto fused = [&](int i) { gated_up(X(i), W, make_matrix(hf.p, dt, M, U), md->act, s, opt); };

      // Verify both pipelines first, outputs poisoned with NaN so an unwritten element shows.
      testing::fill_bits(make_matrix(hf.p, dt, M, U), testing::nan_bits(dt), s);
      testing::fill_bits(make_matrix(hb.p, dt, M, U), testing::nan_bits(dt), s);
      fused(0);
      unfused(0);
      BENCH_CUDA(cudaStreamSynchronize(s));
      const Verify vf = verify_rows(X(0), W, make_matrix(static_cast<const void*>(hf.p), dt, M, U), md->act, atol,
                                    rtol, s);
      // (b) rounds C to 16 bits before the gate (two more roundings than (c)): a 4x wider band.
      const Verify vb = verify_rows(X(0), W, make_matrix(static_cast<const void*>(hb.p), dt, M, U), md->act, atol,
                                    4 * rtol, s);
      if (!vf.ok)
        std::fprintf(stderr, "[gated-up] VERIFY FAILED (c fused) %s M=%ld: %srel_l2 %.3g\n", md->name, long(M),
                     vf.what.c_str(), vf.rel_l2);
      if (!vb.ok)
        std::fprintf(stderr, "[gated-up] VERIFY FAILED (b unfused) %s M=%ld: %srel_l2 %.3g\n", md->name, long(M),
                     vb.what.c_str(), vb.rel_l2);
      all_ok = all_ok && vf.ok && vb.ok;

      const Timing ta = time_it(gemm, s, warmup, reps);
      const Timing tb = time_it(unfused, s, warmup, reps);
      const Timing tc = time_it(fused, s, warmup, reps);
      BENCH_CUDA(cudaStreamSynchronize(s));
      BENCH_CUDA(cudaGetLastError());

      const double flops = 2.0 * double(M) * double(K) * 2.0 * double(U);
      auto tf = [&](const Timing& t) { return flops / (t.median_ms * 1e-3) / 1e12; };
      const double bytes_a = double(c_bytes), bytes_b = double(c_bytes + h_bytes), bytes_c = double(h_bytes);
      const double frac = matrix_ceiling > 0 ? tf(tc) / matrix_ceiling : 0;
      const bool ok = vf.ok && vb.ok;
      std::fprintf(stderr, "[gated-up] %s M=%ld: a %.1f  b %.1f  c %.1f TFLOP/s  c/a %.3f  c/b %.3f  %s\n", md->name,
                   long(M), tf(ta), tf(tb), tf(tc), ta.median_ms / tc.median_ms, tb.median_ms / tc.median_ms,
                   ok ? "verified" : "VERIFY FAILED");
      ++points;

      table.add({md->name, std::to_string(M), fmt(tf(ta)), fmt(tf(tb)), fmt(tf(tc)), fmt(ta.median_ms / tc.median_ms, 3),
                 fmt(tb.median_ms / tc.median_ms, 3), matrix_ceiling > 0 ? fmt(100 * frac, 1) : "-",
                 fmt(bytes_a / 1048576, 0) + "/" + fmt(bytes_b / 1048576, 0) + "/" + fmt(bytes_c / 1048576, 0),
                 (use90 ? "sm90:" : "sm80:") + std::to_string(cfg), ok ? "yes" : "NO"});

      Json r = Json::object();
      r.set("benchmark", "gated-up")
          .set("device", dev_name)
          .set("compute_capability", cc)
          .set("model", md->name)
          .set("M", M)
          .set("K", K)
          .set("U", U)
          .set("dtype", dts)
          .set("activation", activation_name(md->act))
          .set("kernel", std::string("blockfuse::gated_up ") + kernel_name(kern))
          .set("tile_config", cfg)
          .set("tile_config_forced", forced >= 0)
          .set("tile", tile_string(cfg, use90))
          .set("baseline_gemm", "cublasGemmEx CUBLAS_COMPUTE_32F CUBLAS_GEMM_DEFAULT, 32 MiB workspace, stacked weight")
          .set("baseline_swiglu", "blockfuse::swiglu (stacked)")
          .set("flops", flops)
          .set("a_cublas_ms", ta.median_ms)
          .set("b_unfused_ms", tb.median_ms)
          .set("c_fused_ms", tc.median_ms)
          .set("a_cublas_min_ms", ta.min_ms)
          .set("b_unfused_min_ms", tb.min_ms)
          .set("c_fused_min_ms", tc.min_ms)
          .set("a_cublas_tflops", tf(ta))
          .set("b_unfused_tflops", tf(tb))
          .set("c_fused_tflops", tf(tc))
          .set("c_over_a", ta.median_ms / tc.median_ms)
          .set("c_over_b", tb.median_ms / tc.median_ms)
          .set("act_bytes_a", int64_t(c_bytes))  // exact integers: %g would round them
          .set("act_bytes_b", int64_t(c_bytes + h_bytes))
          .set("act_bytes_c", int64_t(h_bytes))
          .set("act_bytes_b_over_c", bytes_b / bytes_c)
          .set("reps", reps)
          .set("warmup", warmup)
          .set("x_rotation_sets", sets)
          .set("verified", ok)
          .set("verified_rows", vf.rows)
          .set("fused_rel_l2", vf.rel_l2)
          .set("fused_max_abs_diff", vf.max_abs)
          .set("unfused_rel_l2", vb.rel_l2);
      if (matrix_ceiling > 0) {
        r.set("matrix_ceiling_tflops", matrix_ceiling)
            .set("copy_ceiling_gbs", copy_ceiling)
            .set("c_frac_of_matrix_ceiling", frac)
            .set("a_frac_of_matrix_ceiling", tf(ta) / matrix_ceiling);
      }
      if (!ok) r.set("verify_error", vf.what + vb.what);
      rows.push(r);
    }
  }

  std::printf("\nblockfuse bench gated-up — %s (cc %s), %s; TFLOP/s = 2·M·K·2U / median of %d (after %d warm-up)\n",
              dev_name.c_str(), cc.c_str(), dts.c_str(), reps, warmup);
  std::printf("a = cuBLAS GEMM into [M, 2U]; b = a + blockfuse::swiglu; c = fused gated_up. "
              "act MiB = activation bytes each allocates.\n");
  if (matrix_ceiling > 0)
    std::printf("ceilings this run: cuBLAS 8192^3 bf16 %.0f TFLOP/s, device copy %.0f GB/s; c %%ceil = c / matrix ceiling\n",
                matrix_ceiling, copy_ceiling);
  table.print();
  if (skipped) std::printf("(%d point(s) skipped for memory; see stderr)\n", skipped);

  if (args.has("json")) {
    Json out = Json::object();
    out.set("benchmark", "gated-up")
        .set("device", dev_name)
        .set("compute_capability", cc)
        .set("date", date)
        .set("dtype", dts)
        .set("reps", reps)
        .set("warmup", warmup)
        .set("points", points)
        .set("skipped", skipped)
        .set("all_verified", all_ok);
    if (matrix_ceiling > 0) out.set("matrix_ceiling_tflops", matrix_ceiling).set("copy_ceiling_gbs", copy_ceiling);
    out.set("rows", rows);
    write_file(args.get("json"), out.dump());
    std::fprintf(stderr, "[gated-up] wrote %s\n", args.get("json").c_str());
  }
  if (!all_ok) {
    std::fprintf(stderr, "blockfuse bench gated-up: verification FAILED (see above)\n");
    return 1;
  }
  return 0;
}

BLOCKFUSE_COMMAND("bench gated-up", run, "TFLOP/s of the fused gated up-projection vs cuBLAS GEMM (+ swiglu)");

}  // namespace
}  // namespace blockfuse::bench
