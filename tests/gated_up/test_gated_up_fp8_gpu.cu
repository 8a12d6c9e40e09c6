// GPU tests of the FP8 fused gated up-projection (gated_up_fp8) against the CPU reference
// (src/gated_up/reference_fp8.cpp): fresh random e4m3 inputs and scales for every case, outputs
// (and their row padding) poisoned with NaN before every launch and every element checked, odd M
// and U (tile tails in both directions), strided views whose padding is NaN (a read past K shows),
// every scale mode (x per tensor / per row x w per tensor / per channel), every output (bf16; e4m3
// with a static per-tensor scale, saturation included; e4m3 with dynamic per-row scales through the
// workspace overload, NaN and all-zero rows, inside a CUDA graph), both activations, every tile
// config and the heuristic, and bad arguments rejected before any launch (the poisoned output stays
// untouched). `GatedUpFp8Sanitizer.*` is the small set run under compute-sanitizer. Every test
// skips, saying so, without a GPU; on a device other than compute capability 9.0 the test checks
// the "not supported" error instead.
//
// Tolerance. The wgmma FP8 "fast accumulation" keeps fewer bits than fp32 in its running sums, so
// each dot product may be off by eps·Σ|x_k w_k| (eps = kAccEps below), which the reference turns
// into a per-element bound (its `sensitivity` output); on top of that one output rounding (bf16:
// 2 ulps; e4m3: one step of the quantisation grid, 2^-3 relative, or 2^-9 absolute in the
// subnormal range). A wrong index, scale or pairing is orders of magnitude above this.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "blockfuse/blockfuse.h"
#include "common/check.h"
#include "common/device.h"
#include "common/fp8_host.h"
#include "common/host_float.h"
#include "gated_up/reference_fp8.h"
#include "gated_up/rowwise_fp8.h"
#include "gated_up/tile_configs_fp8_sm90.h"
#include "testing/gtest/gtest_util.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

using DevBuf = testing::DeviceBuffer<unsigned char>;

// Relative accumulation error allowed per dot product, in units of Σ|terms| (see above). The
// sums here have K <= 4096 terms; 2^-11 is ~16x the fp32 round-off of such sums.
constexpr double kAccEps = 1.0 / 2048;

bool fp8_runs_here() {
  const auto d = detail::current_device_spec();
  return gated_up_fp8_has_sm90() && d.cc_major == 9 && d.cc_minor == 0;
}
#define SKIP_UNLESS_FP8()                                                                                   \
  do {                                                                                                      \
    BF_SKIP_WITHOUT_GPU("gated_up_fp8");                                                                    \
    if (!fp8_runs_here()) GTEST_SKIP() << "gated_up_fp8 needs compute capability 9.0 and an sm90a build";  \
  } while (0)

struct Case {
  int64_t M, K, U;
  bool x_per_row = false, w_per_channel = false;
  Activation act = Activation::kSiLU;
  int64_t x_pad = 0, w_pad = 0, o_pad = 0;  // extra elements per row (ld = cols + pad), NaN-filled
};

std::string describe(const Case& c, uint64_t seed) {
  return "M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) + " U=" + std::to_string(c.U) + " x_scale " +
         (c.x_per_row ? "per_row" : "per_tensor") + " w_scale " + (c.w_per_channel ? "per_channel" : "per_tensor") +
         " " + activation_name(c.act) + " pads " + std::to_string(c.x_pad) + "/" + std::to_string(c.w_pad) + "/" +
         std::to_string(c.o_pad) + ", " + testing::seed_note(seed);
}

// Fresh random inputs of one case on host and device, and their reference.
struct Problem {
  Case c;
  uint64_t seed;
  int64_t ldx, ldw;
  std::vector<uint8_t> hx, hw;
  std::vector<float> hsx, hsw, ref, sens;
  DevBuf dx, dw, dsx, dsw;

  Problem(const Case& cs, uint64_t sd) : c(cs), seed(sd), ldx(cs.K + cs.x_pad), ldw(cs.K + cs.w_pad) {
    std::mt19937_64 rng(seed);
    // e4m3 inputs spread over the format (values up to 6 have 3-bit mantissas at every exponent);
    // padding is NaN (0x7f) so a kernel reading past K would produce NaN.
    std::uniform_real_distribution<float> ux(-6.f, 6.f), uw(-1.f, 1.f), usx(0.005f, 0.02f), usw(0.002f, 0.01f);
    hx.assign(size_t(std::max<int64_t>(c.M, 1) * ldx), 0x7f);
    hw.assign(size_t(2 * c.U * ldw), 0x7f);
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t k = 0; k < c.K; ++k) hx[size_t(m * ldx + k)] = host::float_to_fp8_e4m3(ux(rng));
    for (int64_t n = 0; n < 2 * c.U; ++n)
      for (int64_t k = 0; k < c.K; ++k) hw[size_t(n * ldw + k)] = host::float_to_fp8_e4m3(uw(rng));
    hsx.resize(size_t(c.x_per_row ? std::max<int64_t>(c.M, 1) : 1));
    hsw.resize(size_t(c.w_per_channel ? 2 * c.U : 1));
    for (float& s : hsx) s = usx(rng);
    for (float& s : hsw) s = usw(rng);
    dx = testing::to_device(hx.data(), hx.size());
    dw = testing::to_device(hw.data(), hw.size());
    dsx = testing::to_device(hsx.data(), hsx.size() * 4);
    dsw = testing::to_device(hsw.data(), hsw.size() * 4);
    ref.resize(size_t(c.M * c.U));
    sens.resize(ref.size());
    GatedUpFp8HostProblem p{hx.data(), hw.data(), c.M, c.K, c.U, ldx, ldw, hsx.data(), hsw.data(),
                            c.x_per_row, c.w_per_channel, c.act};
    gated_up_fp8_reference_host_f32(p, ref.data(), c.U, sens.data());
  }
  Fp8ConstMatrix x() const { return Fp8ConstMatrix{dx.data(), c.M, c.K, ldx}; }
  Fp8ConstMatrix w() const { return Fp8ConstMatrix{dw.data(), 2 * c.U, c.K, ldw}; }
  Fp8InputScale xs() const {
    return {c.x_per_row ? Fp8InputScaleMode::kPerRow : Fp8InputScaleMode::kPerTensor, reinterpret_cast<const float*>(dsx.data())};
  }
  Fp8InputScale ws() const {
    return {c.w_per_channel ? Fp8InputScaleMode::kPerRow : Fp8InputScaleMode::kPerTensor, reinterpret_cast<const float*>(dsw.data())};
  }
  float max_abs_ref() const {
    float a = 0;
    for (float v : ref) a = std::max(a, std::fabs(v));
    return a;
  }
};

// A bf16 h [M, U] (row stride ldo) against the reference: 2 bf16 ulps plus the accumulation bound.
void expect_bf16_close(const Problem& P, const std::vector<uint16_t>& h, int64_t ldo, const std::string& what) {
  const Case& c = P.c;
  testing::CompareStats st;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t j = 0; j < c.U; ++j) {
      const size_t i = size_t(m * c.U + j);
      const double r = P.ref[i];
      st.add(m, j, host::to_float(DType::kBF16, h[size_t(m * ldo + j)]), r,
             2 * testing::unit_roundoff(DType::kBF16) * std::fabs(r) + kAccEps * P.sens[i] + 1e-30);
    }
  testing::expect_close(st, what, 1e-2);
}

// bf16 output: every element against the reference, the row padding still poisoned.
void check_bf16(const Problem& P, int tile_config, Sm90Raster raster = Sm90Raster::kAuto) {
  const Case& c = P.c;
  const int64_t ldo = c.U + c.o_pad;
  const uint16_t kPoison = testing::nan_bits(DType::kBF16);
  std::vector<uint16_t> h(size_t(std::max<int64_t>(c.M, 1) * ldo), kPoison);
  DevBuf out = testing::to_device(h.data(), h.size() * 2);
  GatedUpFp8Options opt;
  opt.tile_config = tile_config;
  opt.sm90_raster = raster;
  gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), Matrix{out.data(), DType::kBF16, c.M, c.U, ldo}, c.act, nullptr, opt);
  BF_CUDA_CHECK(cudaDeviceSynchronize());
  testing::to_host(out, h.data());
  const std::string what = "bf16 out, tile " + std::to_string(tile_config) + ", raster " +
                           std::to_string(static_cast<int>(raster)) + ", " + describe(c, P.seed);
  int64_t pad_written = 0, first_pad = -1;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t j = c.U; j < ldo; ++j)
      if (h[size_t(m * ldo + j)] != kPoison && pad_written++ == 0) first_pad = m * ldo + j;
  EXPECT_EQ(pad_written, 0) << what << ": padding written, first at (" << first_pad / ldo << ", " << first_pad % ldo << ")";
  expect_bf16_close(P, h, ldo, what);
}

// e4m3 output with a static per-tensor scale: the dequantised result float(q)·s against the
// reference quantised the same way (host::fp8_quantize); the row padding still poisoned. Needs
// U % 16 == 0 (gated_up_fp8 rejects other U for e4m3 outputs).
// `scale_div` sets s = max|h| / scale_div: 448 / 1.5 fills the format, 1000 saturates the top.
void check_e4m3(const Problem& P, int tile_config, double scale_div = 300) {
  const Case& c = P.c;
  const int64_t ldo = c.U + c.o_pad + (16 - (c.U + c.o_pad) % 16) % 16;  // ld % 16 == 0
  const float s = float(std::max(P.max_abs_ref(), 1e-20f) / scale_div);
  DevBuf ds = testing::to_device(&s, 4);
  std::vector<uint8_t> h(size_t(std::max<int64_t>(c.M, 1) * ldo), 0x7f);
  DevBuf out = testing::to_device(h.data(), h.size());
  GatedUpFp8Options opt;
  opt.tile_config = tile_config;
  gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), Fp8Matrix{out.data(), c.M, c.U, ldo},
               Fp8Scale{Fp8ScaleMode::kStaticPerTensor, reinterpret_cast<float*>(ds.data())}, c.act, nullptr, opt);
  BF_CUDA_CHECK(cudaDeviceSynchronize());
  testing::to_host(out, h.data());
  const std::string what = "e4m3 out (scale " + std::to_string(s) + "), tile " + std::to_string(tile_config) + ", " +
                           describe(c, P.seed);
  testing::CompareStats st;
  int64_t saturated = 0, pad_written = 0, first_pad = -1;
  for (int64_t m = 0; m < c.M; ++m) {
    for (int64_t j = 0; j < c.U; ++j) {
      const size_t i = size_t(m * c.U + j);
      const float qref = host::fp8_e4m3_to_float(host::fp8_quantize(P.ref[i], s));
      const float got = host::fp8_e4m3_to_float(h[size_t(m * ldo + j)]);
      saturated += std::fabs(qref) == kFp8E4M3Max;
      // One step of the e4m3 grid (2^-3 relative, 2^-9 in the subnormal range) plus the
      // accumulation bound in units of s.
      st.add(m, j, got, qref, 0.125 * std::fabs(qref) + std::ldexp(1.0, -9) + 1.07 * kAccEps * P.sens[i] / s);
    }
    for (int64_t j = c.U; j < ldo; ++j)
      if (h[size_t(m * ldo + j)] != 0x7f && pad_written++ == 0) first_pad = m * ldo + j;
  }
  EXPECT_EQ(pad_written, 0) << what << ": padding written, first at (" << first_pad / ldo << ", " << first_pad % ldo << ")";
  if (scale_div > 448) EXPECT_GT(saturated, 0) << what << ": the saturation case saturated nothing";
  testing::expect_close(st, what, 5e-2);
}

// The buffers of one dynamic-scale call: out (e4m3, rows padded to ld % 16 == 0, NaN-poisoned),
// its M scales (and 4 more past them, poisoned), the workspace (poisoned).
struct DynamicOut {
  int64_t M, U, ldo;
  std::vector<uint8_t> hout;
  std::vector<float> hscale;
  std::vector<uint16_t> hws;
  DevBuf out, scale, ws;
  static constexpr float kScalePoison = -12345.0f;

  DynamicOut(int64_t m, int64_t u, int64_t o_pad)
      : M(m), U(u), ldo(u + o_pad + (16 - (u + o_pad) % 16) % 16),
        hout(size_t(std::max<int64_t>(m, 1) * ldo), 0x7f), hscale(size_t(m + 4), kScalePoison),
        hws(gated_up_fp8_workspace_size(m, u, Fp8ScaleMode::kDynamicPerRow) / 2, testing::nan_bits(DType::kBF16)) {
    out = testing::to_device(hout.data(), hout.size());
    scale = testing::to_device(hscale.data(), hscale.size() * 4);
    ws = testing::to_device(hws.data(), std::max<size_t>(hws.size() * 2, 2));
  }
  Fp8Matrix matrix() { return Fp8Matrix{out.data(), M, U, ldo}; }
  Fp8Scale fp8_scale() { return Fp8Scale{Fp8ScaleMode::kDynamicPerRow, reinterpret_cast<float*>(scale.data())}; }
  size_t ws_bytes() const { return hws.size() * 2; }
  void fetch() {
    BF_CUDA_CHECK(cudaDeviceSynchronize());
    testing::to_host(out, hout.data());
    testing::to_host(scale, hscale.data());
    testing::to_host(ws, hws.data());
  }
  // The row kernel's part, bit for bit from the workspace's bf16 h (the GEMM's output, checked
  // against the reference separately): scale[m] from the row's largest finite |h|, every q from
  // host::fp8_quantize; the row padding and the scales past M untouched. Returns the mismatches.
  int64_t expect_quantised_exactly(const std::string& what) const {
    int64_t bad = 0;
    for (int64_t m = 0; m < M; ++m) {
      float amax = 0.0f;
      for (int64_t j = 0; j < U; ++j) {
        const float v = host::bf16_to_float(hws[size_t(m * U + j)]);
        if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
      }
      const float s = host::fp8_dynamic_scale(amax);
      if (std::memcmp(&s, &hscale[size_t(m)], 4) != 0 && bad++ < 5)
        ADD_FAILURE() << what << ": scale[" << m << "] = " << hscale[size_t(m)] << ", want " << s << " (amax " << amax << ")";
      for (int64_t j = 0; j < U; ++j) {
        const uint8_t want = host::fp8_quantize(host::bf16_to_float(hws[size_t(m * U + j)]), s);
        const uint8_t got = hout[size_t(m * ldo + j)];
        if (got != want && bad++ < 5)
          ADD_FAILURE() << what << ": out(" << m << ", " << j << ") = 0x" << std::hex << int(got) << ", want 0x" << int(want)
                        << std::dec << " (h " << host::bf16_to_float(hws[size_t(m * U + j)]) << ", scale " << s << ")";
      }
      for (int64_t j = U; j < ldo; ++j)
        if (hout[size_t(m * ldo + j)] != 0x7f && bad++ < 5) ADD_FAILURE() << what << ": padding of row " << m << " written";
    }
    for (int64_t m = M; m < M + 4; ++m)
      if (hscale[size_t(m)] != kScalePoison && bad++ < 5) ADD_FAILURE() << what << ": scale[" << m << "] past M written";
    EXPECT_EQ(bad, 0) << what;
    return bad;
  }
};

// e4m3 output with dynamic per-row scales: the workspace's bf16 h against the reference (as the
// bf16 output), the row kernel's scales and bytes bit for bit from that h, and each row's scale
// against the reference's own (its amax over 448, within the bf16 rounding and the accumulation).
void check_e4m3_dynamic(const Problem& P, int tile_config) {
  const Case& c = P.c;
  DynamicOut d(c.M, c.U, c.o_pad);
  GatedUpFp8Options opt;
  opt.tile_config = tile_config;
  gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), d.matrix(), d.fp8_scale(), c.act, d.ws.data(), d.ws_bytes(), nullptr, opt);
  d.fetch();
  const std::string what = "e4m3 out, dynamic scales, tile " + std::to_string(tile_config) + ", " + describe(c, P.seed);
  expect_bf16_close(P, d.hws, c.U, what + " (workspace h)");
  d.expect_quantised_exactly(what);
  for (int64_t m = 0; m < c.M; ++m) {
    double amax = 0, slack = 0;
    for (int64_t j = 0; j < c.U; ++j) {
      const size_t i = size_t(m * c.U + j);
      if (std::fabs(P.ref[i]) > amax) amax = std::fabs(P.ref[i]), slack = kAccEps * P.sens[i];
    }
    const double want = amax > 0 ? amax / kFp8E4M3Max : 1.0;
    EXPECT_NEAR(d.hscale[size_t(m)], want, 2 * testing::unit_roundoff(DType::kBF16) * want + slack / kFp8E4M3Max + 1e-30)
        << what << ": row " << m;
  }
}

// ---- every scale mode x activation x output x tile config, on odd shapes -----------------------
using ModeParam = std::tuple<bool, bool, Activation>;
class GatedUpFp8Modes : public ::testing::TestWithParam<ModeParam> {};

TEST_P(GatedUpFp8Modes, EveryTileConfigBothOutputs) {
  SKIP_UNLESS_FP8();
  const auto [xr, wc, act] = GetParam();
  // M: 1, below one tile, a tail of both tile heights; U: tails of both BN/2 (128, 64), bf16-only
  // widths (U % 16 == 8) and e4m3 ones; K: 64 (one partial k-tile of 128) to several k-tiles with
  // a tail.
  for (Case c : {Case{1, 64, 8}, Case{7, 208, 48}, Case{129, 384, 200}, Case{333, 1040, 272}, Case{64, 128, 16}}) {
    c.x_per_row = xr;
    c.w_per_channel = wc;
    c.act = act;
    const Problem P(c, testing::fresh_seed());
    for (int cfg = -1; cfg < kNumSm90Fp8TileConfigs; ++cfg) {
      check_bf16(P, cfg);
      if (c.U % 16 == 0) {
        check_e4m3(P, cfg);
        check_e4m3_dynamic(P, cfg);
      }
    }
  }
}

std::string mode_name(const ::testing::TestParamInfo<ModeParam>& info) {
  return std::string(std::get<0>(info.param) ? "xRow" : "xTensor") + "_" + (std::get<1>(info.param) ? "wChannel" : "wTensor") +
         "_" + activation_name(std::get<2>(info.param));
}
INSTANTIATE_TEST_SUITE_P(AllScaleModes, GatedUpFp8Modes,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(Activation::kSiLU, Activation::kGeluTanh)),
                         mode_name);

TEST(GatedUpFp8Gpu, LlamaSizedKAndManyTiles) {
  SKIP_UNLESS_FP8();
  // K of Llama-3 8B (32 k-tiles), several M and N tiles with tails in both.
  Case c{300, 4096, 784, true, true, Activation::kSiLU};
  const Problem P(c, testing::fresh_seed());
  for (int cfg = -1; cfg < kNumSm90Fp8TileConfigs; ++cfg) {
    check_bf16(P, cfg);
    check_e4m3(P, cfg);
    check_e4m3_dynamic(P, cfg);
  }
}

// Both forced tile orders on every row, with more N tiles than M tiles and the other way round.
TEST(GatedUpFp8Gpu, EveryRasterEveryRow) {
  SKIP_UNLESS_FP8();
  for (Case c : {Case{300, 1024, 784, true, true, Activation::kSiLU}, Case{2100, 256, 136, true, true, Activation::kSiLU}}) {
    const Problem P(c, testing::fresh_seed());
    for (int cfg = 0; cfg < kNumSm90Fp8TileConfigs; ++cfg)
      for (Sm90Raster r : {Sm90Raster::kAlongM, Sm90Raster::kAlongN}) check_bf16(P, cfg, r);
  }
}

TEST(GatedUpFp8Gpu, StridedViewsLeavePaddingAlone) {
  SKIP_UNLESS_FP8();
  Case c{77, 256, 144, true, false, Activation::kGeluTanh, /*x_pad=*/32, /*w_pad=*/16, /*o_pad=*/24};
  const Problem P(c, testing::fresh_seed());
  for (int cfg = -1; cfg < kNumSm90Fp8TileConfigs; ++cfg) {
    check_bf16(P, cfg);
    check_e4m3(P, cfg);
    check_e4m3_dynamic(P, cfg);
  }
}

TEST(GatedUpFp8Gpu, E4m3OutputSaturates) {
  SKIP_UNLESS_FP8();
  // s = max|h| / 1000: the largest outputs are above 448 and must come out as ±448, not NaN.
  const Problem P(Case{130, 512, 80, false, true, Activation::kSiLU}, testing::fresh_seed());
  for (int cfg = -1; cfg < kNumSm90Fp8TileConfigs; ++cfg) check_e4m3(P, cfg, 1000);
}

// Wide rows (U = 33024 > 32768: the row kernel reads them twice) and a row kernel grid smaller than M
// (a grid-stride loop: 1200 rows of U = 8192 take 256-thread blocks, 8 per SM, 1056 on an H100).
TEST(GatedUpFp8Gpu, DynamicScalesWideRowsAndManyRows) {
  SKIP_UNLESS_FP8();
  check_e4m3_dynamic(Problem(Case{5, 64, 33024, true, true, Activation::kSiLU}, testing::fresh_seed()), -1);
  const int sms = detail::current_device_spec().sm_count;
  ASSERT_LT(detail::rowwise_fp8_config(8192 / 8, 1200, sms).blocks, 1200) << "not a grid-stride case on this GPU";
  check_e4m3_dynamic(Problem(Case{1200, 64, 8192, false, true, Activation::kGeluTanh}, testing::fresh_seed()), -1);
}

// A NaN in one token's x makes that row's h NaN: its scale is 1 and its bytes NaN, the other rows
// untouched by it; a row of zeros gets scale 1 and zeros.
TEST(GatedUpFp8Gpu, DynamicScalesNaNAndZeroRows) {
  SKIP_UNLESS_FP8();
  Case c{9, 128, 96, true, true, Activation::kSiLU};
  Problem P(c, testing::fresh_seed());
  P.hx[size_t(3 * P.ldx + 17)] = 0x7f;                                       // NaN in row 3
  std::fill(P.hx.begin() + 6 * P.ldx, P.hx.begin() + 6 * P.ldx + c.K, 0);  // row 6 all zero
  P.dx = testing::to_device(P.hx.data(), P.hx.size());
  DynamicOut d(c.M, c.U, 0);
  gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), d.matrix(), d.fp8_scale(), c.act, d.ws.data(), d.ws_bytes());
  d.fetch();
  const std::string what = "NaN row 3, zero row 6, " + describe(c, P.seed);
  d.expect_quantised_exactly(what);
  EXPECT_EQ(d.hscale[3], 1.0f) << what;
  EXPECT_EQ(d.hscale[6], 1.0f) << what;
  for (int64_t j = 0; j < c.U; ++j) {
    EXPECT_EQ(d.hout[size_t(3 * d.ldo + j)] & 0x7f, 0x7f) << what << ": (3, " << j << ") not NaN";
    EXPECT_EQ(d.hout[size_t(6 * d.ldo + j)] & 0x7f, 0) << what << ": (6, " << j << ") not zero";
  }
  for (int64_t m : {0, 2, 4, 8}) {
    EXPECT_GT(d.hscale[size_t(m)], 0.0f) << what << ": row " << m;
    EXPECT_NE(d.hscale[size_t(m)], 1.0f) << what << ": row " << m << " lost its scale";
  }
}

// The two launches captured in a CUDA graph and replayed with new x: no host sync, every replay
// right.
TEST(GatedUpFp8Gpu, DynamicScalesInACudaGraph) {
  SKIP_UNLESS_FP8();
  Case c{33, 256, 208, true, true, Activation::kSiLU};
  Problem P(c, testing::fresh_seed());
  DynamicOut d(c.M, c.U, 0);
  cudaStream_t s;
  BF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  BF_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), d.matrix(), d.fp8_scale(), c.act, d.ws.data(), d.ws_bytes(), s);
  BF_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  BF_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  for (int replay = 0; replay < 2; ++replay) {
    // New x (same buffer) and the reference for it.
    const Problem Q(c, testing::fresh_seed());
    BF_CUDA_CHECK(cudaMemcpy(P.dx.data(), Q.hx.data(), Q.hx.size(), cudaMemcpyHostToDevice));
    BF_CUDA_CHECK(cudaMemcpy(P.dsx.data(), Q.hsx.data(), Q.hsx.size() * 4, cudaMemcpyHostToDevice));
    // The copies complete before the replay on s (to_device, testing/device_buffer.h, says why).
    BF_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    Problem R = Problem(c, Q.seed);  // the same inputs as Q...
    R.hw = P.hw;                     // ...with P's weights and weight scales, which the graph reads
    R.hsw = P.hsw;
    GatedUpFp8HostProblem hp{R.hx.data(), R.hw.data(), c.M, c.K, c.U, R.ldx, R.ldw, R.hsx.data(), R.hsw.data(),
                             c.x_per_row, c.w_per_channel, c.act};
    gated_up_fp8_reference_host_f32(hp, R.ref.data(), c.U, R.sens.data());
    BF_CUDA_CHECK(cudaGraphLaunch(ge, s));
    BF_CUDA_CHECK(cudaStreamSynchronize(s));
    d.fetch();
    const std::string what = "graph replay " + std::to_string(replay) + ", " + describe(c, Q.seed);
    expect_bf16_close(R, d.hws, c.U, what + " (workspace h)");
    d.expect_quantised_exactly(what);
  }
  BF_CUDA_CHECK(cudaGraphExecDestroy(ge));
  BF_CUDA_CHECK(cudaGraphDestroy(g));
  BF_CUDA_CHECK(cudaStreamDestroy(s));
}

TEST(GatedUpFp8Gpu, EmptyProblemLaunchesNothing) {
  SKIP_UNLESS_FP8();
  const Problem P(Case{0, 64, 8}, testing::fresh_seed());
  EXPECT_NO_THROW(gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), Matrix{nullptr, DType::kBF16, 0, 8, 8}, Activation::kSiLU));
  BF_CUDA_CHECK(cudaDeviceSynchronize());
}

// Errors that need real device memory; after each, the poisoned output is untouched (nothing ran).
TEST(GatedUpFp8Gpu, BadArgumentsNeedingDeviceMemory) {
  BF_SKIP_WITHOUT_GPU("gated_up_fp8");
  const Case c{16, 64, 32};
  const Problem P(c, testing::fresh_seed());
  std::vector<uint16_t> poison(size_t(c.M * c.U), testing::nan_bits(DType::kBF16));
  DevBuf out = testing::to_device(poison.data(), poison.size() * 2);
  const Matrix O{out.data(), DType::kBF16, c.M, c.U, c.U};
  auto unchanged = [&] {
    BF_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> h(poison.size());
    testing::to_host(out, h.data());
    EXPECT_EQ(std::memcmp(h.data(), poison.data(), h.size() * 2), 0) << "a rejected call wrote its output";
  };
  if (!fp8_runs_here()) {
    // Not Hopper (or no sm90a build): a clear "not supported" error, nothing launched.
    try {
      gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), O, Activation::kSiLU);
      ADD_FAILURE() << "gated_up_fp8 ran on a device without the FP8 kernel";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << e.what();
    }
    unchanged();
    return;
  }
  std::vector<uint8_t> host_x(size_t(c.M * c.K));
  float host_scale = 1.0f;
  using testing::expect_arg_error;
  expect_arg_error([&] { gated_up_fp8(Fp8ConstMatrix{host_x.data(), c.M, c.K, c.K}, P.xs(), P.w(), P.ws(), O, Activation::kSiLU); },
                   "x", "device memory");
  expect_arg_error([&] { gated_up_fp8(P.x(), Fp8InputScale{Fp8InputScaleMode::kPerTensor, &host_scale}, P.w(), P.ws(), O, Activation::kSiLU); },
                   "x_scale", "device memory");
  expect_arg_error([&] { gated_up_fp8(P.x(), P.xs(), P.w(), Fp8InputScale{Fp8InputScaleMode::kPerTensor, &host_scale}, O, Activation::kSiLU); },
                   "w_scale", "device memory");
  // out overlapping x (x's bytes reinterpreted as a bf16 output) and an e4m3 out overlapping w.
  expect_arg_error([&] { gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), Matrix{P.dx.data(), DType::kBF16, c.M, c.U, c.U}, Activation::kSiLU); },
                   "out", "overlap");
  DevBuf ds = testing::to_device(&host_scale, 4);
  expect_arg_error([&] { gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), Fp8Matrix{P.dw.data(), c.M, c.U, c.U + 16 - c.U % 16},
                                      Fp8Scale{Fp8ScaleMode::kStaticPerTensor, reinterpret_cast<float*>(ds.data())}, Activation::kSiLU); },
                   "out", "overlap");
  expect_arg_error([&] { gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), Fp8Matrix{out.data(), c.M, c.U, c.U + 16 - c.U % 16},
                                      Fp8Scale{Fp8ScaleMode::kStaticPerTensor, &host_scale}, Activation::kSiLU); },
                   "out_scale", "device memory");
  expect_arg_error([&] { gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), Fp8Matrix{out.data(), c.M, c.U, c.U + 16 - c.U % 16},
                                      Fp8Scale{Fp8ScaleMode::kDynamicPerRow, reinterpret_cast<float*>(ds.data())}, Activation::kSiLU); },
                   "out_scale", "kDynamicPerRow");
  // The dynamic output's workspace and scales: device memory, overlapping nothing else.
  {
    const Fp8Matrix O8{out.data(), c.M, c.U, c.U};  // U = 32: ld 32 is a multiple of 16
    DevBuf scales(size_t(c.M) * 4), ws(gated_up_fp8_workspace_size(c.M, c.U, Fp8ScaleMode::kDynamicPerRow));
    const Fp8Scale S{Fp8ScaleMode::kDynamicPerRow, reinterpret_cast<float*>(scales.data())};
    std::vector<unsigned char> host_ws(ws.size());
    expect_arg_error([&] { gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), O8, S, Activation::kSiLU, host_ws.data(), host_ws.size()); },
                     "workspace", "device memory");
    expect_arg_error([&] { gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), O8, S, Activation::kSiLU, P.dw.data(), ws.size()); },
                     "workspace", "overlap");  // the workspace is w
    expect_arg_error([&] { gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), O8, S, Activation::kSiLU, out.data(), ws.size()); },
                     "out", "overlap");  // the workspace is out (validate's checks of out come first)
    expect_arg_error([&] { gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), O8,
                                        Fp8Scale{Fp8ScaleMode::kDynamicPerRow, reinterpret_cast<float*>(P.dx.data())},
                                        Activation::kSiLU, ws.data(), ws.size()); },
                     "out_scale", "overlap");  // the scales written over x
    expect_arg_error([&] { gated_up_fp8(P.x(), P.xs(), P.w(), P.ws(), O8,
                                        Fp8Scale{Fp8ScaleMode::kDynamicPerRow, reinterpret_cast<float*>(ws.data())},
                                        Activation::kSiLU, ws.data(), ws.size()); },
                     "workspace", "overlap");  // the scales inside the workspace
  }
  unchanged();
}

// The small, fast set compute-sanitizer runs (scripts/sanitize): every output, both tile configs,
// tails in M, U and K, per-row and per-channel scales (their reads stop at M and 2U).
TEST(GatedUpFp8Sanitizer, SmallShapes) {
  SKIP_UNLESS_FP8();
  const Problem P(Case{67, 144, 80, true, true, Activation::kGeluTanh, 16, 0, 8}, testing::fresh_seed());
  for (int cfg = 0; cfg < kNumSm90Fp8TileConfigs; ++cfg) {
    check_bf16(P, cfg);
    check_e4m3(P, cfg);
    check_e4m3_dynamic(P, cfg);
  }
}

}  // namespace
}  // namespace blockfuse
