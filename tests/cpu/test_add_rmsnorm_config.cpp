// add_rmsnorm's launch shape (src/add_rmsnorm/config.h): for every row length up to the register
// limit, the block covers the row (threads x v chunks), is a whole number of warps and fits the
// kernels' __launch_bounds__(512); longer rows take the loop path. The shapes of the common hidden
// sizes are pinned so a change to them is deliberate (they decide registers, occupancy, latency).
#include <gtest/gtest.h>

#include "add_rmsnorm/config.h"

namespace blockfuse {
namespace {

TEST(AddRmsNormConfig, CoversEveryRowLength) {
  for (int n = 1; n <= detail::kAddRmsNormMaxRegisterChunks; ++n) {
    const detail::AddRmsNormConfig c = detail::add_rmsnorm_config(n);
    ASSERT_TRUE(c.v == 1 || c.v == 2 || c.v == 4 || c.v == 8) << "chunks " << n;
    ASSERT_GE(c.threads * c.v, n) << "chunks " << n;
    ASSERT_LT((c.threads - 32) * c.v, n) << "chunks " << n << ": a whole idle warp";
    ASSERT_EQ(c.threads % 32, 0) << "chunks " << n;
    ASSERT_LE(c.threads, 512) << "chunks " << n;
  }
  for (int n : {detail::kAddRmsNormMaxRegisterChunks + 1, 8192, 1 << 27}) {
    const detail::AddRmsNormConfig c = detail::add_rmsnorm_config(n);
    EXPECT_EQ(c.v, 0) << "chunks " << n;
    EXPECT_EQ(c.threads, detail::kAddRmsNormLoopThreads);
  }
}

TEST(AddRmsNormConfig, CommonHiddenSizes) {
  struct Want { int h, v, threads; };
  for (const Want w : {Want{8, 1, 32}, Want{24, 1, 32}, Want{3584, 2, 224}, Want{4096, 2, 256}, Want{5120, 4, 160},
                       Want{8192, 4, 256}, Want{16384, 8, 256}, Want{32768, 8, 512}}) {
    const detail::AddRmsNormConfig c = detail::add_rmsnorm_config(w.h / 8);
    EXPECT_EQ(c.v, w.v) << "H " << w.h;
    EXPECT_EQ(c.threads, w.threads) << "H " << w.h;
  }
}

}  // namespace
}  // namespace blockfuse
