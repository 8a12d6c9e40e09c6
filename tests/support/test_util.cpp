// Host-side test helpers (test_util.h).
#include "support/test_util.h"

#include <atomic>
#include <chrono>
#include <functional>

namespace blockfuse::test {

uint64_t fresh_seed() {
  static std::atomic<uint64_t> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
  const uint64_t t = static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  return std::hash<std::string>{}(name) ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull) ^ t;
}

}  // namespace blockfuse::test
