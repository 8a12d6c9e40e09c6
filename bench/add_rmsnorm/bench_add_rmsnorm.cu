// `blockfuse bench add-rmsnorm`: the fused residual add + RMSNorm against the "one kernel per op"
// pipeline PyTorch eager runs (defined below):
//   base 1  residual_out = x + residual                       (reads x, residual; writes residual_out)
//   base 2  rstd[m] = rsqrt(mean(residual_out[m]²) + eps)    (reads residual_out again)
//   base 3  out = residual_out · rstd · w                     (reads residual_out a third time)
//           FP8 static: base 3 quantises with the scale; FP8 dynamic: base 3 writes the dtype and
//   base 4  computes each row's amax and quantises (reads that output again) — a separate
//           per-token quantisation kernel, as in vLLM's unfused path.
// Both are charged the same minimum bytes (read x, residual, weight; write residual_out, out, the
// dynamic scales; read the static scale), so GB/s is an effective rate and the speedup is the
// time ratio. Rows <= 32 are latency-bound decode steps: timed as 20 calls captured in one CUDA
// graph (time_graph_per_call), the way a model's decode graph runs them. Up to --graph-rows (256):
// a graph cycling over input copies rotated to span 3x L2 (a launch per call would dominate these
// few-µs kernels; as `python -m blockfuse.bench memory-bound`). Larger row counts: CUDA events around each
// call, inputs and outputs rotated likewise. Out of
// place (residual_out separate), so every repetition sees the same data.
// Small problems cannot reach the 1 GiB copy's bandwidth (launch latency, a partly filled GPU), so
// each point also times a device-to-device cudaMemcpyAsync of bytes/2 (bytes/2 read + bytes/2
// written: the op's traffic) with the same method and reports the op against it ("%same-copy").
// The kernel column is the launch shape (config.h): "v2x256" = one block of 256 threads x 2 chunks
// per row, "c4:v2x256" = a cluster of 4 such CTAs per row (sm_90).
// Before a point is timed, rows 0..7 and the last 8 rows of both pipelines' outputs are checked
// against the CPU reference (src/add_rmsnorm/reference.h); a failure makes the command exit 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "add_rmsnorm/config.h"
#include "add_rmsnorm/reference.h"
#include "blockfuse/add_rmsnorm.h"
#include "harness.h"
#include "common/host_float.h"
#include "testing/testing.h"

namespace blockfuse::bench {
namespace {

// ---- the baseline: one kernel per op, 16-byte vectors, fp32 math (a fair eager pipeline) ----

template <class T> __device__ __forceinline__ float2 to_f2(uint32_t u);
template <> __device__ __forceinline__ float2 to_f2<__nv_bfloat16>(uint32_t u) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u));
}
template <> __device__ __forceinline__ float2 to_f2<__half>(uint32_t u) { return __half22float2(*reinterpret_cast<__half2*>(&u)); }
template <class T> __device__ __forceinline__ uint32_t from_f2(float a, float b);
template <> __device__ __forceinline__ uint32_t from_f2<__nv_bfloat16>(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <> __device__ __forceinline__ uint32_t from_f2<__half>(float a, float b) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <class T> __device__ __forceinline__ void unpack8(const uint4& v, float f[8]) {
  const uint32_t* u = &v.x;
  for (int i = 0; i < 4; ++i) { const float2 t = to_f2<T>(u[i]); f[2 * i] = t.x; f[2 * i + 1] = t.y; }
}
template <class T> __device__ __forceinline__ uint4 pack8(const float f[8]) {
  return make_uint4(from_f2<T>(f[0], f[1]), from_f2<T>(f[2], f[3]), from_f2<T>(f[4], f[5]), from_f2<T>(f[6], f[7]));
}

template <class T>
__global__ void base_add(const uint4* x, const uint4* r, uint4* ro, int64_t n_chunks) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_chunks; i += int64_t(gridDim.x) * blockDim.x) {
    float a[8], b[8];
    unpack8<T>(x[i], a);
    unpack8<T>(r[i], b);
    for (int j = 0; j < 8; ++j) a[j] += b[j];
    ro[i] = pack8<T>(a);
  }
}

__device__ float block_sum_or_max(float v, bool is_max) {
  __shared__ float red[32];
  for (int o = 16; o > 0; o >>= 1) { const float u = __shfl_xor_sync(~0u, v, o); v = is_max ? fmaxf(v, u) : v + u; }
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? red[threadIdx.x & 31] : 0.f;  // every warp reduces the partials
  for (int o = 16; o > 0; o >>= 1) { const float u = __shfl_xor_sync(~0u, v, o); v = is_max ? fmaxf(v, u) : v + u; }
  return v;
}

template <class T>
__global__ void base_rstd(const uint4* ro, int chunks, float* rstd, float eps) {
  const uint4* row = ro + int64_t(blockIdx.x) * chunks;
  float s = 0;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    float f[8];
    unpack8<T>(row[c], f);
    for (int j = 0; j < 8; ++j) s += f[j] * f[j];
  }
  s = block_sum_or_max(s, false);
  if (threadIdx.x == 0) rstd[blockIdx.x] = rsqrtf(s / float(chunks * 8) + eps);
}

// kind 0: dtype out; 1: fp8 with the static scale *scale.
template <class T>
__global__ void base_norm(const uint4* ro, const uint4* w, const float* rstd, int chunks, int64_t n_chunks, void* out,
                          int kind, const float* scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_chunks; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / chunks;
    float a[8], g[8];
    unpack8<T>(ro[i], a);
    unpack8<T>(w[i - row * chunks], g);
    const float rs = rstd[row];
    for (int j = 0; j < 8; ++j) a[j] = a[j] * rs * g[j];
    if (kind == 0) {
      static_cast<uint4*>(out)[i] = pack8<T>(a);
    } else {
      uint2 q;
      auto* h = reinterpret_cast<__nv_fp8x2_storage_t*>(&q);
      for (int k = 0; k < 4; ++k)
        h[k] = __nv_cvt_float2_to_fp8x2(make_float2(a[2 * k] / *scale, a[2 * k + 1] / *scale), __NV_SATFINITE, __NV_E4M3);
      static_cast<uint2*>(out)[i] = q;
    }
  }
}

// Per-token dynamic quantisation of the dtype output: amax, scale, quantise (one block per row).
template <class T>
__global__ void base_quant_dynamic(const uint4* y, int chunks, uint2* q, float* scales) {
  const uint4* row = y + int64_t(blockIdx.x) * chunks;
  float m = 0;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    float f[8];
    unpack8<T>(row[c], f);
    for (int j = 0; j < 8; ++j) m = isfinite(f[j]) ? fmaxf(m, fabsf(f[j])) : m;
  }
  m = block_sum_or_max(m, true);
  const float s = m > 0 ? m / kFp8E4M3Max : 1.0f;
  if (threadIdx.x == 0) scales[blockIdx.x] = s;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    float f[8];
    unpack8<T>(row[c], f);
    uint2 o;
    auto* h = reinterpret_cast<__nv_fp8x2_storage_t*>(&o);
    for (int k = 0; k < 4; ++k) h[k] = __nv_cvt_float2_to_fp8x2(make_float2(f[2 * k] / s, f[2 * k + 1] / s), __NV_SATFINITE, __NV_E4M3);
    q[int64_t(blockIdx.x) * chunks + c] = o;
  }
}

enum class Mode { kNone, kStatic, kDynamic };
const char* mode_name(Mode m) { return m == Mode::kNone ? "none" : m == Mode::kStatic ? "static" : "dynamic"; }

// One rotation set: the buffers of one call (contiguous [M, H] matrices).
struct Set {
  testing::DeviceBuffer<uint16_t> x, res, ro, y;  // y: the baseline's dtype intermediate (dynamic)
  testing::DeviceBuffer<uint8_t> out;             // dtype or e4m3 output
  testing::DeviceBuffer<float> scales, rstd;      // rstd: the baseline's intermediate
};

// Checks rows [0, 8) and the last 8 rows of out (dtype or e4m3) and residual_out against the CPU
// reference: residual_out bit-exact for the fused kernel (the baseline rounds the same way), out
// within 2 dtype roundings (fused) / 3 (baseline: one more rounding of rstd·r), FP8 within one e4m3
// step after de-scaling (+1 for the baseline's extra dtype rounding before quantising).
Check verify(DType dt, Mode mode, int64_t M, int64_t H, const Set& set, const std::vector<uint16_t>& w_host,
              float static_scale, float eps, bool baseline) {
  Check v;
  const size_t es = 2;
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < std::min<int64_t>(M, 8); ++r) rows.push_back(r);
  for (int64_t r = std::max<int64_t>(8, M - 8); r < M; ++r) rows.push_back(r);
  std::vector<uint16_t> x(static_cast<size_t>(H)), res(static_cast<size_t>(H)), ro(static_cast<size_t>(H)), out(static_cast<size_t>(H)), r_ref(static_cast<size_t>(H));
  std::vector<uint8_t> q(static_cast<size_t>(H));
  std::vector<double> v_ref(static_cast<size_t>(H));
  const double u = mode == Mode::kNone ? testing::unit_roundoff(dt) : 0;
  int64_t bad = 0;
  for (int64_t r : rows) {
    const size_t off = size_t(r * H) * es;
    BENCH_CUDA(cudaMemcpy(x.data(), reinterpret_cast<const char*>(set.x.data()) + off, H * es, cudaMemcpyDeviceToHost));
    BENCH_CUDA(cudaMemcpy(res.data(), reinterpret_cast<const char*>(set.res.data()) + off, H * es, cudaMemcpyDeviceToHost));
    BENCH_CUDA(cudaMemcpy(ro.data(), reinterpret_cast<const char*>(set.ro.data()) + off, H * es, cudaMemcpyDeviceToHost));
    float s = static_scale;
    if (mode == Mode::kNone)
      BENCH_CUDA(cudaMemcpy(out.data(), reinterpret_cast<const char*>(set.out.data()) + off, H * es, cudaMemcpyDeviceToHost));
    else
      BENCH_CUDA(cudaMemcpy(q.data(), reinterpret_cast<const char*>(set.out.data()) + size_t(r * H), H, cudaMemcpyDeviceToHost));
    if (mode == Mode::kDynamic) BENCH_CUDA(cudaMemcpy(&s, set.scales.data() + r, 4, cudaMemcpyDeviceToHost));
    reference::add_rmsnorm(dt, 1, H, x.data(), H, res.data(), H, w_host.data(), eps, false, r_ref.data(), v_ref.data());
    if (ro != r_ref) { ++bad; v.fail("residual_out row " + std::to_string(r) + " differs"); }
    if (mode == Mode::kDynamic) {
      const float want = reference::e4m3_dynamic_scale(v_ref.data(), H);
      if (!(std::fabs(s - want) <= (baseline ? 1e-2f : 1e-5f) * want)) {
        ++bad;
        v.fail("scale row " + std::to_string(r) + " = " + fmt(s, 6) + " vs " + fmt(want, 6));
      }
    }
    for (int64_t i = 0; i < H; ++i) {
      const double ref = v_ref[size_t(i)];
      bool ok;
      if (mode == Mode::kNone) {
        ok = std::fabs(host::to_float(dt, out[size_t(i)]) - ref) <= (baseline ? 3 : 2) * u * std::fabs(ref) + 1e-7;
      } else {
        const double lim = kFp8E4M3Max * double(s), want = std::max(-lim, std::min(lim, ref));
        const double got = reference::e4m3_to_double(q[size_t(i)]) * s;
        ok = std::fabs(got - want) <= (baseline ? 2 : 1) * (std::fabs(want) / 8 + std::ldexp(1.0, -9) * s);
      }
      if (!ok && bad++ < 3) v.fail("out(" + std::to_string(r) + ", " + std::to_string(i) + ") off");
    }
  }
  if (bad > 3) v.fail(std::to_string(bad) + " elements off in all");
  return v;
}

class AddRmsNormBench final : public BenchCommand {
  std::vector<int64_t> rows_ = {1, 8, 32, 256, 2048, 8192, 32768}, hidden_ = {4096, 16384};
  std::string dtype_ = "bf16", fp8_ = "all", clusters_ = "on", rule_ = "default";
  detail::AddRmsNormTuning tuning_;  // from --clusters, --rule, --preload-chunks
  int graph_calls_ = 20;
  int graph_rows_ = 256, preload_chunks_ = int(detail::kAddRmsNormPreloadChunks);
  int skew_mb_ = 0;
  Defaults defaults() const override { return {100, 30, 10}; }

  void options(Options& o) override {
    o.about("Fused add + RMSNorm (blockfuse::add_rmsnorm[_fp8]) vs one kernel per op (add; sum of squares; normalise "
            "[; per-row quantise]): µs, effective GB/s, fraction of the measured device-copy bandwidth, speedup. "
            "Rows <= 32 are timed inside a CUDA graph, up to --graph-rows in a graph over rotated inputs.");
    o.ints("--rows", rows_, 1, (int64_t{1} << 31) - 1, "rows", std::vector<int64_t>{8, 2048});
    o.ints("--hidden", hidden_, 8, int64_t{1} << 20, "H", std::nullopt, 8);
    o.choice("--dtype", dtype_, {"bf16", "fp16"}, "element type");
    o.choice("--fp8", fp8_, {"none", "static", "dynamic", "all"}, "output kind (all: each shape three times)",
             std::string("none,dynamic"));
    o.integer("--graph-calls", graph_calls_, 1, 100000, "calls per captured graph (rows <= --graph-rows)");
    o.integer("--graph-rows", graph_rows_, 0, 1 << 30,
              "rows timed as CUDA-graph replays: up to 32 on one input set, above that cycling over rotated sets "
              "(as `python -m blockfuse.bench memory-bound`); more rows with events per call");
    o.integer("--preload-chunks", preload_chunks_, 0, 1 << 30,
              "the most rows x H/8 whose call loads the weight with the row (src/add_rmsnorm/config.h: "
              "kAddRmsNormPreloadChunks)");
    o.choice("--clusters", clusters_, {"on", "off"}, "sm_90 cluster kernels; off times the one-block-per-row kernels");
    o.choice("--rule", rule_, {"default", "v8", "v4wide", "wide"},
             "one-block shape (src/add_rmsnorm/config.h): default = per call (kAuto: wide where measured faster, else "
             "v4wide), v8 = 8 chunks x 256 threads for 8192 < H <= 16384, "
             "v4wide = 4 chunks x 512 threads there, wide = up to 512 threads at every H <= 16384 (v1 x 512 at "
             "H = 4096, v2 x 512 at 8192)");
    o.integer("--skew-mb", skew_mb_, 0, 1024,
              "MiB allocated between consecutive buffers of a point (x, residual, residual_out, out), meant to move "
              "their relative placement; the JSON records the offsets actually obtained (2 MiB left them unchanged "
              "on the H100: the allocator placed the gaps elsewhere)");
  }

  void run(Bench& b) override {
    tuning_.clusters = clusters_ == "on";
    tuning_.rule = rule_ == "v8"       ? detail::AddRmsNormRule::kV8
                   : rule_ == "v4wide" ? detail::AddRmsNormRule::kV4Wide
                   : rule_ == "wide"   ? detail::AddRmsNormRule::kWide
                                       : detail::kAddRmsNormDefaultRule;
    tuning_.preload_chunks = preload_chunks_;
    b.info()["preload_chunks"] = preload_chunks_;
    b.info()["graph_rows"] = graph_rows_;
    const DType dt = dtype_ == "bf16" ? DType::kBF16 : DType::kFP16;
    std::vector<Mode> modes;
    const bool all = fp8_ == "all", pair = fp8_ == "none,dynamic";  // the pair: --quick's
    if (fp8_ == "none" || all || pair) modes.push_back(Mode::kNone);
    if (fp8_ == "static" || all) modes.push_back(Mode::kStatic);
    if (fp8_ == "dynamic" || all || pair) modes.push_back(Mode::kDynamic);
    const double copy = b.copy_gbs();
    b.title("blockfuse bench add-rmsnorm — " + b.device().name + " (cc " + b.device().cc + "), " + dtype_ + ", eps " +
            fmt(double(kEps), 6) + "; median of " + std::to_string(b.reps()) + " (after " + std::to_string(b.warmup()) + " warm-up)");
    b.title("GB/s = minimum bytes (read x, residual, weight; write residual_out, out, scales) / time; %copy = of the device "
            "copy measured this run (" + fmt(copy, 0) + " GB/s);");
    b.title("%same-copy = of a cudaMemcpyAsync D2D of bytes/2 timed the same way ('copy µs'); kernel cN: = a cluster of N "
            "CTAs per row;");
    b.title("base = one kernel per op; rows <= 32 timed as " + std::to_string(graph_calls_) +
            " calls per CUDA graph on one input set, up to " + std::to_string(graph_rows_) +
            " rows as a graph cycling over 'rot' input copies, larger with events per call and inputs rotated.");
    b.columns({"H", "rows", "fp8", "kernel", "µs", "GB/s", "%copy", "%same-copy", "copy µs", "base µs", "base GB/s", "speedup", "timing", "verified"});
    b.info()["dtype"] = dtype_;
    b.info()["copy_bandwidth_gbs"] = copy;
    for (int64_t H : hidden_) {
      testing::DeviceBuffer<uint16_t> w{size_t(H)};
      testing::DeviceBuffer<float> static_scale_buf(1);
      testing::fill_uniform(make_matrix(w.data(), dt, 1, H), -1.f, 1.f, 77 + uint64_t(H), b.stream());
      // x, residual in [-1, 1): |v| <= |r|/rms · |w| stays below ~2.5; this scale keeps FP8 unsaturated.
      const float static_scale = 2.5f / kFp8E4M3Max;
      BENCH_CUDA(cudaMemcpyAsync(static_scale_buf.data(), &static_scale, 4, cudaMemcpyHostToDevice, b.stream()));
      std::vector<uint16_t> w_host(static_cast<size_t>(H));
      BENCH_CUDA(cudaMemcpyAsync(w_host.data(), w.data(), 2 * size_t(H), cudaMemcpyDeviceToHost, b.stream()));
      BENCH_CUDA(cudaStreamSynchronize(b.stream()));
      for (int64_t M : rows_)
        for (Mode mode : modes) point(b, dt, mode, M, H, w, static_scale_buf.data(), static_scale, w_host);
    }
  }

  void point(Bench& b, DType dt, Mode mode, int64_t M, int64_t H, const testing::DeviceBuffer<uint16_t>& w,
             const float* static_scale_dev, float static_scale, const std::vector<uint16_t>& w_host) {
    const cudaStream_t s = b.stream();
    const size_t es = dtype_size(dt), elems = size_t(M) * size_t(H), mat = es * elems;
    const size_t out_bytes = mode == Mode::kNone ? mat : elems;
    const size_t scale_bytes = mode == Mode::kDynamic ? 4 * size_t(M) : mode == Mode::kStatic ? 4 : 0;
    const double bytes = 3.0 * double(mat) + double(es * H) + double(out_bytes) + double(scale_bytes);  // the op's minimum
    const int sets = M <= 32 ? 1 : rotation_sets(int64_t(bytes), 16);
    const Method method = M <= graph_rows_ ? Method::graph(std::max(graph_calls_, sets)) : Method::events();
    const size_t copy_bytes = size_t(bytes / 2) / 16 * 16;  // the same-size copy (16-byte multiple)
    const size_t per_set = 3 * mat + out_bytes + 8 * size_t(M) + (mode == Mode::kDynamic ? mat : 0) + 2 * copy_bytes;
    const std::string point = "H=" + std::to_string(H) + " rows=" + std::to_string(M) + " fp8=" + mode_name(mode);
    if (!b.fits(per_set * size_t(sets), point)) return;
    std::vector<Set> set(static_cast<size_t>(sets));
    std::vector<testing::DeviceBuffer<uint8_t>> skew;  // --skew-mb: gaps between the buffers
    auto gap = [&]() { if (skew_mb_ > 0) skew.emplace_back(size_t(skew_mb_) << 20); };
    for (int i = 0; i < sets; ++i) {
      Set& st = set[size_t(i)];
      st.x = testing::DeviceBuffer<uint16_t>(elems);
      gap();
      st.res = testing::DeviceBuffer<uint16_t>(elems);
      gap();
      st.ro = testing::DeviceBuffer<uint16_t>(elems);
      gap();
      st.out = testing::DeviceBuffer<uint8_t>(out_bytes);
      st.scales = testing::DeviceBuffer<float>(size_t(M));
      st.y = testing::DeviceBuffer<uint16_t>(mode == Mode::kDynamic ? elems : 8);
      st.rstd = testing::DeviceBuffer<float>(size_t(M));
      testing::fill_uniform(make_matrix(st.x.data(), dt, M, H), -1.f, 1.f, 1000003ull * uint64_t(M) + 2 * uint64_t(i), s);
      testing::fill_uniform(make_matrix(st.res.data(), dt, M, H), -1.f, 1.f, 1000003ull * uint64_t(M) + 2 * uint64_t(i) + 1, s);
    }
    const ConstMatrix wv = make_matrix(static_cast<const void*>(w.data()), dt, 1, H);
    auto fused = [&](int i) {
      const Set& st = set[size_t(i % sets)];
      const ConstMatrix xv = make_matrix(static_cast<const void*>(st.x.data()), dt, M, H);
      const ConstMatrix rv = make_matrix(static_cast<const void*>(st.res.data()), dt, M, H);
      const Matrix rov = make_matrix(st.ro.data(), dt, M, H);
      RmsNormOptions opt;
      opt.eps = kEps;
      if (mode == Mode::kNone)
        detail::add_rmsnorm_tuned(xv, rv, wv, rov, make_matrix(st.out.data(), dt, M, H), opt, tuning_, s);
      else
        detail::add_rmsnorm_fp8_tuned(
            xv, rv, wv, rov, make_fp8_matrix(st.out.data(), M, H),
            mode == Mode::kStatic ? Fp8Scale{Fp8ScaleMode::kStaticPerTensor, const_cast<float*>(static_scale_dev)}
                                  : Fp8Scale{Fp8ScaleMode::kDynamicPerRow, st.scales.data()},
            opt, tuning_, s);
    };
    const int chunks = int(H / 8);
    const int64_t n_chunks = M * chunks;
    const unsigned ew_blocks = unsigned(std::min<int64_t>((n_chunks + 255) / 256, int64_t(b.device().sms) * 16));
    auto base = [&](int i) {
      const Set& st = set[size_t(i % sets)];
      auto* x = reinterpret_cast<const uint4*>(st.x.data());
      auto* r = reinterpret_cast<const uint4*>(st.res.data());
      auto* ro = reinterpret_cast<uint4*>(st.ro.data());
      float* rstd = st.rstd.data();
      const bool bf = dt == DType::kBF16;
      if (bf) base_add<__nv_bfloat16><<<ew_blocks, 256, 0, s>>>(x, r, ro, n_chunks);
      else base_add<__half><<<ew_blocks, 256, 0, s>>>(x, r, ro, n_chunks);
      if (bf) base_rstd<__nv_bfloat16><<<unsigned(M), 256, 0, s>>>(ro, chunks, rstd, kEps);
      else base_rstd<__half><<<unsigned(M), 256, 0, s>>>(ro, chunks, rstd, kEps);
      void* nout = mode == Mode::kDynamic ? static_cast<void*>(st.y.data()) : static_cast<void*>(st.out.data());
      const int kind = mode == Mode::kStatic ? 1 : 0;
      auto* wp = reinterpret_cast<const uint4*>(w.data());
      if (bf) base_norm<__nv_bfloat16><<<ew_blocks, 256, 0, s>>>(ro, wp, rstd, chunks, n_chunks, nout, kind, static_scale_dev);
      else base_norm<__half><<<ew_blocks, 256, 0, s>>>(ro, wp, rstd, chunks, n_chunks, nout, kind, static_scale_dev);
      if (mode == Mode::kDynamic) {
        auto* y = reinterpret_cast<const uint4*>(st.y.data());
        auto* q = reinterpret_cast<uint2*>(st.out.data());
        if (bf) base_quant_dynamic<__nv_bfloat16><<<unsigned(M), 256, 0, s>>>(y, chunks, q, st.scales.data());
        else base_quant_dynamic<__half><<<unsigned(M), 256, 0, s>>>(y, chunks, q, st.scales.data());
      }
      BENCH_CUDA(cudaGetLastError());
    };

    // Verify both pipelines (outputs poisoned first, so an unwritten element shows).
    auto poison = [&]() {
      BENCH_CUDA(cudaMemsetAsync(set[0].ro.data(), 0xff, mat, s));
      BENCH_CUDA(cudaMemsetAsync(set[0].out.data(), 0xff, out_bytes, s));
      BENCH_CUDA(cudaMemsetAsync(set[0].scales.data(), 0xff, 4 * size_t(M), s));
    };
    poison();
    fused(0);
    BENCH_CUDA(cudaStreamSynchronize(s));
    const Check vf = verify(dt, mode, M, H, set[0], w_host, static_scale, kEps, false);
    poison();
    base(0);
    BENCH_CUDA(cudaStreamSynchronize(s));
    const Check vb = verify(dt, mode, M, H, set[0], w_host, static_scale, kEps, true);
    const bool ok = b.verify(point + " (fused)", vf) & b.verify(point + " (baseline)", vb);

    const Timing tf = b.time(fused, method), tb = b.time(base, method), tc = b.time_copy(copy_bytes, sets, method);
    const double us = tf.us(), bus = tb.us(), cus = tc.us();
    const double gbs = bytes / (tf.median_ms * 1e-3) / 1e9, bgbs = bytes / (tb.median_ms * 1e-3) / 1e9;
    const double cgbs = 2.0 * double(copy_bytes) / (tc.median_ms * 1e-3) / 1e9;  // read + written
    b.log("%s: %.2f µs %.0f GB/s (%s%% of copy, %.1f%% of the same-size copy %.2f µs), baseline %.2f µs, x%.2f %s",
          point.c_str(), us, gbs, b.pct_of_copy(gbs).c_str(), 100 * gbs / cgbs, cus, bus, bus / us, ok ? "verified" : "VERIFY FAILED");
    const std::string timing = (method.is_graph() ? method.label() + " " : std::string()) + "rot " + std::to_string(sets);
    const detail::AddRmsNormConfig kc = detail::add_rmsnorm_launch_config(int(H / 8), M, mode == Mode::kDynamic, tuning_);
    const std::string kernel = (kc.cluster > 1 ? "c" + std::to_string(kc.cluster) + ":" : std::string()) +
                               (kc.v ? "v" + std::to_string(kc.v) + "x" + std::to_string(kc.threads) : "loop x" + std::to_string(kc.threads)) +
                               (kc.preload_w ? " wpre" : "") + (kc.streaming_stores ? " cs" : "");
    auto r = b.row({std::to_string(H), std::to_string(M), mode_name(mode), kernel, fmt(us, 2), fmt(gbs, 0), b.pct_of_copy(gbs),
                    fmt(100 * gbs / cgbs, 1), fmt(cus, 2), fmt(bus, 2), fmt(bgbs, 0), fmt(bus / us, 2), timing, ok ? "yes" : "NO"});
    r.set("H", H).set("rows", M).set("dtype", dtype_).set("fp8", mode_name(mode)).set("kernel", kernel)
        .set("bytes", int64_t(bytes)).set("fused_us", us).set("fused_min_us", tf.min_us()).set("fused_gbs", gbs);
    if (b.copy_gbs() > 0) r.set("fused_frac_of_copy", gbs / b.copy_gbs());
    r.set("same_size_copy_bytes", int64_t(copy_bytes)).set("same_size_copy_us", cus).set("same_size_copy_gbs", cgbs)
        .set("fused_frac_of_same_size_copy", gbs / cgbs).set("clusters", clusters_ == "on")
        .set("rule", rule_).set("skew_mb", skew_mb_)
        .set("x_addr_mod_1g", int64_t(reinterpret_cast<uintptr_t>(set[0].x.data()) & ((1ull << 30) - 1)))
        .set("res_minus_x", int64_t(reinterpret_cast<intptr_t>(set[0].res.data()) - reinterpret_cast<intptr_t>(set[0].x.data())))
        .set("ro_minus_x", int64_t(reinterpret_cast<intptr_t>(set[0].ro.data()) - reinterpret_cast<intptr_t>(set[0].x.data())))
        .set("out_minus_x", int64_t(reinterpret_cast<intptr_t>(set[0].out.data()) - reinterpret_cast<intptr_t>(set[0].x.data())))
        .set("baseline", "one kernel per op: add; row sum of squares; normalise (+ per-row quantise for dynamic fp8)")
        .set("baseline_us", bus).set("baseline_min_us", tb.min_us()).set("baseline_gbs", bgbs).set("speedup", bus / us)
        .set("timing", method.is_graph() ? "time_graph_per_call" : "time_it")
        .set("graph_calls", method.graph_calls).set("rotation_sets", sets)
        .set("reps", b.reps()).set("warmup", b.warmup()).set("copy_bandwidth_gbs", b.copy_gbs()).set("verified", ok);
    if (!ok) r.set("verify_error", vf.what + vb.what);
  }

  static constexpr float kEps = 1e-6f;
};

BLOCKFUSE_COMMAND(AddRmsNormBench, "bench add-rmsnorm", "fused residual add + RMSNorm (+FP8) vs one kernel per op: µs, GB/s, % of copy");

}  // namespace
}  // namespace blockfuse::bench
