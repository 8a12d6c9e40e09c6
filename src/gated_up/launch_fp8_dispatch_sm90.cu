// The FP8 sm90a dispatcher: (output type, config) -> the kernel instantiation compiled for it.
// Cheap to compile (no CUTLASS); the instantiations live in CMake-generated files.
#include <array>
#include <utility>

#include "common/check.h"
#include "gated_up/launch_fp8_sm90.h"
#include "gated_up/launch_sm90.h"
#include "gated_up/tile_configs_fp8_sm90.h"

namespace blockfuse::sm90 {
namespace {

using Launcher = void (*)(const GatedUpFp8Params&, cudaStream_t);

// Config c launches its kernel's instance (sm90_fp8_kernel_of: rows that differ only in tile order share one).
template <bool OutFp8, std::size_t... I>
constexpr std::array<Launcher, sizeof...(I)> fp8_launchers(std::index_sequence<I...>) {
  return {&launch_fp8_instance<OutFp8, sm90_fp8_kernel_of(static_cast<int>(I))>...};
}
template <bool OutFp8, std::size_t... I>
std::array<int, sizeof...(I)> fp8_smem_sizes(std::index_sequence<I...>) {
  return {smem_bytes_fp8_instance<OutFp8, sm90_fp8_kernel_of(static_cast<int>(I))>()...};
}
using Configs = std::make_index_sequence<kNumSm90Fp8TileConfigs>;
static_assert(kNumSm90Fp8Kernels == BLOCKFUSE_SM90_FP8_NUM_KERNELS,
              "CMakeLists.txt generates one instance file per FP8 kernel: update BLOCKFUSE_SM90_FP8_NUM_KERNELS");

void check_config(int config) { check_tile_config("blockfuse::gated_up_fp8", config, kNumSm90Fp8TileConfigs); }

}  // namespace

void launch_gated_up_fp8(int config, const GatedUpFp8Params& p, cudaStream_t stream) {
  static constexpr auto kBf16 = fp8_launchers<false>(Configs{});
  static constexpr auto kFp8 = fp8_launchers<true>(Configs{});
  check_config(config);
  (p.out_fp8 ? kFp8 : kBf16)[static_cast<std::size_t>(config)](p, stream);
}

int smem_bytes_fp8(int config, bool out_fp8) {
  static const auto kBf16 = fp8_smem_sizes<false>(Configs{});
  static const auto kFp8 = fp8_smem_sizes<true>(Configs{});
  check_config(config);
  return (out_fp8 ? kFp8 : kBf16)[static_cast<std::size_t>(config)];
}

}  // namespace blockfuse::sm90
