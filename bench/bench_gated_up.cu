// `blockfuse bench gated-up`: the fused gated up-projection against what a user runs today.
//   (a) cuBLAS GEMM  x[M,K] · W[2U,K]ᵀ -> C[M,2U]          (stacked [gate; up] weight)
//   (b) (a) + blockfuse::swiglu(C) -> h[M,U]               (the unfused pipeline)
//   (c) blockfuse::gated_up(x, W_interleaved) -> h[M,U]    (fused: C never exists)
// All three are charged FLOPs = 2·M·K·2U, so (b)'s figure is its effective rate. CUDA events,
// warm-up, the median of --reps repetitions; activations rotated over enough copies to exceed L2
// when the working set is small. Before timing a point, the fused output (and (b)'s) is checked
// against the fp32 reference on up to 512 rows; any failure makes the command exit 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "blockfuse/blockfuse.h"
#include "commands.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

struct Model {
  const char* key;
  const char* name;
  int64_t k, u;
  Activation act;
};
const Model kModels[] = {
    {"8b", "Llama-3 8B", 4096, 14336, Activation::kSiLU},
    {"70b", "Llama-3 70B", 8192, 28672, Activation::kSiLU},
    {"405b", "Llama-3.1 405B", 16384, 53248, Activation::kSiLU},
    {"gemma27b", "Gemma-2 27B", 4608, 36864, Activation::kGeluTanh},
};

#define CUBLAS_OK(expr)                                                                        \
  do {                                                                                         \
    cublasStatus_t s_ = (expr);                                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuBLAS status ") + std::to_string(int(s_)) + " in " #expr); \
  } while (0)

struct Verify {
  bool ok = true;
  double rel_l2 = 0;
  std::string what;
};

// Checks rows [0, r0) and [M - r1, M) of `h` against the fp32 reference.
Verify verify_rows(ConstMatrix x, ConstMatrix w_inter, ConstMatrix h, Activation act, double rtol, cudaStream_t s) {
  Verify v;
  const int64_t M = x.rows, U = h.cols;
  const int64_t r0 = std::min<int64_t>(M, 256), r1 = std::min<int64_t>(M - r0, 256);
  float* ref = nullptr;
  BENCH_CUDA(cudaMalloc(&ref, sizeof(float) * (r0 + r1) * U));
  double sq = 0, sq_ref = 0;
  for (int part = 0; part < 2; ++part) {
    const int64_t first = part == 0 ? 0 : M - r1, rows = part == 0 ? r0 : r1;
    if (rows == 0) continue;
    const size_t es = dtype_size(x.dtype);
    ConstMatrix xs{static_cast<const char*>(x.data) + first * x.ld * es, x.dtype, rows, x.cols, x.ld};
    ConstMatrix hs{static_cast<const char*>(h.data) + first * h.ld * es, h.dtype, rows, h.cols, h.ld};
    testing::gated_up_reference_gpu(xs, w_inter, ref, U, act, s);
    const auto st = testing::compare(hs, ref, U, 1e-4, rtol, s);
    sq += st.sum_sq_diff;
    sq_ref += st.sum_sq_ref;
    if (st.violations || st.nonfinite) {
      v.ok = false;
      v.what = "rows " + std::to_string(first) + "+: " + std::to_string(st.violations) + " elements out of tolerance, " +
               std::to_string(st.nonfinite) + " non-finite, first at (" + std::to_string(first + st.first_bad_row) + ", " +
               std::to_string(st.first_bad_col) + ")";
    }
  }
  BENCH_CUDA(cudaFree(ref));
  v.rel_l2 = sq_ref > 0 ? std::sqrt(sq / sq_ref) : 0;
  if (v.rel_l2 > 1e-2) v.ok = false;
  return v;
}

int run(const Args& args) {
  if (args.has("help")) {
    std::printf(
        "blockfuse bench gated-up [options]\n"
        "  --models 8b,70b,405b,gemma27b   models (default: all)\n"
        "  --tokens 512,1024,...           token counts M (default 512..65536)\n"
        "  --reps N (50)  --warmup N (5)   timing repetitions (median reported)\n"
        "  --dtype bf16|fp16 (bf16)        --tile-config N   force a tile configuration\n"
        "  --quick                         8b and 70b at 1024 and 4096 tokens, 20 reps\n"
        "  --json FILE                     write the rows as JSON\n"
        "  --no-ceilings                   skip measuring the matrix and copy ceilings\n");
    return 0;
  }
  if (!require_gpu("blockfuse bench gated-up")) return 2;
  const bool quick = args.has("quick");
  std::vector<std::string> model_keys = args.get_list("models", quick ? std::vector<std::string>{"8b", "70b"}
                                                                      : std::vector<std::string>{"8b", "70b", "405b", "gemma27b"});
  std::vector<int64_t> tokens = args.get_int_list(
      "tokens", quick ? std::vector<int64_t>{1024, 4096} : std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384, 32768, 65536});
  const int reps = static_cast<int>(args.get_int("reps", quick ? 20 : 50));
  const int warmup = static_cast<int>(args.get_int("warmup", 5));
  const std::string dts = args.get("dtype", "bf16");
  if (dts != "bf16" && dts != "fp16") throw Error("--dtype must be bf16 or fp16, got '" + dts + "'");
  const DType dt = dts == "bf16" ? DType::kBF16 : DType::kFP16;
  const int forced = static_cast<int>(args.get_int("tile-config", -1));

  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreate(&s));
  cublasHandle_t h;
  CUBLAS_OK(cublasCreate(&h));
  CUBLAS_OK(cublasSetStream(h, s));
  void* cublas_ws = nullptr;
  const size_t ws_bytes = 32u << 20;
  BENCH_CUDA(cudaMalloc(&cublas_ws, ws_bytes));
  CUBLAS_OK(cublasSetWorkspace(h, cublas_ws, ws_bytes));

  Json out = Json::object();
  out.set("benchmark", "gated-up").set("device", device_name()).set("date", now_iso8601()).set("dtype", dts);
  double matrix_ceiling = 0, copy_ceiling = 0;
  if (!args.has("no-ceilings")) {
    std::fprintf(stderr, "measuring ceilings...\n");
    matrix_ceiling = measure_cublas_bf16_tflops(s);
    copy_ceiling = measure_copy_bandwidth_gbs(s);
    out.set("matrix_ceiling_tflops", matrix_ceiling).set("copy_ceiling_gbs", copy_ceiling);
  }
  const DeviceSpec dev = current_device_spec();
  const cudaDataType_t ct = dt == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;

  Table table({"model", "M", "(a) cuBLAS", "(b) +swiglu", "(c) fused", "c/a", "c/b", "act MiB a/b/c", "tile", "verified"});
  Json rows = Json::array();
  bool all_ok = true;
  for (const auto& key : model_keys) {
    const Model* md = nullptr;
    for (const auto& m : kModels)
      if (key == m.key) md = &m;
    if (!md) throw Error("--models: unknown model '" + key + "' (known: 8b, 70b, 405b, gemma27b)");
    const int64_t K = md->k, U = md->u;
    const size_t es = 2;
    void *w_stacked = nullptr, *w_inter = nullptr;
    BENCH_CUDA(cudaMalloc(&w_stacked, es * 2 * U * K));
    BENCH_CUDA(cudaMalloc(&w_inter, es * 2 * U * K));
    const float wb = 1.0f / std::sqrt(float(K));  // nn.Linear's default init range
    testing::fill_uniform(make_matrix(w_stacked, dt, 2 * U, K), -wb, wb, 7 + K, s);
    interleave_stacked_gate_up(make_matrix((const void*)w_stacked, dt, 2 * U, K), make_matrix(w_inter, dt, 2 * U, K), s);

    for (int64_t M : tokens) {
      const int sets = rotation_sets(int64_t(es) * (M * K + 2 * U * K), 8);
      const size_t need = es * (size_t(sets) * M * K + size_t(M) * 2 * U + size_t(M) * U) + sizeof(float) * 512 * 3 * U + (256u << 20);
      size_t free_b = 0, total_b = 0;
      BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
      if (need > free_b) {
        std::fprintf(stderr, "skip %s M=%ld: needs %.1f GiB, %.1f GiB free\n", md->name, long(M), need / 1073741824.0, free_b / 1073741824.0);
        continue;
      }
      std::fprintf(stderr, "%s M=%ld ...\n", md->name, long(M));
      std::vector<void*> xs(sets);
      for (int i = 0; i < sets; ++i) {
        BENCH_CUDA(cudaMalloc(&xs[i], es * M * K));
        testing::fill_uniform(make_matrix(xs[i], dt, M, K), -1.f, 1.f, 1000 * M + i, s);
      }
      void *c = nullptr, *hb = nullptr, *hf = nullptr;
      BENCH_CUDA(cudaMalloc(&c, es * M * 2 * U));
      BENCH_CUDA(cudaMalloc(&hb, es * M * U));
      BENCH_CUDA(cudaMalloc(&hf, es * M * U));
      auto X = [&](int i) { return make_matrix((const void*)xs[i % sets], dt, M, K); };
      const ConstMatrix W = make_matrix((const void*)w_inter, dt, 2 * U, K);
      GatedUpOptions opt;
      opt.tile_config = forced;
      const int cfg = forced >= 0 ? forced : choose_gated_up_tile_config({M, K, U}, dev);

      const float one = 1.f, zero = 0.f;
      auto gemm = [&](int i) {
        CUBLAS_OK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(2 * U), int(M), int(K), &one, w_stacked, ct, int(K),
                               xs[i % sets], ct, int(K), &zero, c, ct, int(2 * U), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      auto unfused = [&](int i) {
        gemm(i);
        swiglu(make_matrix((const void*)c, dt, M, 2 * U), make_matrix(hb, dt, M, U), md->act, GateUpLayout::kStacked, s);
      };
      auto fused = [&](int i) { gated_up(X(i), W, make_matrix(hf, dt, M, U), md->act, s, opt); };

      // Verify both pipelines' outputs first (outputs poisoned so unwritten elements show).
      testing::fill_bits(make_matrix(hf, dt, M, U), testing::nan_bits(dt), s);
      testing::fill_bits(make_matrix(hb, dt, M, U), testing::nan_bits(dt), s);
      fused(0);
      unfused(0);
      BENCH_CUDA(cudaStreamSynchronize(s));
      const double rtol = dt == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024;
      Verify vf = verify_rows(X(0), W, make_matrix((const void*)hf, dt, M, U), md->act, rtol, s);
      // (b) rounds C to 16 bits before the gate: allow two more roundings.
      Verify vb = verify_rows(X(0), W, make_matrix((const void*)hb, dt, M, U), md->act, 4 * rtol, s);
      if (!vf.ok) std::fprintf(stderr, "VERIFY FAILED (fused) %s M=%ld: %s rel_l2=%.3g\n", md->name, long(M), vf.what.c_str(), vf.rel_l2);
      if (!vb.ok) std::fprintf(stderr, "VERIFY FAILED (unfused) %s M=%ld: %s rel_l2=%.3g\n", md->name, long(M), vb.what.c_str(), vb.rel_l2);
      all_ok = all_ok && vf.ok && vb.ok;

      const Timing ta = time_it(gemm, s, warmup, reps);
      const Timing tc = time_it(fused, s, warmup, reps);
      const Timing tb = time_it(unfused, s, warmup, reps);
      const double flops = 2.0 * M * K * 2.0 * U;
      auto tf = [&](const Timing& t) { return flops / (t.median_ms * 1e-3) / 1e12; };
      const double bytes_a = double(es) * M * 2 * U, bytes_b = bytes_a + double(es) * M * U, bytes_c = double(es) * M * U;
      const std::string kernel = std::string("sm80 tile ") + std::to_string(cfg);
      table.add({md->name, std::to_string(M), fmt(tf(ta)), fmt(tf(tb)), fmt(tf(tc)), fmt(ta.median_ms / tc.median_ms, 3),
                 fmt(tb.median_ms / tc.median_ms, 3),
                 fmt(bytes_a / 1048576, 0) + "/" + fmt(bytes_b / 1048576, 0) + "/" + fmt(bytes_c / 1048576, 0), std::to_string(cfg),
                 (vf.ok && vb.ok) ? "yes" : "NO"});
      Json r = Json::object();
      r.set("benchmark", "gated-up").set("kernel", kernel).set("model", md->name).set("M", M).set("K", K).set("U", U)
          .set("dtype", dts).set("activation", activation_name(md->act)).set("tile_config", cfg)
          .set("a_cublas_ms", ta.median_ms).set("b_unfused_ms", tb.median_ms).set("c_fused_ms", tc.median_ms)
          .set("a_cublas_tflops", tf(ta)).set("b_unfused_tflops", tf(tb)).set("c_fused_tflops", tf(tc))
          .set("c_over_a", ta.median_ms / tc.median_ms).set("c_over_b", tb.median_ms / tc.median_ms)
          .set("act_bytes_a", bytes_a).set("act_bytes_b", bytes_b).set("act_bytes_c", bytes_c)
          .set("reps", reps).set("verified", vf.ok && vb.ok).set("fused_rel_l2", vf.rel_l2);
      if (matrix_ceiling > 0) r.set("c_frac_of_matrix_ceiling", tf(tc) / matrix_ceiling);
      rows.push(r);

      for (auto p : xs) cudaFree(p);
      cudaFree(c);
      cudaFree(hb);
      cudaFree(hf);
    }
    cudaFree(w_stacked);
    cudaFree(w_inter);
  }
  out.set("rows", rows);
  if (args.has("json")) write_file(args.get("json"), out.dump());

  std::printf("\nblockfuse bench gated-up — %s, %s, TFLOP/s = 2·M·K·2U / median time (%d reps)\n", device_name().c_str(), dts.c_str(), reps);
  if (matrix_ceiling > 0)
    std::printf("ceilings this run: cuBLAS 8192^3 bf16 %.0f TFLOP/s, device copy %.0f GB/s\n", matrix_ceiling, copy_ceiling);
  table.print();
  cudaFree(cublas_ws);
  cublasDestroy(h);
  cudaStreamDestroy(s);
  if (!all_ok) {
    std::fprintf(stderr, "blockfuse bench gated-up: verification FAILED (see above)\n");
    return 1;
  }
  return 0;
}

BLOCKFUSE_COMMAND("bench gated-up", run, "TFLOP/s of the fused gated up-projection vs cuBLAS GEMM (+ swiglu)");

}  // namespace
}  // namespace blockfuse::bench
