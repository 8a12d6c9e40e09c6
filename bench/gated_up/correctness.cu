// `blockfuse correctness`: the correctness table of docs/gated_up.md (Figures). For square MNK (M = K = 2U = n,
// i.e. the interleaved GEMM is n × n × n), `--draws` fresh Kaiming-uniform initialisations
// (PyTorch's nn.Linear default, U(-1/√fan_in, 1/√fan_in) with fan_in = K, used for x and w alike);
// each draw compares the fused kernel's bf16 output with the fp32 formula (cuBLAS fp32 GEMM + the
// gate in fp32) and records
//   max abs diff  = max |out − ref|
//   mean abs diff = mean |out − ref|
//   relative diff = ‖out − ref‖₂ / ‖ref‖₂
// reported as mean ± std over draws. Exits 1 if any draw has a non-finite output or a relative diff
// above 1e-2. scripts/correctness-table turns the JSON into that table.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "blockfuse/blockfuse.h"
#include "harness.h"
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

class Correctness final : public Command {
  std::vector<int64_t> sizes_ = {1024, 2048, 4096, 8192};
  int draws_ = 100;
  std::string dtype_ = "bf16", act_ = "silu", json_;

  void options(Options& o) override {
    o.about("The fused kernel's bf16 output against the fp32 formula over fresh Kaiming-uniform draws, square MNK.");
    o.ints("--sizes", sizes_, 16, int64_t{1} << 16, "MNK", std::nullopt, 16);
    o.integer("--draws", draws_, 1, 1000000, "fresh initialisations per size");
    o.choice("--dtype", dtype_, {"bf16", "fp16"}, "element type");
    o.choice("--act", act_, {"silu", "gelu_tanh"}, "activation");
    o.path("--json", json_, "write the table as JSON");
  }

  int execute(const std::string&) override {
    if (!require_gpu("blockfuse correctness")) return 2;
    const DType dt = dtype_ == "bf16" ? DType::kBF16 : DType::kFP16;
    const Activation act = act_ == "silu" ? Activation::kSiLU : Activation::kGeluTanh;
    BenchSettings settings;
    settings.json = json_;
    settings.ceilings = false;
    settings.reps = 0;
    Bench b("correctness", settings);
    b.title("blockfuse correctness — " + b.device().name + ", " + dtype_ + " " + act_ +
            ", fused kernel vs the fp32 formula (mean ± std over draws)");
    b.columns({"MNK", "max abs diff", "mean abs diff", "relative diff", "draws"});
    b.info()["dtype"] = dtype_;
    b.info()["activation"] = act_;
    b.info()["init"] = "kaiming-uniform U(-1/sqrt(K), 1/sqrt(K)) for x and w";
    b.info()["reference"] = "fp32: cuBLAS GEMM with fp32 accumulation and output, gate in fp32";
    b.info()["relative_diff"] = "||out - ref||_2 / ||ref||_2";
    bool ok = true;
    for (int64_t n : sizes_) {
      const int64_t M = n, K = n, U = n / 2;
      testing::DeviceBuffer<uint16_t> x(size_t(M * K)), w(size_t(2 * U * K)), out(size_t(M * U));
      testing::DeviceBuffer<float> ref(size_t(M * U));
      const ConstMatrix X = make_matrix(static_cast<const void*>(x.data()), dt, M, K);
      const ConstMatrix W = make_matrix(static_cast<const void*>(w.data()), dt, 2 * U, K);
      std::vector<double> mx, mean, rel;
      const float bound = 1.f / std::sqrt(float(K));
      for (int d = 0; d < draws_; ++d) {
        const uint64_t seed = 0x5eed0000ull + uint64_t(n) * 1000 + d;
        testing::fill_uniform(make_matrix(x.data(), dt, M, K), -bound, bound, seed);
        testing::fill_uniform(make_matrix(w.data(), dt, 2 * U, K), -bound, bound, seed ^ 0xabcdef);
        testing::fill_bits(make_matrix(out.data(), dt, M, U), testing::nan_bits(dt));
        gated_up(X, W, make_matrix(out.data(), dt, M, U), act);
        testing::gated_up_reference_gpu(X, W, ref.data(), U, act);
        const auto st = testing::compare(make_matrix(static_cast<const void*>(out.data()), dt, M, U), ref.data(), U, 1e30, 0);
        mx.push_back(st.max_abs_diff);
        mean.push_back(st.mean_abs_diff());
        rel.push_back(st.rel_l2());
        if (st.nonfinite || !(st.rel_l2() <= 1e-2)) {
          ok = false;
          b.log("MNK=%ld draw %d: %ld non-finite, relative diff %.3g", long(n), d, long(st.nonfinite), st.rel_l2());
        }
      }
      const auto a = mean_std(mx), m = mean_std(mean), c = mean_std(rel);
      auto pm = [](const MeanStd& v) {
        char s[64];
        std::snprintf(s, sizeof s, "%.2e ± %.2e", v.mean, v.std);
        return std::string(s);
      };
      b.row({std::to_string(n), pm(a), pm(m), pm(c), std::to_string(draws_)})
          .set("mnk", n).set("M", M).set("K", K).set("U", U).set("draws", draws_)
          .set("max_abs_diff_mean", a.mean).set("max_abs_diff_std", a.std)
          .set("mean_abs_diff_mean", m.mean).set("mean_abs_diff_std", m.std)
          .set("rel_diff_mean", c.mean).set("rel_diff_std", c.std);
      b.log("MNK=%ld done", long(n));
    }
    b.info()["all_ok"] = ok;
    Check c;
    if (!ok) c.fail("a draw had non-finite outputs or a relative diff above 1e-2");
    b.verify("all draws", c);
    return b.finish();
  }
};

BLOCKFUSE_COMMAND(Correctness, "correctness", "the fused kernel vs the fp32 formula over Kaiming draws: the correctness table");

}  // namespace
}  // namespace blockfuse::bench
