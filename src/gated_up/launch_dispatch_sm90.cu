// The sm90a dispatcher: (dtype, config) -> the kernel instantiation compiled for it. Cheap to
// compile (no CUTLASS); the instantiations live in CMake-generated files (launch_sm90.h).
#include <array>
#include <utility>

#include "common/check.h"
#include "gated_up/launch_sm90.h"
#include "gated_up/tile_configs_sm90.h"

namespace blockfuse::sm90 {
namespace {

using Launcher = void (*)(const GatedUpParams&, cudaStream_t);

template <DType D, std::size_t... I>
constexpr std::array<Launcher, sizeof...(I)> launchers(std::index_sequence<I...>) {
  return {&launch_instance<D, static_cast<int>(I)>...};
}
using WorkspaceFn = size_t (*)(const GatedUpParams&);
template <std::size_t... I>
constexpr std::array<WorkspaceFn, sizeof...(I)> workspace_fns(std::index_sequence<I...>) {
  return {&workspace_bytes_instance<DType::kBF16, static_cast<int>(I)>...};
}
template <std::size_t... I>
std::array<int, sizeof...(I)> smem_sizes(std::index_sequence<I...>) {
  return {smem_bytes_instance<static_cast<int>(I)>()...};
}
using Configs = std::make_index_sequence<kNumSm90TileConfigs>;
static_assert(kNumSm90TileConfigs == BLOCKFUSE_SM90_NUM_CONFIGS,
              "CMakeLists.txt generates one instance file per config: update BLOCKFUSE_SM90_NUM_CONFIGS");

void check_config(int config) { check_tile_config("blockfuse::gated_up", config, kNumSm90TileConfigs); }

}  // namespace

void check_tile_config(const char* fn, int config, int n_configs) {
  if (config < 0 || config >= n_configs) throw Error(detail::cat(fn, ": sm90 tile config ", config, " does not exist"));
}

void launch_gated_up(DType dtype, int config, const GatedUpParams& p, cudaStream_t stream) {
  static constexpr auto kBf16 = launchers<DType::kBF16>(Configs{});
  static constexpr auto kFp16 = launchers<DType::kFP16>(Configs{});
  check_config(config);
  (dtype == DType::kBF16 ? kBf16 : kFp16)[static_cast<std::size_t>(config)](p, stream);
}

size_t workspace_bytes(int config, const GatedUpParams& p) {
  static constexpr auto kFns = workspace_fns(Configs{});
  check_config(config);
  return kFns[static_cast<std::size_t>(config)](p);
}

int smem_bytes(int config) {
  static const auto kSizes = smem_sizes(Configs{});
  check_config(config);
  return kSizes[static_cast<std::size_t>(config)];
}

}  // namespace blockfuse::sm90
