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
// graph (time_graph_per_call), the way a model's decode graph runs them. Larger row counts: CUDA
// events around each call, inputs and outputs rotated over enough copies to span 3x L2. Out of
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
#include "commands.h"
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
  std::unique_ptr<DevBuf> x, res, ro, out, scales, y, rstd;  // y, rstd: the baseline's intermediates
  std::unique_ptr<DevBuf> copy_src, copy_dst;                // the same-size copy
};

void print_help() {
  std::printf(
      "blockfuse bench add-rmsnorm [options]\n"
      "  Fused add + RMSNorm (blockfuse::add_rmsnorm[_fp8]) vs one kernel per op (add; sum of squares; normalise\n"
      "  [; per-row quantise]): µs, effective GB/s, fraction of the measured device-copy bandwidth, speedup.\n"
      "  --rows LIST          (default 1,8,32,256,2048,8192,32768; rows <= 32 are timed inside a CUDA graph)\n"
      "  --hidden LIST        H (default 4096,16384; any multiple of 8)\n"
      "  --dtype bf16|fp16    (default bf16)\n"
      "  --fp8 none|static|dynamic|all   output kind (default all: each shape three times)\n"
      "  --reps N             timed repetitions, median reported (default 100)\n"
      "  --warmup N           untimed calls first (default 10)\n"
      "  --graph-calls N      calls per captured graph for rows <= 32 (default 20)\n"
      "  --clusters on|off    sm_90 cluster kernels (default on); off times the one-block-per-row kernels\n"
      "  --quick              rows 8,2048 x H 4096,16384 x fp8 none,dynamic, 30 reps (explicit options win)\n"
      "  --json FILE          write the run and its rows as JSON\n"
      "Exit status: 0 ok, 1 a verification failed or an error, 2 no usable GPU.\n");
}

struct Verify {
  bool ok = true;
  std::string what;
};

// Checks rows [0, 8) and the last 8 rows of out (dtype or e4m3) and residual_out against the CPU
// reference: residual_out bit-exact for the fused kernel (the baseline rounds the same way), out
// within 2 dtype roundings (fused) / 3 (baseline: one more rounding of rstd·r), FP8 within one e4m3
// step after de-scaling (+1 for the baseline's extra dtype rounding before quantising).
Verify verify(DType dt, Mode mode, int64_t M, int64_t H, const Set& set, const std::vector<uint16_t>& w_host,
              float static_scale, float eps, bool baseline) {
  Verify v;
  const size_t es = 2;
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < std::min<int64_t>(M, 8); ++r) rows.push_back(r);
  for (int64_t r = std::max<int64_t>(8, M - 8); r < M; ++r) rows.push_back(r);
  std::vector<uint16_t> x(static_cast<size_t>(H)), res(static_cast<size_t>(H)), ro(static_cast<size_t>(H)), out(static_cast<size_t>(H)), r_ref(static_cast<size_t>(H));
  std::vector<uint8_t> q(static_cast<size_t>(H));
  std::vector<double> v_ref(static_cast<size_t>(H));
  const double u = mode == Mode::kNone ? (dt == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048) : 0;
  int64_t bad = 0;
  for (int64_t r : rows) {
    const size_t off = size_t(r * H) * es;
    BENCH_CUDA(cudaMemcpy(x.data(), static_cast<char*>(set.x->p) + off, H * es, cudaMemcpyDeviceToHost));
    BENCH_CUDA(cudaMemcpy(res.data(), static_cast<char*>(set.res->p) + off, H * es, cudaMemcpyDeviceToHost));
    BENCH_CUDA(cudaMemcpy(ro.data(), static_cast<char*>(set.ro->p) + off, H * es, cudaMemcpyDeviceToHost));
    float s = static_scale;
    if (mode == Mode::kNone)
      BENCH_CUDA(cudaMemcpy(out.data(), static_cast<char*>(set.out->p) + off, H * es, cudaMemcpyDeviceToHost));
    else
      BENCH_CUDA(cudaMemcpy(q.data(), static_cast<char*>(set.out->p) + size_t(r * H), H, cudaMemcpyDeviceToHost));
    if (mode == Mode::kDynamic) BENCH_CUDA(cudaMemcpy(&s, static_cast<float*>(set.scales->p) + r, 4, cudaMemcpyDeviceToHost));
    reference::add_rmsnorm(dt, 1, H, x.data(), H, res.data(), H, w_host.data(), eps, false, r_ref.data(), v_ref.data());
    if (ro != r_ref) { ++bad; v.what += "residual_out row " + std::to_string(r) + " differs; "; }
    if (mode == Mode::kDynamic) {
      const float want = reference::e4m3_dynamic_scale(v_ref.data(), H);
      if (!(std::fabs(s - want) <= (baseline ? 1e-2f : 1e-5f) * want)) {
        ++bad;
        v.what += "scale row " + std::to_string(r) + " = " + fmt(s, 6) + " vs " + fmt(want, 6) + "; ";
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
      if (!ok && bad++ < 3) v.what += "out(" + std::to_string(r) + ", " + std::to_string(i) + ") off; ";
    }
  }
  v.ok = bad == 0;
  return v;
}

int run(const Args& args) {
  if (args.has("help") || args.has("h")) {
    print_help();
    return 0;
  }
  const bool quick = args.has("quick");
  const std::vector<int64_t> rows_list = args.get_int_list(
      "rows", quick ? std::vector<int64_t>{8, 2048} : std::vector<int64_t>{1, 8, 32, 256, 2048, 8192, 32768});
  const std::vector<int64_t> hidden = args.get_int_list("hidden", {4096, 16384});
  for (int64_t m : rows_list)
    if (m < 1 || m > (int64_t{1} << 31) - 1) throw Error("--rows: " + std::to_string(m) + " is not in [1, 2^31)");
  for (int64_t h : hidden)
    if (h < 8 || h % 8 != 0 || h > (int64_t{1} << 20)) throw Error("--hidden: " + std::to_string(h) + " is not a multiple of 8 in [8, 2^20]");
  const std::string dts = args.get("dtype", "bf16");
  if (dts != "bf16" && dts != "fp16") throw Error("--dtype must be bf16 or fp16, got '" + dts + "'");
  const DType dt = dts == "bf16" ? DType::kBF16 : DType::kFP16;
  const std::string fp8s = args.get("fp8", quick ? "quick" : "all");
  std::vector<Mode> modes;
  if (fp8s == "none") modes = {Mode::kNone};
  else if (fp8s == "static") modes = {Mode::kStatic};
  else if (fp8s == "dynamic") modes = {Mode::kDynamic};
  else if (fp8s == "all") modes = {Mode::kNone, Mode::kStatic, Mode::kDynamic};
  else if (fp8s == "quick" && quick) modes = {Mode::kNone, Mode::kDynamic};
  else throw Error("--fp8 must be none, static, dynamic or all, got '" + fp8s + "'");
  const int reps = static_cast<int>(args.get_int("reps", quick ? 30 : 100));
  const int warmup = static_cast<int>(args.get_int("warmup", 10));
  const int graph_calls = static_cast<int>(args.get_int("graph-calls", 20));
  if (reps < 1 || warmup < 0 || graph_calls < 1) throw Error("--reps and --graph-calls must be >= 1, --warmup >= 0");
  if (args.has("json") && args.get("json").empty()) throw Error("--json needs a file name");
  const std::string clusters = args.get("clusters", "on");
  if (clusters != "on" && clusters != "off") throw Error("--clusters must be on or off, got '" + clusters + "'");
  detail::set_add_rmsnorm_clusters_enabled(clusters == "on");

  if (!require_gpu("blockfuse bench add-rmsnorm")) return 2;
  cudaStream_t s = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, void (*)(cudaStream_t)> stream_guard(s, [](cudaStream_t x) { cudaStreamDestroy(x); });
  const std::string dev_name = device_name(), date = now_iso8601();
  int dev_id = 0, sms = 0;
  BENCH_CUDA(cudaGetDevice(&dev_id));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_id));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, dev_id));
  const std::string cc = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  std::fprintf(stderr, "[add-rmsnorm] measuring the device-copy bandwidth (1 GiB each way)...\n");
  const double copy_bw = measure_copy_bandwidth_gbs(s);
  std::fprintf(stderr, "[add-rmsnorm] copy bandwidth %.0f GB/s\n", copy_bw);

  const float eps = 1e-6f;
  const size_t es = dtype_size(dt);
  Table table({"H", "rows", "fp8", "kernel", "µs", "GB/s", "%copy", "%same-copy", "copy µs", "base µs", "base GB/s", "speedup", "timing", "verified"});
  Json jrows = Json::array();
  bool all_ok = true;
  int points = 0, skipped = 0;
  for (int64_t H : hidden) {
    DevBuf w(es * size_t(H)), static_scale_buf(4);
    testing::fill_uniform(make_matrix(w.p, dt, 1, H), -1.f, 1.f, 77 + uint64_t(H), s);
    // x, residual in [-1, 1): |v| <= |r|/rms · |w| stays below ~2.5; this scale keeps FP8 unsaturated.
    const float static_scale = 2.5f / kFp8E4M3Max;
    BENCH_CUDA(cudaMemcpyAsync(static_scale_buf.p, &static_scale, 4, cudaMemcpyHostToDevice, s));
    std::vector<uint16_t> w_host(static_cast<size_t>(H));
    BENCH_CUDA(cudaMemcpyAsync(w_host.data(), w.p, es * size_t(H), cudaMemcpyDeviceToHost, s));
    BENCH_CUDA(cudaStreamSynchronize(s));
    const ConstMatrix wv = make_matrix(static_cast<const void*>(w.p), dt, 1, H);

    for (int64_t M : rows_list)
      for (Mode mode : modes) {
        const size_t mat = es * size_t(M) * size_t(H);
        const size_t out_bytes = mode == Mode::kNone ? mat : size_t(M) * size_t(H);
        const size_t scale_bytes = mode == Mode::kDynamic ? 4 * size_t(M) : mode == Mode::kStatic ? 4 : 0;
        // The minimum traffic of the op.
        const double bytes = 3.0 * double(mat) + double(es * H) + double(out_bytes) + double(scale_bytes);
        const bool graph = M <= 32;
        const int sets = graph ? 1 : rotation_sets(int64_t(bytes), 16);
        // Per set: x, residual, residual_out, out, scales, and the baseline's dtype intermediate
        // (dynamic) and rstd.
        // The same-size copy: bytes/2 copied (16-byte multiple).
        const size_t copy_bytes = size_t(bytes / 2) / 16 * 16;
        const size_t per_set = 3 * mat + out_bytes + 4 * size_t(M) + (mode == Mode::kDynamic ? mat : 0) + 4 * size_t(M) + 2 * copy_bytes;
        size_t free_b = 0, total_b = 0;
        BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
        if (per_set * size_t(sets) + (256u << 20) > free_b) {
          std::fprintf(stderr, "[add-rmsnorm] skip H=%ld rows=%ld: needs %.1f GiB, %.1f GiB free\n", long(H), long(M),
                       per_set * sets / 1073741824.0, free_b / 1073741824.0);
          ++skipped;
          continue;
        }
        std::vector<Set> set(static_cast<size_t>(sets));
        for (int i = 0; i < sets; ++i) {
          Set& st = set[size_t(i)];
          st.x = std::make_unique<DevBuf>(mat);
          st.res = std::make_unique<DevBuf>(mat);
          st.ro = std::make_unique<DevBuf>(mat);
          st.out = std::make_unique<DevBuf>(out_bytes);
          st.scales = std::make_unique<DevBuf>(4 * size_t(M));
          st.y = std::make_unique<DevBuf>(mode == Mode::kDynamic ? mat : 16);
          st.rstd = std::make_unique<DevBuf>(4 * size_t(M));
          st.copy_src = std::make_unique<DevBuf>(copy_bytes);
          st.copy_dst = std::make_unique<DevBuf>(copy_bytes);
          BENCH_CUDA(cudaMemsetAsync(st.copy_src->p, 0, copy_bytes, s));
          testing::fill_uniform(make_matrix(st.x->p, dt, M, H), -1.f, 1.f, 1000003ull * uint64_t(M) + 2 * uint64_t(i), s);
          testing::fill_uniform(make_matrix(st.res->p, dt, M, H), -1.f, 1.f, 1000003ull * uint64_t(M) + 2 * uint64_t(i) + 1, s);
        }
        auto fused = [&](int i) {
          const Set& st = set[size_t(i % sets)];
          const ConstMatrix xv = make_matrix(static_cast<const void*>(st.x->p), dt, M, H);
          const ConstMatrix rv = make_matrix(static_cast<const void*>(st.res->p), dt, M, H);
          const Matrix rov = make_matrix(st.ro->p, dt, M, H);
          RmsNormOptions opt;
          opt.eps = eps;
          if (mode == Mode::kNone)
            add_rmsnorm(xv, rv, wv, rov, make_matrix(st.out->p, dt, M, H), opt, s);
          else
            add_rmsnorm_fp8(xv, rv, wv, rov, make_fp8_matrix(st.out->p, M, H),
                            mode == Mode::kStatic ? Fp8Scale{Fp8ScaleMode::kStaticPerTensor, static_cast<float*>(static_scale_buf.p)}
                                                  : Fp8Scale{Fp8ScaleMode::kDynamicPerRow, static_cast<float*>(st.scales->p)},
                            opt, s);
        };
        const int chunks = int(H / 8);
        const int64_t n_chunks = M * chunks;
        const unsigned ew_blocks = unsigned(std::min<int64_t>((n_chunks + 255) / 256, int64_t(sms) * 16));
        auto base = [&](int i) {
          const Set& st = set[size_t(i % sets)];
          auto* x = static_cast<const uint4*>(st.x->p);
          auto* r = static_cast<const uint4*>(st.res->p);
          auto* ro = static_cast<uint4*>(st.ro->p);
          auto* rstd = static_cast<float*>(st.rstd->p);
          const bool bf = dt == DType::kBF16;
          if (bf) base_add<__nv_bfloat16><<<ew_blocks, 256, 0, s>>>(x, r, ro, n_chunks);
          else base_add<__half><<<ew_blocks, 256, 0, s>>>(x, r, ro, n_chunks);
          if (bf) base_rstd<__nv_bfloat16><<<unsigned(M), 256, 0, s>>>(ro, chunks, rstd, eps);
          else base_rstd<__half><<<unsigned(M), 256, 0, s>>>(ro, chunks, rstd, eps);
          void* nout = mode == Mode::kDynamic ? st.y->p : st.out->p;
          const int kind = mode == Mode::kStatic ? 1 : 0;
          auto* sc = static_cast<const float*>(static_scale_buf.p);
          auto* wp = static_cast<const uint4*>(w.p);
          if (bf) base_norm<__nv_bfloat16><<<ew_blocks, 256, 0, s>>>(ro, wp, rstd, chunks, n_chunks, nout, kind, sc);
          else base_norm<__half><<<ew_blocks, 256, 0, s>>>(ro, wp, rstd, chunks, n_chunks, nout, kind, sc);
          if (mode == Mode::kDynamic) {
            auto* y = static_cast<const uint4*>(st.y->p);
            auto* q = static_cast<uint2*>(st.out->p);
            auto* scales = static_cast<float*>(st.scales->p);
            if (bf) base_quant_dynamic<__nv_bfloat16><<<unsigned(M), 256, 0, s>>>(y, chunks, q, scales);
            else base_quant_dynamic<__half><<<unsigned(M), 256, 0, s>>>(y, chunks, q, scales);
          }
          BENCH_CUDA(cudaGetLastError());
        };

        // Verify both pipelines (outputs poisoned first, so an unwritten element shows).
        auto poison = [&]() {
          BENCH_CUDA(cudaMemsetAsync(set[0].ro->p, 0xff, mat, s));
          BENCH_CUDA(cudaMemsetAsync(set[0].out->p, 0xff, out_bytes, s));
          BENCH_CUDA(cudaMemsetAsync(set[0].scales->p, 0xff, 4 * size_t(M), s));
        };
        poison();
        fused(0);
        BENCH_CUDA(cudaStreamSynchronize(s));
        const Verify vf = verify(dt, mode, M, H, set[0], w_host, static_scale, eps, false);
        poison();
        base(0);
        BENCH_CUDA(cudaStreamSynchronize(s));
        const Verify vb = verify(dt, mode, M, H, set[0], w_host, static_scale, eps, true);
        if (!vf.ok) std::fprintf(stderr, "[add-rmsnorm] VERIFY FAILED (fused) H=%ld rows=%ld %s: %s\n", long(H), long(M), mode_name(mode), vf.what.c_str());
        if (!vb.ok) std::fprintf(stderr, "[add-rmsnorm] VERIFY FAILED (baseline) H=%ld rows=%ld %s: %s\n", long(H), long(M), mode_name(mode), vb.what.c_str());
        const bool ok = vf.ok && vb.ok;
        all_ok = all_ok && ok;

        auto copy = [&](int i) {
          const Set& st = set[size_t(i % sets)];
          BENCH_CUDA(cudaMemcpyAsync(st.copy_dst->p, st.copy_src->p, copy_bytes, cudaMemcpyDeviceToDevice, s));
        };
        Timing tf, tb, tc;
        if (graph) {
          tf = time_graph_per_call([&] { fused(0); }, s, graph_calls, warmup, reps);
          tb = time_graph_per_call([&] { base(0); }, s, graph_calls, warmup, reps);
          tc = time_graph_per_call([&] { copy(0); }, s, graph_calls, warmup, reps);
        } else {
          tf = time_it(fused, s, warmup, reps);
          tb = time_it(base, s, warmup, reps);
          tc = time_it(copy, s, warmup, reps);
        }
        BENCH_CUDA(cudaStreamSynchronize(s));
        const double us = tf.median_ms * 1e3, bus = tb.median_ms * 1e3, cus = tc.median_ms * 1e3;
        const double gbs = bytes / (tf.median_ms * 1e-3) / 1e9, bgbs = bytes / (tb.median_ms * 1e-3) / 1e9;
        const double cgbs = 2.0 * double(copy_bytes) / (tc.median_ms * 1e-3) / 1e9;  // read + written
        ++points;
        std::fprintf(stderr,
                     "[add-rmsnorm] H=%ld rows=%ld fp8=%s: %.2f µs %.0f GB/s (%.1f%% of copy, %.1f%% of the same-size copy "
                     "%.2f µs), baseline %.2f µs, x%.2f %s\n",
                     long(H), long(M), mode_name(mode), us, gbs, 100 * gbs / copy_bw, 100 * gbs / cgbs, cus, bus, bus / us,
                     ok ? "verified" : "VERIFY FAILED");
        const std::string timing = graph ? "graph/" + std::to_string(graph_calls) : "rot " + std::to_string(sets);
        const detail::AddRmsNormConfig kc = detail::add_rmsnorm_launch_config(int(H / 8), M);
        const std::string kernel = (kc.cluster > 1 ? "c" + std::to_string(kc.cluster) + ":" : std::string()) +
                                   (kc.v ? "v" + std::to_string(kc.v) + "x" + std::to_string(kc.threads) : "loop x" + std::to_string(kc.threads));
        table.add({std::to_string(H), std::to_string(M), mode_name(mode), kernel, fmt(us, 2), fmt(gbs, 0), fmt(100 * gbs / copy_bw, 1),
                   fmt(100 * gbs / cgbs, 1), fmt(cus, 2), fmt(bus, 2), fmt(bgbs, 0), fmt(bus / us, 2), timing, ok ? "yes" : "NO"});
        Json r = Json::object();
        r.set("benchmark", "add-rmsnorm")
            .set("device", dev_name)
            .set("compute_capability", cc)
            .set("H", H)
            .set("rows", M)
            .set("dtype", dts)
            .set("fp8", mode_name(mode))
            .set("kernel", kernel)
            .set("bytes", int64_t(bytes))
            .set("fused_us", us)
            .set("fused_min_us", tf.min_ms * 1e3)
            .set("fused_gbs", gbs)
            .set("fused_frac_of_copy", gbs / copy_bw)
            .set("same_size_copy_bytes", int64_t(copy_bytes))
            .set("same_size_copy_us", cus)
            .set("same_size_copy_gbs", cgbs)
            .set("fused_frac_of_same_size_copy", gbs / cgbs)
            .set("clusters", clusters == "on")
            .set("baseline", "one kernel per op: add; row sum of squares; normalise (+ per-row quantise for dynamic fp8)")
            .set("baseline_us", bus)
            .set("baseline_min_us", tb.min_ms * 1e3)
            .set("baseline_gbs", bgbs)
            .set("speedup", bus / us)
            .set("timing", graph ? "time_graph_per_call" : "time_it")
            .set("graph_calls", graph ? graph_calls : 0)
            .set("rotation_sets", sets)
            .set("reps", reps)
            .set("warmup", warmup)
            .set("copy_bandwidth_gbs", copy_bw)
            .set("verified", ok);
        if (!ok) r.set("verify_error", vf.what + vb.what);
        jrows.push(r);
      }
  }

  std::printf("\nblockfuse bench add-rmsnorm — %s (cc %s), %s, eps %g; median of %d (after %d warm-up)\n", dev_name.c_str(),
              cc.c_str(), dts.c_str(), double(eps), reps, warmup);
  std::printf("GB/s = minimum bytes (read x, residual, weight; write residual_out, out, scales) / time; %%copy = of the "
              "device copy measured this run (%.0f GB/s);\n%%same-copy = of a cudaMemcpyAsync D2D of bytes/2 timed the same way "
              "('copy µs'); kernel cN: = a cluster of N CTAs per row;\nbase = one kernel per op; rows <= 32 timed as %d calls per CUDA "
              "graph, larger with inputs rotated over 'rot' copies.\n",
              copy_bw, graph_calls);
  table.print();
  if (skipped) std::printf("(%d point(s) skipped for memory; see stderr)\n", skipped);
  if (args.has("json")) {
    Json out = Json::object();
    out.set("benchmark", "add-rmsnorm")
        .set("device", dev_name)
        .set("compute_capability", cc)
        .set("date", date)
        .set("dtype", dts)
        .set("reps", reps)
        .set("warmup", warmup)
        .set("copy_bandwidth_gbs", copy_bw)
        .set("points", points)
        .set("skipped", skipped)
        .set("all_verified", all_ok)
        .set("rows", jrows);
    write_file(args.get("json"), out.dump());
    std::fprintf(stderr, "[add-rmsnorm] wrote %s\n", args.get("json").c_str());
  }
  if (!all_ok) {
    std::fprintf(stderr, "blockfuse bench add-rmsnorm: verification FAILED (see above)\n");
    return 1;
  }
  return 0;
}

BLOCKFUSE_COMMAND("bench add-rmsnorm", run, "fused residual add + RMSNorm (+FP8) vs one kernel per op: µs, GB/s, % of copy");

}  // namespace
}  // namespace blockfuse::bench
