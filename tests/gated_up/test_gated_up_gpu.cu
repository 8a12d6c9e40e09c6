// GPU tests of the fused gated up-projection: the kernel against the higher-precision reference
// (cuBLAS fp32 GEMM + the gate in fp32, itself cross-checked against the CPU reference) on fresh
// random inputs, outputs poisoned with NaN before every launch and every element checked; the
// issue's shape grid (M ∈ {1, 7, 127, 1000, 4097} × Llama-3 8B / 70B and a non-tile-multiple K, U),
// both activations, both dtypes, every tile configuration, strided views, determinism, M = 0, and
// argument errors that need real device memory. `GatedUpSanitizer.*` is the small, fast set run
// under compute-sanitizer (scripts/sanitize). Every test skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/activation.cuh"
#include "blockfuse/blockfuse.h"
#include "common/check.h"
#include "common/device.h"
#include "decode_gemm/params.h"
#include "gated_up/reference.h"
#include "testing/gtest/gtest_util.h"
#include "gated_up/tile_configs_sm90.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

// Bytes on the device; an empty size allocates nothing (the empty matrices take no pointer).
using DevBuf = testing::DeviceBuffer<unsigned char>;

struct Shape {
  int64_t M, K, U;
};

// Tolerance of one output rounding on |ref| plus a tiny absolute term (fp32 accumulation order).
double rtol_for(DType t) { return 2 * testing::unit_roundoff(t); }  // 2^-7 bf16, 2^-10 fp16

struct RunResult {
  testing::CompareStats st;
  std::string desc;
};

// Runs gated_up on fresh random data (x ld = K + x_pad, out ld = U + o_pad) and compares every element.
// Padding of x and w (columns K..ld) is NaN: a kernel that read past K would turn outputs NaN.
RunResult run_case(Shape s, DType dt, Activation act, int tile_config, int64_t x_pad = 0, int64_t o_pad = 0,
                   std::vector<uint16_t>* out_bits = nullptr, uint64_t seed = 0, GatedUpKernel kernel = GatedUpKernel::kAuto,
                   int64_t w_pad = 0, Sm90Raster raster = Sm90Raster::kAuto) {
  const int64_t ldx = s.K + x_pad, ldo = s.U + o_pad, ldw = s.K + w_pad;
  DevBuf x(2 * size_t(std::max<int64_t>(s.M, 1)) * ldx), w(2 * size_t(2 * s.U) * ldw), out(2 * size_t(std::max<int64_t>(s.M, 1)) * ldo),
      ref(4 * size_t(std::max<int64_t>(s.M, 1)) * s.U);
  if (seed == 0) seed = testing::fresh_seed();
  const Matrix X{x.data(), dt, s.M, s.K, ldx}, W{w.data(), dt, 2 * s.U, s.K, ldw}, O{out.data(), dt, s.M, s.U, ldo};
  if (x_pad > 0) testing::fill_bits(Matrix{x.data(), dt, s.M, ldx, ldx}, testing::nan_bits(dt));
  if (w_pad > 0) testing::fill_bits(Matrix{w.data(), dt, 2 * s.U, ldw, ldw}, testing::nan_bits(dt));
  testing::fill_uniform(X, -1.f, 1.f, seed);
  const float wb = 1.f / std::sqrt(float(s.K));
  testing::fill_uniform(W, -wb, wb, seed + 1);
  // Poison all of out including padding; the padding must stay poisoned (checked below).
  testing::fill_bits(Matrix{out.data(), dt, s.M, ldo, ldo}, testing::nan_bits(dt));
  GatedUpOptions opt;
  opt.tile_config = tile_config;
  opt.kernel = kernel;
  opt.sm90_raster = raster;
  // A forced sm90 stream-K row takes a workspace (gated_up_workspace_size with the options); the
  // other configs run without one, as before.
  const size_t ws_bytes = kernel == GatedUpKernel::kSm90 && tile_config >= 0 && kSm90TileConfigs[tile_config].stream_k
                              ? gated_up_workspace_size(s.M, s.K, s.U, -1, opt)
                              : 0;
  DevBuf ws(std::max<size_t>(ws_bytes, 16));
  if (ws_bytes > 0) {
    BF_CUDA_CHECK(cudaMemset(ws.data(), 0, ws_bytes));
    gated_up(X, W, O, act, ws.data(), ws_bytes, nullptr, opt);
  } else {
    gated_up(X, W, O, act, nullptr, opt);
  }
  BF_CUDA_CHECK(cudaDeviceSynchronize());
  testing::gated_up_reference_gpu(X, W, reinterpret_cast<float*>(ref.data()), s.U, act);
  RunResult r;
  r.st = testing::compare(O, reinterpret_cast<const float*>(ref.data()), s.U, testing::tolerance(dt, 2));
  r.desc = std::string(kernel_name(kernel)) + " " + dtype_name(dt) + " " + activation_name(act) + " M=" + std::to_string(s.M) + " K=" + std::to_string(s.K) +
           " U=" + std::to_string(s.U) + " tile=" + std::to_string(tile_config) +
           " raster=" + std::to_string(static_cast<int>(raster)) + " ldx=" + std::to_string(ldx) +
           " ldw=" + std::to_string(ldw) + " ldo=" + std::to_string(ldo) + " seed=" + std::to_string(seed) +
           " (replay: BLOCKFUSE_TEST_SEED=" + std::to_string(seed) + ")";
  if (o_pad > 0 && s.M > 0) {
    std::vector<uint16_t> h(size_t(s.M * ldo));
    BF_CUDA_CHECK(cudaMemcpy(h.data(), out.data(), h.size() * 2, cudaMemcpyDeviceToHost));
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t c = s.U; c < ldo; ++c)
        if (h[size_t(m * ldo + c)] != testing::nan_bits(dt)) {
          ADD_FAILURE() << r.desc << ": padding element (" << m << ", " << c << ") was written";
          return r;
        }
  }
  if (out_bits) {
    out_bits->resize(size_t(s.M * ldo));
    BF_CUDA_CHECK(cudaMemcpy(out_bits->data(), out.data(), out_bits->size() * 2, cudaMemcpyDeviceToHost));
  }
  return r;
}

void expect_close(const RunResult& r, DType dt) {
  testing::expect_close(r.st, r.desc, dt == DType::kBF16 ? 1e-2 : 2e-3);
}

// The kernels this build and device can run, each with its tile-table size.
std::vector<std::pair<GatedUpKernel, int>> kernels_here() {
  std::vector<std::pair<GatedUpKernel, int>> k{{GatedUpKernel::kSm80, gated_up_num_tile_configs()}};
  if (gated_up_has_sm90() && detail::current_device_spec().cc_major == 9) k.push_back({GatedUpKernel::kSm90, kNumSm90TileConfigs});
  return k;
}

bool config_fits(int c) { return gated_up_tile_config(c).smem_bytes() <= detail::current_device_spec().max_smem_per_block; }

// ---- the issue's grid: M × (Llama-3 8B, 70B, a non-tile-multiple K/U), both activations ----
class GatedUpGrid : public ::testing::TestWithParam<std::tuple<int64_t, int>> {};

TEST_P(GatedUpGrid, MatchesReference) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  const auto [M, shape_idx] = GetParam();
  const Shape shapes[] = {{0, 4096, 14336}, {0, 8192, 28672}, {0, 1000, 1000}};
  Shape s = shapes[shape_idx];
  s.M = M;
  for (Activation act : {Activation::kSiLU, Activation::kGeluTanh}) expect_close(run_case(s, DType::kBF16, act, -1), DType::kBF16);
}

std::string grid_name(const ::testing::TestParamInfo<std::tuple<int64_t, int>>& info) {
  static const char* const kNames[] = {"Llama8B", "Llama70B", "K1000_U1000"};
  return std::string(kNames[std::get<1>(info.param)]) + "_M" + std::to_string(std::get<0>(info.param));
}
const int64_t kGridM[] = {1, 7, 127, 1000, 4097};
INSTANTIATE_TEST_SUITE_P(Shapes, GatedUpGrid, ::testing::Combine(::testing::ValuesIn(kGridM), ::testing::Values(0, 1, 2)),
                         grid_name);

TEST(GatedUpGpu, Fp16) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  for (Shape s : {Shape{1, 4096, 14336}, Shape{127, 1000, 1000}, Shape{1000, 4096, 14336}})
    for (Activation act : {Activation::kSiLU, Activation::kGeluTanh}) expect_close(run_case(s, DType::kFP16, act, -1), DType::kFP16);
}

TEST(GatedUpGpu, EveryKernelAndTileConfig) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  for (auto [kern, n] : kernels_here()) {
    for (int c = 0; c < n; ++c) {
      if (kern == GatedUpKernel::kSm80 && !config_fits(c)) {
        std::printf("sm80 tile config %d needs more shared memory than this device has; not tested here\n", c);
        continue;
      }
      for (Shape s : {Shape{1, 4096, 14336}, Shape{333, 136, 200}, Shape{1000, 8192, 1024}, Shape{4097, 4096, 14336}})
        for (DType dt : {DType::kBF16, DType::kFP16}) expect_close(run_case(s, dt, Activation::kSiLU, c, 0, 0, nullptr, 0, kern), dt);
    }
  }
}

// Every sm90 row under both forced tile orders, on a grid with more N tiles than M tiles (CUTLASS's
// own choice there: along M) and one with more M tiles (along N): a wrong walk leaves tiles unwritten
// (the poisoned output) or written twice.
TEST(GatedUpGpu, Sm90EveryRowEveryRaster) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  if (!gated_up_has_sm90() || detail::current_device_spec().cc_major != 9)
    GTEST_SKIP() << "no sm90a kernels on this build or device: the raster is the sm90 scheduler's";
  for (int c = 0; c < kNumSm90TileConfigs; ++c)
    for (Sm90Raster r : {Sm90Raster::kAlongM, Sm90Raster::kAlongN})
      for (Shape s : {Shape{1000, 1000, 1000}, Shape{4097, 512, 256}})
        expect_close(run_case(s, DType::kBF16, Activation::kSiLU, c, 0, 0, nullptr, 0, GatedUpKernel::kSm90, 0, r), DType::kBF16);
}

// A forced raster where the call runs another kernel (kAuto at 7 rows: the decode kernel) is refused,
// naming the option, and nothing is written.
TEST(GatedUpGpu, Sm90RasterOnlyWhereSm90Runs) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  const DType dt = DType::kBF16;
  const int64_t M = 7, K = 64, U = 32;
  DevBuf x(2 * M * K), w(2 * 2 * U * K), out(2 * M * U);
  const Matrix X{x.data(), dt, M, K, K}, W{w.data(), dt, 2 * U, K, K}, O{out.data(), dt, M, U, U};
  testing::fill_uniform(X, -1.f, 1.f, testing::fresh_seed());
  testing::fill_uniform(W, -1.f, 1.f, testing::fresh_seed());
  testing::fill_bits(O, testing::nan_bits(dt));
  GatedUpOptions opt;
  opt.sm90_raster = Sm90Raster::kAlongN;
  try {
    gated_up(X, W, O, Activation::kSiLU, nullptr, opt);
    ADD_FAILURE() << "a raster on the decode kernel was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'options.sm90_raster'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("decode"), std::string::npos) << e.what();
  }
  BF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> h(size_t(M * U));
  BF_CUDA_CHECK(cudaMemcpy(h.data(), out.data(), h.size() * 2, cudaMemcpyDeviceToHost));
  for (uint16_t v : h) ASSERT_EQ(v, testing::nan_bits(dt)) << "the refused call wrote its output";
}

TEST(GatedUpGpu, Sm80ExplicitOnGrid) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  // The auto choice on Hopper is the sm90 kernel; keep the portable kernel covered on big shapes too.
  for (Shape s : {Shape{7, 8192, 28672}, Shape{4097, 4096, 14336}})
    for (Activation act : {Activation::kSiLU, Activation::kGeluTanh})
      expect_close(run_case(s, DType::kBF16, act, -1, 0, 0, nullptr, 0, GatedUpKernel::kSm80), DType::kBF16);
}

TEST(GatedUpGpu, StridedViews) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  for (auto [kern, n] : kernels_here())
    for (int c = -1; c < n; ++c)
      expect_close(run_case(Shape{129, 512, 264}, DType::kBF16, Activation::kSiLU, c, /*x_pad=*/24, /*o_pad=*/40, nullptr, 0, kern,
                            /*w_pad=*/16),
                   DType::kBF16);
}

TEST(GatedUpGpu, BitwiseDeterministic) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  const uint64_t seed = testing::fresh_seed();
  std::vector<uint16_t> a, b;
  run_case(Shape{1000, 4096, 14336}, DType::kBF16, Activation::kSiLU, -1, 0, 0, &a, seed);
  run_case(Shape{1000, 4096, 14336}, DType::kBF16, Activation::kSiLU, -1, 0, 0, &b, seed);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 2), 0) << "two runs on the same inputs differ";
}

TEST(GatedUpGpu, AgreesWithCpuReference) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  // The kernel against the CPU reference (fp32 sums, unrounded) on host copies of the same inputs,
  // independent of the cuBLAS path that every other test compares with.
  for (Shape s : {Shape{5, 136, 40}, Shape{70, 256, 200}}) {
    for (DType dt : {DType::kBF16, DType::kFP16}) {
      for (Activation act : {Activation::kSiLU, Activation::kGeluTanh}) {
        DevBuf x(2 * s.M * s.K), w(2 * 2 * s.U * s.K), out(2 * s.M * s.U);
        const uint64_t seed = testing::fresh_seed();
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << activation_name(act) << " M=" << s.M << " K=" << s.K
                                          << " U=" << s.U << ", " << testing::seed_note(seed));
        testing::fill_uniform(Matrix{x.data(), dt, s.M, s.K, s.K}, -1.f, 1.f, seed);
        testing::fill_uniform(Matrix{w.data(), dt, 2 * s.U, s.K, s.K}, -0.2f, 0.2f, seed + 1);
        testing::fill_bits(make_matrix(out.data(), dt, s.M, s.U), testing::nan_bits(dt));
        gated_up(make_matrix((const void*)x.data(), dt, s.M, s.K), make_matrix((const void*)w.data(), dt, 2 * s.U, s.K),
                 make_matrix(out.data(), dt, s.M, s.U), act);
        BF_CUDA_CHECK(cudaDeviceSynchronize());
        testing::HostMatrix hx(dt, s.M, s.K), hw(dt, 2 * s.U, s.K), hout(dt, s.M, s.U);
        BF_CUDA_CHECK(cudaMemcpy(hx.bits.data(), x.data(), 2 * s.M * s.K, cudaMemcpyDeviceToHost));
        BF_CUDA_CHECK(cudaMemcpy(hw.bits.data(), w.data(), 2 * 2 * s.U * s.K, cudaMemcpyDeviceToHost));
        BF_CUDA_CHECK(cudaMemcpy(hout.bits.data(), out.data(), 2 * s.M * s.U, cudaMemcpyDeviceToHost));
        std::vector<float> f32(size_t(s.M * s.U));
        gated_up_reference_host_f32(hx.view(), hw.view(), f32.data(), s.U, act);
        // One output rounding (rtol) plus the fp32 summation-order difference (|h| ~ 1 here, so 1e-5 absolute).
        testing::expect_close(testing::compare_host(s.M, s.U, [&](int64_t m, int64_t j) { return hout.at(m, j); },
                                                    [&](int64_t m, int64_t j) { return f32[size_t(m * s.U + j)]; },
                                                    testing::Tolerance{1e-5, rtol_for(dt)}),
                              "output");
      }
    }
  }
}

TEST(GatedUpGpu, ReferenceGpuMatchesCpu) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  // The GPU reference (cuBLAS fp32 GEMM + gate) is what every kernel check trusts, so it is checked
  // itself against the CPU reference (plain fp32 loops), on strided x and w with NaN padding, a
  // strided fp32 result whose padding must stay untouched, odd M and a K that is no tile multiple.
  // Both are unrounded fp32; they differ only by summation order, bounded per element below.
  for (Shape s : {Shape{1, 8, 8}, Shape{5, 136, 40}, Shape{33, 1000, 24}, Shape{70, 264, 200}}) {
    for (DType dt : {DType::kBF16, DType::kFP16}) {
      for (Activation act : {Activation::kSiLU, Activation::kGeluTanh}) {
        const int64_t ldx = s.K + 8, ldw = s.K + 16, ldr = s.U + 3;
        const uint64_t seed = testing::fresh_seed();
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << activation_name(act) << " M=" << s.M << " K=" << s.K
                                          << " U=" << s.U << ", " << testing::seed_note(seed));
        DevBuf x(2 * s.M * ldx), w(2 * 2 * s.U * ldw), ref(4 * s.M * ldr);
        const Matrix X{x.data(), dt, s.M, s.K, ldx}, W{w.data(), dt, 2 * s.U, s.K, ldw};
        testing::fill_bits(Matrix{x.data(), dt, s.M, ldx, ldx}, testing::nan_bits(dt));
        testing::fill_bits(Matrix{w.data(), dt, 2 * s.U, ldw, ldw}, testing::nan_bits(dt));
        testing::fill_uniform(X, -1.f, 1.f, seed);
        testing::fill_uniform(W, -0.1f, 0.1f, seed + 1);
        BF_CUDA_CHECK(cudaMemset(ref.data(), 0xFF, 4 * s.M * ldr));  // 0xFFFFFFFF: a NaN, kept in the padding
        testing::gated_up_reference_gpu(X, W, reinterpret_cast<float*>(ref.data()), ldr, act);
        BF_CUDA_CHECK(cudaDeviceSynchronize());
        testing::HostMatrix hx(dt, s.M, s.K, ldx), hw(dt, 2 * s.U, s.K, ldw);
        std::vector<uint32_t> gpu(size_t(s.M * ldr));
        BF_CUDA_CHECK(cudaMemcpy(hx.bits.data(), x.data(), 2 * s.M * ldx, cudaMemcpyDeviceToHost));
        BF_CUDA_CHECK(cudaMemcpy(hw.bits.data(), w.data(), 2 * 2 * s.U * ldw, cudaMemcpyDeviceToHost));
        BF_CUDA_CHECK(cudaMemcpy(gpu.data(), ref.data(), 4 * s.M * ldr, cudaMemcpyDeviceToHost));
        std::vector<float> cpu(size_t(s.M * s.U));
        gated_up_reference_host_f32(hx.view(), hw.view(), cpu.data(), s.U, act);
        // Summation-order bound: each of up, gate is an fp32 sum of K exact products (2-byte inputs),
        // so two orders differ by at most ~2·K·2^-24·Σ|x·w|; K·2^-22·Σ|x·w| leaves 2x for the tensor
        // cores' truncating accumulation. That error reaches h = act(g)·u through |act'(g)| <= 1.13
        // (SiLU 1.1, tanh-GELU 1.13) times |u|, and through |act(g)|; expf/tanhf add a few ulp of h.
        const double gamma = double(s.K) * std::ldexp(1.0, -22);
        testing::CompareStats st;
        for (int64_t m = 0; m < s.M; ++m) {
          for (int64_t j = 0; j < s.U; ++j) {
            double bu = 0, bg = 0, u = 0, g = 0;
            for (int64_t k = 0; k < s.K; ++k) {
              const double xv = hx.at(m, k), wu = hw.at(2 * j, k), wg = hw.at(2 * j + 1, k);
              bu += std::fabs(xv * wu);
              bg += std::fabs(xv * wg);
              u += xv * wu;
              g += xv * wg;
            }
            const double act_g = act_f64(act, g);
            const double c = cpu[size_t(m * s.U + j)];
            const double tol = 1.13 * gamma * bg * (std::fabs(u) + gamma * bu) + (std::fabs(act_g) + 1.13 * gamma * bg) * gamma * bu +
                               1e-6 * std::fabs(c) + 1e-30;
            // tanhf's error is a few ulp of 1 (not of 1 + tanh, which cancels for negative g), scaled by
            // 0.5·|g|·|u|, and its argument carries a few ulp of |g|³.
            const double tanh_err = act == Activation::kGeluTanh ? 1e-6 * std::fabs(g) * (1 + g * g) * std::fabs(u) : 0;
            float gv;
            std::memcpy(&gv, &gpu[size_t(m * ldr + j)], 4);
            st.add(m, j, gv, c, tol + tanh_err);
          }
          for (int64_t j = s.U; j < ldr; ++j)
            ASSERT_EQ(gpu[size_t(m * ldr + j)], 0xFFFFFFFFu) << "GPU reference wrote padding at (" << m << ", " << j << ")";
        }
        // The per-element bounds only: they follow each element's cancellation, a global L2 bound would not.
        testing::expect_close(st, "GPU vs CPU reference", INFINITY);
      }
    }
  }
}

TEST(GatedUpGpu, InterleavedFromSeparateWeights) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  // The device interleave helper + kernel compute act(x·gateᵀ)·(x·upᵀ) from separate weights.
  const int64_t M = 64, K = 256, U = 128;
  const DType dt = DType::kBF16;
  DevBuf x(2 * M * K), gate(2 * U * K), up(2 * U * K), w(2 * 2 * U * K), out(2 * M * U), c(4 * M * U * 2);
  const uint64_t seed = testing::fresh_seed();
  testing::fill_uniform(Matrix{x.data(), dt, M, K, K}, -1.f, 1.f, seed);
  testing::fill_uniform(Matrix{gate.data(), dt, U, K, K}, -0.1f, 0.1f, seed + 1);
  testing::fill_uniform(Matrix{up.data(), dt, U, K, K}, -0.1f, 0.1f, seed + 2);
  interleave_gate_up(make_matrix((const void*)gate.data(), dt, U, K), make_matrix((const void*)up.data(), dt, U, K), make_matrix(w.data(), dt, 2 * U, K));
  gated_up(make_matrix((const void*)x.data(), dt, M, K), make_matrix((const void*)w.data(), dt, 2 * U, K), make_matrix(out.data(), dt, M, U),
           Activation::kSiLU);
  BF_CUDA_CHECK(cudaDeviceSynchronize());
  testing::HostMatrix hx(dt, M, K), hg(dt, U, K), hu(dt, U, K), ho(dt, M, U);
  BF_CUDA_CHECK(cudaMemcpy(hx.bits.data(), x.data(), 2 * M * K, cudaMemcpyDeviceToHost));
  BF_CUDA_CHECK(cudaMemcpy(hg.bits.data(), gate.data(), 2 * U * K, cudaMemcpyDeviceToHost));
  BF_CUDA_CHECK(cudaMemcpy(hu.bits.data(), up.data(), 2 * U * K, cudaMemcpyDeviceToHost));
  BF_CUDA_CHECK(cudaMemcpy(ho.bits.data(), out.data(), 2 * M * U, cudaMemcpyDeviceToHost));
  const auto ref = [&](int64_t m, int64_t j) {
    double g = 0, u = 0;
    for (int64_t k = 0; k < K; ++k) {
      g += double(hx.at(m, k)) * hg.at(j, k);
      u += double(hx.at(m, k)) * hu.at(j, k);
    }
    return g / (1 + std::exp(-g)) * u;
  };
  // Two bf16 roundings (the output, and 2^-7 of slack for the fp32 sums), 1e-4 absolute near zero.
  testing::expect_close(testing::compare_host(M, U, [&](int64_t m, int64_t j) { return ho.at(m, j); }, ref,
                                              testing::tolerance(dt, 2, 1e-4)),
                        "out");
  // And the device de-interleave returns the original weights bit for bit.
  DevBuf g2(2 * U * K), u2(2 * U * K);
  deinterleave_gate_up(make_matrix((const void*)w.data(), dt, 2 * U, K), make_matrix(g2.data(), dt, U, K), make_matrix(u2.data(), dt, U, K));
  std::vector<uint16_t> hg2(size_t(U * K)), hu2(size_t(U * K));
  BF_CUDA_CHECK(cudaMemcpy(hg2.data(), g2.data(), 2 * U * K, cudaMemcpyDeviceToHost));
  BF_CUDA_CHECK(cudaMemcpy(hu2.data(), u2.data(), 2 * U * K, cudaMemcpyDeviceToHost));
  EXPECT_EQ(hg2, hg.bits);
  EXPECT_EQ(hu2, hu.bits);
}

TEST(GatedUpGpu, EmptyAndErrorsWithDeviceMemory) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  const DType dt = DType::kBF16;
  DevBuf x(2 * 64 * 64), w(2 * 64 * 64), out(2 * 64 * 32);
  EXPECT_NO_THROW(gated_up(make_matrix((const void*)x.data(), dt, 0, 64), make_matrix((const void*)w.data(), dt, 64, 64),
                           make_matrix(out.data(), dt, 0, 32), Activation::kSiLU));
  // out aliasing x is refused, naming 'out'.
  try {
    gated_up(make_matrix((const void*)x.data(), dt, 16, 64), make_matrix((const void*)w.data(), dt, 64, 64), make_matrix(x.data(), dt, 16, 32),
             Activation::kSiLU);
    ADD_FAILURE() << "overlap not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'out'"), std::string::npos) << e.what();
  }
  // A host pointer for w is refused, naming 'w'.
  std::vector<uint16_t> host(64 * 64);
  try {
    gated_up(make_matrix((const void*)x.data(), dt, 16, 64), make_matrix((const void*)host.data(), dt, 64, 64), make_matrix(out.data(), dt, 16, 32),
             Activation::kSiLU);
    ADD_FAILURE() << "host pointer not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
}

// The sm90 stream-K row (opt-in) refuses to run without its workspace, naming it, and leaves a
// workspace shared with the decode kernel's region zeroed there.
TEST(GatedUpGpu, Sm90StreamKWorkspace) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  if (!(gated_up_has_sm90() && detail::current_device_spec().cc_major == 9))
    GTEST_SKIP() << "no sm90a kernels on this build or device: the stream-K row cannot run here";
  int sk = -1;
  for (int c = 0; c < kNumSm90TileConfigs; ++c)
    if (kSm90TileConfigs[c].stream_k) sk = c;
  ASSERT_GE(sk, 0) << "the table has a stream-K row";
  const Shape s{4096, 4096, 14336};
  GatedUpOptions opt;
  opt.kernel = GatedUpKernel::kSm90;
  opt.tile_config = sk;
  const size_t need = gated_up_workspace_size(s.M, s.K, s.U, -1, opt);
  const size_t decode_region = gated_up_workspace_size(s.M, s.K, s.U, -1);
  ASSERT_GT(need, decode_region) << "the stream-K region comes after the decode kernel's";
  DevBuf x(2 * size_t(s.M * s.K)), w(2 * size_t(2 * s.U * s.K)), out(2 * size_t(s.M * s.U)), ws(need);
  const Matrix X{x.data(), DType::kBF16, s.M, s.K, s.K}, W{w.data(), DType::kBF16, 2 * s.U, s.K, s.K},
      O{out.data(), DType::kBF16, s.M, s.U, s.U};
  testing::fill_uniform(X, -1.f, 1.f, testing::fresh_seed());
  testing::fill_uniform(W, -0.02f, 0.02f, testing::fresh_seed());
  testing::expect_arg_error([&] { gated_up(X, W, O, Activation::kSiLU, nullptr, opt); }, "workspace");
  testing::expect_arg_error([&] { gated_up(X, W, O, Activation::kSiLU, ws.data(), need - 1, nullptr, opt); }, "workspace");
  BF_CUDA_CHECK(cudaMemset(ws.data(), 0, need));
  for (int rep = 0; rep < 2; ++rep) gated_up(X, W, O, Activation::kSiLU, ws.data(), need, nullptr, opt);
  BF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> head(decode_region);
  BF_CUDA_CHECK(cudaMemcpy(head.data(), ws.data(), head.size(), cudaMemcpyDeviceToHost));
  size_t nonzero = 0;
  for (unsigned char b : head) nonzero += b != 0;
  EXPECT_EQ(nonzero, 0u) << "the decode kernel's region of a shared workspace was written";
}

// The heuristic with a workspace (no tile config): at a point where the with-workspace table picks
// the stream-K row (Llama-3.1 405B at 256 tokens, +2.4 % over row 1 in the measured grid; the
// smallest such point: 3.3 GiB of weight) a workspace of gated_up_workspace_size(m, k, u, -1, {})
// bytes runs it; one byte less, or a misaligned pointer, falls back to the row chosen without one
// and is no error. Correct every time (all 256 rows against the reference, output poisoned first),
// and the decode kernel's counters at the start of the workspace stay zero.
TEST(GatedUpGpu, Sm90HeuristicStreamKWithWorkspace) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  const detail::DeviceSpec dev = detail::current_device_spec();
  if (!(gated_up_has_sm90() && dev.cc_major == 9 && dev.cc_minor == 0))
    GTEST_SKIP() << "no sm90a kernels on this build or device: the stream-K row cannot run here";
  const Shape s{256, 16384, 53248};
  const int cw = choose_gated_up_sm90_tile_config({s.M, s.K, s.U}, dev, /*with_workspace=*/true);
  if (!kSm90TileConfigs[cw].stream_k)
    GTEST_SKIP() << "this device's with-workspace table has no stream-K point at this shape (" << dev.sm_count
                 << " SMs, " << dev.dram_gbps << " GB/s): no stream-K choice to test";
  const size_t need = gated_up_workspace_size(s.M, s.K, s.U, -1, GatedUpOptions{});
  const size_t base = gated_up_workspace_size(s.M, s.K, s.U, -1);
  ASSERT_GT(need, base) << "the options overload sizes the heuristic's stream-K row";
  ASSERT_GT(need, decode::kCounterBytes) << "the stream-K region starts after the decode counters";
  size_t free_bytes = 0, total_bytes = 0;
  BF_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t w_bytes = 2 * size_t(2 * s.U) * size_t(s.K);
  if (free_bytes < w_bytes + (size_t(1) << 30)) GTEST_SKIP() << "needs " << w_bytes / (1 << 20) << " MiB of weight + 1 GiB";

  const DType dt = DType::kBF16;
  DevBuf x(2 * size_t(s.M * s.K)), w(w_bytes), out(2 * size_t(s.M * s.U)), ref(4 * size_t(s.M * s.U)), ws(need);
  const Matrix X{x.data(), dt, s.M, s.K, s.K}, W{w.data(), dt, 2 * s.U, s.K, s.K}, O{out.data(), dt, s.M, s.U, s.U};
  const uint64_t seed = testing::fresh_seed();
  testing::fill_uniform(X, -1.f, 1.f, seed);
  testing::fill_uniform(W, -1.f / std::sqrt(float(s.K)), 1.f / std::sqrt(float(s.K)), seed + 1);
  BF_CUDA_CHECK(cudaMemset(ws.data(), 0, need));
  testing::gated_up_reference_gpu(X, W, reinterpret_cast<float*>(ref.data()), s.U, Activation::kSiLU);
  struct Case {
    size_t offset, bytes;
    const char* what;
  };
  for (const Case c : {Case{0, need, "the stream-K row"}, Case{0, need - 1, "one byte short: the fallback"},
                       Case{8, need - 8, "misaligned: the fallback"}}) {
    testing::fill_bits(O, testing::nan_bits(dt));
    EXPECT_NO_THROW(gated_up(X, W, O, Activation::kSiLU, static_cast<char*>(static_cast<void*>(ws.data())) + c.offset,
                             c.bytes, nullptr))
        << c.what;
    BF_CUDA_CHECK(cudaDeviceSynchronize());
    testing::expect_close(testing::compare(O, reinterpret_cast<const float*>(ref.data()), s.U, testing::tolerance(dt, 2)),
                          std::string(c.what) + " seed=" + std::to_string(seed) + " (replay: BLOCKFUSE_TEST_SEED=" +
                              std::to_string(seed) + ")",
                          1e-2);
    std::vector<unsigned char> head(decode::kCounterBytes);
    BF_CUDA_CHECK(cudaMemcpy(head.data(), ws.data(), head.size(), cudaMemcpyDeviceToHost));
    size_t nonzero = 0;
    for (unsigned char b : head) nonzero += b != 0;
    EXPECT_EQ(nonzero, 0u) << c.what << ": the decode kernel's counters were written";
  }
}

// The tile tables' device class on the device itself (sm90_reads_h200_tables, from device_spec's peak
// DRAM bandwidth): an H200 reads the H200's tables, an H100 the H100's. The figure is printed: the
// class boundary (kSm90H200TableMinDramGbps) sits between the two.
TEST(GatedUpGpu, TileTableClassOfThisDevice) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  const detail::DeviceSpec dev = detail::current_device_spec();
  cudaDeviceProp prop{};
  BF_CUDA_CHECK(cudaGetDeviceProperties(&prop, detail::current_device()));
  const std::string name = prop.name;
  std::printf("[tile tables] %s: %d SMs, %.0f GB/s peak DRAM: the %s tables\n", name.c_str(), dev.sm_count,
              dev.dram_gbps, sm90_reads_h200_tables(dev) ? "H200's" : "H100's");
  if (name.find("H200") != std::string::npos)
    EXPECT_TRUE(sm90_reads_h200_tables(dev)) << name << ": " << dev.dram_gbps << " GB/s";
  else if (name.find("H100") != std::string::npos)
    EXPECT_FALSE(sm90_reads_h200_tables(dev)) << name << ": " << dev.dram_gbps << " GB/s";
  else
    GTEST_SKIP() << name << " is neither an H100 nor an H200: no class to check";
}

// ---- the small set for compute-sanitizer: tails in M, K and U, every tile config ----
TEST(GatedUpSanitizer, TailsEveryConfig) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  for (auto [kern, n] : kernels_here())
    for (int c = 0; c < n; ++c) {
      if (kern == GatedUpKernel::kSm80 && !config_fits(c)) continue;
      for (Shape s : {Shape{1, 8, 8}, Shape{67, 136, 72}, Shape{130, 264, 136}})
        expect_close(run_case(s, DType::kBF16, Activation::kSiLU, c, 8, 8, nullptr, 0, kern, /*w_pad=*/8), DType::kBF16);
    }
}

TEST(GatedUpSanitizer, GeluFp16) {
  BF_SKIP_WITHOUT_GPU("gated_up");
  expect_close(run_case(Shape{33, 72, 264}, DType::kFP16, Activation::kGeluTanh, -1), DType::kFP16);
}

}  // namespace
}  // namespace blockfuse
