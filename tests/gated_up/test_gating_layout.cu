// Proof, on the CPU, of the mapping the sm80 kernel's gated epilogue relies on (see the header of
// src/gated_up/gated_up_sm80.cuh): for every tile configuration and every thread of the CTA,
//   1. each accumulator pair (make_coord(0,r), i, j) / (make_coord(1,r), i, j) covers the columns
//      (n, n+1) of one row with n even — i.e. (up_j', gate_j') of the interleaved weight;
//   2. partitioning the "pair view" of the gated tile (SmemLayoutH ∘ PairToH) with the same
//      thr_mma.partition_C gives both elements of the pair the shared-memory offset of H(m, n/2);
//   3. across all threads, every element of the BM × BN tile is accumulated exactly once and every
//      element of the BM × BN/2 gated tile is produced exactly once;
//   4. SmemLayoutH is a bijection onto BM × BN/2 slots (the swizzle loses no element).
// For bf16 and fp16 (different MMA atoms).
// Uses CuTe's layouts on the host; no GPU needed.
#include <gtest/gtest.h>

#include <vector>

#include "gated_up/launch_sm80.cuh"

namespace blockfuse {
namespace {

using namespace cute;

template <class T, int I>
void check_config() {
  using Traits = sm80::TraitsFor<T, I>;
  static_assert(sm80::accumulator_pairs_are_adjacent_columns<typename Traits::MmaAtomOp>(),
                "the MMA atom's accumulators must come in adjacent column pairs");
  constexpr int BM = Traits::BM, BN = Traits::BN;
  typename Traits::TiledMma mma;
  const auto h_layout = typename Traits::SmemLayoutH{};
  const auto pair_layout = composition(h_layout, typename Traits::PairToH{});
  std::vector<int> produced(BM * (BN / 2), 0);
  std::vector<int> accumulated(BM * BN, 0);  // C elements held by some thread's accumulators
  ASSERT_EQ(size(mma), Traits::kThreads);
  for (int t = 0; t < Traits::kThreads; ++t) {
    auto thr = mma.get_thread_slice(t);
    Tensor coords = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));  // (m, n) per accumulator
    // Offsets of the pair view: a tensor whose "data" is the offset itself.
    Tensor offs = thr.partition_C(make_tensor(counting_iterator<int>(0), pair_layout));
    ASSERT_EQ(size<0>(coords), 4) << "m16n8 accumulator atom holds 4 values per thread";
    for (int i = 0; i < size<1>(coords); ++i) {
      for (int j = 0; j < size<2>(coords); ++j) {
        for (int r = 0; r < 2; ++r) {
          const auto e = coords(make_coord(0, r), i, j);
          const auto o = coords(make_coord(1, r), i, j);
          const int m = get<0>(e), n = get<1>(e);
          ASSERT_TRUE(m >= 0 && m < BM && n >= 0 && n + 1 < BN) << "config " << I << " thread " << t << ": (" << m << ", " << n << ") outside the tile";
          ASSERT_EQ(n % 2, 0) << "config " << I << " thread " << t << ": first of pair at odd column " << n;
          ASSERT_EQ(get<0>(o), m) << "config " << I << " thread " << t << ": pair spans two rows";
          ASSERT_EQ(get<1>(o), n + 1) << "config " << I << " thread " << t << ": pair columns not adjacent";
          ++accumulated[m * BN + n];
          ++accumulated[m * BN + n + 1];
          const int expect = h_layout(m, n / 2);
          ASSERT_EQ(int(offs(make_coord(0, r), i, j)), expect) << "config " << I << " thread " << t;
          ASSERT_EQ(int(offs(make_coord(1, r), i, j)), expect) << "config " << I << " thread " << t;
          ++produced[m * (BN / 2) + n / 2];
        }
      }
    }
  }
  for (int idx = 0; idx < BM * BN; ++idx)
    ASSERT_EQ(accumulated[idx], 1) << "config " << I << ": C element (" << idx / BN << ", " << idx % BN << ") held "
                                   << accumulated[idx] << " times: the TiledMma must cover the BM x BN tile once";
  for (int idx = 0; idx < BM * (BN / 2); ++idx)
    ASSERT_EQ(produced[idx], 1) << "config " << I << ": h element (" << idx / (BN / 2) << ", " << idx % (BN / 2) << ") produced "
                                << produced[idx] << " times";
  // The swizzled H layout is a bijection onto BM × BN/2 elements (no two h elements share a slot).
  std::vector<int> hit(BM * (BN / 2), 0);
  for (int m = 0; m < BM; ++m)
    for (int n = 0; n < BN / 2; ++n) {
      const int off = h_layout(m, n);
      ASSERT_GE(off, 0);
      ASSERT_LT(off, BM * (BN / 2));
      ++hit[off];
    }
  for (int v : hit) ASSERT_EQ(v, 1);
}

// bf16 and fp16 use different MMA atoms (same accumulator layout); both are instantiated by the
// library, so both are checked.
TEST(GatingLayout, Config0) { check_config<cute::bfloat16_t, 0>(); check_config<cute::half_t, 0>(); }
TEST(GatingLayout, Config1) { check_config<cute::bfloat16_t, 1>(); check_config<cute::half_t, 1>(); }
TEST(GatingLayout, Config2) { check_config<cute::bfloat16_t, 2>(); check_config<cute::half_t, 2>(); }
TEST(GatingLayout, Config3) { check_config<cute::bfloat16_t, 3>(); check_config<cute::half_t, 3>(); }
static_assert(kNumSm80TileConfigs == 4, "add a test for the new tile config");

}  // namespace
}  // namespace blockfuse
