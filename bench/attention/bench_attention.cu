// `blockfuse bench attention`: the sm80 and sm90a attention forward kernels, side by side, on the prefill shapes of the
// benchmarking plan: bf16, D = 128 (and 64), B = 2, Hq = 32, Hkv = 32 and 8, S = 512 .. 16384,
// causal and not. FLOPs = 4·B·Hq·S²·D, halved when causal (the work a causal kernel must do).
//
// Each point is verified first against the fp32 GPU reference (testing/attention_reference.h) on a
// subset of query rows (every row_step-th, all heads), then timed: --reps calls back to back after
// --warmup, CUDA events around each, median. The inputs (≥ 8 MB per tensor at S = 512) are not
// rotated: attention re-reads K and V from L2 by design, and a model's prefill does the same.
// The ceiling is the cuBLAS bf16 GEMM (8192³) measured in the same run. The baseline, PyTorch
// SDPA's flash (FlashAttention-2) and cuDNN backends, is measured by `python -m blockfuse.bench sdpa`.
//
// --backward times blockfuse::attention_backward instead (dq, dk, dv from the forward's out and lse;
// --kernel picks the dK/dV kernel: sm80, or sm90 where it runs, or both side by side), FLOPs = 2.5x the forward's (five S²·D products against two), each
// point verified first against the fp32 GPU reference of the backward (testing/attention_reference.h)
// on every S/256-th query row (dq) and key row (dk, dv). Batched points only.
//
// Output: progress on stderr, a table on stdout, with --json FILE the run and its rows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/params.h"
#include "blockfuse/attention.h"
#include "harness.h"
#include "testing/attention_reference.h"
#include "testing/device_buffer.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

using testing::DeviceBuffer;

// out against the GPU reference on the query rows s % step == 0 of every batch (all heads): per
// element |diff| <= 2u + 2u·|ref| with u the bf16 unit roundoff for both dtypes (|v| <= 1; P is
// rounded to the input type before P·V and O once at the end). The relative L2 error is reported,
// not bounded, as before the port.
// Whether params.kernel = kSm90 can run head_dim d here (the library's own checks would throw).
bool sm90_runs_here(int64_t d) {
  int dev = 0, major = 0, minor = 0;
  if (!attention_has_sm90() || cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

Check verify_point(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v, const AttnTensor& out,
                   const AttentionParams& p, int step, cudaStream_t stream) {
  const int64_t row = q.heads * q.head_dim, n = q.batch * q.seqlen * row;
  DeviceBuffer<float> ref{size_t(n)}, lse{size_t(q.batch * q.heads * q.seqlen)};
  testing::attention_reference_gpu(q, k, v, p, ref.data(), lse.data(), step, stream);
  const double u = testing::unit_roundoff(testing::Precision::kBF16);
  const testing::Tolerance tol{2 * u, 2 * u};
  const int64_t rows = (q.seqlen + step - 1) / step, ld = int64_t(step) * row;
  Check c;
  for (int64_t b = 0; b < q.batch; ++b) {
    const int64_t at = b * q.seqlen * row;
    const ConstMatrix o{static_cast<const uint16_t*>(out.data) + at, out.dtype, rows, row, ld};
    // Rows in a failure report count the checked rows (query row = reported row · step within a batch).
    c += to_check(testing::compare(o, ref.data() + at, ld, tol, stream), INFINITY, b * rows);
  }
  return c;
}

class AttentionBench final : public BenchCommand {
  std::vector<int64_t> ds_ = {128, 64}, ss_ = {512, 1024, 4096, 16384}, hkvs_ = {32, 8}, causals_ = {0, 1};
  std::vector<int64_t> dets_ = {1, 0};  // --backward: the deterministic mode, then dQ by atomics
  int batch_ = 2, hq_ = 32;
  bool all_configs_ = false, varlen_ = false, backward_ = false;
  std::string dtype_ = "bf16";
  std::string kernel_ = "both";

  Defaults defaults() const override { return {10, 10, 3}; }

  void options(Options& o) override {
    o.about("TFLOP/s of blockfuse::attention (the sm80 and the sm90a forward kernels) on [B, S, H, D] prefill shapes, as a fraction of the "
            "cuBLAS bf16 GEMM rate measured in this run. FLOPs = 4·B·Hq·S²·D, halved when causal. Each point is "
            "verified against the fp32 GPU reference (every S/256-th query row) before it is timed.");
    o.ints("--d", ds_, 64, 256, "head dims (64, 128, 256)", std::vector<int64_t>{128}, 64);
    o.ints("--s", ss_, 1, int64_t{1} << 20, "sequence lengths (Sq = Sk)", std::vector<int64_t>{512, 1024});
    o.ints("--hkv", hkvs_, 1, 1 << 16, "key/value heads (Hq % Hkv == 0)", std::vector<int64_t>{8});
    o.ints("--causal", causals_, 0, 1, "0 = full, 1 = causal");
    o.integer("--b", batch_, 1, 1 << 16, "batch");
    o.integer("--hq", hq_, 1, 1 << 16, "query heads");
    o.flag("--all-configs", all_configs_, "time every compiled tile configuration (sm80) and both sm90 tiles at D = 64 (sm90_block_m 128, 192), not only the heuristic's; causal sm90 points both per tile and with a tile counter (AttentionParams::sm90_schedule kPerTile / kDynamic: a persistent grid taking tiles from the counter, 'dyn')");
    o.flag("--varlen", varlen_,
           "pass the B sequences as one packed varlen batch (cu_seqlens 0, S, 2S, ...): the same work and "
           "result, through the varlen path");
    o.ints("--deterministic", dets_, 0, 1,
           "--backward: 1 = dQ's additions in a fixed order (the default: its own kernel on sm80, ordered "
           "additions on sm90), 0 = dQ by atomics or bulk reductions in the dK/dV kernel");
    o.flag("--backward", backward_,
           "time attention_backward (dq, dk, dv from the forward's out and lse; --kernel picks the dK/dV "
           "kernel) instead of the forward; FLOPs = 2.5x the forward's");
    o.choice("--dtype", dtype_, {"bf16", "fp16"}, "element type");
    o.choice("--kernel", kernel_, {"both", "sm80", "sm90"},
             "sm80 (mma.sync; --all-configs applies), sm90 (wgmma/TMA: Hopper; other points are "
             "skipped) or both, side by side");
  }

  void run(Bench& b) override {
    if (backward_) return run_backward(b);
    const DType dt = dtype_ == "fp16" ? DType::kFP16 : DType::kBF16;
    const cudaStream_t stream = b.stream();
    const int64_t B = batch_, Hq = hq_;
    const double ceiling = b.matrix_tflops();
    b.title("blockfuse bench attention — " + b.device().name + " (cc " + b.device().cc + "), " + dtype_ + ", B " +
            std::to_string(B) + ", Hq " + std::to_string(Hq) + "; cuBLAS bf16 8192^3 ceiling " + fmt(ceiling, 0) +
            " TFLOP/s this run");
    b.title("median of " + std::to_string(b.reps()) + " back-to-back calls (CUDA events, after " +
            std::to_string(b.warmup()) + " warm-up); FLOPs = 4*B*Hq*S^2*D (/2 causal); verified = max |diff| vs fp32");
    b.columns({"D", "S", "Hkv", "causal", "tile", "us", "TFLOP/s", "of cuBLAS", "verified"});
    b.info()["dtype"] = dtype_;
    b.info()["cublas_bf16_tflops"] = ceiling;
    b.info()["timing"] = "median of reps back-to-back calls, CUDA events";
    b.info()["reps"] = b.reps();
    b.info()["warmup"] = b.warmup();
    for (int64_t d : ds_)
      for (int64_t s : ss_)
        for (int64_t hkv : hkvs_) {
          const std::string where = "D " + std::to_string(d) + " S " + std::to_string(s) + " Hkv " + std::to_string(hkv);
          const size_t q_elems = size_t(B * s * Hq * d), kv_elems = size_t(B * s * hkv * d);
          // q, k, v, out (2 bytes), the fp32 reference of out, the lse and its reference.
          if (!b.fits(2 * (2 * q_elems + 2 * kv_elems) + 4 * q_elems + 8 * size_t(B * Hq * s), where)) continue;
          DeviceBuffer<uint16_t> qb(q_elems), kb(kv_elems), vb(kv_elems), ob(q_elems);
          DeviceBuffer<float> lse(size_t(B * Hq * s));
          testing::fill_uniform(Matrix{qb.data(), dt, B * s * Hq, d, d}, -2.0f, 2.0f, 11 + s, stream);
          testing::fill_uniform(Matrix{kb.data(), dt, B * s * hkv, d, d}, -2.0f, 2.0f, 12 + s, stream);
          testing::fill_uniform(Matrix{vb.data(), dt, B * s * hkv, d, d}, -1.0f, 1.0f, 13 + s, stream);
          const AttnConstTensor q = make_attn_tensor(qb.data(), dt, B, s, Hq, d);
          const AttnConstTensor k = make_attn_tensor(kb.data(), dt, B, s, hkv, d);
          const AttnConstTensor v = make_attn_tensor(vb.data(), dt, B, s, hkv, d);
          const AttnTensor out = make_attn_tensor(ob.data(), dt, B, s, Hq, d);
          // --varlen: the same buffers as [1, B·S, H, D] packed tensors (a contiguous [B, S, H, D]
          // tensor is its packed form), sequence i = rows [i·S, (i+1)·S).
          const AttnConstTensor qp = make_attn_tensor(qb.data(), dt, 1, B * s, Hq, d);
          const AttnConstTensor kp = make_attn_tensor(kb.data(), dt, 1, B * s, hkv, d);
          const AttnConstTensor vp = make_attn_tensor(vb.data(), dt, 1, B * s, hkv, d);
          const AttnTensor outp = make_attn_tensor(ob.data(), dt, 1, B * s, Hq, d);
          std::vector<int32_t> cu_host(size_t(B + 1));
          for (int64_t i = 0; i <= B; ++i) cu_host[size_t(i)] = int32_t(i * s);
          DeviceBuffer<int32_t> cu(cu_host.size());
          if (varlen_)
            BENCH_CUDA(cudaMemcpy(cu.data(), cu_host.data(), cu.bytes(), cudaMemcpyHostToDevice));
          DeviceBuffer<int32_t> counter(2);  // AttentionParams::sm90_tile_counter for the 'dyn' points
          BENCH_CUDA(cudaMemset(counter.data(), 0, counter.bytes()));
          for (int64_t causal : causals_)
            for (const char* kernel : {"sm80", "sm90"}) {
            if (kernel_ != "both" && kernel_ != kernel) continue;
            const bool sm90 = std::string(kernel) == "sm90";
            if (sm90 && !sm90_runs_here(d)) {
              b.log("%s causal %d: sm90 skipped (it needs an sm90a build and a cc 9.0 device)",
                    where.c_str(), int(causal));
              continue;
            }
            AttentionParams p;
            p.causal = causal != 0;
            p.kernel = sm90 ? AttentionKernel::kSm90 : AttentionKernel::kSm80;
            AttentionParams pv = p;  // the varlen form of p (the reference takes the batched one)
            if (varlen_) {
              pv.cu_seqlens_q = pv.cu_seqlens_k = cu.data();
              pv.num_seqs = B;
              pv.max_seqlen_q = pv.max_seqlen_k = s;
              pv.host_cu_seqlens_q = pv.host_cu_seqlens_k = cu_host.data();
            }
            // sm80: the compiled configs; sm90: its tiles (AttentionParams::sm90_block_m; two at D = 64).
            // Causal sm90 points under --all-configs run each tile twice: the hardware's one CTA per
            // tile, then a persistent grid with a tile counter (zeroed once; the kernel leaves it zeroed).
            const int n_tiles = !all_configs_ ? 1 : sm90 ? (d == 64 ? 2 : 1) : attention_num_configs(d);
            const int n_cfg = n_tiles * (sm90 && all_configs_ && causal ? 2 : 1);
            for (int ci = 0; ci < n_cfg; ++ci) {
              const bool dyn = ci >= n_tiles;
              const AttentionConfig cfg = attention_config(d, ci % n_tiles);
              if (sm90) p.sm90_block_m = pv.sm90_block_m = all_configs_ ? (ci % n_tiles == 0 ? 128 : 192) : 0;
              // Without --all-configs the library's default as the torch op calls it: a counter, kAuto.
              p.sm90_tile_counter = pv.sm90_tile_counter = dyn || !all_configs_ ? counter.data() : nullptr;
              if (all_configs_) p.sm90_schedule = pv.sm90_schedule = dyn ? Sm90Schedule::kDynamic : Sm90Schedule::kPerTile;
              const bool walk = sm90 && causal && (all_configs_ ? dyn : attn::sm90_dynamic_walk(Sm90Schedule::kAuto, s));
              const int bm90 = attn::sm90_block_m(d, p.sm90_block_m, s, walk);
              const std::string tile = (sm90 ? "sm90 " + std::to_string(bm90) + "x" + std::to_string(attn::sm90_block_n(d, bm90))
                                             : std::to_string(cfg.block_m) + "x" + std::to_string(cfg.block_n) + "w" +
                                                   std::to_string(cfg.warps)) +
                                       (walk ? " dyn" : "") + (varlen_ ? " varlen" : "");
              auto call = [&] {
                if (varlen_ && sm90)
                  attention(qp, kp, vp, outp, lse.data(), pv, stream);
                else if (varlen_)
                  attention(qp, kp, vp, outp, lse.data(), pv, cfg, stream);
                else if (sm90)
                  attention(q, k, v, out, lse.data(), p, stream);
                else
                  attention(q, k, v, out, lse.data(), p, cfg, stream);
              };
              const std::string point = where + " causal " + std::to_string(causal) + " tile " + tile;
              b.log("%s", point.c_str());
              // Verify first, on a poisoned output.
              testing::fill_bits(Matrix{ob.data(), dt, B * s * Hq, d, d}, testing::nan_bits(dt), stream);
              call();
              const int step = int(std::max<int64_t>(1, s / 256));
              const Check check = verify_point(q, k, v, out, p, step, stream);
              const bool ok = b.verify(point, check);
              const Timing t = b.time([&](int) { call(); }, Method::events());
              const double flops = 4.0 * B * Hq * double(s) * double(s) * d * (p.causal ? 0.5 : 1.0);
              const double tflops = flops / (t.median_ms * 1e-3) / 1e12;
              auto r = b.row({std::to_string(d), std::to_string(s), std::to_string(hkv), causal ? "yes" : "no", tile,
                              fmt(t.us(), 1), fmt(tflops, 1), b.pct_of_matrix(tflops) + (ceiling > 0 ? " %" : ""),
                              ok ? "ok (" + fmt(check.max_abs, 4) + ")" : "FAILED"});
              r.set("head_dim", d).set("seqlen", s).set("batch", B).set("heads_q", Hq).set("heads_kv", hkv);
              r.set("causal", causal != 0).set("tile", tile).set("config_index", ci).set("kernel", kernel);
              r.set("median_us", t.us()).set("min_us", t.min_us()).set("tflops", tflops);
              if (ceiling > 0) r.set("fraction_of_cublas", tflops / ceiling);
              r.set("verified", ok).set("max_abs_diff", check.max_abs).set("checked_elements", check.count);
              r.set("rel_l2", check.rel_l2);
              if (!ok) r.set("verify_error", check.what);
            }
          }
        }
  }
  // --backward: one forward (the heuristic's kernel) for out and lse, then the backward verified and
  // timed.
  void run_backward(Bench& b) {
    if (varlen_ || all_configs_)
      throw Error("bench attention --backward: --varlen and --all-configs do not apply (batched points, one tile "
                  "per kernel)");
    const DType dt = dtype_ == "fp16" ? DType::kFP16 : DType::kBF16;
    const cudaStream_t stream = b.stream();
    const int64_t B = batch_, Hq = hq_;
    const double ceiling = b.matrix_tflops();
    b.title("blockfuse bench attention --backward — " + b.device().name + " (cc " + b.device().cc + "), " + dtype_ +
            ", B " + std::to_string(B) + ", Hq " + std::to_string(Hq) + "; cuBLAS bf16 8192^3 ceiling " +
            fmt(ceiling, 0) + " TFLOP/s this run");
    b.title("median of " + std::to_string(b.reps()) + " back-to-back calls (CUDA events, after " +
            std::to_string(b.warmup()) + " warm-up); FLOPs = 10*B*Hq*S^2*D (/2 causal); verified = rel L2 vs fp32");
    b.columns({"D", "S", "Hkv", "causal", "kernel", "dQ", "us", "TFLOP/s", "of cuBLAS", "verified"});
    b.info()["dtype"] = dtype_;
    b.info()["pass"] = "backward";
    b.info()["cublas_bf16_tflops"] = ceiling;
    b.info()["timing"] = "median of reps back-to-back calls, CUDA events";
    for (int64_t d : ds_)
      for (int64_t s : ss_)
        for (int64_t hkv : hkvs_) {
          const std::string where = "D " + std::to_string(d) + " S " + std::to_string(s) + " Hkv " + std::to_string(hkv);
          if (d != 64 && d != 128) {
            b.log("%s: skipped (the backward takes head dims 64 and 128)", where.c_str());
            continue;
          }
          const size_t q_elems = size_t(B * s * Hq * d), kv_elems = size_t(B * s * hkv * d);
          // Enough for both modes (on Hopper the deterministic sm90a mode also keeps its turn counters).
          const AttnConstTensor qshape = make_attn_tensor(static_cast<const void*>(nullptr), dt, B, s, Hq, d);
          const size_t ws_bytes = std::max(attention_backward_workspace_size(qshape, false),
                                           attention_backward_workspace_size(qshape, true));
          // q, out, dout, dq and k, v, dk, dv (2 bytes), the fp32 references of dq, dk, dv, lse, workspace.
          if (!b.fits(2 * (4 * q_elems + 4 * kv_elems) + 4 * (q_elems + 2 * kv_elems) + 4 * size_t(B * Hq * s) + ws_bytes,
                      where))
            continue;
          DeviceBuffer<uint16_t> qb(q_elems), kb(kv_elems), vb(kv_elems), ob(q_elems), dob(q_elems), dqb(q_elems),
              dkb(kv_elems), dvb(kv_elems);
          DeviceBuffer<float> lse(size_t(B * Hq * s)), rq(q_elems), rk(kv_elems), rv(kv_elems);
          DeviceBuffer<unsigned char> ws(std::max<size_t>(ws_bytes, 16));
          testing::fill_uniform(Matrix{qb.data(), dt, B * s * Hq, d, d}, -2.0f, 2.0f, 11 + s, stream);
          testing::fill_uniform(Matrix{kb.data(), dt, B * s * hkv, d, d}, -2.0f, 2.0f, 12 + s, stream);
          testing::fill_uniform(Matrix{vb.data(), dt, B * s * hkv, d, d}, -1.0f, 1.0f, 13 + s, stream);
          testing::fill_uniform(Matrix{dob.data(), dt, B * s * Hq, d, d}, -1.0f, 1.0f, 14 + s, stream);
          auto cview = [&](const void* ptr, int64_t h) { return make_attn_tensor(ptr, dt, B, s, h, d); };
          auto wview = [&](void* ptr, int64_t h) { return make_attn_tensor(ptr, dt, B, s, h, d); };
          const AttnConstTensor q = cview(qb.data(), Hq), k = cview(kb.data(), hkv), v = cview(vb.data(), hkv);
          const AttnConstTensor out = cview(ob.data(), Hq), dout = cview(dob.data(), Hq);
          for (int64_t causal : causals_)
          for (const char* kernel : {"sm80", "sm90"})
          for (int64_t det : dets_) {
            if (kernel_ != "both" && kernel_ != kernel) continue;
            const bool sm90 = std::string(kernel) == "sm90";
            if (sm90 && !sm90_runs_here(d)) {
              if (det == dets_.front() && causal == causals_.front())
                b.log("%s: sm90 skipped (needs an sm90a build on a compute capability 9.0 device)", where.c_str());
              continue;
            }
            AttentionParams p;
            p.causal = causal != 0;
            attention(q, k, v, wview(ob.data(), Hq), lse.data(), p, stream);
            p.deterministic = det != 0;
            p.kernel = sm90 ? AttentionKernel::kSm90 : AttentionKernel::kSm80;
            auto call = [&] {
              attention_backward(q, k, v, out, dout, lse.data(), wview(dqb.data(), Hq), wview(dkb.data(), hkv),
                                 wview(dvb.data(), hkv), p, ws.data(), ws.bytes(), stream);
            };
            const std::string point =
                where + " causal " + std::to_string(causal) + " backward " + kernel + (det ? "" : " atomic dQ");
            b.log("%s", point.c_str());
            for (DeviceBuffer<uint16_t>* g : {&dqb, &dkb, &dvb})
              testing::fill_bits(Matrix{g->data(), dt, int64_t(g->size()) / d, d, d}, testing::nan_bits(dt), stream);
            call();
            const int step = int(std::max<int64_t>(1, s / 256));
            testing::attention_backward_reference_gpu(q, k, v, out, dout, lse.data(), p, rq.data(), rk.data(), rv.data(),
                                                      step, stream);
            Check check = verify_gradient(dqb, rq, dt, B, s, Hq * d, step, stream);
            check += verify_gradient(dkb, rk, dt, B, s, hkv * d, step, stream);
            check += verify_gradient(dvb, rv, dt, B, s, hkv * d, step, stream);
            const bool ok = b.verify(point, check);
            const Timing t = b.time([&](int) { call(); }, Method::events());
            const double flops = 10.0 * B * Hq * double(s) * double(s) * d * (p.causal ? 0.5 : 1.0);
            const double tflops = flops / (t.median_ms * 1e-3) / 1e12;
            auto r = b.row({std::to_string(d), std::to_string(s), std::to_string(hkv), causal ? "yes" : "no", kernel,
                            det ? "ordered" : "atomics", fmt(t.us(), 1), fmt(tflops, 1), b.pct_of_matrix(tflops) + (ceiling > 0 ? " %" : ""),
                            ok ? "ok (" + fmt(check.rel_l2, 4) + ")" : "FAILED"});
            r.set("pass", "backward").set("head_dim", d).set("seqlen", s).set("batch", B).set("heads_q", Hq);
            r.set("heads_kv", hkv).set("causal", causal != 0).set("kernel", kernel).set("deterministic", det != 0);
            r.set("median_us", t.us()).set("min_us", t.min_us()).set("tflops", tflops);
            if (ceiling > 0) r.set("fraction_of_cublas", tflops / ceiling);
            r.verification(ok, check);
          }
        }
  }

  // Rows s % step == 0 of each batch of a [B, S, row] gradient against its fp32 reference: per element
  // within a quarter of the reference's RMS plus 5 % (P and dS are rounded to the MMA's input type, so
  // the error follows the gradient's scale, not each element's), and relative L2 within the GPU
  // tests' bound (2.5e-2 bf16, 6e-3 fp16).
  static Check verify_gradient(const DeviceBuffer<uint16_t>& got, const DeviceBuffer<float>& ref, DType dt, int64_t B,
                               int64_t s, int64_t row, int step, cudaStream_t stream) {
    const int64_t rows = (s + step - 1) / step, ld = int64_t(step) * row;
    Check c;
    for (int64_t bi = 0; bi < B; ++bi) {
      const int64_t at = bi * s * row;
      const ConstMatrix g{static_cast<const uint16_t*>(got.data()) + at, dt, rows, row, ld};
      const testing::CompareStats scale = testing::compare(g, ref.data() + at, ld, INFINITY, 0, stream);
      const double rms = scale.count ? std::sqrt(scale.sum_sq_ref / double(scale.count)) : 0;
      c += to_check(testing::compare(g, ref.data() + at, ld, 0.25 * rms, 0.05, stream),
                    dt == DType::kBF16 ? 2.5e-2 : 6e-3, bi * rows);
    }
    return c;
  }
};

}  // namespace

BLOCKFUSE_COMMAND(AttentionBench, "bench attention",
                  "TFLOP/s of the attention forward or, with --backward, its backward (--d, --s, --hkv, --causal, --kernel, "
                  "--all-configs, --json)");

}  // namespace blockfuse::bench
