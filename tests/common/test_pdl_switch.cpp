// The process-wide programmatic-dependent-launch switch (blockfuse/common.h): it returns the
// previous setting and reads back what was set. No GPU needed (the switch touches no device);
// tests/common/test_pdl_gpu.cu checks what it does to launches.
#include <gtest/gtest.h>

#include "blockfuse/common.h"

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

}  // namespace
}  // namespace blockfuse
