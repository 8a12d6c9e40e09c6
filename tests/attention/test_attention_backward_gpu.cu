// attention_backward() on the device against the fp64 CPU reference (reference.cpp): batched and
// varlen (with an empty and a one-token sequence), lengths 1, 7, 127, 1000, Sq != Sk both ways, GQA
// ratios 1, 4, 8 and MQA, causal / sliding window / soft-cap, bf16 and fp16, D = 64 and 128. The
// forward runs first on the device (out and lse come from it, as in training); gradients are
// poisoned before each call, compared by relative Frobenius error per tensor, and a second call must
// give the same bits; then the non-deterministic mode (params.deterministic = false) the same way,
// with dk and dv bit for bit the deterministic mode's (sm80 kernels), and on Hopper the sm90a dK/dV
// kernel (kSm90 and kAuto, both modes) against the same bound and its own repeatability. The batched cases also check the fp32 GPU reference the benchmark verifies
// with (testing/attention_reference.h) against the fp64 one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "attention/reference.h"
#include "blockfuse/attention.h"
#include "common/host_float.h"
#include "testing/attention_reference.h"
#include "testing/device_buffer.h"
#include "testing/gtest/gtest_util.h"

namespace blockfuse {
namespace {

using testing::DeviceBuffer;

template <class T>
DeviceBuffer<T> up(const std::vector<T>& h) {
  DeviceBuffer<T> d(std::max<size_t>(h.size(), 1));
  if (!h.empty() && cudaMemcpy(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess)
    throw Error("cudaMemcpy to the device failed");
  return d;
}
template <class T>
std::vector<T> down(const DeviceBuffer<T>& d, size_t n) {
  std::vector<T> h(n);
  if (n && cudaMemcpy(h.data(), d.data(), n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
    throw Error("cudaMemcpy to the host failed");
  return h;
}

struct Case {
  int64_t b, sq, sk, hq, hkv, d;
  bool causal = false;
  int64_t left = -1, right = -1;
  float softcap = 0;
  DType dt = DType::kBF16;
  std::vector<int32_t> q_lens, k_lens;  // varlen when non-empty
};

std::string name(const Case& c) {
  std::string s = std::string(c.dt == DType::kBF16 ? "bf16" : "fp16") + "_B" + std::to_string(c.b) + "_Sq" +
                  std::to_string(c.sq) + "_Sk" + std::to_string(c.sk) + "_Hq" + std::to_string(c.hq) + "_Hkv" +
                  std::to_string(c.hkv) + "_D" + std::to_string(c.d);
  if (c.causal) s += "_causal";
  if (c.left >= 0) s += "_left" + std::to_string(c.left);
  if (c.softcap > 0) s += "_softcap";
  if (!c.q_lens.empty()) s += "_varlen";
  return s;
}

double rel_err(const std::vector<uint16_t>& got, DType dt, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = host::to_float(dt, got[i]), w = want[i];
    num += (g - w) * (g - w), den += w * w;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) num += double(got[i] - want[i]) * (got[i] - want[i]), den += double(want[i]) * want[i];
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Where a gradient [rows, heads, d] (batch folded into rows) is furthest from the reference: the
// element, its value and the reference's, and how many elements are off by more than 0.05 · max|want|
// (for a failure message: a wrong block, head or column pattern shows at once).
std::string worst(const std::vector<uint16_t>& got, DType dt, const std::vector<float>& want, int64_t heads, int64_t d) {
  size_t at = 0;
  double err = -1, scale = 0;
  for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(host::to_float(dt, got[i]) - want[i]);
    if (!(e <= err)) err = e, at = i;  // NaN counts as worst
    if (!(e <= 0.05 * scale)) ++bad;
  }
  if (want.empty()) return "empty";
  return "worst at row " + std::to_string(at / size_t(heads * d)) + ", head " + std::to_string((at / size_t(d)) % size_t(heads)) +
         ", col " + std::to_string(at % size_t(d)) + ": " + std::to_string(host::to_float(dt, got[at])) + " vs " +
         std::to_string(want[at]) + "; " + std::to_string(bad) + " of " + std::to_string(want.size()) + " elements off";
}

// Every mode and kernel of one case against the fp64 reference (see the header).
void run_case(const Case& c) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const bool varlen = !c.q_lens.empty();
  std::vector<int32_t> cu_q{0}, cu_k{0};
  for (size_t i = 0; i < c.q_lens.size(); ++i)
    cu_q.push_back(cu_q.back() + c.q_lens[i]), cu_k.push_back(cu_k.back() + c.k_lens[i]);
  const int64_t batch = varlen ? 1 : c.b, sq = varlen ? cu_q.back() : c.sq, sk = varlen ? cu_k.back() : c.sk;
  auto fill = [&](int64_t rows, int64_t heads) {
    std::vector<uint16_t> v(size_t(batch * rows * heads * c.d));
    for (auto& x : v) x = host::from_float(c.dt, nd(rng));
    return v;
  };
  const auto hq = fill(sq, c.hq), hk = fill(sk, c.hkv), hv = fill(sk, c.hkv), hdo = fill(sq, c.hq);
  auto dq_ = up(hq), dk_ = up(hk), dv_ = up(hv), ddo = up(hdo);
  DeviceBuffer<uint16_t> dout_(hq.size()), dgq(hq.size()), dgk(hk.size()), dgv(hv.size());
  DeviceBuffer<float> dlse(size_t(batch * sq * c.hq));
  auto cuq = up(cu_q), cuk = up(cu_k);
  AttentionParams p;
  p.causal = c.causal, p.window_left = c.left, p.window_right = c.right, p.softcap = c.softcap;
  if (varlen) {
    p.cu_seqlens_q = cuq.data(), p.cu_seqlens_k = cuk.data(), p.num_seqs = int64_t(c.q_lens.size());
    p.max_seqlen_q = *std::max_element(c.q_lens.begin(), c.q_lens.end());
    p.max_seqlen_k = *std::max_element(c.k_lens.begin(), c.k_lens.end());
    p.host_cu_seqlens_q = cu_q.data(), p.host_cu_seqlens_k = cu_k.data();
  }
  auto view = [&](const void* ptr, int64_t rows, int64_t heads) { return make_attn_tensor(ptr, c.dt, batch, rows, heads, c.d); };
  auto wview = [&](void* ptr, int64_t rows, int64_t heads) { return make_attn_tensor(ptr, c.dt, batch, rows, heads, c.d); };
  const AttnConstTensor q = view(dq_.data(), sq, c.hq), k = view(dk_.data(), sk, c.hkv), v = view(dv_.data(), sk, c.hkv);
  attention(q, k, v, wview(dout_.data(), sq, c.hq), dlse.data(), p);
  // Enough for every mode (on Hopper the deterministic sm90a mode adds its turn counters).
  const size_t ws_bytes = std::max(attention_backward_workspace_size(q, false), attention_backward_workspace_size(q, true));
  DeviceBuffer<unsigned char> ws(std::max<size_t>(ws_bytes, 16));
  auto run = [&] {
    BF_CUDA_OK(cudaMemset(dgq.data(), 0xff, dgq.bytes()));
    BF_CUDA_OK(cudaMemset(dgk.data(), 0xff, dgk.bytes()));
    BF_CUDA_OK(cudaMemset(dgv.data(), 0xff, dgv.bytes()));
    attention_backward(q, k, v, view(dout_.data(), sq, c.hq), view(ddo.data(), sq, c.hq), dlse.data(),
                       wview(dgq.data(), sq, c.hq), wview(dgk.data(), sk, c.hkv), wview(dgv.data(), sk, c.hkv), p,
                       ws.data(), ws_bytes);
    BF_CUDA_OK(cudaDeviceSynchronize());
  };
  p.kernel = AttentionKernel::kSm80;  // the sm80 kernels first (what kAuto runs off Hopper)
  run();
  const auto gq = down(dgq, hq.size()), gk = down(dgk, hk.size()), gv = down(dgv, hv.size());

  std::vector<float> rq, rk, rv;
  auto hview = [&](const std::vector<uint16_t>& h, int64_t rows, int64_t heads) {
    return make_attn_tensor(static_cast<const void*>(h.data()), c.dt, batch, rows, heads, c.d);
  };
  attn::attention_backward_reference(hview(hq, sq, c.hq), hview(hk, sk, c.hkv), hview(hv, sk, c.hkv),
                                     hview(hdo, sq, c.hq), p, rq, rk, rv);
  // bf16 inputs and one rounding of each gradient: a few 1e-3 of relative error; the bound leaves
  // room for the rounding of P and dS to the MMA's input type.
  const double tol = c.dt == DType::kBF16 ? 2.5e-2 : 6e-3;
  EXPECT_LE(rel_err(gq, c.dt, rq), tol) << "dq";
  EXPECT_LE(rel_err(gk, c.dt, rk), tol) << "dk";
  EXPECT_LE(rel_err(gv, c.dt, rv), tol) << "dv";
  if (!varlen) {
    // The GPU reference from the device forward's out and lse (what the kernel is given): fp32 with
    // bf16 / fp16 out in Dsum, so within about 1e-3 of the fp64 reference, which computes its own.
    DeviceBuffer<float> fq(hq.size()), fk(hk.size()), fv(hv.size());
    testing::attention_backward_reference_gpu(q, k, v, view(dout_.data(), sq, c.hq), view(ddo.data(), sq, c.hq),
                                              dlse.data(), p, fq.data(), fk.data(), fv.data());
    BF_CUDA_OK(cudaDeviceSynchronize());
    const double ref_tol = c.dt == DType::kBF16 ? 1e-2 : 2e-3;
    EXPECT_LE(rel_err(down(fq, hq.size()), rq), ref_tol) << "GPU reference dq";
    EXPECT_LE(rel_err(down(fk, hk.size()), rk), ref_tol) << "GPU reference dk";
    EXPECT_LE(rel_err(down(fv, hv.size()), rv), ref_tol) << "GPU reference dv";
  }
  run();  // determinism
  EXPECT_TRUE(down(dgq, hq.size()) == gq) << "dq differs between two calls";
  EXPECT_TRUE(down(dgk, hk.size()) == gk) << "dk differs between two calls";
  EXPECT_TRUE(down(dgv, hv.size()) == gv) << "dv differs between two calls";

  // The non-deterministic mode (dQ by atomics in the dK/dV kernel), sm80 kernels: the same bound
  // against fp64, and dk, dv bit for bit the deterministic mode's (the same code computes them).
  p.deterministic = false;
  run();
  EXPECT_LE(rel_err(down(dgq, hq.size()), c.dt, rq), tol) << "dq, atomics";
  EXPECT_TRUE(down(dgk, hk.size()) == gk) << "dk, atomics: not the deterministic mode's";
  EXPECT_TRUE(down(dgv, hv.size()) == gv) << "dv, atomics: not the deterministic mode's";

  // The sm90a dK/dV kernel (what kAuto runs on Hopper), both modes: the same bound against fp64;
  // dk and dv (a fixed order of accumulation) the same bits on a second call, and dq too in the
  // deterministic mode (its additions ordered by key block).
  if (!testing::attention_sm90_runnable()) return;
  for (bool deterministic : {true, false})
    for (AttentionKernel kernel : {AttentionKernel::kSm90, AttentionKernel::kAuto}) {
      p.kernel = kernel;
      p.deterministic = deterministic;
      const std::string what = std::string(deterministic ? "deterministic" : "atomics") + ", kernel " +
                               std::to_string(int(kernel)) + ": ";
      run();
      const auto sq9 = down(dgq, hq.size()), sk9 = down(dgk, hk.size()), sv9 = down(dgv, hv.size());
      EXPECT_LE(rel_err(sq9, c.dt, rq), tol) << "dq, sm90a, " << what << worst(sq9, c.dt, rq, c.hq, c.d);
      EXPECT_LE(rel_err(sk9, c.dt, rk), tol) << "dk, sm90a, " << what << worst(sk9, c.dt, rk, c.hkv, c.d);
      EXPECT_LE(rel_err(sv9, c.dt, rv), tol) << "dv, sm90a, " << what << worst(sv9, c.dt, rv, c.hkv, c.d);
      run();
      EXPECT_TRUE(down(dgk, hk.size()) == sk9) << "dk, sm90a, " << what << "differs between two calls";
      EXPECT_TRUE(down(dgv, hv.size()) == sv9) << "dv, sm90a, " << what << "differs between two calls";
      if (deterministic) EXPECT_TRUE(down(dgq, hq.size()) == sq9) << "dq, sm90a, " << what << "differs between two calls";
    }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back({2, 127, 127, 4, 4, 64});
  v.push_back({2, 127, 127, 4, 4, 128, true});
  v.push_back({1, 1000, 1000, 8, 2, 128, true});
  v.push_back({2, 7, 300, 8, 1, 64, true});          // Sq < Sk, MQA
  v.push_back({1, 300, 7, 4, 4, 128, true});         // Sq > Sk: rows without keys
  v.push_back({1, 257, 257, 8, 1, 128, false, 40, 0});
  // Soft-caps small enough that tanh bends at these logits (|scale·qk| ~ 1-3): a cap of 30 left
  // 1 − tanh² within 1e-3 of 1, so a wrong derivative could pass.
  v.push_back({1, 200, 200, 4, 2, 64, true, -1, -1, 2.f});
  v.push_back({1, 129, 200, 6, 2, 128, true, 50, -1, 3.f});  // GQA 3, Sq < Sk, window + soft-cap
  v.push_back({1, 150, 180, 4, 4, 64, false, 20, 30});      // a two-sided window, Sq != Sk
  v.push_back({2, 128, 513, 4, 1, 64, true, -1, -1, 0.f, DType::kFP16});  // a multiple of 64; 513 keys
  v.push_back({2, 65, 129, 4, 4, 128, false, -1, -1, 0.f, DType::kFP16});
  v.push_back({1, 1, 1, 4, 4, 64, true});
  v.push_back({1, 520, 700, 4, 2, 64});  // several 128-key blocks and 64-row query blocks, GQA 2
  // The issue's long length: 65 query blocks and 33 key blocks with a one-row / one-key tail, the
  // deterministic order over 33 key blocks (the fp64 CPU reference: ~10 s).
  v.push_back({1, 4097, 4097, 2, 1, 64, true});
  Case vl{3, 0, 0, 8, 2, 128, true};
  vl.q_lens = {100, 0, 1, 70}, vl.k_lens = {130, 5, 1, 70};
  vl.b = 4;
  v.push_back(vl);
  return v;
}
class AttentionBackwardGpu : public ::testing::TestWithParam<Case> {};
TEST_P(AttentionBackwardGpu, MatchesReference) {
  BF_SKIP_WITHOUT_GPU("attention_backward");
  run_case(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Cases, AttentionBackwardGpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return name(i.param); });

// A sequence's gradients do not depend on its neighbour's values: the sm90a kernel adds a partial
// query block's whole 64-row span into dq_accum, which runs into the next sequence's rows, so those
// rows must be added as zeros, not as the partial computed there. With an infinite key in batch 0
// the partial's rows past batch 0's end are 0 · inf = NaN; batch 1's dq must stay what it is without
// the infinity, bit for bit in the deterministic mode, for every kernel and mode.
TEST(AttentionBackwardGpuIsolation, AnInfiniteKeyStaysInItsSequence) {
  BF_SKIP_WITHOUT_GPU("attention_backward");
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t d : {64, 128}) {
    const int64_t b = 2, s = 100, h = 2;  // 100 rows: batch 0's second block ends 28 rows into batch 1
    const DType dt = DType::kBF16;
    auto fill = [&] {
      std::vector<uint16_t> v(size_t(b * s * h * d));
      for (auto& x : v) x = host::from_float(dt, nd(rng));
      return v;
    };
    const auto hq = fill(), hk = fill(), hv = fill(), hdo = fill();
    auto hk_inf = hk;
    hk_inf[size_t((0 * s + 5) * h + 0) * d + 3] = host::from_float(dt, INFINITY);  // batch 0, key 5, head 0
    const size_t batch1 = size_t(s * h * d), n = hq.size();
    auto dq_ = up(hq), dv_ = up(hv), ddo = up(hdo);
    DeviceBuffer<uint16_t> out(n), gq(n), gk(n), gv(n);
    DeviceBuffer<float> lse(size_t(b * s * h));
    auto view = [&](const void* ptr) { return make_attn_tensor(ptr, dt, b, s, h, d); };
    auto wview = [&](void* ptr) { return make_attn_tensor(ptr, dt, b, s, h, d); };
    const size_t ws_bytes =
        std::max(attention_backward_workspace_size(view(dq_.data()), false), attention_backward_workspace_size(view(dq_.data()), true));
    DeviceBuffer<unsigned char> ws(ws_bytes);
    std::vector<AttentionKernel> kernels{AttentionKernel::kSm80};
    if (testing::attention_sm90_runnable()) kernels.push_back(AttentionKernel::kSm90);
    for (AttentionKernel kernel : kernels)
      for (bool deterministic : {true, false}) {
        AttentionParams p;
        p.kernel = kernel, p.deterministic = deterministic;
        auto grads = [&](const std::vector<uint16_t>& keys, std::vector<uint16_t>& dq_host) {
          auto dk_ = up(keys);
          attention(view(dq_.data()), view(dk_.data()), view(dv_.data()), wview(out.data()), lse.data(), p);
          BF_CUDA_OK(cudaMemset(gq.data(), 0xff, gq.bytes()));
          attention_backward(view(dq_.data()), view(dk_.data()), view(dv_.data()), view(out.data()), view(ddo.data()),
                             lse.data(), wview(gq.data()), wview(gk.data()), wview(gv.data()), p, ws.data(), ws_bytes);
          BF_CUDA_OK(cudaDeviceSynchronize());
          dq_host = down(gq, n);
        };
        std::vector<uint16_t> clean, planted;
        grads(hk, clean);
        grads(hk_inf, planted);
        const std::string what = "D " + std::to_string(d) + ", kernel " + std::to_string(int(kernel)) +
                                 (deterministic ? ", deterministic" : ", unordered");
        double worst = 0;
        for (size_t i = batch1; i < n; ++i) {
          const float a = host::to_float(dt, clean[i]), c = host::to_float(dt, planted[i]);
          ASSERT_TRUE(std::isfinite(c)) << what << ": batch 1's dq element " << i - batch1 << " is " << c;
          worst = std::max(worst, double(std::fabs(a - c)));
        }
        if (deterministic) EXPECT_EQ(worst, 0.0) << what << ": batch 1's dq changed with batch 0's keys";
        else EXPECT_LE(worst, 1e-2) << what << ": batch 1's dq changed with batch 0's keys";
        // And the infinity did reach batch 0 (the test plants what it means to).
        bool nonfinite = false;
        for (size_t i = 0; i < batch1; ++i) nonfinite |= !std::isfinite(host::to_float(dt, planted[i]));
        EXPECT_TRUE(nonfinite) << what << ": the planted infinity did not reach batch 0's dq";
      }
  }
}

// The compute-sanitizer set (scripts/sanitize runs '*Sanitizer*'): small cases reaching a partial
// key block, a partial query block, GQA and, packed, a sequence boundary inside a TMA box, through
// every kernel and mode (on Hopper the sm90a kernel's turn counters and bulk reductions too).
std::vector<Case> sanitizer_cases() {
  std::vector<Case> v;
  v.push_back({1, 70, 130, 4, 2, 64, true});
  Case vl{2, 0, 0, 4, 2, 128, false};
  vl.q_lens = {70, 9}, vl.k_lens = {150, 20};
  vl.b = 2;
  v.push_back(vl);
  return v;
}
class AttentionBackwardSanitizer : public ::testing::TestWithParam<Case> {};
TEST_P(AttentionBackwardSanitizer, Small) {
  BF_SKIP_WITHOUT_GPU("attention_backward");
  run_case(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBackwardSanitizer, ::testing::ValuesIn(sanitizer_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return name(i.param); });

}  // namespace
}  // namespace blockfuse
