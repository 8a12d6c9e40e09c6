// GPU tests of blockfuse::add_rmsnorm / add_rmsnorm_fp8 (src/add_rmsnorm/add_rmsnorm.cu) against
// the CPU reference (src/add_rmsnorm/reference.h, itself tested on hand rows in tests/cpu/):
//   - residual_out bit-exact (both sum x + residual in fp32 and round once);
//   - out within 2 roundings of the dtype of the fp64 value computed from the same rounded
//     residual_out (the kernel's fp32 sum of squares and rsqrtf add ~1e-6 relative);
//   - FP8 out compared after de-scaling (q · scale) within one e4m3 step (2^-3 relative, plus the
//     subnormal step 2^-9 · scale), saturation at ±448 included; dynamic scales within 1e-5 of the
//     reference's (fp32 vs fp64 v), static scale read from device memory (testing/compare.h).
// Shapes: rows 1, 3, 255 (and 65537 at H = 8 and 64), H = 8, 24 (one chunk; a masked tail), 3584,
// 4096, 5120, 16384 (each register-path configuration; on sm_90 8192..16384 take the cluster path:
// C = 4 CTAs per row below H = 16384, 8 from it), 8200 and 16392 (cluster slices of unequal length: the last CTA's slice
// is shorter, its tail chunks masked), 32768 / 32776 / 65536 (the largest register row; the loop
// path; on sm_90 clusters of 8) and 131072 / 131080 (sm_90: the widest cluster shape, v = 4, and
// the fallback to the loop path beyond it). On sm_90 the one-block kernels are also run with the
// clusters switched off (detail::AddRmsNormTuning::clusters). Determinism: the same inputs twice give bit-identical outputs, and a
// constant row gives one output value in every CTA's slice (all CTAs of a cluster must use the same
// rsqrt and scale). Outputs are poisoned (NaN) before each launch; strided cases carry sentinel
// padding that must come back untouched. Each test skips, saying so, where no CUDA device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "add_rmsnorm/config.h"
#include "add_rmsnorm/reference.h"
#include "blockfuse/add_rmsnorm.h"
#include "testing/gtest/gtest_util.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;

#define SKIP_WITHOUT_GPU() BF_SKIP_WITHOUT_GPU("the add_rmsnorm kernels")

#define CUDA_OK(expr) BF_CUDA_OK(expr)

using Bytes = testing::DeviceBuffer<unsigned char>;
using testing::to_device;
using testing::to_host;

enum class Fp8 { kNone, kStatic, kStaticSaturating, kDynamic };
const char* fp8_name(Fp8 f) {
  switch (f) {
    case Fp8::kNone: return "dtype-out";
    case Fp8::kStatic: return "fp8-static";
    case Fp8::kStaticSaturating: return "fp8-static-saturating";
    case Fp8::kDynamic: return "fp8-dynamic";
  }
  return "?";
}

struct Case {
  DType dt = DType::kBF16;
  int64_t rows = 1, h = 8;
  int64_t pad = 0;         // row padding (elements) of every matrix (residual and out get other amounts)
  bool has_res = true;     // residual given (else absent)
  bool write_res = true;   // residual_out written (else absent)
  bool in_place = false;   // residual_out aliases residual
  bool gemma = false;
  Fp8 fp8 = Fp8::kNone;
  float eps = 1e-6f;
  cudaStream_t stream = nullptr;
  // Edits the host inputs before the copies (to plant NaN/Inf).
  std::function<void(HostMatrix& x, HostMatrix& res)> tweak;
};

// A case of `rows` x `h` in dtype `dt`, every other field at its default.
Case shape(DType dt, int64_t rows, int64_t h) {
  Case c;
  c.dt = dt;
  c.rows = rows;
  c.h = h;
  return c;
}

// The launch choices run_case passes (detail::add_rmsnorm_tuned): the library's defaults unless a
// test's scope overrides them (ClustersOff, KernelRule).
detail::AddRmsNormTuning g_tuning;

bool is_nan_bits(DType t, uint16_t b) { return std::isnan(host::to_float(t, b)); }

void run_case(const Case& c) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(std::string(dtype_name(c.dt)) + " rows=" + std::to_string(c.rows) + " H=" + std::to_string(c.h) +
               " pad=" + std::to_string(c.pad) + (c.has_res ? " residual" : " no-residual") +
               (c.in_place ? " in-place" : c.write_res ? " residual_out" : " no-residual_out") +
               (c.gemma ? " gemma" : "") + " " + fp8_name(c.fp8) + "; " + testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const int64_t M = c.rows, H = c.h;
  HostMatrix x(c.dt, M, H, H + c.pad), res(c.dt, c.has_res ? M : 0, H, H + 2 * c.pad), w(c.dt, 1, H);
  x.fill_uniform(rng, -2.f, 2.f);
  res.fill_uniform(rng, -2.f, 2.f);
  w.fill_uniform(rng, c.gemma ? -1.f : -2.f, c.gemma ? 1.f : 2.f);
  if (c.tweak) c.tweak(x, res);

  std::vector<uint16_t> r_ref(size_t(M * H));
  std::vector<double> v_ref(size_t(M * H));
  reference::add_rmsnorm(c.dt, M, H, x.bits.data(), x.ld, c.has_res ? res.bits.data() : nullptr, res.ld,
                         w.bits.data(), c.eps, c.gemma, r_ref.data(), v_ref.data());

  HostMatrix ro(c.dt, M, H, H + c.pad + 8);
  ro.poison();
  HostMatrix out(c.dt, M, H, H + 3 * c.pad);
  out.poison();
  const int64_t ld8 = H + 8 * c.pad;  // bytes
  std::vector<uint8_t> out8(size_t(M * ld8), 0xAB);  // padding sentinel
  for (int64_t r = 0; r < M; ++r) std::memset(&out8[size_t(r * ld8)], 0x7f, size_t(H));  // e4m3 NaN
  const bool fp8 = c.fp8 != Fp8::kNone, dynamic = c.fp8 == Fp8::kDynamic;
  float static_scale = 1.0f;
  if (c.fp8 == Fp8::kStatic || c.fp8 == Fp8::kStaticSaturating) {
    double amax = 0;
    for (double v : v_ref)
      if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
    // 300: every value representable; 900: the largest ~half of the range saturates at ±448.
    static_scale = amax > 0 ? float(amax / (c.fp8 == Fp8::kStatic ? 300.0 : 900.0)) : 1.0f;
  }
  std::vector<float> scales(size_t(dynamic ? std::max<int64_t>(M, 1) : 1), std::nanf(""));
  if (!dynamic) scales[0] = static_scale;

  const Bytes dx = to_device(x), dres = to_device(res), dw = to_device(w), dro = to_device(ro), dout = to_device(out),
              dout8 = to_device(out8.data(), out8.size()), dscale = to_device(scales.data(), scales.size() * sizeof(float));
  const ConstMatrix xv{dx.data(), c.dt, M, H, x.ld};
  const ConstMatrix resv = c.has_res ? ConstMatrix{dres.data(), c.dt, M, H, res.ld} : ConstMatrix{};
  const ConstMatrix wv{dw.data(), c.dt, 1, H, H};
  Matrix rov{};
  if (c.in_place)
    rov = Matrix{dres.data(), c.dt, M, H, res.ld};
  else if (c.write_res)
    rov = Matrix{dro.data(), c.dt, M, H, ro.ld};
  RmsNormOptions opt;
  opt.eps = c.eps;
  opt.gemma_one_plus_w = c.gemma;
  if (fp8)
    detail::add_rmsnorm_fp8_tuned(xv, resv, wv, rov, Fp8Matrix{dout8.data(), M, H, ld8},
                                  Fp8Scale{dynamic ? Fp8ScaleMode::kDynamicPerRow : Fp8ScaleMode::kStaticPerTensor,
                                           reinterpret_cast<float*>(dscale.data())},
                                  opt, g_tuning, c.stream);
  else
    detail::add_rmsnorm_tuned(xv, resv, wv, rov, Matrix{dout.data(), c.dt, M, H, out.ld}, opt, g_tuning, c.stream);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaStreamSynchronize(c.stream));

  // residual_out: bit-exact, padding untouched.
  if (c.write_res || c.in_place) {
    HostMatrix got = c.in_place ? res : ro;
    to_host(c.in_place ? dres : dro, got.bits.data());
    const HostMatrix& before = c.in_place ? res : ro;
    int64_t bad = 0, pad_bad = 0;
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t i = 0; i < H; ++i) {
        const uint16_t g = got.bits[size_t(r * got.ld + i)], e = r_ref[size_t(r * H + i)];
        const bool ok = g == e || (is_nan_bits(c.dt, g) && is_nan_bits(c.dt, e));
        if (!ok && bad++ < 5)
          ADD_FAILURE() << "residual_out(" << r << ", " << i << ") = " << host::to_float(c.dt, g) << ", expected "
                        << host::to_float(c.dt, e);
      }
      for (int64_t i = H; i < got.ld; ++i)
        if (got.bits[size_t(r * got.ld + i)] != before.bits[size_t(r * got.ld + i)]) ++pad_bad;
    }
    EXPECT_EQ(bad, 0) << "residual_out differs from round(x + residual)";
    EXPECT_EQ(pad_bad, 0) << "residual_out padding written (ld ignored?)";
  } else {
    std::vector<uint16_t> after(ro.bits.size());
    to_host(dro, after.data());
    EXPECT_EQ(after, ro.bits) << "the unused residual_out buffer was written";
  }
  if (c.has_res && !c.in_place) {  // an input stays as it was
    std::vector<uint16_t> after(res.bits.size());
    to_host(dres, after.data());
    EXPECT_EQ(after, res.bits) << "residual modified although residual_out is elsewhere";
  }

  int64_t pad_bad = 0;
  if (!fp8) {
    to_host(dout, out.bits.data());
    // Two roundings of the dtype; 1e-7 absolute for results near zero.
    testing::expect_close(testing::compare_host(M, H, [&](int64_t r, int64_t i) { return out.at(r, i); },
                                                [&](int64_t r, int64_t i) { return v_ref[size_t(r * H + i)]; },
                                                testing::tolerance(c.dt, 2, 1e-7)),
                          "out (NaN: left unwritten, poison)");
    for (int64_t r = 0; r < M; ++r)
      for (int64_t i = H; i < out.ld; ++i)
        if (out.bits[size_t(r * out.ld + i)] != 0xABCD) ++pad_bad;
  } else {
    to_host(dout8, out8.data());
    to_host(dscale, scales.data());
    if (dynamic) {
      std::vector<float> want(static_cast<size_t>(M));
      for (int64_t r = 0; r < M; ++r) want[size_t(r)] = reference::e4m3_dynamic_scale(&v_ref[size_t(r * H)], H);
      testing::expect_close(testing::compare_scales(M, scales.data(), want.data(), 1e-5), "dynamic scales", 1e-5);
    }
    // One e4m3 step of the saturated value; the relative L2 error within the unit roundoff 2^-4.
    const auto scale = [&](int64_t r) { return dynamic ? scales[size_t(r)] : static_scale; };
    testing::expect_close(testing::compare_e4m3_host(M, H, out8.data(), ld8, scale,
                                                     [&](int64_t r, int64_t i) { return v_ref[size_t(r * H + i)]; }),
                          "out (e4m3, de-scaled)", testing::unit_roundoff(testing::Precision::kFP8E4M3));
    for (int64_t r = 0; r < M; ++r)
      for (int64_t i = H; i < ld8; ++i)
        if (out8[size_t(r * ld8 + i)] != 0xAB) ++pad_bad;
    if (!dynamic) EXPECT_EQ(scales[0], static_scale) << "the static scale was written";
  }
  EXPECT_EQ(pad_bad, 0) << "out padding written (ld ignored?)";
}

class AddRmsNormGpu : public ::testing::TestWithParam<DType> {};

const int64_t kHidden[] = {8, 24, 3584, 4096, 5120, 8200, 16384, 16392};

TEST_P(AddRmsNormGpu, OutOfPlace) {
  SKIP_WITHOUT_GPU();
  for (int64_t rows : {1, 3, 255})
    for (int64_t h : kHidden) {
      Case c = shape(GetParam(), rows, h);
      run_case(c);
    }
  for (int64_t h : {8, 64}) {  // many short rows: 65537 blocks of one warp
    Case c = shape(GetParam(), 65537, h);
    run_case(c);
  }
}

TEST_P(AddRmsNormGpu, InPlace) {
  SKIP_WITHOUT_GPU();
  for (int64_t rows : {1, 3, 255})
    for (int64_t h : kHidden) {
      Case c = shape(GetParam(), rows, h);
      c.in_place = true;
      run_case(c);
    }
}

TEST_P(AddRmsNormGpu, LargestRegisterRowAndLoopPath) {
  SKIP_WITHOUT_GPU();
  // sm_90: 32768..131072 are clusters of 8 (131072: v = 4 per thread), 131080 the loop path.
  for (int64_t h : {32768, 32776, 65536, 131072, 131080})
    for (bool in_place : {false, true})
      for (Fp8 f : {Fp8::kNone, Fp8::kDynamic}) {
        Case c = shape(GetParam(), 5, h);
        c.in_place = in_place;
        c.fp8 = f;
        run_case(c);
      }
}

TEST_P(AddRmsNormGpu, OptionalArgumentsAndGemma) {
  SKIP_WITHOUT_GPU();
  for (int64_t h : {24, 4096, 16384}) {
    Case c = shape(GetParam(), 67, h);
    { Case d = c; d.has_res = false; run_case(d); }                       // first layer: r = x
    { Case d = c; d.write_res = false; run_case(d); }                     // residual_out skipped
    { Case d = c; d.has_res = false; d.write_res = false; run_case(d); }  // plain RMSNorm
    { Case d = c; d.gemma = true; run_case(d); }
    { Case d = c; d.gemma = true; d.in_place = true; d.eps = 1e-2f; run_case(d); }
  }
}

TEST_P(AddRmsNormGpu, StridedRows) {
  SKIP_WITHOUT_GPU();
  for (int64_t pad : {8, 40})
    for (int64_t rows : {1, 3, 255})
      for (int64_t h : kHidden)
        for (Fp8 f : {Fp8::kNone, Fp8::kDynamic}) {
          Case c = shape(GetParam(), rows, h);
          c.pad = pad;
          c.fp8 = f;
          c.in_place = rows == 3;
          run_case(c);
        }
}

// A NaN in row 1 makes row 1 NaN; an Inf in row 2 makes its element NaN and the rest 0; rows 0 and
// 3 are unaffected — as in the reference (and PyTorch).
TEST_P(AddRmsNormGpu, NonFiniteRowsPropagate) {
  SKIP_WITHOUT_GPU();
  for (int64_t h : {24, 4096, 16384, 32776})
    for (Fp8 f : {Fp8::kNone, Fp8::kStatic, Fp8::kDynamic})
      for (bool in_place : {false, true}) {
        Case c = shape(GetParam(), 4, h);
        c.fp8 = f;
        c.in_place = in_place;
        c.tweak = [h](HostMatrix& x, HostMatrix& res) {
          x.set(1, h / 3, std::nanf(""));
          res.set(2, h - 1, -INFINITY);
        };
        run_case(c);
      }
}

TEST_P(AddRmsNormGpu, Fp8Static) {
  SKIP_WITHOUT_GPU();
  for (Fp8 f : {Fp8::kStatic, Fp8::kStaticSaturating})
    for (int64_t rows : {1, 3, 255})
      for (int64_t h : kHidden) {
        Case c = shape(GetParam(), rows, h);
        c.fp8 = f;
        c.in_place = rows == 255;
        run_case(c);
      }
}

TEST_P(AddRmsNormGpu, Fp8Dynamic) {
  SKIP_WITHOUT_GPU();
  for (int64_t rows : {1, 3, 255})
    for (int64_t h : kHidden) {
      Case c = shape(GetParam(), rows, h);
      c.fp8 = Fp8::kDynamic;
      c.gemma = rows == 3;
      c.in_place = rows == 255;
      run_case(c);
    }
  Case c = shape(GetParam(), 65537, 64);
  c.fp8 = Fp8::kDynamic;
  c.has_res = false;
  run_case(c);
}

TEST_P(AddRmsNormGpu, OnAStream) {
  SKIP_WITHOUT_GPU();
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (Fp8 f : {Fp8::kNone, Fp8::kStatic, Fp8::kDynamic}) {
    Case c = shape(GetParam(), 257, 1032);
    c.pad = 8;
    c.fp8 = f;
    c.stream = s;
    run_case(c);
  }
  CUDA_OK(cudaStreamDestroy(s));
}

// On sm_90 the one-block-per-row kernels (the sm_80 path) would otherwise only run for H < 3072
// and H > 131072: run the cluster shapes through them too.
struct ClustersOff {
  ClustersOff() { g_tuning.clusters = false; }
  ~ClustersOff() { g_tuning.clusters = true; }
};

TEST_P(AddRmsNormGpu, OneBlockPerRowKernelsEverywhere) {
  SKIP_WITHOUT_GPU();
  ClustersOff off;
  for (int64_t h : {3584, 4096, 5120, 8200, 16384, 16392, 32768, 65536})
    for (Fp8 f : {Fp8::kNone, Fp8::kStatic, Fp8::kDynamic}) {
      Case c = shape(GetParam(), 67, h);
      c.fp8 = f;
      c.pad = h == 8200 ? 8 : 0;
      c.in_place = f == Fp8::kStatic;
      c.gemma = h == 5120;
      run_case(c);
    }
}

// From kAddRmsNormStreamingStoresRows rows the register kernels store residual_out and out with
// st.global.cs (config.h): every output kind, in place and not, padded, one row past the threshold.
TEST_P(AddRmsNormGpu, StreamingStoresFromOneThousandRows) {
  SKIP_WITHOUT_GPU();
  // From kAddRmsNormWideFromRows rows H = 4096 takes v1 x 512 (config.h: add_rmsnorm_auto_rule),
  // except for the dynamic FP8 output.
  for (Fp8 f : {Fp8::kNone, Fp8::kStatic, Fp8::kDynamic}) {
    Case c = shape(GetParam(), detail::kAddRmsNormWideFromRows + 1, 4096);
    const auto cfg = detail::add_rmsnorm_launch_config(512, c.rows, f == Fp8::kDynamic);
    ASSERT_TRUE(cfg.streaming_stores);
    ASSERT_EQ(cfg.v, f == Fp8::kDynamic ? 2 : 1);
    c.fp8 = f;
    c.in_place = f != Fp8::kStatic;
    run_case(c);
  }
  for (int64_t h : {4096, 16384})
    for (Fp8 f : {Fp8::kNone, Fp8::kStatic, Fp8::kDynamic}) {
      Case c = shape(GetParam(), detail::kAddRmsNormStreamingStoresRows + 1, h);
      ASSERT_TRUE(detail::add_rmsnorm_launch_config(int(h / 8), c.rows).streaming_stores) << "H " << h;
      c.fp8 = f;
      c.in_place = f == Fp8::kStatic;
      c.pad = f == Fp8::kDynamic ? 8 : 0;
      run_case(c);
    }
}

// Every shape rule (v = 8 x 256 or 4 x 512 at 8192 < H <= 16384; kWide's 512-thread shapes at every
// H), through the tuning's rule (config.h: AddRmsNormTuning).
struct KernelRule {
  explicit KernelRule(detail::AddRmsNormRule rule) { g_tuning.rule = rule; }
  ~KernelRule() { g_tuning = {}; }
};

TEST_P(AddRmsNormGpu, EveryShapeRule) {
  SKIP_WITHOUT_GPU();
  for (auto rule : {detail::AddRmsNormRule::kV8, detail::AddRmsNormRule::kV4Wide, detail::AddRmsNormRule::kWide}) {
      KernelRule sw(rule);
      for (bool clusters : {true, false}) {
        g_tuning.clusters = clusters;
        for (int64_t h : {4096, 12288, 16384, 16392})
          for (Fp8 f : {Fp8::kNone, Fp8::kDynamic}) {
            Case c = shape(GetParam(), clusters ? 3 : 67, h);
            c.fp8 = f;
            c.gemma = h == 12288;
            c.in_place = h == 16392;
            run_case(c);
          }
      }
    }
}

// The one-exchange amax (inv · max |r · g|) must give the reference's scale (finite v only) on
// tiny rows, where inv is large (x ~ 1e-4, eps 1e-6), and on NaN / Inf rows (inv NaN or 0).
TEST_P(AddRmsNormGpu, Fp8DynamicOneExchangeEdgeRows) {
  SKIP_WITHOUT_GPU();
  for (int64_t h : {24, 4096, 16384}) {
    Case n;
    n.dt = GetParam();
    n.rows = 4;
    n.h = h;
    n.fp8 = Fp8::kDynamic;
    n.tweak = [h](HostMatrix& x, HostMatrix& res) {
      x.set(1, h / 3, std::nanf(""));
      res.set(2, h - 1, -INFINITY);
    };
    run_case(n);
    Case c = shape(GetParam(), 3, h);
    c.fp8 = Fp8::kDynamic;
    c.tweak = [](HostMatrix& x, HostMatrix& res) {
      for (int64_t r = 0; r < x.rows; ++r)
        for (int64_t i = 0; i < x.cols; ++i) {
          x.set(r, i, 1e-4f * float((i % 7) - 3));
          res.set(r, i, 0.0f);
        }
    };
    run_case(c);
  }
}

std::string dt_name(const ::testing::TestParamInfo<DType>& i) { return dtype_name(i.param); }

INSTANTIATE_TEST_SUITE_P(BothDtypes, AddRmsNormGpu, ::testing::Values(DType::kBF16, DType::kFP16), dt_name);

// Small shapes for compute-sanitizer (scripts/sanitize: memcheck + racecheck): every kernel variant
// once — each register-path V, the loop path, in place, absent arguments, the three output kinds.
TEST(AddRmsNormSanitizer, EveryKernelVariantSmall) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (int64_t h : {24, 2048, 5120, 8200, 16384, 16392, 32776})
      for (Fp8 f : {Fp8::kNone, Fp8::kStatic, Fp8::kDynamic}) {
        Case c = shape(dt, 3, h);
        c.fp8 = f;
        c.pad = 8;
        c.in_place = h == 2048 || h == 8200;
        c.has_res = h != 5120;
        c.write_res = h != 24;
        run_case(c);
      }
}

// The register kernels V = 2, 4 (without the weight preload) and 8 and the loop path (on sm_90 only
// reached with the clusters switched off), and the cluster kernel with v = 4 (H = 131072, clusters on).
TEST(AddRmsNormSanitizer, OneBlockPerRowKernelsAndWideClustersSmall) {
  SKIP_WITHOUT_GPU();
  for (Fp8 f : {Fp8::kNone, Fp8::kDynamic}) {
    Case c;
    c.rows = 2;
    c.h = 131072;
    c.fp8 = f;
    c.in_place = f == Fp8::kNone;
    run_case(c);
  }
  ClustersOff off;
  for (int64_t h : {2048, 5120, 16392, 32776})
    for (Fp8 f : {Fp8::kNone, Fp8::kDynamic}) {
      Case c;
      // Past 2^18 chunks per call the register kernels read the weight after the reduction
      // (config.h: add_rmsnorm_preload_weight); below it they preload it.
      c.rows = h <= 5120 ? detail::kAddRmsNormPreloadChunks / (h / 8) + 1 : 3;
      c.h = h;
      c.fp8 = f;
      c.in_place = h == 5120;
      run_case(c);
    }
}

// The kernels behind the overrides (v = 4 x 512 shape, the cluster kernel at H = 16384 / 131072 and
// the one-block kernels with the clusters off), small, for the sanitizer.
TEST(AddRmsNormSanitizer, SwitchedKernelsSmall) {
  SKIP_WITHOUT_GPU();
  KernelRule sw(detail::AddRmsNormRule::kV4Wide);
  for (bool clusters : {true, false}) {
    g_tuning.clusters = clusters;
    for (int64_t h : {4096, 16384, 16392})
      for (Fp8 f : {Fp8::kNone, Fp8::kDynamic}) {
        Case c;
        c.rows = 3;
        c.h = h;
        c.fp8 = f;
        c.pad = 8;
        c.in_place = h == 16392;
        run_case(c);
      }
  }
}

// Runs add_rmsnorm (or add_rmsnorm_fp8 with dynamic scales) on x/residual and returns the bytes of
// residual_out, out and the scales, in that order, for bit comparisons.
std::vector<uint8_t> run_raw(DType dt, int64_t M, int64_t H, const HostMatrix& x, const HostMatrix& res,
                             const HostMatrix& w, bool fp8) {
  const Bytes dx = to_device(x), dres = to_device(res), dw = to_device(w);
  const size_t mat = size_t(M * H) * 2, outb = fp8 ? size_t(M * H) : mat;
  std::vector<uint8_t> poison(std::max(mat, outb), 0xff);
  const Bytes dro = to_device(poison.data(), mat), dout = to_device(poison.data(), outb),
              dscale = to_device(poison.data(), size_t(M) * 4);
  const ConstMatrix xv{dx.data(), dt, M, H, H}, rv{dres.data(), dt, M, H, H}, wv{dw.data(), dt, 1, H, H};
  const Matrix rov{dro.data(), dt, M, H, H};
  if (fp8)
    add_rmsnorm_fp8(xv, rv, wv, rov, Fp8Matrix{dout.data(), M, H, H}, Fp8Scale{Fp8ScaleMode::kDynamicPerRow, reinterpret_cast<float*>(dscale.data())});
  else
    add_rmsnorm(xv, rv, wv, rov, Matrix{dout.data(), dt, M, H, H});
  if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error(cudaGetErrorString(cudaGetLastError()));
  std::vector<uint8_t> all(mat + outb + size_t(M) * 4);
  to_host(dro, all.data());
  to_host(dout, all.data() + mat);
  to_host(dscale, all.data() + mat + outb);
  return all;
}

// The same inputs twice give the same bits (residual_out, out, dynamic scales): the cluster CTAs
// add their partials in a fixed (rank) order, not in arrival order.
TEST(AddRmsNormDeterminism, SameInputsSameBits) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (int64_t h : {4096, 8200, 16384, 16392, 32776})
      for (bool fp8 : {false, true}) {
        const uint64_t seed = testing::fresh_seed();
        SCOPED_TRACE(std::string(dtype_name(dt)) + " H=" + std::to_string(h) + (fp8 ? " fp8-dynamic" : " dtype-out") + "; " +
                     testing::seed_note(seed));
        std::mt19937_64 rng(seed);
        const int64_t M = 67;
        HostMatrix x(dt, M, h, h), res(dt, M, h, h), w(dt, 1, h);
        x.fill_uniform(rng, -2.f, 2.f);
        res.fill_uniform(rng, -2.f, 2.f);
        w.fill_uniform(rng, -2.f, 2.f);
        const std::vector<uint8_t> a = run_raw(dt, M, h, x, res, w, fp8), b = run_raw(dt, M, h, x, res, w, fp8);
        EXPECT_TRUE(a == b) << "two runs on the same inputs differ";
      }
}

// A row whose every element is the same (x = c, residual 0, weight 1) must give one output value
// in every slice: a CTA of a cluster that used a different mean (a partial missed, or read before
// its owner wrote it) shows up as a different value in its slice. The per-element comparison also
// covers the shorter last slice of H = 8200 / 16392.
TEST(AddRmsNormDeterminism, ConstantRowOneValueInEverySlice) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (int64_t h : {3584, 4096, 8200, 16384, 16392, 32768})
      for (bool fp8 : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " H=" + std::to_string(h) + (fp8 ? " fp8-dynamic" : " dtype-out"));
        const int64_t M = 5;
        HostMatrix x(dt, M, h, h), res(dt, M, h, h), w(dt, 1, h);
        for (int64_t r = 0; r < M; ++r)
          for (int64_t i = 0; i < h; ++i) {
            x.set(r, i, 1.0f + 0.0625f * float(r + 1) + 1.0f / 128);
            res.set(r, i, 0.0f);
          }
        for (int64_t i = 0; i < h; ++i) w.set(0, i, 1.0f);
        const std::vector<uint8_t> a = run_raw(dt, M, h, x, res, w, fp8);
        const size_t mat = size_t(M * h) * 2;
        int64_t bad = 0;
        for (int64_t r = 0; r < M; ++r) {
          if (fp8) {
            const uint8_t* q = &a[mat + size_t(r * h)];
            for (int64_t i = 1; i < h; ++i)
              if (q[i] != q[0] && bad++ < 5) ADD_FAILURE() << "row " << r << ": out[" << i << "] != out[0]";
          } else {
            const uint8_t* o = &a[mat + size_t(r * h) * 2];
            for (int64_t i = 1; i < h; ++i)
              if (std::memcmp(o + 2 * i, o, 2) != 0 && bad++ < 5) ADD_FAILURE() << "row " << r << ": out[" << i << "] != out[0]";
          }
        }
        EXPECT_EQ(bad, 0);
      }
}

}  // namespace
}  // namespace blockfuse
