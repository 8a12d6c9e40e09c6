// The CPU reference of attention (src/attention/reference.cpp) against a hand-computed case and a
// naive formula (full score matrix, explicit −inf mask, exp / sum over every entry) on tiny shapes
// with tails, GQA, varlen, causal, windows and the soft-cap.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "attention/reference.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;

// A [B, S, H, D] tensor of 2-byte values, stored as a HostMatrix of B·S·H rows and D columns.
struct HostTensor {
  HostMatrix m;
  int64_t b, s, h, d;
  HostTensor(DType t, int64_t b_, int64_t s_, int64_t h_, int64_t d_) : m(t, b_ * s_ * h_, d_), b(b_), s(s_), h(h_), d(d_) {}
  AttnConstTensor view() const { return make_attn_tensor(m.bits.data(), m.dtype, b, s, h, d); }
  float at(int64_t bi, int64_t si, int64_t hi, int64_t di) const { return m.at((bi * s + si) * h + hi, di); }
};

// The naive formula: S = scale·QKᵀ (soft-capped), masked entries −inf, P = exp(S − max) / Σ, O = P·V.
void naive(const HostTensor& q, const HostTensor& k, const HostTensor& v, const AttentionParams& p,
           int64_t q_off, int64_t sq, int64_t k_off, int64_t sk, int64_t bi, std::vector<double>& o, std::vector<double>& lse) {
  const double scale = p.softmax_scale > 0 ? p.softmax_scale : 1 / std::sqrt(double(q.d));
  const int64_t group = q.h / k.h;
  o.assign(size_t(sq * q.h * q.d), 0);
  lse.assign(size_t(sq * q.h), 0);
  for (int64_t h = 0; h < q.h; ++h) {
    std::vector<double> S(size_t(sq * sk));
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < sk; ++j) {
        double x = 0;
        for (int64_t d = 0; d < q.d; ++d) x += double(q.at(bi, q_off + i, h, d)) * k.at(bi, k_off + j, h / group, d);
        x *= scale;
        if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
        // The mask written as FlashAttention states it: causal/right bound j <= i + sk − sq + right.
        const bool right_ok = (p.causal ? j <= i + sk - sq : (p.window_right < 0 || j <= i + sk - sq + p.window_right));
        const bool left_ok = p.window_left < 0 || j >= i + sk - sq - p.window_left;
        S[size_t(i * sk + j)] = right_ok && left_ok ? x : -std::numeric_limits<double>::infinity();
      }
    for (int64_t i = 0; i < sq; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < sk; ++j) mx = std::max(mx, S[size_t(i * sk + j)]);
      if (std::isinf(mx)) {
        lse[size_t(h * sq + i)] = -std::numeric_limits<double>::infinity();
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < sk; ++j) sum += std::exp(S[size_t(i * sk + j)] - mx);
      for (int64_t j = 0; j < sk; ++j) {
        const double pj = std::exp(S[size_t(i * sk + j)] - mx) / sum;
        for (int64_t d = 0; d < q.d; ++d) o[size_t((i * q.h + h) * q.d + d)] += pj * v.at(bi, k_off + j, h / group, d);
      }
      lse[size_t(h * sq + i)] = mx + std::log(sum);
    }
  }
}

TEST(AttentionReference, HandComputed) {
  // One query, two keys, D = 1: logits 0 and 1 (scale 0.5, q = 1, k = 0, 2), v = 1, 5.
  HostTensor q(DType::kBF16, 1, 1, 1, 1), k(DType::kBF16, 1, 2, 1, 1), v(DType::kBF16, 1, 2, 1, 1);
  q.m.set(0, 0, 1.0f);
  k.m.set(0, 0, 0.0f);
  k.m.set(1, 0, 2.0f);
  v.m.set(0, 0, 1.0f);
  v.m.set(1, 0, 5.0f);
  AttentionParams p;
  p.softmax_scale = 0.5f;
  std::vector<float> out, lse;
  attn::attention_reference(q.view(), k.view(), v.view(), p, out, lse);
  const double e = std::exp(1.0);
  EXPECT_NEAR(out[0], (1 + 5 * e) / (1 + e), 1e-6);
  EXPECT_NEAR(lse[0], std::log(1 + e), 1e-6);
  // Causal with Sq = 1 < Sk = 2: the one query is the last row and sees both keys (bottom-right).
  p.causal = true;
  attn::attention_reference(q.view(), k.view(), v.view(), p, out, lse);
  EXPECT_NEAR(out[0], (1 + 5 * e) / (1 + e), 1e-6);
  // window_left = 0 with causal: only the diagonal key (index 1).
  p.window_left = 0;
  attn::attention_reference(q.view(), k.view(), v.view(), p, out, lse);
  EXPECT_NEAR(out[0], 5.0, 1e-6);
  EXPECT_NEAR(lse[0], 1.0, 1e-6);
}

struct Case {
  int64_t b, sq, sk, hq, hkv, d;
  bool causal;
  int64_t left, right;
  float softcap;
};

// B2_Sq6_Sk11_Hq4_Hkv2_D8_causal_left3_right0 (cap when set).
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string n = "B" + std::to_string(c.b) + "_Sq" + std::to_string(c.sq) + "_Sk" + std::to_string(c.sk) + "_Hq" +
                  std::to_string(c.hq) + "_Hkv" + std::to_string(c.hkv) + "_D" + std::to_string(c.d);
  if (c.causal) n += "_causal";
  if (c.left >= 0) n += "_left" + std::to_string(c.left);
  if (c.right >= 0) n += "_right" + std::to_string(c.right);
  if (c.softcap > 0) n += "_cap" + std::to_string(int(c.softcap));
  return n;
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(::testing::TestParamInfo<Case>(c, 0)); }

class AttentionReferenceVsNaive : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionReferenceVsNaive, Matches) {
  const Case c = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  HostTensor q(DType::kBF16, c.b, c.sq, c.hq, c.d), k(DType::kBF16, c.b, c.sk, c.hkv, c.d), v(DType::kBF16, c.b, c.sk, c.hkv, c.d);
  q.m.fill_uniform(rng, -2, 2);
  k.m.fill_uniform(rng, -2, 2);
  v.m.fill_uniform(rng, -1, 1);
  AttentionParams p;
  p.causal = c.causal;
  p.window_left = c.left;
  p.window_right = c.right;
  p.softcap = c.softcap;
  std::vector<float> out, lse;
  attn::attention_reference(q.view(), k.view(), v.view(), p, out, lse);
  int64_t empty_rows = 0;
  for (int64_t bi = 0; bi < c.b; ++bi) {
    std::vector<double> o, l;
    naive(q, k, v, p, 0, c.sq, 0, c.sk, bi, o, l);
    for (int64_t i = 0; i < c.sq; ++i)
      for (int64_t h = 0; h < c.hq; ++h) {
        const double ref_l = l[size_t(h * c.sq + i)];
        const float got_l = lse[size_t((bi * c.hq + h) * c.sq + i)];
        if (std::isinf(ref_l)) {
          ++empty_rows;
          EXPECT_TRUE(std::isinf(got_l) && got_l < 0) << "row " << i;
        } else {
          EXPECT_NEAR(got_l, ref_l, 1e-5 * (1 + std::fabs(ref_l)));
        }
        for (int64_t d = 0; d < c.d; ++d)
          ASSERT_NEAR(out[size_t(((bi * c.sq + i) * c.hq + h) * c.d + d)], o[size_t((i * c.hq + h) * c.d + d)], 1e-5)
              << "b " << bi << " row " << i << " head " << h << " d " << d;
      }
  }
  // Causal with Sq > Sk leaves the first Sq − Sk rows without keys: the case is exercised.
  if (c.causal && c.sq > c.sk) {
    EXPECT_EQ(empty_rows, c.b * c.hq * (c.sq - c.sk));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionReferenceVsNaive,
                         ::testing::Values(Case{1, 5, 5, 2, 2, 8, false, -1, -1, 0}, Case{2, 7, 3, 4, 1, 4, false, -1, -1, 0},
                                           Case{1, 6, 6, 2, 1, 8, true, -1, -1, 0}, Case{1, 3, 9, 2, 2, 8, true, -1, -1, 0},
                                           Case{1, 9, 4, 2, 2, 8, true, -1, -1, 0}, Case{1, 9, 9, 1, 1, 8, false, 2, 1, 0},
                                           Case{2, 6, 11, 4, 2, 8, true, 3, 0, 0}, Case{1, 8, 8, 2, 2, 8, false, -1, -1, 5.0f},
                                           Case{1, 7, 7, 2, 2, 4, true, 1, -1, 2.0f}),
                         case_name);

TEST(AttentionReference, VarlenMatchesPerSequence) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  // Sequences of q lengths 3, 0, 1, 4 and k lengths 5, 2, 0, 4 (an empty one on each side).
  const std::vector<int32_t> cq{0, 3, 3, 4, 8}, ck{0, 5, 7, 7, 11};
  const int64_t hq = 4, hkv = 2, d = 8;
  HostTensor q(DType::kFP16, 1, 8, hq, d), k(DType::kFP16, 1, 11, hkv, d), v(DType::kFP16, 1, 11, hkv, d);
  q.m.fill_uniform(rng, -2, 2);
  k.m.fill_uniform(rng, -2, 2);
  v.m.fill_uniform(rng, -1, 1);
  AttentionParams p;
  p.causal = true;
  p.host_cu_seqlens_q = cq.data();
  p.host_cu_seqlens_k = ck.data();
  p.num_seqs = 4;
  std::vector<float> out, lse;
  attn::attention_reference(q.view(), k.view(), v.view(), p, out, lse);
  for (int64_t s = 0; s < 4; ++s) {
    const int64_t sq = cq[s + 1] - cq[s], sk = ck[s + 1] - ck[s];
    std::vector<double> o, l;
    naive(q, k, v, p, cq[s], sq, ck[s], sk, 0, o, l);
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < hq; ++h) {
        const float got_l = lse[size_t(h * 8 + cq[s] + i)];
        if (std::isinf(l[size_t(h * sq + i)]))
          EXPECT_TRUE(std::isinf(got_l) && got_l < 0);
        else
          EXPECT_NEAR(got_l, l[size_t(h * sq + i)], 1e-5 * (1 + std::fabs(got_l)));
        for (int64_t dd = 0; dd < d; ++dd)
          EXPECT_NEAR(out[size_t(((cq[s] + i) * hq + h) * d + dd)], o[size_t((i * hq + h) * d + dd)], 1e-5);
      }
  }
}

}  // namespace
}  // namespace blockfuse
