// Internal: host-side launch of the sm80 gated-up kernel for one dtype; instantiated once per
// dtype in launch_sm80_{bf16,fp16}.cu so the two compile in parallel.
#pragma once

#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"
#include "gated_up/gated_up_sm80.cuh"
#include "gated_up/tile_configs_sm80.h"

namespace blockfuse::sm80 {

template <class T, int I>
using TraitsFor = GatedUpTraits<T, kSm80TileConfigs[I].bm, kSm80TileConfigs[I].bn, kSm80TileConfigs[I].bk,
                                kSm80TileConfigs[I].stages, kSm80TileConfigs[I].warps_m,
                                kSm80TileConfigs[I].warps_n>;

template <class Traits>
void launch_traits(const GatedUpParams& p, cudaStream_t stream) {
  static_assert(Traits::kSmemBytes == tile_config_smem_bytes(
                    TileConfigRow{Traits::BM, Traits::BN, Traits::BK, Traits::Stages, Traits::kWarpsM, Traits::kWarpsN}),
                "tile_config_smem_bytes() must match the kernel's shared memory");
  auto kernel = gated_up_sm80_kernel<Traits>;
  static detail::PerDeviceCache<bool> opted_in;  // this kernel's
  detail::opt_in_dynamic_smem_once(opted_in, kernel, Traits::kSmemBytes);
  const int64_t m_tiles = (p.m + Traits::BM - 1) / Traits::BM;
  const int64_t n_tiles = (2 * p.u + Traits::BN - 1) / Traits::BN;
  const int64_t grid = m_tiles * n_tiles;
  if (grid > 0x7fffffff)
    throw Error(detail::cat("blockfuse::gated_up: the problem needs ", grid, " CTAs (M = ", p.m, ", U = ", p.u,
                    "); required: at most 2^31 - 1"));
  kernel<<<static_cast<unsigned>(grid), Traits::kThreads, Traits::kSmemBytes, stream>>>(p);
  BF_CHECK_LAUNCH();
}

template <class T>
void launch_gated_up(int config, const GatedUpParams& p, cudaStream_t stream) {
  static_assert(kNumSm80TileConfigs == 4, "add the new row to the switch below");
  switch (config) {
    case 0: return launch_traits<TraitsFor<T, 0>>(p, stream);
    case 1: return launch_traits<TraitsFor<T, 1>>(p, stream);
    case 2: return launch_traits<TraitsFor<T, 2>>(p, stream);
    case 3: return launch_traits<TraitsFor<T, 3>>(p, stream);
  }
  throw Error(detail::cat("blockfuse::gated_up: tile config ", config, " does not exist"));
}

}  // namespace blockfuse::sm80
