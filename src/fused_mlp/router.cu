// The neuron-block router (sigmoid scores, threshold or top-k) and the down_proj transpose of
// blockfuse/fused_mlp.h.
//
// Router: three small kernels, no host synchronisation (graph-capturable):
//   1. scores: one warp per router row b streams r[b] once (16-byte loads) and dots it with every
//      token's x (x stays in L1/L2); score[m][b] = sigmoid(x[m]·r[b]) in fp32 into the workspace;
//   2. select: one block per token marks its blocks (threshold: score > threshold; top-k: rank <
//      top_k with rank = #scores greater, ties to the lower index, NaN never selected) and
//      compacts them, in index order, into its list;
//   3. union: one block ORs the tokens' marks and compacts the union list.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "blockfuse/fused_mlp.h"
#include "common/check.h"
#include "common/decode_loop.cuh"  // load_w, load_x

namespace blockfuse {

namespace {

using detail::cat;
using detail::throw_arg;

constexpr int64_t kMaxRouterBlocks = 8192;
constexpr int kSelectThreads = 1024;

__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = to_f(e[i]);
}

template <class T>
__global__ void router_scores_kernel(const T* x, int64_t ldx, const T* r, int64_t ldr, int m_rows, int64_t k,
                                     int64_t n_blocks, float* scores) {
  const int64_t b = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (b >= n_blocks) return;
  float part[32];
#pragma unroll
  for (int m = 0; m < 32; ++m) part[m] = 0.f;
  for (int64_t kk = 8 * lane; kk < k; kk += 256) {
    float w[8];
    unpack8<T>(decode::load_w(r + b * ldr + kk, true), w);
#pragma unroll
    for (int m = 0; m < 32; ++m) {
      if (m >= m_rows) break;
      float xv[8];
      unpack8<T>(decode::load_x(x + m * ldx + kk, true), xv);
#pragma unroll
      for (int i = 0; i < 8; ++i) part[m] = fmaf(xv[i], w[i], part[m]);
    }
  }
#pragma unroll
  for (int m = 0; m < 32; ++m) {
    if (m >= m_rows) break;
    float s = part[m];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) scores[m * n_blocks + b] = 1.f / (1.f + expf(-s));
  }
}

// Writes, in increasing b, every b < n with pred(b) to out (when non-null); returns the count
// (to every thread). Block-wide: all threads call it.
template <class Pred>
__device__ int compact(int64_t n, Pred pred, int32_t* out) {
  __shared__ int s_warp[32];
  __shared__ int s_total;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, warps = blockDim.x / 32;
  int running = 0;
  for (int64_t base = 0; base < n; base += blockDim.x) {
    const int64_t b = base + threadIdx.x;
    const bool p = b < n && pred(b);
    const unsigned ballot = __ballot_sync(0xffffffffu, p);
    if (lane == 0) s_warp[warp] = __popc(ballot);
    __syncthreads();
    if (threadIdx.x == 0) {
      int acc = 0;
      for (int w = 0; w < warps; ++w) {
        const int c = s_warp[w];
        s_warp[w] = acc;
        acc += c;
      }
      s_total = acc;
    }
    __syncthreads();
    if (p && out) out[running + s_warp[warp] + __popc(ballot & ((1u << lane) - 1u))] = int32_t(b);
    running += s_total;
    __syncthreads();
  }
  return running;
}

__device__ __forceinline__ bool greater_score(float a, int64_t ia, float b, int64_t ib) {
  // a ranks above b: larger score, ties to the lower index; NaN ranks below everything.
  if (isnan(a)) return false;
  if (isnan(b)) return true;
  return a > b || (a == b && ia < ib);
}

__global__ void router_select_kernel(const float* scores, int64_t n_blocks, int mode, float threshold, int top_k,
                                     unsigned char* marks, int32_t* token_idx, int32_t* token_cnt) {
  extern __shared__ float s_score[];
  const int m = blockIdx.x;
  for (int64_t b = threadIdx.x; b < n_blocks; b += blockDim.x) s_score[b] = scores[m * n_blocks + b];
  __syncthreads();
  unsigned char* mk = marks + m * n_blocks;
  for (int64_t b = threadIdx.x; b < n_blocks; b += blockDim.x) {
    const float s = s_score[b];
    bool on;
    if (mode == int(RouterMode::kThreshold)) {
      on = s > threshold;  // false for NaN
    } else {
      int64_t rank = 0;
      for (int64_t o = 0; o < n_blocks && rank < top_k; ++o) rank += greater_score(s_score[o], o, s, b);
      on = !isnan(s) && rank < top_k;
    }
    mk[b] = on;
  }
  __syncthreads();
  const int n = compact(n_blocks, [&](int64_t b) { return mk[b] != 0; }, token_idx ? token_idx + m * n_blocks : nullptr);
  if (threadIdx.x == 0 && token_cnt) token_cnt[m] = n;
}

__global__ void router_union_kernel(const unsigned char* marks, int m_rows, int64_t n_blocks, int32_t* union_idx,
                                    int32_t* union_cnt) {
  const int n = compact(
      n_blocks,
      [&](int64_t b) {
        for (int m = 0; m < m_rows; ++m)
          if (marks[m * n_blocks + b]) return true;
        return false;
      },
      union_idx);
  if (threadIdx.x == 0) *union_cnt = n;
}

size_t scores_bytes(int64_t m, int64_t n) { return (size_t(m) * size_t(n) * sizeof(float) + 255) / 256 * 256; }

}  // namespace

size_t router_workspace_size(int64_t m, int64_t n_blocks) {
  if (m < 0 || m > kFusedMlpMaxM) throw_arg("router_workspace_size", "m", cat("is ", m), cat("0 <= m <= ", kFusedMlpMaxM));
  if (n_blocks < 0 || n_blocks > kMaxRouterBlocks)
    throw_arg("router_workspace_size", "n_blocks", cat("is ", n_blocks), cat("0 <= n_blocks <= ", kMaxRouterBlocks));
  return scores_bytes(m, n_blocks) + size_t(m) * size_t(n_blocks);
}

void neuron_block_router(ConstMatrix x, ConstMatrix r, RouterMode mode, float threshold, int top_k, RouterOutputs out,
                         void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* fn = "neuron_block_router";
  detail::check_matrix_shape(fn, "x", x);
  detail::check_matrix_shape(fn, "r", r);
  if (x.rows < 1 || x.rows > kFusedMlpMaxM) throw_arg(fn, "x", cat("has M = ", x.rows, " rows"), cat("1 <= M <= ", kFusedMlpMaxM));
  detail::check_same_dtype(fn, "r", r, "x", x.dtype);
  if (x.cols < 8 || x.cols % 8 != 0) throw_arg(fn, "x", cat("has K = ", x.cols, " columns"), "K >= 8 and K % 8 == 0");
  if (r.cols != x.cols) throw_arg(fn, "r", cat("has cols = ", r.cols), cat("r.cols == x.cols (= ", x.cols, ")"));
  if (r.rows < 1 || r.rows > kMaxRouterBlocks)
    throw_arg(fn, "r", cat("has ", r.rows, " rows (neuron blocks)"), cat("1 <= rows <= ", kMaxRouterBlocks));
  if (mode != RouterMode::kThreshold && mode != RouterMode::kTopK)
    throw_arg(fn, "mode", cat("is ", int(mode)), "RouterMode::kThreshold or RouterMode::kTopK");
  if (mode == RouterMode::kTopK && (top_k < 0 || top_k > r.rows))
    throw_arg(fn, "top_k", cat("is ", top_k), cat("0 <= top_k <= r.rows (= ", r.rows, ")"));
  detail::check_alignment(fn, "x", x, 16, 8);
  detail::check_alignment(fn, "r", r, 16, 8);
  if ((out.union_indices == nullptr) != (out.union_count == nullptr))
    throw_arg(fn, "out", "has only one of union_indices / union_count", "both or neither");
  if ((out.token_indices == nullptr) != (out.token_counts == nullptr))
    throw_arg(fn, "out", "has only one of token_indices / token_counts", "both or neither");
  if (!out.union_indices && !out.token_indices) throw_arg(fn, "out", "asks for no list", "union and/or per-token outputs");
  const size_t need = router_workspace_size(x.rows, r.rows);
  if (workspace == nullptr || workspace_bytes < need)
    throw_arg(fn, "workspace", cat("is ", workspace_bytes, " bytes at ", static_cast<const void*>(workspace)),
              cat("a device buffer of >= ", need, " bytes (router_workspace_size)"));
  if (reinterpret_cast<std::uintptr_t>(workspace) % 16 != 0)
    throw_arg(fn, "workspace", "is not 16-byte aligned", "a 16-byte aligned pointer");
  detail::check_device_matrix(fn, "x", x);
  detail::check_device_matrix(fn, "r", r);
  detail::check_device_pointer(fn, "workspace", workspace);
  for (const void* p : {static_cast<const void*>(out.union_indices), static_cast<const void*>(out.union_count),
                        static_cast<const void*>(out.token_indices), static_cast<const void*>(out.token_counts)})
    if (p) detail::check_device_pointer(fn, "out", p);

  const int64_t n = r.rows;
  float* scores = static_cast<float*>(workspace);
  unsigned char* marks = static_cast<unsigned char*>(workspace) + scores_bytes(x.rows, n);
  const unsigned grid = unsigned((n + 7) / 8);
  if (x.dtype == DType::kBF16)
    router_scores_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x.data), x.ld, static_cast<const __nv_bfloat16*>(r.data), r.ld, int(x.rows),
        x.cols, n, scores);
  else
    router_scores_kernel<__half><<<grid, 256, 0, stream>>>(static_cast<const __half*>(x.data), x.ld,
                                                           static_cast<const __half*>(r.data), r.ld, int(x.rows),
                                                           x.cols, n, scores);
  BF_CHECK_LAUNCH();
  router_select_kernel<<<unsigned(x.rows), kSelectThreads, size_t(n) * sizeof(float), stream>>>(
      scores, n, int(mode), threshold, top_k, marks, out.token_indices, out.token_counts);
  BF_CHECK_LAUNCH();
  if (out.union_indices) {
    router_union_kernel<<<1, kSelectThreads, 0, stream>>>(marks, int(x.rows), n, out.union_indices, out.union_count);
    BF_CHECK_LAUNCH();
  }
}

// ---- down_proj [K, U] -> w_down_t [U, K] -------------------------------------------------------

namespace {

__global__ void transpose_kernel(const uint16_t* in, int64_t ld_in, uint16_t* out, int64_t ld_out, int64_t rows,
                                 int64_t cols) {
  __shared__ uint16_t tile[32][33];
  const int64_t r0 = int64_t(blockIdx.y) * 32, c0 = int64_t(blockIdx.x) * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = in[r * ld_in + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;  // out row c, column r
    if (r < rows && c < cols) out[c * ld_out + r] = tile[threadIdx.x][i];
  }
}

void check_transpose(const char* fn, const ConstMatrix& in, const Matrix& out) {
  detail::check_matrix_shape(fn, "down_proj", in);
  detail::check_matrix_shape(fn, "out", out);
  detail::check_same_dtype(fn, "out", out, "down_proj", in.dtype);
  if (out.rows != in.cols || out.cols != in.rows)
    throw_arg(fn, "out", cat("has shape [", out.rows, ", ", out.cols, "]"),
              cat("[U, K] = [", in.cols, ", ", in.rows, "] (down_proj [K, U] transposed)"));
  detail::check_no_overlap(fn, "out", out, "down_proj", in);
}

}  // namespace

void transpose_down_proj(ConstMatrix down_proj, Matrix out, cudaStream_t stream) {
  constexpr const char* fn = "transpose_down_proj";
  check_transpose(fn, down_proj, out);
  if (down_proj.rows == 0 || down_proj.cols == 0) return;
  detail::check_device_matrix(fn, "down_proj", down_proj);
  detail::check_device_matrix(fn, "out", out);
  if ((down_proj.cols + 31) / 32 > 0x7fffffff || (down_proj.rows + 31) / 32 > 65535)
    throw_arg(fn, "down_proj", cat("has shape [", down_proj.rows, ", ", down_proj.cols, "]"), "rows <= 65535 * 32");
  const dim3 grid(unsigned((down_proj.cols + 31) / 32), unsigned((down_proj.rows + 31) / 32));
  transpose_kernel<<<grid, dim3(32, 8), 0, stream>>>(static_cast<const uint16_t*>(down_proj.data), down_proj.ld,
                                                    static_cast<uint16_t*>(out.data), out.ld, down_proj.rows,
                                                    down_proj.cols);
  BF_CHECK_LAUNCH();
}

void transpose_down_proj_host(ConstMatrix down_proj, Matrix out) {
  check_transpose("transpose_down_proj_host", down_proj, out);
  const auto* in = static_cast<const uint16_t*>(down_proj.data);
  auto* o = static_cast<uint16_t*>(out.data);
  for (int64_t r = 0; r < down_proj.rows; ++r)
    for (int64_t c = 0; c < down_proj.cols; ++c) o[c * out.ld + r] = in[r * down_proj.ld + c];
}

}  // namespace blockfuse
