// Proof, on the CPU, of the mapping the sm90a kernel's gated epilogue relies on (see the header of
// src/gated_up/gated_up_sm90.cuh), for the wgmma TiledMma that CUTLASS's CollectiveBuilder
// actually builds for every tile config and both dtypes — and for the FP8 kernel's configs with
// both of its outputs (bf16, and e4m3 whose 64-element-wide ping-pong tile is one 64-byte-swizzled
// panel) — and every consumer thread of a tile (256 cooperative, 128 ping-pong):
//   1. each accumulator pair (flat i, i+1), i even, covers columns (n, n+1) of one row with n even,
//      i.e. (up_j, gate_j) of the interleaved weight, j = n/2;
//   2. the premises of the epilogue's cheap addressing: the thread's first accumulator is at
//      (m0, n0) with n0 even and n0 % 8 < 8 above its warpgroup's first column (0, or BN/2 for
//      the second warpgroup of an N-split row), and every accumulator's offset (dm, dn) from it
//      has dm % 8 == 0 and dn % 8 == 0;
//   3. the offset the kernel stores to, m0·kPanel + (n0 % 8)/2 + staging_delta(dm, dn + the
//      warpgroup's first column, phase(m0)),
//      equals staging_offset(m, j) and equals CuTe's SmemLayoutH(m, j) — the swizzled layout the
//      TMA store descriptor is built from (evaluated through a 1024-byte-aligned buffer, as the
//      hardware swizzles absolute shared-memory addresses);
//   4. panel p of the TMA store (SmemLayoutPanel at element BM·kPanel·p) is columns
//      [kPanel·p, kPanel·(p+1)) of SmemLayoutH;
//   5. across all threads every element of the BM x BN accumulator tile is held exactly once,
//      every element of the BM x BN/2 gated tile is written exactly once, and SmemLayoutH is a
//      bijection onto BM·BN/2 slots.
#include <gtest/gtest.h>

#include <type_traits>
#include <vector>

#include "gated_up/gated_up_fp8_sm90.cuh"
#include "gated_up/gated_up_sm90.cuh"

namespace blockfuse {
namespace {

using namespace cute;

template <class Cfg, int I>
void check_kernel(const Sm90TileConfigRow& row) {
  using T = typename Cfg::Element;
  using Epi = typename Cfg::Epilogue;
  using TiledMma = typename Cfg::TiledMma;
  static_assert(sm90::accumulator_pairs_are_adjacent_columns<TiledMma>());
  constexpr int BM = Epi::BM, BN = Epi::BN, BH = Epi::BH;
  const int threads = int(size(TiledMma{}));
  ASSERT_EQ(threads, row.pingpong ? 128 : 256) << "config " << I;
  constexpr int kSplitN = sm90::kSplitN<TiledMma>;
  ASSERT_EQ(kSplitN, row.split_n ? 2 : 1) << "config " << I;
  constexpr int kWgCols = BN / kSplitN;
  ASSERT_EQ(BM, row.bm);
  ASSERT_EQ(BN, row.bn);

  // CuTe's view of the staging tile, through an aligned host buffer standing in for shared memory.
  alignas(1024) static T buf[BM * BH];
  Tensor sH = make_tensor(make_smem_ptr(buf), typename Epi::SmemLayoutH{});
  auto cute_offset = [&](int m, int j) { return int(&sH(m, j) - buf); };

  // 5 (layout part) and 3 (staging_offset == CuTe).
  std::vector<int> hit(BM * BH, 0);
  for (int m = 0; m < BM; ++m)
    for (int j = 0; j < BH; ++j) {
      const int off = cute_offset(m, j);
      ASSERT_TRUE(off >= 0 && off < BM * BH);
      ++hit[off];
      ASSERT_EQ(Epi::staging_offset(m, j), off) << "config " << I << " H(" << m << ", " << j << ")";
    }
  for (int v : hit) ASSERT_EQ(v, 1) << "SmemLayoutH is not a bijection";

  // 4. TMA panels.
  for (int p = 0; p < Epi::kPanels; ++p) {
    Tensor sP = make_tensor(make_smem_ptr(buf + p * BM * Epi::kPanel), typename Epi::SmemLayoutPanel{});
    for (int m = 0; m < BM; ++m)
      for (int jj = 0; jj < Epi::kPanel; ++jj)
        ASSERT_EQ(int(&sP(m, jj) - buf), cute_offset(m, p * Epi::kPanel + jj)) << "config " << I << " panel " << p;
  }

  // 1, 2, 3, 5 per thread.
  TiledMma mma;
  std::vector<int> accumulated(BM * BN, 0), produced(BM * BH, 0);
  for (int t = 0; t < threads; ++t) {
    auto thr = mma.get_thread_slice(t);
    Tensor tC = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    Tensor acc = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});
    ASSERT_EQ(int(size(tC)), int(size(acc)));
    const int m0 = get<0>(tC(0)), n0 = get<1>(tC(0));
    // The warpgroup's first column, as the kernel tells it (store(): n0 >= kWgCols).
    const int wg_col = kSplitN == 2 && n0 >= kWgCols ? kWgCols : 0;
    ASSERT_EQ(wg_col, (t / 128) % kSplitN * kWgCols) << "config " << I << " thread " << t;
    ASSERT_TRUE(n0 % 2 == 0 && n0 >= wg_col && n0 < wg_col + 8) << "config " << I << " thread " << t << ": n0 = " << n0;
    // As the kernel computes it: from the buffer's address (aligned here, so row_phase_aligned(m0):
    // m0 % 8 for 128-byte panel rows).
    const int phase = Epi::row_phase(uint32_t(reinterpret_cast<uintptr_t>(buf)), m0);
    ASSERT_EQ(phase, Epi::row_phase_aligned(m0));
    if (Epi::kPanelBytes == 128) ASSERT_EQ(phase, m0 % 8);
    for (int i = 0; i < int(size(tC)); i += 2) {
      const int m = get<0>(tC(i)), n = get<1>(tC(i));
      ASSERT_TRUE(m >= 0 && m < BM && n >= 0 && n + 1 < BN) << "config " << I << " thread " << t;
      ASSERT_EQ(n % 2, 0) << "config " << I << " thread " << t << ": pair starts at odd column " << n;
      ASSERT_EQ(get<0>(tC(i + 1)), m) << "config " << I << " thread " << t << ": pair spans two rows";
      ASSERT_EQ(get<1>(tC(i + 1)), n + 1) << "config " << I << " thread " << t << ": pair columns not adjacent";
      const int dm = m - m0, dn = n - n0;
      ASSERT_EQ(dm % 8, 0) << "config " << I << " thread " << t << " value " << i;
      ASSERT_EQ(dn % 8, 0) << "config " << I << " thread " << t << " value " << i;
      const int kernel_offset = m0 * Epi::kPanel + (n0 % 8) / 2 + Epi::staging_delta(dm, dn + wg_col, phase);
      ASSERT_EQ(kernel_offset, cute_offset(m, n / 2)) << "config " << I << " thread " << t << " value " << i;
      ++accumulated[m * BN + n];
      ++accumulated[m * BN + n + 1];
      ++produced[m * BH + n / 2];
    }
  }
  for (int idx = 0; idx < BM * BN; ++idx)
    ASSERT_EQ(accumulated[idx], 1) << "config " << I << ": C(" << idx / BN << ", " << idx % BN << ") held "
                                   << accumulated[idx] << " times";
  for (int idx = 0; idx < BM * BH; ++idx)
    ASSERT_EQ(produced[idx], 1) << "config " << I << ": H(" << idx / BH << ", " << idx % BH << ") written "
                                << produced[idx] << " times";
}

// The walk of the FP8 epilogue's dequantisation (GatedEpilogue::gate_pairs_dequant): the fragment
// indexed as ((pair, half, block), mm, mn) visits every accumulator once; (0, h, b) and (1, h, b) are
// columns (n, n+1) of one row; the row depends only on (h, mm) — so the row scales it loads once
// per (h, mm) are the right ones — and the column only on (b, mn) — so one column-scale pair per
// (b, mn) serves every row.
template <class Cfg, int I>
void check_dequant_walk() {
  using Epi = typename Cfg::Epilogue;
  using TiledMma = typename Cfg::TiledMma;
  constexpr int BM = Epi::BM, BN = Epi::BN;
  TiledMma mma;
  for (int t = 0; t < int(size(TiledMma{})); ++t) {
    auto thr = mma.get_thread_slice(t);
    Tensor tC = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    constexpr int kHalves = decltype(size<0, 1>(tC))::value, kBlocks = decltype(size<0, 2>(tC))::value;
    constexpr int kMmaM = decltype(size<1>(tC))::value, kMmaN = decltype(size<2>(tC))::value;
    ASSERT_EQ(2 * kHalves * kBlocks * kMmaM * kMmaN, int(size(tC)));
    std::vector<int> seen(BM * BN, 0);
    for (int mn = 0; mn < kMmaN; ++mn)
      for (int b = 0; b < kBlocks; ++b)
        for (int mm = 0; mm < kMmaM; ++mm)
          for (int h = 0; h < kHalves; ++h) {
            const auto cu = tC(make_coord(make_coord(0, h, b), mm, mn));
            const auto cg = tC(make_coord(make_coord(1, h, b), mm, mn));
            const int m = get<0>(cu), n = get<1>(cu);
            ASSERT_EQ(get<0>(cg), m) << "config " << I << " thread " << t;
            ASSERT_EQ(get<1>(cg), n + 1) << "config " << I << " thread " << t;
            ASSERT_EQ(n % 2, 0);
            ASSERT_EQ(m, int(get<0>(tC(make_coord(make_coord(0, h, 0), mm, 0))))) << "row depends on (b, mn)";
            ASSERT_EQ(n, int(get<1>(tC(make_coord(make_coord(0, 0, b), 0, mn))))) << "column depends on (h, mm)";
            ++seen[m * BN + n];
            ++seen[m * BN + n + 1];
          }
    // Each thread's accumulators, once each (the union over threads is checked in check_kernel).
    int held = 0;
    for (int v : seen) {
      ASSERT_LE(v, 1);
      held += v;
    }
    ASSERT_EQ(held, int(size(tC)));
  }
}

template <class T, int I>
void check_config() {
  check_kernel<sm90::Sm90KernelFor<T, I>, I>(kSm90TileConfigs[I]);
}
template <class TOut, int I>
void check_fp8_config() {
  check_kernel<sm90::Sm90Fp8KernelFor<TOut, I>, I>(kSm90Fp8TileConfigs[I]);
  check_dequant_walk<sm90::Sm90Fp8KernelFor<TOut, I>, I>();
}

TEST(GatingLayoutSm90, Config0) { check_config<cute::bfloat16_t, 0>(); check_config<cute::half_t, 0>(); }
TEST(GatingLayoutSm90, Config1) { check_config<cute::bfloat16_t, 1>(); check_config<cute::half_t, 1>(); }
TEST(GatingLayoutSm90, Config2) { check_config<cute::bfloat16_t, 2>(); check_config<cute::half_t, 2>(); }
TEST(GatingLayoutSm90, Config3StreamK) { check_config<cute::bfloat16_t, 3>(); check_config<cute::half_t, 3>(); }
TEST(GatingLayoutSm90, Config4Coop256x128) { check_config<cute::bfloat16_t, 4>(); check_config<cute::half_t, 4>(); }
TEST(GatingLayoutSm90, Config5Coop192x192SplitN) { check_config<cute::bfloat16_t, 5>(); check_config<cute::half_t, 5>(); }
TEST(GatingLayoutSm90, Config6Pingpong128x192) { check_config<cute::bfloat16_t, 6>(); check_config<cute::half_t, 6>(); }
static_assert(kNumSm90TileConfigs == 7, "add a test for the new tile config");
static_assert(sm90::Sm90KernelFor<cute::bfloat16_t, 5>::Epilogue::kPanelBytes == 64 &&
                  sm90::Sm90KernelFor<cute::bfloat16_t, 5>::Epilogue::kPanels == 3,
              "the 192-wide tile's 96 gated columns go out as three 64-byte panels");
static_assert(sm90::Sm90KernelFor<cute::bfloat16_t, 6>::Epilogue::kPanelBytes == 64 &&
                  sm90::Sm90KernelFor<cute::bfloat16_t, 6>::Epilogue::kPanels == 3,
              "the 128x192 ping-pong tile's 96 gated columns go out as three 64-byte panels");

// The FP8 kernel: e4m3 operands (wgmma k32), bf16 or e4m3 outputs.
TEST(GatingLayoutSm90, Fp8Config0) {
  check_fp8_config<cute::bfloat16_t, 0>();
  check_fp8_config<cutlass::float_e4m3_t, 0>();
}
TEST(GatingLayoutSm90, Fp8Config1) {
  check_fp8_config<cute::bfloat16_t, 1>();
  check_fp8_config<cutlass::float_e4m3_t, 1>();
}
static_assert(kNumSm90Fp8Kernels == 2, "add a test for the new FP8 kernel (a row that only changes the tile order "
                                      "reuses one: sm90_fp8_kernel_of)");
static_assert(std::is_same_v<sm90::Sm90Fp8KernelFor<cute::bfloat16_t, 2>, sm90::Sm90Fp8KernelFor<cute::bfloat16_t, 1>>,
              "FP8 row 2 is row 1 along N: the same kernel, proven above");
static_assert(sm90::Sm90Fp8KernelFor<cutlass::float_e4m3_t, 1>::Epilogue::kPanelBytes == 64,
              "the e4m3 ping-pong tile (64 outputs wide) is one 64-byte-swizzled panel");

}  // namespace
}  // namespace blockfuse
