// GPU tests of blockfuse::fused_mlp / fused_mlp_sparse / neuron_block_router (src/fused_mlp/):
// the one-launch MLP against the fp64 CPU reference (src/fused_mlp/reference.cpp) on host copies.
//
// Shapes: M in {1, 3, 16, 32} (one to four 8-row MMA tiles, partial tiles); K in {136, 1024} (136:
// a partial 64-column chunk of y and a partial 32-k chunk of the gate/up loop), U in {48, 256}
// (48: a 64-neuron block half full). Tolerance: fp32 accumulation and h rounded once to the dtype
// against fp64 — |y − ref| <= u·|ref| + 2u·Σ_n|h·w_down| (h's rounding, u = unit roundoff);
// a missing 16-neuron group moves y by ~16/U of that sum, far above it.
// Outputs are poisoned with NaN first; the workspace is zeroed once per test and reused by every
// call (the kernel must leave it zeroed: graph replays rely on that).
// FusedMlpSanitizer is the small set scripts/sanitize runs under compute-sanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "blockfuse/fused_mlp.h"
#include "fused_mlp/params.h"
#include "fused_mlp/reference.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;
using testing::DeviceBuffer;

#define SKIP_WITHOUT_GPU() BF_SKIP_WITHOUT_GPU("the fused_mlp kernel")

// The host matrices of one MLP and their device copies.
struct Mlp {
  DType dt;
  int64_t m, k, u;
  HostMatrix x, wgu, wd;
  DeviceBuffer<uint16_t> dx, dwgu, dwd, dy;
  Mlp(DType t, int64_t m_, int64_t k_, int64_t u_, uint64_t seed)
      : dt(t), m(m_), k(k_), u(u_), x(t, m_, k_), wgu(t, 2 * u_, k_), wd(t, u_, k_), dx(static_cast<size_t>(m_ * k_)),
        dwgu(static_cast<size_t>(2 * u_ * k_)), dwd(static_cast<size_t>(u_ * k_)), dy(static_cast<size_t>(m_ * k_)) {
    std::mt19937_64 rng(seed);
    x.fill_uniform(rng, -1.f, 1.f);
    const float s = 2.f / std::sqrt(float(k_));
    wgu.fill_uniform(rng, -s, s);
    wd.fill_uniform(rng, -0.5f, 0.5f);
    upload();
  }
  void upload() {
    cudaMemcpy(dx.data(), x.bits.data(), dx.bytes(), cudaMemcpyHostToDevice);
    cudaMemcpy(dwgu.data(), wgu.bits.data(), dwgu.bytes(), cudaMemcpyHostToDevice);
    cudaMemcpy(dwd.data(), wd.bits.data(), dwd.bytes(), cudaMemcpyHostToDevice);
  }
  ConstMatrix X() const { return ConstMatrix{dx.data(), dt, m, k, k}; }
  ConstMatrix WGU() const { return ConstMatrix{dwgu.data(), dt, 2 * u, k, k}; }
  ConstMatrix WD() const { return ConstMatrix{dwd.data(), dt, u, k, k}; }
  Matrix Y() const { return Matrix{dy.data(), dt, m, k, k}; }
  void poison() {
    HostMatrix p(dt, m, k);
    p.poison();
    cudaMemcpy(dy.data(), p.bits.data(), dy.bytes(), cudaMemcpyHostToDevice);
  }
  std::vector<uint16_t> y_bits() const {
    std::vector<uint16_t> b(static_cast<size_t>(m * k));
    cudaMemcpy(b.data(), dy.data(), dy.bytes(), cudaMemcpyDeviceToHost);
    return b;
  }
};

// A zeroed workspace (the API asks for cudaMemset once before first use) over the one DeviceBuffer.
struct Workspace {
  DeviceBuffer<unsigned char> buf;
  explicit Workspace(size_t n) : buf(n) {
    if (n && cudaMemset(buf.data(), 0, n) != cudaSuccess) throw Error("cudaMemset of the fused_mlp workspace failed");
  }
  void* p() const { return buf.data(); }
  size_t bytes() const { return buf.bytes(); }
};

// Compares y (device) with the fp64 reference under `mask` (null: dense); rows in skip_rows are
// expected to be all non-finite instead (NaN input rows).
void expect_matches(const Mlp& f, Activation act, const unsigned char* mask, int skip_row = -1) {
  std::vector<double> ref(static_cast<size_t>(f.m * f.k)), abs(static_cast<size_t>(f.m * f.k));
  fmlp::reference(f.x.view(), f.wgu.view(), f.wd.view(), act, mask, ref.data(), f.k, abs.data());
  const std::vector<uint16_t> y = f.y_bits();
  // One output rounding, plus two roundings' share of Σ|terms| (the bf16/fp16 hidden activations and
  // the fp32 summation order under cancellation).
  const double u = testing::unit_roundoff(f.dt);
  testing::CompareStats st;
  int64_t finite_in_nan_row = 0;
  for (int64_t m = 0; m < f.m; ++m)
    for (int64_t c = 0; c < f.k; ++c) {
      const double v = host::to_float(f.dt, y[size_t(m * f.k + c)]);
      if (m == skip_row) {  // NaN or Inf: either is a propagated non-finite input
        finite_in_nan_row += std::isfinite(v);
        continue;
      }
      const double r = ref[size_t(m * f.k + c)];
      st.add(m, c, v, r, u * std::fabs(r) + 2 * u * abs[size_t(m * f.k + c)] + 1e-30);
    }
  // The per-element bounds only: they follow each element's cancellation (Σ|terms|), a global L2
  // bound would not.
  testing::expect_close(st, "y", INFINITY);
  EXPECT_EQ(finite_in_nan_row, 0) << "finite outputs in row " << skip_row << ", whose input holds a NaN";
}

const char* red_name(MlpReduction r) { return r == MlpReduction::kAtomic ? "atomic" : "deterministic"; }

class FusedMlpGpu : public ::testing::TestWithParam<DType> {};

// The heuristic's configuration (atomic) under a forced split rule and block width (the config's
// overrides; the defaults are the library's rules).
FusedMlpConfig forced(fmlp::SplitRule rule, int warps = fmlp::kAutoBlockWarps) {
  FusedMlpConfig c;
  c.split = rule;
  c.block_warps = warps;
  return c;
}

TEST_P(FusedMlpGpu, DenseMatchesReference) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  int i = 0;
  // K = 4168: 66 chunks (the last of 8 columns), so each warp walks 8-9 chunks and the down phase's
  // multi-chunk rounds (16- and 32-neuron blocks at M <= 8) take several rounds and a partial one.
  for (auto [k, u] : {std::pair<int64_t, int64_t>{136, 48}, {1024, 256}, {4168, 64}})
    for (int64_t m : {1, 3, 16, 32})
      for (FusedMlpConfig cfg : {FusedMlpConfig{}, FusedMlpConfig{16, MlpReduction::kAtomic},
                                 FusedMlpConfig{32, MlpReduction::kDeterministic},
                                 FusedMlpConfig{64, MlpReduction::kDeterministic}}) {
        const Activation act = (i++ % 2) ? Activation::kGeluTanh : Activation::kSiLU;
        const uint64_t seed = testing::fresh_seed();
        SCOPED_TRACE("K=" + std::to_string(k) + " U=" + std::to_string(u) + " M=" + std::to_string(m) + " nb=" +
                     std::to_string(cfg.neurons_per_block) + " " + red_name(cfg.reduction) + " " +
                     activation_name(act) + "; " + testing::seed_note(seed));
        Mlp f(dt, m, k, u, seed);
        Workspace ws(fused_mlp_workspace_size(m, k, u / 16, cfg));
        for (int rep = 0; rep < 2; ++rep) {  // the second call finds the workspace as the first left it
          f.poison();
          fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), act, ws.p(), ws.bytes(), cfg);
          BF_CUDA_OK(cudaDeviceSynchronize());
          expect_matches(f, act, nullptr);
        }
      }
}

// One workspace shared by both reductions and by calls of different M, as a serving loop would
// hold it: the deterministic partials must never land where the atomic accumulator expects zeros.
TEST_P(FusedMlpGpu, OneWorkspaceServesBothReductionsAndEveryM) {
  SKIP_WITHOUT_GPU();
  const int64_t k = 1024, u = 512;
  const FusedMlpConfig det{16, MlpReduction::kDeterministic}, atomic{16, MlpReduction::kAtomic};
  Workspace ws(std::max(fused_mlp_workspace_size(32, k, u / 16, det), fused_mlp_workspace_size(32, k, u / 16, atomic)));
  for (int64_t m : {1, 4, 3, 16, 32}) {
    for (const FusedMlpConfig& cfg : {det, atomic}) {
      const uint64_t seed = testing::fresh_seed();
      SCOPED_TRACE("M=" + std::to_string(m) + " " + red_name(cfg.reduction) + "; " + testing::seed_note(seed));
      Mlp f(GetParam(), m, k, u, seed);
      f.poison();
      fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), cfg);
      BF_CUDA_OK(cudaDeviceSynchronize());
      expect_matches(f, Activation::kSiLU, nullptr);
    }
  }
}

TEST_P(FusedMlpGpu, DeterministicIsBitwiseReproducible) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  Mlp f(GetParam(), 16, 1024, 512, seed);
  const FusedMlpConfig cfg{32, MlpReduction::kDeterministic};
  Workspace ws(fused_mlp_workspace_size(16, 1024, 32, cfg));
  fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), cfg);
  const std::vector<uint16_t> a = f.y_bits();
  for (int rep = 0; rep < 3; ++rep) {
    f.poison();
    fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), cfg);
    EXPECT_TRUE(f.y_bits() == a) << "replay " << rep << " differs";
  }
  expect_matches(f, Activation::kSiLU, nullptr);
}

// Union list of `blocks` on the device.
struct DeviceList {
  DeviceBuffer<int32_t> idx, cnt;
  DeviceList(const std::vector<int32_t>& v, int64_t capacity) : idx(static_cast<size_t>(std::max<int64_t>(capacity, 1))), cnt(1) {
    if (!v.empty()) cudaMemcpy(idx.data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    const int32_t n = int32_t(v.size());
    cudaMemcpy(cnt.data(), &n, 4, cudaMemcpyHostToDevice);
  }
};

// One SiLU call of the union list `list` (capacity nblk, blocks of bs neurons) into a poisoned y,
// checked against the reference masked to the listed blocks.
void expect_union_list_matches(Mlp& f, const std::vector<int32_t>& list, int64_t nblk, int bs, Workspace& ws,
                               FusedMlpConfig cfg = FusedMlpConfig{}) {
  DeviceList dl(list, nblk);
  f.poison();
  fused_mlp_sparse(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, NeuronBlockList{dl.idx.data(), dl.cnt.data(), nblk, bs},
                   ws.p(), ws.bytes(), cfg);
  BF_CUDA_OK(cudaDeviceSynchronize());
  std::vector<unsigned char> mask(static_cast<size_t>(f.m * f.u));
  const int32_t cnt = int32_t(list.size());
  fmlp::neuron_mask_from_blocks(list.data(), &cnt, 0, false, f.m, f.u, bs, mask.data());
  expect_matches(f, Activation::kSiLU, mask.data());
}

// Union lists of blocks of 32 (empty, 5 %, 40 %, all) under every split rule against the reference,
// two calls per workspace (the second finds it as the first left it). `label` heads each trace;
// `warps`: the block width forced (FusedMlpConfig::block_warps).
void expect_split_rules_match(DType dt, int64_t m, int64_t k, int64_t u, const std::string& label,
                              int warps = fmlp::kAutoBlockWarps) {
  const int64_t bs = 32, nblk = u / bs;
  for (fmlp::SplitRule rule : {fmlp::SplitRule::kNever, fmlp::SplitRule::kAlways, fmlp::SplitRule::kAuto})
    for (double density : {0.0, 0.05, 0.4, 1.0}) {
      const uint64_t seed = testing::fresh_seed();
      SCOPED_TRACE(label + "M=" + std::to_string(m) + " K=" + std::to_string(k) + " split rule " + std::to_string(int(rule)) +
                   " density=" + std::to_string(density) + "; " + testing::seed_note(seed));
      Mlp f(dt, m, k, u, seed);
      std::mt19937_64 rng(seed + 1);
      std::vector<int32_t> list;
      for (int32_t b = 0; b < nblk; ++b)
        if (density >= 1.0 || std::uniform_real_distribution<double>(0, 1)(rng) < density) list.push_back(b);
      Workspace ws(fused_mlp_workspace_size(m, k, u / 16, FusedMlpConfig{}));
      for (int rep = 0; rep < 2; ++rep) expect_union_list_matches(f, list, nblk, int(bs), ws, forced(rule, warps));
    }
}

// The deterministic mode reads only what the call wrote: its region of a workspace filled with NaN
// bits (it uses no counters, so the whole buffer may hold them), a longer union list and then a
// shorter one in the same workspace (the second call's stale slots and flags past its count stay
// unread), dense and per-token-sized grids, at M where the sum splits a quad over 1 to 32 lanes.
TEST_P(FusedMlpGpu, DeterministicReadsOnlyWhatTheCallWrote) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  const int64_t k = 1032, u = 2048, bs = 16, nblk = u / bs;
  for (int64_t m : {1, 7, 32}) {
    const FusedMlpConfig cfg{16, MlpReduction::kDeterministic};
    Workspace ws(fused_mlp_workspace_size(m, k, u / 16, cfg));
    BF_CUDA_OK(cudaMemset(ws.p(), 0xff, ws.bytes()));
    const uint64_t seed = testing::fresh_seed();
    SCOPED_TRACE("M=" + std::to_string(m) + "; " + testing::seed_note(seed));
    Mlp f(dt, m, k, u, seed);
    f.poison();
    fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), cfg);
    BF_CUDA_OK(cudaDeviceSynchronize());
    expect_matches(f, Activation::kSiLU, nullptr);
    std::vector<int32_t> all(static_cast<size_t>(nblk)), few;
    for (int32_t b = 0; b < nblk; ++b) all[size_t(b)] = b;
    for (int32_t b = 3; b < nblk; b += 37) few.push_back(b);
    expect_union_list_matches(f, all, nblk, int(bs), ws, cfg);
    expect_union_list_matches(f, few, nblk, int(bs), ws, cfg);
    expect_union_list_matches(f, {}, nblk, int(bs), ws, cfg);
  }
}

TEST_P(FusedMlpGpu, SparseUnionLists) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  const int64_t k = 520, u = 512;
  for (int bs : {16, 32, 64})
    for (int64_t m : {1, 5, 32})
      for (double density : {0.0, 0.1, 0.5, 1.0})
        for (MlpReduction red : {MlpReduction::kAtomic, MlpReduction::kDeterministic}) {
          const uint64_t seed = testing::fresh_seed();
          SCOPED_TRACE("bs=" + std::to_string(bs) + " M=" + std::to_string(m) + " density=" + std::to_string(density) +
                       " " + red_name(red) + "; " + testing::seed_note(seed));
          Mlp f(dt, m, k, u, seed);
          std::mt19937_64 rng(seed + 1);
          const int64_t nblk = u / bs;
          std::vector<int32_t> list;
          for (int32_t b = 0; b < nblk; ++b)
            if (density >= 1.0 || std::uniform_real_distribution<double>(0, 1)(rng) < density) list.push_back(b);
          DeviceList dl(list, nblk);
          const FusedMlpConfig cfg{0, red};
          Workspace ws(fused_mlp_workspace_size(m, k, nblk * bs / 16, FusedMlpConfig{16, red}));
          f.poison();
          fused_mlp_sparse(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU,
                           NeuronBlockList{dl.idx.data(), dl.cnt.data(), nblk, bs}, ws.p(), ws.bytes(), cfg);
          BF_CUDA_OK(cudaDeviceSynchronize());
          std::vector<unsigned char> mask(static_cast<size_t>(m * u));
          const int32_t cnt = int32_t(list.size());
          fmlp::neuron_mask_from_blocks(list.data(), &cnt, 0, false, m, u, bs, mask.data());
          expect_matches(f, Activation::kSiLU, mask.data());
        }
}

// With the heuristic's block size a union list's groups per block are chosen on the device from
// the list's count (params.h: modeled_neurons_per_block). One list buffer and one workspace, the
// count changed between calls, densities chosen so that the device picks 16, 32 and 64 neurons per
// block (asserted from the same model for this GPU's SM count): every call must match the
// reference, so each choice and each grid (blocks past the count return at once) is exercised, and
// the workspace is left zeroed for the next call whatever the previous one chose.
TEST_P(FusedMlpGpu, UnionListBlockSizeFollowsTheCount) {
  SKIP_WITHOUT_GPU();
  // Unsplit, so that every block size the model picks runs (split units are 16 neurons: tested below).
  const FusedMlpConfig unsplit = forced(fmlp::SplitRule::kNever);
  const DType dt = GetParam();
  int dev = 0, sms = 0;
  BF_CUDA_OK(cudaGetDevice(&dev));
  BF_CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t bs = 16;
  const int64_t u = std::max<int64_t>(16 * 8 * sms, 2048);  // 8 groups per SM: 64 wins when all are listed
  const int64_t nblk = u / bs;
  // (The model's choice does not depend on K.) K = 2056 at M = 1: 33 chunks, so the down phase's
  // multi-chunk rounds of 16- and 32-neuron blocks are whole for some warps and partial for others.
  for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 2056}, {13, 256}}) {
    const uint64_t seed = testing::fresh_seed();
    Mlp f(dt, m, k, u, seed);
    DeviceList dl({}, nblk);
    Workspace ws(fused_mlp_workspace_size(m, k, u / 16, FusedMlpConfig{}));
    std::set<int> chosen;
    std::mt19937_64 rng(seed + 1);
    // The model picks 16 below ~12 % of the groups, 32 to ~24 %, 64 above (for any SM count here).
    for (double density : {0.02, 0.18, 1.0, 0.02, 0.6}) {
      std::vector<int32_t> list(static_cast<size_t>(nblk));
      std::iota(list.begin(), list.end(), 0);
      std::shuffle(list.begin(), list.end(), rng);
      list.resize(static_cast<size_t>(std::llround(density * double(nblk))));
      std::sort(list.begin(), list.end());
      const int nb = fmlp::modeled_neurons_per_block(m, k, int64_t(list.size()), sms);
      chosen.insert(nb);
      SCOPED_TRACE("M=" + std::to_string(m) + " listed=" + std::to_string(list.size()) + " of " + std::to_string(nblk) +
                   " (device picks " + std::to_string(nb) + " neurons per block); " + testing::seed_note(seed));
      BF_CUDA_OK(cudaMemcpy(dl.idx.data(), list.data(), list.size() * 4, cudaMemcpyHostToDevice));
      const int32_t n = int32_t(list.size());
      BF_CUDA_OK(cudaMemcpy(dl.cnt.data(), &n, 4, cudaMemcpyHostToDevice));
      f.poison();
      fused_mlp_sparse(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, NeuronBlockList{dl.idx.data(), dl.cnt.data(), nblk, int(bs)},
                       ws.p(), ws.bytes(), unsplit);
      BF_CUDA_OK(cudaDeviceSynchronize());
      std::vector<unsigned char> mask(static_cast<size_t>(m * u));
      fmlp::neuron_mask_from_blocks(list.data(), &n, 0, false, m, u, int(bs), mask.data());
      expect_matches(f, Activation::kSiLU, mask.data());
    }
    if (m == 1) EXPECT_EQ(chosen, (std::set<int>{16, 32, 64})) << "the densities no longer reach every block size";
  }
}

// Union lists under every split rule (params.h: split launches at M <= 8 on sm_90; elsewhere the
// rules change nothing): short and long lists, the empty one, odd K (rank 1's half of K and of the
// chunks shorter, a partial last round of the down phase), and M = 9 (never split).
TEST_P(FusedMlpGpu, SplitRulesMatchTheReference) {
  SKIP_WITHOUT_GPU();
  for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 2056}, {5, 520}, {8, 4168}, {9, 264}})
    expect_split_rules_match(GetParam(), m, k, 1024, "");
}

TEST_P(FusedMlpGpu, AllBlocksEqualDenseBitwise) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  const int64_t m = 4, k = 1024, u = 1024;
  Mlp f(GetParam(), m, k, u, seed);
  const FusedMlpConfig cfg{32, MlpReduction::kDeterministic};
  Workspace ws(fused_mlp_workspace_size(m, k, u / 16, cfg));
  fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), cfg);
  const std::vector<uint16_t> dense = f.y_bits();
  std::vector<int32_t> all(static_cast<size_t>(u / 32));
  for (size_t i = 0; i < all.size(); ++i) all[i] = int32_t(i);
  DeviceList dl(all, u / 32);
  f.poison();
  fused_mlp_sparse(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, NeuronBlockList{dl.idx.data(), dl.cnt.data(), u / 32, 32},
                   ws.p(), ws.bytes(), cfg);
  EXPECT_TRUE(f.y_bits() == dense);
}

TEST_P(FusedMlpGpu, PerTokenLists) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  const int64_t k = 264, u = 384;
  for (int bs : {16, 32, 64})
    for (int64_t m : {1, 3, 16, 32})
      for (MlpReduction red : {MlpReduction::kAtomic, MlpReduction::kDeterministic}) {
        const uint64_t seed = testing::fresh_seed();
        SCOPED_TRACE("bs=" + std::to_string(bs) + " M=" + std::to_string(m) + " " + red_name(red) + "; " +
                     testing::seed_note(seed));
        Mlp f(dt, m, k, u, seed);
        std::mt19937_64 rng(seed + 7);
        const int64_t nblk = u / bs;
        std::vector<int32_t> idx(static_cast<size_t>(m * nblk), -1), counts(static_cast<size_t>(m));
        for (int64_t r = 0; r < m; ++r) {
          int c = 0;
          for (int32_t b = 0; b < nblk; ++b)
            if (rng() % 3 == 0) idx[size_t(r * nblk + c++)] = b;
          if (r == 0) c = 0;  // token 0 selects nothing: y row 0 = 0
          counts[size_t(r)] = c;
        }
        DeviceBuffer<int32_t> di(idx.size()), dc(counts.size());
        cudaMemcpy(di.data(), idx.data(), idx.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dc.data(), counts.data(), counts.size() * 4, cudaMemcpyHostToDevice);
        EXPECT_NO_THROW(fused_mlp_check_blocks(di.data(), dc.data(), m, nblk, nblk));
        Workspace ws(fused_mlp_workspace_size(m, k, u / 16, FusedMlpConfig{16, red}));
        f.poison();
        fused_mlp_sparse(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kGeluTanh,
                         PerTokenNeuronBlocks{di.data(), dc.data(), nblk, bs}, ws.p(), ws.bytes(), FusedMlpConfig{0, red});
        BF_CUDA_OK(cudaDeviceSynchronize());
        std::vector<unsigned char> mask(static_cast<size_t>(m * u));
        fmlp::neuron_mask_from_blocks(idx.data(), counts.data(), nblk, true, m, u, bs, mask.data());
        expect_matches(f, Activation::kGeluTanh, mask.data());
      }
}

// Each block width at M <= 8 forced (FusedMlpConfig::block_warps; the rule, auto_block_warps, takes 16
// for union lists and the deterministic mode on sm_90, for dense and per-token grids only on memory of
// at most 30 GB/s a SM, so the other tests cover one width of those per device) against the reference, on every
// path: dense at every block size and both reductions, union lists under every split rule (empty,
// short, long, all blocks; odd K, so the K slices and the down phase's rounds end part-way),
// per-token lists, and the deterministic mode bitwise reproducible. M = 9 runs the 8-warp kernel.
TEST_P(FusedMlpGpu, EveryBlockWidthMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  for (int w : {8, 16}) {
    for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 2056}, {5, 520}, {8, 4168}, {9, 264}}) {
      const int64_t u = 512;
      const MlpSplitRule au = MlpSplitRule::kAuto;
      for (const FusedMlpConfig cfg : {FusedMlpConfig{16, MlpReduction::kAtomic, au, w}, FusedMlpConfig{32, MlpReduction::kDeterministic, au, w},
                                       FusedMlpConfig{64, MlpReduction::kAtomic, au, w}, FusedMlpConfig{0, MlpReduction::kDeterministic, au, w}}) {
        const uint64_t seed = testing::fresh_seed();
        SCOPED_TRACE("warps " + std::to_string(w) + " dense M=" + std::to_string(m) + " K=" + std::to_string(k) + " nb=" +
                     std::to_string(cfg.neurons_per_block) + " " + red_name(cfg.reduction) + "; " + testing::seed_note(seed));
        Mlp f(dt, m, k, u, seed);
        Workspace ws(fused_mlp_workspace_size(m, k, u / 16, cfg));
        f.poison();
        fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), cfg);
        BF_CUDA_OK(cudaDeviceSynchronize());
        expect_matches(f, Activation::kSiLU, nullptr);
        if (cfg.reduction == MlpReduction::kDeterministic) {
          const std::vector<uint16_t> first = f.y_bits();
          f.poison();
          fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), cfg);
          BF_CUDA_OK(cudaDeviceSynchronize());
          EXPECT_EQ(f.y_bits(), first) << "deterministic mode not bitwise reproducible";
        }
      }
      expect_split_rules_match(dt, m, k, u, "warps " + std::to_string(w) + " union ", w);
      const int64_t bs = 32, nblk = u / bs;
      {
        const uint64_t seed = testing::fresh_seed();
        SCOPED_TRACE("warps " + std::to_string(w) + " per-token M=" + std::to_string(m) + " K=" + std::to_string(k) + "; " +
                     testing::seed_note(seed));
        Mlp f(dt, m, k, u, seed);
        std::mt19937_64 rng(seed + 7);
        std::vector<int32_t> idx(static_cast<size_t>(m * nblk), -1), counts(static_cast<size_t>(m));
        for (int64_t r = 0; r < m; ++r) {
          int c = 0;
          for (int32_t b = 0; b < nblk; ++b)
            if (rng() % 3 == 0) idx[size_t(r * nblk + c++)] = b;
          counts[size_t(r)] = c;
        }
        DeviceBuffer<int32_t> di(idx.size()), dc(counts.size());
        cudaMemcpy(di.data(), idx.data(), idx.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dc.data(), counts.data(), counts.size() * 4, cudaMemcpyHostToDevice);
        Workspace ws(fused_mlp_workspace_size(m, k, u / 16, FusedMlpConfig{}));
        f.poison();
        fused_mlp_sparse(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kGeluTanh,
                         PerTokenNeuronBlocks{di.data(), dc.data(), nblk, int(bs)}, ws.p(), ws.bytes(),
                         forced(MlpSplitRule::kAuto, w));
        BF_CUDA_OK(cudaDeviceSynchronize());
        std::vector<unsigned char> mask(static_cast<size_t>(m * u));
        fmlp::neuron_mask_from_blocks(idx.data(), counts.data(), nblk, true, m, u, int(bs), mask.data());
        expect_matches(f, Activation::kGeluTanh, mask.data());
      }
    }
  }
}

// Union lists on either side of the split thresholds (params.h: split_groups): a list splits at 8
// warps up to one group per SM, at 16 up to half that. Lists of SMs / 4, SMs / 2,
// SMs / 2 + 1, SMs and SMs + 1 groups, under the rule's block width and each forced one, M = 1 and 8.
TEST_P(FusedMlpGpu, UnionListsAroundTheSplitThresholds) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  int dev = 0, sms = 0;
  BF_CUDA_OK(cudaGetDevice(&dev));
  BF_CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t bs = 16, u = 16 * (2 * int64_t(sms) + 8), nblk = u / bs;  // one group a block
  for (int w : {fmlp::kAutoBlockWarps, 8, 16}) {
    for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 1032}, {8, 264}})
      for (int64_t listed : {int64_t(sms) / 4, int64_t(sms) / 2, int64_t(sms) / 2 + 1, int64_t(sms), int64_t(sms) + 1}) {
        const uint64_t seed = testing::fresh_seed();
        SCOPED_TRACE("warps " + std::to_string(w) + " M=" + std::to_string(m) + " " + std::to_string(listed) + " groups of " +
                     std::to_string(sms) + " SMs; " + testing::seed_note(seed));
        Mlp f(dt, m, k, u, seed);
        std::mt19937_64 rng(seed + 3);
        std::vector<int32_t> list(static_cast<size_t>(nblk));
        std::iota(list.begin(), list.end(), 0);
        std::shuffle(list.begin(), list.end(), rng);
        list.resize(static_cast<size_t>(std::max<int64_t>(listed, 1)));
        std::sort(list.begin(), list.end());
        Workspace ws(fused_mlp_workspace_size(m, k, u / 16, FusedMlpConfig{}));
        expect_union_list_matches(f, list, nblk, int(bs), ws, forced(MlpSplitRule::kAuto, w));
      }
  }
}

TEST_P(FusedMlpGpu, NaNStaysInItsRow) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  for (MlpReduction red : {MlpReduction::kAtomic, MlpReduction::kDeterministic}) {
    Mlp f(GetParam(), 9, 256, 128, seed);
    f.x.set(5, 17, std::nanf(""));
    f.upload();
    const FusedMlpConfig cfg{32, red};
    Workspace ws(fused_mlp_workspace_size(9, 256, 8, cfg));
    f.poison();
    fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), cfg);
    BF_CUDA_OK(cudaDeviceSynchronize());
    expect_matches(f, Activation::kSiLU, nullptr, 5);
    // The atomic accumulator must not keep the NaN for the next call.
    f.x.set(5, 17, 0.25f);
    f.upload();
    fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), cfg);
    BF_CUDA_OK(cudaDeviceSynchronize());
    expect_matches(f, Activation::kSiLU, nullptr);
  }
}

// The deterministic mode's two launches (the slots, then their sum) captured in one graph: every
// replay gives the eager call's bits, dense and a union list, at M = 1 (16-warp blocks) and M = 20.
TEST_P(FusedMlpGpu, DeterministicInAGraph) {
  SKIP_WITHOUT_GPU();
  const int64_t k = 520, u = 1024, bs = 32, nblk = u / bs;
  for (int64_t m : {1, 20}) {
    const uint64_t seed = testing::fresh_seed();
    SCOPED_TRACE("M=" + std::to_string(m) + "; " + testing::seed_note(seed));
    Mlp f(GetParam(), m, k, u, seed);
    const FusedMlpConfig cfg{32, MlpReduction::kDeterministic};
    Workspace ws(fused_mlp_workspace_size(m, k, u / 16, cfg));
    std::vector<int32_t> list;
    for (int32_t b = 1; b < nblk; b += 3) list.push_back(b);
    DeviceList dl(list, nblk);
    cudaStream_t s;
    BF_CUDA_OK(cudaStreamCreate(&s));
    for (bool sparse : {false, true}) {
      auto call = [&] {
        if (sparse)
          fused_mlp_sparse(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU,
                           NeuronBlockList{dl.idx.data(), dl.cnt.data(), nblk, int(bs)}, ws.p(), ws.bytes(), cfg, s);
        else
          fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), cfg, s);
      };
      f.poison();
      call();
      BF_CUDA_OK(cudaStreamSynchronize(s));
      const std::vector<uint16_t> eager = f.y_bits();
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      BF_CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      call();
      BF_CUDA_OK(cudaStreamEndCapture(s, &graph));
      BF_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      for (int rep = 0; rep < 3; ++rep) {
        f.poison();
        BF_CUDA_OK(cudaGraphLaunch(exec, s));
        BF_CUDA_OK(cudaStreamSynchronize(s));
        EXPECT_TRUE(f.y_bits() == eager) << (sparse ? "union list" : "dense") << ": replay " << rep << " differs";
      }
      BF_CUDA_OK(cudaGraphExecDestroy(exec));
      BF_CUDA_OK(cudaGraphDestroy(graph));
      if (sparse) {
        std::vector<unsigned char> mask(static_cast<size_t>(m * u));
        const int32_t cnt = int32_t(list.size());
        fmlp::neuron_mask_from_blocks(list.data(), &cnt, 0, false, m, u, int(bs), mask.data());
        expect_matches(f, Activation::kSiLU, mask.data());
      } else {
        expect_matches(f, Activation::kSiLU, nullptr);
      }
    }
    BF_CUDA_OK(cudaStreamDestroy(s));
  }
}

TEST_P(FusedMlpGpu, RouterAndSparseInAGraph) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  const int64_t m = 3, k = 512, u = 1024, bs = 32, nblk = u / bs;
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  Mlp f(dt, m, k, u, seed);
  HostMatrix r(dt, nblk, k);
  std::mt19937_64 rng(seed + 3);
  r.fill_uniform(rng, -0.1f, 0.1f);
  DeviceBuffer<uint16_t> dr(static_cast<size_t>(nblk * k));
  cudaMemcpy(dr.data(), r.bits.data(), dr.bytes(), cudaMemcpyHostToDevice);
  const ConstMatrix R{dr.data(), dt, nblk, k, k};
  DeviceBuffer<int32_t> ui(static_cast<size_t>(nblk)), uc(1), ti(static_cast<size_t>(m * nblk)), tc(static_cast<size_t>(m));
  DeviceBuffer<unsigned char> rws(router_workspace_size(m, nblk));
  Workspace ws(fused_mlp_workspace_size(m, k, u / 16, FusedMlpConfig{16, MlpReduction::kAtomic}));
  const RouterOutputs out{ui.data(), uc.data(), ti.data(), tc.data()};
  for (RouterMode mode : {RouterMode::kThreshold, RouterMode::kTopK}) {
    cudaStream_t s;
    BF_CUDA_OK(cudaStreamCreate(&s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    BF_CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    neuron_block_router(f.X(), R, mode, 0.5f, 5, out, rws.data(), rws.bytes(), s);
    fused_mlp_sparse(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, NeuronBlockList{ui.data(), uc.data(), nblk, int(bs)},
                     ws.p(), ws.bytes(), FusedMlpConfig{}, s);
    BF_CUDA_OK(cudaStreamEndCapture(s, &graph));
    BF_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) {
      f.poison();
      BF_CUDA_OK(cudaGraphLaunch(exec, s));
      BF_CUDA_OK(cudaStreamSynchronize(s));
      // The lists as the device built them: sorted, unique, in range; top-k has k per token.
      std::vector<int32_t> hu(static_cast<size_t>(nblk)), hc(1), hti(static_cast<size_t>(m * nblk)), htc(static_cast<size_t>(m));
      cudaMemcpy(hu.data(), ui.data(), ui.bytes(), cudaMemcpyDeviceToHost);
      cudaMemcpy(hc.data(), uc.data(), 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(hti.data(), ti.data(), ti.bytes(), cudaMemcpyDeviceToHost);
      cudaMemcpy(htc.data(), tc.data(), tc.bytes(), cudaMemcpyDeviceToHost);
      EXPECT_NO_THROW(fused_mlp_check_blocks(ui.data(), uc.data(), 1, nblk, nblk));
      EXPECT_NO_THROW(fused_mlp_check_blocks(ti.data(), tc.data(), m, nblk, nblk));
      std::vector<char> in_union(static_cast<size_t>(nblk), 0);
      for (int64_t t = 0; t < m; ++t) {
        if (mode == RouterMode::kTopK) EXPECT_EQ(htc[size_t(t)], 5);
        for (int i = 0; i < htc[size_t(t)]; ++i) in_union[size_t(hti[size_t(t * nblk + i)])] = 1;
        // Scores vs the CPU (fp64) away from the threshold.
        for (int64_t b = 0; b < nblk && mode == RouterMode::kThreshold; ++b) {
          double d = 0;
          for (int64_t c = 0; c < k; ++c) d += double(f.x.at(t, c)) * r.at(b, c);
          const double sc = 1 / (1 + std::exp(-d));
          const bool sel = std::find(hti.begin() + t * nblk, hti.begin() + t * nblk + htc[size_t(t)], int32_t(b)) !=
                           hti.begin() + t * nblk + htc[size_t(t)];
          if (std::fabs(sc - 0.5) > 1e-3) EXPECT_EQ(sel, sc > 0.5) << "token " << t << " block " << b << " score " << sc;
        }
      }
      int nu = 0;
      for (int64_t b = 0; b < nblk; ++b) nu += in_union[size_t(b)];
      ASSERT_EQ(hc[0], nu);
      for (int i = 0; i < nu; ++i) EXPECT_TRUE(in_union[size_t(hu[size_t(i)])]);
      std::vector<unsigned char> mask(static_cast<size_t>(m * u));
      fmlp::neuron_mask_from_blocks(hu.data(), hc.data(), 0, false, m, u, int(bs), mask.data());
      expect_matches(f, Activation::kSiLU, mask.data());
      // New inputs for the next replay (the graph reads x from the same buffer).
      std::mt19937_64 rr(seed + 100 + rep);
      f.x.fill_uniform(rr, -1.f, 1.f);
      f.upload();
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
  }
}

TEST_P(FusedMlpGpu, TransposeDownProj) {
  SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  std::mt19937_64 rng(testing::fresh_seed());
  HostMatrix d(dt, 72, 100), host_t(dt, 100, 72), dev_t(dt, 100, 72);
  d.fill_uniform(rng, -1, 1);
  transpose_down_proj_host(d.view(), host_t.view());
  DeviceBuffer<uint16_t> dd(d.bits.size()), dt_(dev_t.bits.size());
  cudaMemcpy(dd.data(), d.bits.data(), dd.bytes(), cudaMemcpyHostToDevice);
  transpose_down_proj(ConstMatrix{dd.data(), dt, 72, 100, 100}, Matrix{dt_.data(), dt, 100, 72, 72});
  cudaMemcpy(dev_t.bits.data(), dt_.data(), dt_.bytes(), cudaMemcpyDeviceToHost);
  EXPECT_TRUE(dev_t.bits == host_t.bits);
  EXPECT_EQ(host_t.at(7, 3), d.at(3, 7));
}

TEST_P(FusedMlpGpu, CheckBlocksFindsBadLists) {
  SKIP_WITHOUT_GPU();
  auto run = [](std::vector<int32_t> idx, int32_t count) {
    DeviceBuffer<int32_t> di(idx.size()), dc(1);
    cudaMemcpy(di.data(), idx.data(), idx.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dc.data(), &count, 4, cudaMemcpyHostToDevice);
    fused_mlp_check_blocks(di.data(), dc.data(), 1, int64_t(idx.size()), 8);
  };
  EXPECT_NO_THROW(run({0, 3, 7, 9}, 3));  // 9 is past the count
  testing::expect_arg_error([&] { run({0, 3, 8, 9}, 3); }, "indices", "range");
  testing::expect_arg_error([&] { run({0, 3, 3, 5}, 4); }, "indices", "sorted");
  testing::expect_arg_error([&] { run({0, 4, 3, 5}, 4); }, "indices", "sorted");
  testing::expect_arg_error([&] { run({0, 1, 2, 3}, 5); }, "counts", "range");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedMlpGpu, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Small shapes reaching every path (tails in M, K and U, every block size, both reductions, all
// three list modes) for compute-sanitizer.
TEST(FusedMlpSanitizer, SmallShapes) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (int64_t m : {1, 9, 32})
      for (int nb : {16, 32, 64})
        for (MlpReduction red : {MlpReduction::kAtomic, MlpReduction::kDeterministic}) {
          const uint64_t seed = testing::fresh_seed();
          SCOPED_TRACE(std::string(dtype_name(dt)) + " M=" + std::to_string(m) + " nb=" + std::to_string(nb) + " " +
                       red_name(red) + "; " + testing::seed_note(seed));
          const int64_t k = 72, u = 80;
          Mlp f(dt, m, k, u, seed);
          const FusedMlpConfig cfg{nb, red};
          Workspace ws(fused_mlp_workspace_size(m, k, u / 16, cfg));
          f.poison();
          fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), cfg);
          BF_CUDA_OK(cudaDeviceSynchronize());
          expect_matches(f, Activation::kSiLU, nullptr);
          std::vector<int32_t> list = {1, 3, 4};
          DeviceList dl(list, 5);
          f.poison();
          fused_mlp_sparse(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, NeuronBlockList{dl.idx.data(), dl.cnt.data(), 5, 16},
                           ws.p(), ws.bytes(), cfg);
          BF_CUDA_OK(cudaDeviceSynchronize());
          std::vector<unsigned char> mask(static_cast<size_t>(m * u));
          const int32_t cnt = 3;
          fmlp::neuron_mask_from_blocks(list.data(), &cnt, 0, false, m, u, 16, mask.data());
          expect_matches(f, Activation::kSiLU, mask.data());
          if (red == MlpReduction::kAtomic) {  // the heuristic's block size, every unit split (M <= 8, sm_90)
            f.poison();
            fused_mlp_sparse(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU,
                             NeuronBlockList{dl.idx.data(), dl.cnt.data(), 5, 16}, ws.p(), ws.bytes(),
                             forced(fmlp::SplitRule::kAlways));
            BF_CUDA_OK(cudaDeviceSynchronize());
            expect_matches(f, Activation::kSiLU, mask.data());
          }
          std::vector<int32_t> idx(static_cast<size_t>(m * 5), 0), counts(static_cast<size_t>(m));
          for (int64_t r = 0; r < m; ++r) {
            counts[size_t(r)] = int32_t(r % 3);
            for (int i = 0; i < counts[size_t(r)]; ++i) idx[size_t(r * 5 + i)] = int32_t(2 * i + (r & 1));
          }
          DeviceBuffer<int32_t> di(idx.size()), dc(counts.size());
          cudaMemcpy(di.data(), idx.data(), idx.size() * 4, cudaMemcpyHostToDevice);
          cudaMemcpy(dc.data(), counts.data(), counts.size() * 4, cudaMemcpyHostToDevice);
          f.poison();
          fused_mlp_sparse(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, PerTokenNeuronBlocks{di.data(), dc.data(), 5, 16},
                           ws.p(), ws.bytes(), cfg);
          BF_CUDA_OK(cudaDeviceSynchronize());
          fmlp::neuron_mask_from_blocks(idx.data(), counts.data(), 5, true, m, u, 16, mask.data());
          expect_matches(f, Activation::kSiLU, mask.data());
        }
}

// Each block width at M <= 8 forced (FusedMlpConfig::block_warps) under the sanitizers: dense, a union
// list split over clusters and unsplit, M = 1 and 8.
TEST(FusedMlpSanitizer, EveryBlockWidth) {
  SKIP_WITHOUT_GPU();
  for (int w : {8, 16}) {
    for (int64_t m : {1, 8})
      for (fmlp::SplitRule rule : {fmlp::SplitRule::kNever, fmlp::SplitRule::kAlways}) {
        const FusedMlpConfig det{16, MlpReduction::kDeterministic, rule, w};
        const uint64_t seed = testing::fresh_seed();
        SCOPED_TRACE("warps " + std::to_string(w) + " M=" + std::to_string(m) + " split rule " + std::to_string(int(rule)) +
                     "; " + testing::seed_note(seed));
        const int64_t k = 1032, u = 80;
        Mlp f(DType::kBF16, m, k, u, seed);
        Workspace ws(fused_mlp_workspace_size(m, k, u / 16, FusedMlpConfig{16, MlpReduction::kDeterministic}));
        f.poison();
        fused_mlp(f.X(), f.WGU(), f.WD(), f.Y(), Activation::kSiLU, ws.p(), ws.bytes(), det);
        BF_CUDA_OK(cudaDeviceSynchronize());
        expect_matches(f, Activation::kSiLU, nullptr);
        expect_union_list_matches(f, {0, 2, 4}, 5, 16, ws, forced(rule, w));
      }
  }
}

}  // namespace
}  // namespace blockfuse
