// `blockfuse correctness`: the seed's correctness table, reproduced. For square MNK (M = K = 2U = n,
// i.e. the interleaved GEMM is n × n × n), `--draws` fresh Kaiming-uniform initialisations
// (PyTorch's nn.Linear default, U(-1/√fan_in, 1/√fan_in) with fan_in = K, used for x and w alike);
// each draw compares the fused kernel's bf16 output with the fp32 formula (cuBLAS fp32 GEMM + the
// gate in fp32) and records
//   max abs diff  = max |out − ref|
//   mean abs diff = mean |out − ref|
//   relative diff = ‖out − ref‖₂ / ‖ref‖₂
// reported as mean ± std over draws. Exits 1 if any draw has a non-finite output or a relative diff
// above 1e-2. scripts/correctness-table turns the JSON into docs/correctness.md.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "blockfuse/blockfuse.h"
#include "commands.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

struct MeanStd {
  double mean = 0, std = 0;
};
MeanStd mean_std(const std::vector<double>& v) {
  MeanStd r;
  for (double x : v) r.mean += x;
  r.mean /= double(v.size());
  for (double x : v) r.std += (x - r.mean) * (x - r.mean);
  r.std = v.size() > 1 ? std::sqrt(r.std / double(v.size() - 1)) : 0;
  return r;
}

int run(const Args& args) {
  if (args.has("help")) {
    std::printf("blockfuse correctness [--sizes 1024,2048,4096,8192] [--draws 100] [--dtype bf16|fp16] [--act silu|gelu_tanh] [--json FILE]\n");
    return 0;
  }
  if (!require_gpu("blockfuse correctness")) return 2;
  const auto sizes = args.get_int_list("sizes", {1024, 2048, 4096, 8192});
  const int draws = static_cast<int>(args.get_int("draws", 100));
  const std::string dts = args.get("dtype", "bf16"), acts = args.get("act", "silu");
  if (dts != "bf16" && dts != "fp16") throw Error("--dtype must be bf16 or fp16");
  if (acts != "silu" && acts != "gelu_tanh") throw Error("--act must be silu or gelu_tanh");
  if (draws < 1) throw Error("--draws must be >= 1");
  const DType dt = dts == "bf16" ? DType::kBF16 : DType::kFP16;
  const Activation act = acts == "silu" ? Activation::kSiLU : Activation::kGeluTanh;

  Json rows = Json::array();
  Table table({"MNK", "max abs diff", "mean abs diff", "relative diff", "draws"});
  bool ok = true;
  for (int64_t n : sizes) {
    if (n % 16 != 0 || n <= 0) throw Error("--sizes: " + std::to_string(n) + " must be a positive multiple of 16");
    const int64_t M = n, K = n, U = n / 2;
    void *x, *w, *out;
    float* ref;
    BENCH_CUDA(cudaMalloc(&x, 2 * M * K));
    BENCH_CUDA(cudaMalloc(&w, 2 * 2 * U * K));
    BENCH_CUDA(cudaMalloc(&out, 2 * M * U));
    BENCH_CUDA(cudaMalloc(&ref, 4 * M * U));
    std::vector<double> mx, mean, rel;
    const float bound = 1.f / std::sqrt(float(K));
    for (int d = 0; d < draws; ++d) {
      const uint64_t seed = 0x5eed0000ull + uint64_t(n) * 1000 + d;
      testing::fill_uniform(make_matrix(x, dt, M, K), -bound, bound, seed);
      testing::fill_uniform(make_matrix(w, dt, 2 * U, K), -bound, bound, seed ^ 0xabcdef);
      testing::fill_bits(make_matrix(out, dt, M, U), testing::nan_bits(dt));
      gated_up(make_matrix((const void*)x, dt, M, K), make_matrix((const void*)w, dt, 2 * U, K), make_matrix(out, dt, M, U), act);
      testing::gated_up_reference_gpu(make_matrix((const void*)x, dt, M, K), make_matrix((const void*)w, dt, 2 * U, K), ref, U, act);
      const auto st = testing::compare(make_matrix((const void*)out, dt, M, U), ref, U, 1e30, 0);
      mx.push_back(st.max_abs_diff);
      mean.push_back(st.mean_abs_diff());
      rel.push_back(st.rel_l2());
      if (st.nonfinite || !(st.rel_l2() <= 1e-2)) {
        ok = false;
        std::fprintf(stderr, "MNK=%ld draw %d: %ld non-finite, relative diff %.3g\n", long(n), d, long(st.nonfinite), st.rel_l2());
      }
    }
    cudaFree(x);
    cudaFree(w);
    cudaFree(out);
    cudaFree(ref);
    const auto a = mean_std(mx), b = mean_std(mean), c = mean_std(rel);
    char s1[64], s2[64], s3[64];
    std::snprintf(s1, sizeof s1, "%.2e ± %.2e", a.mean, a.std);
    std::snprintf(s2, sizeof s2, "%.2e ± %.2e", b.mean, b.std);
    std::snprintf(s3, sizeof s3, "%.2e ± %.2e", c.mean, c.std);
    table.add({std::to_string(n), s1, s2, s3, std::to_string(draws)});
    Json r = Json::object();
    r.set("mnk", n).set("M", M).set("K", K).set("U", U).set("draws", draws)
        .set("max_abs_diff_mean", a.mean).set("max_abs_diff_std", a.std)
        .set("mean_abs_diff_mean", b.mean).set("mean_abs_diff_std", b.std)
        .set("rel_diff_mean", c.mean).set("rel_diff_std", c.std);
    rows.push(r);
    std::fprintf(stderr, "MNK=%ld done\n", long(n));
  }
  Json out = Json::object();
  out.set("benchmark", "correctness").set("device", device_name()).set("date", now_iso8601()).set("dtype", dts)
      .set("activation", acts).set("init", "kaiming-uniform U(-1/sqrt(K), 1/sqrt(K)) for x and w")
      .set("reference", "fp32: cuBLAS GEMM with fp32 accumulation and output, gate in fp32")
      .set("relative_diff", "||out - ref||_2 / ||ref||_2").set("all_ok", ok).set("rows", rows);
  if (args.has("json")) write_file(args.get("json"), out.dump());
  std::printf("\nblockfuse correctness — %s, %s %s, fused kernel vs the fp32 formula (mean ± std over draws)\n", device_name().c_str(),
              dts.c_str(), acts.c_str());
  table.print();
  return ok ? 0 : 1;
}

BLOCKFUSE_COMMAND("correctness", run, "the seed's correctness table: fused kernel vs fp32 formula over Kaiming draws");

}  // namespace
}  // namespace blockfuse::bench
