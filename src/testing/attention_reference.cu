// The fp32 GPU references of attention and its backward (see attention_reference.h).
#include "testing/attention_reference.h"

#include <cmath>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/check.h"

namespace blockfuse::testing {

namespace {

struct RefParams {
  const void *q, *k, *v;
  float *out, *lse;
  int64_t qb, qs, qh, kb, ks, kh, vb, vs, vh;
  int heads_q, group, D, seqlen_q, seqlen_k, total_q, row_step;
  const int* cu_q;
  const int* cu_k;
  float scale, softcap;
  int64_t left, right;  // -1: unbounded
};

__device__ float ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ float ld(const __half* p) { return __half2float(*p); }

__device__ float block_reduce(float x, bool is_max, float* red) {
  for (int o = 16; o > 0; o >>= 1) {
    const float y = __shfl_xor_sync(0xffffffff, x, o);
    x = is_max ? (y > x ? y : x) : x + y;
  }
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) red[w] = x;
  __syncthreads();
  float r = red[0];
  for (int i = 1; i < blockDim.x / 32; ++i) r = is_max ? (red[i] > r ? red[i] : r) : r + red[i];
  return r;
}

template <class T>
__global__ void reference_kernel(RefParams p) {
  constexpr int kThreads = 128;
  extern __shared__ float sh[];
  float* qv = sh;              // [D]
  float* pc = qv + p.D;        // [kThreads]
  float* red = pc + kThreads;  // [kThreads / 32]
  const int b = blockIdx.z, h = blockIdx.y, i = blockIdx.x * p.row_step, tid = threadIdx.x;
  int sq = p.seqlen_q, sk = p.seqlen_k;
  int64_t q0 = 0, k0 = 0, qoff = b * p.qb, koff = b * p.kb, voff = b * p.vb;
  if (p.cu_q) {
    q0 = p.cu_q[b];
    k0 = p.cu_k[b];
    sq = p.cu_q[b + 1] - int(q0);
    sk = p.cu_k[b + 1] - int(k0);
    qoff = koff = voff = 0;
  }
  if (i >= sq) return;
  const int hk = h / p.group;
  const T* qrow = static_cast<const T*>(p.q) + qoff + (q0 + i) * p.qs + h * p.qh;
  for (int d = tid; d < p.D; d += kThreads) qv[d] = ld(qrow + d);
  __syncthreads();
  const int64_t diag = int64_t(i) + sk - sq;
  int64_t lo = 0, hi = sk;
  if (p.right >= 0) hi = min(hi, diag + p.right + 1);
  if (p.left >= 0) lo = max(lo, diag - p.left);
  const int64_t row = p.cu_q ? q0 + i : int64_t(b) * sq + i;
  float* o = p.out + (row * p.heads_q + h) * p.D;
  float* lse = p.lse + (p.cu_q ? int64_t(h) * p.total_q + row : (int64_t(b) * p.heads_q + h) * sq + i);
  if (hi <= lo) {
    for (int d = tid; d < p.D; d += kThreads) o[d] = 0.0f;
    if (tid == 0) *lse = -INFINITY;
    return;
  }
  auto score = [&](int64_t j) {
    const T* krow = static_cast<const T*>(p.k) + koff + (k0 + j) * p.ks + hk * p.kh;
    float dot = 0;
    for (int d = 0; d < p.D; ++d) dot += qv[d] * ld(krow + d);
    float x = dot * p.scale;
    if (p.softcap > 0) x = p.softcap * tanhf(x / p.softcap);
    return x;
  };
  float m = -INFINITY;
  for (int64_t j = lo + tid; j < hi; j += kThreads) {
    const float x = score(j);
    if (x > m) m = x;
  }
  m = block_reduce(m, true, red);
  if (isinf(m)) m = 0;  // every visible score NaN: exp(NaN) keeps it NaN
  float sum = 0, acc0 = 0, acc1 = 0;  // D <= 256: two columns per thread
  for (int64_t c = lo; c < hi; c += kThreads) {
    const int64_t j = c + tid;
    const float e = j < hi ? expf(score(j) - m) : 0.0f;
    sum += e;
    __syncthreads();
    pc[tid] = e;
    __syncthreads();
    const int n = hi - c < kThreads ? int(hi - c) : kThreads;
    for (int jj = 0; jj < n; ++jj) {
      const T* vrow = static_cast<const T*>(p.v) + voff + (k0 + c + jj) * p.vs + hk * p.vh;
      if (tid < p.D) acc0 += pc[jj] * ld(vrow + tid);
      if (tid + kThreads < p.D) acc1 += pc[jj] * ld(vrow + tid + kThreads);
    }
  }
  sum = block_reduce(sum, false, red);
  if (tid < p.D) o[tid] = acc0 / sum;
  if (tid + kThreads < p.D) o[tid + kThreads] = acc1 / sum;
  if (tid == 0) *lse = m + logf(sum);
}

// ---- the backward -------------------------------------------------------------------------------

struct BwdRefParams {
  const void *q, *k, *v, *out, *dout;
  const float* lse;
  float *dq, *dk, *dv;
  int64_t qb, qs, qh, kb, ks, kh, vb, vs, vh, ob, os, oh, db, ds, dh;
  int heads_q, heads_kv, group, D, seqlen_q, seqlen_k, row_step;
  float scale, softcap;
  int64_t left, right;  // -1: unbounded
};

// The visible keys [lo, hi) of query row i (bottom-right aligned, as the forward).
__device__ void visible(const BwdRefParams& p, int64_t i, int64_t& lo, int64_t& hi) {
  const int64_t diag = i + p.seqlen_k - p.seqlen_q;
  lo = 0, hi = p.seqlen_k;
  if (p.right >= 0) hi = min(hi, diag + p.right + 1);
  if (p.left >= 0) lo = max(lo, diag - p.left);
}

template <class T>
__device__ float dot_rows(const T* a, const T* b, int D) {
  float s = 0;
  for (int d = 0; d < D; ++d) s += ld(a + d) * ld(b + d);
  return s;
}

// (P_ij, dS_ij) of query row i of head h against key j (j visible from i).
template <class T>
__device__ void prob_and_grad(const BwdRefParams& p, int b, int h, int64_t i, int64_t j, float dsum, float& prob,
                              float& ds) {
  const int hk = h / p.group;
  const T* qrow = static_cast<const T*>(p.q) + b * p.qb + i * p.qs + h * p.qh;
  const T* krow = static_cast<const T*>(p.k) + b * p.kb + j * p.ks + hk * p.kh;
  const T* vrow = static_cast<const T*>(p.v) + b * p.vb + j * p.vs + hk * p.vh;
  const T* dorow = static_cast<const T*>(p.dout) + b * p.db + i * p.ds + h * p.dh;
  const float raw = dot_rows(qrow, krow, p.D) * p.scale;
  float sc = raw, dcap = 1.0f;
  if (p.softcap > 0) {
    // The forward's tanh (src/attention/mask.cuh), so that P is consistent with the lse it wrote.
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(raw / p.softcap));
    sc = p.softcap * t;
    dcap = 1.0f - t * t;
  }
  prob = expf(sc - p.lse[(int64_t(b) * p.heads_q + h) * p.seqlen_q + i]);
  ds = prob * (dot_rows(dorow, vrow, p.D) - dsum) * dcap;
}

template <class T>
__device__ float row_dsum(const BwdRefParams& p, int b, int h, int64_t i) {
  const T* orow = static_cast<const T*>(p.out) + b * p.ob + i * p.os + h * p.oh;
  const T* dorow = static_cast<const T*>(p.dout) + b * p.db + i * p.ds + h * p.dh;
  return dot_rows(orow, dorow, p.D);
}

// dq of query row blockIdx.x · row_step of head blockIdx.y, batch blockIdx.z.
template <class T>
__global__ void backward_dq_kernel(BwdRefParams p) {
  constexpr int kThreads = 128;
  __shared__ float ds_chunk[kThreads];
  const int b = blockIdx.z, h = blockIdx.y, tid = threadIdx.x;
  const int64_t i = int64_t(blockIdx.x) * p.row_step;
  if (i >= p.seqlen_q) return;
  const int hk = h / p.group;
  const float dsum = row_dsum<T>(p, b, h, i);
  int64_t lo, hi;
  visible(p, i, lo, hi);
  float acc0 = 0, acc1 = 0;  // D <= 256: two columns per thread
  for (int64_t c = lo; c < hi; c += kThreads) {
    const int64_t j = c + tid;
    float prob = 0, ds = 0;
    if (j < hi) prob_and_grad<T>(p, b, h, i, j, dsum, prob, ds);
    __syncthreads();
    ds_chunk[tid] = ds;
    __syncthreads();
    const int n = hi - c < kThreads ? int(hi - c) : kThreads;
    for (int jj = 0; jj < n; ++jj) {
      const T* krow = static_cast<const T*>(p.k) + b * p.kb + (c + jj) * p.ks + hk * p.kh;
      if (tid < p.D) acc0 += ds_chunk[jj] * ld(krow + tid);
      if (tid + kThreads < p.D) acc1 += ds_chunk[jj] * ld(krow + tid + kThreads);
    }
  }
  float* dq = p.dq + ((int64_t(b) * p.seqlen_q + i) * p.heads_q + h) * p.D;
  if (tid < p.D) dq[tid] = acc0 * p.scale;
  if (tid + kThreads < p.D) dq[tid + kThreads] = acc1 * p.scale;
}

// dk and dv of key row blockIdx.x · row_step of KV head blockIdx.y, batch blockIdx.z: every query
// row of every query head of the group that sees it.
template <class T>
__global__ void backward_dkv_kernel(BwdRefParams p) {
  constexpr int kThreads = 128;
  __shared__ float p_chunk[kThreads], ds_chunk[kThreads];
  const int b = blockIdx.z, hk = blockIdx.y, tid = threadIdx.x;
  const int64_t j = int64_t(blockIdx.x) * p.row_step;
  if (j >= p.seqlen_k) return;
  float k0 = 0, k1 = 0, v0 = 0, v1 = 0;
  for (int h = hk * p.group; h < (hk + 1) * p.group; ++h)
    for (int64_t c = 0; c < p.seqlen_q; c += kThreads) {
      const int64_t i = c + tid;
      float prob = 0, ds = 0;
      if (i < p.seqlen_q) {
        int64_t lo, hi;
        visible(p, i, lo, hi);
        if (j >= lo && j < hi) prob_and_grad<T>(p, b, h, i, j, row_dsum<T>(p, b, h, i), prob, ds);
      }
      __syncthreads();
      p_chunk[tid] = prob;
      ds_chunk[tid] = ds;
      __syncthreads();
      const int n = p.seqlen_q - c < kThreads ? int(p.seqlen_q - c) : kThreads;
      for (int ii = 0; ii < n; ++ii) {
        if (p_chunk[ii] == 0.0f && ds_chunk[ii] == 0.0f) continue;  // not visible (uniform across the block)
        const T* qrow = static_cast<const T*>(p.q) + b * p.qb + (c + ii) * p.qs + h * p.qh;
        const T* dorow = static_cast<const T*>(p.dout) + b * p.db + (c + ii) * p.ds + h * p.dh;
        if (tid < p.D) k0 += ds_chunk[ii] * ld(qrow + tid), v0 += p_chunk[ii] * ld(dorow + tid);
        if (tid + kThreads < p.D)
          k1 += ds_chunk[ii] * ld(qrow + tid + kThreads), v1 += p_chunk[ii] * ld(dorow + tid + kThreads);
      }
    }
  const int64_t at = ((int64_t(b) * p.seqlen_k + j) * p.heads_kv + hk) * p.D;
  if (tid < p.D) p.dk[at + tid] = k0 * p.scale, p.dv[at + tid] = v0;
  if (tid + kThreads < p.D) p.dk[at + tid + kThreads] = k1 * p.scale, p.dv[at + tid + kThreads] = v1;
}

}  // namespace

void attention_backward_reference_gpu(AttnConstTensor q, AttnConstTensor k, AttnConstTensor v, AttnConstTensor out,
                                      AttnConstTensor dout, const float* lse, const AttentionParams& prm,
                                      float* dq_ref, float* dk_ref, float* dv_ref, int row_step, cudaStream_t stream) {
  if (row_step < 1 || q.head_dim > 256 || prm.cu_seqlens_q != nullptr)
    throw Error("attention_backward_reference_gpu: row_step >= 1, head_dim <= 256 and batched tensors required");
  BwdRefParams p{};
  p.q = q.data, p.k = k.data, p.v = v.data, p.out = out.data, p.dout = dout.data, p.lse = lse;
  p.dq = dq_ref, p.dk = dk_ref, p.dv = dv_ref;
  p.qb = q.batch_stride, p.qs = q.seq_stride, p.qh = q.head_stride;
  p.kb = k.batch_stride, p.ks = k.seq_stride, p.kh = k.head_stride;
  p.vb = v.batch_stride, p.vs = v.seq_stride, p.vh = v.head_stride;
  p.ob = out.batch_stride, p.os = out.seq_stride, p.oh = out.head_stride;
  p.db = dout.batch_stride, p.ds = dout.seq_stride, p.dh = dout.head_stride;
  p.heads_q = int(q.heads), p.heads_kv = int(k.heads), p.group = int(q.heads / k.heads), p.D = int(q.head_dim);
  p.seqlen_q = int(q.seqlen), p.seqlen_k = int(k.seqlen), p.row_step = row_step;
  p.scale = prm.softmax_scale > 0 ? prm.softmax_scale : float(1.0 / std::sqrt(double(q.head_dim)));
  p.softcap = prm.softcap;
  p.left = prm.window_left;
  p.right = prm.causal ? 0 : prm.window_right;
  if (q.batch == 0) return;
  const bool bf16 = q.dtype == DType::kBF16;
  if (p.seqlen_q > 0) {
    const dim3 grid((p.seqlen_q + row_step - 1) / row_step, p.heads_q, unsigned(q.batch));
    if (bf16) backward_dq_kernel<__nv_bfloat16><<<grid, 128, 0, stream>>>(p);
    else backward_dq_kernel<__half><<<grid, 128, 0, stream>>>(p);
    BF_CHECK_LAUNCH();
  }
  if (p.seqlen_k > 0) {
    const dim3 grid((p.seqlen_k + row_step - 1) / row_step, p.heads_kv, unsigned(q.batch));
    if (bf16) backward_dkv_kernel<__nv_bfloat16><<<grid, 128, 0, stream>>>(p);
    else backward_dkv_kernel<__half><<<grid, 128, 0, stream>>>(p);
    BF_CHECK_LAUNCH();
  }
}

void attention_reference_gpu(AttnConstTensor q, AttnConstTensor k, AttnConstTensor v, const AttentionParams& prm,
                             float* out_ref, float* lse_ref, int row_step, cudaStream_t stream) {
  if (row_step < 1 || q.head_dim > 256) throw Error("attention_reference_gpu: row_step >= 1 and head_dim <= 256 required");
  const bool varlen = prm.cu_seqlens_q != nullptr;
  RefParams p{};
  p.q = q.data, p.k = k.data, p.v = v.data, p.out = out_ref, p.lse = lse_ref;
  p.qb = q.batch_stride, p.qs = q.seq_stride, p.qh = q.head_stride;
  p.kb = k.batch_stride, p.ks = k.seq_stride, p.kh = k.head_stride;
  p.vb = v.batch_stride, p.vs = v.seq_stride, p.vh = v.head_stride;
  p.heads_q = int(q.heads), p.group = int(q.heads / k.heads), p.D = int(q.head_dim);
  p.seqlen_q = int(varlen ? prm.max_seqlen_q : q.seqlen);
  p.seqlen_k = int(varlen ? prm.max_seqlen_k : k.seqlen);
  p.total_q = int(q.seqlen);
  p.row_step = row_step;
  p.cu_q = static_cast<const int*>(prm.cu_seqlens_q);
  p.cu_k = static_cast<const int*>(prm.cu_seqlens_k);
  p.scale = prm.softmax_scale > 0 ? prm.softmax_scale : float(1.0 / std::sqrt(double(q.head_dim)));
  p.softcap = prm.softcap;
  p.left = prm.window_left;
  p.right = prm.causal ? 0 : prm.window_right;
  const int nb = int(varlen ? prm.num_seqs : q.batch);
  if (p.seqlen_q == 0 || nb == 0) return;
  const dim3 grid((p.seqlen_q + row_step - 1) / row_step, p.heads_q, nb);
  const size_t smem = (p.D + 128 + 4) * sizeof(float);
  if (q.dtype == DType::kBF16)
    reference_kernel<__nv_bfloat16><<<grid, 128, smem, stream>>>(p);
  else
    reference_kernel<__half><<<grid, 128, smem, stream>>>(p);
  BF_CHECK_LAUNCH();
}

}  // namespace blockfuse::testing
