// `blockfuse bench gated-up-fp8`: the FP8 fused gated up-projection against what a user runs today.
//   (a) cuBLASLt FP8 GEMM alone: e4m3 x[M,K] · w[2U,K]ᵀ -> bf16 [M, 2U], per-tensor A/B scales,
//       fast accumulation (the same accumulation mode as the fused kernel; torch._scaled_mm's
//       use_fast_accum=True); (a') the same with cuBLASLt's default accumulation
//       (torch._scaled_mm's default) — neither applies the gate;
//   (c) blockfuse::gated_up_fp8, bf16 output [M, U] (the gate fused, the [M, 2U] product never
//       written); (c8) the same with the e4m3 output (static per-tensor scale); (c8d) with the e4m3
//       output and dynamic per-row scales (the workspace overload: the GEMM's bf16 h, then a row
//       kernel);
//   (e) what (c8d) replaces: (a) followed by blockfuse::swiglu_fp8 with dynamic per-row scales on its
//       interleaved [M, 2U] output (the fastest unfused SwiGLU + per-row quantisation measured,
//       docs/swiglu.md);
//   (d) blockfuse::gated_up, bf16 x and w, the 16-bit fused kernel of the same shape.
// All are charged FLOPs = 2·M·K·2U. CUDA events around each call, warm-up first, the median of
// --reps repetitions; x is rotated over enough copies to span 3x L2 (the weights dwarf L2).
// Before a point is timed, (c) is checked against (a)'s output on its first and last 128 rows
// (the gate applied on the host to cuBLASLt's bf16 product: an independent FP8 GEMM), (c8) against
// (c), and (c8d) bit for bit against the per-row quantisation of (c)'s bf16 h (the same GEMM); a
// failure makes the command exit 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cuda_fp8.h>

#include "blockfuse/blockfuse.h"
#include "common/device.h"
#include "common/fp8_host.h"
#include "common/host_float.h"
#include "gated_up/tile_configs_fp8_sm90.h"
#include "gated_up/tile_configs_sm90.h"
#include "harness.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuBLASLt: ") + what + " failed with status " + std::to_string(int(st)));
}
#define LT(expr) lt_check((expr), #expr)

// Uniform e4m3 values in [lo, hi) from a counter hash (different per element and seed).
__global__ void fill_e4m3_kernel(uint8_t* p, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = (uint64_t(i) + seed * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 31;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 29;
    const float u = float(z >> 40) * (1.0f / 16777216.0f);
    p[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(lo + (hi - lo) * u, __NV_SATFINITE, __NV_E4M3));
  }
}
void fill_e4m3(void* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  fill_e4m3_kernel<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(p), n, lo, hi, seed);
  BENCH_CUDA(cudaGetLastError());
}

struct Model {
  const char* key;
  const char* name;
  int64_t k, u;
  Activation act;
};
const Model kModels[] = {
    {"8b", "Llama-3 8B", 4096, 14336, Activation::kSiLU},
    {"70b", "Llama-3 70B", 8192, 28672, Activation::kSiLU},
};

// cuBLASLt FP8 GEMM: D[M, 2U] (row-major) = sa·sb·x·wᵀ, i.e. column-major Dᵀ[2U, M] = op(A)·B with
// A = w stored column-major [K, 2U] (transposed: FP8 needs "TN"), B = x column-major [K, M].
class LtFp8Gemm {
 public:
  LtFp8Gemm(cublasLtHandle_t h, int64_t M, int64_t N, int64_t K, const float* sa, const float* sb, bool fast_accum,
            size_t workspace)
      : h_(h) {
    LT(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
    LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
    const int8_t fa = fast_accum ? 1 : 0;
    LT(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fa, sizeof fa));
    LT(cublasLtMatrixLayoutCreate(&a_, CUDA_R_8F_E4M3, uint64_t(K), uint64_t(N), K));
    LT(cublasLtMatrixLayoutCreate(&b_, CUDA_R_8F_E4M3, uint64_t(K), uint64_t(M), K));
    LT(cublasLtMatrixLayoutCreate(&d_, CUDA_R_16BF, uint64_t(N), uint64_t(M), N));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
    int found = 0;
    LT(cublasLtMatmulAlgoGetHeuristic(h_, op_, a_, b_, d_, d_, pref, 1, &heur_, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) throw Error("cuBLASLt found no FP8 algorithm for this GEMM");
  }
  ~LtFp8Gemm() {
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(d_);
    cublasLtMatmulDescDestroy(op_);
  }
  void operator()(const void* x, const void* w, void* d, void* ws, size_t ws_bytes, cudaStream_t s) const {
    const float one = 1.0f, zero = 0.0f;
    LT(cublasLtMatmul(h_, op_, &one, w, a_, x, b_, &zero, d, d_, d, d_, &heur_.algo, ws, ws_bytes, s));
  }

 private:
  cublasLtHandle_t h_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulHeuristicResult_t heur_{};
};

float gate_host(Activation act, float g) {
  return act == Activation::kSiLU ? g / (1.0f + std::exp(-g))
                                  : 0.5f * g * (1.0f + std::tanh(0.7978845608f * (g + 0.044715f * g * g * g)));
}

class GatedUpFp8Bench final : public BenchCommand {
  std::vector<std::string> models_ = {"8b", "70b"};
  std::vector<int64_t> tokens_ = {1024, 4096, 16384};
  int tile_config_ = -1;
  std::string raster_ = "auto";

  bool compares_variants() const override { return true; }
  void options(Options& o) override {
    o.about("TFLOP/s of (a) cuBLASLt FP8 GEMM alone into bf16 [M, 2U] (fast accumulation; a' default accumulation), "
            "(c) the fused blockfuse::gated_up_fp8 with bf16 output, (c8) with e4m3 output (static scale), (c8d) e4m3 "
            "with dynamic per-row scales, (e) a + blockfuse::swiglu_fp8 (dynamic), (d) the 16-bit fused "
            "blockfuse::gated_up (bf16); ratios c/a, c/a', c/d, c8d/e.");
    o.words("--models", models_, {"8b", "70b"}, "models", std::vector<std::string>{"8b", "70b"});
    o.ints("--tokens", tokens_, 16, int64_t{1} << 20, "token counts M", std::vector<int64_t>{1024, 4096}, 16);
    o.integer("--tile-config", tile_config_, -1, 1000, "force GatedUpFp8Options::tile_config (-1: the heuristic)");
    o.choice("--raster", raster_, {"auto", "m", "n"},
             "force GatedUpFp8Options::sm90_raster, the tile order along M or N (auto: the tile row's), for the FP8 "
             "calls (the 16-bit column d keeps its own)");
  }

  void run(Bench& b) override {
    if (!gated_up_fp8_has_sm90()) throw Error("this build has no sm90a kernel: gated_up_fp8 cannot run");
    const detail::DeviceSpec spec = detail::current_device_spec();
    if (!(spec.cc_major == 9 && spec.cc_minor == 0)) throw Error("gated_up_fp8 needs compute capability 9.0");
    if (tile_config_ >= kNumSm90Fp8TileConfigs)
      throw Error("--tile-config " + std::to_string(tile_config_) + ": required -1 or 0.." + std::to_string(kNumSm90Fp8TileConfigs - 1));
    const double matrix = b.matrix_tflops();
    b.title("blockfuse bench gated-up-fp8 — " + b.device().name + " (cc " + b.device().cc + "); TFLOP/s = 2·M·K·2U / median of " +
            std::to_string(b.reps()) + " (after " + std::to_string(b.warmup()) + " warm-up)");
    b.title("a = cuBLASLt FP8 GEMM alone (fast accum), a' = default accum; c = fused gated_up_fp8 (bf16 out), c8 = e4m3 out "
            "(static scale), c8d = e4m3 out with dynamic per-row scales; e = a + swiglu_fp8 (dynamic); d = fused 16-bit gated_up (bf16)");
    if (matrix > 0) b.title("ceiling this run: cuBLAS 8192^3 bf16 " + fmt(matrix, 0) + " TFLOP/s");
    b.info()["raster"] = raster_;
    b.columns({"model", "M", "a LtFP8", "a' Lt dflt", "c fused8", "c8 e4m3out", "c8d dyn", "e a+swiglu8", "d fused16", "c/a",
               "c/a'", "c/d", "c8d/e", "tile", "verified"});
    LT(cublasLtCreate(&lt_));
    ws_ = testing::DeviceBuffer<unsigned char>(size_t(32) << 20);
    for (const auto& key : models_)
      for (const auto& md : kModels)
        if (key == md.key) model(b, md, spec);
    cublasLtDestroy(lt_);
  }

  void model(Bench& b, const Model& md, const detail::DeviceSpec& spec) {
    using testing::DeviceBuffer;
    const cudaStream_t s = b.stream();
    const int64_t K = md.k, U = md.u, N = 2 * U;
    const size_t w_elems = size_t(N) * size_t(K);
    if (!b.fits(3 * w_elems, std::string(md.name) + " (e4m3 and bf16 weights)")) return;
    DeviceBuffer<uint8_t> w8(w_elems);
    DeviceBuffer<uint16_t> w16(w_elems);
    // e4m3 weights in [-1, 1) with per-tensor scale 1/(16 sqrt K); x in [-4, 4) with scale 1/4:
    // dequantised magnitudes like nn.Linear's init and unit activations.
    fill_e4m3(w8.data(), int64_t(w_elems), -1.f, 1.f, 17 + uint64_t(K), s);
    const float wb = 1.0f / std::sqrt(float(K));
    testing::fill_uniform(make_matrix(w16.data(), DType::kBF16, N, K), -wb, wb, 7 + uint64_t(K), s);
    const float h_scales[3] = {0.25f, 1.0f / (16.0f * std::sqrt(float(K))), 0.0f};
    // Each scale in its own 256-byte slot (cuBLASLt rejected a 4-byte-offset scale pointer at run
    // time with CUBLAS_STATUS_NOT_SUPPORTED on the H100).
    DeviceBuffer<float> scales(3 * 64);
    for (int i = 0; i < 3; ++i)
      BENCH_CUDA(cudaMemcpyAsync(scales.data() + 64 * i, &h_scales[i], sizeof(float), cudaMemcpyHostToDevice, s));
    const float* d_sx = scales.data();
    const float* d_sw = scales.data() + 64;
    float* d_so = scales.data() + 128;  // the e4m3 output scale, set after the bf16 output is known

    for (int64_t M : tokens_) {
      const std::string point = std::string(md.name) + " M=" + std::to_string(M);
      const size_t x_elems = size_t(M) * size_t(K), d_elems = size_t(M) * size_t(N), h_elems = size_t(M) * size_t(U);
      const int sets8 = rotation_sets(int64_t(x_elems), 16), sets16 = rotation_sets(int64_t(2 * x_elems), 16);
      if (!b.fits(size_t(sets8) * x_elems + 2 * size_t(sets16) * x_elems + 2 * d_elems + 6 * h_elems + 8 * size_t(M), point)) continue;
      std::vector<DeviceBuffer<uint8_t>> x8;
      std::vector<DeviceBuffer<uint16_t>> x16;
      for (int i = 0; i < sets8; ++i) {
        x8.emplace_back(x_elems);
        fill_e4m3(x8.back().data(), int64_t(x_elems), -4.f, 4.f, 1000003ull * uint64_t(M) + uint64_t(i), s);
      }
      for (int i = 0; i < sets16; ++i) {
        x16.emplace_back(x_elems);
        testing::fill_uniform(make_matrix(x16.back().data(), DType::kBF16, M, K), -1.f, 1.f, 2000003ull * uint64_t(M) + uint64_t(i), s);
      }
      DeviceBuffer<uint16_t> d(d_elems), h(h_elems), h16(h_elems);
      DeviceBuffer<uint8_t> h8(h_elems), h8d(h_elems), h8e(h_elems);
      DeviceBuffer<float> row_scales{static_cast<size_t>(M)}, row_scales_e{static_cast<size_t>(M)};
      DeviceBuffer<unsigned char> dyn_ws(gated_up_fp8_workspace_size(M, U, Fp8ScaleMode::kDynamicPerRow));
      const LtFp8Gemm lt_fast(lt_, M, N, K, d_sw, d_sx, true, ws_.bytes()), lt_dflt(lt_, M, N, K, d_sw, d_sx, false, ws_.bytes());
      const int cfg = tile_config_ >= 0 ? tile_config_ : choose_gated_up_fp8_sm90_tile_config({M, K, U}, spec);
      GatedUpFp8Options opt;
      opt.tile_config = tile_config_;
      opt.sm90_raster = raster_ == "m" ? Sm90Raster::kAlongM : raster_ == "n" ? Sm90Raster::kAlongN : Sm90Raster::kAuto;
      const Fp8InputScale xs{Fp8InputScaleMode::kPerTensor, d_sx}, ws{Fp8InputScaleMode::kPerTensor, d_sw};
      auto X8 = [&](int i) { return make_fp8_const_matrix(x8[size_t(i % sets8)].data(), M, K); };
      const Fp8ConstMatrix W8 = make_fp8_const_matrix(w8.data(), N, K);
      auto gemm_fast = [&](int i) { lt_fast(x8[size_t(i % sets8)].data(), w8.data(), d.data(), ws_.data(), ws_.bytes(), s); };
      auto gemm_dflt = [&](int i) { lt_dflt(x8[size_t(i % sets8)].data(), w8.data(), d.data(), ws_.data(), ws_.bytes(), s); };
      auto fused = [&](int i) { gated_up_fp8(X8(i), xs, W8, ws, make_matrix(h.data(), DType::kBF16, M, U), md.act, s, opt); };
      auto fused8 = [&](int i) {
        gated_up_fp8(X8(i), xs, W8, ws, make_fp8_matrix(h8.data(), M, U), Fp8Scale{Fp8ScaleMode::kStaticPerTensor, d_so},
                     md.act, s, opt);
      };
      auto fused8d = [&](int i) {
        gated_up_fp8(X8(i), xs, W8, ws, make_fp8_matrix(h8d.data(), M, U),
                     Fp8Scale{Fp8ScaleMode::kDynamicPerRow, row_scales.data()}, md.act, dyn_ws.data(), dyn_ws.bytes(), s, opt);
      };
      auto unfused8d = [&](int i) {
        gemm_fast(i);
        swiglu_fp8(make_matrix(static_cast<const void*>(d.data()), DType::kBF16, M, N), make_fp8_matrix(h8e.data(), M, U),
                   Fp8Scale{Fp8ScaleMode::kDynamicPerRow, row_scales_e.data()}, md.act, GateUpLayout::kInterleaved, s);
      };
      auto fused16 = [&](int i) {
        gated_up(make_matrix(static_cast<const void*>(x16[size_t(i % sets16)].data()), DType::kBF16, M, K),
                 make_matrix(static_cast<const void*>(w16.data()), DType::kBF16, N, K), make_matrix(h16.data(), DType::kBF16, M, U),
                 md.act, s);
      };
      b.log("%s K=%ld U=%ld tile %d, %d/%d x-copies: verifying...", point.c_str(), long(K), long(U), cfg, sets8, sets16);

      // Verify: poison, run (c) and (a) on x copy 0, compare on the host: (c) against a CPU
      // reference on sampled rows and columns (independent of cuBLASLt), (c) against the gate of
      // cuBLASLt's product on whole sampled rows, (c8) against (c). A baseline cuBLASLt cannot run
      // is reported (and not timed) rather than ending the benchmark.
      BENCH_CUDA(cudaMemsetAsync(h.data(), 0xff, h.bytes(), s));  // 0xffff: bf16 NaN
      BENCH_CUDA(cudaMemsetAsync(h8.data(), 0x7f, h8.bytes(), s));
      fused(0);
      BENCH_CUDA(cudaStreamSynchronize(s));
      const Verified vc = verify_cpu(M, K, U, md.act, x8[0], w8, h_scales[0], h_scales[1], h);
      bool ok = b.verify(point + " (c fused vs CPU reference)", vc.check);
      std::string lt_error;
      auto try_lt = [&](auto& fn, const char* what) {
        try {
          fn(0);
          BENCH_CUDA(cudaStreamSynchronize(s));
          return true;
        } catch (const Error& e) {
          (void)cudaGetLastError();
          lt_error += std::string(what) + ": " + e.what() + "; ";
          b.log("%s: %s failed: %s", point.c_str(), what, e.what());
          return false;
        }
      };
      const bool lt2_ok = try_lt(gemm_dflt, "cuBLASLt default accumulation");
      const bool lt_ok = try_lt(gemm_fast, "cuBLASLt fast accumulation");
      Verified v;
      v.max_ref = vc.max_ref;
      if (lt_ok) {
        v = verify_lt(M, U, md.act, d, h);
        ok &= b.verify(point + " (c fused vs cuBLASLt)", v.check);
      }
      // The e4m3 output with s = max|h| / 400 over the sampled rows (others may saturate), against (c).
      const float so = std::max(v.max_ref, 1e-20f) / 400.0f;
      BENCH_CUDA(cudaMemcpyAsync(d_so, &so, sizeof so, cudaMemcpyHostToDevice, s));
      fused8(0);
      BENCH_CUDA(cudaStreamSynchronize(s));
      const Verified v8 = verify_e4m3(M, U, h, h8, so);
      ok &= b.verify(point + " (c8 e4m3 vs c)", v8.check);
      BENCH_CUDA(cudaMemsetAsync(h8d.data(), 0x7f, h8d.bytes(), s));
      BENCH_CUDA(cudaMemsetAsync(row_scales.data(), 0xff, row_scales.bytes(), s));
      fused8d(0);
      BENCH_CUDA(cudaStreamSynchronize(s));
      const Verified v8d = verify_e4m3_dynamic(M, U, h, h8d, row_scales);
      ok &= b.verify(point + " (c8d dynamic e4m3 vs c, bit for bit)", v8d.check);

      const Timing none{std::nan(""), std::nan(""), std::nan(""), 0};
      // Every variant this point can run, interleaved (--order); the cuBLASLt ones only where it took the shape.
      std::vector<std::function<void(int)>> fns{fused, fused8, fused8d, fused16};
      if (lt_ok) fns.push_back(gemm_fast), fns.push_back(unfused8d);
      if (lt2_ok) fns.push_back(gemm_dflt);
      const std::vector<Timing> t = b.time_all(fns, Method::events());
      const Timing &tc = t[0], &tc8 = t[1], &tc8d = t[2], &td = t[3];
      const Timing ta = lt_ok ? t[4] : none, te = lt_ok ? t[5] : none, ta2 = lt2_ok ? t[lt_ok ? 6 : 4] : none;
      const double flops = 2.0 * double(M) * double(K) * double(N);
      auto tf = [&](const Timing& t) { return flops / (t.median_ms * 1e-3) / 1e12; };
      const Sm90TileConfigRow& r = kSm90Fp8TileConfigs[cfg];
      const std::string tile = std::to_string(r.bm) + "x" + std::to_string(r.bn) + "x" + std::to_string(r.bk) +
                               (r.pingpong ? " pingpong" : " coop") + " c" + std::to_string(r.cluster_m) + "x" + std::to_string(r.cluster_n);
      b.log("%s: a %.1f a' %.1f c %.1f c8 %.1f c8d %.1f e %.1f d %.1f TFLOP/s  c/a %.3f c/d %.3f c8d/e %.3f  %s", point.c_str(),
            tf(ta), tf(ta2), tf(tc), tf(tc8), tf(tc8d), tf(te), tf(td), ta.median_ms / tc.median_ms, td.median_ms / tc.median_ms,
            te.median_ms / tc8d.median_ms, ok ? "verified" : "VERIFY FAILED");
      auto row = b.row({md.name, std::to_string(M), fmt(tf(ta)), fmt(tf(ta2)), fmt(tf(tc)), fmt(tf(tc8)), fmt(tf(tc8d)), fmt(tf(te)),
                        fmt(tf(td)), fmt(ta.median_ms / tc.median_ms, 3), fmt(ta2.median_ms / tc.median_ms, 3),
                        fmt(td.median_ms / tc.median_ms, 3), fmt(te.median_ms / tc8d.median_ms, 3), std::to_string(cfg),
                        ok ? "yes" : "NO"});
      row.set("model", md.name).set("M", M).set("K", K).set("U", U).set("activation", activation_name(md.act))
          .set("tile_config", cfg).set("tile_config_forced", tile_config_ >= 0).set("tile", tile)
          .set("baseline_a", "cublasLtMatmul e4m3 x e4m3 -> bf16 [M, 2U], per-tensor A/B scale pointers, CUBLASLT_MATMUL_DESC_FAST_ACCUM=1, first heuristic algo, 32 MiB workspace")
          .set("baseline_a2", "the same with FAST_ACCUM=0 (torch._scaled_mm's default)")
          .set("baseline_d", "blockfuse::gated_up bf16 (sm90 kernel, heuristic tile)")
          .set("baseline_e", "baseline a, then blockfuse::swiglu_fp8 (interleaved, dynamic per-row scales) on its [M, 2U] output")
          .set("flops", flops)
          .set("a_lt_fp8_ms", ta.median_ms).set("a2_lt_fp8_default_accum_ms", ta2.median_ms).set("c_fused_fp8_ms", tc.median_ms)
          .set("c8_fused_fp8_e4m3out_ms", tc8.median_ms).set("d_fused_bf16_ms", td.median_ms)
          .set("c8d_fused_fp8_dynamic_ms", tc8d.median_ms).set("e_lt_fp8_swiglu_fp8_dynamic_ms", te.median_ms)
          .set("c8d_fused_fp8_dynamic_tflops", tf(tc8d)).set("e_lt_fp8_swiglu_fp8_dynamic_tflops", tf(te))
          .set("c8d_over_e", te.median_ms / tc8d.median_ms).set("c8d_over_c8", tc8.median_ms / tc8d.median_ms)
          .set("a_lt_fp8_tflops", tf(ta)).set("a2_lt_fp8_default_accum_tflops", tf(ta2)).set("c_fused_fp8_tflops", tf(tc))
          .set("c8_fused_fp8_e4m3out_tflops", tf(tc8)).set("d_fused_bf16_tflops", tf(td))
          .set("c_over_a", ta.median_ms / tc.median_ms).set("c_over_a2", ta2.median_ms / tc.median_ms)
          .set("c8_over_a", ta.median_ms / tc8.median_ms).set("c_over_d", td.median_ms / tc.median_ms)
          .set("reps", b.reps()).set("warmup", b.warmup()).set("x_rotation_sets_fp8", sets8).set("x_rotation_sets_bf16", sets16)
          .set("verified", ok).set("rel_l2_vs_cpu_sample", vc.check.rel_l2).set("rel_l2_vs_cublaslt", v.check.rel_l2)
          .set("rel_l2_e4m3_vs_bf16", v8.check.rel_l2).set("dynamic_mismatches", v8d.mismatches);
      if (!lt_error.empty()) row.set("baseline_error", lt_error);
      if (!ok) row.set("verify_error", vc.check.what + v.check.what + v8.check.what + v8d.check.what);
    }
  }

  struct Verified {
    Check check;
    float max_ref = 0;
    int64_t mismatches = 0;  // verify_e4m3_dynamic: bytes or scales not bit-equal
  };
  // (c) against the CPU on rows {0, M/2, M-1} x columns j in [0, 128) and [U - 128, U): double
  // sums of the e4m3 products. Bound: 2 bf16 roundings plus 2^-11 of each dot product's Σ|terms|
  // carried through the gate (the FP8 fast accumulation; as test_gated_up_fp8_gpu.cu).
  Verified verify_cpu(int64_t M, int64_t K, int64_t U, Activation act, const testing::DeviceBuffer<uint8_t>& x,
                      const testing::DeviceBuffer<uint8_t>& w, float sx, float sw, const testing::DeviceBuffer<uint16_t>& h) {
    Verified out;
    testing::CompareStats st;
    std::vector<uint8_t> xr(static_cast<size_t>(K)), wu(static_cast<size_t>(K)), wg(static_cast<size_t>(K));
    std::vector<int64_t> cols;
    for (int64_t j = 0; j < std::min<int64_t>(U, 128); ++j) cols.push_back(j);
    for (int64_t j = std::max<int64_t>(128, U - 128); j < U; ++j) cols.push_back(j);
    for (int64_t m : {int64_t(0), M / 2, M - 1}) {
      BENCH_CUDA(cudaMemcpy(xr.data(), x.data() + m * K, size_t(K), cudaMemcpyDeviceToHost));
      for (int64_t j : cols) {
        BENCH_CUDA(cudaMemcpy(wu.data(), w.data() + (2 * j) * K, size_t(K), cudaMemcpyDeviceToHost));
        BENCH_CUDA(cudaMemcpy(wg.data(), w.data() + (2 * j + 1) * K, size_t(K), cudaMemcpyDeviceToHost));
        uint16_t got_bits = 0;
        BENCH_CUDA(cudaMemcpy(&got_bits, h.data() + m * U + j, 2, cudaMemcpyDeviceToHost));
        double cu = 0, cg = 0, au = 0, ag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double xv = host::fp8_e4m3_to_float(xr[size_t(k)]);
          const double tu = xv * host::fp8_e4m3_to_float(wu[size_t(k)]), tg = xv * host::fp8_e4m3_to_float(wg[size_t(k)]);
          cu += tu, cg += tg, au += std::fabs(tu), ag += std::fabs(tg);
        }
        const double sc = double(sx) * double(sw), up = cu * sc, g = cg * sc;
        const double a = gate_host(act, float(g));
        const double r = a * up;
        const double bound = 2 * std::ldexp(1.0, -8) * std::fabs(r) +
                             std::ldexp(1.0, -11) * sc * (std::fabs(a) * au + 1.2 * std::fabs(up) * ag) + 1e-30;
        st.add(m, j, host::to_float(DType::kBF16, got_bits), r, bound);
        out.max_ref = std::max(out.max_ref, float(std::fabs(r)));
      }
    }
    out.check = to_check(st, 1e-2);
    return out;
  }

  // Sampled rows: the first and last 128 (fewer when M < 256).
  static std::vector<int64_t> sample_rows(int64_t M) {
    std::vector<int64_t> rows;
    for (int64_t m = 0; m < std::min<int64_t>(M, 128); ++m) rows.push_back(m);
    for (int64_t m = std::max<int64_t>(128, M - 128); m < M; ++m) rows.push_back(m);
    return rows;
  }

  // (c) against the gate applied on the host to cuBLASLt's bf16 product of the same e4m3 inputs.
  // Both accumulate in the tensor cores' FP8 mode in different orders and cuBLASLt rounds the
  // product to bf16 before the gate: 4 bf16 roundings relative plus 1 % of the mean |h|.
  Verified verify_lt(int64_t M, int64_t U, Activation act, const testing::DeviceBuffer<uint16_t>& d,
                  const testing::DeviceBuffer<uint16_t>& h) {
    Verified out;
    const int64_t N = 2 * U;
    std::vector<uint16_t> drow(static_cast<size_t>(N)), hrow(static_cast<size_t>(U));
    testing::CompareStats st;
    std::vector<std::pair<double, double>> got_ref;
    double sum_abs = 0;
    for (int64_t m : sample_rows(M)) {
      BENCH_CUDA(cudaMemcpy(drow.data(), d.data() + m * N, size_t(N) * 2, cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(hrow.data(), h.data() + m * U, size_t(U) * 2, cudaMemcpyDeviceToHost));
      for (int64_t j = 0; j < U; ++j) {
        const float up = host::to_float(DType::kBF16, drow[size_t(2 * j)]);
        const float g = host::to_float(DType::kBF16, drow[size_t(2 * j + 1)]);
        const double r = double(gate_host(act, g)) * up;
        got_ref.push_back({host::to_float(DType::kBF16, hrow[size_t(j)]), r});
        sum_abs += std::fabs(r);
        out.max_ref = std::max(out.max_ref, float(std::fabs(r)));
      }
    }
    const double atol = 1e-2 * sum_abs / double(std::max<size_t>(got_ref.size(), 1));
    int64_t i = 0;
    for (auto [g, r] : got_ref) {
      st.add(i / U, i % U, g, r, atol + 4 * std::ldexp(1.0, -8) * std::fabs(r));
      ++i;
    }
    out.check = to_check(st, 1e-2);
    return out;
  }

  // (c8): float(q)·s against (c)'s bf16 h, one e4m3 step (2^-3 relative, 2^-9·s absolute) plus
  // bf16's rounding of h.
  Verified verify_e4m3(int64_t M, int64_t U, const testing::DeviceBuffer<uint16_t>& h,
                       const testing::DeviceBuffer<uint8_t>& h8, float s) {
    Verified out;
    std::vector<uint16_t> hrow(static_cast<size_t>(U));
    std::vector<uint8_t> qrow(static_cast<size_t>(U));
    testing::CompareStats st;
    for (int64_t m : sample_rows(M)) {
      BENCH_CUDA(cudaMemcpy(hrow.data(), h.data() + m * U, size_t(U) * 2, cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(qrow.data(), h8.data() + m * U, size_t(U), cudaMemcpyDeviceToHost));
      for (int64_t j = 0; j < U; ++j) {
        const double r = host::to_float(DType::kBF16, hrow[size_t(j)]);
        st.add(m, j, double(host::fp8_e4m3_to_float(qrow[size_t(j)])) * s, r,
               (0.125 + std::ldexp(1.0, -8)) * std::fabs(r) + std::ldexp(1.0, -9) * s);
      }
    }
    out.check = to_check(st, 6e-2);
    return out;
  }

  // (c8d) on the sampled rows, bit for bit: each row's scale from the largest finite |h| of (c)'s bf16
  // h (the same GEMM, so the same bf16 values), each byte host::fp8_quantize(h, scale).
  Verified verify_e4m3_dynamic(int64_t M, int64_t U, const testing::DeviceBuffer<uint16_t>& h,
                               const testing::DeviceBuffer<uint8_t>& q, const testing::DeviceBuffer<float>& scales) {
    Verified out;
    std::vector<uint16_t> hrow(static_cast<size_t>(U));
    std::vector<uint8_t> qrow(static_cast<size_t>(U));
    int64_t bad = 0;
    std::string first;
    for (int64_t m : sample_rows(M)) {
      float got_scale = 0;
      BENCH_CUDA(cudaMemcpy(hrow.data(), h.data() + m * U, size_t(U) * 2, cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(qrow.data(), q.data() + m * U, size_t(U), cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(&got_scale, scales.data() + m, 4, cudaMemcpyDeviceToHost));
      float amax = 0;
      for (int64_t j = 0; j < U; ++j) {
        const float v = host::to_float(DType::kBF16, hrow[size_t(j)]);
        if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
      }
      const float want_scale = host::fp8_dynamic_scale(amax);
      if (got_scale != want_scale && bad++ == 0)
        first = "row " + std::to_string(m) + ": scale " + fmt(got_scale, 9) + ", want " + fmt(want_scale, 9);
      for (int64_t j = 0; j < U; ++j)
        if (qrow[size_t(j)] != host::fp8_quantize(host::to_float(DType::kBF16, hrow[size_t(j)]), want_scale) && bad++ == 0)
          first = "(" + std::to_string(m) + ", " + std::to_string(j) + ") differs";
    }
    out.mismatches = bad;
    out.check.count = int64_t(sample_rows(M).size()) * (U + 1);
    if (bad) out.check.fail("c8d: " + std::to_string(bad) + " mismatches, first " + first);
    return out;
  }

  cublasLtHandle_t lt_ = nullptr;
  testing::DeviceBuffer<unsigned char> ws_;
};

BLOCKFUSE_COMMAND(GatedUpFp8Bench, "bench gated-up-fp8",
                  "TFLOP/s of the FP8 fused gated up-projection vs cuBLASLt's FP8 GEMM alone and the bf16 fused kernel");

}  // namespace
}  // namespace blockfuse::bench
