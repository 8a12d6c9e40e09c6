// The CPU references of decode attention (src/attention/decode_reference.cpp) against the forward's
// reference (which has its own naive check in test_attention_reference.cpp): a contiguous cache cut
// at each sequence's length is the forward with Sk = L_b; a paged cache with a shuffled block table
// gives the same result as the contiguous one; slots past a length are never read; the guard rows;
// rotary embedding by hand (NeoX and GPT-J) and the with_kvcache step as rotate + append + attend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "attention/decode_reference.h"
#include "attention/reference.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::HostMatrix;

struct Shape {
  int64_t B, Sq, Hq, Hkv, D, S_max;
};

// Random contiguous q [B, Sq, Hq, D] and caches [B, S_max, Hkv, D]; slots at or past each length NaN.
struct Problem {
  Shape s;
  DType dt;
  HostMatrix q, k, v;
  std::vector<int32_t> lens;
  Problem(const Shape& sh, DType t, std::vector<int32_t> l, std::mt19937_64& rng)
      : s(sh), dt(t), q(t, sh.B * sh.Sq * sh.Hq, sh.D), k(t, sh.B * sh.S_max * sh.Hkv, sh.D),
        v(t, sh.B * sh.S_max * sh.Hkv, sh.D), lens(std::move(l)) {
    q.fill_uniform(rng, -2.f, 2.f);
    k.fill_uniform(rng, -2.f, 2.f);
    v.fill_uniform(rng, -1.f, 1.f);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t j = lens[size_t(b)]; j < s.S_max; ++j)
        for (int64_t h = 0; h < s.Hkv; ++h)
          for (int64_t d = 0; d < s.D; ++d) {
            k.set((b * s.S_max + j) * s.Hkv + h, d, NAN);
            v.set((b * s.S_max + j) * s.Hkv + h, d, NAN);
          }
  }
  attn::DecodeReferenceInput input() const {
    return {make_attn_tensor(q.bits.data(), dt, s.B, s.Sq, s.Hq, s.D), make_attn_tensor(k.bits.data(), dt, s.B, s.S_max, s.Hkv, s.D),
            make_attn_tensor(v.bits.data(), dt, s.B, s.S_max, s.Hkv, s.D), lens.data(), nullptr};
  }
};

void expect_same(const std::vector<double>& a, const std::vector<double>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << what << " [" << i << "]";
    } else if (std::isinf(b[i])) {
      EXPECT_EQ(a[i], b[i]) << what << " [" << i << "]";
    } else {
      ASSERT_NEAR(a[i], b[i], tol) << what << " [" << i << "]";
    }
  }
}

// The forward reference of sequence b alone: q [1, Sq, Hq, D], k / v = the cache's first L_b rows.
void forward_of_sequence(const Problem& pr, const DecodeAttentionParams& dp, int64_t b, std::vector<double>& out,
                         std::vector<double>& lse) {
  const Shape& s = pr.s;
  const int64_t L = pr.lens[size_t(b)];
  out.assign(size_t(s.Sq * s.Hq * s.D), 0.0);
  lse.assign(size_t(s.Hq * s.Sq), -std::numeric_limits<double>::infinity());
  if (L == 0) return;  // the forward takes Sk >= 1; no key: out 0, lse -inf
  AttentionParams p;
  p.causal = dp.causal, p.window_left = dp.window_left, p.window_right = dp.window_right;
  p.softcap = dp.softcap, p.softmax_scale = dp.softmax_scale;
  const AttnConstTensor q = make_attn_tensor(pr.q.bits.data() + b * s.Sq * s.Hq * s.D, pr.dt, 1, s.Sq, s.Hq, s.D);
  const AttnConstTensor k = make_attn_tensor(pr.k.bits.data() + b * s.S_max * s.Hkv * s.D, pr.dt, 1, L, s.Hkv, s.D);
  const AttnConstTensor v = make_attn_tensor(pr.v.bits.data() + b * s.S_max * s.Hkv * s.D, pr.dt, 1, L, s.Hkv, s.D);
  std::vector<float> o, l;
  attn::attention_reference(q, k, v, p, o, l);
  out.assign(o.begin(), o.end());
  lse.assign(l.begin(), l.end());
}

struct MaskCase {
  bool causal;
  int64_t left, right;
  float softcap, scale;
};

TEST(DecodeAttentionReference, ContiguousIsTheForwardAtEachLength) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  // Lengths 0 (no key), 1, below Sq (causal rows without keys), and longer; GQA 3.
  for (const MaskCase& m : {MaskCase{false, -1, -1, 0, 0}, MaskCase{true, -1, -1, 0, 0}, MaskCase{false, 3, 1, 0, 0},
                            MaskCase{true, 4, -1, 0, 0}, MaskCase{true, -1, -1, 2.5f, 0.2f}, MaskCase{false, 0, 0, 0, 0}})
    for (int64_t sq : {1, 2, 5}) {
      const Shape s{5, sq, 6, 2, 16, 40};
      Problem pr(s, DType::kBF16, {0, 1, 3, 17, 40}, rng);
      DecodeAttentionParams p;
      p.causal = m.causal, p.window_left = m.left, p.window_right = m.causal ? -1 : m.right;
      p.softcap = m.softcap, p.softmax_scale = m.scale;
      std::vector<double> out, lse, fo, fl;
      attn::decode_attention_reference(pr.input(), p, out, lse);
      for (int64_t b = 0; b < s.B; ++b) {
        SCOPED_TRACE("b " + std::to_string(b) + " Sq " + std::to_string(sq) + (m.causal ? " causal" : "") + " window " +
                     std::to_string(m.left) + "," + std::to_string(m.right));
        forward_of_sequence(pr, p, b, fo, fl);
        const size_t no = size_t(s.Sq * s.Hq * s.D), nl = size_t(s.Hq * s.Sq);
        const std::vector<double> ob(out.begin() + b * no, out.begin() + (b + 1) * no);
        const std::vector<double> lb(lse.begin() + b * nl, lse.begin() + (b + 1) * nl);
        expect_same(ob, fo, 1e-6, "out");  // the forward stores fp32
        expect_same(lb, fl, 1e-5, "lse");
        for (double x : ob) EXPECT_FALSE(std::isnan(x)) << "a NaN slot past the length was read";
      }
    }
}

// Left padding P_b: the same as a cache whose rows start at slot P_b with L_b − P_b keys (slots
// before P_b hold NaN: never read); P_b outside [0, L_b] guards the sequence.
TEST(DecodeAttentionReference, LeftPaddingIsTheCacheFromThePad) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const Shape s{5, 3, 6, 2, 16, 40};
  const std::vector<int32_t> pads = {0, 1, 5, 17, 40};
  for (bool causal : {false, true}) {
    Problem pr(s, DType::kBF16, {3, 1, 20, 40, 40}, rng);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t j = 0; j < pads[size_t(b)]; ++j)
        for (int64_t h = 0; h < s.Hkv; ++h)
          for (int64_t d = 0; d < s.D; ++d) pr.k.set((b * s.S_max + j) * s.Hkv + h, d, NAN), pr.v.set((b * s.S_max + j) * s.Hkv + h, d, NAN);
    DecodeAttentionParams p;
    p.causal = causal, p.window_left = causal ? 6 : -1;
    attn::DecodeReferenceInput in = pr.input();
    std::vector<int32_t> bad_pads = pads;
    bad_pads[0] = 4;  // past L_0 = 3
    in.cache_leftpad = bad_pads.data();
    std::vector<double> out, lse;
    attn::decode_attention_reference(in, p, out, lse);
    const size_t no = size_t(s.Sq * s.Hq * s.D), nl = size_t(s.Hq * s.Sq);
    for (size_t i = 0; i < no; ++i) EXPECT_TRUE(std::isnan(out[i])) << "sequence 0 (pad past its length) is guarded";
    for (int64_t b = 1; b < s.B; ++b) {
      SCOPED_TRACE("b " + std::to_string(b) + (causal ? " causal" : ""));
      const int64_t pad = pads[size_t(b)], row = b * s.S_max + pad;
      const int32_t n = pr.lens[size_t(b)] - int32_t(pad);
      const attn::DecodeReferenceInput one{
          make_attn_tensor(pr.q.bits.data() + b * s.Sq * s.Hq * s.D, pr.dt, 1, s.Sq, s.Hq, s.D),
          make_attn_tensor(pr.k.bits.data() + row * s.Hkv * s.D, pr.dt, 1, s.S_max - pad, s.Hkv, s.D),
          make_attn_tensor(pr.v.bits.data() + row * s.Hkv * s.D, pr.dt, 1, s.S_max - pad, s.Hkv, s.D), &n, nullptr};
      std::vector<double> fo, fl;
      attn::decode_attention_reference(one, p, fo, fl);
      expect_same(std::vector<double>(out.begin() + b * no, out.begin() + (b + 1) * no), fo, 0.0, "out");
      expect_same(std::vector<double>(lse.begin() + b * nl, lse.begin() + (b + 1) * nl), fl, 0.0, "lse");
      for (size_t i = 0; i < no; ++i) EXPECT_FALSE(std::isnan(out[b * no + i])) << "a NaN slot before the pad was read";
    }
  }
}

TEST(DecodeAttentionReference, RowsWithoutKeys) {
  std::mt19937_64 rng(testing::fresh_seed());
  Problem pr(Shape{2, 4, 2, 1, 8, 8}, DType::kFP16, {0, 2}, rng);
  DecodeAttentionParams p;
  p.causal = true;
  std::vector<double> out, lse;
  attn::decode_attention_reference(pr.input(), p, out, lse);
  // Sequence 0: nothing. Sequence 1 (L = 2, Sq = 4): queries at positions -2, -1 see no key, 0 and 1 do.
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < 4; ++t) {
      EXPECT_EQ(lse[size_t((0 * 2 + h) * 4 + t)], -INFINITY);
      EXPECT_EQ(std::isinf(lse[size_t((1 * 2 + h) * 4 + t)]), t < 2) << "t " << t;
      for (int64_t d = 0; d < 8; ++d) {
        EXPECT_EQ(out[size_t(((0 * 4 + t) * 2 + h) * 8 + d)], 0.0);
        if (t < 2) EXPECT_EQ(out[size_t(((1 * 4 + t) * 2 + h) * 8 + d)], 0.0);
      }
    }
}

// A paged copy of a contiguous cache: page i of sequence b at a shuffled index, unused pages NaN.
struct Paged {
  int64_t page, max_blocks, num_blocks;
  std::vector<int32_t> table;
  HostMatrix k, v;
  Paged(const Problem& pr, int64_t pg, int64_t stride_pad, std::mt19937_64& rng)
      : page(pg), max_blocks((pr.s.S_max + pg - 1) / pg), num_blocks(pr.s.B * max_blocks + 3),
        k(pr.dt, num_blocks * pg * pr.s.Hkv, pr.s.D), v(pr.dt, num_blocks * pg * pr.s.Hkv, pr.s.D) {
    k.poison(), v.poison();
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int64_t stride = max_blocks + stride_pad;
    table.assign(size_t(pr.s.B * stride), -7);  // padding entries out of range: never read
    for (int64_t b = 0; b < pr.s.B; ++b)
      for (int64_t i = 0; i < max_blocks; ++i) table[size_t(b * stride + i)] = perm[size_t(b * max_blocks + i)];
    const int64_t H = pr.s.Hkv;
    for (int64_t b = 0; b < pr.s.B; ++b)
      for (int64_t j = 0; j < pr.lens[size_t(b)]; ++j)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < pr.s.D; ++d) {
            const int64_t dst = (table[size_t(b * stride + j / pg)] * pg + j % pg) * H + h;
            k.bits[size_t(dst * pr.s.D + d)] = pr.k.bits[size_t(((b * pr.s.S_max + j) * H + h) * pr.s.D + d)];
            v.bits[size_t(dst * pr.s.D + d)] = pr.v.bits[size_t(((b * pr.s.S_max + j) * H + h) * pr.s.D + d)];
          }
  }
};

TEST(DecodeAttentionReference, PagedEqualsContiguous) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const Shape s{4, 3, 8, 2, 16, 50};
  Problem pr(s, DType::kBF16, {0, 7, 16, 50}, rng);
  for (int64_t page : {1, 5, 16})
    for (int64_t pad : {0, 3}) {
      Paged pg(pr, page, pad, rng);
      DecodeAttentionParams p;
      p.causal = true;
      p.max_blocks = pg.max_blocks;
      p.block_table_stride = pad ? pg.max_blocks + pad : 0;
      attn::DecodeReferenceInput in = pr.input();
      in.k_cache = make_attn_tensor(pg.k.bits.data(), pr.dt, pg.num_blocks, page, s.Hkv, s.D);
      in.v_cache = make_attn_tensor(pg.v.bits.data(), pr.dt, pg.num_blocks, page, s.Hkv, s.D);
      in.host_block_table = pg.table.data();
      std::vector<double> o1, l1, o2, l2;
      attn::decode_attention_reference(in, p, o1, l1);
      DecodeAttentionParams pc;
      pc.causal = true;
      attn::decode_attention_reference(pr.input(), pc, o2, l2);
      expect_same(o1, o2, 0, "out (paged vs contiguous)");
      expect_same(l1, l2, 0, "lse (paged vs contiguous)");
    }
}

TEST(DecodeAttentionReference, GuardedSequencesAreNaN) {
  std::mt19937_64 rng(testing::fresh_seed());
  const Shape s{3, 1, 4, 2, 8, 32};
  Problem pr(s, DType::kBF16, {5, 20, 32}, rng);
  Paged pg(pr, 8, 0, rng);  // 4 pages per sequence
  DecodeAttentionParams p;
  p.max_blocks = pg.max_blocks;
  attn::DecodeReferenceInput in = pr.input();
  in.k_cache = make_attn_tensor(pg.k.bits.data(), pr.dt, pg.num_blocks, 8, s.Hkv, s.D);
  in.v_cache = make_attn_tensor(pg.v.bits.data(), pr.dt, pg.num_blocks, 8, s.Hkv, s.D);
  in.host_block_table = pg.table.data();
  for (int64_t b = 0; b < 3; ++b) EXPECT_FALSE(attn::decode_reference_guarded(in, p, b));
  // An out-of-range entry in a page sequence 0 does not use (its 5 keys fill page 0): not guarded.
  pg.table[2] = int32_t(pg.num_blocks + 10);
  EXPECT_FALSE(attn::decode_reference_guarded(in, p, 0));
  EXPECT_FALSE(attn::decode_reference_guarded(in, p, 0, 4));  // 5 + 4 new keys use pages 0 and 1
  pg.table[1] = -1;
  EXPECT_FALSE(attn::decode_reference_guarded(in, p, 0));
  EXPECT_TRUE(attn::decode_reference_guarded(in, p, 0, 4));
  EXPECT_TRUE(attn::decode_reference_guarded(in, p, 2, 1));  // full: no room for a new key
  std::vector<int32_t> lens{5, 33, -1};                      // 33 > 4 pages of 8
  in.cache_seqlens = lens.data();
  pg.table[1] = 0, pg.table[2] = 0;
  std::vector<double> out, lse;
  attn::decode_attention_reference(in, p, out, lse);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < s.Hq * s.D; ++i) EXPECT_EQ(std::isnan(out[size_t(b * s.Hq * s.D + i)]), b != 0) << b;
  for (int64_t i = 0; i < 3 * s.Hq; ++i) EXPECT_EQ(std::isnan(lse[size_t(i)]), i >= s.Hq);
}

TEST(DecodeAttentionReference, RotaryByHand) {
  // D = 6, R = 4: NeoX pairs (0, 2), (1, 3); GPT-J pairs (0, 1), (2, 3); dims 4, 5 unchanged.
  const std::vector<float> cosv{0.0f, 0.5f, 1.0f, 0.25f}, sinv{0.0f, 0.75f, 0.0f, -0.5f};  // 2 positions x R/2
  attn::RotaryReference r;
  r.cos = cosv.data(), r.sin = sinv.data(), r.fp32 = true, r.rotary_dim = 4, r.max_positions = 2;
  const double x[6] = {1, 2, 3, 4, 5, 6};
  double y[6];
  attn::rotary_reference(r, DType::kBF16, 6, 1, x, y);  // position 1: (c, s) = (1, 0), (0.25, -0.5)
  const double neox[6] = {1 * 1.0 - 3 * 0.0, 2 * 0.25 - 4 * -0.5, 3 * 1.0 + 1 * 0.0, 4 * 0.25 + 2 * -0.5, 5, 6};
  for (int d = 0; d < 6; ++d) EXPECT_DOUBLE_EQ(y[d], neox[d]) << d;
  r.interleaved = true;
  attn::rotary_reference(r, DType::kBF16, 6, 1, x, y);
  const double gptj[6] = {1 * 1.0 - 2 * 0.0, 2 * 1.0 + 1 * 0.0, 3 * 0.25 - 4 * -0.5, 4 * 0.25 + 3 * -0.5, 5, 6};
  for (int d = 0; d < 6; ++d) EXPECT_DOUBLE_EQ(y[d], gptj[d]) << d;
  // Tables of the dtype, with a row stride.
  const std::vector<uint16_t> c16{host::from_float(DType::kFP16, 0.5f), host::from_float(DType::kFP16, 1.f), 0xffff},
      s16{host::from_float(DType::kFP16, 0.75f), host::from_float(DType::kFP16, 0.f), 0xffff};
  attn::RotaryReference h;
  h.cos = c16.data(), h.sin = s16.data(), h.rotary_dim = 4, h.max_positions = 1, h.ld = 3;
  attn::rotary_reference(h, DType::kFP16, 6, 0, x, y);
  EXPECT_DOUBLE_EQ(y[0], 1 * 0.5 - 3 * 0.75);
  EXPECT_DOUBLE_EQ(y[3], 4 * 1.0 + 2 * 0.0);
  // No tables: a copy.
  attn::rotary_reference(attn::RotaryReference{}, DType::kFP16, 6, 0, x, y);
  for (int d = 0; d < 6; ++d) EXPECT_EQ(y[d], x[d]);
}

// with_kvcache = rotate q and k_new at L_b + t, write the cache, attend over L_b + Sq keys.
TEST(DecodeAttentionReference, WithKvcacheIsRotateAppendAttend) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const Shape s{3, 2, 4, 2, 8, 12};
  const DType dt = DType::kBF16;
  Problem pr(s, dt, {0, 5, 10}, rng);
  HostMatrix kn(dt, s.B * s.Sq * s.Hkv, s.D), vn(dt, s.B * s.Sq * s.Hkv, s.D);
  kn.fill_uniform(rng, -2, 2), vn.fill_uniform(rng, -1, 1);
  std::vector<float> cosv, sinv;
  for (int p = 0; p < 12; ++p)
    for (int i = 0; i < 3; ++i) cosv.push_back(std::cos(0.3f * p * (i + 1))), sinv.push_back(std::sin(0.3f * p * (i + 1)));
  attn::RotaryReference r;
  r.cos = cosv.data(), r.sin = sinv.data(), r.fp32 = true, r.rotary_dim = 6, r.max_positions = 12;
  DecodeAttentionParams p;
  p.causal = true;
  HostMatrix kc = pr.k, vc = pr.v;
  std::vector<double> out, lse;
  attn::decode_attention_with_kvcache_reference(
      make_attn_tensor(pr.q.bits.data(), dt, s.B, s.Sq, s.Hq, s.D), make_attn_tensor(kc.bits.data(), dt, s.B, s.S_max, s.Hkv, s.D),
      make_attn_tensor(vc.bits.data(), dt, s.B, s.S_max, s.Hkv, s.D), make_attn_tensor(kn.bits.data(), dt, s.B, s.Sq, s.Hkv, s.D),
      make_attn_tensor(vn.bits.data(), dt, s.B, s.Sq, s.Hkv, s.D), pr.lens.data(), nullptr, r, p, out, lse);
  // By hand: the expected caches and q.
  Problem man = pr;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.Sq; ++t) {
      const int64_t pos = pr.lens[size_t(b)] + t;
      double x[8], y[8];
      for (int64_t h = 0; h < s.Hq; ++h) {
        const int64_t row = (b * s.Sq + t) * s.Hq + h;
        for (int d = 0; d < 8; ++d) x[d] = pr.q.at(row, d);
        attn::rotary_reference(r, dt, 8, pos, x, y);
        for (int d = 0; d < 8; ++d) man.q.set(row, d, float(y[d]));
      }
      for (int64_t h = 0; h < s.Hkv; ++h) {
        const int64_t src = (b * s.Sq + t) * s.Hkv + h, dst = (b * s.S_max + pos) * s.Hkv + h;
        for (int d = 0; d < 8; ++d) x[d] = kn.at(src, d);
        attn::rotary_reference(r, dt, 8, pos, x, y);
        for (int d = 0; d < 8; ++d) man.k.set(dst, d, float(y[d])), man.v.set(dst, d, vn.at(src, d));
      }
    }
  EXPECT_EQ(kc.bits, man.k.bits) << "k_cache after the append";
  EXPECT_EQ(vc.bits, man.v.bits) << "v_cache after the append";
  for (auto& l : man.lens) l += int32_t(s.Sq);
  std::vector<double> mo, ml;
  attn::decode_attention_reference(man.input(), p, mo, ml);
  expect_same(out, mo, 0, "out");
  expect_same(lse, ml, 0, "lse");
  // A sequence without room for its new keys: NaN rows, nothing written.
  std::vector<int32_t> full{0, 5, 11};
  HostMatrix kc2 = pr.k, vc2 = pr.v;
  attn::decode_attention_with_kvcache_reference(
      make_attn_tensor(pr.q.bits.data(), dt, s.B, s.Sq, s.Hq, s.D), make_attn_tensor(kc2.bits.data(), dt, s.B, s.S_max, s.Hkv, s.D),
      make_attn_tensor(vc2.bits.data(), dt, s.B, s.S_max, s.Hkv, s.D), make_attn_tensor(kn.bits.data(), dt, s.B, s.Sq, s.Hkv, s.D),
      make_attn_tensor(vn.bits.data(), dt, s.B, s.Sq, s.Hkv, s.D), full.data(), nullptr, r, p, out, lse);
  const size_t per_seq = size_t(s.Sq * s.Hq * s.D);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(std::isnan(out[i]), i >= 2 * per_seq) << i;
  for (int64_t j = 0; j < s.S_max; ++j)
    for (int64_t h = 0; h < s.Hkv; ++h)
      for (int d = 0; d < 8; ++d) {
        const int64_t row = (2 * s.S_max + j) * s.Hkv + h;
        EXPECT_EQ(kc2.bits[size_t(row * 8 + d)], pr.k.bits[size_t(row * 8 + d)]);
      }
}

}  // namespace
}  // namespace blockfuse
