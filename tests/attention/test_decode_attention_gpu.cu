// decode_attention() and decode_attention_with_kvcache() on the device against an fp64 CPU
// reference: Sq 1..16, D 64 / 128 / 256, GQA ratios 1, 2, 4, 7, 8 and MQA, lengths 0, 1, 63, 64, 65,
// 1000 and 4097 mixed in one batch, contiguous and paged caches (pages 16, 48, 64, 256, shuffled
// block tables), explicit and heuristic splits, causal / window / soft-cap, bf16 and fp16. Every
// cache slot past a sequence's length, and every page no sequence owns, holds NaN: none may reach
// an output. Outputs are poisoned before each call. Also: bitwise determinism, CUDA-graph replay
// with lengths changed on the device between replays, and the device guard (a length past the
// capacity or a page index out of range poisons that sequence's rows only).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "blockfuse/decode_attention.h"
#include "common/host_float.h"
#include "testing/device_buffer.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::DeviceBuffer;
using host::from_float;
using host::to_float;

template <class T>
DeviceBuffer<T> up(const std::vector<T>& h) {
  DeviceBuffer<T> d(h.size());
  if (!h.empty() && cudaMemcpy(d.data(), h.data(), d.bytes(), cudaMemcpyHostToDevice) != cudaSuccess)
    throw Error("cudaMemcpy to the device failed");
  return d;
}
template <class T>
std::vector<T> down(const DeviceBuffer<T>& d) {
  std::vector<T> h(d.size());
  if (!h.empty() && cudaMemcpy(h.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost) != cudaSuccess)
    throw Error("cudaMemcpy to the host failed");
  return h;
}

struct Case {
  int B, Sq, Hq, Hkv, D;
  std::vector<int> lens;  // cache_seqlens (before the new keys when append)
  int page = 0;           // 0: contiguous
  int splits = 0;         // 0: heuristic
  bool causal = false;
  int window_left = -1;
  float softcap = 0.f;
  bool append = false;
  bool interleaved = false;
  int rotary_dim = 0;  // 0: D
  bool rot_fp32 = true;
  DType dt = DType::kBF16;
};

std::string name(const Case& c) {
  std::string s = std::string(c.dt == DType::kBF16 ? "bf16" : "fp16") + "_B" + std::to_string(c.B) + "_Sq" +
                  std::to_string(c.Sq) + "_Hq" + std::to_string(c.Hq) + "_Hkv" + std::to_string(c.Hkv) + "_D" +
                  std::to_string(c.D) + "_page" + std::to_string(c.page) + "_splits" + std::to_string(c.splits);
  if (c.causal) s += "_causal";
  if (c.window_left >= 0) s += "_wl" + std::to_string(c.window_left);
  if (c.softcap > 0) s += "_softcap";
  if (c.append) s += std::string("_append") + (c.interleaved ? "_gptj" : "_neox") + (c.rot_fp32 ? "_f32" : "_f16") +
                     "_R" + std::to_string(c.rotary_dim);
  return s;
}

// Host state of one case: caches with NaN everywhere but the valid slots, the block table, inputs.
struct Host {
  int capacity, maxb, nblocks, rows_per_block, R, maxpos;
  std::vector<int> table;
  std::vector<uint16_t> k, v, q, kn, vn, cos16, sin16;
  std::vector<float> cosf, sinf;
  size_t slot(int b, int j, int h, const Case& c) const {
    int blk = b, row = j;
    if (c.page) blk = table[b * maxb + j / c.page], row = j % c.page;
    return ((size_t(blk) * rows_per_block + row) * c.Hkv + h) * c.D;
  }
};

Host make_host(const Case& c, std::mt19937_64& rng) {
  Host h{};
  int need = 1;
  for (int l : c.lens) need = std::max(need, l + (c.append ? c.Sq : 0));
  h.capacity = need + 3;
  if (c.page) {
    h.maxb = (h.capacity + c.page - 1) / c.page;
    h.nblocks = c.B * h.maxb + 3;  // three pages no sequence owns
    h.rows_per_block = c.page;
    h.capacity = h.maxb * c.page;
    std::vector<int> perm(h.nblocks);
    for (int i = 0; i < h.nblocks; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    h.table.assign(perm.begin(), perm.begin() + c.B * h.maxb);
  } else {
    h.maxb = 0, h.nblocks = c.B, h.rows_per_block = h.capacity;
    h.table = {0};
  }
  const size_t elems = size_t(h.nblocks) * h.rows_per_block * c.Hkv * c.D;
  const uint16_t nan = from_float(c.dt, NAN);
  h.k.assign(elems, nan), h.v.assign(elems, nan);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int b = 0; b < c.B; ++b)
    for (int j = 0; j < c.lens[b]; ++j)
      for (int hh = 0; hh < c.Hkv; ++hh)
        for (int d = 0; d < c.D; ++d) {
          h.k[h.slot(b, j, hh, c) + d] = from_float(c.dt, nd(rng));
          h.v[h.slot(b, j, hh, c) + d] = from_float(c.dt, nd(rng));
        }
  h.q.resize(size_t(c.B) * c.Sq * c.Hq * c.D), h.kn.resize(size_t(c.B) * c.Sq * c.Hkv * c.D), h.vn.resize(h.kn.size());
  for (auto& x : h.q) x = from_float(c.dt, nd(rng));
  for (auto& x : h.kn) x = from_float(c.dt, nd(rng));
  for (auto& x : h.vn) x = from_float(c.dt, nd(rng));
  h.R = c.rotary_dim ? c.rotary_dim : c.D;
  h.maxpos = h.capacity + 1;
  for (int p = 0; p < h.maxpos; ++p)
    for (int i = 0; i < h.R / 2; ++i) {
      const double th = p * std::pow(10000.0, -2.0 * i / h.R);
      h.cosf.push_back(float(std::cos(th))), h.sinf.push_back(float(std::sin(th)));
      h.cos16.push_back(from_float(c.dt, float(std::cos(th)))), h.sin16.push_back(from_float(c.dt, float(std::sin(th))));
    }
  return h;
}

// fp64 reference of out [B, Sq, Hq, D] and lse [B, Hq, Sq]; with append, the rotated q / k and the
// appended cache (rounded to the dtype, as the kernel stores them) are applied first.
void reference(const Case& c, const Host& h, std::vector<double>& out, std::vector<double>& lse,
               std::vector<float>* k_after, std::vector<float>* v_after) {
  std::vector<float> q(h.q.size()), k(h.k.size()), v(h.v.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = to_float(c.dt, h.q[i]);
  for (size_t i = 0; i < k.size(); ++i) k[i] = to_float(c.dt, h.k[i]), v[i] = to_float(c.dt, h.v[i]);
  auto table_at = [&](int p, int i, bool sin) -> double {
    if (c.rot_fp32) return (sin ? h.sinf : h.cosf)[size_t(p) * (h.R / 2) + i];
    return to_float(c.dt, (sin ? h.sin16 : h.cos16)[size_t(p) * (h.R / 2) + i]);
  };
  auto rope = [&](float* x, int pos) {
    std::vector<float> y(x, x + c.D);
    for (int d = 0; d < h.R; ++d) {
      int i, pr;
      double sg;
      if (c.interleaved) {
        i = d / 2, pr = d ^ 1, sg = (d & 1) ? 1 : -1;
      } else {
        const bool lo = d < h.R / 2;
        i = lo ? d : d - h.R / 2, pr = lo ? d + h.R / 2 : d - h.R / 2, sg = lo ? -1 : 1;
      }
      y[d] = to_float(c.dt, from_float(c.dt, float(x[d] * table_at(pos, i, false) + sg * x[pr] * table_at(pos, i, true))));
    }
    std::copy(y.begin(), y.end(), x);
  };
  if (c.append)
    for (int b = 0; b < c.B; ++b)
      for (int t = 0; t < c.Sq; ++t) {
        const int pos = c.lens[b] + t;
        for (int hh = 0; hh < c.Hq; ++hh) rope(&q[((size_t(b) * c.Sq + t) * c.Hq + hh) * c.D], pos);
        for (int hh = 0; hh < c.Hkv; ++hh) {
          float* dk = &k[h.slot(b, pos, hh, c)];
          float* dv = &v[h.slot(b, pos, hh, c)];
          const size_t src = ((size_t(b) * c.Sq + t) * c.Hkv + hh) * c.D;
          for (int d = 0; d < c.D; ++d) dk[d] = to_float(c.dt, h.kn[src + d]), dv[d] = to_float(c.dt, h.vn[src + d]);
          rope(dk, pos);
        }
      }
  if (k_after) *k_after = k, *v_after = v;
  const int G = c.Hq / c.Hkv;
  const double scale = 1.0 / std::sqrt(double(c.D));
  out.assign(q.size(), 0.0), lse.assign(size_t(c.B) * c.Hq * c.Sq, 0.0);
  for (int b = 0; b < c.B; ++b) {
    const int L = c.lens[b] + (c.append ? c.Sq : 0);
    for (int t = 0; t < c.Sq; ++t)
      for (int hh = 0; hh < c.Hq; ++hh) {
        const int pos = L - c.Sq + t;
        const int lo = c.window_left >= 0 ? std::max(0, pos - c.window_left) : 0;
        const int hi = c.causal ? std::min(L - 1, pos) : L - 1;
        const float* qr = &q[((size_t(b) * c.Sq + t) * c.Hq + hh) * c.D];
        std::vector<double> s;
        double mx = -INFINITY;
        for (int j = lo; j <= hi; ++j) {
          const float* kr = &k[h.slot(b, j, hh / G, c)];
          double a = 0;
          for (int d = 0; d < c.D; ++d) a += double(qr[d]) * kr[d];
          a *= scale;
          if (c.softcap > 0) a = c.softcap * std::tanh(a / c.softcap);
          s.push_back(a), mx = std::max(mx, a);
        }
        double sum = 0;
        for (double& x : s) x = std::exp(x - mx), sum += x;
        double* o = &out[((size_t(b) * c.Sq + t) * c.Hq + hh) * c.D];
        for (int j = lo; j <= hi; ++j) {
          const float* vr = &v[h.slot(b, j, hh / G, c)];
          for (int d = 0; d < c.D; ++d) o[d] += s[j - lo] / sum * vr[d];
        }
        lse[(size_t(b) * c.Hq + hh) * c.Sq + t] = s.empty() ? -INFINITY : mx + std::log(sum);
      }
  }
}

struct Device {
  DeviceBuffer<uint16_t> q, k, v, kn, vn, out, cos16, sin16;
  DeviceBuffer<int32_t> lens, table;
  DeviceBuffer<float> lse, cosf, sinf;
  DeviceBuffer<unsigned char> ws;
  size_t ws_bytes = 0;
};

Device upload(const Case& c, const Host& h) {
  Device d;
  d.q = up(h.q), d.k = up(h.k), d.v = up(h.v), d.kn = up(h.kn), d.vn = up(h.vn);
  d.out = DeviceBuffer<uint16_t>(h.q.size()), d.lse = DeviceBuffer<float>(size_t(c.B) * c.Hq * c.Sq);
  d.lens = up(std::vector<int32_t>(c.lens.begin(), c.lens.end())), d.table = up(std::vector<int32_t>(h.table.begin(), h.table.end()));
  d.cosf = up(h.cosf), d.sinf = up(h.sinf), d.cos16 = up(h.cos16), d.sin16 = up(h.sin16);
  d.ws_bytes = decode_attention_workspace_size(c.B, c.Sq, c.Hq, c.Hkv, c.D, h.capacity, c.splits, c.append);
  d.ws = DeviceBuffer<unsigned char>(std::max<size_t>(d.ws_bytes, 16));
  return d;
}

void call(const Case& c, const Host& h, Device& d, cudaStream_t stream = nullptr) {
  DecodeAttentionParams p;
  p.causal = c.causal, p.window_left = c.window_left, p.softcap = c.softcap, p.num_splits = c.splits;
  if (c.page) p.block_table = d.table.data(), p.max_blocks = h.maxb;
  const AttnConstTensor q = make_attn_tensor(static_cast<const void*>(d.q.data()), c.dt, c.B, c.Sq, c.Hq, c.D);
  const AttnTensor kc = make_attn_tensor(static_cast<void*>(d.k.data()), c.dt, h.nblocks, h.rows_per_block, c.Hkv, c.D);
  const AttnTensor vc = make_attn_tensor(static_cast<void*>(d.v.data()), c.dt, h.nblocks, h.rows_per_block, c.Hkv, c.D);
  const AttnTensor out = make_attn_tensor(static_cast<void*>(d.out.data()), c.dt, c.B, c.Sq, c.Hq, c.D);
  if (c.append) {
    RotaryParams r;
    r.cos = c.rot_fp32 ? static_cast<const void*>(d.cosf.data()) : d.cos16.data();
    r.sin = c.rot_fp32 ? static_cast<const void*>(d.sinf.data()) : d.sin16.data();
    r.fp32 = c.rot_fp32, r.rotary_dim = h.R, r.max_positions = h.maxpos;
    r.interleaved = c.interleaved;
    decode_attention_with_kvcache(q, kc, vc, make_attn_tensor(static_cast<const void*>(d.kn.data()), c.dt, c.B, c.Sq, c.Hkv, c.D),
                                  make_attn_tensor(static_cast<const void*>(d.vn.data()), c.dt, c.B, c.Sq, c.Hkv, c.D),
                                  d.lens.data(), r, out, d.lse.data(), p, d.ws.data(), d.ws_bytes, stream);
  } else {
    decode_attention(q, kc, vc, d.lens.data(), out, d.lse.data(), p, d.ws.data(), d.ws_bytes, stream);
  }
}

void poison(Device& d) {
  ASSERT_EQ(cudaMemset(d.out.data(), 0xff, d.out.bytes()), cudaSuccess);
  ASSERT_EQ(cudaMemset(d.lse.data(), 0xff, d.lse.bytes()), cudaSuccess);
}

void expect_matches(const Case& c, const Host& h, Device& d) {
  std::vector<double> ref, ref_lse;
  std::vector<float> k_after, v_after;
  reference(c, h, ref, ref_lse, &k_after, &v_after);
  const auto out = down(d.out);
  const auto lse = down(d.lse);
  const double tol = c.dt == DType::kBF16 ? 0.03 : 0.006;
  double worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double e = std::fabs(to_float(c.dt, out[i]) - ref[i]);
    if (!(e <= tol)) ++bad;
    if (e > worst || std::isnan(e)) worst = std::isnan(e) ? INFINITY : e;
  }
  EXPECT_EQ(bad, 0u) << "outputs off by more than " << tol << " (worst " << worst << ")";
  size_t bad_lse = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    const bool both_inf = std::isinf(ref_lse[i]) && lse[i] == ref_lse[i];
    if (!both_inf && !(std::fabs(lse[i] - ref_lse[i]) <= 1e-3 * std::max(1.0, std::fabs(ref_lse[i])))) ++bad_lse;
  }
  EXPECT_EQ(bad_lse, 0u) << "lse mismatches";
  if (c.append) {  // the new keys are in their slots, every other slot unchanged
    const auto k = down(d.k), v = down(d.v);
    size_t diff = 0;
    for (size_t i = 0; i < k.size(); ++i) {
      const float a = to_float(c.dt, k[i]), b = k_after[i], e = to_float(c.dt, v[i]), f = v_after[i];
      if (!((a == b) || (std::isnan(a) && std::isnan(b)))) ++diff;
      if (!((e == f) || (std::isnan(e) && std::isnan(f)))) ++diff;
    }
    EXPECT_EQ(diff, 0u) << "cache slots differ from the reference append";
  }
}

class DecodeAttentionGpu : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeAttentionGpu, MatchesReference) {
  BF_SKIP_WITHOUT_GPU("decode_attention");
  const Case c = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const Host h = make_host(c, rng);
  Device d = upload(c, h);
  poison(d);
  call(c, h, d);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_matches(c, h, d);
  if (!c.append) {  // bitwise determinism
    const auto first = down(d.out);
    poison(d);
    call(c, h, d);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(first == down(d.out)) << "two runs differ";
  }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  const std::vector<int> mixed = {0, 1, 63, 64, 65, 1000, 4097};
  v.push_back({7, 1, 32, 8, 128, mixed});
  v.push_back({7, 1, 32, 8, 128, mixed, 0, 1});
  v.push_back({7, 1, 32, 8, 128, mixed, 0, 7});
  v.push_back({7, 1, 32, 8, 128, mixed, 0, 128});
  v.push_back({7, 1, 32, 8, 128, mixed, 16});
  v.push_back({3, 1, 32, 8, 128, {65, 100, 2000}, 48, 5});
  v.push_back({3, 1, 32, 8, 128, {65, 100, 2000}, 256});
  v.push_back({2, 4, 32, 8, 128, {300, 1000}, 64, 0, true});
  v.push_back({2, 16, 28, 4, 128, {300, 1000}, 0, 3, true, 100});
  v.push_back({2, 5, 32, 1, 64, {300, 1000}, 0, 0, true, -1, 30.f});
  v.push_back({2, 3, 16, 16, 256, {300, 1000}, 256, 0, true, 50});
  v.push_back({2, 2, 8, 2, 64, {0, 77}, 0, 2});
  v.push_back({2, 1, 32, 1, 128, {5, 3000}, 16});
  v.push_back({2, 1, 8, 4, 256, {5, 3000}, 0, 0, false, 200});
  v.push_back({3, 2, 16, 2, 64, {1, 640, 2049}, 64, 0, true, -1, 0.f, false, false, 0, true, DType::kFP16});
  v.push_back({2, 1, 32, 8, 128, {10, 700}, 16, 0, false, -1, 0.f, true});
  v.push_back({2, 3, 32, 8, 128, {10, 700}, 0, 4, true, -1, 0.f, true, true, 64});
  v.push_back({2, 16, 32, 1, 128, {0, 33}, 0, 0, true, -1, 0.f, true, false, 0, false});
  v.push_back({2, 2, 8, 8, 64, {0, 33}, 32, 0, true, -1, 0.f, true, false, 32, false, DType::kFP16});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Cases, DecodeAttentionGpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return name(i.param); });

// A captured call replayed after the lengths changed on the device: the replay uses the new ones.
TEST(DecodeAttentionGpuGraph, ReplayReadsNewLengths) {
  BF_SKIP_WITHOUT_GPU("decode_attention");
  Case c{3, 1, 32, 8, 128, {100, 2000, 4000}, 16};
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const Host h = make_host(c, rng);
  Device d = upload(c, h);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  call(c, h, d, s);  // eager first
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  call(c, h, d, s);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (const std::vector<int>& lens : {std::vector<int>{7, 1999, 64}, std::vector<int>{0, 1, 3999}}) {
    c.lens = lens;
    ASSERT_EQ(cudaMemcpy(d.lens.data(), lens.data(), 12, cudaMemcpyHostToDevice), cudaSuccess);
    poison(d);
    ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    expect_matches(c, h, d);
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

// The device guard: a length past the capacity, or a page index out of range, gives NaN in that
// sequence's rows only; the other sequences are exact.
TEST(DecodeAttentionGpuGuard, BadLengthOrPagePoisonsOnlyItsSequence) {
  BF_SKIP_WITHOUT_GPU("decode_attention");
  for (int which : {0, 1}) {
    Case c{3, 1, 32, 8, 128, {100, 500, 900}, 16, 3};
    const uint64_t seed = testing::fresh_seed();
    SCOPED_TRACE(testing::seed_note(seed));
    std::mt19937_64 rng(seed);
    Host h = make_host(c, rng);
    Device d = upload(c, h);
    if (which == 0) {
      const int32_t past = h.capacity + 1;
      ASSERT_EQ(cudaMemcpy(d.lens.data() + 1, &past, 4, cudaMemcpyHostToDevice), cudaSuccess);
    } else {
      const int32_t page = h.nblocks + 5;
      ASSERT_EQ(cudaMemcpy(d.table.data() + 1 * h.maxb + 2, &page, 4, cudaMemcpyHostToDevice), cudaSuccess);
    }
    poison(d);
    call(c, h, d);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<double> ref, ref_lse;
    reference(c, h, ref, ref_lse, nullptr, nullptr);
    const auto out = down(d.out);
    const size_t per_seq = size_t(c.Sq) * c.Hq * c.D;
    size_t nan_rows = 0, off = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const float x = to_float(c.dt, out[i]);
      if (i / per_seq == 1)
        nan_rows += std::isnan(x);
      else
        off += !(std::fabs(x - ref[i]) <= 0.03);
    }
    EXPECT_EQ(nan_rows, per_seq) << "sequence 1 must be all NaN";
    EXPECT_EQ(off, 0u) << "the other sequences must be exact";
  }
}

}  // namespace
}  // namespace blockfuse
