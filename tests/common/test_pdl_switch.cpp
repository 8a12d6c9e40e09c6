// The process-wide programmatic-dependent-launch switch (blockfuse/common.h): it returns the
// previous setting and reads back what was set; and the row rule (common/launch.h: pdl_rows). No GPU
// needed (neither touches a device); tests/common/test_pdl_gpu.cu checks what they do to launches.
#include <gtest/gtest.h>

#include "blockfuse/common.h"
#include "common/launch.h"

namespace blockfuse {
namespace {

TEST(PdlSwitch, SetReturnsThePreviousSettingAndGetReadsIt) {
  const bool before = programmatic_dependent_launch();
  EXPECT_EQ(set_programmatic_dependent_launch(false), before);
  EXPECT_FALSE(programmatic_dependent_launch());
  EXPECT_FALSE(set_programmatic_dependent_launch(true));
  EXPECT_TRUE(programmatic_dependent_launch());
  EXPECT_TRUE(set_programmatic_dependent_launch(before));
  EXPECT_EQ(programmatic_dependent_launch(), before);
}

// Decode-sized calls only (launch.h cites the measurement behind 32).
TEST(PdlSwitch, OnlyDecodeSizedCallsCarryTheAttribute) {
  EXPECT_TRUE(detail::pdl_rows(1));
  EXPECT_TRUE(detail::pdl_rows(32));
  EXPECT_FALSE(detail::pdl_rows(33));
  EXPECT_FALSE(detail::pdl_rows(256));
  EXPECT_FALSE(detail::pdl_rows(int64_t{1} << 40));
}

}  // namespace
}  // namespace blockfuse
