// attention() on the device against the fp64 CPU reference (small shapes) or the fp32 GPU reference
// (large shapes; itself checked against the CPU reference here): lengths 1 .. 4097 with tails,
// Sq != Sk both ways, GQA ratios 1, 2, 4, 8 and MQA, causal / sliding window / soft-cap, varlen with
// empty and length-1 sequences, fused-QKV strides, a NaN query row, bitwise determinism and CUDA
// graph replay, both dtypes, D = 64, 128, 256. The AttentionSanitizer tests are the small set that
// scripts/sanitize runs under compute-sanitizer. A case with params.kernel = kAuto runs twice: with
// kSm80, and with kAuto where kAuto picks the sm90a kernel (an sm90a build on a compute capability
// 9.0 device, D = 64 or 128, batched). The *Sm90* tests ask for kSm90 (they skip where it cannot run)
// and add its agreement with the sm80 kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "attention/reference.h"
#include "blockfuse/attention.h"
#include "testing/gtest/gtest_util.h"
#include "testing/attention_reference.h"
#include "testing/device_buffer.h"
#include "testing/testing.h"

namespace blockfuse {
namespace {

using testing::DeviceBuffer;

struct Case {
  int64_t b, sq, sk, hq, hkv, d;
  bool causal = false;
  int64_t left = -1, right = -1;
  float softcap = 0;
  DType dt = DType::kBF16;
  bool fused = false;  // q, k, v as views of one [B, S, (Hq + 2 Hkv) D] buffer (requires sq == sk)
  float scale = 0;
  AttentionKernel kernel = AttentionKernel::kAuto;
  int block_m = 0;  // AttentionParams::sm90_block_m (0: the heuristic's)
  bool counter = false;  // AttentionParams::sm90_tile_counter (banded shapes: the dynamic persistent walk)
};

bool sm90_runnable() { return testing::attention_sm90_runnable(); }
// Whether params.kernel = kAuto runs the sm90a kernel for a batched case of head dim d here.
bool auto_is_sm90(int64_t d) { return sm90_runnable() && (d == 64 || d == 128); }
#define BF_SKIP_WITHOUT_SM90(kernel)                                                                  \
  if ((kernel) == AttentionKernel::kSm90 && !sm90_runnable())                                         \
  GTEST_SKIP() << "the sm90a attention kernel needs a build with it (attention_has_sm90() = "         \
               << attention_has_sm90() << ") and a compute capability 9.0 device"

std::string describe(const Case& c) {
  return "B" + std::to_string(c.b) + " Sq" + std::to_string(c.sq) + " Sk" + std::to_string(c.sk) + " Hq" +
         std::to_string(c.hq) + " Hkv" + std::to_string(c.hkv) + " D" + std::to_string(c.d) +
         (c.causal ? " causal" : "") + " win(" + std::to_string(c.left) + "," + std::to_string(c.right) + ")" +
         " cap" + std::to_string(c.softcap) + (c.dt == DType::kBF16 ? " bf16" : " fp16") + (c.fused ? " fused" : "") +
         " kernel " + kernel_name(c.kernel);
}

// Device inputs, their host copies (same strides) and the output buffers.
struct Problem {
  Case c;
  DeviceBuffer<uint16_t> qb, kb, vb, ob;
  DeviceBuffer<float> lseb;
  DeviceBuffer<int32_t> counter;  // two int32 when c.counter
  std::vector<uint16_t> hq, hk, hv;
  AttnConstTensor q, k, v;
  AttnTensor out;
  AttentionParams p;
  int64_t out_rows = 0, lse_count = 0;

  // Views with the same strides over other base pointers (host copies).
  static AttnConstTensor rebase(AttnConstTensor t, const void* old_base, const void* new_base) {
    const auto off = static_cast<const char*>(t.data) - static_cast<const char*>(old_base);
    t.data = static_cast<const char*>(new_base) + off;
    return t;
  }
  AttnConstTensor host_q() const { return rebase(q, qb.data(), hq.data()); }
  AttnConstTensor host_k() const { return rebase(k, c.fused ? qb.data() : kb.data(), c.fused ? hq.data() : hk.data()); }
  AttnConstTensor host_v() const { return rebase(v, c.fused ? qb.data() : vb.data(), c.fused ? hq.data() : hv.data()); }
};

void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

// 0.3 -> "0p3": a number as it may stand in a gtest name.
std::string decimal(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", double(v));
  std::string t = buf;
  std::replace(t.begin(), t.end(), '.', 'p');
  return t;
}

// The gtest name of a case: B1_Sq7_Sk7_Hq4_Hkv1_D128_causal_bf16 (window, cap, scale, fused when set).
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string n = "B" + std::to_string(c.b) + "_Sq" + std::to_string(c.sq) + "_Sk" + std::to_string(c.sk) + "_Hq" +
                  std::to_string(c.hq) + "_Hkv" + std::to_string(c.hkv) + "_D" + std::to_string(c.d);
  if (c.causal) n += "_causal";
  if (c.left >= 0) n += "_left" + std::to_string(c.left);
  if (c.right >= 0) n += "_right" + std::to_string(c.right);
  if (c.softcap > 0) n += "_cap" + decimal(c.softcap);
  if (c.scale > 0) n += "_scale" + decimal(c.scale);
  if (c.fused) n += "_fused";
  if (c.kernel != AttentionKernel::kAuto) n += std::string("_") + kernel_name(c.kernel);
  if (c.block_m != 0) n += "_m" + std::to_string(c.block_m);
  if (c.counter) n += "_dyn";
  return n + "_" + dtype_name(c.dt);
}

void download(std::vector<uint16_t>& h, const DeviceBuffer<uint16_t>& d) {
  h.resize(d.size());
  if (d.size()) ASSERT_EQ(cudaMemcpy(h.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
}

void make_problem(Problem& pr, const Case& c, uint64_t seed) {
  pr.c = c;
  const int64_t D = c.d;
  if (c.fused) {
    const int64_t H = c.hq + 2 * c.hkv, row = H * D;
    pr.qb = DeviceBuffer<uint16_t>(size_t(c.b * c.sq * row));
    testing::fill_uniform(Matrix{pr.qb.data(), c.dt, c.b * c.sq, row, row}, -2.0f, 2.0f, seed);
    uint16_t* base = pr.qb.data();
    pr.q = AttnConstTensor{base, c.dt, c.b, c.sq, c.hq, D, c.sq * row, row, D};
    pr.k = AttnConstTensor{base + c.hq * D, c.dt, c.b, c.sk, c.hkv, D, c.sk * row, row, D};
    pr.v = AttnConstTensor{base + (c.hq + c.hkv) * D, c.dt, c.b, c.sk, c.hkv, D, c.sk * row, row, D};
  } else {
    pr.qb = DeviceBuffer<uint16_t>(size_t(c.b * c.sq * c.hq * D));
    pr.kb = DeviceBuffer<uint16_t>(size_t(c.b * c.sk * c.hkv * D));
    pr.vb = DeviceBuffer<uint16_t>(size_t(c.b * c.sk * c.hkv * D));
    testing::fill_uniform(Matrix{pr.qb.data(), c.dt, c.b * c.sq * c.hq, D, D}, -2.0f, 2.0f, seed);
    testing::fill_uniform(Matrix{pr.kb.data(), c.dt, c.b * c.sk * c.hkv, D, D}, -2.0f, 2.0f, seed + 1);
    testing::fill_uniform(Matrix{pr.vb.data(), c.dt, c.b * c.sk * c.hkv, D, D}, -1.0f, 1.0f, seed + 2);
    pr.q = make_attn_tensor(pr.qb.data(), c.dt, c.b, c.sq, c.hq, D);
    pr.k = make_attn_tensor(pr.kb.data(), c.dt, c.b, c.sk, c.hkv, D);
    pr.v = make_attn_tensor(pr.vb.data(), c.dt, c.b, c.sk, c.hkv, D);
  }
  pr.out_rows = c.b * c.sq;
  pr.lse_count = c.b * c.hq * c.sq;
  pr.ob = DeviceBuffer<uint16_t>(size_t(pr.out_rows * c.hq * D));
  pr.lseb = DeviceBuffer<float>(size_t(pr.lse_count));
  pr.out = make_attn_tensor(pr.ob.data(), c.dt, c.b, c.sq, c.hq, D);
  pr.p.causal = c.causal;
  pr.p.window_left = c.left;
  pr.p.window_right = c.right;
  pr.p.softcap = c.softcap;
  pr.p.softmax_scale = c.scale;
  pr.p.kernel = c.kernel;
  pr.p.sm90_block_m = c.block_m;
  if (c.counter) {
    pr.counter = DeviceBuffer<int32_t>(2);
    BF_CUDA_OK(cudaMemset(pr.counter.data(), 0, pr.counter.bytes()));
    pr.p.sm90_tile_counter = pr.counter.data();
    pr.p.sm90_schedule = Sm90Schedule::kDynamic;  // every shape walks it (kAuto: TileCounterUnderAuto)
  }
}

void poison(Problem& pr) {
  testing::fill_bits(Matrix{pr.ob.data(), pr.c.dt, pr.out_rows * pr.c.hq, pr.c.d, pr.c.d}, testing::nan_bits(pr.c.dt));
  ASSERT_EQ(cudaMemset(pr.lseb.data(), 0xff, pr.lseb.bytes()), cudaSuccess);  // NaN
}

// The reference: fp64 on the host for small problems, fp32 on the device otherwise.
void reference(const Problem& pr, bool on_gpu, std::vector<float>& out, std::vector<float>& lse) {
  if (!on_gpu) {
    Problem& m = const_cast<Problem&>(pr);
    download(m.hq, pr.qb);
    if (!pr.c.fused) {
      download(m.hk, pr.kb);
      download(m.hv, pr.vb);
    }
    attn::attention_reference(pr.host_q(), pr.host_k(), pr.host_v(), pr.p, out, lse);
    return;
  }
  DeviceBuffer<float> ro(size_t(pr.out_rows * pr.c.hq * pr.c.d)), rl(size_t(pr.lse_count));
  testing::attention_reference_gpu(pr.q, pr.k, pr.v, pr.p, ro.data(), rl.data());
  out.resize(ro.size());
  lse.resize(rl.size());
  ASSERT_EQ(cudaMemcpy(out.data(), ro.data(), ro.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(lse.data(), rl.data(), rl.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
}

float to_f(DType t, uint16_t b) { return host::to_float(t, b); }

// Compares out / lse with the reference (testing/compare.h). Rows listed in nan_rows ((row * Hq + h)
// indices) are expected NaN instead. Returns the number of elements out of tolerance or non-finite
// (and reports the first of each comparison).
int64_t check(const Problem& pr, const std::vector<float>& ref_o, const std::vector<float>& ref_l,
              const std::vector<int64_t>& nan_rows = {}) {
  std::vector<uint16_t> o;
  std::vector<float> l(size_t(pr.lse_count));
  download(o, pr.ob);
  EXPECT_EQ(cudaMemcpy(l.data(), pr.lseb.data(), pr.lseb.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  const Case& c = pr.c;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto is_nan_row = [&](int64_t rh) { return std::find(nan_rows.begin(), nan_rows.end(), rh) != nan_rows.end(); };
  // P is rounded to the input type before P·V (relative u per weight, |v| <= 1) and O once at the end:
  // two roundings, atol 2u + 1e-4. Rows: (row, head), columns: d.
  const testing::Tolerance tol = testing::tolerance(c.dt, 2, 2 * testing::unit_roundoff(c.dt) + 1e-4);
  testing::CompareStats so;
  for (int64_t r = 0; r < pr.out_rows; ++r)
    for (int64_t h = 0; h < c.hq; ++h) {
      const int64_t rh = r * c.hq + h;
      const bool nan_row = is_nan_row(rh);
      for (int64_t d = 0; d < c.d; ++d)
        so.add(rh, d, to_f(c.dt, o[size_t(rh * c.d + d)]), nan_row ? nan : ref_o[size_t(rh * c.d + d)], tol);
    }
  // LSE: [B, Hq, Sq] (rows: b·Hq + head, columns: the query row); the fp32 exp2/log and tanh.approx
  // leave ~1e-4 relative. A row without keys has LSE -inf in both.
  testing::CompareStats sl;
  for (int64_t i = 0; i < pr.lse_count; ++i) {
    const int64_t b = i / (c.hq * c.sq), h = (i / c.sq) % c.hq, s = i % c.sq;
    const int64_t rh = (b * c.sq + s) * c.hq + h;
    sl.add(b * c.hq + h, s, l[size_t(i)], is_nan_row(rh) ? nan : ref_l[size_t(i)], testing::Tolerance{2e-3, 2e-4});
  }
  testing::expect_close(so, describe(c) + ": out (row·Hq + head, d)");
  testing::expect_close(sl, describe(c) + ": lse (b·Hq + head, row)");
  return so.violations + so.nonfinite + sl.violations + sl.nonfinite;
}

void run_one(const Case& c, bool gpu_ref) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed) + " " + describe(c));
  Problem pr;
  make_problem(pr, c, seed);
  poison(pr);
  attention(pr.q, pr.k, pr.v, pr.out, pr.lseb.data(), pr.p);
  BF_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> ro, rl;
  reference(pr, gpu_ref, ro, rl);
  EXPECT_EQ(check(pr, ro, rl), 0);
}

// kAuto: the sm80 kernel explicitly, then kAuto itself where it picks the sm90a kernel (so both
// kernels see every case on a Hopper GPU).
void run_case(const Case& c, bool gpu_ref) {
  BF_SKIP_WITHOUT_GPU("attention");
  BF_SKIP_WITHOUT_SM90(c.kernel);
  if (c.kernel != AttentionKernel::kAuto) return run_one(c, gpu_ref);
  Case c80 = c;
  c80.kernel = AttentionKernel::kSm80;
  run_one(c80, gpu_ref);
  if (auto_is_sm90(c.d)) run_one(c, gpu_ref);
}

class AttentionGpuSmall : public ::testing::TestWithParam<Case> {};
TEST_P(AttentionGpuSmall, MatchesCpuReference) { run_case(GetParam(), false); }
INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGpuSmall,
    ::testing::Values(Case{1, 1, 1, 1, 1, 64}, Case{1, 1, 1, 2, 1, 128, true}, Case{2, 7, 7, 4, 1, 128, true},
                      Case{1, 7, 7, 2, 2, 256, false, -1, -1, 0, DType::kFP16},
                      Case{1, 127, 127, 8, 2, 128, true, -1, -1, 0, DType::kFP16, true},
                      Case{2, 127, 300, 4, 4, 64}, Case{2, 127, 300, 4, 4, 64, true},
                      Case{1, 300, 127, 4, 4, 128, true},  // Sq > Sk: 173 rows see no key
                      Case{1, 200, 200, 8, 1, 256, false, -1, -1, 0, DType::kBF16, true},
                      Case{1, 257, 257, 4, 2, 128, false, 32, 16}, Case{1, 300, 300, 2, 2, 64, true, 64},
                      Case{1, 200, 260, 4, 2, 128, true, 0, -1},  // only the diagonal key
                      Case{1, 200, 200, 4, 2, 128, true, -1, -1, 2.0f}, Case{1, 150, 190, 4, 1, 64, false, 20, 5, 3.0f, DType::kFP16},
                      Case{1, 129, 129, 8, 1, 128, false, -1, -1, 0, DType::kBF16, false, 0.3f}),
    case_name);

class AttentionGpuLarge : public ::testing::TestWithParam<Case> {};
TEST_P(AttentionGpuLarge, MatchesGpuReference) { run_case(GetParam(), true); }
INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGpuLarge,
    ::testing::Values(Case{1, 1000, 1000, 32, 8, 128, true},                         // Llama GQA 4
                      Case{1, 1000, 1000, 8, 4, 256, true, -1, -1, 50.0f},          // Gemma-2: GQA 2, soft-cap
                      Case{2, 1000, 1000, 16, 2, 64, false, -1, -1, 0, DType::kFP16},  // GQA 8
                      Case{1, 1000, 4097, 8, 8, 128, true},                          // chunked prefill
                      Case{1, 4097, 4097, 4, 1, 128, true},                          // MQA
                      Case{1, 4097, 4097, 2, 2, 64, false, 1024, 0, 0, DType::kFP16, true},
                      Case{1, 4097, 1000, 4, 2, 128, false}),
    case_name);

// The fp32 GPU reference against the fp64 CPU reference (it stands in for the latter above).
TEST(AttentionGpuReference, MatchesCpuReference) {
  BF_SKIP_WITHOUT_GPU("attention_reference_gpu");
  for (const Case& c : {Case{2, 77, 131, 4, 2, 128, true, 50, -1, 3.0f}, Case{1, 90, 60, 2, 1, 256, false, 10, 20},
                        Case{1, 33, 33, 2, 2, 64, false, -1, -1, 0, DType::kFP16, true}}) {
    const uint64_t seed = testing::fresh_seed();
    SCOPED_TRACE(testing::seed_note(seed) + " " + describe(c));
    Problem pr;
    make_problem(pr, c, seed);
    std::vector<float> go, gl, co, cl;
    reference(pr, true, go, gl);
    reference(pr, false, co, cl);
    const auto flat = [](const std::vector<float>& v) { return [&v](int64_t, int64_t i) { return v[size_t(i)]; }; };
    testing::expect_close(testing::compare_host(1, int64_t(go.size()), flat(go), flat(co), testing::Tolerance{1e-4, 0}),
                          "out: GPU vs CPU reference");
    testing::expect_close(testing::compare_host(1, int64_t(gl.size()), flat(gl), flat(cl), testing::Tolerance{1e-4, 1e-4}),
                          "lse: GPU vs CPU reference (-inf where a row has no keys)");
  }
}

// Varlen: q lengths 5, 0, 1, 130, 7, 1 and k lengths 9, 4, 1, 130, 0, 200 (an empty sequence, a
// query without keys, length-1 sequences), causal and not, GQA 2; a NaN in a V row that only a
// neighbouring sequence's key box covers.
void run_varlen(bool causal, DType dt, int64_t D, AttentionKernel kernel = AttentionKernel::kAuto, int block_m = 0,
                bool counter = false) {
  BF_SKIP_WITHOUT_GPU("attention (varlen)");
  BF_SKIP_WITHOUT_SM90(kernel);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  const std::vector<int32_t> lq{5, 0, 1, 130, 7, 1}, lk{9, 4, 1, 130, 0, 200};
  std::vector<int32_t> cq(1, 0), ck(1, 0);
  for (size_t i = 0; i < lq.size(); ++i) cq.push_back(cq.back() + lq[i]), ck.push_back(ck.back() + lk[i]);
  const int64_t tq = cq.back(), tk = ck.back(), hq = 4, hkv = 2;
  Case c{1, tq, tk, hq, hkv, D, causal};
  c.dt = dt;
  c.kernel = kernel;
  c.block_m = block_m;
  c.counter = counter;
  Problem pr;
  make_problem(pr, c, seed);
  // A NaN in V at the first key of sequence 1 (no queries, so no output reads it legitimately), row 9
  // of the packed k: sequence 0's 9 keys are a partial key box that covers it. It must not leak.
  const uint16_t nan = testing::nan_bits(dt);
  BF_CUDA_OK(cudaMemcpy(pr.vb.data() + (int64_t(ck[1]) * hkv + 0) * D + 3, &nan, 2, cudaMemcpyHostToDevice));
  DeviceBuffer<int32_t> dq(cq.size()), dk(ck.size());
  BF_CUDA_OK(cudaMemcpy(dq.data(), cq.data(), dq.bytes(), cudaMemcpyHostToDevice));
  BF_CUDA_OK(cudaMemcpy(dk.data(), ck.data(), dk.bytes(), cudaMemcpyHostToDevice));
  pr.p.cu_seqlens_q = dq.data();
  pr.p.cu_seqlens_k = dk.data();
  pr.p.num_seqs = int64_t(lq.size());
  pr.p.max_seqlen_q = 130;
  pr.p.max_seqlen_k = 200;
  pr.p.host_cu_seqlens_q = cq.data();
  pr.p.host_cu_seqlens_k = ck.data();
  poison(pr);
  attention(pr.q, pr.k, pr.v, pr.out, pr.lseb.data(), pr.p);
  BF_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> ro, rl;
  reference(pr, false, ro, rl);
  // Varlen LSE is [Hq, total]: the same element count as [1, Hq, total], which check() assumes.
  EXPECT_EQ(check(pr, ro, rl), 0);
}
TEST(AttentionGpuVarlen, CausalBf16D128) { run_varlen(true, DType::kBF16, 128); }
TEST(AttentionGpuVarlen, NonCausalFp16D64) { run_varlen(false, DType::kFP16, 64); }

// A NaN in one query row of head 1 stays in that row (out and LSE), every other row as the reference.
void check_nan_row_stays(Case c) {
  BF_SKIP_WITHOUT_GPU("attention");
  BF_SKIP_WITHOUT_SM90(c.kernel);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed) + " " + describe(c));
  Problem pr;
  make_problem(pr, c, seed);
  const int64_t row = 77, head = 1;
  const uint16_t nan = testing::nan_bits(c.dt);
  BF_CUDA_OK(cudaMemcpy(pr.qb.data() + (row * c.hq + head) * c.d + 5, &nan, 2, cudaMemcpyHostToDevice));
  poison(pr);
  attention(pr.q, pr.k, pr.v, pr.out, pr.lseb.data(), pr.p);
  BF_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> ro, rl;
  reference(pr, false, ro, rl);
  EXPECT_EQ(check(pr, ro, rl, {row * c.hq + head}), 0);
}

// Two calls on the same inputs give the same bits (out and LSE).
void check_bitwise_deterministic(Case c) {
  BF_SKIP_WITHOUT_GPU("attention");
  BF_SKIP_WITHOUT_SM90(c.kernel);
  SCOPED_TRACE(describe(c));
  Problem pr;
  make_problem(pr, c, testing::fresh_seed());
  std::vector<uint16_t> o1, o2;
  std::vector<float> l1(size_t(pr.lse_count)), l2(size_t(pr.lse_count));
  for (auto* dst : {&o1, &o2}) {
    poison(pr);
    attention(pr.q, pr.k, pr.v, pr.out, pr.lseb.data(), pr.p);
    BF_CUDA_OK(cudaDeviceSynchronize());
    download(*dst, pr.ob);
    BF_CUDA_OK(cudaMemcpy((dst == &o1 ? l1 : l2).data(), pr.lseb.data(), pr.lseb.bytes(), cudaMemcpyDeviceToHost));
  }
  EXPECT_EQ(std::memcmp(o1.data(), o2.data(), o1.size() * 2), 0);
  EXPECT_EQ(std::memcmp(l1.data(), l2.data(), l1.size() * 4), 0);
}

// A captured call replayed after new inputs were written at the captured pointers sees them (the
// sm90a kernel's TMA descriptors are encoded into its parameters at capture).
void check_graph_replay(Case c) {
  BF_SKIP_WITHOUT_GPU("attention");
  BF_SKIP_WITHOUT_SM90(c.kernel);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed) + " " + describe(c));
  Problem pr;
  make_problem(pr, c, seed);
  cudaStream_t s;
  BF_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  BF_CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  attention(pr.q, pr.k, pr.v, pr.out, pr.lseb.data(), pr.p, s);
  BF_CUDA_OK(cudaStreamEndCapture(s, &g));
  BF_CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 2; ++rep) {
    // New inputs, poisoned outputs, then only the replay: the output must match the new inputs.
    testing::fill_uniform(Matrix{pr.qb.data(), c.dt, c.sq * c.hq, c.d, c.d}, -2.0f, 2.0f, seed + 100 + rep);
    poison(pr);
    BF_CUDA_OK(cudaDeviceSynchronize());
    BF_CUDA_OK(cudaGraphLaunch(ge, s));
    BF_CUDA_OK(cudaStreamSynchronize(s));
    std::vector<float> ro, rl;
    reference(pr, false, ro, rl);
    EXPECT_EQ(check(pr, ro, rl), 0) << "replay " << rep;
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

// The sm80 kernel explicitly (kAuto would run the sm90a one on Hopper: AttentionGpuSm90.*).
Case sm80(Case c) {
  c.kernel = AttentionKernel::kSm80;
  return c;
}

TEST(AttentionGpu, NanInOneQueryRowStaysInThatRow) { check_nan_row_stays(sm80(Case{1, 200, 200, 4, 2, 128, true})); }

TEST(AttentionGpu, BitwiseDeterministic) { check_bitwise_deterministic(sm80(Case{2, 1000, 1000, 8, 2, 128, true})); }

TEST(AttentionGpu, CudaGraphReplaySeesNewInputs) {
  check_graph_replay(sm80(Case{1, 300, 300, 4, 2, 64, true, -1, -1, 0, DType::kFP16}));
}

// Every compiled tile configuration (not only the heuristic's) on a shape with tails.
TEST(AttentionGpu, EveryTileConfig) {
  BF_SKIP_WITHOUT_GPU("attention");
  for (int64_t d : {64, 128, 256})
    for (int i = 0; i < attention_num_configs(d); ++i) {
      const uint64_t seed = testing::fresh_seed();
      const AttentionConfig cfg = attention_config(d, i);
      SCOPED_TRACE(testing::seed_note(seed) + " D " + std::to_string(d) + " config " + std::to_string(i));
      Case c{1, 190, 250, 4, 2, d, true, 100, -1};
      Problem pr;
      make_problem(pr, c, seed);
      poison(pr);
      attention(pr.q, pr.k, pr.v, pr.out, pr.lseb.data(), pr.p, cfg);
      BF_CUDA_OK(cudaDeviceSynchronize());
      std::vector<float> ro, rl;
      reference(pr, false, ro, rl);
      EXPECT_EQ(check(pr, ro, rl), 0);
    }
}

// The compute-sanitizer set (scripts/sanitize runs '*Sanitizer*'): small grids reaching the tails,
// the masks, the no-key rows, varlen and every head dim.
class AttentionSanitizer : public ::testing::TestWithParam<Case> {};
TEST_P(AttentionSanitizer, Small) { run_case(GetParam(), false); }
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionSanitizer,
                         ::testing::Values(Case{1, 70, 45, 2, 1, 64, true, 20, -1}, Case{1, 33, 100, 2, 2, 128, false, -1, -1, 2.0f},
                                           Case{1, 65, 65, 2, 1, 256, true, -1, -1, 0, DType::kFP16, true}),
                         case_name);
TEST(AttentionSanitizerVarlen, Small) { run_varlen(true, DType::kBF16, 64); }

// ---- the sm90a kernel (params.kernel = kSm90): D = 64, 128, 256, batched; the kAuto cases above run it at D 64/128 ----
constexpr AttentionKernel kSm90 = AttentionKernel::kSm90;

Case sm90(Case c) {
  c.kernel = kSm90;
  return c;
}
// The sm90a kernel with block_m query rows a tile (D = 64: 128, two consumer warpgroups, or 192, three).
Case sm90(Case c, int block_m) {
  c.kernel = kSm90;
  c.block_m = block_m;
  return c;
}
// The sm90a kernel with a tile counter: banded shapes on a persistent grid taking tiles from it.
Case sm90_dyn(Case c, int block_m = 0) {
  c = sm90(c, block_m);
  c.counter = true;
  return c;
}

// Tails of Sq and Sk around the 128-row and 128-key tiles (1, 63/64/65, 127/128/129), Sq != Sk both
// ways, GQA 1, 2, 4, 8 and MQA, both dtypes, fused QKV, a custom scale; causal (rows without keys
// when Sq > Sk), windows, soft-cap, D = 64.
class AttentionGpuSm90Small : public ::testing::TestWithParam<Case> {};
TEST_P(AttentionGpuSm90Small, MatchesCpuReference) { run_case(GetParam(), false); }
INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGpuSm90Small,
    ::testing::Values(sm90(Case{1, 1, 1, 1, 1, 128}), sm90(Case{1, 64, 64, 2, 1, 128}),
                      sm90(Case{2, 7, 7, 4, 1, 128, false, -1, -1, 0, DType::kFP16}),
                      sm90(Case{1, 65, 129, 4, 2, 128}), sm90(Case{2, 127, 300, 4, 4, 128}),
                      sm90(Case{1, 300, 127, 8, 1, 128}),
                      sm90(Case{1, 128, 128, 8, 8, 128, false, -1, -1, 0, DType::kFP16}),
                      sm90(Case{1, 129, 129, 8, 2, 128, false, -1, -1, 0, DType::kBF16, true}),
                      sm90(Case{1, 257, 200, 4, 2, 128, false, -1, -1, 0, DType::kFP16, false, 0.3f}),
                      sm90(Case{1, 1, 1, 1, 1, 128, true}), sm90(Case{2, 7, 7, 4, 1, 128, true}),
                      sm90(Case{1, 127, 300, 4, 2, 128, true}), sm90(Case{1, 300, 127, 4, 4, 128, true}),
                      sm90(Case{1, 257, 257, 4, 2, 128, false, 32, 16}),
                      sm90(Case{1, 200, 260, 4, 2, 128, true, 0, -1}),  // only the diagonal key
                      sm90(Case{1, 300, 300, 2, 2, 64, true, 64}),
                      sm90(Case{1, 200, 200, 4, 2, 128, true, -1, -1, 2.0f}),
                      sm90(Case{1, 150, 190, 4, 1, 64, false, 20, 5, 3.0f, DType::kFP16}),
                      sm90(Case{2, 127, 300, 4, 4, 64}), sm90(Case{1, 65, 65, 2, 2, 64, false, -1, -1, 0, DType::kFP16, true}),
                      // D = 64 on both tiles: 192 x 128 (three consumer warpgroups) and 128 x 128; tails
                      // around 192 rows and 96 / 128 keys, causal (rows without keys), window + cap, GQA, MQA
                      sm90(Case{1, 1, 1, 1, 1, 64}, 192), sm90(Case{1, 191, 193, 4, 2, 64}, 192),
                      sm90(Case{1, 129, 257, 4, 2, 64, true}, 192), sm90(Case{1, 385, 127, 4, 1, 64}, 192),
                      sm90(Case{2, 193, 97, 4, 1, 64, true}, 192), sm90(Case{1, 97, 385, 8, 8, 64, true}, 192),
                      sm90(Case{1, 300, 300, 4, 2, 64, false, 40, 7, 5.0f, DType::kFP16}, 192),
                      sm90(Case{1, 191, 193, 4, 2, 64}, 128), sm90(Case{2, 193, 97, 4, 1, 64, true}, 128),
                      // The dynamic walk (a tile counter): causal both ways, windows, soft-cap, every tile,
                      // fewer tiles than SMs and more (B 2 x Hq 16 x 3-4 blocks), a shape without a band
                      sm90_dyn(Case{1, 1, 1, 1, 1, 128, true}), sm90_dyn(Case{1, 300, 127, 4, 4, 128, true}),
                      sm90_dyn(Case{2, 400, 500, 16, 4, 128, true}), sm90_dyn(Case{1, 257, 257, 4, 2, 128, false, 32, 16}),
                      sm90_dyn(Case{2, 500, 400, 16, 8, 64, true, -1, -1, 0, DType::kFP16}, 192),
                      sm90_dyn(Case{2, 385, 385, 16, 2, 64, true}, 128), sm90_dyn(Case{1, 200, 200, 8, 4, 256, true, -1, -1, 50.0f}),
                      sm90_dyn(Case{1, 129, 129, 4, 2, 128}),
                      // D = 256 (128 x 64 tiles, O staged through Q's buffer)
                      sm90(Case{1, 1, 1, 1, 1, 256}), sm90(Case{1, 65, 129, 4, 2, 256}),
                      sm90(Case{2, 127, 300, 4, 4, 256, true}), sm90(Case{1, 300, 127, 4, 2, 256, true}),
                      sm90(Case{1, 200, 200, 8, 4, 256, true, -1, -1, 50.0f}),
                      sm90(Case{1, 257, 257, 4, 2, 256, false, 32, 16, 0, DType::kFP16}),
                      sm90(Case{1, 65, 65, 2, 1, 256, false, -1, -1, 0, DType::kFP16, true})),
    case_name);

class AttentionGpuSm90Large : public ::testing::TestWithParam<Case> {};
TEST_P(AttentionGpuSm90Large, MatchesGpuReference) { run_case(GetParam(), true); }
INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGpuSm90Large,
    ::testing::Values(sm90(Case{1, 1000, 1000, 32, 8, 128}),                                        // Llama GQA 4
                      sm90(Case{2, 1000, 4097, 8, 8, 128, false, -1, -1, 0, DType::kFP16}),         // chunked prefill
                      sm90(Case{1, 4097, 4097, 4, 1, 128}),                                         // MQA
                      sm90(Case{1, 4096, 4096, 4, 2, 128, false, -1, -1, 0, DType::kBF16, true}),  // fused QKV
                      sm90(Case{1, 1000, 4097, 8, 8, 128, true}),                                   // causal chunk
                      sm90(Case{1, 4097, 4097, 4, 1, 64, true, -1, -1, 0, DType::kFP16}),
                      sm90(Case{2, 1000, 4097, 8, 2, 64}, 192), sm90(Case{1, 4097, 4097, 4, 1, 64, true}, 128),
                      sm90_dyn(Case{2, 1000, 1000, 32, 8, 128, true}), sm90_dyn(Case{2, 2000, 2000, 16, 4, 64, true}, 192),
                      sm90_dyn(Case{1, 4097, 4097, 2, 2, 128, false, 1024, 0, 30.0f}),
                      sm90(Case{1, 4097, 4097, 2, 2, 128, false, 1024, 0, 30.0f}),                  // window + cap
                      sm90(Case{1, 1000, 1000, 8, 4, 256, true, -1, -1, 50.0f}),                    // Gemma-2 9B-like
                      sm90(Case{2, 1000, 1000, 80, 8, 256})),  // 2 x 8 x 80 tiles: CTAs walk several
    case_name);

TEST(AttentionGpuSm90, NanInOneQueryRowStaysInThatRow) { check_nan_row_stays(sm90(Case{1, 200, 200, 4, 2, 128, true})); }

TEST(AttentionGpuSm90, BitwiseDeterministic) { check_bitwise_deterministic(sm90(Case{2, 1000, 1000, 8, 2, 128, true})); }

TEST(AttentionGpuSm90, CudaGraphReplaySeesNewInputs) {
  check_graph_replay(sm90(Case{1, 300, 300, 4, 2, 128, false, -1, -1, 0, DType::kFP16}));
}

// sm90 against sm80 on the same inputs: their summation orders differ, so not bitwise, but within
// a few 16-bit roundings; LSE within fp32 noise.
TEST(AttentionGpuSm90, AgreesWithSm80) {
  BF_SKIP_WITHOUT_GPU("attention");
  BF_SKIP_WITHOUT_SM90(kSm90);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (bool causal : {false, true})
    for (int64_t d : {128, 256}) {
    Case c = sm90(Case{2, 777, 1031, 8, 2, d, causal, -1, -1, 0, dt});
    Problem pr;
    make_problem(pr, c, seed);
    std::vector<uint16_t> o80, o90;
    std::vector<float> l80(size_t(pr.lse_count)), l90(size_t(pr.lse_count));
    for (AttentionKernel k : {AttentionKernel::kSm80, kSm90}) {
      pr.p.kernel = k;
      poison(pr);
      attention(pr.q, pr.k, pr.v, pr.out, pr.lseb.data(), pr.p);
      BF_CUDA_OK(cudaDeviceSynchronize());
      download(k == kSm90 ? o90 : o80, pr.ob);
      BF_CUDA_OK(cudaMemcpy((k == kSm90 ? l90 : l80).data(), pr.lseb.data(), pr.lseb.bytes(), cudaMemcpyDeviceToHost));
    }
    const auto o_of = [dt](const std::vector<uint16_t>& o) {
      return [&o, dt](int64_t, int64_t i) { return double(host::to_float(dt, o[size_t(i)])); };
    };
    const auto l_of = [](const std::vector<float>& l) { return [&l](int64_t, int64_t i) { return double(l[size_t(i)]); }; };
    testing::expect_close(testing::compare_host(1, int64_t(o90.size()), o_of(o90), o_of(o80),
                                                testing::tolerance(dt, 4, 4 * testing::unit_roundoff(dt) + 1e-4)),
                          std::string("out: sm90 vs sm80, ") + dtype_name(dt) + (causal ? " causal" : "") + " D " + std::to_string(d));
    testing::expect_close(testing::compare_host(1, int64_t(l90.size()), l_of(l90), l_of(l80), testing::Tolerance{2e-3, 2e-4}),
                          std::string("lse: sm90 vs sm80, ") + dtype_name(dt) + (causal ? " causal" : "") + " D " + std::to_string(d));
  }
}

// Varlen on the sm90a kernel: per-sequence TMA offsets, tiles past a sequence's end skipped, O
// stored by predicated vector stores (the sequences above: empty, key-less and length-1 ones).
TEST(AttentionGpuSm90, VarlenCausalBf16D128) { run_varlen(true, DType::kBF16, 128, kSm90); }
TEST(AttentionGpuSm90, VarlenNonCausalFp16D64) { run_varlen(false, DType::kFP16, 64, kSm90); }
TEST(AttentionGpuSm90, VarlenCausalBf16D64Rows192) { run_varlen(true, DType::kBF16, 64, kSm90, 192); }
TEST(AttentionGpuSm90, VarlenNonCausalBf16D64Rows128) { run_varlen(false, DType::kBF16, 64, kSm90, 128); }
TEST(AttentionGpuSm90, VarlenCausalBf16D256) { run_varlen(true, DType::kBF16, 256, kSm90); }
TEST(AttentionGpuSm90, VarlenCausalBf16D128TileCounter) { run_varlen(true, DType::kBF16, 128, kSm90, 0, true); }

// The kernel leaves the counter at zero, so one pair serves call after call: three calls in a row
// on one counter, each checked, and the pair read back as zeros.
TEST(AttentionGpuSm90, TileCounterIsLeftZeroAndServesTheNextCall) {
  BF_SKIP_WITHOUT_GPU("attention");
  BF_SKIP_WITHOUT_SM90(kSm90);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  Problem pr;
  make_problem(pr, sm90_dyn(Case{2, 700, 700, 16, 4, 128, true}), seed);
  std::vector<float> ro, rl;
  reference(pr, true, ro, rl);
  for (int call = 0; call < 3; ++call) {
    poison(pr);
    attention(pr.q, pr.k, pr.v, pr.out, pr.lseb.data(), pr.p);
    BF_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(check(pr, ro, rl), 0) << "call " << call;
    int32_t c[2] = {-1, -1};
    BF_CUDA_OK(cudaMemcpy(c, pr.counter.data(), sizeof c, cudaMemcpyDeviceToHost));
    EXPECT_EQ(c[0], 0) << "call " << call;
    EXPECT_EQ(c[1], 0) << "call " << call;
  }
}
// kAuto with a counter: the heuristic walks it (D 64 / 128 causal, a window) or keeps one CTA per
// tile (D 256, an unbanded shape); every choice exact, the counter left at zero.
TEST(AttentionGpuSm90, TileCounterUnderAuto) {
  BF_SKIP_WITHOUT_GPU("attention");
  BF_SKIP_WITHOUT_SM90(kSm90);
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  for (const Case& c : {sm90_dyn(Case{2, 600, 600, 8, 2, 64, true}), sm90_dyn(Case{1, 300, 500, 4, 4, 128, false, 100, 20}),
                        sm90_dyn(Case{1, 300, 300, 4, 2, 256, true}), sm90_dyn(Case{1, 200, 200, 4, 2, 128})}) {
    Problem pr;
    make_problem(pr, c, seed);
    pr.p.sm90_schedule = Sm90Schedule::kAuto;
    std::vector<float> ro, rl;
    reference(pr, true, ro, rl);
    poison(pr);
    attention(pr.q, pr.k, pr.v, pr.out, pr.lseb.data(), pr.p);
    BF_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(check(pr, ro, rl), 0) << c.d;
    int32_t n[2] = {-1, -1};
    BF_CUDA_OK(cudaMemcpy(n, pr.counter.data(), sizeof n, cudaMemcpyDeviceToHost));
    EXPECT_EQ(n[0], 0);
    EXPECT_EQ(n[1], 0);
  }
}
TEST(AttentionSanitizerSm90Varlen, Small) { run_varlen(true, DType::kBF16, 128, kSm90); }

// The compute-sanitizer set for the sm90a kernel (scripts/sanitize runs '*Sanitizer*'), one case with
// more tiles than a GPU has SMs.
class AttentionSanitizerSm90 : public ::testing::TestWithParam<Case> {};
TEST_P(AttentionSanitizerSm90, Small) { run_case(GetParam(), false); }
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionSanitizerSm90,
                         ::testing::Values(sm90(Case{1, 70, 45, 2, 1, 128, true, 20, -1}),
                                           // 320 tiles: more than SMs, so each persistent CTA runs several
                                           sm90(Case{2, 130, 70, 80, 8, 64}),
                                           sm90(Case{2, 130, 70, 80, 8, 64}, 128),  // the other D = 64 tile
                                           sm90(Case{2, 130, 70, 80, 8, 256}),  // O through Q's buffer, persistent
                                           sm90(Case{1, 33, 100, 2, 2, 64, false, -1, -1, 2.0f}),
                                           sm90(Case{1, 65, 65, 2, 2, 128, false, -1, -1, 0, DType::kFP16, true})),
                         case_name);

}  // namespace
}  // namespace blockfuse
