// The memory-bound kernels of a decoder block, as the README shows them: residual add + RMSNorm with
// an FP8 output (dynamic per-row scale), SwiGLU of a stacked [M, 2U] GEMM output to FP8 (static
// scale), and the decode GEMM; each result is checked against the same formula on the CPU.
// Exit status: 0 verified, 1 wrong, 2 error, 77 no CUDA device (examples/common/example_util.h).
#include <blockfuse/blockfuse.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "example_util.h"

using namespace blockfuse;

namespace {

std::mt19937 rng(34);

std::vector<uint16_t> random_bf16(int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& e : v) e = example::bf16_from_float(d(rng));
  return v;
}
float bf(uint16_t b) { return example::bf16_to_float(b); }

// FP8 e4m3 keeps 3 mantissa bits: rounding is within 2^-4 relative, 2^-10 absolute (subnormals).
constexpr float kFp8Rtol = 0.0625f, kFp8Atol = 1.0f / 1024;

bool check_add_rmsnorm(cudaStream_t stream) {
  const int64_t M = 6, H = 4096;
  const std::vector<uint16_t> hx = random_bf16(M * H, -1, 1), hres = random_bf16(M * H, -4, 4),
                              hw = random_bf16(H, 0.5f, 1.5f);
  example::DevicePtr d_x = example::to_device(hx), d_res = example::to_device(hres), d_w = example::to_device(hw),
                     d_q = example::device_alloc(size_t(M * H)), d_scales = example::device_alloc(size_t(M) * 4);
  const ConstMatrix x = make_matrix(static_cast<const void*>(d_x.get()), DType::kBF16, M, H);
  const ConstMatrix residual = make_matrix(static_cast<const void*>(d_res.get()), DType::kBF16, M, H);
  const ConstMatrix weight = make_matrix(static_cast<const void*>(d_w.get()), DType::kBF16, 1, H);
  const Matrix residual_as_matrix = make_matrix(d_res.get(), DType::kBF16, M, H);
  void* q = d_q.get();
  float* row_scales = static_cast<float*>(d_scales.get());

  // Residual add + RMSNorm, in place on the residual stream, FP8 output with a per-row scale for an
  // FP8 QKV projection (Gemma: opt.gemma_one_plus_w = true).
  add_rmsnorm_fp8(x, residual, weight, /*residual_out=*/residual_as_matrix, make_fp8_matrix(q, M, H),
                  Fp8Scale{Fp8ScaleMode::kDynamicPerRow, row_scales}, RmsNormOptions{1e-5f}, stream);

  example::cuda_check(cudaStreamSynchronize(stream), "add_rmsnorm_fp8");
  const auto hres_out = example::to_host<uint16_t>(d_res, size_t(M * H));
  const auto hq = example::to_host<uint8_t>(d_q, size_t(M * H));
  const auto hscales = example::to_host<float>(d_scales, size_t(M));
  // r = bf16(x + residual); v = r / sqrt(mean(r²) + eps) · w; scale_r = max|v| / 448; q = v / scale_r.
  std::vector<float> r_got(size_t(M * H)), r_want(size_t(M * H)), q_got(size_t(M * H)), q_want(size_t(M * H)),
      s_got(hscales.begin(), hscales.end()), s_want(hscales.size());
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t h = 0; h < H; ++h) {
      const size_t i = size_t(m * H + h);
      r_want[i] = bf(example::bf16_from_float(bf(hx[i]) + bf(hres[i])));
      r_got[i] = bf(hres_out[i]);
      ss += double(r_want[i]) * r_want[i];
    }
    const double inv_rms = 1.0 / std::sqrt(ss / double(H) + 1e-5);
    double amax = 0;
    for (int64_t h = 0; h < H; ++h) {
      const size_t i = size_t(m * H + h);
      q_want[i] = float(r_want[i] * inv_rms * bf(hw[size_t(h)]));
      amax = std::max(amax, std::fabs(double(q_want[i])));
    }
    s_want[size_t(m)] = float(amax / kFp8E4M3Max);
    for (int64_t h = 0; h < H; ++h) {
      const size_t i = size_t(m * H + h);
      q_want[i] /= hscales[size_t(m)];
      q_got[i] = example::fp8_e4m3_to_float(hq[i]);
    }
  }
  const bool ok_r = example::check_close("add_rmsnorm residual_out", r_got, r_want, 0, 0);
  const bool ok_s = example::check_close("add_rmsnorm row scales", s_got, s_want, 0, 1e-4f);
  const bool ok_q = example::check_close("add_rmsnorm FP8 out / scale", q_got, q_want, kFp8Atol, kFp8Rtol);
  return ok_r && ok_s && ok_q;
}

bool check_swiglu(cudaStream_t stream) {
  const int64_t M = 5, U = 1032;
  const std::vector<uint16_t> hgu = random_bf16(M * 2 * U, -2, 2);
  const std::vector<float> hscale = {1.0f / 64};
  example::DevicePtr d_gu = example::to_device(hgu), d_h8 = example::device_alloc(size_t(M * U)),
                     d_s = example::to_device(hscale);
  const ConstMatrix gate_up = make_matrix(static_cast<const void*>(d_gu.get()), DType::kBF16, M, 2 * U);
  void* h8 = d_h8.get();
  float* d_scale = static_cast<float*>(d_s.get());

  // SwiGLU of a [M, 2U] GEMM output (stacked [gate | up] or interleaved), bf16 or FP8 out.
  swiglu_fp8(gate_up, make_fp8_matrix(h8, M, U), Fp8Scale{Fp8ScaleMode::kStaticPerTensor, d_scale},
             Activation::kSiLU, GateUpLayout::kStacked, stream);

  example::cuda_check(cudaStreamSynchronize(stream), "swiglu_fp8");
  const auto hh8 = example::to_host<uint8_t>(d_h8, size_t(M * U));
  std::vector<float> got(size_t(M * U)), want(size_t(M * U));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < U; ++j) {  // stacked: gate in columns [0, U), up in [U, 2U)
      const float g = bf(hgu[size_t(m * 2 * U + j)]), u = bf(hgu[size_t(m * 2 * U + U + j)]);
      const size_t i = size_t(m * U + j);
      want[i] = std::clamp(example::silu(g) * u / hscale[0], -kFp8E4M3Max, kFp8E4M3Max);
      got[i] = example::fp8_e4m3_to_float(hh8[i]);
    }
  return example::check_close("swiglu_fp8 out / scale", got, want, kFp8Atol, kFp8Rtol);
}

bool check_decode_gemm(cudaStream_t stream) {
  const int64_t M = 5, N = 1000, K = 2048;
  const float w_scale = 1.0f / std::sqrt(float(K));
  const std::vector<uint16_t> hx = random_bf16(M * K, -1, 1), hw = random_bf16(N * K, -w_scale, w_scale);
  example::DevicePtr d_x = example::to_device(hx), d_w = example::to_device(hw),
                     d_y = example::device_alloc(size_t(M * N) * 2);
  const ConstMatrix x = make_matrix(static_cast<const void*>(d_x.get()), DType::kBF16, M, K);
  const ConstMatrix w = make_matrix(static_cast<const void*>(d_w.get()), DType::kBF16, N, K);
  const Matrix y = make_matrix(d_y.get(), DType::kBF16, M, N);

  // Decode GEMM y[M, N] = x[M, K] · W[N, K]ᵀ for M = 1..32: split-K over every SM.
  size_t ws_bytes = decode_gemm_workspace_size(32, N, K);   // once; cudaMalloc + cudaMemset(0) once
  example::DevicePtr d_ws = example::device_alloc(std::max<size_t>(ws_bytes, 16));
  example::cuda_check(cudaMemset(d_ws.get(), 0, ws_bytes), "cudaMemset");
  void* ws = d_ws.get();
  decode_gemm(x, w, y, ws, ws_bytes, stream);               // graph-safe: counters reset themselves

  example::cuda_check(cudaStreamSynchronize(stream), "decode_gemm");
  const auto hy = example::to_host<uint16_t>(d_y, size_t(M * N));
  std::vector<float> got(size_t(M * N)), want(size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(bf(hx[size_t(m * K + k)])) * bf(hw[size_t(n * K + k)]);
      want[size_t(m * N + n)] = float(acc);
      got[size_t(m * N + n)] = bf(hy[size_t(m * N + n)]);
    }
  // fp32 accumulation, one rounding of y to bf16 (relative error up to 2^-9).
  return example::check_close("decode_gemm y", got, want, 1e-4f, 8e-3f);
}

}  // namespace

int main() try {
  if (!example::have_gpu("decoder_block")) return example::kNoGpu;
  cudaStream_t stream;
  example::cuda_check(cudaStreamCreate(&stream), "cudaStreamCreate");
  const bool ok_norm = check_add_rmsnorm(stream);
  const bool ok_swiglu = check_swiglu(stream);
  const bool ok_gemm = check_decode_gemm(stream);
  example::cuda_check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return ok_norm && ok_swiglu && ok_gemm ? example::kOk : example::kWrong;
} catch (const std::exception& e) {  // blockfuse::Error or a CUDA failure
  std::fprintf(stderr, "decoder_block: error: %s\n", e.what());
  return example::kError;
}
