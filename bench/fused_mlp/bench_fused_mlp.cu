// `blockfuse bench fused-mlp`: the whole decode MLP y = down(act(x·W_gateᵀ) ⊙ x·W_upᵀ) in one launch
// (blockfuse::fused_mlp, dense; fused_mlp_sparse with union and per-token lists) beside the unfused
// pipeline — cuBLAS GEMM [M, 2U] → blockfuse::swiglu → cuBLAS GEMM — in the same process on the
// same weights. The unfused down GEMM reads the same [U, K] matrix (y = h · w_down_t, OP_N).
//
// Memory-bound: bytes = the weight rows actually read (3 · active neurons · K · 2) + x + y, against
// the device copy bandwidth measured in this run. Timing: time_graph_per_call — --calls calls in one
// CUDA graph, replayed, median per call; the weights are rotated over as many copies as fit in
// --max-gib (>= 3x L2 where possible) and the sparse lists over 8 random lists of the same density,
// so no call finds its rows in L2. Each point is verified once before timing (dense against the
// unfused pipeline: relative L2 < 2e-2; sparse with all blocks against dense); a failure makes the
// exit status 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "blockfuse/fused_mlp.h"
#include "blockfuse/swiglu.h"
#include "commands.h"
#include "common/host_float.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

struct Shape {
  const char* key;
  int64_t k, u;
};
const Shape kShapes[] = {{"llama3-8b", 4096, 14336}, {"llama3-70b", 8192, 28672}, {"llama2-7b", 4096, 11008}};

#define CUBLAS_OK(expr)                                                                     \
  do {                                                                                      \
    const cublasStatus_t s_ = (expr);                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                        \
      throw Error(std::string("cuBLAS status ") + std::to_string(int(s_)) + " in " #expr); \
  } while (0)

// Relative L2 difference of two bf16/fp16 device vectors (host copies).
double rel_l2(DType dt, const void* a, const void* b, int64_t n) {
  std::vector<uint16_t> ha(static_cast<size_t>(n)), hb(static_cast<size_t>(n));
  BENCH_CUDA(cudaMemcpy(ha.data(), a, size_t(n) * 2, cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(hb.data(), b, size_t(n) * 2, cudaMemcpyDeviceToHost));
  double d = 0, r = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double va = host::to_float(dt, ha[size_t(i)]), vb = host::to_float(dt, hb[size_t(i)]);
    d += (va - vb) * (va - vb);
    r += vb * vb;
  }
  return std::isfinite(d) && r > 0 ? std::sqrt(d / r) : 1e30;
}

int run(const Args& args) {
  if (args.has("help")) {
    std::printf(
        "blockfuse bench fused-mlp [--shapes llama3-8b,llama3-70b,llama2-7b] [--m 1,4,16,32]\n"
        "  [--sparsity 50,75,90] [--nb 0,16,32,64] [--calls 10] [--reps 30] [--max-gib 24] [--json FILE]\n");
    return 0;
  }
  const std::vector<std::string> shapes = args.get_list("shapes", {"llama3-8b", "llama3-70b", "llama2-7b"});
  const std::vector<int64_t> ms = args.get_int_list("m", {1, 4, 16, 32});
  const std::vector<int64_t> sparsities = args.get_int_list("sparsity", {50, 75, 90});
  const std::vector<int64_t> nbs = args.get_int_list("nb", {0});
  const int calls = int(args.get_int("calls", 10)), reps = int(args.get_int("reps", 30)), warmup = 3;
  const double max_gib = args.get_double("max-gib", 24);
  const DType dt = DType::kBF16;
  const Activation act = Activation::kSiLU;
  if (!require_gpu("blockfuse bench fused-mlp")) return 2;

  cudaStream_t s = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t handle = nullptr;
  CUBLAS_OK(cublasCreate(&handle));
  CUBLAS_OK(cublasSetStream(handle, s));
  DevBuf cublas_ws(32u << 20);
  CUBLAS_OK(cublasSetWorkspace(handle, cublas_ws.p, cublas_ws.bytes));
  int dev = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
  const int sms = prop.multiProcessorCount;
  std::fprintf(stderr, "[fused-mlp] measuring the copy bandwidth...\n");
  const double copy_gbs = measure_copy_bandwidth_gbs(s);
  std::fprintf(stderr, "[fused-mlp] %s, %d SMs, copy %.0f GB/s\n", device_name().c_str(), sms, copy_gbs);

  Table table({"shape", "M", "variant", "nb", "us", "GB read", "%copy", "unfused us", "x unfused", "x dense"});
  Json rows = Json::array();
  bool all_ok = true;

  for (const std::string& key : shapes) {
    const Shape* sh = nullptr;
    for (const auto& c : kShapes)
      if (key == c.key) sh = &c;
    if (!sh) throw Error("--shapes: unknown shape '" + key + "'");
    const int64_t K = sh->k, U = sh->u, bs = 32, nblk = U / bs;
    const double wbytes = 6.0 * double(U) * double(K);
    const int sets = std::max(1, std::min(rotation_sets(int64_t(wbytes * 0.1)), int(max_gib * 1073741824.0 / wbytes)));
    std::fprintf(stderr, "[fused-mlp] %s K=%ld U=%ld: %d weight copies\n", key.c_str(), long(K), long(U), sets);
    std::vector<std::unique_ptr<DevBuf>> wgu, wd;
    for (int i = 0; i < sets; ++i) {
      wgu.push_back(std::make_unique<DevBuf>(static_cast<size_t>(2 * U * K * 2)));
      wd.push_back(std::make_unique<DevBuf>(static_cast<size_t>(U * K * 2)));
      const float sc = 2.f / std::sqrt(float(K));
      testing::fill_uniform(make_matrix(wgu.back()->p, dt, 2 * U, K), -sc, sc, 11 + i, s);
      testing::fill_uniform(make_matrix(wd.back()->p, dt, U, K), -1.f / std::sqrt(float(U)), 1.f / std::sqrt(float(U)),
                            23 + i, s);
    }
    DevBuf xb(static_cast<size_t>(32 * K * 2)), yb(static_cast<size_t>(32 * K * 2)), yr(static_cast<size_t>(32 * K * 2)), gu(static_cast<size_t>(32 * 2 * U * 2)),
        hb(static_cast<size_t>(32 * U * 2));
    testing::fill_uniform(make_matrix(xb.p, dt, 32, K), -1.f, 1.f, 5, s);
    // Workspace for every configuration below (deterministic 16-neuron blocks at M = 32 is the most).
    size_t ws_need = 0;
    for (int64_t M : ms)
      for (int64_t nb : {16, 32, 64})
        ws_need = std::max(ws_need, fused_mlp_workspace_size(M, K, U / 16, FusedMlpConfig{int(nb), MlpReduction::kDeterministic}));
    DevBuf ws(ws_need);
    BENCH_CUDA(cudaMemsetAsync(ws.p, 0, ws.bytes, s));
    // 8 random union lists per sparsity (same count), and per-token lists.
    DevBuf lists(static_cast<size_t>(8 * nblk * 4)), counts(static_cast<size_t>(8 * 4)), tok_idx(static_cast<size_t>(32 * nblk * 4)), tok_cnt(32 * 4),
        all_idx(static_cast<size_t>(nblk * 4)), all_cnt(4);
    {
      std::vector<int32_t> a(static_cast<size_t>(nblk));
      for (int64_t i = 0; i < nblk; ++i) a[size_t(i)] = int32_t(i);
      const int32_t n = int32_t(nblk);
      BENCH_CUDA(cudaMemcpy(all_idx.p, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
      BENCH_CUDA(cudaMemcpy(all_cnt.p, &n, 4, cudaMemcpyHostToDevice));
    }
    const float one = 1.f, zero = 0.f;
    const cudaDataType_t ct = CUDA_R_16BF;

    for (int64_t M : ms) {
      const ConstMatrix X = make_matrix(static_cast<const void*>(xb.p), dt, M, K);
      const Matrix Y = make_matrix(yb.p, dt, M, K);
      auto WGU = [&](int i) { return make_matrix(static_cast<const void*>(wgu[size_t(i % sets)]->p), dt, 2 * U, K); };
      auto WD = [&](int i) { return make_matrix(static_cast<const void*>(wd[size_t(i % sets)]->p), dt, U, K); };
      // Unfused: gate_up = x · Wguᵀ; h = swiglu(gate_up); y = h · w_down_t.
      auto unfused = [&](int i, void* out) {
        CUBLAS_OK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(2 * U), int(M), int(K), &one, WGU(i).data, ct, int(K),
                               xb.p, ct, int(K), &zero, gu.p, ct, int(2 * U), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        swiglu(make_matrix(static_cast<const void*>(gu.p), dt, M, 2 * U), make_matrix(hb.p, dt, M, U), act,
               GateUpLayout::kInterleaved, s);
        CUBLAS_OK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(K), int(M), int(U), &one, WD(i).data, ct, int(K),
                               hb.p, ct, int(U), &zero, out, ct, int(K), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      unfused(0, yr.p);
      int uc = 0;
      const Timing tu = time_graph_per_call([&] { unfused(uc++, yr.p); }, s, calls, warmup, reps);
      unfused(0, yr.p);
      BENCH_CUDA(cudaStreamSynchronize(s));
      const double io = 4.0 * double(M) * double(K);  // x + y, bf16
      double dense_us = 0;

      auto report = [&](const std::string& variant, int nb, const Timing& t, double read_bytes, double err, bool ok,
                        double union_density) {
        const double us = t.median_ms * 1e3, gbs = read_bytes / (t.median_ms * 1e-3) / 1e9;
        std::fprintf(stderr, "[fused-mlp] %s M=%ld %s nb=%d: %.2f us, %.0f GB/s (%.1f%% copy), unfused %.2f us, err %.2e%s\n",
                     key.c_str(), long(M), variant.c_str(), nb, us, gbs, 100 * gbs / copy_gbs, tu.median_ms * 1e3, err,
                     ok ? "" : " FAILED");
        table.add({key, std::to_string(M), variant, std::to_string(nb), fmt(us, 2), fmt(read_bytes / 1e9, 3),
                   fmt(100 * gbs / copy_gbs, 1), fmt(tu.median_ms * 1e3, 2), fmt(tu.median_ms * 1e3 / us, 2),
                   dense_us > 0 ? fmt(dense_us / us, 2) : "-"});
        Json r = Json::object();
        r.set("shape", key).set("k", K).set("u", U).set("m", M).set("variant", variant).set("neurons_per_block", nb)
            .set("us", us).set("us_min", t.min_ms * 1e3).set("bytes_read", read_bytes).set("gbs", gbs)
            .set("frac_of_copy", gbs / copy_gbs).set("unfused_us", tu.median_ms * 1e3)
            .set("speedup_vs_unfused", tu.median_ms / t.median_ms).set("speedup_vs_dense", dense_us > 0 ? dense_us / us : 0.0)
            .set("union_density", union_density).set("verify_rel_l2", err).set("verified", ok);
        rows.push(r);
        all_ok = all_ok && ok;
      };

      // Dense: heuristic (nb 0) and any --nb sweep, atomic; the heuristic's also deterministic.
      const int heur = fused_mlp_heuristic(M, K, U / 16, sms).neurons_per_block;
      for (int64_t nb : nbs)
        for (MlpReduction red : {MlpReduction::kAtomic, MlpReduction::kDeterministic}) {
          if (red == MlpReduction::kDeterministic && nb != 0) continue;
          const FusedMlpConfig cfg{int(nb), red};
          BENCH_CUDA(cudaMemsetAsync(yb.p, 0xff, size_t(M * K * 2), s));
          fused_mlp(X, WGU(0), WD(0), Y, act, ws.p, ws.bytes, cfg, s);
          BENCH_CUDA(cudaStreamSynchronize(s));
          const double err = rel_l2(dt, yb.p, yr.p, M * K);
          int c = 0;
          const Timing t = time_graph_per_call([&] { fused_mlp(X, WGU(c), WD(c), Y, act, ws.p, ws.bytes, cfg, s); ++c; }, s,
                                               calls, warmup, reps);
          if (nb == 0 && red == MlpReduction::kAtomic) dense_us = t.median_ms * 1e3;
          report(red == MlpReduction::kAtomic ? "dense" : "dense-deterministic", nb ? int(nb) : heur, t,
                 wbytes + io, err, err < 2e-2, 1.0);
        }
      // Sparse, union lists of blocks of 32 (the heuristic's block size for the active groups).
      {  // all blocks through the sparse path must equal dense
        BENCH_CUDA(cudaMemsetAsync(yb.p, 0xff, size_t(M * K * 2), s));
        fused_mlp_sparse(X, WGU(0), WD(0), Y, act,
                         NeuronBlockList{static_cast<const int32_t*>(all_idx.p), static_cast<const int32_t*>(all_cnt.p), nblk, 32},
                         ws.p, ws.bytes, FusedMlpConfig{}, s);
        BENCH_CUDA(cudaStreamSynchronize(s));
        const double err = rel_l2(dt, yb.p, yr.p, M * K);
        if (!(err < 2e-2)) {
          std::fprintf(stderr, "[fused-mlp] sparse all-blocks check FAILED: rel l2 %.3e\n", err);
          all_ok = false;
        }
      }
      for (int64_t sp : sparsities) {
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
        BENCH_CUDA(cudaMemcpy(lists.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
        BENCH_CUDA(cudaMemcpy(counts.p, cnt.data(), cnt.size() * 4, cudaMemcpyHostToDevice));
        auto L = [&](int i) {
          return NeuronBlockList{static_cast<const int32_t*>(lists.p) + (i % 8) * nblk,
                                 static_cast<const int32_t*>(counts.p) + (i % 8), nblk, 32};
        };
        const int nb = fused_mlp_heuristic(M, K, active * 2, sms).neurons_per_block;
        int c = 0;
        const Timing t = time_graph_per_call([&] { fused_mlp_sparse(X, WGU(c), WD(c), Y, act, L(c), ws.p, ws.bytes, FusedMlpConfig{}, s); ++c; },
                                             s, calls, warmup, reps);
        const double frac = double(active) / double(nblk);
        report("sparse-" + std::to_string(sp), nb, t, wbytes * frac + io, 0, true, frac);
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
          BENCH_CUDA(cudaMemcpy(tok_idx.p, ti.data(), ti.size() * 4, cudaMemcpyHostToDevice));
          BENCH_CUDA(cudaMemcpy(tok_cnt.p, tc.data(), tc.size() * 4, cudaMemcpyHostToDevice));
          const PerTokenNeuronBlocks P{static_cast<const int32_t*>(tok_idx.p), static_cast<const int32_t*>(tok_cnt.p), nblk, 32};
          int c2 = 0;
          const Timing tp = time_graph_per_call([&] { fused_mlp_sparse(X, WGU(c2), WD(c2), Y, act, P, ws.p, ws.bytes, FusedMlpConfig{}, s); ++c2; },
                                                s, calls, warmup, reps);
          const double ud = double(nu) / double(nblk);
          report("per-token-" + std::to_string(sp), fused_mlp_heuristic(M, K, U / 16, sms).neurons_per_block, tp,
                 wbytes * ud + io, 0, true, ud);
        }
      }
    }
  }
  table.print();
  if (args.has("json")) {
    Json root = Json::object();
    root.set("bench", "fused-mlp").set("device", device_name()).set("date", now_iso8601()).set("copy_gbs", copy_gbs)
        .set("sms", sms).set("dtype", "bf16").set("activation", "silu").set("calls_per_graph", calls)
        .set("baseline", "cublasGemmEx [M,2U] -> blockfuse::swiglu -> cublasGemmEx [M,K], in a CUDA graph").set("rows", rows);
    write_file(args.get("json"), root.dump());
  }
  cublasDestroy(handle);
  cudaStreamDestroy(s);
  return all_ok ? 0 : 1;
}

}  // namespace

BLOCKFUSE_COMMAND("bench fused-mlp", run, "the whole decode MLP in one launch, dense and sparse, vs cuBLAS+swiglu+cuBLAS");

}  // namespace blockfuse::bench
