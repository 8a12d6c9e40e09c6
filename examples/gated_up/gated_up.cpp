// The fused gated up-projection h = silu(x·W_gateᵀ) ⊙ (x·W_upᵀ), as the README shows it: interleave
// two nn.Linear-style weights once, run gated_up, check h against the same formula on the CPU.
// Exit status: 0 verified, 1 wrong, 2 error, 77 no CUDA device (examples/common/example_util.h).
#include <blockfuse/blockfuse.h>

#include <cstdio>
#include <random>
#include <vector>

#include "example_util.h"

using namespace blockfuse;

int main() try {
  if (!example::have_gpu("gated_up")) return example::kNoGpu;
  const int64_t M = 77, K = 512, U = 264;  // any M; K and U multiples of 8
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto random_bf16 = [&](int64_t n, float scale) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& e : v) e = example::bf16_from_float(scale * unit(rng));
    return v;
  };
  // Hugging Face layout: gate_proj.weight and up_proj.weight are [U, K], K contiguous.
  const float w_scale = 1.0f / std::sqrt(float(K));
  const std::vector<uint16_t> hx = random_bf16(M * K, 1.0f), hgate = random_bf16(U * K, w_scale),
                              hup = random_bf16(U * K, w_scale);
  example::DevicePtr d_x = example::to_device(hx), d_gate = example::to_device(hgate),
                     d_up = example::to_device(hup), d_w = example::device_alloc(size_t(2 * U * K) * 2),
                     d_out = example::device_alloc(size_t(M * U) * 2);
  void* x = d_x.get();
  void* w = d_w.get();
  void* out = d_out.get();
  cudaStream_t stream;
  example::cuda_check(cudaStreamCreate(&stream), "cudaStreamCreate");

  // Once, at load time: w [2U, K] with row 2j = up_j, row 2j+1 = gate_j.
  interleave_gate_up(make_matrix(d_gate.get(), DType::kBF16, U, K), make_matrix(d_up.get(), DType::kBF16, U, K),
                     make_matrix(w, DType::kBF16, 2 * U, K), stream);

  // x [M, K], w [2U, K] interleaved (see below), out [M, U]: bf16 or fp16, device memory.
  gated_up(make_matrix(x, DType::kBF16, M, K),
           make_matrix(w, DType::kBF16, 2 * U, K),
           make_matrix(out, DType::kBF16, M, U),
           Activation::kSiLU,            // or kGeluTanh (GeGLU, Gemma)
           stream);

  example::cuda_check(cudaStreamSynchronize(stream), "gated_up");
  example::cuda_check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  const std::vector<uint16_t> hout = example::to_host<uint16_t>(d_out, size_t(M * U));

  // CPU check: the same formula in double from the same bf16 inputs; the kernel accumulates in fp32
  // and rounds h once to bf16 (relative error up to 2^-9), hence the tolerance.
  std::vector<float> got(size_t(M * U)), want(size_t(M * U));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < U; ++j) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double xv = example::bf16_to_float(hx[size_t(m * K + k)]);
        g += xv * example::bf16_to_float(hgate[size_t(j * K + k)]);
        u += xv * example::bf16_to_float(hup[size_t(j * K + k)]);
      }
      want[size_t(m * U + j)] = float(example::silu(float(g)) * u);
      got[size_t(m * U + j)] = example::bf16_to_float(hout[size_t(m * U + j)]);
    }
  std::printf("gated_up on %s\n", gated_up_has_sm90() ? "a build with the sm90a kernel" : "the sm80 kernel build");
  return example::check_close("gated_up h [77, 264]", got, want, 1e-4f, 8e-3f) ? example::kOk : example::kWrong;
} catch (const std::exception& e) {  // blockfuse::Error or a CUDA failure
  std::fprintf(stderr, "gated_up: error: %s\n", e.what());
  return example::kError;
}
