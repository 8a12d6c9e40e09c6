// Proof, on the CPU, of the shared-memory address the sm90a attention backward computes by hand
// (src/attention/backward_sm90.cuh): ds_byte_offset(q, k) is where cute's SmemLayoutDS puts dS
// element (query q, key k) for both dtypes and head dims, every element, so the kernel's 32-bit pair
// stores land where the dQ wgmma reads them; and q, q + 1 (q even) are adjacent there.
#include <gtest/gtest.h>

#include <cstdint>

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

TEST(AttentionBackwardLayoutSm90, DsOffsetsD128Bf16) { check_ds_offsets<attn::sm90::bwd::BwdTraits<cutlass::bfloat16_t, 128, 3>>(); }
TEST(AttentionBackwardLayoutSm90, DsOffsetsD128Fp16) { check_ds_offsets<attn::sm90::bwd::BwdTraits<cutlass::half_t, 128, 3>>(); }
TEST(AttentionBackwardLayoutSm90, DsOffsetsD64Bf16) { check_ds_offsets<attn::sm90::bwd::BwdTraits<cutlass::bfloat16_t, 64, 2>>(); }

}  // namespace
}  // namespace blockfuse
