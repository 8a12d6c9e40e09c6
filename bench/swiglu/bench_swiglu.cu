// `blockfuse bench swiglu` — the standalone gated activation (bf16/fp16 out, or FP8 e4m3 with a
// static or a dynamic per-row scale) in µs, GB/s and the fraction of the device-copy bandwidth
// measured in the same run, beside an eager (one kernel per op) baseline, like PyTorch eager's
// `silu(g) * u` (then `amax`, divide, cast for FP8):
//   bf16:        k1 t = act(gate)   k2 out = t * up
//   fp8 static:  k1, k2, then k3 q = fp8(out / scale)
//   fp8 dynamic: k1, k2, then k3 scale_r = amax_r / 448, k4 q = fp8(out / scale_r)
// Bytes counted = the minimum traffic: read [M, 2U], write [M, U] (+ one scale per row). Rows <= 32
// (decode) are timed as per-call time of 20 calls captured in one CUDA graph (a model runs them in a
// graph); larger row counts with CUDA events around each call, inputs rotated so L2 holds none.
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
#include "commands.h"
#include "common/fp8_device.cuh"
#include "gated_up/activation.cuh"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

constexpr int kGraphCalls = 20;
constexpr int64_t kGraphRowsMax = 32;

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

enum class Out { kHalf, kFp8Static, kFp8Dynamic };
const char* out_name(Out o) {
  return o == Out::kHalf ? "16-bit" : (o == Out::kFp8Static ? "fp8-static" : "fp8-dynamic");
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
}

void print_help() {
  std::printf(
      "blockfuse bench swiglu [options]\n"
      "  µs and GB/s of blockfuse::swiglu / swiglu_fp8 ([M, 2U] -> [M, U]) vs an eager one-kernel-per-op\n"
      "  baseline, and the fraction of the device-copy bandwidth measured in the same run.\n"
      "  --rows LIST      rows M (default 1,8,32,256,2048,8192,32768; --quick: 1,32,2048,8192)\n"
      "  --hidden LIST    U (default 4096,16384)\n"
      "  --out LIST       16-bit,fp8-static,fp8-dynamic (default all three)\n"
      "  --layout L       stacked | interleaved (default stacked; the baseline always reads stacked)\n"
      "  --activation A   silu | gelu_tanh (default silu)\n"
      "  --dtype T        bf16 | fp16 (default bf16)\n"
      "  --reps N --warmup N   (default 50 / 5; --quick: 20)\n"
      "  --no-ceilings    skip the copy-bandwidth measurement\n"
      "  --json PATH      write every point as JSON\n");
}

int run(const Args& args) {
  if (args.has("help") || args.has("h")) {
    print_help();
    return 0;
  }
  const bool quick = args.has("quick");
  const auto rows_list = args.get_int_list("rows", quick ? std::vector<int64_t>{1, 32, 2048, 8192}
                                                         : std::vector<int64_t>{1, 8, 32, 256, 2048, 8192, 32768});
  const auto hidden = args.get_int_list("hidden", {4096, 16384});
  for (int64_t r : rows_list)
    if (r < 1 || r > (int64_t{1} << 24)) throw Error("--rows: " + std::to_string(r) + " is not in [1, 2^24]");
  for (int64_t u : hidden)
    if (u < 8 || u % 8 != 0) throw Error("--hidden: " + std::to_string(u) + " is not a positive multiple of 8");
  std::vector<Out> outs;
  for (const auto& o : args.get_list("out", {"16-bit", "fp8-static", "fp8-dynamic"})) {
    if (o == "16-bit") outs.push_back(Out::kHalf);
    else if (o == "fp8-static") outs.push_back(Out::kFp8Static);
    else if (o == "fp8-dynamic") outs.push_back(Out::kFp8Dynamic);
    else throw Error("--out: unknown '" + o + "' (16-bit, fp8-static, fp8-dynamic)");
  }
  const std::string lay = args.get("layout", "stacked");
  if (lay != "stacked" && lay != "interleaved") throw Error("--layout must be stacked or interleaved");
  const GateUpLayout layout = lay == "stacked" ? GateUpLayout::kStacked : GateUpLayout::kInterleaved;
  const std::string acts = args.get("activation", "silu");
  if (acts != "silu" && acts != "gelu_tanh") throw Error("--activation must be silu or gelu_tanh");
  const Activation act = acts == "silu" ? Activation::kSiLU : Activation::kGeluTanh;
  const std::string dts = args.get("dtype", "bf16");
  if (dts != "bf16" && dts != "fp16") throw Error("--dtype must be bf16 or fp16");
  const DType dt = dts == "bf16" ? DType::kBF16 : DType::kFP16;
  const int reps = int(args.get_int("reps", quick ? 20 : 50)), warmup = int(args.get_int("warmup", 5));
  if (reps < 1 || warmup < 0) throw Error("--reps must be >= 1 and --warmup >= 0");
  if (args.has("json") && args.get("json").empty()) throw Error("--json needs a file name");
  if (!require_gpu("blockfuse bench swiglu")) return 2;

  cudaStream_t s = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> guard(s, [](cudaStream_t x) { cudaStreamDestroy(x); });
  int dev = 0, sms = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const double copy_gbs = args.has("no-ceilings") ? 0.0 : measure_copy_bandwidth_gbs(s);
  if (copy_gbs > 0) std::fprintf(stderr, "[swiglu] device copy: %.0f GB/s\n", copy_gbs);

  Table table({"U", "M", "out", "us", "GB/s", "%copy", "%same-size copy", "eager us", "eager GB/s", "speedup", "timing"});
  Json rows_json = Json::array();
  for (int64_t u : hidden)
    for (int64_t m : rows_list)
      for (Out o : outs) {
        const int64_t in_bytes = m * 2 * u * 2;
        const int64_t out_bytes = m * u * (o == Out::kHalf ? 2 : 1) + (o == Out::kFp8Dynamic ? m * 4 : 0);
        const bool graph = m <= kGraphRowsMax;
        const int sets = graph ? 1 : rotation_sets(in_bytes + out_bytes, 8);
        std::vector<std::unique_ptr<DevBuf>> ins, outs16, outs8;
        for (int i = 0; i < sets; ++i) {
          ins.push_back(std::make_unique<DevBuf>(size_t(in_bytes)));
          testing::fill_uniform(make_matrix(ins.back()->p, dt, m, 2 * u), -4.f, 4.f, 17 + uint64_t(i), s);
          outs16.push_back(std::make_unique<DevBuf>(size_t(m * u * 2)));
          outs8.push_back(std::make_unique<DevBuf>(size_t(m * u)));
        }
        DevBuf tmp(size_t(m * u * 2)), scales(size_t(std::max<int64_t>(m, 1) * 4));
        const float one_eighth = 0.125f;
        BENCH_CUDA(cudaMemcpyAsync(scales.p, &one_eighth, 4, cudaMemcpyHostToDevice, s));
        const Fp8Scale sc{o == Out::kFp8Dynamic ? Fp8ScaleMode::kDynamicPerRow : Fp8ScaleMode::kStaticPerTensor,
                          static_cast<float*>(scales.p)};
        auto fused = [&](int rep) {
          const int i = rep % sets;
          const ConstMatrix in = make_matrix(static_cast<const void*>(ins[size_t(i)]->p), dt, m, 2 * u);
          if (o == Out::kHalf)
            swiglu(in, make_matrix(outs16[size_t(i)]->p, dt, m, u), act, layout, s);
          else
            swiglu_fp8(in, make_fp8_matrix(outs8[size_t(i)]->p, m, u), sc, act, layout, s);
        };
        auto eager = [&](int rep) {
          const int i = rep % sets;
          if (dt == DType::kBF16)
            run_eager<__nv_bfloat16>(o, ins[size_t(i)]->p, static_cast<__nv_bfloat16*>(tmp.p),
                                     static_cast<__nv_bfloat16*>(outs16[size_t(i)]->p),
                                     static_cast<uint8_t*>(outs8[size_t(i)]->p), sc.scale, m, u, int(act), sms, s);
          else
            run_eager<__half>(o, ins[size_t(i)]->p, static_cast<__half*>(tmp.p), static_cast<__half*>(outs16[size_t(i)]->p),
                              static_cast<uint8_t*>(outs8[size_t(i)]->p), sc.scale, m, u, int(act), sms, s);
          BENCH_CUDA(cudaGetLastError());
        };
        // The same-size copy: a device-to-device copy moving the op's bytes (half read, half written)
        // timed the same way. A problem of a few tens of MB cannot reach the 1 GiB copy's bandwidth
        // (launch and tail are a larger share of it): this is the ceiling at this size.
        const size_t copy_bytes = size_t((in_bytes + out_bytes) / 2);
        std::vector<std::unique_ptr<DevBuf>> csrc, cdst;
        for (int i = 0; i < sets; ++i) {
          csrc.push_back(std::make_unique<DevBuf>(copy_bytes));
          cdst.push_back(std::make_unique<DevBuf>(copy_bytes));
        }
        auto copy = [&](int rep) {
          const int i = rep % sets;
          BENCH_CUDA(cudaMemcpyAsync(cdst[size_t(i)]->p, csrc[size_t(i)]->p, copy_bytes, cudaMemcpyDeviceToDevice, s));
        };
        Timing tf{}, te{}, tc{};
        if (graph) {
          tf = time_graph_per_call([&] { fused(0); }, s, kGraphCalls, warmup, reps);
          te = time_graph_per_call([&] { eager(0); }, s, kGraphCalls, warmup, reps);
          tc = time_graph_per_call([&] { copy(0); }, s, kGraphCalls, warmup, reps);
        } else {
          tf = time_it(fused, s, warmup, reps);
          te = time_it(eager, s, warmup, reps);
          tc = time_it(copy, s, warmup, reps);
        }
        BENCH_CUDA(cudaStreamSynchronize(s));
        const double bytes = double(in_bytes + out_bytes);
        const double gbs = bytes / (tf.median_ms * 1e6), egbs = bytes / (te.median_ms * 1e6);
        const double cgbs = double(2 * copy_bytes) / (tc.median_ms * 1e6);
        table.add({std::to_string(u), std::to_string(m), out_name(o), fmt(tf.median_ms * 1e3, 2), fmt(gbs, 0),
                   copy_gbs > 0 ? fmt(100 * gbs / copy_gbs, 1) : "-", fmt(100 * gbs / cgbs, 1), fmt(te.median_ms * 1e3, 2), fmt(egbs, 0),
                   fmt(te.median_ms / tf.median_ms, 2), graph ? "graph/20" : "events"});
        Json r = Json::object();
        r.set("U", u).set("M", m).set("out", out_name(o)).set("layout", layout_name(layout))
            .set("activation", activation_name(act)).set("dtype", dts).set("bytes", int64_t(bytes))
            .set("us", tf.median_ms * 1e3).set("gbs", gbs).set("eager_us", te.median_ms * 1e3).set("eager_gbs", egbs)
            .set("speedup_vs_eager", te.median_ms / tf.median_ms)
            .set("timing", graph ? "graph, per call of 20" : "cuda events, rotated inputs").set("rotation_sets", sets);
        r.set("same_size_copy_us", tc.median_ms * 1e3).set("same_size_copy_gbs", cgbs).set("frac_of_same_size_copy", gbs / cgbs);
        if (copy_gbs > 0) r.set("frac_of_copy", gbs / copy_gbs);
        rows_json.push(r);
      }

  std::printf("\nblockfuse bench swiglu — %s, %s, %s, %s; median of %d; bytes = read [M,2U] + write [M,U] (+scales)\n",
              device_name().c_str(), dts.c_str(), layout_name(layout), activation_name(act), reps);
  if (copy_gbs > 0) std::printf("device copy this run: %.0f GB/s (read + write)\n", copy_gbs);
  table.print();
  if (args.has("json")) {
    Json out = Json::object();
    out.set("benchmark", "swiglu").set("device", device_name()).set("date", now_iso8601()).set("reps", reps);
    if (copy_gbs > 0) out.set("copy_ceiling_gbs", copy_gbs);
    out.set("rows", rows_json);
    write_file(args.get("json"), out.dump());
    std::fprintf(stderr, "[swiglu] wrote %s\n", args.get("json").c_str());
  }
  return 0;
}

}  // namespace

BLOCKFUSE_COMMAND("bench swiglu", run, "GB/s of swiglu / swiglu_fp8 (16-bit, FP8 static, FP8 dynamic) vs eager");

}  // namespace blockfuse::bench
