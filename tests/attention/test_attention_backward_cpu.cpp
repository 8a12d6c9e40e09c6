// The attention backward on the CPU: the fp64 reference against central differences of the forward
// reference (so the GPU tests compare against a checked gradient), and attention_backward's argument
// errors (thrown before any CUDA call; the pointers are fake aligned addresses, never dereferenced).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "attention/backward_blocks.h"
#include "attention/reference.h"
#include "attention/tensor_check.h"
#include "blockfuse/attention.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::expect_arg_error;

// fp32 views of host data through the 2-byte reference interface: bf16 inputs, so the difference
// quotient is taken on the loss L = Σ out ∘ dout computed in double from those inputs.
struct Problem {
  int64_t b = 1, sq = 5, sk = 7, hq = 4, hkv = 2, d = 8;
  std::vector<uint16_t> q, k, v, dout;
};

double loss(const Problem& pb, const AttentionParams& p) {
  std::vector<float> out, lse;
  auto view = [&](const std::vector<uint16_t>& x, int64_t rows, int64_t heads) {
    return make_attn_tensor(static_cast<const void*>(x.data()), DType::kBF16, pb.b, rows, heads, pb.d);
  };
  attn::attention_reference(view(pb.q, pb.sq, pb.hq), view(pb.k, pb.sk, pb.hkv), view(pb.v, pb.sk, pb.hkv), p, out, lse);
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += double(out[i]) * host::bf16_to_float(pb.dout[i]);
  return l;
}

TEST(AttentionBackwardReference, MatchesCentralDifferences) {
  for (int variant = 0; variant < 3; ++variant) {
    Problem pb;
    std::mt19937_64 rng(testing::fresh_seed());
    std::normal_distribution<float> nd(0.f, 1.f);
    auto fill = [&](size_t n) {
      std::vector<uint16_t> v(n);
      for (auto& x : v) x = host::float_to_bf16(nd(rng));
      return v;
    };
    pb.q = fill(size_t(pb.sq * pb.hq * pb.d)), pb.k = fill(size_t(pb.sk * pb.hkv * pb.d));
    pb.v = fill(size_t(pb.sk * pb.hkv * pb.d)), pb.dout = fill(size_t(pb.sq * pb.hq * pb.d));
    AttentionParams p;
    p.causal = variant >= 1;
    if (variant == 2) p.softcap = 2.0f, p.window_left = 3;
    std::vector<float> dq, dk, dv;
    auto view = [&](const std::vector<uint16_t>& x, int64_t rows, int64_t heads) {
      return make_attn_tensor(static_cast<const void*>(x.data()), DType::kBF16, pb.b, rows, heads, pb.d);
    };
    attn::attention_backward_reference(view(pb.q, pb.sq, pb.hq), view(pb.k, pb.sk, pb.hkv), view(pb.v, pb.sk, pb.hkv),
                                       view(pb.dout, pb.sq, pb.hq), p, dq, dk, dv);
    // Perturb a few elements of each input by ±h (bf16 steps: h = 1/64 is exact near 1) and compare.
    auto check = [&](std::vector<uint16_t>& x, const std::vector<float>& grad, const char* what) {
      for (size_t idx : {size_t(0), x.size() / 3, x.size() - 1}) {
        const float x0 = host::bf16_to_float(x[idx]);
        const float h = std::max(std::fabs(x0) / 64.f, 1.f / 256.f);
        const uint16_t saved = x[idx];
        x[idx] = host::float_to_bf16(x0 + h);
        const float xp = host::bf16_to_float(x[idx]);
        const double lp = loss(pb, p);
        x[idx] = host::float_to_bf16(x0 - h);
        const float xm = host::bf16_to_float(x[idx]);
        const double lm = loss(pb, p);
        x[idx] = saved;
        const double fd = (lp - lm) / (double(xp) - double(xm));
        EXPECT_NEAR(grad[idx], fd, 2e-2 * std::max(1.0, std::fabs(fd))) << what << "[" << idx << "], variant " << variant;
      }
    };
    check(pb.q, dq, "dq");
    check(pb.k, dk, "dk");
    check(pb.v, dv, "dv");
  }
}

void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7e0000000000ull) + uintptr_t(i) * (uintptr_t(1) << 32)); }

struct Call {
  AttnConstTensor q, k, v, out, dout;
  const float* lse = static_cast<const float*>(fake(6));
  AttnTensor dq, dk, dv;
  AttentionParams p;
  void* ws = fake(10);
  size_t ws_bytes = size_t(1) << 30;
  void operator()() const { attention_backward(q, k, v, out, dout, lse, dq, dk, dv, p, ws, ws_bytes); }
};

Call valid(int64_t d = 128) {
  Call c;
  c.q = make_attn_tensor(static_cast<const void*>(fake(1)), DType::kBF16, 2, 100, 8, d);
  c.k = make_attn_tensor(static_cast<const void*>(fake(2)), DType::kBF16, 2, 100, 2, d);
  c.v = make_attn_tensor(static_cast<const void*>(fake(3)), DType::kBF16, 2, 100, 2, d);
  c.out = make_attn_tensor(static_cast<const void*>(fake(4)), DType::kBF16, 2, 100, 8, d);
  c.dout = make_attn_tensor(static_cast<const void*>(fake(5)), DType::kBF16, 2, 100, 8, d);
  c.dq = make_attn_tensor(fake(7), DType::kBF16, 2, 100, 8, d);
  c.dk = make_attn_tensor(fake(8), DType::kBF16, 2, 100, 2, d);
  c.dv = make_attn_tensor(fake(9), DType::kBF16, 2, 100, 2, d);
  return c;
}

void expect_error(const std::function<void(Call&)>& edit, const std::string& arg, int64_t d = 128) {
  Call c = valid(d);
  edit(c);
  expect_arg_error(c, arg);
}

TEST(AttentionBackwardValidation, NamesTheArgument) {
  expect_error([](Call&) {}, "head_dim", 256);
  expect_error([](Call& c) { c.lse = nullptr; }, "lse");
  // kSm90 where the sm90a backward cannot run (every CPU-only machine): refused before any launch.
  if (!testing::attention_sm90_runnable()) expect_error([](Call& c) { c.p.kernel = AttentionKernel::kSm90; }, "params.kernel");
  expect_error([](Call& c) { c.dq.seqlen = 99; }, "dq");
  expect_error([](Call& c) { c.dk.heads = 4; }, "dk");
  expect_error([](Call& c) { c.dv.dtype = DType::kFP16; }, "dv");
  expect_error([](Call& c) { c.dout.batch = 1; }, "dout");
  expect_error([](Call& c) { c.ws_bytes = 16; }, "workspace");
  expect_error([](Call& c) { c.dq.data = const_cast<void*>(c.q.data); }, "dq");
  expect_error([](Call& c) { c.dv.data = c.dk.data; }, "dk");
  // Deterministic: Dsum only, and where the sm90a kernel runs (an H100) also its dQ accumulator and
  // the [rows, Hq] int32 turn counters of its ordered dQ additions. The accumulator holds a 64-row
  // block past the rows (the sm90a kernel's whole-block reductions).
  const size_t dsum = 2 * 100 * 8 * 4, accum = size_t(2 * 100 + 64) * 8 * 128 * 4;
  EXPECT_EQ(attention_backward_workspace_size(valid().q), dsum + (testing::attention_sm90_runnable() ? accum + dsum : 0));
  // Non-deterministic: the fp32 dQ accumulator after Dsum, and the check uses it.
  EXPECT_EQ(attention_backward_workspace_size(valid().q, false), dsum + accum);
  expect_error([](Call& c) { c.p.deterministic = false; c.ws_bytes = 2 * 100 * 8 * 4; }, "workspace");
}

// A call without query rows has an empty lse (PyTorch passes a null pointer for it): accepted,
// nothing launched (the fake pointers would fault), while its tensors are still checked.
TEST(AttentionBackwardValidation, NoQueryRowsTakeANullLse) {
  Call c = valid();
  for (AttnConstTensor* t : {&c.q, &c.out, &c.dout}) t->seqlen = 0;
  c.dq.seqlen = 0;
  c.lse = nullptr;
  c.ws = nullptr;
  c.ws_bytes = 0;
  EXPECT_NO_THROW(c());
  c.dk.heads = 4;
  expect_arg_error(c, "dk");
}


// The sm90a dK/dV kernel's visibility rule (keys as rows) and the query blocks a 128-key block
// visits, against the reference's rule by brute force: every length pair up to 300 x 300 in steps,
// causal, windows on either side or both, and Sq != Sk both ways. A block visited without a visible
// pair would only cost time; one missed would drop gradient terms, so both directions are checked.
TEST(AttentionBackwardBlocks, MatchTheReferenceVisibility) {
  struct W { bool causal; int64_t left, right; };
  const W windows[] = {{false, -1, -1}, {true, -1, -1}, {true, 40, -1}, {false, 20, 30}, {false, -1, 5}, {false, 0, 0}};
  int checked = 0;
  for (int len_q : {0, 1, 7, 64, 65, 129, 300})
    for (int len_k : {1, 7, 127, 128, 129, 300})
      for (const W& w : windows) {
        AttentionParams p;
        p.causal = w.causal, p.window_left = w.left, p.window_right = w.right;
        const int wl = attn::window_left_bound(w.left), wr = attn::window_right_bound(w.right, w.causal);
        for (int i = 0; i < len_q; ++i)
          for (int j = 0; j < len_k; ++j)
            ASSERT_EQ(attn::key_visible(i, j, len_q, len_k, wl, wr), attn::reference_visible(i, j, len_q, len_k, p))
                << "i=" << i << " j=" << j << " Sq=" << len_q << " Sk=" << len_k << " causal=" << w.causal
                << " window=(" << w.left << ", " << w.right << ")";
        for (int n0 = 0; n0 < len_k + 128; n0 += 128) {
          const attn::QueryBlocks qb = attn::query_blocks_of_key_block(len_q, len_k, wl, wr, n0, 128, 64);
          for (int m = 0; m * 64 < len_q; ++m) {
            bool sees = false;
            for (int i = m * 64; i < std::min(len_q, m * 64 + 64) && !sees; ++i)
              for (int j = n0; j < std::min(len_k, n0 + 128) && !sees; ++j) sees = attn::reference_visible(i, j, len_q, len_k, p);
            const bool visited = m >= qb.first && m < qb.first + qb.count;
            ASSERT_EQ(visited, sees) << "query block " << m << ", keys from " << n0 << ": Sq=" << len_q << " Sk=" << len_k
                                     << " causal=" << w.causal << " window=(" << w.left << ", " << w.right << ")";
            ++checked;
          }
          if (n0 >= len_k) EXPECT_EQ(qb.count, 0);
        }
        // The converse: the key blocks a query block's dQ gathers from, in the deterministic mode's order.
        for (int m0 = 0; m0 < len_q + 64; m0 += 64) {
          const attn::QueryBlocks kb = attn::key_blocks_of_query_block(len_q, len_k, wl, wr, m0, 64, 128);
          for (int n0 = 0; n0 < len_k; n0 += 128) {
            const attn::QueryBlocks qb = attn::query_blocks_of_key_block(len_q, len_k, wl, wr, n0, 128, 64);
            const bool visits = m0 / 64 >= qb.first && m0 / 64 < qb.first + qb.count;
            const bool listed = n0 / 128 >= kb.first && n0 / 128 < kb.first + kb.count;
            ASSERT_EQ(listed, visits) << "query rows from " << m0 << ", keys from " << n0 << ": Sq=" << len_q
                                      << " Sk=" << len_k << " causal=" << w.causal << " window=(" << w.left << ", "
                                      << w.right << ")";
          }
          if (m0 >= len_q) EXPECT_EQ(kb.count, 0);
        }
      }
  EXPECT_GT(checked, 1000);
}

// block_fully_visible against every pair of the block, for blocks at every offset (including partial
// and out-of-range ones) under each mask: a block called whole with a masked pair would let the
// kernel keep a probability the forward never had.
TEST(AttentionBackwardBlocks, FullyVisibleBlocksMatchEveryPair) {
  struct W { bool causal; int64_t left, right; };
  const W windows[] = {{false, -1, -1}, {true, -1, -1}, {true, 40, -1}, {false, 20, 30}, {false, -1, 5}, {false, 0, 0}};
  int whole = 0, partial = 0;
  for (int len_q : {1, 64, 100, 256})
    for (int len_k : {1, 64, 130, 256})
      for (const W& w : windows) {
        const int wl = attn::window_left_bound(w.left), wr = attn::window_right_bound(w.right, w.causal);
        for (int m0 = 0; m0 < len_q + 64; m0 += 16)
          for (int n0 = 0; n0 < len_k + 64; n0 += 16) {
            bool all = true;
            for (int i = m0; i < m0 + 64 && all; ++i)
              for (int j = n0; j < n0 + 64 && all; ++j) all = attn::key_visible(i, j, len_q, len_k, wl, wr);
            ASSERT_EQ(attn::block_fully_visible(m0, 64, n0, 64, len_q, len_k, wl, wr), all)
                << "rows from " << m0 << ", keys from " << n0 << ": Sq=" << len_q << " Sk=" << len_k
                << " causal=" << w.causal << " window=(" << w.left << ", " << w.right << ")";
            ++(all ? whole : partial);
          }
      }
  EXPECT_GT(whole, 100);
  EXPECT_GT(partial, 100);
}

// fully_visible_query_blocks against block_fully_visible at every block of every key offset: the
// kernel's per-step test becomes m in [first, end), so the two must agree exactly (a block taken as
// whole with a masked pair would keep a probability the forward never had; one taken as partial
// only costs the per-element test). Windows up to unbounded, lengths unequal both ways.
TEST(AttentionBackwardBlocks, FullyVisibleQueryBlocksMatchTheBlockTest) {
  struct W { bool causal; int64_t left, right; };
  const W windows[] = {{false, -1, -1}, {true, -1, -1}, {true, 40, -1}, {false, 20, 30},
                       {false, -1, 5},  {false, 0, 0},  {true, 200, -1}, {false, 63, 64}};
  int ranges = 0, nonempty = 0;
  for (int len_q : {1, 63, 64, 100, 256, 1000})
    for (int len_k : {1, 64, 130, 256, 1000})
      for (const W& w : windows) {
        const int wl = attn::window_left_bound(w.left), wr = attn::window_right_bound(w.right, w.causal);
        for (int bm : {64, 128})
          for (int n0 = 0; n0 < len_k + 64; n0 += 16) {
            const attn::BlockRange r = attn::fully_visible_query_blocks(len_q, len_k, wl, wr, n0, 64, bm);
            for (int m = 0; m * bm < len_q + 2 * bm; ++m)
              ASSERT_EQ(m >= r.first && m < r.end, attn::block_fully_visible(m * bm, bm, n0, 64, len_q, len_k, wl, wr))
                  << "block " << m << " of " << bm << " rows, keys from " << n0 << ": Sq=" << len_q << " Sk=" << len_k
                  << " causal=" << w.causal << " window=(" << w.left << ", " << w.right << ") range [" << r.first
                  << ", " << r.end << ")";
            ++ranges;
            nonempty += r.end > r.first;
          }
      }
  EXPECT_GT(nonempty, 500);
  EXPECT_GT(ranges - nonempty, 500);
}

// The deterministic mode's schedule, simulated: the CTAs of one sequence, `heads` KV heads, launched
// in linear grid order (x fastest) as deterministic_cta maps them, `resident` at a time; each walks
// its steps in the kernel's order (query head of the group, then query block) and adds a step's dQ
// only when that (KV head, query head, query block)'s counter equals its dq_turn. Per round every
// resident CTA whose turn has come adds (counters as at the round's start). Returns the most rounds
// any CTA spent resident but waiting, -1 for a stall with nothing able to add (a deadlock on the
// GPU) and -2 unless every counter ends at its block count (each turn taken once).
int simulate_dq_order(int len_q, int len_k, int wl, int wr, int group, int resident, int heads = 1,
                      bool key_block_major = false) {
  constexpr int kM = 64, kN = 128;
  const int n_blocks = (len_k + kN - 1) / kN, m_blocks = (len_q + kM - 1) / kM;
  struct Cta { int n, head, step = 0, waited = 0; std::vector<std::pair<int, int>> steps; };  // (q head, block)
  std::vector<Cta> ctas;
  const int gx = key_block_major ? heads : n_blocks, gy = key_block_major ? n_blocks : heads;
  for (int y = 0; y < gy; ++y)
    for (int x = 0; x < gx; ++x) {
      const attn::BwdCta id = attn::deterministic_cta(x, y, gx, gy, key_block_major);
      Cta c{id.key_block, id.head};
      const attn::QueryBlocks qb = attn::query_blocks_of_key_block(len_q, len_k, wl, wr, c.n * kN, kN, kM);
      for (int h = 0; h < group; ++h)
        for (int m = qb.first; m < qb.first + qb.count; ++m) c.steps.push_back({h, m});
      ctas.push_back(std::move(c));
    }
  auto slot = [&](int head, int h, int m) { return (size_t(head) * group + h) * m_blocks + m; };
  std::vector<int> counter(size_t(heads) * group * m_blocks, 0);
  size_t launched = 0, done = 0;
  std::vector<size_t> live;
  int max_wait = 0;
  while (done < ctas.size()) {
    while (live.size() < size_t(resident) && launched < ctas.size()) live.push_back(launched++);
    std::vector<int> next = counter;
    bool progress = false;
    for (size_t id : live) {
      Cta& c = ctas[id];
      if (c.step == int(c.steps.size())) continue;
      const auto [h, m] = c.steps[c.step];
      const int turn = attn::dq_turn(attn::key_blocks_of_query_block(len_q, len_k, wl, wr, m * kM, kM, kN), c.n);
      if (counter[slot(c.head, h, m)] == turn) ++next[slot(c.head, h, m)], ++c.step, progress = true;
      else max_wait = std::max(max_wait, ++c.waited);
    }
    for (size_t i = 0; i < live.size();)
      if (ctas[live[i]].step == int(ctas[live[i]].steps.size())) live.erase(live.begin() + i), ++done, progress = true;
      else ++i;
    if (!progress) return -1;
    counter = next;
  }
  for (int head = 0; head < heads; ++head)
    for (int h = 0; h < group; ++h)
      for (int m = 0; m < m_blocks; ++m)
        if (counter[slot(head, h, m)] != attn::key_blocks_of_query_block(len_q, len_k, wl, wr, m * kM, kM, kN).count)
          return -2;
  return max_wait;
}

// The sm90a dq_accum layout (dq_accum_col): within each row a permutation of whole 8-float chunks
// (an involution, so the conversion reads with the kernel's function), and the kernel's stage stores
// bank-conflict free: for every store instruction (8 rows lane / 4, 4 lanes of float2 in one chunk)
// each of the 32 banks is hit exactly twice (two wavefronts, the minimum for 256 bytes). Also the
// kernel's shortcut: the chunk bb address is the chunk 0 address XOR bb · 32 bytes.
// The unordered mode's launch order under a causal mask (backward_key_block_major chooses key-block
// major there): in linear grid order (x fastest) a sequence's CTAs come longest first, the step
// counts never increasing, for Sq = Sk and Sq != Sk; head-major they would not be. No mask: head-major
// (every key block as long). The deterministic mode keeps its own rule.
TEST(AttentionBackwardBlocks, UnorderedCausalLaunchIsLongestFirst) {
  const int unb = attn::kWindowUnbounded;
  EXPECT_TRUE(attn::backward_key_block_major(false, 32, unb, 0));
  EXPECT_FALSE(attn::backward_key_block_major(false, 32, unb, unb));
  EXPECT_FALSE(attn::backward_key_block_major(false, 32, 100, 0));  // a window: blocks alike
  EXPECT_FALSE(attn::backward_key_block_major(false, 70000, unb, 0));
  EXPECT_TRUE(attn::backward_key_block_major(true, 32, unb, unb));
  EXPECT_FALSE(attn::backward_key_block_major(true, 32, unb, 0));
  // Sections: the fewest heads whose CTAs number ≥ 2 × SMs, all of them when that is more.
  EXPECT_EQ(attn::backward_section_heads(32, 8, 132), 8);     // S 4096: 264 / 32 = 8.25 → every head
  EXPECT_EQ(attn::backward_section_heads(128, 32, 132), 3);   // S 16384
  EXPECT_EQ(attn::backward_section_heads(64, 32, 132), 5);    // S 8192
  EXPECT_EQ(attn::backward_section_heads(4096, 8, 132), 1);
  EXPECT_EQ(attn::backward_section_heads(128, 1, 132), 1);    // MQA
  EXPECT_EQ(attn::backward_section_heads(1, 8, 132), 8);
  for (auto [len_q, len_k] : {std::pair{4096, 4096}, std::pair{1000, 3000}, std::pair{3000, 1000}, std::pair{777, 777},
                              std::pair{16384, 16384}}) {
    for (int heads : {1, 7, 8, 32}) {
      const int n_blocks = (len_k + 127) / 128, sms = 132;
      const bool kbm = attn::backward_key_block_major(false, n_blocks, unb, 0);
      ASSERT_TRUE(kbm);
      const int section_heads = attn::backward_section_heads(n_blocks, heads, sms);
      ASSERT_GE(section_heads, 1);
      ASSERT_LE(section_heads, heads);
      // A section, unless it holds every head, has ≥ 2 × SMs CTAs; one head fewer would not.
      if (section_heads < heads) {
        EXPECT_GE(int64_t(section_heads) * n_blocks, 2 * sms);
        if (section_heads > 1) EXPECT_LT(int64_t(section_heads - 1) * n_blocks, 2 * sms);
      }
      // Launch order (x fastest): every (key block, head) once; within a section the CTAs longest
      // first; the sections one after another in head order.
      const int gx = heads, gy = n_blocks;
      std::vector<int> seen(size_t(gx) * gy, 0);
      int last = 1 << 30, last_section = 0;
      for (int y = 0; y < gy; ++y)
        for (int x = 0; x < gx; ++x) {
          const attn::BwdCta c = attn::unordered_cta(x, y, gx, gy, kbm, section_heads);
          ASSERT_TRUE(c.head >= 0 && c.head < gx && c.key_block >= 0 && c.key_block < gy);
          ++seen[size_t(c.head) * gy + c.key_block];
          const int section = c.head / section_heads;
          ASSERT_GE(section, last_section);
          if (section != last_section) last = 1 << 30;
          last_section = section;
          const int steps = attn::query_blocks_of_key_block(len_q, len_k, unb, 0, c.key_block * 128, 128, 64).count;
          EXPECT_LE(steps, last) << "Sq " << len_q << " Sk " << len_k << " key block " << c.key_block << " head " << c.head;
          last = steps;
        }
      for (int v : seen) ASSERT_EQ(v, 1);
      // Head-major when the mask does not call for it.
      EXPECT_TRUE(attn::unordered_cta(3 % gy, 0, gx, gy, false, section_heads).key_block == 3 % gy);
    }
  }
}

TEST(AttentionBackwardBlocks, DqAccumLayoutIsAConflictFreeChunkPermutation) {
  for (int d : {64, 128}) {
    for (int64_t row = 0; row < 16; ++row) {
      std::vector<int> seen(size_t(d), 0);
      for (int c = 0; c < d; ++c) {
        const int to = attn::dq_accum_col(row, c);
        ASSERT_TRUE(to >= 0 && to < d) << "D " << d << " row " << row << " col " << c;
        ++seen[size_t(to)];
        EXPECT_EQ(attn::dq_accum_col(row, to), c) << "not an involution: D " << d << " row " << row << " col " << c;
        EXPECT_EQ(to % 8, c % 8) << "chunks not kept whole";
      }
      for (int c = 0; c < d; ++c) EXPECT_EQ(seen[size_t(c)], 1) << "not a permutation: D " << d << " row " << row;
    }
    const int slice = d / 2, wgs = 2;  // the columns a warpgroup stores
    for (int64_t row0 = 0; row0 < 8; ++row0)       // the global row of the block's row 0, mod 8
      for (int wg = 0; wg < wgs; ++wg)
        for (int warp = 0; warp < 4; ++warp)
          for (int i = 0; i < 2; ++i)
            for (int bb = 0; bb < slice / 8; ++bb) {
              std::vector<int> bank(32, 0);
              for (int lane = 0; lane < 32; ++lane) {
                const int r = warp * 16 + lane / 4 + 8 * i, col_lane = (lane % 4) * 2, c0 = wg * slice;
                const int swz = int((row0 + lane / 4) & 7);  // the kernel's dq_swz
                ASSERT_EQ(swz, int((row0 + r) & 7));
                const uint32_t byte = uint32_t((r * d + attn::dq_accum_col(row0 + r, c0 + bb * 8 + col_lane)) * 4);
                const uint32_t byte0 = uint32_t((r * d + attn::dq_accum_col(swz, c0 + col_lane)) * 4);
                ASSERT_EQ(byte0 ^ uint32_t(bb << 5), byte) << "D " << d << " r " << r << " bb " << bb;
                ++bank[(byte / 4) % 32], ++bank[(byte / 4 + 1) % 32];
              }
              for (int k = 0; k < 32; ++k)
                ASSERT_EQ(bank[size_t(k)], 2) << "D " << d << " row0 " << row0 << " warp " << warp << " bb " << bb << " bank " << k;
            }
  }
}

TEST(AttentionBackwardBlocks, DeterministicOrderNeverDeadlocksAndCausalBlocksNeverWait) {
  struct W { bool causal; int64_t left, right; };
  const W windows[] = {{false, -1, -1}, {true, -1, -1}, {true, 200, -1}, {false, 100, 300}, {false, -1, 5}};
  for (int len_q : {1, 64, 65, 700, 1024})
    for (int len_k : {1, 129, 700, 1024})
      for (const W& w : windows)
        for (int group : {1, 3})
          for (int resident : {1, 2, 1000})
            for (bool kbm : {false, true}) {
              const int wl = attn::window_left_bound(w.left), wr = attn::window_right_bound(w.right, w.causal);
              const int wait = simulate_dq_order(len_q, len_k, wl, wr, group, resident, 2, kbm);
              ASSERT_GT(wait, -1) << "stalled (a deadlock): Sq=" << len_q << " Sk=" << len_k << " causal=" << w.causal
                                  << " window=(" << w.left << ", " << w.right << ") group=" << group
                                  << " resident=" << resident << " key_block_major=" << kbm;
              ASSERT_NE(wait, -2) << "a turn taken twice or never: Sq=" << len_q << " Sk=" << len_k;
            }
  // Causal, every CTA resident: each runs its own steps without a round of waiting (ascending, the
  // diagonal key blocks would wait for key block 0, holding their SMs for its whole length).
  for (int len : {1024, 1000, 4096})
    for (int group : {1, 4})
      EXPECT_EQ(simulate_dq_order(len, len, attn::kWindowUnbounded, 0, group, 1000), 0) << "S=" << len << " group=" << group;
}

// Without a mask, at S = 4096 (32 key blocks) and 32 KV heads on 132 resident CTAs: head-major, the
// last key block of a head in the order waits a step for each before it (31); key-block-major, a few
// key blocks of every head are resident at once, so no CTA waits more than a few steps.
TEST(AttentionBackwardBlocks, DeterministicKeyBlockMajorLaunchShortensTheWavefront) {
  const int wl = attn::kWindowUnbounded, wr = attn::kWindowUnbounded;
  EXPECT_GE(simulate_dq_order(4096, 4096, wl, wr, 1, 132, 32, false), 31);
  EXPECT_LE(simulate_dq_order(4096, 4096, wl, wr, 1, 132, 32, true), 4);
  EXPECT_LE(simulate_dq_order(4096, 4096, wl, wr, 4, 132, 8, true), 16);
  // Causal stays wait-free either way.
  EXPECT_EQ(simulate_dq_order(4096, 4096, wl, 0, 1, 132, 32, true), 0);
}

}  // namespace
}  // namespace blockfuse
