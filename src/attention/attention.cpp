// attention: validation, kernel choice and launch of the sm80 attention kernel (attention_sm80.cuh;
// tiles from heuristic.cpp) or, where built and runnable (attn::auto_uses_sm90) or asked for, the
// sm90a one (attention_sm90.cuh).
// Every check runs before anything is launched.
#include "blockfuse/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attention/backward_params.h"
#include "attention/launch.h"
#include "attention/params.h"
#include "attention/tensor_check.h"
#if defined(BLOCKFUSE_HAS_SM90)
#include "attention/launch_backward_sm90.h"
#include "attention/launch_sm90.h"
#endif
#include "common/device.h"
#include "common/check.h"

namespace blockfuse {

namespace {

constexpr const char* kFn = "attention";
using detail::cat;
using detail::throw_arg;

using attn::span_of_tensor;

// The forward's views: batch is grid z (at most 65535); varlen views are batch 1.
void check_tensor(const char* arg, const AttnConstTensor& t, bool varlen) {
  attn::check_tensor(kFn, arg, t, 65535, varlen);
}

// params.kernel: a known code, and kSm90 only where this build has it and for the shapes it handles.
void check_kernel_choice(const AttnConstTensor& q, const AttentionParams& prm) {
  const AttentionKernel k = prm.kernel;
  if (k != AttentionKernel::kAuto && k != AttentionKernel::kSm80 && k != AttentionKernel::kSm90)
    throw_arg(kFn, "params.kernel", cat("has code ", static_cast<int>(k)), "kAuto, kSm80 or kSm90");
  if (k != AttentionKernel::kSm90) return;
  if (!attention_has_sm90())
    throw_arg(kFn, "params.kernel", "= kSm90, but this build has no sm90a attention kernel",
              "a build with CMake BLOCKFUSE_SM90 (AUTO with 90 in BLOCKFUSE_CUDA_ARCHS, or ON), or kAuto/kSm80");
  if (!attn::sm90_supports(q.head_dim))
    throw_arg(kFn, "params.kernel", cat("= kSm90 with head_dim = ", q.head_dim),
              "for kSm90: head_dim 64, 128 or 256; kAuto or kSm80 for anything else");
}

void check_host_cu_seqlens(const char* arg, const int32_t* cu, int64_t n, int64_t total, int64_t max_len,
                           const char* max_arg) {
  if (cu[0] != 0) throw_arg(kFn, arg, cat("starts at ", cu[0]), "cu_seqlens[0] == 0");
  for (int64_t i = 0; i < n; ++i) {
    if (cu[i + 1] < cu[i])
      throw_arg(kFn, arg, cat("decreases at index ", i + 1, " (", cu[i], " -> ", cu[i + 1], ")"),
                "non-decreasing offsets");
    if (cu[i + 1] - cu[i] > max_len)
      throw_arg(kFn, max_arg, cat("is ", max_len, " but sequence ", i, " has length ", cu[i + 1] - cu[i]),
                "every sequence length <= the maximum");
  }
  if (cu[n] > total)
    throw_arg(kFn, arg, cat("ends at ", cu[n], " beyond the ", total, " packed rows"), "cu_seqlens[num_seqs] <= total");
}

struct Validated {
  bool varlen;
  int64_t batch, seqlen_q, seqlen_k;  // varlen: num_seqs and the maxima
};

Validated validate_host(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v,
                        const AttnTensor& out, const float* lse, const AttentionParams& prm) {
  const bool varlen = prm.cu_seqlens_q != nullptr || prm.cu_seqlens_k != nullptr;
  check_tensor("q", q, varlen);
  check_tensor("k", k, varlen);
  check_tensor("v", v, varlen);
  check_tensor("out", out, varlen);
  if (k.dtype != q.dtype) throw_arg(kFn, "k", cat("has dtype ", dtype_name(k.dtype)), cat("the dtype of 'q' (", dtype_name(q.dtype), ")"));
  if (v.dtype != q.dtype) throw_arg(kFn, "v", cat("has dtype ", dtype_name(v.dtype)), cat("the dtype of 'q' (", dtype_name(q.dtype), ")"));
  if (out.dtype != q.dtype) throw_arg(kFn, "out", cat("has dtype ", dtype_name(out.dtype)), cat("the dtype of 'q' (", dtype_name(q.dtype), ")"));
  const AttnConstTensor out_c = out;
  for (auto [name, t] : {std::pair<const char*, const AttnConstTensor*>{"k", &k}, {"v", &v}, {"out", &out_c}}) {
    const AttnConstTensor& x = *t;
    if (x.head_dim != q.head_dim)
      throw_arg(kFn, name, cat("has head_dim = ", x.head_dim), cat("the head_dim of 'q' (", q.head_dim, ")"));
    if (!varlen && x.batch != q.batch)
      throw_arg(kFn, name, cat("has batch = ", x.batch), cat("the batch of 'q' (", q.batch, ")"));
  }
  if (v.seqlen != k.seqlen) throw_arg(kFn, "v", cat("has seqlen = ", v.seqlen), cat("the seqlen of 'k' (", k.seqlen, ")"));
  if (v.heads != k.heads) throw_arg(kFn, "v", cat("has heads = ", v.heads), cat("the heads of 'k' (", k.heads, ")"));
  if (out.seqlen != q.seqlen) throw_arg(kFn, "out", cat("has seqlen = ", out.seqlen), cat("the seqlen of 'q' (", q.seqlen, ")"));
  if (out.heads != q.heads) throw_arg(kFn, "out", cat("has heads = ", out.heads), cat("the heads of 'q' (", q.heads, ")"));
  if (q.heads % k.heads != 0)
    throw_arg(kFn, "k", cat("has heads = ", k.heads, " with q.heads = ", q.heads),
              "q.heads % k.heads == 0 (grouped-query attention)");
  if (reinterpret_cast<std::uintptr_t>(prm.sm90_tile_counter) % 4 != 0)
    throw_arg(kFn, "sm90_tile_counter", cat("pointer ", static_cast<const void*>(prm.sm90_tile_counter), " is not 4-byte aligned"),
              "null or two 4-byte aligned int32 in device memory");
  if (reinterpret_cast<std::uintptr_t>(lse) % 4 != 0)
    throw_arg(kFn, "lse", cat("pointer ", static_cast<const void*>(lse), " is not 4-byte aligned"), "a 4-byte aligned fp32 buffer");

  // Scalars.
  if (!(std::isfinite(prm.softmax_scale))) throw_arg(kFn, "softmax_scale", cat("is ", prm.softmax_scale), "a finite value (<= 0: 1/sqrt(D))");
  if (!(prm.softcap >= 0.0f) || !std::isfinite(prm.softcap))
    throw_arg(kFn, "softcap", cat("is ", prm.softcap), "0 (off) or a finite value > 0");
  if (prm.window_left < -1) throw_arg(kFn, "window_left", cat("is ", prm.window_left), "-1 (unbounded) or >= 0");
  if (prm.window_right < -1) throw_arg(kFn, "window_right", cat("is ", prm.window_right), "-1 (unbounded) or >= 0");
  if (prm.causal && prm.window_right > 0)
    throw_arg(kFn, "window_right", cat("is ", prm.window_right, " with causal = true"),
              "window_right == 0 or -1 when causal (causal means no key to the right of the diagonal)");
  if (!attn::sm90_block_m_valid(prm.sm90_block_m, q.head_dim))
    throw_arg(kFn, "sm90_block_m", cat("is ", prm.sm90_block_m, " at head_dim ", q.head_dim),
              "0 (the heuristic's), 128, or 192 at head_dim 64");
  const int schedule = static_cast<int>(prm.sm90_schedule);
  if (schedule < 0 || schedule > 2)
    throw_arg(kFn, "sm90_schedule", cat("is ", schedule), "Sm90Schedule::kAuto, kPerTile or kDynamic");
  if (prm.sm90_schedule == Sm90Schedule::kDynamic && prm.sm90_tile_counter == nullptr)
    throw_arg(kFn, "sm90_schedule", "is kDynamic without a sm90_tile_counter", "a tile counter with kDynamic");

  Validated r{varlen, q.batch, q.seqlen, k.seqlen};
  if (varlen) {
    if (prm.cu_seqlens_q == nullptr) throw_arg(kFn, "cu_seqlens_q", "is null while cu_seqlens_k is set", "both or neither");
    if (prm.cu_seqlens_k == nullptr) throw_arg(kFn, "cu_seqlens_k", "is null while cu_seqlens_q is set", "both or neither");
    if (prm.cu_seqlens_type != IndexType::kInt32)
      throw_arg(kFn, "cu_seqlens_type", cat("is ", prm.cu_seqlens_type == IndexType::kInt64 ? "int64" : "unknown"), "int32");
    for (auto [name, p] : {std::pair<const char*, const void*>{"cu_seqlens_q", prm.cu_seqlens_q}, {"cu_seqlens_k", prm.cu_seqlens_k}})
      if (reinterpret_cast<std::uintptr_t>(p) % 4 != 0)
        throw_arg(kFn, name, cat("pointer ", p, " is not 4-byte aligned"), "an int32 device buffer");
    if (prm.num_seqs < 1 || prm.num_seqs > 65535)
      throw_arg(kFn, "num_seqs", cat("is ", prm.num_seqs), "1 <= num_seqs <= 65535");
    if (prm.max_seqlen_q < 0 || prm.max_seqlen_q > q.seqlen)
      throw_arg(kFn, "max_seqlen_q", cat("is ", prm.max_seqlen_q), cat("0 <= max_seqlen_q <= total q rows (", q.seqlen, ")"));
    if (prm.max_seqlen_k < 0 || prm.max_seqlen_k > k.seqlen)
      throw_arg(kFn, "max_seqlen_k", cat("is ", prm.max_seqlen_k), cat("0 <= max_seqlen_k <= total k rows (", k.seqlen, ")"));
    if (prm.host_cu_seqlens_q)
      check_host_cu_seqlens("cu_seqlens_q", prm.host_cu_seqlens_q, prm.num_seqs, q.seqlen, prm.max_seqlen_q, "max_seqlen_q");
    if (prm.host_cu_seqlens_k)
      check_host_cu_seqlens("cu_seqlens_k", prm.host_cu_seqlens_k, prm.num_seqs, k.seqlen, prm.max_seqlen_k, "max_seqlen_k");
    r = Validated{true, prm.num_seqs, prm.max_seqlen_q, prm.max_seqlen_k};
  } else if (q.seqlen > 0 && k.seqlen == 0) {
    throw_arg(kFn, "k", "has seqlen = 0 with q.seqlen > 0", "seqlen >= 1 (every query needs a key)");
  }

  check_kernel_choice(q, prm);

  // Overlaps: out must not alias an input or the LSE (q, k, v may alias each other: fused QKV).
  const detail::Span so = span_of_tensor(out);
  detail::check_no_overlap(kFn, "out", so, "q", span_of_tensor(q));
  detail::check_no_overlap(kFn, "out", so, "k", span_of_tensor(k));
  detail::check_no_overlap(kFn, "out", so, "v", span_of_tensor(v));
  if (lse) {
    const int64_t lse_elems = q.heads * (varlen ? q.seqlen : q.batch * q.seqlen);
    const detail::Span sl = detail::span_of_bytes(lse, lse_elems * 4);
    detail::check_no_overlap(kFn, "lse", sl, "out", so);
    detail::check_no_overlap(kFn, "lse", sl, "q", span_of_tensor(q));
    detail::check_no_overlap(kFn, "lse", sl, "k", span_of_tensor(k));
    detail::check_no_overlap(kFn, "lse", sl, "v", span_of_tensor(v));
  }
  return r;
}

void validate_config(int64_t head_dim, const AttentionConfig& c) {
  for (const auto& t : attn::kTileConfigs)
    if (t.head_dim == head_dim && t.block_m == c.block_m && t.block_n == c.block_n && t.warps == c.warps) return;
  throw_arg(kFn, "config", cat("is ", c.block_m, " x ", c.block_n, " with ", c.warps, " warps for head_dim ", head_dim),
            "one of attention_config(head_dim, i)");
}

bool nothing_to_do(const AttnConstTensor& q, const Validated& val) {
  return q.seqlen == 0 || (!val.varlen && q.batch == 0) || (val.varlen && val.seqlen_q == 0);
}

void check_devices(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v,
                   const AttnTensor& out, const float* lse, const AttentionParams& prm, bool varlen) {
  detail::check_device_pointer(kFn, "q", q.data);
  if (k.seqlen > 0) detail::check_device_pointer(kFn, "k", k.data);
  if (v.seqlen > 0) detail::check_device_pointer(kFn, "v", v.data);
  detail::check_device_pointer(kFn, "out", out.data);
  if (lse) detail::check_device_pointer(kFn, "lse", lse);
  if (prm.sm90_tile_counter) detail::check_device_pointer(kFn, "sm90_tile_counter", prm.sm90_tile_counter);
  if (varlen) {
    detail::check_device_pointer(kFn, "cu_seqlens_q", prm.cu_seqlens_q);
    detail::check_device_pointer(kFn, "cu_seqlens_k", prm.cu_seqlens_k);
  }
}

// Whether the sm90a forward takes this call's tiles from prm.sm90_tile_counter (a banded shape, a
// counter, and attn::sm90_dynamic_walk's choice).
bool sm90_walks_counter(const AttentionParams& prm, int64_t seqlen_q) {
  const bool banded = prm.causal || prm.window_left >= 0 || prm.window_right >= 0;
  return banded && prm.sm90_tile_counter != nullptr &&
         attn::sm90_dynamic_walk(prm.sm90_schedule, seqlen_q);
}
int sm90_rows(const AttnConstTensor& q, const AttentionParams& prm, const Validated& val) {
  return attn::sm90_block_m(q.head_dim, prm.sm90_block_m, val.seqlen_q, sm90_walks_counter(prm, val.seqlen_q));
}

attn::Params make_params(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v,
                             const AttnTensor& out, float* lse, const AttentionParams& prm, const Validated& val) {
  attn::Params p{};
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.out = out.data;
  p.lse = lse;
  p.tile_counter = sm90_walks_counter(prm, val.seqlen_q) ? prm.sm90_tile_counter : nullptr;
  p.q_batch_stride = q.batch_stride, p.q_row_stride = q.seq_stride, p.q_head_stride = q.head_stride;
  p.k_batch_stride = k.batch_stride, p.k_row_stride = k.seq_stride, p.k_head_stride = k.head_stride;
  p.v_batch_stride = v.batch_stride, p.v_row_stride = v.seq_stride, p.v_head_stride = v.head_stride;
  p.o_batch_stride = out.batch_stride, p.o_row_stride = out.seq_stride, p.o_head_stride = out.head_stride;
  p.batch = static_cast<int>(val.batch);
  p.heads_q = static_cast<int>(q.heads);
  p.heads_kv = static_cast<int>(k.heads);
  p.group = static_cast<int>(q.heads / k.heads);
  p.seqlen_q = static_cast<int>(val.seqlen_q);
  p.seqlen_k = static_cast<int>(val.seqlen_k);
  p.total_q = static_cast<int>(q.seqlen);
  p.total_k = static_cast<int>(k.seqlen);
  if (val.varlen) {
    p.cu_seqlens_q = static_cast<const int32_t*>(prm.cu_seqlens_q);
    p.cu_seqlens_k = static_cast<const int32_t*>(prm.cu_seqlens_k);
    p.lse_batch_stride = 0;
    p.lse_head_stride = q.seqlen;
  } else {
    p.lse_batch_stride = q.heads * q.seqlen;
    p.lse_head_stride = q.seqlen;
  }
  const attn::ScoreScale sc = attn::score_scale(prm.softmax_scale, prm.softcap, q.head_dim);
  p.scale_log2 = sc.scale_log2, p.scale_lse = sc.scale_lse, p.softcap_mul = sc.softcap_mul;
  p.window_left = attn::window_left_bound(prm.window_left);  // clamped per sequence in the kernel
  p.window_right = attn::window_right_bound(prm.window_right, prm.causal);
  return p;
}

void run(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v, const AttnTensor& out,
         float* lse, const AttentionParams& prm, const Validated& val, const AttentionConfig& c, cudaStream_t stream) {
  detail::check_compute_capability(kFn, 8, 0);
  const attn::Params p = make_params(q, k, v, out, lse, prm, val);
  const attn::TileConfig t{static_cast<int>(q.head_dim), c.block_m, c.block_n, c.warps};
  switch (t.head_dim) {
    case 64: attn::launch_sm80_d64(p, t, q.dtype, stream); break;
    case 128: attn::launch_sm80_d128(p, t, q.dtype, stream); break;
    default: attn::launch_sm80_d256(p, t, q.dtype, stream); break;
  }
}

void check_smem(const AttentionConfig& c, int64_t head_dim) {
  const int need = attn::smem_bytes(attn::TileConfig{static_cast<int>(head_dim), c.block_m, c.block_n, c.warps});
  const int have = detail::current_device_spec().max_smem_per_block;
  if (need > have)
    throw Error(cat("blockfuse::attention: the tile ", c.block_m, " x ", c.block_n, " at head_dim ", head_dim, " needs ",
                    need, " bytes of shared memory; the current device allows ", have, " per block"));
}

#if defined(BLOCKFUSE_HAS_SM90)
int sm90_smem_bytes(int64_t head_dim, int block_m) {
  if (head_dim == 64) return block_m == 192 ? attn::sm90::smem_bytes_d64_m192() : attn::sm90::smem_bytes_d64();
  return head_dim == 128 ? attn::sm90::smem_bytes_d128() : attn::sm90::smem_bytes_d256();
}
#endif

// Whether kAuto runs the sm90a kernel here (attn::auto_uses_sm90 on this build and device).
bool auto_picks_sm90(const AttnConstTensor& q, int block_m, const detail::DeviceSpec& dev) {
#if defined(BLOCKFUSE_HAS_SM90)
  const int need = attn::sm90_supports(q.head_dim) ? sm90_smem_bytes(q.head_dim, block_m) : 0;
  return attn::auto_uses_sm90(true, dev.cc_major, dev.cc_minor, q.head_dim, need, dev.max_smem_per_block);
#else
  (void)q, (void)block_m, (void)dev;
  return false;
#endif
}

// The sm90a kernel (check_kernel_choice or auto_picks_sm90 has checked the build and the shape):
// compute capability 9.0 exactly (sm_90a code is not forward compatible) and enough shared memory.
void run_sm90(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v, const AttnTensor& out,
              float* lse, const AttentionParams& prm, const Validated& val, const detail::DeviceSpec& dev,
              cudaStream_t stream) {
#if defined(BLOCKFUSE_HAS_SM90)
  if (!(dev.cc_major == 9 && dev.cc_minor == 0))
    throw_arg(kFn, "params.kernel", cat("= kSm90 on a device of compute capability ", dev.cc_major, ".", dev.cc_minor),
              "compute capability 9.0 (Hopper) for kSm90; kAuto or kSm80 elsewhere");
  const int block_m = sm90_rows(q, prm, val);
  const int need = sm90_smem_bytes(q.head_dim, block_m);
  if (need > dev.max_smem_per_block)
    throw Error(cat("blockfuse::attention: the sm90a kernel needs ", need, " bytes of shared memory; the current device allows ",
                    dev.max_smem_per_block, " per block"));
  const attn::Params p = make_params(q, k, v, out, lse, prm, val);
  const bool bf16 = q.dtype == DType::kBF16;
  if (q.head_dim == 64 && block_m == 192)
    bf16 ? attn::sm90::launch_d64_m192_bf16(p, stream) : attn::sm90::launch_d64_m192_fp16(p, stream);
  else if (q.head_dim == 64)
    bf16 ? attn::sm90::launch_d64_bf16(p, stream) : attn::sm90::launch_d64_fp16(p, stream);
  else if (q.head_dim == 128)
    bf16 ? attn::sm90::launch_d128_bf16(p, stream) : attn::sm90::launch_d128_fp16(p, stream);
  else
    bf16 ? attn::sm90::launch_d256_bf16(p, stream) : attn::sm90::launch_d256_fp16(p, stream);
#else
  (void)q, (void)k, (void)v, (void)out, (void)lse, (void)prm, (void)val, (void)dev, (void)stream;
  throw_arg(kFn, "params.kernel", "= kSm90, but this build has no sm90a attention kernel", "kAuto or kSm80");
#endif
}

}  // namespace

bool attention_has_sm90() {
#if defined(BLOCKFUSE_HAS_SM90)
  return true;
#else
  return false;
#endif
}

const char* kernel_name(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kAuto: return "auto";
    case AttentionKernel::kSm80: return "sm80";
    case AttentionKernel::kSm90: return "sm90";
  }
  return "unknown";
}

void attention(AttnConstTensor q, AttnConstTensor k, AttnConstTensor v, AttnTensor out, float* lse,
               const AttentionParams& params, AttentionConfig config, cudaStream_t stream) {
  const Validated val = validate_host(q, k, v, out, lse, params);
  if (params.kernel == AttentionKernel::kSm90)
    throw_arg(kFn, "params.kernel", "= kSm90 with an explicit AttentionConfig",
              "kAuto or kSm80 (the configurations are the sm80 kernel's); or the overload without a config");
  validate_config(q.head_dim, config);
  if (nothing_to_do(q, val)) return;
  check_devices(q, k, v, out, lse, params, val.varlen);
  check_smem(config, q.head_dim);
  run(q, k, v, out, lse, params, val, config, stream);
}

void attention(AttnConstTensor q, AttnConstTensor k, AttnConstTensor v, AttnTensor out, float* lse,
               const AttentionParams& params, cudaStream_t stream) {
  const Validated val = validate_host(q, k, v, out, lse, params);
  if (nothing_to_do(q, val)) return;
  check_devices(q, k, v, out, lse, params, val.varlen);
  const detail::DeviceSpec spec = detail::current_device_spec();
  // A varlen k without rows (every sequence key-less; the validation rejects an empty k only for
  // batched calls) has no TMA view: the sm80 kernel writes its defined result (out 0, LSE −inf).
  const bool sm90_can = !(val.varlen && k.seqlen == 0);
  if (sm90_can && (params.kernel == AttentionKernel::kSm90 ||
                   (params.kernel == AttentionKernel::kAuto &&
                    auto_picks_sm90(q, sm90_rows(q, params, val), spec)))) {
    run_sm90(q, k, v, out, lse, params, val, spec, stream);
    return;
  }
  const AttentionConfig c = attention_heuristic(q.head_dim, params.causal, spec.cc_major, spec.cc_minor);
  check_smem(c, q.head_dim);
  run(q, k, v, out, lse, params, val, c, stream);
}

namespace {
// The backward's workspace: Dsum [rows, Hq] fp32, then (where a dQ accumulator is used) dq_accum,
// rows + 64 rows of Hq × D fp32 (BwdParams::dq_accum_head_rows: the sm90a kernel's layout needs the
// 64-row block past the rows; the sm80 kernels' [rows, Hq, D] leaves it unused), then (the sm90a
// kernel's deterministic mode) the dQ turn counters [rows, Hq] int32; each part 16-byte aligned.
size_t align16(size_t n) { return (n + 15) / 16 * 16; }
size_t dsum_bytes(AttnConstTensor q) { return align16(static_cast<size_t>(q.batch * q.seqlen * q.heads * 4)); }
int64_t accum_rows(AttnConstTensor q) { return q.batch * q.seqlen > 0 ? q.batch * q.seqlen + 64 : 0; }
size_t accum_bytes(AttnConstTensor q) { return align16(static_cast<size_t>(accum_rows(q) * q.heads * q.head_dim * 4)); }
size_t semaphore_bytes(AttnConstTensor q) { return dsum_bytes(q); }

// Whether the sm90a dK/dV kernel runs on the current device for this head dim: this build,
// compute capability 9.0, its shared memory. `dev` is filled when there is a device.
bool sm90_backward_runs(int64_t head_dim, detail::DeviceSpec* dev_out = nullptr) {
#if defined(BLOCKFUSE_HAS_SM90)
  if (!attn::backward_supports(head_dim)) return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();  // no device here (a CPU-only machine): the sm80 sizes
    return false;
  }
  const detail::DeviceSpec dev = detail::current_device_spec();
  if (dev_out) *dev_out = dev;
  const int need = head_dim == 64 ? attn::sm90::bwd::dkdv_smem_bytes_d64() : attn::sm90::bwd::dkdv_smem_bytes_d128();
  return dev.cc_major == 9 && dev.cc_minor == 0 && need <= dev.max_smem_per_block;
#else
  (void)head_dim, (void)dev_out;
  return false;
#endif
}
}  // namespace

size_t attention_backward_workspace_size(AttnConstTensor q, bool deterministic) {
  const int64_t rows = q.batch * q.seqlen;  // varlen: batch 1, total rows
  if (q.heads < 0 || rows < 0 || q.head_dim < 0)
    throw_arg("attention_backward_workspace_size", "q", "has negative sizes", "sizes >= 0");
  if (!deterministic) return dsum_bytes(q) + accum_bytes(q);
  // Deterministic: the sm80 kernels need Dsum only; the sm90a kernel, where it runs, its ordered dQ.
  return dsum_bytes(q) + (sm90_backward_runs(q.head_dim) ? accum_bytes(q) + semaphore_bytes(q) : 0);
}

namespace {

// kSm90 for the backward: refused, saying why, where the sm90a dK/dV kernel cannot run (this build,
// the device); validation calls it before anything is launched.
void check_sm90_backward_request(const char* fn, int64_t head_dim, AttentionKernel kernel) {
  if (kernel != AttentionKernel::kSm90) return;
#if defined(BLOCKFUSE_HAS_SM90)
  detail::DeviceSpec dev{};
  if (!sm90_backward_runs(head_dim, &dev))
    throw_arg(fn, "params.kernel", cat("= kSm90 on a device of compute capability ", dev.cc_major, ".", dev.cc_minor),
              "compute capability 9.0 (Hopper) with the shared memory it needs for kSm90; kAuto or kSm80 elsewhere");
#else
  (void)head_dim;
  throw_arg(fn, "params.kernel", "= kSm90, but this build has no sm90a attention kernel",
            "a build with CMake BLOCKFUSE_SM90 (AUTO with 90 in BLOCKFUSE_CUDA_ARCHS, or ON), or kAuto/kSm80");
#endif
}

// The backward's dK/dV kernel: the sm90a one (nullptr: the sm80 one) under kAuto or kSm90 where it
// runs (this build, compute capability 9.0, the shared memory, k with rows: no TMA view describes an
// empty tensor); check_sm90_backward_request has refused kSm90 elsewhere.
attn::bwd::DkdvLauncher backward_sm90_dkdv(const AttnConstTensor& q, const AttnConstTensor& k,
                                           const AttentionParams& params) {
#if defined(BLOCKFUSE_HAS_SM90)
  if (params.kernel == AttentionKernel::kSm80 || !sm90_backward_runs(q.head_dim) || k.seqlen == 0) return nullptr;
  const bool bf16 = q.dtype == DType::kBF16;
  if (q.head_dim == 64) return bf16 ? attn::sm90::bwd::launch_dkdv_d64_bf16 : attn::sm90::bwd::launch_dkdv_d64_fp16;
  return bf16 ? attn::sm90::bwd::launch_dkdv_d128_bf16 : attn::sm90::bwd::launch_dkdv_d128_fp16;
#else
  (void)q, (void)k, (void)params;
  return nullptr;
#endif
}

}  // namespace

void attention_backward(AttnConstTensor q, AttnConstTensor k, AttnConstTensor v, AttnConstTensor out,
                        AttnConstTensor dout, const float* lse, AttnTensor dq, AttnTensor dk, AttnTensor dv,
                        const AttentionParams& params, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* fn = "attention_backward";
  // The forward's checks on q, k, v, out (as the output's shape) and lse.
  const AttnTensor out_w{const_cast<void*>(out.data), out.dtype, out.batch, out.seqlen, out.heads, out.head_dim,
                         out.batch_stride, out.seq_stride, out.head_stride};
  const Validated val = validate_host(q, k, v, out_w, lse, params);
  // (a call without query rows has an empty lse: PyTorch hands over a null pointer for it)
  if (lse == nullptr && !nothing_to_do(q, val))
    throw_arg(fn, "lse", "is null", "the forward's fp32 log-sum-exp [B, Hq, Sq] (or [Hq, total])");
  if (!attn::backward_supports(q.head_dim))
    throw_arg(fn, "head_dim", cat("is ", q.head_dim), "64 or 128 for the backward (256 does not fit the sm80 kernel's registers)");
  check_sm90_backward_request(fn, q.head_dim, params.kernel);
  // The gradients and dout: like the tensors they belong to.
  const struct { const char* name; AttnConstTensor t; const AttnConstTensor* like; } grads[] = {
      {"dout", dout, &q}, {"dq", dq, &q}, {"dk", dk, &k}, {"dv", dv, &v}};
  for (const auto& g : grads) {
    attn::check_tensor(fn, g.name, g.t, 65535, val.varlen);
    if (g.t.dtype != q.dtype) throw_arg(fn, g.name, cat("has dtype ", dtype_name(g.t.dtype)), cat("q's dtype (", dtype_name(q.dtype), ")"));
    if (g.t.batch != g.like->batch || g.t.seqlen != g.like->seqlen || g.t.heads != g.like->heads || g.t.head_dim != g.like->head_dim)
      throw_arg(fn, g.name, cat("has shape [", g.t.batch, ", ", g.t.seqlen, ", ", g.t.heads, ", ", g.t.head_dim, "]"),
                cat("[", g.like->batch, ", ", g.like->seqlen, ", ", g.like->heads, ", ", g.like->head_dim, "]"));
  }
  const size_t need = attention_backward_workspace_size(q, params.deterministic);
  if (need > 0 && (workspace == nullptr || workspace_bytes < need))
    throw_arg(fn, "workspace", cat("has ", workspace ? workspace_bytes : 0, " bytes"),
              cat("at least ", need, " bytes (attention_backward_workspace_size)"));
  if (reinterpret_cast<std::uintptr_t>(workspace) % 16 != 0)
    throw_arg(fn, "workspace", cat("pointer ", workspace, " is not 16-byte aligned"), "a 16-byte aligned device buffer");
  // Outputs overlap no input and no other output.
  const detail::Span sdq = span_of_tensor(dq), sdk = span_of_tensor(dk), sdv = span_of_tensor(dv);
  const struct { const char* name; detail::Span s; } ins[] = {
      {"q", span_of_tensor(q)}, {"k", span_of_tensor(k)}, {"v", span_of_tensor(v)}, {"out", span_of_tensor(out)},
      {"dout", span_of_tensor(dout)}, {"lse", detail::span_of_bytes(lse, q.heads * (val.varlen ? q.seqlen : q.batch * q.seqlen) * 4)},
      {"workspace", detail::span_of_bytes(workspace, static_cast<int64_t>(need))}};
  for (const auto& [name, s] : {std::pair<const char*, detail::Span>{"dq", sdq}, {"dk", sdk}, {"dv", sdv}})
    for (const auto& in : ins) detail::check_no_overlap(fn, name, s, in.name, in.s);
  detail::check_no_overlap(fn, "dq", sdq, "dk", sdk);
  detail::check_no_overlap(fn, "dq", sdq, "dv", sdv);
  detail::check_no_overlap(fn, "dk", sdk, "dv", sdv);
  if (nothing_to_do(q, val)) return;
  check_devices(q, k, v, out_w, lse, params, val.varlen);
  detail::check_device_pointer(fn, "dout", dout.data);
  detail::check_device_pointer(fn, "dq", dq.data);
  if (k.seqlen > 0) detail::check_device_pointer(fn, "dk", dk.data), detail::check_device_pointer(fn, "dv", dv.data);
  detail::check_device_pointer(fn, "workspace", workspace);
  detail::check_compute_capability(fn, 8, 0);
  const attn::bwd::DkdvLauncher dkdv = backward_sm90_dkdv(q, k, params);

  attn::BwdParams p{};
  static_cast<attn::Params&>(p) = make_params(q, k, v, out_w, const_cast<float*>(lse), params, val);
  p.dout = dout.data;
  p.do_batch_stride = dout.batch_stride, p.do_row_stride = dout.seq_stride, p.do_head_stride = dout.head_stride;
  p.dq = dq.data;
  p.dq_batch_stride = dq.batch_stride, p.dq_row_stride = dq.seq_stride, p.dq_head_stride = dq.head_stride;
  p.dk = dk.data;
  p.dk_batch_stride = dk.batch_stride, p.dk_row_stride = dk.seq_stride, p.dk_head_stride = dk.head_stride;
  p.dv = dv.data;
  p.dv_batch_stride = dv.batch_stride, p.dv_row_stride = dv.seq_stride, p.dv_head_stride = dv.head_stride;
  p.dsum = static_cast<float*>(workspace);
  // dQ through the fp32 accumulator: the non-deterministic mode, and the sm90a kernel in both (its
  // deterministic mode with the turn counters after it); zeroed together.
  p.dq_accum = nullptr;
  p.dq_semaphore = nullptr;
  if (!params.deterministic || dkdv != nullptr) {
    unsigned char* const ws = static_cast<unsigned char*>(workspace);
    p.dq_accum = reinterpret_cast<float*>(ws + dsum_bytes(q));
    p.dq_accum_head_rows = dkdv != nullptr ? accum_rows(q) : 0;
    size_t zeroed = accum_bytes(q);
    if (params.deterministic) {
      p.dq_semaphore = reinterpret_cast<int*>(ws + dsum_bytes(q) + accum_bytes(q));
      zeroed += semaphore_bytes(q);
    }
    BF_CUDA_CHECK(cudaMemsetAsync(p.dq_accum, 0, zeroed, stream));
  }
  p.scale = static_cast<float>(params.softmax_scale > 0 ? params.softmax_scale : 1.0 / std::sqrt(double(q.head_dim)));
  const int batch_dsum = val.varlen ? 1 : static_cast<int>(q.batch);
  const int rows_dsum = static_cast<int>(q.seqlen);
  if (q.head_dim == 64)
    attn::bwd::launch_d64(p, q.dtype, batch_dsum, rows_dsum, stream, dkdv);
  else
    attn::bwd::launch_d128(p, q.dtype, batch_dsum, rows_dsum, stream, dkdv);
}

}  // namespace blockfuse
