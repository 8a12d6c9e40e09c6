// Internal: the tile configurations the sm90a (Hopper, wgmma + TMA) gated-up kernel is compiled
// for, and the pure heuristic that picks one. Each row is one CUTLASS kernel instantiation per
// dtype, and an sm90a CUTLASS kernel costs about a minute of nvcc time, so the table stays short
// (CI builds every row). The kernel lives in gated_up_sm90.cuh; launch_sm90.cuh maps a row index
// to its template.
//
// Why these three rows (to be re-measured on the H100; see heuristic_sm90.cpp):
//   0  cooperative 128x256, cluster 2x1: the CUTLASS shape that reaches the highest bf16 rate on
//      H100 for large problems (two consumer warpgroups share every 256-wide weight tile, the
//      cluster multicasts that weight tile to the two M-neighbours, halving its L2->SM traffic).
//      Its output tile is 128 x 128 gated values.
//   1  ping-pong 128x128, cluster 1x1: one warpgroup per tile, the two warpgroups alternate, so
//      the gating epilogue of one tile hides under the other's mainloop. Twice the tiles of row 0
//      (better SM fill for 128/512-token chunks) and no cluster padding when there is one M tile.
//   2  cooperative 128x128, cluster 1x1: row 1's tile with both warpgroups on it; the comparison
//      point that tells whether ping-pong's epilogue overlap pays for its extra shared-memory reads.
#pragma once

#include "blockfuse/gated_up.h"

namespace blockfuse {

struct Sm90TileConfigRow {
  int bm, bn, bk;            // CTA tile of the interleaved GEMM (bn/2 gated outputs per row)
  int cluster_m, cluster_n;  // thread-block cluster (TMA multicast of B along m, of A along n)
  bool pingpong;             // KernelTmaWarpSpecializedPingpong instead of ...Cooperative
  float rel_rate;            // heuristic's prior: sustained rate of a full wave relative to row 0
};

inline constexpr Sm90TileConfigRow kSm90TileConfigs[] = {
    // bm   bn  bk  cm cn  pingpong  rel_rate
    {128, 256, 64, 2, 1, false, 1.00f},  // 0: large M
    {128, 128, 64, 1, 1, true, 0.95f},   // 1: small/mid M, epilogue overlapped
    {128, 128, 64, 1, 1, false, 0.90f},  // 2: small/mid M, cooperative
};
inline constexpr int kNumSm90TileConfigs = sizeof(kSm90TileConfigs) / sizeof(kSm90TileConfigs[0]);

// Work tiles the persistent scheduler creates for row `c` (CUTLASS rounds each tile count up to a
// multiple of the cluster shape; the padding tiles do no useful work).
inline constexpr long long sm90_num_tiles(long long m, long long u, const Sm90TileConfigRow& c) {
  const long long tm = (m + c.bm - 1) / c.bm, tn = (2 * u + c.bn - 1) / c.bn;
  const long long tmr = (tm + c.cluster_m - 1) / c.cluster_m * c.cluster_m;
  const long long tnr = (tn + c.cluster_n - 1) / c.cluster_n * c.cluster_n;
  return tmr * tnr;
}

// The sm90 heuristic (heuristic_sm90.cpp): a pure function of the problem and the device,
// unit-tested on the CPU (tests/cpu/test_heuristic_sm90.cpp). Returns an index into
// kSm90TileConfigs. Compiled into every build (it is plain C++), so the tests run without the
// sm90a kernels.
int choose_gated_up_sm90_tile_config(const GatedUpProblem& p, const DeviceSpec& dev);

}  // namespace blockfuse
