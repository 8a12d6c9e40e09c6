// `blockfuse bench attention`: the sm80 attention forward kernel on the prefill shapes of the
// benchmarking plan: bf16, D = 128 (and 64), B = 2, Hq = 32, Hkv = 32 and 8, S = 512 .. 16384,
// causal and not. FLOPs = 4·B·Hq·S²·D, halved when causal (the work a causal kernel must do).
//
// Each point is verified first against the fp32 GPU reference (testing/attention_reference.h) on a
// subset of query rows (every row_step-th, all heads), then timed: --reps calls back to back after
// --warmup, CUDA events around each, median. The inputs (≥ 8 MB per tensor at S = 512) are not
// rotated: attention re-reads K and V from L2 by design, and a model's prefill does the same.
// The ceiling is the cuBLAS bf16 GEMM (8192³) measured in the same run. The baseline, PyTorch
// SDPA's flash (FlashAttention-2) and cuDNN backends, is measured by bench/attention/sdpa_baseline.py.
//
// Output: progress on stderr, a table on stdout, with --json FILE the run and its rows.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "blockfuse/attention.h"
#include "commands.h"
#include "common/host_float.h"
#include "testing/attention_reference.h"
#include "testing/device_buffer.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

using testing::DeviceBuffer;

struct Point {
  int64_t d, s, hkv;
  bool causal;
  int config;  // index into attention_config(d, ·)
};

// Verifies out against the GPU reference on rows s % step == 0; returns the max |diff| and counts
// violations of |diff| <= 2u + 2u|ref| (u = bf16 unit roundoff, |v| <= 1).
double verify(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v, const AttnTensor& out,
              const AttentionParams& p, int step, int64_t& bad, int64_t& checked) {
  const int64_t n = q.batch * q.seqlen * q.heads * q.head_dim;
  DeviceBuffer<float> ref(static_cast<size_t>(n)), lse(static_cast<size_t>(q.batch * q.heads * q.seqlen));
  testing::attention_reference_gpu(q, k, v, p, ref.data(), lse.data(), step);
  std::vector<float> h_ref(static_cast<size_t>(n));
  std::vector<uint16_t> h_out(static_cast<size_t>(n));
  BENCH_CUDA(cudaMemcpy(h_ref.data(), ref.data(), ref.bytes(), cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(h_out.data(), out.data, size_t(n) * 2, cudaMemcpyDeviceToHost));
  const double u = 1.0 / 256;
  double worst = 0;
  bad = checked = 0;
  const int64_t row = q.heads * q.head_dim;
  for (int64_t b = 0; b < q.batch; ++b)
    for (int64_t s = 0; s < q.seqlen; s += step)
      for (int64_t i = 0; i < row; ++i) {
        const size_t at = size_t((b * q.seqlen + s) * row + i);
        const double got = host::to_float(q.dtype, h_out[at]), want = h_ref[at];
        const double diff = std::fabs(got - want);
        if (!(diff <= 2 * u + 2 * u * std::fabs(want))) ++bad;
        worst = std::max(worst, std::isnan(diff) ? INFINITY : diff);
        ++checked;
      }
  return worst;
}

int run(const Args& args) {
  if (!require_gpu("bench attention")) return 2;
  const auto ds = args.get_int_list("d", {128, 64});
  const auto ss = args.get_int_list("s", {512, 1024, 4096, 16384});
  const auto hkvs = args.get_int_list("hkv", {32, 8});
  const auto causals = args.get_int_list("causal", {0, 1});
  const int64_t B = args.get_int("b", 2), Hq = args.get_int("hq", 32);
  const int warmup = int(args.get_int("warmup", 3)), reps = int(args.get_int("reps", 10));
  const bool all_configs = args.has("all-configs");
  const DType dt = args.get("dtype", "bf16") == "fp16" ? DType::kFP16 : DType::kBF16;
  if (args.has("json") && args.get("json").empty()) throw Error("--json needs a file name");

  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double ceiling = measure_cublas_bf16_tflops(stream);
  std::fprintf(stderr, "cuBLAS bf16 8192^3 ceiling: %.0f TFLOP/s\n", ceiling);

  Table table({"D", "S", "Hkv", "causal", "tile", "us", "TFLOP/s", "of cuBLAS", "verified"});
  Json rows = Json::array();
  int failures = 0;
  for (int64_t d : ds)
    for (int64_t s : ss)
      for (int64_t hkv : hkvs) {
        DeviceBuffer<uint16_t> qb(size_t(B * s * Hq * d)), kb(size_t(B * s * hkv * d)), vb(size_t(B * s * hkv * d)),
            ob(size_t(B * s * Hq * d));
        DeviceBuffer<float> lse(size_t(B * Hq * s));
        testing::fill_uniform(Matrix{qb.data(), dt, B * s * Hq, d, d}, -2.0f, 2.0f, 11 + s, stream);
        testing::fill_uniform(Matrix{kb.data(), dt, B * s * hkv, d, d}, -2.0f, 2.0f, 12 + s, stream);
        testing::fill_uniform(Matrix{vb.data(), dt, B * s * hkv, d, d}, -1.0f, 1.0f, 13 + s, stream);
        const AttnConstTensor q = make_attn_tensor(qb.data(), dt, B, s, Hq, d);
        const AttnConstTensor k = make_attn_tensor(kb.data(), dt, B, s, hkv, d);
        const AttnConstTensor v = make_attn_tensor(vb.data(), dt, B, s, hkv, d);
        const AttnTensor out = make_attn_tensor(ob.data(), dt, B, s, Hq, d);
        for (int64_t causal : causals) {
          AttentionParams p;
          p.causal = causal != 0;
          const int n_cfg = all_configs ? attention_num_configs(d) : 1;
          for (int ci = 0; ci < n_cfg; ++ci) {
            const AttentionConfig cfg = attention_config(d, ci);
            const std::string tile = std::to_string(cfg.block_m) + "x" + std::to_string(cfg.block_n) + "w" + std::to_string(cfg.warps);
            std::fprintf(stderr, "D %ld S %ld Hkv %ld causal %ld tile %s\n", long(d), long(s), long(hkv), long(causal), tile.c_str());
            testing::fill_bits(Matrix{ob.data(), dt, B * s * Hq, d, d}, testing::nan_bits(dt), stream);
            attention(q, k, v, out, lse.data(), p, cfg, stream);
            BENCH_CUDA(cudaStreamSynchronize(stream));
            int64_t bad = 0, checked = 0;
            const int step = int(std::max<int64_t>(1, s / 256));
            const double worst = verify(q, k, v, out, p, step, bad, checked);
            if (bad) {
              ++failures;
              std::fprintf(stderr, "  VERIFY FAILED: %ld of %ld elements off, max |diff| %.3g\n", long(bad), long(checked), worst);
            }
            const Timing t = time_it([&](int) { attention(q, k, v, out, lse.data(), p, cfg, stream); }, stream, warmup, reps);
            const double flops = 4.0 * B * Hq * double(s) * double(s) * d * (p.causal ? 0.5 : 1.0);
            const double tflops = flops / (t.median_ms * 1e-3) / 1e12;
            table.add({std::to_string(d), std::to_string(s), std::to_string(hkv), causal ? "yes" : "no", tile,
                       fmt(t.median_ms * 1e3, 1), fmt(tflops, 1), fmt(100 * tflops / ceiling, 1) + " %",
                       bad ? "FAILED" : "ok (" + fmt(worst, 4) + ")"});
            Json r = Json::object();
            r.set("head_dim", d).set("seqlen", s).set("batch", B).set("heads_q", Hq).set("heads_kv", hkv);
            r.set("causal", causal != 0).set("tile", tile).set("config_index", ci);
            r.set("median_us", t.median_ms * 1e3).set("min_us", t.min_ms * 1e3).set("tflops", tflops);
            r.set("fraction_of_cublas", tflops / ceiling).set("verified", bad == 0).set("max_abs_diff", worst);
            r.set("checked_elements", checked);
            rows.push(r);
          }
        }
      }
  table.print();
  std::printf("cuBLAS bf16 ceiling (same run): %.0f TFLOP/s; FLOPs = 4*B*Hq*S^2*D (/2 causal)\n", ceiling);
  if (args.has("json")) {
    Json o = Json::object();
    o.set("benchmark", "attention").set("device", device_name()).set("time", now_iso8601());
    o.set("dtype", dt == DType::kBF16 ? "bf16" : "fp16").set("cublas_bf16_tflops", ceiling);
    o.set("timing", "median of reps back-to-back calls, CUDA events").set("reps", reps).set("warmup", warmup);
    o.set("rows", rows);
    write_file(args.get("json"), o.dump());
  }
  cudaStreamDestroy(stream);
  if (failures) {
    std::fprintf(stderr, "bench attention: %d points failed verification\n", failures);
    return 1;
  }
  return 0;
}

}  // namespace

BLOCKFUSE_COMMAND("bench attention", run, "TFLOP/s of the sm80 attention forward (--d, --s, --hkv, --causal, --all-configs, --json)");

}  // namespace blockfuse::bench
