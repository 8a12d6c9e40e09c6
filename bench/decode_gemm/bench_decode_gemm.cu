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
#include "harness.h"
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

void check_shape(const std::string& key) {
  for (const auto& s : kShapes)
    if (key == s.key) return;
  const size_t x = key.find('x');
  const auto digits = [](const std::string& t) {
    return !t.empty() && t.size() <= 10 && t.find_first_not_of("0123456789") == std::string::npos;
  };
  if (x == std::string::npos || !digits(key.substr(0, x)) || !digits(key.substr(x + 1)))
    throw Error("'" + key + "' is neither a known shape (qkv405, gateup405, down405, gateup8b, down8b) nor NxK");
  const int64_t n = std::stoll(key.substr(0, x)), k = std::stoll(key.substr(x + 1));
  if (n < 1 || k < 8 || k % 8 != 0 || n > (int64_t{1} << 30) || k > (int64_t{1} << 30))
    throw Error("'" + key + "' needs N >= 1, K >= 8, K % 8 == 0");
}

Shape shape_of(const std::string& key) {
  for (const auto& s : kShapes)
    if (key == s.key) return s;
  const size_t x = key.find('x');
  return Shape{"custom", "", std::stoll(key.substr(0, x)), std::stoll(key.substr(x + 1))};
}

class DecodeGemmBench final : public BenchCommand {
  std::vector<std::string> shapes_ = {"qkv405", "gateup405", "down405", "gateup8b", "down8b"};
  std::vector<int64_t> ms_ = {1, 8, 16, 32}, splits_, warps_;
  int calls_ = 10;
  std::string dtype_ = "bf16";
  bool no_cublas_ = false;

  void options(Options& o) override {
    std::string about = "GB/s of y[M,N] = x[M,K]·Wᵀ: blockfuse::decode_gemm (split-K) vs cuBLAS, as a fraction of the "
                        "device copy bandwidth measured in this run; bytes = W + x + y. Per-call median of --calls calls "
                        "captured in one CUDA graph, W rotated past L2. Shapes:";
    for (const auto& s : kShapes)
      about += std::string("\n  ") + s.key + ": N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) + ", " + s.what;
    o.about(about);
    o.words("--shapes", shapes_, check_shape, "shape names or NxK", std::vector<std::string>{"qkv405", "down8b"});
    o.ints("--m", ms_, 1, kDecodeGemmMaxM, "token rows M", std::vector<int64_t>{1, 16});
    o.ints("--split-k", splits_, 1, kDecodeGemmMaxSplitK,
           "force DecodeGemmConfig::split_k, one row per value (default: the heuristic; with --warps a tuning sweep)");
    o.ints("--warps", warps_, 4, 8, "force warps_per_block, 4 and/or 8 (default: the heuristic's)");
    o.integer("--calls", calls_, 1, 100000, "calls per captured graph");
    o.choice("--dtype", dtype_, {"bf16", "fp16"}, "element type");
    o.flag("--no-cublas", no_cublas_, "skip the cuBLAS baseline (faster sweeps; verification then skipped too)");
  }

  void run(Bench& b) override {
    for (int64_t w : warps_)
      if (w != 4 && w != 8) throw Error("--warps: " + std::to_string(w) + " is not 4 or 8");
    const DType dt = dtype_ == "bf16" ? DType::kBF16 : DType::kFP16;
    const double copy = b.copy_gbs();
    b.title("blockfuse bench decode-gemm — " + b.device().name + " (cc " + b.device().cc + ", " +
            std::to_string(b.device().sms) + " SMs), " + dtype_ + "; copy bandwidth " + fmt(copy, 0) + " GB/s this run");
    b.title("per-call median of " + std::to_string(b.reps()) + " graph replays x " + std::to_string(calls_) +
            " calls (after " + std::to_string(b.warmup()) + " warm-up), W rotated past L2; bytes = W + x + y;");
    b.title("config sSwW = split_k S, W warps per block, * = the heuristic's; rel_l2 = blockfuse y vs cuBLAS fp32 output");
    b.columns({"shape", "N", "K", "M", "config", "us", "GB/s", "%copy", "cuBLAS us", "cuBLAS GB/s", "cuBLAS %copy",
               "speedup", "rel_l2"});
    b.info()["dtype"] = dtype_;
    b.info()["copy_gbs"] = copy;
    for (const auto& key : shapes_) shape(b, shape_of(key), dt);
  }

  void shape(Bench& b, const Shape& sh, DType dt) {
    using testing::DeviceBuffer;
    const cudaStream_t s = b.stream();
    const int64_t N = sh.n, K = sh.k, Mmax = *std::max_element(ms_.begin(), ms_.end());
    const size_t es = dtype_size(dt), w_elems = size_t(N) * size_t(K);
    const int sets = rotation_sets(int64_t(es * w_elems), 16);
    if (!b.fits(size_t(sets) * es * w_elems, std::string(sh.key) + " (" + std::to_string(sets) + " weight copies)"))
      return;
    std::vector<DeviceBuffer<uint16_t>> w_copies;
    const float wb = 1.0f / std::sqrt(float(K));  // nn.Linear's default init range
    for (int i = 0; i < sets; ++i) {
      w_copies.emplace_back(w_elems);
      testing::fill_uniform(make_matrix(w_copies.back().data(), dt, N, K), -wb, wb, 17 + 1000003ull * uint64_t(i), s);
    }
    DeviceBuffer<uint16_t> xb(size_t(Mmax * K)), yb(size_t(Mmax * N)), yc(size_t(Mmax * N));
    DeviceBuffer<float> ref(size_t(Mmax * N));
    testing::fill_uniform(make_matrix(xb.data(), dt, Mmax, K), -1.f, 1.f, 99 + uint64_t(K), s);
    // Workspace for every configuration this run may use, zeroed once (the kernel keeps it so);
    // decode_gemm_workspace_size throws for a split K does not allow: those are skipped below.
    size_t ws_need = decode_gemm_workspace_size(Mmax, N, K);
    for (int64_t sp : splits_)
      for (int64_t w : warps_.empty() ? std::vector<int64_t>{4, 8} : warps_) try {
          ws_need = std::max(ws_need, decode_gemm_workspace_size(Mmax, N, K, DecodeGemmConfig{int(sp), int(w)}));
        } catch (const Error&) {
        }
    DeviceBuffer<unsigned char> work(ws_need);
    if (ws_need) BENCH_CUDA(cudaMemsetAsync(work.data(), 0, ws_need, s));
    const Method method = Method::graph(calls_);

    for (int64_t M : ms_) {
      const ConstMatrix X = make_matrix(static_cast<const void*>(xb.data()), dt, M, K);
      const Matrix Y = make_matrix(yb.data(), dt, M, N);
      auto W = [&](int i) { return make_matrix(static_cast<const void*>(w_copies[size_t(i % sets)].data()), dt, N, K); };
      const DecodeGemmConfig heur = decode_gemm_heuristic(M, N, K, b.device().sms);
      std::vector<DecodeGemmConfig> cfgs;  // the heuristic's, or the sweep
      if (splits_.empty() && warps_.empty()) {
        cfgs.push_back(heur);
      } else {
        for (int64_t sp : splits_.empty() ? std::vector<int64_t>{heur.split_k} : splits_)
          for (int64_t w : warps_.empty() ? std::vector<int64_t>{heur.warps_per_block} : warps_) {
            const DecodeGemmConfig c{int(sp), int(w)};
            try {
              (void)decode_gemm_workspace_size(M, N, K, c);  // validates split against K
              cfgs.push_back(c);
            } catch (const Error& e) {
              b.log("skip split %ld warps %ld for K=%ld: %s", long(sp), long(w), long(K), e.what());
            }
          }
      }
      const bool with_cublas = !no_cublas_;
      Timing tc;
      if (with_cublas) tc = b.time([&](int i) { b.linear(xb.data(), W(i).data, yc.data(), M, N, K, dt, dt == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F); }, method);
      const double bytes = double(es) * (double(w_elems) + double(M) * double(K) + double(M) * double(N));
      auto gbs = [&](const Timing& t) { return bytes / (t.median_ms * 1e-3) / 1e9; };
      for (const DecodeGemmConfig& cfg : cfgs) {
        const bool is_heur = cfg.split_k == heur.split_k && cfg.warps_per_block == heur.warps_per_block;
        const std::string cfg_s = "s" + std::to_string(cfg.split_k) + "w" + std::to_string(cfg.warps_per_block) + (is_heur ? "*" : "");
        const std::string point = std::string(sh.key) + " M=" + std::to_string(M) + " " + cfg_s;
        // Verify first: y (poisoned) against cuBLAS's fp32 output on W copy 0. y ~ 0.3; one bf16
        // rounding is 2^-9 relative: 2 roundings and atol 1e-3 leave room for the two fp32
        // summation orders, not for a wrong term.
        Check check;
        if (with_cublas) {
          testing::fill_bits(Y, testing::nan_bits(dt), s);
          decode_gemm(X, W(0), Y, work.data(), work.bytes(), cfg, s);
          b.linear(xb.data(), W(0).data, ref.data(), M, N, K, dt, CUDA_R_32F);
          check = to_check(testing::compare(Y, ref.data(), N, testing::tolerance(dt, 2, dt == DType::kBF16 ? 1e-3 : 2e-4), s));
        }
        const bool ok = b.verify(point, check);
        const Timing tb = b.time([&](int i) { decode_gemm(X, W(i), Y, work.data(), work.bytes(), cfg, s); }, method);
        const double speedup = with_cublas ? tc.median_ms / tb.median_ms : 0;
        b.log("%s: %.2f us %.0f GB/s (%s%% copy)%s", point.c_str(), tb.us(), gbs(tb), b.pct_of_copy(gbs(tb)).c_str(),
              with_cublas ? ("; cuBLAS " + fmt(tc.us(), 2) + " us; x" + fmt(speedup, 2) + "; rel_l2 " + fmt(check.rel_l2, 6)).c_str() : "");
        auto r = b.row({sh.key, std::to_string(N), std::to_string(K), std::to_string(M), cfg_s, fmt(tb.us(), 2),
                        fmt(gbs(tb), 0), b.pct_of_copy(gbs(tb)), with_cublas ? fmt(tc.us(), 2) : "-",
                        with_cublas ? fmt(gbs(tc), 0) : "-", with_cublas ? b.pct_of_copy(gbs(tc)) : "-",
                        with_cublas ? fmt(speedup, 2) : "-", with_cublas ? (ok ? fmt(check.rel_l2, 6) : "FAILED") : "-"});
        r.set("shape", sh.key).set("M", M).set("N", N).set("K", K).set("dtype", dtype_)
            .set("split_k", cfg.split_k).set("warps_per_block", cfg.warps_per_block).set("heuristic_config", is_heur)
            .set("bytes", bytes).set("us", tb.us()).set("min_us", tb.min_us()).set("gbs", gbs(tb));
        if (b.copy_gbs() > 0) r.set("frac_of_copy", gbs(tb) / b.copy_gbs()).set("copy_gbs", b.copy_gbs());
        r.set("calls_per_graph", calls_).set("reps", b.reps()).set("warmup", b.warmup()).set("w_rotation_sets", sets);
        if (with_cublas) {
          r.set("baseline", "cublasGemmEx CUBLAS_COMPUTE_32F CUBLAS_GEMM_DEFAULT, 32 MiB workspace")
              .set("cublas_us", tc.us()).set("cublas_gbs", gbs(tc));
          if (b.copy_gbs() > 0) r.set("cublas_frac_of_copy", gbs(tc) / b.copy_gbs());
          r.set("speedup", speedup).set("verified", ok).set("rel_l2_vs_cublas_fp32", check.rel_l2)
              .set("max_abs_diff_vs_cublas_fp32", check.max_abs);
          if (!ok) r.set("verify_error", check.what);
        }
      }
    }
  }
};

}  // namespace

BLOCKFUSE_COMMAND(DecodeGemmBench, "bench decode-gemm", "GB/s of the split-K decode GEMM (M <= 32) vs cuBLAS");

}  // namespace blockfuse::bench
