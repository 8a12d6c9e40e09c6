// `blockfuse bench dgated`: the gated MLP's backward from dy to dz on Hopper, fused
// (blockfuse::gated_mlp_dgated: the GEMM dh = dy · w_down with dz and h written by its epilogue)
// against what the unfused backward runs (cuBLAS's GEMM dh = dy · w_down, bf16 out, fp32 compute,
// then blockfuse::swiglu_backward with its h output) and cuBLAS's GEMM alone, in one run.
// TFLOP/s counts the GEMM's 2·M·N·U. Inputs rotated past L2, CUDA events around each call; dz is
// written to its own buffer (in place would change z from call to call).
// Before a shape is timed, rows 0..7 and the last 8 of the fused dz and h are checked against an fp64
// host reference (the GPU tests' tolerances, tests/gated_up/test_dgated_gpu.cu); a failure makes the
// command exit 1. Without a device that runs the kernel (gated_mlp_dgated_available) every point says
// so and is skipped.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "blockfuse/gated_up.h"
#include "blockfuse/swiglu.h"
#include "common/activation.cuh"
#include "common/host_float.h"
#include "harness.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

using testing::DeviceBuffer;

class DGatedBench final : public BenchCommand {
  std::vector<int64_t> tokens_ = {4096, 16384};
  std::vector<std::string> shapes_ = {"8b", "70b"};
  std::string act_ = "silu";

  Defaults defaults() const override { return {20, 10, 3}; }

  bool compares_variants() const override { return true; }
  void options(Options& o) override {
    o.about("TFLOP/s of blockfuse::gated_mlp_dgated (dh = dy·w_down with dz and h from z in the GEMM's "
            "epilogue, sm90a) against cuBLAS's dh GEMM + blockfuse::swiglu_backward and the GEMM alone; "
            "verified against an fp64 host reference first.");
    o.ints("--tokens", tokens_, 1, int64_t{1} << 20, "rows M", std::vector<int64_t>{4096});
    o.words("--shapes", shapes_, {"8b", "70b"}, "8b: N 4096, U 14336; 70b: N 8192, U 28672");
    o.choice("--act", act_, {"silu", "gelu_tanh"}, "activation");
  }

  void run(Bench& b) override {
    b.title("blockfuse bench dgated — " + b.device().name + ", bf16; median of " + std::to_string(b.reps()) +
            "; TFLOP/s of the GEMM dh = dy·w_down (2·M·N·U)");
    b.columns({"shape", "M", "fused us", "fused TFLOP/s", "unfused us", "GEMM alone us", "fused/unfused", "verified"});
    if (!gated_mlp_dgated_available()) {
      b.title("gated_mlp_dgated does not run here (a device of compute capability 9.0 and the sm90a kernels): "
              "nothing timed");
      return;
    }
    for (const std::string& shape : shapes_)
      for (int64_t m : tokens_) point(b, shape, m);
  }

  void point(Bench& b, const std::string& shape, int64_t M) {
    const int64_t N = shape == "70b" ? 8192 : 4096, U = shape == "70b" ? 28672 : 14336;
    const DType dt = DType::kBF16;
    const Activation act = act_ == "gelu_tanh" ? Activation::kGeluTanh : Activation::kSiLU;
    const std::string where = shape + " M " + std::to_string(M);
    const int64_t in_bytes = (M * N + M * 2 * U) * 2;  // dy and z, rotated
    const int sets = rotation_sets(in_bytes, 4);
    if (!b.fits(size_t(sets * in_bytes + (N * U + M * 2 * U + 2 * M * U) * 2), where)) return;
    const cudaStream_t s = b.stream();
    std::vector<DeviceBuffer<uint16_t>> dy, z;
    for (int i = 0; i < sets; ++i) {
      dy.emplace_back(size_t(M * N));
      z.emplace_back(size_t(M * 2 * U));
      testing::fill_uniform(make_matrix(dy.back().data(), dt, M, N), -1.f, 1.f, 11 + uint64_t(i), s);
      testing::fill_uniform(make_matrix(z.back().data(), dt, M, 2 * U), -4.f, 4.f, 23 + uint64_t(i), s);
    }
    DeviceBuffer<uint16_t> w{size_t(N * U)}, dz{size_t(M * 2 * U)}, h{size_t(M * U)}, dh{size_t(M * U)};
    const float wb = 1.f / std::sqrt(float(N));
    testing::fill_uniform(make_matrix(w.data(), dt, N, U), -wb, wb, 37, s);
    const ConstMatrix wv = make_matrix(static_cast<const void*>(w.data()), dt, N, U);
    const Matrix dzv = make_matrix(dz.data(), dt, M, 2 * U), hv = make_matrix(h.data(), dt, M, U);
    const Matrix dhv = make_matrix(dh.data(), dt, M, U);
    auto fused = [&](int c) {
      const size_t i = size_t(c % sets);
      gated_mlp_dgated(make_matrix(static_cast<const void*>(dy[i].data()), dt, M, N), wv,
                       make_matrix(static_cast<const void*>(z[i].data()), dt, M, 2 * U), dzv, hv, act, s);
    };
    // dh[M, U] = dy[M, N] · w[N, U], row-major: column-major dhᵀ[U, M] = wᵀ[U, N] · dyᵀ[N, M].
    auto gemm = [&](int c) {
      const size_t i = size_t(c % sets);
      const float one = 1.f, zero = 0.f;
      BENCH_CUBLAS(cublasGemmEx(b.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, int(U), int(M), int(N), &one, w.data(),
                                CUDA_R_16BF, int(U), dy[i].data(), CUDA_R_16BF, int(N), &zero, dh.data(), CUDA_R_16BF,
                                int(U), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto unfused = [&](int c) {
      gemm(c);
      const size_t i = size_t(c % sets);
      swiglu_backward(dhv, make_matrix(static_cast<const void*>(z[i].data()), dt, M, 2 * U), dzv, hv, act,
                      GateUpLayout::kInterleaved, s);
    };

    // Verify the fused call on set 0 (poisoned outputs), rows 0..7 and the last 8.
    testing::fill_bits(dzv, testing::nan_bits(dt), s);
    testing::fill_bits(hv, testing::nan_bits(dt), s);
    fused(0);
    BENCH_CUDA(cudaStreamSynchronize(s));
    const std::vector<uint16_t> dy0 = host_bits(dy[0]), z0 = host_bits(z[0]), w0 = host_bits(w), dz0 = host_bits(dz),
                                h0 = host_bits(h);
    const int64_t band = std::min<int64_t>(8, M);
    const testing::Tolerance tol = testing::tolerance(dt, 2, 1e-4);
    Check check;
    for (int64_t r0 : {int64_t{0}, M - band}) {
      std::vector<double> ref_dz(static_cast<size_t>(band * 2 * U)), ref_h(static_cast<size_t>(band * U)),
          dhr(static_cast<size_t>(U));
      for (int64_t r = 0; r < band; ++r) {
        std::fill(dhr.begin(), dhr.end(), 0.0);
        for (int64_t k = 0; k < N; ++k) {
          const double a = host::to_float(dt, dy0[size_t((r0 + r) * N + k)]);
          const uint16_t* wr = w0.data() + size_t(k * U);
          for (int64_t j = 0; j < U; ++j) dhr[size_t(j)] += a * double(host::to_float(dt, wr[j]));
        }
        for (int64_t j = 0; j < U; ++j) {
          const double up = host::to_float(dt, z0[size_t((r0 + r) * 2 * U + 2 * j)]);
          const double gate = host::to_float(dt, z0[size_t((r0 + r) * 2 * U + 2 * j + 1)]);
          const double a = act_f64(act, gate), da = act_grad_f64(act, gate);
          ref_dz[size_t(r * 2 * U + 2 * j)] = dhr[size_t(j)] * a;
          ref_dz[size_t(r * 2 * U + 2 * j + 1)] = dhr[size_t(j)] * up * da;
          ref_h[size_t(r * U + j)] = a * up;
        }
      }
      check += to_check(testing::compare_host(band, 2 * U,
                                              [&](int64_t r, int64_t j) { return host::to_float(dt, dz0[size_t((r0 + r) * 2 * U + j)]); },
                                              [&](int64_t r, int64_t j) { return ref_dz[size_t(r * 2 * U + j)]; }, tol),
                        1e-2, r0);
      check += to_check(testing::compare_host(band, U,
                                              [&](int64_t r, int64_t j) { return host::to_float(dt, h0[size_t((r0 + r) * U + j)]); },
                                              [&](int64_t r, int64_t j) { return ref_h[size_t(r * U + j)]; }, tol),
                        1e-2, r0);
    }
    const bool ok = b.verify(where, check);

    const Method method = Method::events();
    const std::vector<Timing> t = b.time_all({fused, unfused, gemm}, method);
    const Timing &tf = t[0], &tu = t[1], &tg = t[2];
    const double flops = 2.0 * double(M) * double(N) * double(U);
    const double tflops = flops / (tf.median_ms * 1e9);
    auto r = b.row({shape, std::to_string(M), fmt(tf.us(), 1), fmt(tflops, 0), fmt(tu.us(), 1), fmt(tg.us(), 1),
                    fmt(tu.median_ms / tf.median_ms, 2), ok ? "ok" : "FAILED"});
    r.set("shape", shape).set("M", M).set("N", N).set("U", U).set("act", act_);
    r.set("fused_us", tf.us()).set("fused_tflops", tflops).set("unfused_us", tu.us()).set("gemm_us", tg.us());
    r.set("gemm_tflops", flops / (tg.median_ms * 1e9)).set("fused_over_unfused", tu.median_ms / tf.median_ms);
    r.set("rotation_sets", sets).set("timing", "cuda events, rotated inputs");
    r.set("baseline", "cublasGemmEx CUBLAS_COMPUTE_32F bf16 out, then swiglu_backward (interleaved, with h)");
    r.verification(ok, check);
  }
};

}  // namespace

BLOCKFUSE_COMMAND(DGatedBench, "bench dgated",
                  "TFLOP/s of gated_mlp_dgated vs cuBLAS's dh GEMM + swiglu_backward (--tokens, --shapes, --json)");

}  // namespace blockfuse::bench
