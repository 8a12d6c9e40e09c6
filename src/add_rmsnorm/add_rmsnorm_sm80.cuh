// Fused residual add + RMSNorm (blockfuse/add_rmsnorm.h): one block (or, on sm_90, one cluster
// of blocks) per row, the row held in registers between the fp32 reduction and the writes, so
// global memory is read once and written once — the minimum traffic, which is the whole cost of
// this memory-bound op.
//
// Kernel shapes (chosen on the host from H and the device, see config.h):
//   cluster path   sm_90, 8192 <= H <= 131072 and few rows (config.h): a thread-block cluster of C = 2, 4 or 8 CTAs shares
//                  each row, CTA rank k holding the slice of chunks [k*S, (k+1)*S) (S = ceil(H/8 /
//                  C), the last slice shorter) in registers, V = 2 or 4 per thread, its weight
//                  slice too. The CTAs exchange their partial sums (and FP8 amax) through
//                  distributed shared memory and add them in rank order, so every CTA of the
//                  cluster computes the bit-identical total and rsqrt. The row is then fetched by
//                  C SMs at once (one SM per row was per-SM bound: 6-7 µs for one H = 16384 row on
//                  the H100) and the CTAs are small (finer waves for many rows).
//   register path  each of T threads (a multiple of 32) holds V 16-byte chunks of the row (8
//                  elements each, as packed dtype bits: the norm is computed from the rounded
//                  residual_out, so the rounded values are all that needs keeping — 4 registers
//                  per chunk). V in {1, 2, 4, 8}: T*V*8 >= H with the tail chunks masked, so any
//                  H % 8 == 0 up to 8 * 512 * 8 = 32768 takes this path. Chunk c of thread t is
//                  c = t + i*T (consecutive threads read consecutive 16-byte chunks: coalesced).
//   loop path      H > 32768: a block of 512 threads loops over the row's chunks; the second pass
//                  re-reads the row (from residual_out when written — the in-place alias makes
//                  the residual stale — else x and residual), which mostly hits L2. More traffic,
//                  but only for hidden sizes no current model has.
// One block per row (rather than a warp per row) also serves the latency-bound decode case
// (1-32 rows in a CUDA graph): every chunk of the row is requested by some thread at once.
#include "blockfuse/add_rmsnorm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include <mutex>
#include <vector>

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "add_rmsnorm/config.h"
#include "blockfuse/gated_up.h"  // current_device_spec
#include "common/check.h"
#include "common/fp8_device.cuh"

namespace blockfuse {
namespace {

enum OutKind : int { kOutDtype = 0, kOutFp8Static = 1, kOutFp8Dynamic = 2 };

struct Params {
  const void* x;
  int64_t ldx;
  const void* res;  // nullptr: absent (r = x)
  int64_t ldr;
  const void* w;
  void* res_out;  // nullptr: not written
  int64_t ldro;
  void* out;  // dtype elements or e4m3 bytes
  int64_t ldo;
  float* scale;  // fp8 static: read (1 float); dynamic: written (rows floats)
  int64_t rows;
  int h;  // elements per row, % 8 == 0
  float eps;
  bool gemma;
};

// 8 packed elements <-> 8 floats. Pairs go through the 2-wide intrinsics (one instruction each).
template <class T> struct Pack;
template <> struct Pack<__nv_bfloat16> {
  static __device__ __forceinline__ void unpack(const uint4& v, float f[8]) {
    const auto* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) { const float2 t = __bfloat1622float2(p[i]); f[2 * i] = t.x; f[2 * i + 1] = t.y; }
  }
  static __device__ __forceinline__ uint4 pack(const float f[8]) {
    uint4 v;
    auto* p = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return v;
  }
};
template <> struct Pack<__half> {
  static __device__ __forceinline__ void unpack(const uint4& v, float f[8]) {
    const auto* p = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) { const float2 t = __half22float2(p[i]); f[2 * i] = t.x; f[2 * i + 1] = t.y; }
  }
  static __device__ __forceinline__ uint4 pack(const float f[8]) {
    uint4 v;
    auto* p = reinterpret_cast<__half2*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
    return v;
  }
};

__device__ __forceinline__ uint4 zero4() { return make_uint4(0u, 0u, 0u, 0u); }

// Sum or max over the block; every thread gets the result. `red` is a 32-float shared array used
// by this reduction only; the trailing barrier lets the caller reuse it (the next row of the
// grid-stride loop) without a race against slower warps still reading it.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, u) : v + u;
  }
  if (blockDim.x == 32) return v;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? red[lane] : 0.0f;  // 0 is the identity of both (max of |v|)
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, u) : v + u;
  }
  __syncthreads();
  return v;
}

// r = round(x + residual) for one chunk (x alone when the residual is absent).
template <class T>
__device__ __forceinline__ uint4 add_chunk(const uint4& xv, const uint4& rv, bool has_res) {
  if (!has_res) return xv;
  float a[8], b[8];
  Pack<T>::unpack(xv, a);
  Pack<T>::unpack(rv, b);
#pragma unroll
  for (int j = 0; j < 8; ++j) a[j] += b[j];
  return Pack<T>::pack(a);
}

__device__ __forceinline__ float sumsq8(const float f[8]) {
  float s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s = fmaf(f[j], f[j], s);
  return s;
}

// v = r · inv · g for one chunk; g = w or 1 + w (w: the weight chunk, already in registers).
template <class T>
__device__ __forceinline__ void norm_chunk(const uint4& r, const uint4& w, float inv, bool gemma, float v[8]) {
  float rf[8], g[8];
  Pack<T>::unpack(r, rf);
  Pack<T>::unpack(w, g);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = rf[j] * inv * (gemma ? 1.0f + g[j] : g[j]);
}

// The weight chunks a thread needs (chunks first + tid + i*nt, i < V, those below `len`), loaded
// once per block before the row loop, so their latency overlaps the first row's loads instead of
// following the reduction (the weight is shared by every row: the read-only path keeps it in L2).
template <int V>
__device__ __forceinline__ void load_weight(const void* w, int first, int len, uint4 (&wv)[V]) {
  const uint4* wp = static_cast<const uint4*>(w) + first;
  const int tid = threadIdx.x, nt = blockDim.x;
#pragma unroll
  for (int i = 0; i < V; ++i) wv[i] = tid + i * nt < len ? __ldg(wp + tid + i * nt) : zero4();
}

// Called at the top of each row of the grid-stride loop: makes the packed weight registers opaque
// to the compiler, which otherwise hoists their unpacking to fp32 (loop-invariant) out of the row
// loop and keeps 8 instead of 4 registers per chunk live — 90+ registers and spills at V = 8 (ptxas,
// sm_90). Emits no instruction.
template <int V>
__device__ __forceinline__ void keep_packed(uint4 (&wv)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) asm volatile("" : "+r"(wv[i].x), "+r"(wv[i].y), "+r"(wv[i].z), "+r"(wv[i].w));
}

// Starts fetching the weight into L2 (one request per 128-byte line: the thread whose chunk
// begins a line) so that, for a few-row decode step, its DRAM latency overlaps the row loads instead
// of following the reduction; the weight registers are only taken after the reduction.
template <class T>
__device__ __forceinline__ void prefetch_weight(const T* w, int nchunks) {
  for (int c = threadIdx.x * 8; c < nchunks; c += blockDim.x * 8)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(w + c * 8));
}

__device__ __forceinline__ float finite_abs_max8(const float v[8]) {
  float m = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) m = fmaxf(m, finite_abs(v[j]));
  return m;
}

// Stores chunk c (elements 8c..8c+7) of the output row; fp8: q = sat(v · inv_s) with inv_s = 1 / scale
// (common/fp8_device.cuh: non-finite v -> NaN, the quantisation every blockfuse FP8 output uses).
template <class T, int kOut>
__device__ __forceinline__ void store_out(const Params& p, int64_t row, int c, const float v[8], float inv_s) {
  if constexpr (kOut == kOutDtype) {
    reinterpret_cast<uint4*>(static_cast<T*>(p.out) + row * p.ldo)[c] = Pack<T>::pack(v);
  } else {
    store_fp8x8(static_cast<uint8_t*>(p.out) + row * p.ldo + 8 * int64_t(c), *reinterpret_cast<const float(*)[8]>(v), inv_s);
  }
}

// Register path: T = blockDim.x threads, V chunks each.
template <class T, int V, int kOut>
// (Capping V = 8 at 64 registers, 4 blocks of 256 per SM instead of 2, measured up to 4 % slower (one point 1 % faster) at
// H = 16384, 256-32768 rows: __launch_bounds__(512, 2) spills and the extra rows in flight do not pay.)
__global__ void __launch_bounds__(512) add_rmsnorm_regs(const Params p) {
  __shared__ float red[2][32];
  const int nchunks = p.h >> 3;
  const int tid = threadIdx.x, nt = blockDim.x;
  const T* w = static_cast<const T*>(p.w);
  const float inv_h = 1.0f / float(p.h);
  const float static_scale = kOut == kOutFp8Static ? __ldg(p.scale) : 1.0f;
  prefetch_weight(w, nchunks);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + row * p.ldx);
    const uint4* rr = p.res ? reinterpret_cast<const uint4*>(static_cast<const T*>(p.res) + row * p.ldr) : nullptr;
    // All loads first (x, then residual) so every chunk of the row is in flight at once. The weight
    // chunks are read after the reduction (L2-prefetched at the start): loading them up front into
    // registers too, before the row loop, measured slower on the H100 — at H = 16384 and
    // 8192-32768 rows 78-87 % instead of 89-98 % of copy bandwidth (more registers, fewer rows per SM).
    uint4 r[V], b[V];
#pragma unroll
    for (int i = 0; i < V; ++i) r[i] = tid + i * nt < nchunks ? __ldcs(xr + tid + i * nt) : zero4();
    if (rr) {
#pragma unroll
      for (int i = 0; i < V; ++i) b[i] = tid + i * nt < nchunks ? __ldcs(rr + tid + i * nt) : zero4();
    }
    float ss = 0;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      r[i] = add_chunk<T>(r[i], b[i], rr != nullptr);  // masked chunks stay 0: no effect on the sum
      float f[8];
      Pack<T>::unpack(r[i], f);
      ss += sumsq8(f);
    }
    const float inv = rsqrtf(block_reduce<false>(ss, red[0]) * inv_h + p.eps);
    if (p.res_out) {
      uint4* ro = reinterpret_cast<uint4*>(static_cast<T*>(p.res_out) + row * p.ldro);
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (tid + i * nt < nchunks) ro[tid + i * nt] = r[i];
    }
    float s = static_scale;
    if constexpr (kOut == kOutFp8Dynamic) {
      // amax of the finite v over the row: a second reduction in the same pass, over the values
      // still in registers (the weight chunks come again from L1).
      float m = 0;
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (tid + i * nt < nchunks) {
          float v[8];
          norm_chunk<T>(r[i], __ldg(reinterpret_cast<const uint4*>(w) + tid + i * nt), inv, p.gemma, v);
          m = fmaxf(m, finite_abs_max8(v));
        }
      const float amax = block_reduce<true>(m, red[1]);
      s = fp8_dynamic_scale(amax);
      if (tid == 0) p.scale[row] = s;
    }
    const float inv_s = 1.0f / s;
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (tid + i * nt < nchunks) {
        float v[8];
        norm_chunk<T>(r[i], __ldg(reinterpret_cast<const uint4*>(w) + tid + i * nt), inv, p.gemma, v);
        store_out<T, kOut>(p, row, tid + i * nt, v, inv_s);
      }
  }
}

// Cluster path (sm_90): the CTAs of a cluster of C share each row (config.h). CTA rank k holds
// chunks [first, first + len) of the row (first = k*S), V per thread: chunk first + tid + i*nt.
// Per row: all loads (x, residual; the weight slice once per CTA) -> partial sum of squares ->
// block reduction -> this CTA's partial into its shared `part` -> cluster.sync -> every thread
// reads the C partials through distributed shared memory and adds them in rank order (so all CTAs
// get the same bits: the same rsqrt everywhere) -> the same for the FP8 dynamic amax -> stores.
// `part` is double-buffered by row parity: a CTA writes the slot of row j+2 only after passing the
// barrier of row j+1, which every CTA reaches after reading the slot of row j. All CTAs of a
// cluster walk the same rows (grid-stride by clusters), so the barriers match; a last
// cluster.sync keeps each CTA's shared memory alive until its peers have read it.
template <class T, int V, int kOut>
__global__ void __launch_bounds__(512) add_rmsnorm_cluster(const Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  __shared__ float red[2][32];
  __shared__ float part[2][2];  // [row parity][sum of squares, amax] of this CTA's slice
  const int C = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int nchunks = p.h >> 3;
  const int slice = (nchunks + C - 1) / C;
  const int first = rank * slice;
  const int len = max(0, min(slice, nchunks - first));
  const int tid = threadIdx.x, nt = blockDim.x;
  const float inv_h = 1.0f / float(p.h);
  const float static_scale = kOut == kOutFp8Static ? __ldg(p.scale) : 1.0f;
  uint4 w[V];
  load_weight<V>(p.w, first, len, w);
  int par = 0;
  for (int64_t row = blockIdx.x / C; row < p.rows; row += gridDim.x / C, par ^= 1) {
    keep_packed<V>(w);
    const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + row * p.ldx) + first;
    const uint4* rr = p.res ? reinterpret_cast<const uint4*>(static_cast<const T*>(p.res) + row * p.ldr) + first : nullptr;
    uint4 r[V], b[V];
#pragma unroll
    for (int i = 0; i < V; ++i) r[i] = tid + i * nt < len ? __ldcs(xr + tid + i * nt) : zero4();
    if (rr) {
#pragma unroll
      for (int i = 0; i < V; ++i) b[i] = tid + i * nt < len ? __ldcs(rr + tid + i * nt) : zero4();
    }
    float ss = 0;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      r[i] = add_chunk<T>(r[i], b[i], rr != nullptr);  // masked chunks stay 0: no effect on the sum
      float f[8];
      Pack<T>::unpack(r[i], f);
      ss += sumsq8(f);
    }
    // residual_out does not depend on the norm: stored before the cluster barrier, so the stores
    // drain while the CTAs wait for each other. In place (residual_out == residual) this CTA only
    // overwrites its own slice, which it has already read.
    if (p.res_out) {
      uint4* ro = reinterpret_cast<uint4*>(static_cast<T*>(p.res_out) + row * p.ldro) + first;
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (tid + i * nt < len) ro[tid + i * nt] = r[i];
    }
    const float cta_ss = block_reduce<false>(ss, red[0]);
    if (tid == 0) part[par][0] = cta_ss;
    cluster.sync();
    float total = 0;
#pragma unroll 1
    for (int k = 0; k < C; ++k) total += *cluster.map_shared_rank(&part[par][0], k);
    const float inv = rsqrtf(total * inv_h + p.eps);
    float s = static_scale;
    if constexpr (kOut == kOutFp8Dynamic) {
      float m = 0;
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (tid + i * nt < len) {
          float v[8];
          norm_chunk<T>(r[i], w[i], inv, p.gemma, v);
          m = fmaxf(m, finite_abs_max8(v));
        }
      const float cta_m = block_reduce<true>(m, red[1]);
      if (tid == 0) part[par][1] = cta_m;
      cluster.sync();
      float amax = 0;
#pragma unroll 1
      for (int k = 0; k < C; ++k) amax = fmaxf(amax, *cluster.map_shared_rank(&part[par][1], k));
      s = fp8_dynamic_scale(amax);
      if (rank == 0 && tid == 0) p.scale[row] = s;
    }
    const float inv_s = 1.0f / s;
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (tid + i * nt < len) {
        float v[8];
        norm_chunk<T>(r[i], w[i], inv, p.gemma, v);
        store_out<T, kOut>(p, row, first + tid + i * nt, v, inv_s);
      }
  }
  cluster.sync();
#else
  // Never launched below sm_90 (cluster_path_available() checks the code's architecture).
  __trap();
#endif
}

// Loop path (H > 32768): the row does not fit the registers of one block, so it is read again.
template <class T, int kOut>
__global__ void __launch_bounds__(512) add_rmsnorm_loop(const Params p) {
  __shared__ float red[2][32];
  const int nchunks = p.h >> 3;
  const uint4* w = static_cast<const uint4*>(p.w);  // read-only path: shared by every row, stays in L2
  const float inv_h = 1.0f / float(p.h);
  const float static_scale = kOut == kOutFp8Static ? __ldg(p.scale) : 1.0f;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + row * p.ldx);
    const uint4* rr = p.res ? reinterpret_cast<const uint4*>(static_cast<const T*>(p.res) + row * p.ldr) : nullptr;
    uint4* ro = p.res_out ? reinterpret_cast<uint4*>(static_cast<T*>(p.res_out) + row * p.ldro) : nullptr;
    // The rounded residual of chunk c after the first pass: from residual_out when it was written
    // (this thread's own earlier store; with the in-place alias the residual itself is overwritten),
    // else recomputed from the unchanged inputs — the same fp32 sum, so the same bits.
    auto reread = [&](int c) {
      if (ro) return ro[c];
      const uint4 b = rr ? rr[c] : zero4();
      return add_chunk<T>(xr[c], b, rr != nullptr);
    };
    float ss = 0;
    for (int c = threadIdx.x; c < nchunks; c += blockDim.x) {
      const uint4 b = rr ? rr[c] : zero4();
      const uint4 r = add_chunk<T>(xr[c], b, rr != nullptr);
      float f[8];
      Pack<T>::unpack(r, f);
      ss += sumsq8(f);
      if (ro) ro[c] = r;
    }
    const float inv = rsqrtf(block_reduce<false>(ss, red[0]) * inv_h + p.eps);
    float s = static_scale;
    if constexpr (kOut == kOutFp8Dynamic) {
      float m = 0;
      for (int c = threadIdx.x; c < nchunks; c += blockDim.x) {
        float v[8];
        norm_chunk<T>(reread(c), __ldg(w + c), inv, p.gemma, v);
        m = fmaxf(m, finite_abs_max8(v));
      }
      const float amax = block_reduce<true>(m, red[1]);
      s = fp8_dynamic_scale(amax);
      if (threadIdx.x == 0) p.scale[row] = s;
    }
    const float inv_s = 1.0f / s;
    for (int c = threadIdx.x; c < nchunks; c += blockDim.x) {
      float v[8];
      norm_chunk<T>(reread(c), __ldg(w + c), inv, p.gemma, v);
      store_out<T, kOut>(p, row, c, v, inv_s);
    }
  }
}

template <class T, int V, int kOut>
void launch_cluster(const Params& p, const detail::AddRmsNormConfig& cfg, cudaStream_t stream) {
  // One cluster per row (grid-stride beyond 2^31 - 1 blocks).
  const int64_t clusters = std::min<int64_t>(p.rows, std::numeric_limits<int>::max() / cfg.cluster);
  cudaLaunchConfig_t lc{};
  lc.gridDim = dim3(static_cast<unsigned>(clusters * cfg.cluster));
  lc.blockDim = dim3(static_cast<unsigned>(cfg.threads));
  lc.dynamicSmemBytes = 0;
  lc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cfg.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  lc.attrs = attr;
  lc.numAttrs = 1;
  BF_CUDA_CHECK(cudaLaunchKernelEx(&lc, add_rmsnorm_cluster<T, V, kOut>, p));
}

// Whether the current device runs the cluster kernels: compute capability >= 9.0 *and* the
// library carries code for them compiled for sm_90+ (a build for sm_80 only runs on a Hopper
// through its compute_80 PTX, where the cluster kernel's body is a trap; ptxVersion is the
// virtual architecture the loaded code was compiled for). Cached per device.
bool cluster_path_available() {
  static std::mutex mu;
  static std::vector<int> cache;  // per device: -1 unknown, 0 no, 1 yes
  int dev = 0;
  BF_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(cache.size()) <= dev) cache.resize(dev + 1, -1);
  if (cache[dev] < 0) {
    bool ok = current_device_spec().cc_major >= 9;
    if (ok) {
      cudaFuncAttributes a{};
      BF_CUDA_CHECK(cudaFuncGetAttributes(&a, add_rmsnorm_cluster<__nv_bfloat16, 2, kOutDtype>));
      ok = a.ptxVersion >= 90;
    }
    cache[dev] = ok ? 1 : 0;
  }
  return cache[dev] == 1;
}

std::atomic<bool> g_clusters_enabled{true};

template <class T, int kOut>
void launch(const Params& p, cudaStream_t stream) {
  const detail::AddRmsNormConfig cfg = detail::add_rmsnorm_launch_config(p.h / 8, p.rows);
  if (cfg.cluster > 1) {
    if (cfg.v == 2)
      launch_cluster<T, 2, kOut>(p, cfg, stream);
    else
      launch_cluster<T, 4, kOut>(p, cfg, stream);
    BF_CHECK_LAUNCH();
    return;
  }
  // One block per row; beyond 2^31 - 1 rows the blocks loop (grid-stride over rows).
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(p.rows, std::numeric_limits<int>::max()));
  switch (cfg.v) {
    case 1: add_rmsnorm_regs<T, 1, kOut><<<blocks, cfg.threads, 0, stream>>>(p); break;
    case 2: add_rmsnorm_regs<T, 2, kOut><<<blocks, cfg.threads, 0, stream>>>(p); break;
    case 4: add_rmsnorm_regs<T, 4, kOut><<<blocks, cfg.threads, 0, stream>>>(p); break;
    case 8: add_rmsnorm_regs<T, 8, kOut><<<blocks, cfg.threads, 0, stream>>>(p); break;
    default: add_rmsnorm_loop<T, kOut><<<blocks, cfg.threads, 0, stream>>>(p); break;
  }
  BF_CHECK_LAUNCH();
}

template <int kOut>
void dispatch(DType t, const Params& p, cudaStream_t stream) {
  if (t == DType::kBF16)
    launch<__nv_bfloat16, kOut>(p, stream);
  else
    launch<__half, kOut>(p, stream);
}

bool absent(const ConstMatrix& m) { return m.data == nullptr && m.rows == 0; }

// Everything about x, residual, weight, residual_out and opt that both entry points share; the
// pointer-only checks (no CUDA call) — device-memory checks come after the caller's own checks so
// every argument error is reported on CPU-only machines too.
void check_common(const char* fn, const ConstMatrix& x, const ConstMatrix& residual, const ConstMatrix& weight,
                  const Matrix& residual_out, const RmsNormOptions& opt) {
  using detail::cat;
  if (!(opt.eps > 0.0f) || !std::isfinite(opt.eps))
    detail::throw_arg(fn, "opt.eps", cat("is ", opt.eps), "a finite eps > 0");
  detail::check_matrix_shape(fn, "x", x);
  if (x.cols <= 0 || x.cols % 8 != 0)
    detail::throw_arg(fn, "x", cat("has cols H = ", x.cols), "H > 0 and H % 8 == 0 (16-byte vectors)");
  if (x.cols > (int64_t{1} << 30))
    detail::throw_arg(fn, "x", cat("has cols H = ", x.cols), "H <= 2^30");
  detail::check_alignment(fn, "x", x, 16, 8);
  if (!absent(residual)) {
    detail::check_matrix_shape(fn, "residual", residual);
    detail::check_same_dtype(fn, "residual", residual, "x", x.dtype);
    if (residual.rows != x.rows || residual.cols != x.cols)
      detail::throw_arg(fn, "residual", cat("is [", residual.rows, ", ", residual.cols, "]"),
                        cat("the shape of 'x' [", x.rows, ", ", x.cols, "], or an empty view (data == nullptr, rows == 0) for no residual"));
    detail::check_alignment(fn, "residual", residual, 16, 8);
  }
  detail::check_matrix_shape(fn, "weight", weight);
  detail::check_same_dtype(fn, "weight", weight, "x", x.dtype);
  if (weight.rows != 1 || weight.cols != x.cols)
    detail::throw_arg(fn, "weight", cat("is [", weight.rows, ", ", weight.cols, "]"), cat("[1, H] (= [1, ", x.cols, "])"));
  detail::check_alignment(fn, "weight", weight, 16, 8);
  if (!absent(residual_out)) {
    detail::check_matrix_shape(fn, "residual_out", residual_out);
    detail::check_same_dtype(fn, "residual_out", residual_out, "x", x.dtype);
    if (residual_out.rows != x.rows || residual_out.cols != x.cols)
      detail::throw_arg(fn, "residual_out", cat("is [", residual_out.rows, ", ", residual_out.cols, "]"),
                        cat("the shape of 'x' [", x.rows, ", ", x.cols, "], or an empty view (data == nullptr, rows == 0) to skip it"));
    detail::check_alignment(fn, "residual_out", residual_out, 16, 8);
    // In place on the residual stream: the exact alias is fine (each element is read before the
    // same thread writes it); a shifted or differently strided overlap would read written values.
    const bool exact_alias = !absent(residual) && residual_out.data == residual.data && residual_out.ld == residual.ld;
    if (!exact_alias && !absent(residual)) detail::check_no_overlap(fn, "residual_out", residual_out, "residual", residual);
    detail::check_no_overlap(fn, "residual_out", residual_out, "x", x);
    detail::check_no_overlap(fn, "residual_out", residual_out, "weight", weight);
  }
}

// `out` (bf16/fp16 or e4m3 bytes, as a byte span) must not overlap anything.
void check_out_overlaps(const char* fn, const detail::Span& out, const ConstMatrix& x, const ConstMatrix& residual,
                        const ConstMatrix& weight, const ConstMatrix& residual_out) {
  detail::check_no_overlap(fn, "out", out, "x", detail::span_of(x));
  if (!absent(residual)) detail::check_no_overlap(fn, "out", out, "residual", detail::span_of(residual));
  detail::check_no_overlap(fn, "out", out, "weight", detail::span_of(weight));
  if (!absent(residual_out)) detail::check_no_overlap(fn, "out", out, "residual_out", detail::span_of(residual_out));
}

void check_devices(const char* fn, const ConstMatrix& x, const ConstMatrix& residual, const ConstMatrix& weight,
                   const ConstMatrix& residual_out) {
  detail::check_device_matrix(fn, "x", x);
  if (!absent(residual)) detail::check_device_matrix(fn, "residual", residual);
  detail::check_device_matrix(fn, "weight", weight);
  if (!absent(residual_out)) detail::check_device_matrix(fn, "residual_out", residual_out);
}

Params make_params(const ConstMatrix& x, const ConstMatrix& residual, const ConstMatrix& weight,
                   const Matrix& residual_out, void* out, int64_t ldo, float* scale, const RmsNormOptions& opt) {
  Params p{};
  p.x = x.data;
  p.ldx = x.ld;
  p.res = absent(residual) ? nullptr : residual.data;
  p.ldr = residual.ld;
  p.w = weight.data;
  p.res_out = absent(residual_out) ? nullptr : residual_out.data;
  p.ldro = residual_out.ld;
  p.out = out;
  p.ldo = ldo;
  p.scale = scale;
  p.rows = x.rows;
  p.h = static_cast<int>(x.cols);
  p.eps = opt.eps;
  p.gemma = opt.gemma_one_plus_w;
  return p;
}

}  // namespace

namespace detail {
AddRmsNormConfig add_rmsnorm_launch_config(int nchunks, int64_t rows) {
  if (g_clusters_enabled.load(std::memory_order_relaxed) && cluster_path_available()) {
    const AddRmsNormConfig c = add_rmsnorm_config_sm90(nchunks);
    if (add_rmsnorm_clusters_pay(rows, c.cluster, current_device_spec().sm_count)) return c;
  }
  return add_rmsnorm_config(nchunks);
}
void set_add_rmsnorm_clusters_enabled(bool enabled) { g_clusters_enabled.store(enabled, std::memory_order_relaxed); }
}  // namespace detail

void add_rmsnorm(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out, Matrix out,
                 RmsNormOptions opt, cudaStream_t stream) {
  constexpr const char* kFn = "add_rmsnorm";
  using detail::cat;
  check_common(kFn, x, residual, weight, residual_out, opt);
  detail::check_matrix_shape(kFn, "out", out);
  detail::check_same_dtype(kFn, "out", out, "x", x.dtype);
  if (out.rows != x.rows || out.cols != x.cols)
    detail::throw_arg(kFn, "out", cat("is [", out.rows, ", ", out.cols, "]"), cat("the shape of 'x' [", x.rows, ", ", x.cols, "]"));
  detail::check_alignment(kFn, "out", out, 16, 8);
  check_out_overlaps(kFn, detail::span_of(out), x, residual, weight, residual_out);
  if (x.rows == 0) return;
  check_devices(kFn, x, residual, weight, residual_out);
  detail::check_device_matrix(kFn, "out", out);
  detail::check_compute_capability(kFn, 8, 0);
  dispatch<kOutDtype>(x.dtype, make_params(x, residual, weight, residual_out, out.data, out.ld, nullptr, opt), stream);
}

void add_rmsnorm_fp8(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out, Fp8Matrix out,
                     Fp8Scale scale, RmsNormOptions opt, cudaStream_t stream) {
  constexpr const char* kFn = "add_rmsnorm_fp8";
  using detail::cat;
  check_common(kFn, x, residual, weight, residual_out, opt);
  if (out.rows != x.rows || out.cols != x.cols)
    detail::throw_arg(kFn, "out", cat("is [", out.rows, ", ", out.cols, "]"), cat("the shape of 'x' [", x.rows, ", ", x.cols, "]"));
  if (out.ld < out.cols || out.ld % 8 != 0)
    detail::throw_arg(kFn, "out", cat("has row stride ld = ", out.ld, " with cols = ", out.cols), "ld >= cols and ld % 8 == 0 (bytes)");
  if (out.data == nullptr && out.rows > 0)
    detail::throw_arg(kFn, "out", "has a null data pointer", "a valid pointer for a non-empty matrix");
  if (reinterpret_cast<uintptr_t>(out.data) % 16 != 0)
    detail::throw_arg(kFn, "out", cat("pointer ", static_cast<const void*>(out.data), " is not 16-byte aligned"), "a 16-byte aligned data pointer");
  const bool dynamic = scale.mode == Fp8ScaleMode::kDynamicPerRow;
  if (scale.mode != Fp8ScaleMode::kStaticPerTensor && !dynamic)
    detail::throw_arg(kFn, "scale.mode", cat("has code ", int(scale.mode)), "Fp8ScaleMode::kStaticPerTensor or kDynamicPerRow");
  if (scale.scale == nullptr && (!dynamic || x.rows > 0))
    detail::throw_arg(kFn, "scale.scale", "is a null pointer",
                      dynamic ? "a device array of x.rows floats (written)" : "a device pointer to the scale (read)");
  if (reinterpret_cast<uintptr_t>(scale.scale) % 4 != 0)
    detail::throw_arg(kFn, "scale.scale", cat("pointer ", static_cast<const void*>(scale.scale), " is not 4-byte aligned"),
                      "a 4-byte aligned float pointer");
  const detail::Span ov = detail::span_of(out);
  check_out_overlaps(kFn, ov, x, residual, weight, residual_out);
  const detail::Span sv = detail::span_of(scale, x.rows);
  // A written scale array must overlap nothing; the static scale (read) must only not be written.
  detail::check_no_overlap(kFn, "scale.scale", sv, "out", ov);
  if (!absent(residual_out)) detail::check_no_overlap(kFn, "scale.scale", sv, "residual_out", detail::span_of(residual_out));
  if (dynamic) {
    detail::check_no_overlap(kFn, "scale.scale", sv, "x", detail::span_of(x));
    if (!absent(residual)) detail::check_no_overlap(kFn, "scale.scale", sv, "residual", detail::span_of(residual));
    detail::check_no_overlap(kFn, "scale.scale", sv, "weight", detail::span_of(weight));
  }
  if (x.rows == 0) return;
  check_devices(kFn, x, residual, weight, residual_out);
  detail::check_device_pointer(kFn, "out", out.data);
  detail::check_device_pointer(kFn, "scale.scale", scale.scale);
  detail::check_compute_capability(kFn, 8, 0);
  const Params p = make_params(x, residual, weight, residual_out, out.data, out.ld, scale.scale, opt);
  if (dynamic)
    dispatch<kOutFp8Dynamic>(x.dtype, p, stream);
  else
    dispatch<kOutFp8Static>(x.dtype, p, stream);
}

}  // namespace blockfuse
