// decode_gemm's pure host parts, without a GPU: the split-K heuristic (src/decode_gemm/heuristic.cpp)
// on named cases and invariants over a sweep of shapes and SM counts, the workspace sizing
// (params.h) and the fp64 CPU reference (reference.cpp) on hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "blockfuse/decode_gemm.h"
#include "decode_gemm/params.h"
#include "decode_gemm/reference.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

constexpr int kH100Sms = 132, kA100Sms = 108;

// (N, K) of decode projections: Llama-3.1 405B (qkv 2304 per GPU at TP8, ...), 70B, 8B.
const std::pair<int64_t, int64_t> kShapes[] = {{2304, 16384}, {13312, 16384}, {16384, 6656}, {28672, 4096},
                                               {4096, 14336}, {1024, 8192},   {128256, 4096}, {8, 4096},
                                               {1, 8},        {1000, 4104},   {24, 24},       {6144, 4096}};

TEST(DecodeGemmHeuristic, NamedCasesOnH100) {
  // N = 2304 alone gives 36 blocks of 4 warps for 132 SMs: split so that 396 blocks put exactly
  // 3 blocks (12 warps) on every SM.
  const DecodeGemmConfig a = decode_gemm_heuristic(1, 2304, 16384, kH100Sms);
  EXPECT_EQ(a.split_k, 11);
  EXPECT_EQ(a.warps_per_block, 4);
  // N = 28672 alone puts 3-4 blocks on every SM: no split.
  EXPECT_EQ(decode_gemm_heuristic(1, 28672, 4096, kH100Sms).split_k, 1);
  EXPECT_EQ(decode_gemm_heuristic(16, 128256, 4096, kH100Sms).split_k, 1);
  // N = 16384: 256 blocks of 4 warps are < 2 per SM (8 warps): split 2.
  EXPECT_EQ(decode_gemm_heuristic(8, 16384, 6656, kH100Sms).split_k, 2);
  // One block of columns: split as far as the 1024-k minimum slice allows.
  EXPECT_EQ(decode_gemm_heuristic(1, 8, 4096, kH100Sms).split_k, 4);
  EXPECT_EQ(decode_gemm_heuristic(1, 8, 4096, kH100Sms).warps_per_block, 4);
  // K too short to split.
  EXPECT_EQ(decode_gemm_heuristic(1, 8, 1024, kH100Sms).split_k, 1);
  EXPECT_EQ(decode_gemm_heuristic(32, 1, 8, kH100Sms).split_k, 1);
}

TEST(DecodeGemmHeuristic, Invariants) {
  for (int sms : {1, 16, 46, kA100Sms, kH100Sms, 144, 170})
    for (const auto& [n, k] : kShapes)
      for (int64_t m = 1; m <= kDecodeGemmMaxM; ++m) {
        SCOPED_TRACE(::testing::Message() << "sms " << sms << " M " << m << " N " << n << " K " << k);
        const DecodeGemmConfig c = decode_gemm_heuristic(m, n, k, sms);
        EXPECT_TRUE(c.warps_per_block == 4 || c.warps_per_block == 8);
        ASSERT_TRUE(decode::split_is_valid(k, c.split_k)) << "split " << c.split_k;
        EXPECT_LE(c.split_k, kDecodeGemmMaxSplitK);
        // Every warp streams >= 1024 k (32 KB of W) unless K is shorter.
        if (c.split_k > 1) EXPECT_GE(decode::slice_k(k, c.split_k), 1024);
        // Never split where N alone gives every SM two full rounds of resident warps.
        if (decode::n_blocks(n, 4) * 4 >= int64_t(sms) * 32) EXPECT_EQ(c.split_k, 1);
        // Enough blocks to cover the SMs whenever K allows.
        const int64_t blocks = decode::n_blocks(n, c.warps_per_block) * c.split_k;
        if (k / 1024 >= sms && n >= 16 * 4) EXPECT_GE(blocks, sms);
        // Pure: the same answer twice.
        const DecodeGemmConfig c2 = decode_gemm_heuristic(m, n, k, sms);
        EXPECT_EQ(c.split_k, c2.split_k);
        EXPECT_EQ(c.warps_per_block, c2.warps_per_block);
      }
}

TEST(DecodeGemmHeuristic, SplitOneWhenNFillsTheMachine) {
  for (int sms : {kA100Sms, kH100Sms})
    for (int64_t k : {4096, 8192, 16384})
      for (int64_t m : {1, 8, 16, 32}) {
        // 8 blocks of 4 warps per SM (32 warps): twice the resident 16.
        const int64_t n = int64_t(sms) * 8 * 64;
        EXPECT_EQ(decode_gemm_heuristic(m, n, k, sms).split_k, 1) << "sms " << sms << " N " << n << " K " << k;
      }
}

TEST(DecodeGemmHeuristic, ManySmsSplitMore) {
  // The same shape on a larger GPU never gets fewer blocks.
  for (const auto& [n, k] : kShapes) {
    const auto blocks = [&](int sms) {
      const DecodeGemmConfig c = decode_gemm_heuristic(4, n, k, sms);
      return decode::n_blocks(n, c.warps_per_block) * c.split_k;
    };
    EXPECT_LE(blocks(16), blocks(kH100Sms)) << "N " << n << " K " << k;
  }
}

TEST(DecodeGemmHeuristic, Errors) {
  testing::expect_arg_error([] { decode_gemm_heuristic(0, 8, 8, 132); }, "m", "0");
  testing::expect_arg_error([] { decode_gemm_heuristic(33, 8, 8, 132); }, "m", "33");
  testing::expect_arg_error([] { decode_gemm_heuristic(1, 0, 8, 132); }, "n", "0");
  testing::expect_arg_error([] { decode_gemm_heuristic(1, 8, -8, 132); }, "k", "-8");
  testing::expect_arg_error([] { decode_gemm_heuristic(1, 8, 8, 0); }, "sm_count", "0");
}

TEST(DecodeGemmSplit, SlicesCoverKExactlyOnce) {
  for (int64_t k = 0; k <= 4200; k += 8)
    for (int split = 1; split <= kDecodeGemmMaxSplitK; ++split) {
      if (!decode::split_is_valid(k, split)) continue;
      const int64_t s = decode::slice_k(std::max<int64_t>(k, 1), split);
      ASSERT_EQ(s % decode::kChunkK, 0);
      // The kernel's slices [i·s, min(K, (i+1)·s)): non-empty, contiguous, ending at K.
      for (int i = 0; i < split; ++i) ASSERT_LT(int64_t(i) * s, std::max<int64_t>(k, 1)) << "K " << k << " split " << split;
      ASSERT_GE(int64_t(split) * s, k);
    }
  EXPECT_TRUE(decode::split_is_valid(0, 1));
  EXPECT_FALSE(decode::split_is_valid(0, 2));
  EXPECT_FALSE(decode::split_is_valid(64, 3));   // slices of 32: the third would be empty
  EXPECT_TRUE(decode::split_is_valid(96, 3));
  EXPECT_FALSE(decode::split_is_valid(16384, kDecodeGemmMaxSplitK + 1));
  EXPECT_FALSE(decode::split_is_valid(16384, 0));
}

TEST(DecodeGemmWorkspace, Sizes) {
  // split 1 needs nothing.
  EXPECT_EQ(decode_gemm_workspace_size(32, 28672, 4096, DecodeGemmConfig{1, 4}), 0u);
  // The fixed counter region (16384 ints) + 11 splits x 36 blocks x 4 warps x 1 m-tile x 32 lanes x
  // 4 floats.
  EXPECT_EQ(decode_gemm_workspace_size(1, 2304, 16384, DecodeGemmConfig{11, 4}), 65536u + 11u * 36 * 4 * 1 * 32 * 16);
  // M = 17 takes three m-tiles; 8-warp blocks: ceil(1000 / 128) = 8 blocks.
  EXPECT_EQ(decode_gemm_workspace_size(17, 1000, 4104, DecodeGemmConfig{7, 8}), 65536u + 7u * 8 * 8 * 3 * 32 * 16);
  // Grows with M and split.
  EXPECT_LT(decode_gemm_workspace_size(8, 2304, 16384, DecodeGemmConfig{4, 4}),
            decode_gemm_workspace_size(9, 2304, 16384, DecodeGemmConfig{4, 4}));
  EXPECT_LT(decode_gemm_workspace_size(8, 2304, 16384, DecodeGemmConfig{4, 4}),
            decode_gemm_workspace_size(8, 2304, 16384, DecodeGemmConfig{5, 4}));
  EXPECT_EQ(decode_gemm_workspace_size(0, 2304, 16384, DecodeGemmConfig{4, 4}), 0u);
  // The partials start at the same place for every N (the counter region is fixed): one workspace
  // serves every shape it is large enough for.
  EXPECT_EQ(decode_gemm_workspace_size(1, 64 * 16384, 64, DecodeGemmConfig{2, 4}) -
                decode_gemm_workspace_size(1, 64 * 16384, 64, DecodeGemmConfig{1, 4}),
            decode::kCounterBytes + 2u * 16384 * 4 * 32 * 16);
}

TEST(DecodeGemmWorkspace, Errors) {
  testing::expect_arg_error([] { decode_gemm_workspace_size(33, 8, 8, DecodeGemmConfig{1, 4}); }, "m", "33");
  testing::expect_arg_error([] { decode_gemm_workspace_size(1, -1, 8, DecodeGemmConfig{1, 4}); }, "n", "-1");
  testing::expect_arg_error([] { decode_gemm_workspace_size(1, 8, -8, DecodeGemmConfig{1, 4}); }, "k", "-8");
  testing::expect_arg_error([] { decode_gemm_workspace_size(1, 8, 64, DecodeGemmConfig{1, 6}); }, "config", "6");
  testing::expect_arg_error([] { decode_gemm_workspace_size(1, 8, 64, DecodeGemmConfig{3, 4}); }, "config", "3");
  testing::expect_arg_error([] { decode_gemm_workspace_size(1, 8, 64, DecodeGemmConfig{0, 4}); }, "config", "0");
  testing::expect_arg_error([] { decode_gemm_workspace_size(1, 8, 1 << 20, DecodeGemmConfig{65, 4}); }, "config", "65");
}

TEST(DecodeGemmReference, HandComputed) {
  // x = [[1, 2], [-1, 0.5]] (K = 2), w = [[3, 4], [0.25, -2], [1, 1]] -> y = x·wᵀ.
  testing::HostMatrix x(DType::kBF16, 2, 2), w(DType::kBF16, 3, 2);
  const float xv[2][2] = {{1, 2}, {-1, 0.5f}}, wv[3][2] = {{3, 4}, {0.25f, -2}, {1, 1}};
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c) x.set(r, c, xv[r][c]);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 2; ++c) w.set(r, c, wv[r][c]);
  std::vector<double> y(2 * 5, -7), a(2 * 5, -7);
  decode::reference(x.view(), w.view(), y.data(), 5, a.data());
  const double want[2][3] = {{11, -3.75, 3}, {-1, -1.25, -0.5}};
  const double want_abs[2][3] = {{11, 4.25, 3}, {5, 1.25, 1.5}};
  for (int m = 0; m < 2; ++m) {
    for (int n = 0; n < 3; ++n) {
      EXPECT_EQ(y[size_t(m * 5 + n)], want[m][n]) << m << "," << n;
      EXPECT_EQ(a[size_t(m * 5 + n)], want_abs[m][n]) << m << "," << n;
    }
    EXPECT_EQ(y[size_t(m * 5 + 3)], -7) << "wrote past N";
  }
}

TEST(DecodeGemmReference, StridesFp16AndSpecials) {
  // ld > cols on both inputs (the padding's sentinel bits would be huge numbers if read).
  testing::HostMatrix x(DType::kFP16, 2, 8, 16), w(DType::kFP16, 2, 8, 24);
  for (int c = 0; c < 8; ++c) {
    x.set(0, c, float(c + 1));  // 1..8
    x.set(1, c, 1.0f);
    w.set(0, c, 0.5f);
    w.set(1, c, c % 2 ? -1.0f : 1.0f);
  }
  x.set(1, 3, std::numeric_limits<float>::infinity());
  std::vector<double> y(4);
  decode::reference(x.view(), w.view(), y.data(), 2);
  EXPECT_EQ(y[0], 18.0);   // 0.5 · 36
  EXPECT_EQ(y[1], -4.0);   // (1 - 2) + (3 - 4) + (5 - 6) + (7 - 8)
  EXPECT_EQ(y[2], std::numeric_limits<double>::infinity());
  EXPECT_EQ(y[3], -std::numeric_limits<double>::infinity());  // Inf · (-1) at k = 3
  x.set(0, 5, std::numeric_limits<float>::quiet_NaN());
  decode::reference(x.view(), w.view(), y.data(), 2);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
}

}  // namespace
}  // namespace blockfuse
