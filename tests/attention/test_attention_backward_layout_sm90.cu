// Proof, on the CPU, of the shared-memory address the sm90a attention backward computes by hand
// (src/attention/backward_sm90.cuh): ds_byte_offset(q, k) is where cute's SmemLayoutDS puts dS
// element (query q, key k) for both dtypes and head dims, every element, so the kernel's 32-bit pair
// stores land where the dQ wgmma reads them; and q, q + 1 (q even) are adjacent there.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "attention/backward_sm90.cuh"

namespace blockfuse {
namespace {

using namespace cute;

template <class Traits>
void check_ds_offsets() {
  using Element = typename Traits::Element;
  alignas(1024) static Element buf[cosize_v<typename Traits::SmemLayoutDS>];
  Tensor sdS = make_tensor(make_smem_ptr(buf), typename Traits::SmemLayoutDS{});
  ASSERT_EQ(int(size<0>(sdS)), Traits::kBlockM);
  ASSERT_EQ(int(size<1>(sdS)), Traits::kKeysPerWg);
  for (int q = 0; q < Traits::kBlockM; ++q)
    for (int k = 0; k < Traits::kKeysPerWg; ++k) {
      const auto at = reinterpret_cast<const char*>(raw_pointer_cast(&sdS(q, k))) - reinterpret_cast<const char*>(buf);
      ASSERT_EQ(int64_t(attn::sm90::bwd::ds_byte_offset(q, k)), int64_t(at)) << "q " << q << " k " << k;
      if (q % 2 == 1) {
        ASSERT_EQ(attn::sm90::bwd::ds_byte_offset(q, k), attn::sm90::bwd::ds_byte_offset(q - 1, k) + 2);
      }
    }
}

// dSᵀ's stmatrix store, replayed on the CPU: stmatrix.x4 writes, at the row address lane 8j + r gives,
// the 8 columns of row r of matrix j, column c being half c % 2 of register j of lane 4r + c / 2 (PTX
// ISA, stmatrix). Each lane's register j carries its accumulator pair (i, bb) = (j % 2, 2g + j / 2),
// whose (key, query) cute's partition of the dSᵀ wgmma says; every element must land at
// ds_byte_offset(query, key), each once.
template <class Traits>
void check_ds_stmatrix() {
  typename Traits::TiledMmaSdP mma;
  Tensor coords = make_identity_tensor(Shape<Int<Traits::kKeysPerWg>, Int<Traits::kBlockM>>{});  // (key, query)
  std::vector<int> written(Traits::kKeysPerWg * Traits::kBlockM * 2, 0);
  for (int w = 0; w < 4; ++w)
    for (int g = 0; g < 4; ++g) {
      for (int lane = 0; lane < 32; ++lane)
        ASSERT_EQ(attn::sm90::bwd::ds_stsm_row_offset(w, lane, g), attn::sm90::bwd::ds_stsm_row_offset(w, lane, 0) ^ uint32_t(g << 5));
      for (int j = 0; j < 4; ++j)
        for (int r = 0; r < 8; ++r)
          for (int c = 0; c < 8; ++c) {
            const int src = 32 * w + 4 * r + c / 2;
            Tensor tc = mma.get_thread_slice(src).partition_C(coords);
            Tensor rc = make_tensor(tc.data(), attn::sm90::acc_rowcol_sm90(tc.layout()));
            const auto kq = rc(make_coord(j % 2, 0), make_coord(c % 2, 2 * g + j / 2));
            const int key = int(get<0>(kq)), query = int(get<1>(kq));
            const uint32_t at = attn::sm90::bwd::ds_stsm_row_offset(w, 8 * j + r, g) + 2u * uint32_t(c);
            ASSERT_EQ(at, attn::sm90::bwd::ds_byte_offset(query, key))
                << "warp " << w << " stmatrix " << g << " matrix " << j << " row " << r << " column " << c;
            ++written[at / 2];
          }
    }
  for (size_t e = 0; e < written.size() / 2; ++e) ASSERT_EQ(written[e], 1) << "dS element at byte " << 2 * e;
}

TEST(AttentionBackwardLayoutSm90, DsStmatrixD128Bf16) { check_ds_stmatrix<attn::sm90::bwd::BwdTraits<cutlass::bfloat16_t, 128, 3>>(); }
TEST(AttentionBackwardLayoutSm90, DsStmatrixD64Fp16) { check_ds_stmatrix<attn::sm90::bwd::BwdTraits<cutlass::half_t, 64, 2>>(); }

TEST(AttentionBackwardLayoutSm90, DsOffsetsD128Bf16) { check_ds_offsets<attn::sm90::bwd::BwdTraits<cutlass::bfloat16_t, 128, 3>>(); }
TEST(AttentionBackwardLayoutSm90, DsOffsetsD128Fp16) { check_ds_offsets<attn::sm90::bwd::BwdTraits<cutlass::half_t, 128, 3>>(); }
TEST(AttentionBackwardLayoutSm90, DsOffsetsD64Bf16) { check_ds_offsets<attn::sm90::bwd::BwdTraits<cutlass::bfloat16_t, 64, 2>>(); }

}  // namespace
}  // namespace blockfuse
