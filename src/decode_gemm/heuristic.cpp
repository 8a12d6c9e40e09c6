// The decode GEMM's split-K heuristic: a pure function of (M, N, K, SM count), tested on the CPU
// (test_decode_gemm_heuristic.cpp).
//
// Cost model. Time is counted in units where one SM, sharing DRAM bandwidth equally with all the
// others, streams one byte per unit ("fair share" = copy bandwidth / SMs). For a candidate
// (split, warps per block):
//   * blocks = ceil(N / (16·warps)) · split, each streaming bb = W bytes / blocks on average;
//   * T_dram = W bytes / SMs: no schedule beats the copy rate;
//   * T_sm: the busiest SM runs ceil(blocks / SMs) blocks, at most 16 / warps at a time (the
//     __launch_bounds__ residency of the kernel, 16 warps per SM), in rounds; a round of r resident
//     warps owning columns streams at min(kBurst, r / kWarpsForFullRate) times the fair share — with fewer than 12
//     warps an SM has too few 16-byte loads in flight to hide DRAM latency, and an SM can pull only
//     somewhat more than its share (kBurst) while others idle at the tail;
//   * T_reduce: the split-K partials (split · M_pad · N fp32, written once and read once by the last
//     block of each N tile), charged at the fair share like W bytes (an overestimate: they mostly
//     stay in L2).
// T = max(T_dram, T_sm) + T_reduce; the smallest T wins, and among candidates within 1 % of it the
// smallest split (fewest partials, least reduction latency), then 4 warps (finer N tiles).
// split is capped so that every warp streams >= 1024 k (>= 32 KB of W: enough to amortise its
// start-up latency) and by kDecodeGemmMaxSplitK.
//
// Example, H100 (132 SMs), N = 2304, K = 16384: 4-warp blocks give 36 N tiles; split 11 makes 396
// blocks, exactly 3 per SM (12 warps, full rate), T = T_dram + 2 % reduction — chosen. N = 28672,
// K = 4096: 448 blocks of 4 warps already put 3–4 blocks (12–16 warps) on every SM: split 1.
// The constants are first guesses from the H100's numbers (~3 TB/s, ~1 µs loaded DRAM latency:
// 23 GB/s per SM needs ~23 KB in flight per SM, 12 warps x 4 KB gives twice that); the bench's
// --split-k/--warps sweep is how to retune them.
#include <algorithm>
#include <vector>

#include "blockfuse/decode_gemm.h"
#include "common/check.h"
#include "decode_gemm/launch.h"
#include "decode_gemm/params.h"

namespace blockfuse {

namespace {

constexpr double kBurst = 1.25;            // the most an SM streams, in fair shares
constexpr double kWarpsForFullRate = 12;   // resident warps an SM needs to stream its fair share
constexpr int kResidentWarpsPerSm = 16;    // the kernel's __launch_bounds__ guarantee
constexpr int64_t kMinSliceK = 1024;       // k per warp at least (32 KB of W per warp)
constexpr double kTieTolerance = 1.01;

double modeled_time(int64_t m, int64_t n, int64_t k, int sms, int split, int warps) {
  const double w_bytes = 2.0 * double(n) * double(k);
  const int64_t blocks = decode::n_blocks(n, warps) * split;
  const double bb = w_bytes / double(blocks);
  const double t_dram = w_bytes / sms;
  const int64_t per_sm = decode::ceil_div(blocks, sms);
  const int64_t resident = kResidentWarpsPerSm / warps;
  // Only warps that own columns stream (N < 16·warps leaves the others idle).
  const int64_t active = std::min<int64_t>(warps, decode::ceil_div(n, decode::kWarpN));
  auto rate = [&](int64_t r) { return std::min(kBurst, double(r * active) / kWarpsForFullRate); };
  const int64_t full_rounds = per_sm / resident, last = per_sm % resident;
  double t_sm = double(full_rounds) * double(resident) * bb / rate(resident);
  if (last > 0) t_sm += double(last) * bb / rate(last);
  const double t_reduce =
      split == 1 ? 0.0 : 2.0 * double(split) * decode::kTileM * decode::m_tiles(m) * double(n) * 4.0 / sms;
  return std::max(t_dram, t_sm) + t_reduce;
}

// m in [lo, kDecodeGemmMaxM], n >= lo, k >= 0.
void check_mnk(const char* fn, int64_t m, int64_t n, int64_t k, int64_t lo) {
  using detail::cat;
  if (m < lo || m > kDecodeGemmMaxM) detail::throw_arg(fn, "m", cat("is ", m), cat(lo, " <= m <= ", kDecodeGemmMaxM));
  if (n < lo) detail::throw_arg(fn, "n", cat("is ", n), cat("n >= ", lo));
  if (k < 0) detail::throw_arg(fn, "k", cat("is ", k), "k >= 0");
}

}  // namespace

namespace decode {
void check_config(const char* fn, int64_t k, DecodeGemmConfig c) {
  using detail::cat;
  if (c.warps_per_block != 4 && c.warps_per_block != 8)
    detail::throw_arg(fn, "config", cat("has warps_per_block = ", c.warps_per_block), "4 or 8");
  if (!split_is_valid(k, c.split_k))
    detail::throw_arg(fn, "config", cat("has split_k = ", c.split_k, " for K = ", k),
                      cat("1, or 2..", kDecodeGemmMaxSplitK, " with every K slice (ceil(K / split_k) rounded up to 32) non-empty"));
}
}  // namespace decode

namespace decode {
DecodeGemmConfig choose_config(int64_t m, int64_t n, int64_t k, int sm_count, int split_cap) {
  if (n_blocks(n, 4) > kMaxCounters) split_cap = 1;  // beyond the workspace's counters (params.h)
  const int max_split = static_cast<int>(
      std::clamp<int64_t>(k / kMinSliceK, 1, std::clamp<int64_t>(split_cap, 1, kDecodeGemmMaxSplitK)));
  struct Candidate {
    DecodeGemmConfig c;
    double t;
  };
  std::vector<Candidate> cands;  // in preference order: split ascending, then 4 warps before 8
  for (int split = 1; split <= max_split; ++split) {
    if (!decode::split_is_valid(k, split)) continue;
    for (int warps : {4, 8}) cands.push_back({{split, warps}, modeled_time(m, n, k, sm_count, split, warps)});
  }
  double best = cands.front().t;
  for (const auto& c : cands) best = std::min(best, c.t);
  for (const auto& c : cands)
    if (c.t <= best * kTieTolerance) return c.c;
  return cands.front().c;  // unreachable: the minimum itself is within the tolerance
}
}  // namespace decode

DecodeGemmConfig decode_gemm_heuristic(int64_t m, int64_t n, int64_t k, int sm_count) {
  constexpr const char* kFn = "decode_gemm_heuristic";
  check_mnk(kFn, m, n, k, 1);
  if (sm_count < 1) detail::throw_arg(kFn, "sm_count", detail::cat("is ", sm_count), "sm_count >= 1");
  return decode::choose_config(m, n, k, sm_count, kDecodeGemmMaxSplitK);
}

size_t decode_gemm_workspace_size(int64_t m, int64_t n, int64_t k, DecodeGemmConfig config) {
  constexpr const char* kFn = "decode_gemm_workspace_size";
  check_mnk(kFn, m, n, k, 0);
  decode::check_config(kFn, k, config);
  if (m == 0 || n == 0) return 0;
  return decode::workspace_bytes(m, n, config);
}

}  // namespace blockfuse
