// `blockfuse bench swiglu` — the standalone gated activation (bf16/fp16 out, or FP8 e4m3 with a
// static or a dynamic per-row scale) in µs, GB/s and the fraction of the device-copy bandwidth
// measured in the same run, beside an eager (one kernel per op) baseline, like PyTorch eager's
// `silu(g) * u` (then `amax`, divide, cast for FP8):
//   bf16:        k1 t = act(gate)   k2 out = t * up
//   fp8 static:  k1, k2, then k3 q = fp8(out / scale)
//   fp8 dynamic: k1, k2, then k3 scale_r = amax_r / 448, k4 q = fp8(out / scale_r)
// Bytes counted = the minimum traffic: read [M, 2U], write [M, U] (+ one scale per row). The
// backward (--out backward, backward+h: swiglu_backward without and with the forward's output h)
// reads dh [M, U] and gate_up [M, 2U] and writes d_gate_up [M, 2U] (+ h [M, U]); it has no eager
// column. Rows <= 32
// (decode) are timed as per-call time of 20 calls captured in one CUDA graph (a model runs them in a
// graph); up to 256 rows as a graph cycling over rotated inputs; larger row counts with CUDA events
// around each call, inputs rotated so L2 holds none.
// Each point also times a device-to-device copy of the same byte count the same way ("same-size
// copy"): the 1 GiB copy's bandwidth is out of reach for a 50 MB problem, for any kernel.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "blockfuse/swiglu.h"
#include "common/fp8_device.cuh"
#include "common/activation.cuh"
#include "harness.h"
#include "swiglu/config.h"
#include "swiglu/tuning.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

constexpr int kGraphCalls = 20;
constexpr int64_t kGraphRowsMax = 32;
constexpr int64_t kGraphRowsRotated = 256;

// ---- the eager baseline: one elementwise kernel per op, 16-byte vectors ---------------------------
template <class T>
__global__ void eager_act(const T* in, int64_t ldi, T* t, int64_t rows, int64_t u, int act) {
  const int64_t chunks = u / 8, total = rows * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks, c = (i % chunks) * 8;
    const uint4 v = *reinterpret_cast<const uint4*>(in + r * ldi + c);  // stacked: gate = columns [0, U)
    const T* e = reinterpret_cast<const T*>(&v);
    uint4 o;
    T* oe = reinterpret_cast<T*>(&o);
    for (int j = 0; j < 8; ++j) {
      const float g = float(e[j]);
      oe[j] = T(act == 0 ? silu_f32(g) : gelu_tanh_f32(g));
    }
    *reinterpret_cast<uint4*>(t + r * u + c) = o;
  }
}

template <class T>
__global__ void eager_mul(const T* t, const T* in, int64_t ldi, T* out, int64_t rows, int64_t u) {
  const int64_t chunks = u / 8, total = rows * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks, c = (i % chunks) * 8;
    const uint4 a = *reinterpret_cast<const uint4*>(t + r * u + c);
    const uint4 b = *reinterpret_cast<const uint4*>(in + r * ldi + u + c);
    const T* ae = reinterpret_cast<const T*>(&a);
    const T* be = reinterpret_cast<const T*>(&b);
    uint4 o;
    T* oe = reinterpret_cast<T*>(&o);
    for (int j = 0; j < 8; ++j) oe[j] = T(float(ae[j]) * float(be[j]));
    *reinterpret_cast<uint4*>(out + r * u + c) = o;
  }
}

template <class T>
__global__ void eager_row_amax(const T* x, int64_t u, float* scale) {
  __shared__ float part[32];
  float m = 0;
  const T* row = x + blockIdx.x * u;
  for (int64_t c = threadIdx.x * 8; c < u; c += blockDim.x * 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + c);
    const T* e = reinterpret_cast<const T*>(&v);
    for (int j = 0; j < 8; ++j) m = fmaxf(m, finite_abs(float(e[j])));
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x / 32); ++w) m = fmaxf(m, part[w]);
    scale[blockIdx.x] = fp8_dynamic_scale(m);
  }
}

template <class T>
__global__ void eager_quant(const T* x, uint8_t* q, int64_t rows, int64_t u, const float* scale, bool per_row) {
  const int64_t chunks = u / 8, total = rows * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks, c = (i % chunks) * 8;
    const float s = scale[per_row ? r : 0];
    const uint4 v = *reinterpret_cast<const uint4*>(x + r * u + c);
    const T* e = reinterpret_cast<const T*>(&v);
    uint2 o;
    uint8_t* ob = reinterpret_cast<uint8_t*>(&o);
    for (int j = 0; j < 8; ++j) ob[j] = fp8_quantize(float(e[j]), s);
    *reinterpret_cast<uint2*>(q + r * u + c) = o;
  }
}

enum class Out { kHalf, kFp8Static, kFp8Dynamic, kBackward, kBackwardH };
const char* out_name(Out o) {
  switch (o) {
    case Out::kHalf: return "16-bit";
    case Out::kFp8Static: return "fp8-static";
    case Out::kFp8Dynamic: return "fp8-dynamic";
    case Out::kBackward: return "backward";
    case Out::kBackwardH: return "backward+h";
  }
  return "?";
}
Out out_kind(const std::string& s) {
  for (Out o : {Out::kHalf, Out::kFp8Static, Out::kFp8Dynamic, Out::kBackward, Out::kBackwardH})
    if (s == out_name(o)) return o;
  return Out::kHalf;
}

template <class T>
void run_eager(Out o, const void* in, T* t, T* out16, uint8_t* q, float* scale, int64_t rows, int64_t u, int act,
               int sms, cudaStream_t s) {
  const int64_t total = rows * (u / 8);
  const unsigned blocks = unsigned(std::max<int64_t>(1, std::min<int64_t>((total + 255) / 256, int64_t(sms) * 16)));
  eager_act<T><<<blocks, 256, 0, s>>>(static_cast<const T*>(in), 2 * u, t, rows, u, act);
  eager_mul<T><<<blocks, 256, 0, s>>>(t, static_cast<const T*>(in), 2 * u, out16, rows, u);
  if (o == Out::kFp8Dynamic) eager_row_amax<T><<<unsigned(rows), 256, 0, s>>>(out16, u, scale);
  if (o != Out::kHalf) eager_quant<T><<<blocks, 256, 0, s>>>(out16, q, rows, u, scale, o == Out::kFp8Dynamic);
  BENCH_CUDA(cudaGetLastError());
}

class SwigluBench final : public BenchCommand {
  std::vector<int64_t> rows_ = {1, 8, 32, 256, 2048, 8192, 32768}, hidden_ = {4096, 16384};
  std::vector<std::string> outs_ = {"16-bit", "fp8-static", "fp8-dynamic", "backward", "backward+h"};
  std::string layout_ = "stacked", act_ = "silu", dtype_ = "bf16", row_rule_ = "default";
  detail::SwigluTuning tuning_;

  bool compares_variants() const override { return true; }
  void options(Options& o) override {
    o.about("µs and GB/s of blockfuse::swiglu / swiglu_fp8 ([M, 2U] -> [M, U]) vs an eager one-kernel-per-op "
            "baseline, and of swiglu_backward (--out backward, backward+h), and the fraction of the device-copy "
            "bandwidth measured in the same run.");
    o.ints("--rows", rows_, 1, int64_t{1} << 24, "rows M", std::vector<int64_t>{1, 32, 2048, 8192});
    o.ints("--hidden", hidden_, 8, int64_t{1} << 24, "U", std::nullopt, 8);
    o.words("--out", outs_, {"16-bit", "fp8-static", "fp8-dynamic", "backward", "backward+h"},
            "output kinds (backward: swiglu_backward; backward+h: the form that also writes the forward's output)");
    o.choice("--layout", layout_, {"stacked", "interleaved"}, "gate/up layout of the input (the baseline reads stacked)");
    o.choice("--activation", act_, {"silu", "gelu_tanh"}, "activation");
    o.choice("--dtype", dtype_, {"bf16", "fp16"}, "element type");
    o.choice("--row-rule", row_rule_, {"default", "two", "four", "four-next", "four3", "cluster2", "cluster4", "cluster8"},
             "dynamic FP8 row kernel shape (src/swiglu/config.h): two = 2 chunks per thread in registers (the "
             "first kernel); four = 4 chunks per thread staged in shared memory from U > 8192; four-next = four, "
             "each block also copying its next row (persistent grid); four3 = four compiled for 3 blocks per SM "
             "(<= 512 threads); cluster2 = the row split over a 2-CTA cluster, each half as two (sm_90, U 8200..32768); "
             "cluster4 / cluster8 = the same over 4 / 8 CTAs (sm_90, U 8200..65536 / 131072)");
  }

  void run(Bench& b) override {
    const GateUpLayout layout = layout_ == "stacked" ? GateUpLayout::kStacked : GateUpLayout::kInterleaved;
    const Activation act = act_ == "silu" ? Activation::kSiLU : Activation::kGeluTanh;
    const DType dt = dtype_ == "bf16" ? DType::kBF16 : DType::kFP16;
    const cudaStream_t s = b.stream();
    tuning_.row_rule = row_rule_ == "two"         ? detail::SwigluRowRule::kTwoChunks
                       : row_rule_ == "four"      ? detail::SwigluRowRule::kFourShared
                       : row_rule_ == "four-next" ? detail::SwigluRowRule::kFourSharedNext
                       : row_rule_ == "four3"     ? detail::SwigluRowRule::kFourSharedThree
                       : row_rule_ == "cluster2"  ? detail::SwigluRowRule::kClusterTwo
                       : row_rule_ == "cluster4"  ? detail::SwigluRowRule::kClusterFour
                       : row_rule_ == "cluster8"  ? detail::SwigluRowRule::kClusterEight
                                                  : detail::kSwigluDefaultRowRule;
    b.title("blockfuse bench swiglu — " + b.device().name + ", " + dtype_ + ", " + layout_name(layout) + ", " +
            activation_name(act) + "; median of " + std::to_string(b.reps()) +
            "; bytes = read [M,2U] + write [M,U] (+scales)");
    if (b.copy_gbs() > 0) b.title("device copy this run: " + fmt(b.copy_gbs(), 0) + " GB/s (read + write)");
    b.columns({"U", "M", "out", "kernel", "us", "GB/s", "%copy", "%same-size copy", "eager us", "eager GB/s", "speedup", "timing"});
    b.info()["copy_ceiling_gbs"] = b.copy_gbs();
    for (int64_t u : hidden_)
      for (int64_t m : rows_)
        for (const std::string& out_s : outs_) point(b, out_kind(out_s), m, u, layout, act, dt, s);
  }

  void point(Bench& b, Out o, int64_t m, int64_t u, GateUpLayout layout, Activation act, DType dt, cudaStream_t s) {
    if (o == Out::kBackward || o == Out::kBackwardH) return backward_point(b, o == Out::kBackwardH, m, u, layout, act, dt, s);
    using testing::DeviceBuffer;
    const int64_t in_bytes = m * 2 * u * 2;
    const int64_t out_bytes = m * u * (o == Out::kHalf ? 2 : 1) + (o == Out::kFp8Dynamic ? m * 4 : 0);
    // Up to 32 rows a graph on one input set (the decode protocol); up to kGraphRowsRotated a graph
    // cycling over rotated inputs (as python -m blockfuse.bench memory-bound: a launch per call would
    // dominate these few-µs kernels); beyond, events per call over rotated inputs.
    const int sets = m <= kGraphRowsMax ? 1 : rotation_sets(in_bytes + out_bytes, 8);
    const Method method = m <= kGraphRowsRotated ? Method::graph(std::max(kGraphCalls, sets)) : Method::events();
    std::vector<DeviceBuffer<uint16_t>> ins, outs16;
    std::vector<DeviceBuffer<uint8_t>> outs8;
    for (int i = 0; i < sets; ++i) {
      ins.emplace_back(size_t(m * 2 * u));
      testing::fill_uniform(make_matrix(ins.back().data(), dt, m, 2 * u), -4.f, 4.f, 17 + uint64_t(i), s);
      outs16.emplace_back(size_t(m * u));
      outs8.emplace_back(size_t(m * u));
    }
    DeviceBuffer<uint16_t> tmp(size_t(m * u));
    DeviceBuffer<float> scales(size_t(std::max<int64_t>(m, 1)));
    const float one_eighth = 0.125f;
    BENCH_CUDA(cudaMemcpyAsync(scales.data(), &one_eighth, 4, cudaMemcpyHostToDevice, s));
    const Fp8Scale sc{o == Out::kFp8Dynamic ? Fp8ScaleMode::kDynamicPerRow : Fp8ScaleMode::kStaticPerTensor,
                      scales.data()};
    auto fused = [&](int call) {
      const size_t i = size_t(call % sets);
      const ConstMatrix in = make_matrix(static_cast<const void*>(ins[i].data()), dt, m, 2 * u);
      if (o == Out::kHalf)
        swiglu(in, make_matrix(outs16[i].data(), dt, m, u), act, layout, s);
      else
        detail::swiglu_fp8(in, make_fp8_matrix(outs8[i].data(), m, u), sc, act, layout, tuning_, s);
    };
    auto eager = [&](int call) {
      const size_t i = size_t(call % sets);
      if (dt == DType::kBF16)
        run_eager(o, ins[i].data(), reinterpret_cast<__nv_bfloat16*>(tmp.data()),
                  reinterpret_cast<__nv_bfloat16*>(outs16[i].data()), outs8[i].data(), sc.scale, m, u, int(act),
                  b.device().sms, s);
      else
        run_eager(o, ins[i].data(), reinterpret_cast<__half*>(tmp.data()), reinterpret_cast<__half*>(outs16[i].data()),
                  outs8[i].data(), sc.scale, m, u, int(act), b.device().sms, s);
    };
    const std::vector<Timing> t = b.time_all({fused, eager}, method);
    const Timing &tf = t[0], &te = t[1];
    const size_t copy_bytes = size_t((in_bytes + out_bytes) / 2);
    const Timing tc = b.time_copy(copy_bytes, sets, method);
    const double bytes = double(in_bytes + out_bytes);
    const double gbs = bytes / (tf.median_ms * 1e6), egbs = bytes / (te.median_ms * 1e6);
    const double cgbs = double(2 * copy_bytes) / (tc.median_ms * 1e6);
    const detail::SwigluRowConfig rc =
        detail::swiglu_fp8_row_config(u / 8, detail::resolve_swiglu_fp8_row_rule(tuning_.row_rule, m, u / 8, b.device().major >= 9));
    const detail::SwigluElementwiseConfig ec = detail::swiglu_elementwise_config(m * (u / 8));
    const std::string kernel = o != Out::kFp8Dynamic ? "elementwise c1x" +
                                                           std::to_string(ec.threads) + " b" + std::to_string(ec.blocks)
                               : "row v" + std::to_string(rc.v) + "x" + std::to_string(rc.threads) +
                                     (rc.stage == 1 ? " smem" : rc.stage == 2 ? " smem+next" : "") + (rc.min_blocks == 3 ? " x3" : "") +
                                     (rc.cluster > 1 ? " c" + std::to_string(rc.cluster) : "") + (rc.in_registers ? "" : " 2-pass");
    auto r = b.row({std::to_string(u), std::to_string(m), out_name(o), kernel, fmt(tf.us(), 2), fmt(gbs, 0), b.pct_of_copy(gbs),
                    fmt(100 * gbs / cgbs, 1), fmt(te.us(), 2), fmt(egbs, 0), fmt(te.median_ms / tf.median_ms, 2),
                    (method.is_graph() ? method.label() + " " : std::string()) + "rot " + std::to_string(sets)});
    r.set("U", u).set("M", m).set("out", out_name(o)).set("kernel", kernel).set("row_rule", row_rule_).set("layout", layout_name(layout))
        .set("activation", activation_name(act)).set("dtype", dtype_).set("bytes", int64_t(bytes))
        .set("us", tf.us()).set("gbs", gbs).set("eager_us", te.us()).set("eager_gbs", egbs)
        .set("speedup_vs_eager", te.median_ms / tf.median_ms)
        .set("timing", method.is_graph() ? "graph, per call of " + std::to_string(method.graph_calls) : "cuda events, rotated inputs")
        .set("rotation_sets", sets);
    r.set("same_size_copy_us", tc.us()).set("same_size_copy_gbs", cgbs).set("frac_of_same_size_copy", gbs / cgbs);
    if (b.copy_gbs() > 0) r.set("frac_of_copy", gbs / b.copy_gbs());
  }

  // swiglu_backward without and with the forward's output. Timed out of place (d_gate_up its own
  // buffer): the same traffic and instructions as the in-place call gated_up's and gated_mlp's
  // backward make, without feeding each call's gradient to the next.
  void backward_point(Bench& b, bool with_h, int64_t m, int64_t u, GateUpLayout layout, Activation act, DType dt,
                      cudaStream_t s) {
    using testing::DeviceBuffer;
    const int64_t bytes = m * u * 2 + 2 * (m * 2 * u * 2) + (with_h ? m * u * 2 : 0);
    const int sets = m <= kGraphRowsMax ? 1 : rotation_sets(bytes, 8);
    const Method method = m <= kGraphRowsRotated ? Method::graph(std::max(kGraphCalls, sets)) : Method::events();
    std::vector<DeviceBuffer<uint16_t>> dh, gu, dgu, h;
    for (int i = 0; i < sets; ++i) {
      dh.emplace_back(size_t(m * u));
      gu.emplace_back(size_t(m * 2 * u));
      dgu.emplace_back(size_t(m * 2 * u));
      h.emplace_back(size_t(with_h ? m * u : 0));
      testing::fill_uniform(make_matrix(dh.back().data(), dt, m, u), -2.f, 2.f, 23 + uint64_t(i), s);
      testing::fill_uniform(make_matrix(gu.back().data(), dt, m, 2 * u), -4.f, 4.f, 29 + uint64_t(i), s);
    }
    auto call = [&](int c) {
      const size_t i = size_t(c % sets);
      const ConstMatrix g = make_matrix(static_cast<const void*>(gu[i].data()), dt, m, 2 * u);
      const ConstMatrix d = make_matrix(static_cast<const void*>(dh[i].data()), dt, m, u);
      const Matrix dg = make_matrix(dgu[i].data(), dt, m, 2 * u);
      if (with_h)
        swiglu_backward(d, g, dg, make_matrix(h[i].data(), dt, m, u), act, layout, s);
      else
        swiglu_backward(d, g, dg, act, layout, s);
    };
    const Timing t = b.time(call, method);
    const size_t copy_bytes = size_t(bytes / 2);
    const Timing tc = b.time_copy(copy_bytes, sets, method);
    const double gbs = double(bytes) / (t.median_ms * 1e6), cgbs = double(2 * copy_bytes) / (tc.median_ms * 1e6);
    const detail::SwigluElementwiseConfig ec = detail::swiglu_elementwise_config(m * (u / 8));
    const std::string kernel = "elementwise c1x" + std::to_string(ec.threads) + " b" + std::to_string(ec.blocks);
    auto r = b.row({std::to_string(u), std::to_string(m), with_h ? "backward+h" : "backward", kernel, fmt(t.us(), 2),
                    fmt(gbs, 0), b.pct_of_copy(gbs), fmt(100 * gbs / cgbs, 1), "-", "-", "-",
                    (method.is_graph() ? method.label() + " " : std::string()) + "rot " + std::to_string(sets)});
    r.set("U", u).set("M", m).set("out", with_h ? "backward+h" : "backward").set("kernel", kernel)
        .set("layout", layout_name(layout)).set("activation", activation_name(act)).set("dtype", dtype_)
        .set("bytes", bytes).set("us", t.us()).set("gbs", gbs)
        .set("timing", method.is_graph() ? "graph, per call of " + std::to_string(method.graph_calls) : "cuda events, rotated inputs")
        .set("rotation_sets", sets);
    r.set("same_size_copy_us", tc.us()).set("same_size_copy_gbs", cgbs).set("frac_of_same_size_copy", gbs / cgbs);
    if (b.copy_gbs() > 0) r.set("frac_of_copy", gbs / b.copy_gbs());
  }
};

}  // namespace

BLOCKFUSE_COMMAND(SwigluBench, "bench swiglu", "GB/s of swiglu / swiglu_fp8 (16-bit, FP8 static, FP8 dynamic) vs eager");

}  // namespace blockfuse::bench
