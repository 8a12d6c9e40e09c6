// Proof, on the CPU, of the register and shared-memory mappings the sm90a attention kernel relies
// on (see the header of src/attention/attention_sm90.cuh), for the wgmma TiledMmas of the
// compiled configuration, both dtypes, every thread of a consumer warpgroup:
//   1. P stays in registers: the score accumulator of S = Q·Kᵀ re-read through acc_as_a_sm90 holds,
//      at A-fragment position (v, 0, k) of O += P·V, exactly the element (m, key) that the wgmma
//      expects there (thr_pv.partition_A of the (64, BN) P tile);
//   2. the (row, col) view acc_rowcol_sm90 of both accumulators (S and O) names, at (mi, ni), row
//      warp·16 + lane/4 + 8·mi and column 2·(lane % 4) + (ni % 2) + 8·(ni / 2) — the premises of
//      the quad reductions, VisibilityMask::apply and the LSE row index;
//   3. over the 128 threads each element of S, P and O is held exactly once;
//   4. Vᵀ (SmemLayoutVt) is V's buffer transposed: Vt(d, n, s) == V(n, d, s).
#include <gtest/gtest.h>

#include <vector>

#include "attention/attention_sm90.cuh"

namespace blockfuse {
namespace {

using namespace cute;

template <class Traits>
void check_traits() {
  constexpr int BM = Traits::kRowsPerWg, BN = Traits::kBlockN, D = Traits::kHeadDim;
  typename Traits::TiledMmaQK mma_qk;
  typename Traits::TiledMmaPV mma_pv;
  ASSERT_EQ(int(size(mma_qk)), 128);
  ASSERT_EQ(int(size(mma_pv)), 128);

  // The register layouts the kernel builds (compact: position -> register index).
  auto acc_s = partition_fragment_C(mma_qk, Shape<Int<BM>, Int<BN>>{});
  auto acc_o = partition_fragment_C(mma_pv, Shape<Int<BM>, Int<D>>{});
  const auto ls = acc_s.layout();
  const auto lo = acc_o.layout();
  const auto lp = attn::sm90::acc_as_a_sm90(ls);
  const auto rcs = attn::sm90::acc_rowcol_sm90(ls);
  const auto rco = attn::sm90::acc_rowcol_sm90(lo);
  static_assert(decltype(size<2>(lp))::value == BN / 16);
  ASSERT_EQ(int(size(lp)), int(size(ls)));
  ASSERT_EQ(int(size<0>(rcs)), 2);
  ASSERT_EQ(int(size<1>(rcs)), BN / 4);
  ASSERT_EQ(int(size<1>(rco)), D / 4);

  std::vector<int> held_s(BM * BN, 0), held_p(BM * BN, 0), held_o(BM * D, 0);
  for (int t = 0; t < 128; ++t) {
    auto thr_qk = mma_qk.get_thread_slice(t);
    auto thr_pv = mma_pv.get_thread_slice(t);
    Tensor cS = thr_qk.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    Tensor cP = thr_pv.partition_A(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    Tensor cO = thr_pv.partition_C(make_identity_tensor(Shape<Int<BM>, Int<D>>{}));
    ASSERT_EQ(int(size(cS)), int(size(ls)));
    ASSERT_EQ(int(size(cP)), int(size(ls)));
    ASSERT_EQ(int(size(cO)), int(size(lo)));
    ASSERT_EQ(int(size<2>(cP)), BN / 16);

    // Register index -> the S element it holds.
    std::vector<std::pair<int, int>> reg_s(size(ls)), reg_o(size(lo));
    for (int i = 0; i < int(size(ls)); ++i) reg_s[ls(i)] = {int(get<0>(cS(i))), int(get<1>(cS(i)))};
    for (int i = 0; i < int(size(lo)); ++i) reg_o[lo(i)] = {int(get<0>(cO(i))), int(get<1>(cO(i)))};
    for (auto [m, n] : reg_s) ++held_s[m * BN + n];
    for (auto [m, n] : reg_o) ++held_o[m * D + n];

    // 1. P's A fragment, slice by slice, value by value.
    for (int k = 0; k < int(size<2>(cP)); ++k)
      for (int v = 0; v < int(size<0>(cP)); ++v) {
        const int m = get<0>(cP(v, 0, k)), key = get<1>(cP(v, 0, k));
        const auto held = reg_s[lp(v, 0, k)];
        ASSERT_EQ(held.first, m) << "thread " << t << " k-slice " << k << " value " << v;
        ASSERT_EQ(held.second, key) << "thread " << t << " k-slice " << k << " value " << v;
        ++held_p[m * BN + key];
      }

    // 2. Row/col views.
    const int warp = t / 32, lane = t % 32;
    for (int mi = 0; mi < 2; ++mi) {
      const int row = warp * 16 + lane / 4 + 8 * mi;
      for (int ni = 0; ni < int(size<1>(rcs)); ++ni) {
        const auto e = reg_s[rcs(mi, ni)];
        ASSERT_EQ(e.first, row) << "S thread " << t << " (" << mi << ", " << ni << ")";
        ASSERT_EQ(e.second, 2 * (lane % 4) + ni % 2 + 8 * (ni / 2)) << "S thread " << t << " (" << mi << ", " << ni << ")";
      }
      for (int ni = 0; ni < int(size<1>(rco)); ++ni) {
        const auto e = reg_o[rco(mi, ni)];
        ASSERT_EQ(e.first, row) << "O thread " << t << " (" << mi << ", " << ni << ")";
        ASSERT_EQ(e.second, 2 * (lane % 4) + ni % 2 + 8 * (ni / 2)) << "O thread " << t << " (" << mi << ", " << ni << ")";
      }
      // The mask's own coordinate walk: element (i, j) of row-half i and column (j, nj).
      for (int nj = 0; nj < int(size<1, 1>(rcs)); ++nj)
        for (int j = 0; j < 2; ++j) {
          const auto e = reg_s[rcs(make_coord(mi, 0), make_coord(j, nj))];
          ASSERT_EQ(e.first, row);
          ASSERT_EQ(e.second, 2 * (lane % 4) + nj * 8 + j);
        }
    }
  }
  // 3. Every element once.
  for (int i = 0; i < BM * BN; ++i) {
    ASSERT_EQ(held_s[i], 1) << "S(" << i / BN << ", " << i % BN << ")";
    ASSERT_EQ(held_p[i], 1) << "P(" << i / BN << ", " << i % BN << ")";
  }
  for (int i = 0; i < BM * D; ++i) ASSERT_EQ(held_o[i], 1) << "O(" << i / D << ", " << i % D << ")";

  // 4. Vᵀ over V's buffer.
  const typename Traits::SmemLayoutV lv{};
  const typename Traits::SmemLayoutVt lvt{};
  for (int s = 0; s < Traits::kStages; ++s)
    for (int n = 0; n < BN; ++n)
      for (int d = 0; d < D; ++d) ASSERT_EQ(int(lvt(d, n, s)), int(lv(n, d, s))) << "(" << d << ", " << n << ", " << s << ")";
}

TEST(AttentionLayoutSm90, D128Bf16) { check_traits<attn::sm90::Sm90Traits<cutlass::bfloat16_t, 128, 128, 2>>(); }
TEST(AttentionLayoutSm90, D128Fp16) { check_traits<attn::sm90::Sm90Traits<cutlass::half_t, 128, 128, 2>>(); }
TEST(AttentionLayoutSm90, D64Bf16) { check_traits<attn::sm90::Sm90Traits<cutlass::bfloat16_t, 64, 128, 3>>(); }
TEST(AttentionLayoutSm90, D256Bf16) { check_traits<attn::sm90::Sm90Traits<cutlass::bfloat16_t, 256, 64, 2, false>>(); }

}  // namespace
}  // namespace blockfuse
