// The launch shape of gated_up_fp8's dynamic-scale row kernel (src/gated_up/rowwise_fp8.h): whole
// warps within the 1024-thread bound, the row on chip exactly when threads x kRowwiseFp8Chunks
// chunks cover it, one block per row up to what the device holds at once.
#include <gtest/gtest.h>

#include "gated_up/rowwise_fp8.h"

namespace blockfuse::detail {
namespace {

TEST(RowwiseFp8Config, NamedShapes) {
  // Llama-3 8B's U = 14336: 1792 chunks, 448 threads of 4 chunks, 4 blocks per SM.
  RowwiseFp8Config c = rowwise_fp8_config(14336 / 8, 4096, 132);
  EXPECT_EQ(c.threads, 448);
  EXPECT_TRUE(c.on_chip);
  EXPECT_EQ(c.blocks, 132 * 4);
  // 70B's U = 28672: 896 threads, 2 blocks per SM; a decode-sized call: one block per row.
  c = rowwise_fp8_config(28672 / 8, 8, 132);
  EXPECT_EQ(c.threads, 896);
  EXPECT_TRUE(c.on_chip);
  EXPECT_EQ(c.blocks, 8);
  // The narrowest e4m3 row (U = 16): one warp.
  c = rowwise_fp8_config(2, 1, 132);
  EXPECT_EQ(c.threads, 32);
  EXPECT_TRUE(c.on_chip);
  EXPECT_EQ(c.blocks, 1);
  // Above 4096 chunks (U > 32768) the row is read twice.
  EXPECT_TRUE(rowwise_fp8_config(4096, 1, 132).on_chip);
  c = rowwise_fp8_config(4097, 1, 132);
  EXPECT_EQ(c.threads, 1024);
  EXPECT_FALSE(c.on_chip);
}

TEST(RowwiseFp8Config, InvariantsOverASweep) {
  for (int sms : {1, 78, 114, 132})
    for (int64_t chunks = 2; chunks <= 20000; chunks = chunks < 64 ? chunks + 2 : chunks * 9 / 8 / 2 * 2)
      for (int64_t rows : {int64_t(1), int64_t(7), int64_t(333), int64_t(1) << 31}) {
        const RowwiseFp8Config c = rowwise_fp8_config(chunks, rows, sms);
        ASSERT_EQ(c.threads % 32, 0) << chunks;
        ASSERT_GE(c.threads, 32);
        ASSERT_LE(c.threads, kRowwiseFp8MaxThreads);
        ASSERT_EQ(c.on_chip, chunks <= int64_t(c.threads) * kRowwiseFp8Chunks) << chunks;
        // No more threads than the row needs, unless it needs fewer than a warp's worth.
        ASSERT_TRUE(c.threads == 32 || int64_t(c.threads - 32) * kRowwiseFp8Chunks < chunks) << chunks;
        ASSERT_GE(c.blocks, 1);
        ASSERT_LE(c.blocks, rows);
        ASSERT_LE(c.blocks, int64_t(sms) * (2048 / c.threads));
        ASSERT_LE(c.blocks, int64_t{2147483647});  // a valid grid.x
      }
}

}  // namespace
}  // namespace blockfuse::detail
