// `blockfuse bench fused-mlp`: the whole decode MLP y = down(act(x·W_gateᵀ) ⊙ x·W_upᵀ) in one launch
// (blockfuse::fused_mlp, dense; fused_mlp_sparse with union and per-token lists) beside the unfused
// pipeline — cuBLAS GEMM [M, 2U] → blockfuse::swiglu → cuBLAS GEMM — in the same process on the
// same weights. The unfused down GEMM reads the same [U, K] matrix (y = h · w_down_t, OP_N).
//
// Memory-bound: bytes = the weight rows actually read (3 · active neurons · K · 2) + x + y, against
// the device copy bandwidth measured in this run. Timing: Method::graph — --calls calls in one CUDA
// graph, replayed --reps times, median per call; the weights are rotated over as many copies as fit in
// --max-gib (>= 3x L2 where possible) and the sparse lists over 8 random lists of the same density,
// so no call finds its rows in L2. Each point is verified once before timing (dense against the
// unfused pipeline: relative L2 < 2e-2; sparse with all blocks against dense); a failure makes the
// exit status 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "blockfuse/fused_mlp.h"
#include "blockfuse/swiglu.h"
#include "common/device.h"
#include "fused_mlp/params.h"
#include "common/host_float.h"
#include "harness.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

struct Shape {
  const char* key;
  int64_t k, u;
};
const Shape kShapes[] = {{"llama3-8b", 4096, 14336}, {"llama3-70b", 8192, 28672}, {"llama2-7b", 4096, 11008}};

// Relative L2 difference of two bf16/fp16 device vectors (host copies), as a Check: fails at
// rel_l2 >= 2e-2 or on any non-finite value (a poisoned element the kernel left behind).
Check rel_l2_check(DType dt, const void* a, const void* b, int64_t n) {
  std::vector<uint16_t> ha(static_cast<size_t>(n)), hb(static_cast<size_t>(n));
  BENCH_CUDA(cudaMemcpy(ha.data(), a, size_t(n) * 2, cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(hb.data(), b, size_t(n) * 2, cudaMemcpyDeviceToHost));
  double d = 0, r = 0, max_abs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double va = host::to_float(dt, ha[size_t(i)]), vb = host::to_float(dt, hb[size_t(i)]);
    d += (va - vb) * (va - vb);
    r += vb * vb;
    max_abs = std::max(max_abs, std::fabs(va - vb));
  }
  Check c;
  c.count = n;
  c.sum_sq_diff = d, c.sum_sq_ref = r, c.max_abs = max_abs;
  c.rel_l2 = std::isfinite(d) && r > 0 ? std::sqrt(d / r) : 1e30;
  if (!(c.rel_l2 < 2e-2)) c.fail("relative L2 " + fmt(c.rel_l2, 6) + " vs the reference (needs < 2e-2)");
  return c;
}

class FusedMlpBench final : public BenchCommand {
  std::vector<std::string> shapes_ = {"llama3-8b", "llama3-70b", "llama2-7b"};
  std::vector<int64_t> ms_ = {1, 4, 16, 32}, sparsities_ = {50, 75, 90}, nbs_ = {0}, sparse_nbs_ = {0}, warps_ = {0};
  std::vector<std::string> splits_ = {"auto"};
  int calls_ = 10, max_gib_ = 24;

  Defaults defaults() const override { return {30, 20, 3}; }

  void options(Options& o) override {
    std::string about =
        "The whole decode MLP in one launch (blockfuse::fused_mlp dense, fused_mlp_sparse with union and per-token "
        "lists) vs cuBLAS GEMM [M,2U] -> blockfuse::swiglu -> cuBLAS GEMM, bf16, SiLU. GB/s of the weight rows read "
        "+ x + y as a fraction of the device copy bandwidth measured in this run; per-call median of --calls calls in "
        "one CUDA graph, weights rotated past L2. Shapes:";
    for (const auto& s : kShapes) about += std::string("\n  ") + s.key + ": K=" + std::to_string(s.k) + " U=" + std::to_string(s.u);
    o.about(about);
    std::vector<std::string> names;
    for (const auto& s : kShapes) names.push_back(s.key);
    o.words("--shapes", shapes_, names, "model shapes", std::vector<std::string>{"llama3-8b"});
    o.ints("--m", ms_, 1, 32, "token rows M", std::vector<int64_t>{1, 16});
    o.ints("--sparsity", sparsities_, 0, 99, "percent of the 32-neuron blocks skipped by the sparse lists",
           std::vector<int64_t>{50});
    o.ints("--nb", nbs_, 0, 64, "dense neurons_per_block sweep: 0 (the heuristic), 16, 32, 64");
    o.ints("--sparse-nb", sparse_nbs_, 0, 64,
           "union-list neurons_per_block sweep: 0 (the heuristic's, chosen on the device from the count), 16, 32, 64");
    o.words("--split", splits_, {"auto", "never", "always"},
            "union lists with the heuristic's block size (--sparse-nb 0) at M <= 8 on sm_90: split each 16-neuron "
            "group over a 2-CTA cluster where the list is short (auto), never, or always; rows other than auto are "
            "named sparse-S-split-RULE");
    o.ints("--warps", warps_, 0, 16,
           "warps a block at M <= 8 (FusedMlpConfig::block_warps; the rule: src/fused_mlp/params.h auto_block_warps): 0 (the library's "
           "rule), 8, 16; rows other than 0 are named VARIANT-wN and skip M > 8");
    o.integer("--calls", calls_, 1, 100000, "calls per captured graph");
    o.integer("--max-gib", max_gib_, 1, 1 << 20, "GiB at most for the rotated weight copies");
  }

  void run(Bench& b) override {
    for (int64_t nb : nbs_)
      if (nb != 0 && nb != 16 && nb != 32 && nb != 64) throw Error("--nb: " + std::to_string(nb) + " is not 0, 16, 32 or 64");
    for (int64_t w : warps_)
      if (w != 0 && w != 8 && w != 16) throw Error("--warps: " + std::to_string(w) + " is not 0, 8 or 16");
    for (int64_t nb : sparse_nbs_)
      if (nb != 0 && nb != 16 && nb != 32 && nb != 64)
        throw Error("--sparse-nb: " + std::to_string(nb) + " is not 0, 16, 32 or 64");
    const double copy = b.copy_gbs();
    b.title("blockfuse bench fused-mlp — " + b.device().name + " (cc " + b.device().cc + ", " +
            std::to_string(b.device().sms) + " SMs), bf16, SiLU; copy bandwidth " + fmt(copy, 0) + " GB/s this run");
    b.title("per-call median of " + std::to_string(b.reps()) + " graph replays x " + std::to_string(calls_) +
            " calls (after " + std::to_string(b.warmup()) + " warm-up); bytes = weight rows read + x + y");
    b.columns({"shape", "M", "variant", "nb", "us", "GB read", "%copy", "unfused us", "x unfused", "x dense", "verified"});
    b.info()["copy_gbs"] = copy;
    b.info()["sms"] = b.device().sms;
    b.info()["dtype"] = "bf16";
    b.info()["activation"] = "silu";
    b.info()["calls_per_graph"] = calls_;
    b.info()["baseline"] = "cublasGemmEx [M,2U] -> blockfuse::swiglu -> cublasGemmEx [M,K], in a CUDA graph";
    for (const std::string& key : shapes_)
      for (const auto& sh : kShapes)
        if (key == sh.key)
          for (int64_t w : warps_) shape(b, sh, int(w));
  }

  void shape(Bench& b, const Shape& sh, int warps);
};

void FusedMlpBench::shape(Bench& b, const Shape& sh, int warps) {
  using testing::DeviceBuffer;
  const DType dt = DType::kBF16;
  const Activation act = Activation::kSiLU;
  const cudaStream_t s = b.stream();
  // The library's rules but for the forced block width (warps 0: the rule).
  const FusedMlpConfig defaults{0, MlpReduction::kAtomic, MlpSplitRule::kAuto, warps};
  const int sms = b.device().sms;
  const std::string key = sh.key;
  const int64_t K = sh.k, U = sh.u, nblk = U / 32;
  const double wbytes = 6.0 * double(U) * double(K);
  const int sets = std::max(1, std::min(rotation_sets(int64_t(wbytes * 0.1)), int(max_gib_ * 1073741824.0 / wbytes)));
  if (!b.fits(size_t(double(sets) * wbytes), key + " (" + std::to_string(sets) + " weight copies)")) return;
  b.log("%s K=%ld U=%ld: %d weight copies", key.c_str(), long(K), long(U), sets);
  std::vector<DeviceBuffer<uint16_t>> wgu, wd;
  for (int i = 0; i < sets; ++i) {
    wgu.emplace_back(static_cast<size_t>(2 * U * K));
    wd.emplace_back(static_cast<size_t>(U * K));
    const float sc = 2.f / std::sqrt(float(K));
    testing::fill_uniform(make_matrix(wgu.back().data(), dt, 2 * U, K), -sc, sc, 11 + i, s);
    testing::fill_uniform(make_matrix(wd.back().data(), dt, U, K), -1.f / std::sqrt(float(U)), 1.f / std::sqrt(float(U)),
                          23 + i, s);
  }
  DeviceBuffer<uint16_t> xb(static_cast<size_t>(32 * K)), yb(static_cast<size_t>(32 * K)), yr(static_cast<size_t>(32 * K)),
      ys(static_cast<size_t>(32 * K)), gu(static_cast<size_t>(32 * 2 * U)), hb(static_cast<size_t>(32 * U));
  testing::fill_uniform(make_matrix(xb.data(), dt, 32, K), -1.f, 1.f, 5, s);
  // One workspace for every configuration below: both reductions share it (the deterministic
  // region sits after the atomic accumulator), so size it for the largest of both over M and nb.
  size_t ws_need = 0;
  for (int64_t M : ms_)
    for (int nb : {16, 32, 64})
      for (MlpReduction red : {MlpReduction::kAtomic, MlpReduction::kDeterministic})
        ws_need = std::max(ws_need, fused_mlp_workspace_size(M, K, U / 16, FusedMlpConfig{nb, red, MlpSplitRule::kAuto, warps}));
  DeviceBuffer<unsigned char> ws(ws_need);
  if (ws_need) BENCH_CUDA(cudaMemsetAsync(ws.data(), 0, ws.bytes(), s));
  // 8 random union lists per sparsity (same count), and per-token lists.
  DeviceBuffer<int32_t> lists(static_cast<size_t>(8 * nblk)), counts(8), tok_idx(static_cast<size_t>(32 * nblk)), tok_cnt(32),
      all_idx(static_cast<size_t>(nblk)), all_cnt(1);
  {
    std::vector<int32_t> a(static_cast<size_t>(nblk));
    for (int64_t i = 0; i < nblk; ++i) a[size_t(i)] = int32_t(i);
    const int32_t n = int32_t(nblk);
    BENCH_CUDA(cudaMemcpy(all_idx.data(), a.data(), a.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(all_cnt.data(), &n, 4, cudaMemcpyHostToDevice));
  }
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t ct = CUDA_R_16BF;
  const Method method = Method::graph(calls_);
  const double copy = b.copy_gbs();

  const std::string wsuf = warps == fmlp::kAutoBlockWarps ? "" : "-w" + std::to_string(warps);
  for (int64_t M : ms_) {
    if (!wsuf.empty() && M > 8) continue;  // wider blocks run at M <= 8 only
    const ConstMatrix X = make_matrix(static_cast<const void*>(xb.data()), dt, M, K);
    const Matrix Y = make_matrix(yb.data(), dt, M, K);
    auto WGU = [&](int i) { return make_matrix(static_cast<const void*>(wgu[size_t(i % sets)].data()), dt, 2 * U, K); };
    auto WD = [&](int i) { return make_matrix(static_cast<const void*>(wd[size_t(i % sets)].data()), dt, U, K); };
    // Unfused: gate_up = x · Wguᵀ; h = swiglu(gate_up); y = h · w_down_t.
    auto unfused = [&](int i, void* out) {
      BENCH_CUBLAS(cublasGemmEx(b.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, int(2 * U), int(M), int(K), &one, WGU(i).data, ct,
                                int(K), xb.data(), ct, int(K), &zero, gu.data(), ct, int(2 * U), CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
      swiglu(make_matrix(static_cast<const void*>(gu.data()), dt, M, 2 * U), make_matrix(hb.data(), dt, M, U), act,
             GateUpLayout::kInterleaved, s);
      BENCH_CUBLAS(cublasGemmEx(b.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, int(K), int(M), int(U), &one, WD(i).data, ct, int(K),
                                hb.data(), ct, int(U), &zero, out, ct, int(K), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    unfused(0, yr.data());
    const Timing tu = b.time([&](int i) { unfused(i, yr.data()); }, method);
    unfused(0, yr.data());  // the reference: weight copy 0
    BENCH_CUDA(cudaStreamSynchronize(s));
    const double io = 4.0 * double(M) * double(K);  // x + y, bf16
    double dense_us = 0;
    const std::string at = key + " M=" + std::to_string(M);

    auto report = [&](const std::string& variant_, int nb, const Timing& t, double read_bytes, const Check& chk, bool ok,
                      double union_density) {
      const std::string variant = variant_ + wsuf;
      const double us = t.us(), gbs = read_bytes / (t.median_ms * 1e-3) / 1e9;
      b.log("%s %s nb=%d: %.2f us, %.0f GB/s (%s%% copy), unfused %.2f us, rel_l2 %.2e%s", at.c_str(), variant.c_str(), nb,
            us, gbs, b.pct_of_copy(gbs).c_str(), tu.us(), chk.rel_l2, ok ? "" : " FAILED");
      b.row({key, std::to_string(M), variant, std::to_string(nb), fmt(us, 2), fmt(read_bytes / 1e9, 3), b.pct_of_copy(gbs),
             fmt(tu.us(), 2), fmt(tu.us() / us, 2), dense_us > 0 ? fmt(dense_us / us, 2) : "-", ok ? "yes" : "NO"})
          .set("shape", key).set("k", K).set("u", U).set("m", M).set("variant", variant).set("neurons_per_block", nb)
          .set("us", us).set("us_min", t.min_us()).set("bytes_read", read_bytes).set("gbs", gbs)
          .set("frac_of_copy", copy > 0 ? gbs / copy : 0.0).set("unfused_us", tu.us())
          .set("speedup_vs_unfused", tu.median_ms / t.median_ms).set("speedup_vs_dense", dense_us > 0 ? dense_us / us : 0.0)
          .set("union_density", union_density).set("verify_rel_l2", chk.rel_l2).set("verified", ok);
    };

    // Dense: heuristic (nb 0) and any --nb sweep, atomic; the heuristic's also deterministic.
    // Each verified (poisoned y vs the unfused pipeline on weight copy 0) before it is timed.
    const int heur = fused_mlp_heuristic(M, K, U / 16, sms).neurons_per_block;
    for (int64_t nb : nbs_)
      for (MlpReduction red : {MlpReduction::kAtomic, MlpReduction::kDeterministic}) {
        if (red == MlpReduction::kDeterministic && nb != 0) continue;
        const FusedMlpConfig cfg{int(nb), red, MlpSplitRule::kAuto, warps};
        const std::string variant = red == MlpReduction::kAtomic ? "dense" : "dense-deterministic";
        testing::fill_bits(Y, testing::nan_bits(dt), s);
        fused_mlp(X, WGU(0), WD(0), Y, act, ws.data(), ws.bytes(), cfg, s);
        BENCH_CUDA(cudaStreamSynchronize(s));
        const Check chk = rel_l2_check(dt, yb.data(), yr.data(), M * K);
        const bool ok = b.verify(at + " " + variant + " nb=" + std::to_string(nb ? int(nb) : heur), chk);
        const Timing t = b.time([&](int i) { fused_mlp(X, WGU(i), WD(i), Y, act, ws.data(), ws.bytes(), cfg, s); }, method);
        if (nb == 0 && red == MlpReduction::kAtomic) dense_us = t.us();
        report(variant, nb ? int(nb) : heur, t, wbytes + io, chk, ok, 1.0);
      }
    // Sparse, union lists of blocks of 32 (the heuristic's block size for the active groups). The
    // sparse path with every block listed must equal dense: checked once per M before timing.
    testing::fill_bits(Y, testing::nan_bits(dt), s);
    fused_mlp_sparse(X, WGU(0), WD(0), Y, act, NeuronBlockList{all_idx.data(), all_cnt.data(), nblk, 32}, ws.data(), ws.bytes(),
                     defaults, s);
    BENCH_CUDA(cudaStreamSynchronize(s));
    const Check all_chk = rel_l2_check(dt, yb.data(), yr.data(), M * K);
    const bool sparse_ok = b.verify(at + " sparse all-blocks", all_chk);
    for (int64_t sp : sparsities_) {
      const int64_t active = std::max<int64_t>(1, nblk * (100 - sp) / 100);
      std::mt19937_64 rng(uint64_t(sp * 1000 + M));
      std::vector<int32_t> host(static_cast<size_t>(8 * nblk)), cnt(8, int32_t(active));
      for (int l = 0; l < 8; ++l) {
        std::vector<int32_t> perm(static_cast<size_t>(nblk));
        for (int64_t i = 0; i < nblk; ++i) perm[size_t(i)] = int32_t(i);
        std::shuffle(perm.begin(), perm.end(), rng);
        std::sort(perm.begin(), perm.begin() + active);
        std::copy(perm.begin(), perm.begin() + active, host.begin() + l * nblk);
      }
      BENCH_CUDA(cudaMemcpy(lists.data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
      BENCH_CUDA(cudaMemcpy(counts.data(), cnt.data(), cnt.size() * 4, cudaMemcpyHostToDevice));
      auto L = [&](int i) { return NeuronBlockList{lists.data() + (i % 8) * nblk, counts.data() + (i % 8), nblk, 32}; };
      const double frac = double(active) / double(nblk);
      // 0: the heuristic's block size, which the kernel takes on the device from the list's count
      // (reported as the host heuristic for the same count: the same model); else forced. A forced
      // size is verified first: poisoned y against the same list under the heuristic's size (whose
      // path all_chk checked against the unfused pipeline with every block listed).
      for (int64_t forced : sparse_nbs_)
      for (const std::string& split : forced ? std::vector<std::string>{"auto"} : splits_) {
        const MlpSplitRule rule = split == "never" ? MlpSplitRule::kNever
                                  : split == "always" ? MlpSplitRule::kAlways : MlpSplitRule::kAuto;
        const FusedMlpConfig cfg{int(forced), MlpReduction::kAtomic, rule, warps};
        // (a split unit's group is 16 neurons: reported as such where the rule splits this list)
        const detail::DeviceSpec spec = detail::current_device_spec();
        const int bw = fmlp::launch_block_warps(M, b.device().major, forced == 0, false,
                                                fmlp::dram_gbps_per_sm(spec.dram_gbps, spec.sm_count), warps);
        const bool splits = !forced && fmlp::split_units(M, rule, b.device().major >= 9, active * 2, sms, bw);
        const int nb = forced ? int(forced) : splits ? 16 : fused_mlp_heuristic(M, K, active * 2, sms).neurons_per_block;
        Check chk = all_chk;
        bool ok = sparse_ok;
        if (forced || split != "auto") {
          // (the reference call under the default rules)
          fused_mlp_sparse(X, WGU(0), WD(0), Y, act, L(0), ws.data(), ws.bytes(), defaults, s);
          BENCH_CUDA(cudaMemcpyAsync(ys.data(), yb.data(), size_t(M * K) * 2, cudaMemcpyDeviceToDevice, s));
          testing::fill_bits(Y, testing::nan_bits(dt), s);
          fused_mlp_sparse(X, WGU(0), WD(0), Y, act, L(0), ws.data(), ws.bytes(), cfg, s);
          BENCH_CUDA(cudaStreamSynchronize(s));
          chk = rel_l2_check(dt, yb.data(), ys.data(), M * K);
          ok = b.verify(at + " sparse-" + std::to_string(sp) + " nb=" + std::to_string(nb) + " split " + split +
                            " vs the default rules", chk);
        }
        const Timing t = b.time(
            [&](int i) { fused_mlp_sparse(X, WGU(i), WD(i), Y, act, L(i), ws.data(), ws.bytes(), cfg, s); }, method);
        report("sparse-" + std::to_string(sp) + (forced ? "-nb" + std::to_string(forced) : "") +
                   (split != "auto" ? "-split-" + split : ""),
               nb, t, wbytes * frac + io, chk, ok, frac);
      }
      // Per-token lists at M > 1: each token its own random blocks of the same density.
      if (M > 1) {
        std::vector<int32_t> ti(static_cast<size_t>(M * nblk)), tc(static_cast<size_t>(M), int32_t(active));
        std::vector<char> in_union(static_cast<size_t>(nblk), 0);
        for (int64_t m = 0; m < M; ++m) {
          std::vector<int32_t> perm(static_cast<size_t>(nblk));
          for (int64_t i = 0; i < nblk; ++i) perm[size_t(i)] = int32_t(i);
          std::shuffle(perm.begin(), perm.end(), rng);
          std::sort(perm.begin(), perm.begin() + active);
          for (int64_t i = 0; i < active; ++i) {
            ti[size_t(m * nblk + i)] = perm[size_t(i)];
            in_union[size_t(perm[size_t(i)])] = 1;
          }
        }
        int64_t nu = 0;
        for (char v : in_union) nu += v;
        BENCH_CUDA(cudaMemcpy(tok_idx.data(), ti.data(), ti.size() * 4, cudaMemcpyHostToDevice));
        BENCH_CUDA(cudaMemcpy(tok_cnt.data(), tc.data(), tc.size() * 4, cudaMemcpyHostToDevice));
        const PerTokenNeuronBlocks P{tok_idx.data(), tok_cnt.data(), nblk, 32};
        const Timing tp = b.time(
            [&](int i) { fused_mlp_sparse(X, WGU(i), WD(i), Y, act, P, ws.data(), ws.bytes(), defaults, s); }, method);
        const double ud = double(nu) / double(nblk);
        report("per-token-" + std::to_string(sp), fused_mlp_heuristic(M, K, U / 16, sms).neurons_per_block, tp,
               wbytes * ud + io, all_chk, sparse_ok, ud);
      }
    }
  }
}

}  // namespace

BLOCKFUSE_COMMAND(FusedMlpBench, "bench fused-mlp", "the whole decode MLP in one launch, dense and sparse, vs cuBLAS+swiglu+cuBLAS");

}  // namespace blockfuse::bench
