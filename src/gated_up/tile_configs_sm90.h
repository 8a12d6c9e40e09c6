// Internal: the tile configurations the sm90a (Hopper, wgmma + TMA) gated-up kernel is compiled
// for, and the pure heuristic that picks one. Each row is one CUTLASS kernel instantiation per
// dtype, and an sm90a CUTLASS kernel costs about a minute of nvcc time, so the table stays short
// (CI builds every row). The kernel lives in gated_up_sm90.cuh; launch_sm90.cuh maps a row index
// to its template.
//
// Why these rows (measured on the H100, bench gated-up --kernel sm90 --tile-config N;
// TFLOP/s beside cuBLAS in the same run: docs/gated_up.md#tuning, "Tile configs measured"):
//   0  cooperative 128x256, cluster 2x1: two consumer warpgroups share every 256-wide weight tile
//      and the cluster multicasts that tile to the two M-neighbours, so each SM pulls 32 KB from L2
//      per 2·128·256·64 flops. The best or within noise of the best at 512+ tokens on every
//      model (680-780 TFLOP/s). Its output tile is 128 x 128 gated values.
//   1  ping-pong 128x128, cluster 2x1: one warpgroup per tile, the two alternate so one's gating
//      epilogue hides under the other's mainloop; the weight tile is multicast as in row 0. Twice
//      the tiles of row 0 for less wave quantisation: wins at 512 tokens when K is small (Llama-3
//      8B: 738 vs 677 TFLOP/s), loses where K is large (its L2 traffic per flop is 1.5x row 0's).
//      Rasterised along N (its swizzle groups run down M, the cluster's own direction): with
//      CUTLASS's choice for N > M (along M) it read 247-265 GB of DRAM at Llama-3.1 405B x 8192 tokens
//      (ncu; cuBLAS 69-88) and along N 113-204; over the H200 grid (two passes each, one call)
//      fused / cuBLAS median 1.016x against 1.008x, lowest 0.950x against 0.731x, and none of the
//      slow episodes at K = 16384 (docs/gated_up.md#tuning, "The raster of row 1").
//   2  ping-pong 128x128, cluster 1x2: for one M tile (<= 128 tokens, decode-sized M), where a 2x1
//      cluster pads the single M tile to two; multicasts the activation tile along N instead.
//   3  row 0 under CUTLASS's stream-K scheduler (against the last wave's quantisation, e.g. 8B at
//      4096 tokens = 27.2 waves of row 0 -> 28). Partial tiles reduce through a workspace the
//      caller passes (gated_up's workspace overload; gated_up_workspace_size with the options),
//      before the gating epilogue, which is unchanged. Opt-in (options.tile_config = 3): measured
//      beside row 0 on the H100: +3 % at 8B and 70B x 4096 tokens, -6 % at 8B x 16384, elsewhere
//      within the +-3 % run-to-run spread (docs/gated_up.md#tuning). A heuristic choice
//      without a workspace cannot use it, so neither the cost model nor kSm90Measured returns it;
//      with one (choose_gated_up_sm90_tile_config(p, dev, true): gated_up with a large enough
//      workspace, gated_up_workspace_size with the options) it is taken at kSm90StreamKPoints, the
//      grid points where it beat rows 0-2 by >= 2 % median (heuristic_sm90.cpp).
//   4  cooperative 256x128, cluster 1x2: the shape cuBLAS's kernel takes at Llama-3 8B x 1024 tokens
//      (nvjet 256x128, 1x2): the same operand bytes per flop as row 0 with the activation tile
//      multicast along N instead of the weight tile along M, so a different L2 footprint (ncu: row 0
//      reads 1.5x cuBLAS's DRAM bytes at the large points; docs/gated_up.md#tuning, "Where the
//      targets are missed"). Unmeasured: opt-in (options.tile_config = 4) until a sweep places it,
//      so neither the cost model nor kSm90Measured returns it.
//   5  cooperative 192x192 with the two consumer warpgroups side by side along N (each 192 x 96:
//      three m64n96 wgmma atoms down M), cluster 1x2: the tile cuBLAS takes at Llama-3 70B x 16384
//      tokens (nvjet 192x192 1x2 "coopB"), which reads 11 % fewer operand bytes per flop than row 0
//      and 1.5x fewer DRAM bytes there (ncu, docs/gated_up.md#tuning). 96 gated columns a tile go out
//      as three 64-byte panels; 3 stages fit beside the 36 KB staging tile (cuBLAS keeps 4).
//      Measured beside row 0 (H100, two runs, docs/gated_up.md#tuning): ahead only at 8B x 4096
//      (704-708 against 672-702 TFLOP/s, 0.90x cuBLAS) and even at 405B x 4096-16384; 3-14 % behind
//      elsewhere. Opt-in: the heuristic never takes it. (The same tile with a 2x1 cluster lost
//      everywhere, up to 16 %, and was dropped.)
//   6  ping-pong 128x192, cluster 2x1, rasterised along N as row 1: the tile quack's fused GEMM
//      (gemm_act, quack-kernels 0.6.5) runs at every shape on Hopper, where it leads this table's rows
//      by 1-4 % (docs/gated_up.md#figures, "Beside quack's gemm_act"): 1.2x row 1's output per operand
//      byte brought on chip, at 192 fp32 accumulators a consumer thread. Its 96
//      gated columns go out as three 64-byte panels (row 5's). Opt-in: the H200's measured table places
//      it where it led rows 0-2 (by 1-2 % at 405B x 512, Qwen2 7B x 512, 70B x 1024; results/gated_up.json
//      tile_sweep_h200_s27), the rate model never takes it.
// No cluster-less rows: without the multicast the tiles are L2-bound, e.g. 128x128 at 250-330
// TFLOP/s for 405B (docs/gated_up.md#tuning lists what was measured and dropped).
#pragma once

#include "common/device.h"
#include "gated_up/params.h"

namespace blockfuse {

struct Sm90TileConfigRow {
  int bm, bn, bk;            // CTA tile of the interleaved GEMM (bn/2 gated outputs per row)
  int cluster_m, cluster_n;  // thread-block cluster (TMA multicast of B along m, of A along n)
  bool pingpong;             // KernelTmaWarpSpecializedPingpong instead of ...Cooperative
  float rel_rate;            // heuristic: sustained rate of a full wave relative to row 0, K <= 4096
  float rel_rate_large_k;    //            the same for K > 4096 (more L2 traffic per tile)
  bool stream_k = false;     // CUTLASS's StreamKScheduler (needs a workspace) instead of the persistent one
  bool opt_in = false;       // the rate model skips it: run where options.tile_config or a table asks
  bool split_n = false;      // cooperative only: the two consumer warpgroups split the tile along N, not M
  bool raster_along_n = false;  // the scheduler walks along N, swizzled along M (else CUTLASS's heuristic)
};

inline constexpr Sm90TileConfigRow kSm90TileConfigs[] = {
    // bm   bn  bk  cm cn  pingpong  rel_rate  large K
    {128, 256, 64, 2, 1, false, 1.00f, 1.00f},  // 0: 512+ tokens
    {128, 128, 64, 2, 1, true, 0.95f, 0.80f, false, false, false, true},  // 1: 512-token chunks at small K
    {128, 128, 64, 1, 2, true, 0.90f, 0.75f},   // 2: one M tile (<= 128 tokens)
    {128, 256, 64, 2, 1, false, 1.00f, 1.00f, true},  // 3: row 0, stream-K (opt-in: needs a workspace)
    {256, 128, 64, 1, 2, false, 1.00f, 1.00f, false, true},  // 4: cuBLAS's 256x128 1x2 (opt-in: unmeasured)
    {192, 192, 64, 1, 2, false, 1.00f, 1.00f, false, true, true},  // 5: cuBLAS's 192x192 1x2, N-split (opt-in)
    {128, 192, 64, 2, 1, true, 0.97f, 0.85f, false, true, false, true},  // 6: quack's 128x192 ping-pong (opt-in, H200)
};
inline constexpr int kNumSm90TileConfigs = sizeof(kSm90TileConfigs) / sizeof(kSm90TileConfigs[0]);

// The order the launcher passes to the scheduler for row c (GatedUpParams::sm90_raster): the caller's
// (GatedUpOptions::sm90_raster: 1 along M, 2 along N) where it forces one, else the row's (2 where
// raster_along_n) or 0, CUTLASS's heuristic (along the shorter grid side: along M at LLM shapes).
inline constexpr bool sm90_raster_valid(Sm90Raster r) {
  return r == Sm90Raster::kAuto || r == Sm90Raster::kAlongM || r == Sm90Raster::kAlongN;
}
inline constexpr int sm90_raster_for(const Sm90TileConfigRow& c, Sm90Raster requested) {
  return requested != Sm90Raster::kAuto ? static_cast<int>(requested) : c.raster_along_n ? 2 : 0;
}

// ---- CUTLASS's persistent tile scheduler, in plain integers -------------------------------------
// The sm90 PersistentTileScheduler rounds the CTA grid up twice: each mode to a multiple of the
// cluster, then each mode to a multiple of (swizzle x cluster), where the swizzle it uses is
// 2^get_log_swizzle_size(cta_m, cta_n, max_swizzle) (tile_scheduler_params.h). The padding tiles
// are *not* skipped: they run the whole K loop on zero-filled loads and store nothing — with
// max_swizzle 8, row 0 at 512 and 1024 tokens ran at 355-370 TFLOP/s against 670-750 at 2048
// (docs/gated_up.md#tuning, "The padding bug"). So the launcher picks the swizzle (below) that pads at most 1 %.

inline constexpr long long sm90_ceil_div(long long a, long long b) { return (a + b - 1) / b; }
inline constexpr long long sm90_round_up(long long a, long long b) { return sm90_ceil_div(a, b) * b; }

// CUTLASS's get_log_swizzle_size, as 2^result.
inline constexpr int sm90_effective_swizzle(long long ctas_m, long long ctas_n, int max_swizzle) {
  const long long d = ctas_m < ctas_n ? ctas_m : ctas_n;
  if (max_swizzle >= 8 && d >= 6) return 8;
  if (max_swizzle >= 4 && d >= 3) return 4;
  if (max_swizzle >= 2 && d >= 2) return 2;
  return 1;
}

// Work tiles the scheduler creates for row `c` and max_swizzle_size `max_swizzle`, padding
// included (padding tiles do no useful work but cost a full tile).
inline constexpr long long sm90_num_tiles(long long m, long long u, const Sm90TileConfigRow& c, int max_swizzle) {
  const long long ctas_m = sm90_round_up(sm90_ceil_div(m, c.bm), c.cluster_m);
  const long long ctas_n = sm90_round_up(sm90_ceil_div(2 * u, c.bn), c.cluster_n);
  const long long s = sm90_effective_swizzle(ctas_m, ctas_n, max_swizzle);
  return sm90_round_up(ctas_m, s * c.cluster_m) * sm90_round_up(ctas_n, s * c.cluster_n);
}

// A larger swizzle is taken with padding tiles up to this fraction of the fewest tiles and of the
// fewest waves. Unswizzled, a grid with more N tiles than M tiles is rastered along M, so a wave of
// CTAs covers one or two weight columns and every M tile: at large M each wave reads all of x again,
// where swizzle 8 covers 8 columns x (wave / 8) M tiles, about a quarter of the operand bytes a
// wave. Qwen2 72B (row 0: 231 N tiles, odd) is the grid's case: no swizzle without a padding column,
// and its lowest ratios to cuBLAS from 16384 tokens. 1 %: at 4096 tokens its padding column is 57
// waves against 56 and swizzle 8 ran 1.8 % slower; at 16384 and 65536 (0.4 %) 4-6 % faster
// (results/gated_up.json `swizzle_padding_h200`, docs/gated_up.md#tuning).
inline constexpr double kSm90SwizzlePaddingTolerance = 0.01;

inline constexpr long long sm90_waves(long long tiles, int sm_count) {
  return sm90_ceil_div(tiles, sm_count > 0 ? sm_count : 1);
}

// The max_swizzle_size the launcher passes: the largest of 8, 4, 2, 1 whose work tiles and waves on
// `sm_count` SMs are both within kSm90SwizzlePaddingTolerance of the fewest. A larger swizzle keeps
// more of the CTAs resident at once on shared weight/activation panels (L2 reuse); at a few waves
// any padding is a whole wave or a multiple of the tiles (the 2x of "The padding bug"), and is
// refused.
inline constexpr int sm90_choose_swizzle(long long m, long long u, const Sm90TileConfigRow& c, int sm_count) {
  long long fewest_tiles = sm90_num_tiles(m, u, c, 1), fewest_waves = sm90_waves(fewest_tiles, sm_count);
  for (int s = 2; s <= 8; s *= 2) {
    const long long t = sm90_num_tiles(m, u, c, s);
    if (t < fewest_tiles) fewest_tiles = t;
    if (sm90_waves(t, sm_count) < fewest_waves) fewest_waves = sm90_waves(t, sm_count);
  }
  for (int s = 8; s > 1; s /= 2) {
    const long long t = sm90_num_tiles(m, u, c, s);
    if (double(t) <= double(fewest_tiles) * (1 + kSm90SwizzlePaddingTolerance) &&
        double(sm90_waves(t, sm_count)) <= double(fewest_waves) * (1 + kSm90SwizzlePaddingTolerance))
      return s;
  }
  return 1;
}

// Work tiles with the swizzle the launcher picks.
inline constexpr long long sm90_num_tiles_chosen(long long m, long long u, const Sm90TileConfigRow& c, int sm_count) {
  return sm90_num_tiles(m, u, c, sm90_choose_swizzle(m, u, c, sm_count));
}

// The sm90 heuristic (heuristic_sm90.cpp): a pure function of the problem and the device,
// unit-tested on the CPU (test_heuristic_sm90.cpp). Returns an index into
// kSm90TileConfigs: the measured table's row where it has one (sm90_measured_tile_config), else the
// cost model's (sm90_cheapest_tile_config). Never a stream-K row unless `with_workspace` (the caller
// passes a workspace, sized by gated_up_workspace_size with the options): then at a stream-K point
// (kSm90StreamKPoints, sm90_stream_k_tile_config) its stream-K row, elsewhere the choice without a
// workspace. Compiled into every build (it is plain C++), so
// the tests run without the sm90a kernels.
int choose_gated_up_sm90_tile_config(const GatedUpProblem& p, const detail::DeviceSpec& dev,
                                     bool with_workspace = false);

// A point of a measured tile table: at (K, U, M) row `row` was the fastest of the rows forced in
// turn, on a device of `sms` SMs (scripts/tile-table --emit-cpp generates the tables,
// tile_table_sm90.inc and the H200's tile_table_sm90_h200.inc, from a sweep of `bench gated-up --kernel sm90 --tile-config N`).
struct Sm90MeasuredPoint {
  long long k, u, m;
  int row;
};

// The tables choose_gated_up_sm90_tile_config consults (heuristic_sm90.cpp), for the tests:
// kSm90Measured (rows 0-2; the H200's also row 6) or, with `stream_k_points`, kSm90StreamKPoints (only
// the points where the stream-K row beat the best of the others by scripts/tile-table's margin), of
// `dev`'s class.
struct Sm90MeasuredTable {
  const Sm90MeasuredPoint* points;
  int n;
  int sms;  // the SM count of the device it was measured on
};
Sm90MeasuredTable sm90_measured_table(const detail::DeviceSpec& dev, bool stream_k_points = false);
// The H100 SXM's tables, whatever the device: what a device of the H200's class reads at a point its own
// tables do not cover (sm90_measured_covers).
Sm90MeasuredTable sm90_h100_measured_table(bool stream_k_points = false);

// Whether `t` holds p on dev: a point of p's (K, U) at or below p.m and one at or above, on a device of
// t's SM count. Inside that range the table decides (its row, or the model between two Ms whose rows
// differ); outside it a device of the H200's class reads the H100's table before the model (the same
// 132 SMs): the H200's sweep measured 512-16384 tokens, the H100's 128-65536, of the same six
// shapes (docs/gated_up.md#tuning). Pure; CPU-tested.
bool sm90_measured_covers(const Sm90MeasuredTable& t, const GatedUpProblem& p, const detail::DeviceSpec& dev);

// Which class's measured tables a device reads (the 16-bit and FP8 heuristics alike). The H100 SXM
// (HBM3, 3.35 TB/s peak) and the H200 (HBM3e, 4.8 TB/s) both have 132 SMs, but their best rows differ:
// on the H200 the 128x128 rows, whose tiles re-read more of the weight, win from 2048 tokens where the
// H100 ran them up to 19 % behind the large tile (docs/gated_up.md#tuning). A device reads the H200's
// tables (tile_table_sm90_h200.inc, tile_table_fp8_sm90_h200.inc) from kSm90H200TableMinDramGbps of
// peak DRAM bandwidth (between the two; an unknown bandwidth, 0, reads the H100's), else the H100's.
inline constexpr double kSm90H200TableMinDramGbps = 4500;
inline bool sm90_reads_h200_tables(const detail::DeviceSpec& dev) { return dev.dram_gbps >= kSm90H200TableMinDramGbps; }

// The measured row for p, or -1 (then the cost model decides). The points with p's (K, U), on a
// device with `sms` SMs: at a measured M, that point's row; between two measured Ms, their row if
// both agree (where they disagree, the crossover lies between them and the model, which counts the
// waves at p.m, decides); outside the measured range, -1. Rows outside `rows` (the kernel's tile
// table: kSm90TileConfigs, or the FP8 one) are never returned, nor stream-K rows (they need a
// caller's workspace: sm90_stream_k_tile_config); an opt-in row is, where the table places it (the
// model alone never takes one). Pure; CPU-tested on tables the tests make (test_heuristic_sm90.cpp).
int sm90_measured_tile_config(const Sm90MeasuredPoint* table, int n, int sms, const Sm90TileConfigRow* rows, int n_rows,
                              const GatedUpProblem& p, const detail::DeviceSpec& dev);

// The stream-K row of a point of `table` (kSm90StreamKPoints) at exactly p's (K, U, M), on a device
// with `sms` SMs, or -1. Exact: a stream-K row was measured ahead at one M, and the Ms around it may
// take another row (405B: ping-pong at 512 tokens beside stream-K at 256). Rows outside `rows` or
// not stream-K are never returned. Pure; CPU-tested.
int sm90_stream_k_tile_config(const Sm90MeasuredPoint* table, int n, int sms, const Sm90TileConfigRow* rows, int n_rows,
                              const GatedUpProblem& p, const detail::DeviceSpec& dev);

// The model behind it, over any table of rows (the FP8 heuristic uses it on its own table): the row
// with the least waves x (bm·bn) / rate, ties to the lower index.
int sm90_cheapest_tile_config(const Sm90TileConfigRow* table, int rows, const GatedUpProblem& p,
                              const detail::DeviceSpec& dev);

}  // namespace blockfuse
