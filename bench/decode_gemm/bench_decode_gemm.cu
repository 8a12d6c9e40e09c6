// `blockfuse bench decode-gemm`: y[M, N] = x[M, K] · Wᵀ at decode sizes (M = 1..32), blockfuse's
// split-K decode_gemm against cuBLAS (cublasGemmEx, fp32 compute, the GEMM torch.nn.functional.linear
// runs), in the same process on the same inputs.
//
// Memory-bound: the figure of merit is bytes / time against the device copy rate measured in
// this run, with bytes = W (N·K·2) + x (M·K·2) + y (M·N·2), the traffic the op cannot avoid.
// Timing: time_graph_per_call — --calls back-to-back calls captured in one CUDA graph, replayed
// --reps times after --warmup, median per call (a decoder step runs these inside a graph, so the
// graph launch is not the kernel's cost). W is rotated over rotation_sets() copies (>= 3x L2 in
// all), call i of the graph reading copy i mod sets, so no call finds W in L2; cuBLAS gets the same
// rotation. Before timing, each (shape, M) is verified once: blockfuse's y against cuBLAS's fp32
// output on the same inputs (relative L2 and max |diff| printed; a failure makes the exit status 1).
//
// Output: progress on stderr, a table last on stdout, and with --json FILE the run and its rows.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "blockfuse/decode_gemm.h"
#include "commands.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

struct Shape {
  const char* key;   // --shapes name
  const char* what;  // as printed in --help
  int64_t n, k;
};
// Decode projections with tensor parallelism: Llama-3.1 405B (hidden 16384, MLP 53248) at TP8,
// Llama-3 8B (hidden 4096, MLP 14336) at TP1.
const Shape kShapes[] = {
    {"qkv405", "405B fused qkv at TP8 ((16384 + 2·1024) / 8)", 2304, 16384},
    {"gateup405", "405B fused gate+up at TP8 (2·53248 / 8)", 13312, 16384},
    {"down405", "405B down at TP8 (K = 53248 / 8)", 16384, 6656},
    {"gateup8b", "8B fused gate+up (2·14336)", 28672, 4096},
    {"down8b", "8B down", 4096, 14336},
};

#define CUBLAS_OK(expr)                                                                     \
  do {                                                                                      \
    const cublasStatus_t s_ = (expr);                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                        \
      throw Error(std::string("cuBLAS status ") + std::to_string(int(s_)) + " in " #expr); \
  } while (0)

void print_help() {
  std::printf(
      "blockfuse bench decode-gemm [options]\n"
      "  GB/s of y[M,N] = x[M,K]·Wᵀ: blockfuse::decode_gemm (split-K) vs cuBLAS, as a fraction of the\n"
      "  device copy bandwidth measured in this run; bytes = W + x + y.\n"
      "  --shapes LIST     names or NxK (default: all):\n");
  for (const auto& s : kShapes)
    std::printf("                      %-10s N=%-6ld K=%-6ld %s\n", s.key, long(s.n), long(s.k), s.what);
  std::printf(
      "  --m LIST          token rows M, 1..32 (default 1,8,16,32)\n"
      "  --split-k LIST    force DecodeGemmConfig::split_k, one row per value (default: the heuristic)\n"
      "  --warps LIST      force warps_per_block, 4 and/or 8 (default: the heuristic's)\n"
      "                    (with either option every split x warps combination is timed: a tuning sweep;\n"
      "                    combinations invalid for K are skipped, saying so)\n"
      "  --calls N         calls per captured graph (default 10)\n"
      "  --reps N          graph replays timed, median reported (default 50)\n"
      "  --warmup N        untimed replays first (default 5)\n"
      "  --dtype bf16|fp16 (default bf16)\n"
      "  --no-cublas       skip the cuBLAS baseline (faster sweeps; verification then skipped too)\n"
      "  --quick           qkv405 and down8b at M = 1, 16, 20 reps (explicit options win)\n"
      "  --json FILE       write the run and its rows as JSON\n"
      "Exit status: 0 ok, 1 a verification failed or an error, 2 no usable GPU.\n");
}

std::vector<Shape> parse_shapes(const std::vector<std::string>& keys) {
  std::vector<Shape> out;
  for (const auto& key : keys) {
    const Shape* hit = nullptr;
    for (const auto& s : kShapes)
      if (key == s.key) hit = &s;
    if (hit) {
      out.push_back(*hit);
      continue;
    }
    const size_t xpos = key.find('x');
    long long n = 0, k = 0;
    try {
      if (xpos == std::string::npos) throw 0;
      size_t used = 0;
      n = std::stoll(key.substr(0, xpos), &used);
      if (used != xpos) throw 0;
      k = std::stoll(key.substr(xpos + 1), &used);
      if (used != key.size() - xpos - 1) throw 0;
    } catch (...) {
      throw Error("--shapes: '" + key + "' is neither a known shape (qkv405, gateup405, down405, gateup8b, down8b) nor NxK");
    }
    if (n < 1 || k < 8 || k % 8 != 0 || n > (int64_t{1} << 30) || k > (int64_t{1} << 30))
      throw Error("--shapes: '" + key + "' needs N >= 1, K >= 8, K % 8 == 0");
    out.push_back(Shape{"custom", "", n, k});
  }
  return out;
}

int run(const Args& args) {
  if (args.has("help") || args.has("h")) {
    print_help();
    return 0;
  }
  // Options are checked before the GPU is touched, so a typo fails at once on any machine.
  const bool quick = args.has("quick");
  const std::vector<Shape> shapes = parse_shapes(args.get_list(
      "shapes", quick ? std::vector<std::string>{"qkv405", "down8b"}
                      : std::vector<std::string>{"qkv405", "gateup405", "down405", "gateup8b", "down8b"}));
  const std::vector<int64_t> ms = args.get_int_list("m", quick ? std::vector<int64_t>{1, 16} : std::vector<int64_t>{1, 8, 16, 32});
  for (int64_t m : ms)
    if (m < 1 || m > kDecodeGemmMaxM) throw Error("--m: " + std::to_string(m) + " is not in [1, 32]");
  const std::vector<int64_t> splits = args.get_int_list("split-k", {});
  for (int64_t s : splits)
    if (s < 1 || s > kDecodeGemmMaxSplitK) throw Error("--split-k: " + std::to_string(s) + " is not in [1, 64]");
  const std::vector<int64_t> warps_list = args.get_int_list("warps", {});
  for (int64_t w : warps_list)
    if (w != 4 && w != 8) throw Error("--warps: " + std::to_string(w) + " is not 4 or 8");
  const int calls = static_cast<int>(args.get_int("calls", 10));
  const int reps = static_cast<int>(args.get_int("reps", quick ? 20 : 50));
  const int warmup = static_cast<int>(args.get_int("warmup", 5));
  if (calls < 1 || reps < 1 || warmup < 0) throw Error("--calls and --reps must be >= 1, --warmup >= 0");
  const std::string dts = args.get("dtype", "bf16");
  if (dts != "bf16" && dts != "fp16") throw Error("--dtype must be bf16 or fp16, got '" + dts + "'");
  const DType dt = dts == "bf16" ? DType::kBF16 : DType::kFP16;
  const bool with_cublas = !args.has("no-cublas");
  if (args.has("json") && args.get("json").empty()) throw Error("--json needs a file name");

  if (!require_gpu("blockfuse bench decode-gemm")) return 2;

  cudaStream_t s = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> stream_guard(s, [](cudaStream_t x) { cudaStreamDestroy(x); });
  cublasHandle_t handle = nullptr;
  CUBLAS_OK(cublasCreate(&handle));
  std::unique_ptr<cublasContext, void (*)(cublasHandle_t)> handle_guard(handle, [](cublasHandle_t x) { cublasDestroy(x); });
  CUBLAS_OK(cublasSetStream(handle, s));
  // An explicit workspace: cuBLAS then allocates nothing while a graph is being captured.
  DevBuf cublas_ws(32u << 20);
  CUBLAS_OK(cublasSetWorkspace(handle, cublas_ws.p, cublas_ws.bytes));

  const std::string dev_name = device_name(), date = now_iso8601();
  int dev_id = 0;
  BENCH_CUDA(cudaGetDevice(&dev_id));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, dev_id));
  const std::string cc = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  const int sms = prop.multiProcessorCount;

  std::fprintf(stderr, "[decode-gemm] measuring the copy bandwidth (1 GiB device copy)...\n");
  const double copy_gbs = measure_copy_bandwidth_gbs(s);
  std::fprintf(stderr, "[decode-gemm] %s, %d SMs, copy %.0f GB/s\n", dev_name.c_str(), sms, copy_gbs);

  const cudaDataType_t ct = dt == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const size_t es = dtype_size(dt);
  // y ~ 0.3 in size (x in [-1, 1), W in ±1/√K); one bf16 rounding is 2^-9 relative: 2^-7 and an
  // atol of 1e-3 leave room for the two fp32 summation orders, not for a wrong term.
  const double rtol = dt == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024, atol = dt == DType::kBF16 ? 1e-3 : 2e-4;

  Table table({"shape", "N", "K", "M", "config", "us", "GB/s", "%copy", "cuBLAS us", "cuBLAS GB/s", "cuBLAS %copy",
               "speedup", "rel_l2"});
  Json rows = Json::array();
  bool all_ok = true;
  for (const Shape& sh : shapes) {
    const int64_t N = sh.n, K = sh.k, Mmax = *std::max_element(ms.begin(), ms.end());
    const size_t w_bytes = es * size_t(N) * size_t(K);
    const int sets = rotation_sets(int64_t(w_bytes), 16);
    size_t free_b = 0, total_b = 0;
    BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (size_t(sets) * w_bytes + (256u << 20) > free_b) {
      std::fprintf(stderr, "[decode-gemm] skip %s: %d weight copies need %.1f GiB, %.1f GiB free\n", sh.key, sets,
                   sets * w_bytes / 1073741824.0, free_b / 1073741824.0);
      continue;
    }
    std::vector<std::unique_ptr<DevBuf>> ws_copies;
    const float wb = 1.0f / std::sqrt(float(K));  // nn.Linear's default init range
    for (int i = 0; i < sets; ++i) {
      ws_copies.push_back(std::make_unique<DevBuf>(w_bytes));
      testing::fill_uniform(make_matrix(ws_copies.back()->p, dt, N, K), -wb, wb, 17 + 1000003ull * uint64_t(i), s);
    }
    DevBuf xb(es * size_t(Mmax) * size_t(K)), yb(es * size_t(Mmax) * size_t(N)), yc(es * size_t(Mmax) * size_t(N)),
        ref(sizeof(float) * size_t(Mmax) * size_t(N));
    testing::fill_uniform(make_matrix(xb.p, dt, Mmax, K), -1.f, 1.f, 99 + uint64_t(K), s);
    // Workspace for every configuration this run may use, zeroed once (the kernel keeps it so).
    // (decode_gemm_workspace_size throws for a split K does not allow: those are skipped below.)
    size_t ws_need = decode_gemm_workspace_size(Mmax, N, K);
    for (int64_t sp : splits)
      for (int64_t w : warps_list.empty() ? std::vector<int64_t>{4, 8} : warps_list) try {
          ws_need = std::max(ws_need, decode_gemm_workspace_size(Mmax, N, K, DecodeGemmConfig{int(sp), int(w)}));
        } catch (const Error&) {
        }
    DevBuf work(ws_need);
    if (ws_need) BENCH_CUDA(cudaMemsetAsync(work.p, 0, ws_need, s));
    BENCH_CUDA(cudaStreamSynchronize(s));

    for (int64_t M : ms) {
      const ConstMatrix X = make_matrix(static_cast<const void*>(xb.p), dt, M, K);
      const Matrix Y = make_matrix(yb.p, dt, M, N), Yc = make_matrix(yc.p, dt, M, N);
      auto W = [&](int i) { return make_matrix(static_cast<const void*>(ws_copies[size_t(i % sets)]->p), dt, N, K); };
      const DecodeGemmConfig heur = decode_gemm_heuristic(M, N, K, sms);
      // The configurations to time: the heuristic's, or the sweep.
      std::vector<DecodeGemmConfig> cfgs;
      if (splits.empty() && warps_list.empty()) {
        cfgs.push_back(heur);
      } else {
        for (int64_t sp : splits.empty() ? std::vector<int64_t>{heur.split_k} : splits)
          for (int64_t w : warps_list.empty() ? std::vector<int64_t>{heur.warps_per_block} : warps_list) {
            const DecodeGemmConfig c{int(sp), int(w)};
            try {
              (void)decode_gemm_workspace_size(M, N, K, c);  // validates split against K
              cfgs.push_back(c);
            } catch (const Error& e) {
              std::fprintf(stderr, "[decode-gemm] skip split %ld warps %ld for K=%ld: %s\n", long(sp), long(w), long(K), e.what());
            }
          }
      }

      const float one = 1.f, zero = 0.f;
      int cublas_call = 0;
      // Column-major view: yᵀ[N, M] = op(W) · xᵀ with W read as [K, N] column-major and transposed,
      // i.e. row-major y[M, N] = x · Wᵀ.
      auto gemm = [&](int i, void* out, cudaDataType_t out_type) {
        CUBLAS_OK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &one, W(i).data, ct, int(K),
                               xb.p, ct, int(K), &zero, out, out_type, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      Timing tc{0, 0, 0, 0};
      if (with_cublas) tc = time_graph_per_call([&] { gemm(cublas_call++, yc.p, ct); }, s, calls, warmup, reps);

      const double bytes = double(w_bytes) + double(es) * double(M) * double(K) + double(es) * double(M) * double(N);
      auto gbs = [&](const Timing& t) { return bytes / (t.median_ms * 1e-3) / 1e9; };
      for (const DecodeGemmConfig& cfg : cfgs) {
        const std::string cfg_s = "s" + std::to_string(cfg.split_k) + "w" + std::to_string(cfg.warps_per_block) +
                                  (cfg.split_k == heur.split_k && cfg.warps_per_block == heur.warps_per_block ? "*" : "");
        // Verify once: y against cuBLAS's fp32 output on W copy 0, y poisoned first.
        double rel_l2 = 0, max_abs = 0;
        bool ok = true;
        std::string verify_error;
        if (with_cublas) {
          testing::fill_bits(Y, testing::nan_bits(dt), s);
          decode_gemm(X, W(0), Y, work.p, work.bytes, cfg, s);
          gemm(0, ref.p, CUDA_R_32F);
          const testing::CompareStats st = testing::compare(Y, static_cast<const float*>(ref.p), N, atol, rtol, s);
          BENCH_CUDA(cudaStreamSynchronize(s));
          rel_l2 = st.rel_l2();
          max_abs = st.max_abs_diff;
          if (st.violations || st.nonfinite || rel_l2 > 1e-2) {
            ok = false;
            verify_error = std::to_string(st.violations) + " of " + std::to_string(st.count) + " out of tolerance, " +
                           std::to_string(st.nonfinite) + " non-finite, first at (" + std::to_string(st.first_bad_row) +
                           ", " + std::to_string(st.first_bad_col) + "), rel_l2 " + fmt(rel_l2, 6);
            std::fprintf(stderr, "[decode-gemm] VERIFY FAILED %s M=%ld %s: %s\n", sh.key, long(M), cfg_s.c_str(),
                         verify_error.c_str());
          }
        }
        all_ok = all_ok && ok;
        int call = 0;
        const Timing tb = time_graph_per_call([&] { decode_gemm(X, W(call++), Y, work.p, work.bytes, cfg, s); }, s,
                                              calls, warmup, reps);
        BENCH_CUDA(cudaStreamSynchronize(s));
        BENCH_CUDA(cudaGetLastError());
        const double speedup = with_cublas ? tc.median_ms / tb.median_ms : 0;
        std::fprintf(stderr, "[decode-gemm] %s N=%ld K=%ld M=%ld %s: %.2f us %.0f GB/s (%.1f%% copy)", sh.key, long(N),
                     long(K), long(M), cfg_s.c_str(), tb.median_ms * 1e3, gbs(tb), 100 * gbs(tb) / copy_gbs);
        if (with_cublas)
          std::fprintf(stderr, "; cuBLAS %.2f us %.0f GB/s; x%.2f; rel_l2 %.2g %s", tc.median_ms * 1e3, gbs(tc), speedup,
                       rel_l2, ok ? "" : "VERIFY FAILED");
        std::fprintf(stderr, "\n");
        table.add({sh.key, std::to_string(N), std::to_string(K), std::to_string(M), cfg_s, fmt(tb.median_ms * 1e3, 2),
                   fmt(gbs(tb), 0), fmt(100 * gbs(tb) / copy_gbs, 1), with_cublas ? fmt(tc.median_ms * 1e3, 2) : "-",
                   with_cublas ? fmt(gbs(tc), 0) : "-", with_cublas ? fmt(100 * gbs(tc) / copy_gbs, 1) : "-",
                   with_cublas ? fmt(speedup, 2) : "-", with_cublas ? (ok ? fmt(rel_l2, 6) : "FAILED") : "-"});
        Json r = Json::object();
        r.set("benchmark", "decode-gemm")
            .set("device", dev_name)
            .set("compute_capability", cc)
            .set("shape", sh.key)
            .set("M", M)
            .set("N", N)
            .set("K", K)
            .set("dtype", dts)
            .set("split_k", cfg.split_k)
            .set("warps_per_block", cfg.warps_per_block)
            .set("heuristic_config", cfg.split_k == heur.split_k && cfg.warps_per_block == heur.warps_per_block)
            .set("bytes", bytes)
            .set("us", tb.median_ms * 1e3)
            .set("min_us", tb.min_ms * 1e3)
            .set("gbs", gbs(tb))
            .set("frac_of_copy", gbs(tb) / copy_gbs)
            .set("copy_gbs", copy_gbs)
            .set("calls_per_graph", calls)
            .set("reps", reps)
            .set("warmup", warmup)
            .set("w_rotation_sets", sets);
        if (with_cublas) {
          r.set("baseline", "cublasGemmEx CUBLAS_COMPUTE_32F CUBLAS_GEMM_DEFAULT, 32 MiB workspace")
              .set("cublas_us", tc.median_ms * 1e3)
              .set("cublas_gbs", gbs(tc))
              .set("cublas_frac_of_copy", gbs(tc) / copy_gbs)
              .set("speedup", speedup)
              .set("verified", ok)
              .set("rel_l2_vs_cublas_fp32", rel_l2)
              .set("max_abs_diff_vs_cublas_fp32", max_abs);
          if (!ok) r.set("verify_error", verify_error);
        }
        rows.push(r);
      }
    }
  }

  std::printf("\nblockfuse bench decode-gemm — %s (cc %s, %d SMs), %s; copy bandwidth %.0f GB/s this run\n",
              dev_name.c_str(), cc.c_str(), sms, dts.c_str(), copy_gbs);
  std::printf("per-call median of %d graph replays x %d calls (after %d warm-up), W rotated past L2; bytes = W + x + y;\n"
              "config sSwW = split_k S, W warps per block, * = the heuristic's; rel_l2 = blockfuse y vs cuBLAS fp32 output\n",
              reps, calls, warmup);
  table.print();

  if (args.has("json")) {
    Json out = Json::object();
    out.set("benchmark", "decode-gemm")
        .set("device", dev_name)
        .set("compute_capability", cc)
        .set("sm_count", sms)
        .set("date", date)
        .set("dtype", dts)
        .set("copy_gbs", copy_gbs)
        .set("all_verified", all_ok)
        .set("rows", rows);
    write_file(args.get("json"), out.dump());
    std::fprintf(stderr, "[decode-gemm] wrote %s\n", args.get("json").c_str());
  }
  if (!all_ok) {
    std::fprintf(stderr, "blockfuse bench decode-gemm: verification FAILED (see above)\n");
    return 1;
  }
  return 0;
}

BLOCKFUSE_COMMAND("bench decode-gemm", run, "GB/s of the split-K decode GEMM (M <= 32) vs cuBLAS");

}  // namespace
}  // namespace blockfuse::bench
