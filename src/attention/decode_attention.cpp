// decode_attention: validation, the split count, and the launch of the decode kernels
// (decode_sm80.cuh: append -> split -> merge). Every check runs before anything is launched.
#include "blockfuse/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attention/decode_launch.h"
#include "attention/decode_params.h"
#include "attention/params.h"
#include "attention/tensor_check.h"
#include "common/check.h"
#include "common/device.h"

namespace blockfuse {

namespace {

using detail::cat;
using detail::throw_arg;
namespace dec = attn::decode;

constexpr int64_t kMaxLen = attn::kMaxSeqlen;
using attn::span_of_tensor;

void check_tensor(const char* fn, const char* arg, const AttnConstTensor& t, int64_t max_batch) {
  attn::check_tensor(fn, arg, t, max_batch, false);
}

void check_like(const char* fn, const char* arg, const AttnConstTensor& t, const char* ref_arg,
                const AttnConstTensor& ref, bool batch, bool seqlen, bool heads) {
  if (t.dtype != ref.dtype)
    throw_arg(fn, arg, cat("has dtype ", dtype_name(t.dtype)), cat("the dtype of '", ref_arg, "' (", dtype_name(ref.dtype), ")"));
  if (t.head_dim != ref.head_dim)
    throw_arg(fn, arg, cat("has head_dim = ", t.head_dim), cat("the head_dim of '", ref_arg, "' (", ref.head_dim, ")"));
  if (batch && t.batch != ref.batch)
    throw_arg(fn, arg, cat("has batch = ", t.batch), cat("the batch of '", ref_arg, "' (", ref.batch, ")"));
  if (seqlen && t.seqlen != ref.seqlen)
    throw_arg(fn, arg, cat("has seqlen = ", t.seqlen), cat("the seqlen of '", ref_arg, "' (", ref.seqlen, ")"));
  if (heads && t.heads != ref.heads)
    throw_arg(fn, arg, cat("has heads = ", t.heads), cat("the heads of '", ref_arg, "' (", ref.heads, ")"));
}

struct Shape {
  int64_t capacity;   // keys one sequence can hold
  int64_t max_keys;   // the heuristic's key range
  int64_t page_size;  // the heuristic's layout: 0 contiguous, else the page size
  int m_frags, m_blocks, splits;
};

// Everything but the device pointers and the workspace; returns the launch shape.
Shape validate(const char* fn, const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v,
               const int32_t* cache_seqlens, const AttnConstTensor& out, const float* lse,
               const DecodeAttentionParams& prm, int64_t new_tokens) {
  const bool paged = prm.block_table != nullptr;
  check_tensor(fn, "q", q, 65535);
  if (q.seqlen < 1 || q.seqlen > kDecodeAttentionMaxSeqlenQ)
    throw_arg(fn, "q", cat("has seqlen = ", q.seqlen),
              cat("1 <= seqlen <= ", kDecodeAttentionMaxSeqlenQ, " query tokens per sequence (longer: blockfuse::attention)"));
  check_tensor(fn, "k_cache", k, paged ? int64_t(1) << 31 : int64_t(65535));
  check_tensor(fn, "v_cache", v, paged ? int64_t(1) << 31 : int64_t(65535));
  check_tensor(fn, "out", out, 65535);
  if (q.batch * q.seqlen * q.heads >= (int64_t(1) << 31))
    throw_arg(fn, "q", cat("has ", q.batch, " x ", q.seqlen, " x ", q.heads, " rows"), "batch · seqlen · heads < 2^31");
  check_like(fn, "k_cache", k, "q", q, !paged, false, false);
  check_like(fn, "v_cache", v, "k_cache", k, true, true, true);
  check_like(fn, "out", out, "q", q, true, true, true);
  // The split kernel's key offsets are 32 x 32 -> 64-bit products of a key index and the row stride.
  for (const auto* c : {&k, &v})
    if (c->seqlen > 1 && c->seq_stride >= (int64_t(1) << 31))
      throw_arg(fn, c == &k ? "k_cache" : "v_cache", cat("has seq_stride = ", c->seq_stride), "seq_stride < 2^31 elements");
  if (q.heads % k.heads != 0)
    throw_arg(fn, "k_cache", cat("has heads = ", k.heads, " with q.heads = ", q.heads), "q.heads % k_cache.heads == 0");
  if (k.seqlen < 1)
    throw_arg(fn, "k_cache", cat("has seqlen = ", k.seqlen), paged ? "a page size >= 1" : "a capacity S_max >= 1");
  if (paged && k.batch < 1) throw_arg(fn, "k_cache", "has no pages (batch = 0)", "num_blocks >= 1 for a paged cache");
  if (cache_seqlens == nullptr) throw_arg(fn, "cache_seqlens", "is null", "an int32 device buffer of batch entries");
  if (reinterpret_cast<std::uintptr_t>(cache_seqlens) % 4 != 0)
    throw_arg(fn, "cache_seqlens", cat("pointer ", static_cast<const void*>(cache_seqlens), " is not 4-byte aligned"),
              "an int32 device buffer");
  if (reinterpret_cast<std::uintptr_t>(lse) % 4 != 0)
    throw_arg(fn, "lse", cat("pointer ", static_cast<const void*>(lse), " is not 4-byte aligned"), "a 4-byte aligned fp32 buffer");

  int64_t capacity = k.seqlen;
  const int64_t table_stride = prm.block_table_stride == 0 ? prm.max_blocks : prm.block_table_stride;
  if (paged) {
    if (prm.max_blocks < 1)
      throw_arg(fn, "params.max_blocks", cat("is ", prm.max_blocks), "max_blocks >= 1 with a block_table");
    if (table_stride < prm.max_blocks)
      throw_arg(fn, "params.block_table_stride", cat("is ", prm.block_table_stride, " with max_blocks = ", prm.max_blocks),
                "0 (= max_blocks) or >= max_blocks");
    if (reinterpret_cast<std::uintptr_t>(prm.block_table) % 4 != 0)
      throw_arg(fn, "params.block_table", "is not 4-byte aligned", "an int32 device buffer [batch, max_blocks]");
    if (table_stride * q.batch >= (int64_t(1) << 31))
      throw_arg(fn, "params.block_table_stride", cat("is ", table_stride, " with batch ", q.batch), "batch · stride < 2^31");
    capacity = prm.max_blocks * k.seqlen;
  } else if (prm.max_blocks != 0 || prm.block_table_stride != 0 || prm.host_block_table) {
    throw_arg(fn, "params.block_table", "is null while max_blocks, block_table_stride or host_block_table is set",
              "a block_table for a paged cache, or none of them");
  }
  if (capacity >= kMaxLen) throw_arg(fn, "k_cache", cat("holds ", capacity, " keys per sequence"), "a capacity < 2^30");
  if (capacity < new_tokens)
    throw_arg(fn, "k_cache", cat("holds ", capacity, " keys per sequence, fewer than the ", new_tokens, " new ones"),
              "room for the new keys");

  if (!std::isfinite(prm.softmax_scale)) throw_arg(fn, "params.softmax_scale", cat("is ", prm.softmax_scale), "a finite value (<= 0: 1/sqrt(D))");
  if (!(prm.softcap >= 0.0f) || !std::isfinite(prm.softcap))
    throw_arg(fn, "params.softcap", cat("is ", prm.softcap), "0 (off) or a finite value > 0");
  if (prm.window_left < -1) throw_arg(fn, "params.window_left", cat("is ", prm.window_left), "-1 (unbounded) or >= 0");
  if (prm.window_right < -1) throw_arg(fn, "params.window_right", cat("is ", prm.window_right), "-1 (unbounded) or >= 0");
  if (prm.causal && prm.window_right > 0)
    throw_arg(fn, "params.window_right", cat("is ", prm.window_right, " with causal = true"), "0 or -1 when causal");
  if (prm.num_splits < 0 || prm.num_splits > kDecodeAttentionMaxSplits)
    throw_arg(fn, "params.num_splits", cat("is ", prm.num_splits), cat("0 (heuristic) or 1..", kDecodeAttentionMaxSplits));
  if (int64_t(std::max(prm.num_splits, 1)) * k.heads > 65535)  // grid y
    throw_arg(fn, "params.num_splits", cat("is ", prm.num_splits, " with ", k.heads, " KV heads"),
              "num_splits · k_cache.heads <= 65535");
  if (prm.max_seqlen_k < 0) throw_arg(fn, "params.max_seqlen_k", cat("is ", prm.max_seqlen_k), "0 (the capacity) or > 0");
  if (prm.cache_leftpad != nullptr && new_tokens > 0)
    throw_arg(fn, "params.cache_leftpad", "is set", "nullptr (decode_attention_with_kvcache takes no left padding)");
  if (prm.cache_leftpad != nullptr && reinterpret_cast<std::uintptr_t>(prm.cache_leftpad) % 4 != 0)
    throw_arg(fn, "params.cache_leftpad", cat("pointer ", static_cast<const void*>(prm.cache_leftpad), " is not 4-byte aligned"),
              "an int32 device buffer of batch entries");
  if (prm.host_cache_leftpad != nullptr && prm.cache_leftpad == nullptr)
    throw_arg(fn, "params.host_cache_leftpad", "is set without cache_leftpad", "cache_leftpad as well (the device copy)");
  if (prm.host_cache_leftpad != nullptr && prm.host_cache_seqlens == nullptr)
    throw_arg(fn, "params.host_cache_leftpad", "is set without host_cache_seqlens",
              "host_cache_seqlens as well (the left padding is checked against the lengths)");

  // Host copies: every length fits, every page a sequence uses exists.
  if (prm.host_cache_seqlens) {
    for (int64_t b = 0; b < q.batch; ++b) {
      const int64_t len = prm.host_cache_seqlens[b];
      if (len < 0 || len + new_tokens > capacity)
        throw_arg(fn, "cache_seqlens", cat("holds ", len, " for sequence ", b, new_tokens ? " (before the new keys)" : ""),
                  cat("0 <= length <= ", capacity - new_tokens, " (the cache's capacity", new_tokens ? " less the new keys" : "", ")"));
      if (prm.host_cache_leftpad) {
        const int64_t pad = prm.host_cache_leftpad[b];
        if (pad < 0 || pad > len)
          throw_arg(fn, "cache_leftpad", cat("holds ", pad, " for sequence ", b, " of length ", len),
                    "0 <= cache_leftpad <= cache_seqlens");
      }
      if (paged && prm.host_block_table) {
        const int64_t pages = (len + new_tokens + k.seqlen - 1) / k.seqlen;
        for (int64_t i = 0; i < pages; ++i) {
          const int64_t pg = prm.host_block_table[b * table_stride + i];
          if (pg < 0 || pg >= k.batch)
            throw_arg(fn, "block_table", cat("holds page ", pg, " at [", b, ", ", i, "]"),
                      cat("a page index in [0, ", k.batch, ") for every page a sequence uses"));
        }
      }
    }
  } else if (prm.host_block_table) {
    throw_arg(fn, "params.host_block_table", "is set without host_cache_seqlens",
              "host_cache_seqlens as well (the lengths say which pages are used)");
  }

  // Overlaps: out must not alias an input, the caches or the LSE.
  const detail::Span so = span_of_tensor(out);
  detail::check_no_overlap(fn, "out", so, "q", span_of_tensor(q));
  detail::check_no_overlap(fn, "out", so, "k_cache", span_of_tensor(k));
  detail::check_no_overlap(fn, "out", so, "v_cache", span_of_tensor(v));
  if (lse) {
    const detail::Span sl = detail::span_of_bytes(lse, q.batch * q.heads * q.seqlen * 4);
    detail::check_no_overlap(fn, "lse", sl, "out", so);
    detail::check_no_overlap(fn, "lse", sl, "q", span_of_tensor(q));
    detail::check_no_overlap(fn, "lse", sl, "k_cache", span_of_tensor(k));
  }

  Shape s{};
  s.capacity = capacity;
  s.max_keys = prm.max_seqlen_k > 0 ? std::min(prm.max_seqlen_k, capacity) : capacity;
  s.page_size = paged ? k.seqlen : 0;
  const int64_t rows = q.seqlen * (q.heads / k.heads);
  s.m_frags = dec::m_frags_for(rows, static_cast<int>(q.head_dim),
                               dec::cache_read_bytes(q.batch, k.heads, s.max_keys, q.head_dim));
  s.m_blocks = static_cast<int>((rows + 16 * s.m_frags - 1) / (16 * s.m_frags));
  s.splits = prm.num_splits;
  return s;
}

void check_workspace(const char* fn, void* ws, size_t ws_bytes, size_t need) {
  if (need == 0) return;
  if (ws == nullptr || ws_bytes < need)
    throw_arg(fn, "workspace", cat("has ", ws ? ws_bytes : 0, " bytes"),
              cat("at least ", need, " bytes (decode_attention_workspace_size)"));
  if (reinterpret_cast<std::uintptr_t>(ws) % 16 != 0)
    throw_arg(fn, "workspace", cat("pointer ", ws, " is not 16-byte aligned"), "a 16-byte aligned device buffer");
}

dec::Params make_params(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v,
                        const int32_t* cache_seqlens, const AttnTensor& out, float* lse,
                        const DecodeAttentionParams& prm, const Shape& s, int64_t new_tokens) {
  dec::Params p{};
  p.q = q.data;
  p.k = const_cast<void*>(k.data);
  p.v = const_cast<void*>(v.data);
  p.out = out.data;
  p.lse = lse;
  p.q_batch_stride = q.batch_stride, p.q_row_stride = q.seq_stride, p.q_head_stride = q.head_stride;
  p.k_block_stride = k.batch_stride, p.k_row_stride = k.seq_stride, p.k_head_stride = k.head_stride;
  p.v_block_stride = v.batch_stride, p.v_row_stride = v.seq_stride, p.v_head_stride = v.head_stride;
  p.o_batch_stride = out.batch_stride, p.o_row_stride = out.seq_stride, p.o_head_stride = out.head_stride;
  p.cache_seqlens = cache_seqlens;
  p.cache_leftpad = prm.cache_leftpad;
  p.block_table = prm.block_table;
  p.block_table_stride = prm.block_table_stride == 0 ? prm.max_blocks : prm.block_table_stride;
  p.page_size = static_cast<int>(k.seqlen);
  p.page_shift = -1;
  for (int sh = 0; sh < 31; ++sh)
    if ((int64_t(1) << sh) == k.seqlen) p.page_shift = sh;
  p.num_blocks = static_cast<int>(std::min<int64_t>(k.batch, INT32_MAX));
  p.capacity = static_cast<int>(s.capacity);
  p.batch = static_cast<int>(q.batch);
  p.seqlen_q = static_cast<int>(q.seqlen);
  p.heads_q = static_cast<int>(q.heads);
  p.heads_kv = static_cast<int>(k.heads);
  p.group = static_cast<int>(q.heads / k.heads);
  p.rows = p.seqlen_q * p.group;
  p.new_tokens = static_cast<int>(new_tokens);
  p.num_splits = s.splits;
  const attn::ScoreScale sc = attn::score_scale(prm.softmax_scale, prm.softcap, q.head_dim);
  p.scale_log2 = sc.scale_log2, p.softcap_mul = sc.softcap_mul;
  p.window_left = attn::window_left_bound(prm.window_left);
  p.window_right = attn::window_right_bound(prm.window_right, prm.causal);
  return p;
}

// The split count on the current device (params.num_splits, or the heuristic's).
int resolve_splits(const AttnConstTensor& q, const AttnConstTensor& k, const Shape& s, int requested) {
  if (requested > 0) return requested;
  const int sm = detail::current_device_spec().sm_count;
  return decode_attention_num_splits(q.batch, k.heads, q.seqlen * (q.heads / k.heads), q.head_dim, s.max_keys, sm,
                                     s.page_size, detail::current_device_spec().smem_per_sm);
}

void launch(const dec::Params& p, const dec::AppendParams* append, DType dtype, int64_t head_dim, const Shape& s,
            cudaStream_t stream) {
  switch (head_dim) {
    case 64: dec::launch_d64(p, append, dtype, s.m_frags, s.m_blocks, stream); break;
    case 128: dec::launch_d128(p, append, dtype, s.m_frags, s.m_blocks, stream); break;
    default: dec::launch_d256(p, append, dtype, s.m_frags, s.m_blocks, stream); break;
  }
}

void check_smem(const char* fn, int64_t head_dim, int m_frags) {
  const int need = dec::smem_bytes(static_cast<int>(head_dim), m_frags);
  const int have = detail::current_device_spec().max_smem_per_block;
  if (need > have)
    throw Error(cat("blockfuse::", fn, ": the decode kernel at head_dim ", head_dim, " needs ", need,
                    " bytes of shared memory; the current device allows ", have, " per block"));
}

// Splits the workspace: partial outputs, partial LSEs, rotated q.
void carve(dec::Params& p, void* ws, int64_t rows_total, int64_t head_dim, void** q_copy) {
  auto* base = static_cast<char*>(ws);
  if (p.num_splits > 1) {
    p.o_partial = reinterpret_cast<float*>(base);
    base += dec::align16(sizeof(float) * p.num_splits * rows_total * head_dim);
    p.lse_partial = reinterpret_cast<float*>(base);
    base += dec::align16(sizeof(float) * p.num_splits * rows_total);
  }
  if (q_copy) *q_copy = base;
}

}  // namespace

int decode_attention_num_splits(int64_t batch, int64_t heads_kv, int64_t rows_per_kv_head, int64_t head_dim,
                                int64_t seqlen_k, int sm_count, int64_t page_size, int64_t smem_per_sm) {
  constexpr const char* fn = "decode_attention_num_splits";
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) throw_arg(fn, "head_dim", cat("is ", head_dim), "64, 128 or 256");
  if (batch < 1) throw_arg(fn, "batch", cat("is ", batch), ">= 1");
  if (heads_kv < 1) throw_arg(fn, "heads_kv", cat("is ", heads_kv), ">= 1");
  if (rows_per_kv_head < 1) throw_arg(fn, "rows_per_kv_head", cat("is ", rows_per_kv_head), ">= 1");
  if (seqlen_k < 0) throw_arg(fn, "seqlen_k", cat("is ", seqlen_k), ">= 0");
  if (sm_count < 1) throw_arg(fn, "sm_count", cat("is ", sm_count), ">= 1");
  if (page_size < 0) throw_arg(fn, "page_size", cat("is ", page_size), "0 (a contiguous cache) or the page size >= 1");
  if (smem_per_sm < 0) throw_arg(fn, "smem_per_sm", cat("is ", smem_per_sm), "0 (unknown) or the bytes of one SM");
  const int mf = dec::m_frags_for(rows_per_kv_head, static_cast<int>(head_dim),
                                  dec::cache_read_bytes(batch, heads_kv, seqlen_k, head_dim));
  const int64_t m_blocks = (rows_per_kv_head + 16 * mf - 1) / (16 * mf);
  const int s = dec::num_splits(batch * heads_kv * m_blocks, (seqlen_k + dec::kBlockN - 1) / dec::kBlockN, sm_count, page_size,
                                dec::ctas_per_sm(smem_per_sm, dec::smem_bytes(static_cast<int>(head_dim), mf)));
  return static_cast<int>(std::min<int64_t>(s, 65535 / heads_kv));  // grid y
}

size_t decode_attention_workspace_size(int64_t batch, int64_t seqlen_q, int64_t heads_q, int64_t heads_kv,
                                       int64_t head_dim, int64_t max_seqlen_k, int num_splits, bool with_kvcache) {
  constexpr const char* fn = "decode_attention_workspace_size";
  if (batch < 0) throw_arg(fn, "batch", cat("is ", batch), ">= 0");
  if (seqlen_q < 1 || seqlen_q > kDecodeAttentionMaxSeqlenQ) throw_arg(fn, "seqlen_q", cat("is ", seqlen_q), "1..16");
  if (heads_kv < 1 || heads_q < 1 || heads_q % heads_kv != 0)
    throw_arg(fn, "heads_q", cat("is ", heads_q, " with heads_kv = ", heads_kv), "heads_q % heads_kv == 0, both >= 1");
  if (num_splits < 0 || num_splits > kDecodeAttentionMaxSplits)
    throw_arg(fn, "num_splits", cat("is ", num_splits), cat("0 (heuristic) or 1..", kDecodeAttentionMaxSplits));
  if (batch == 0) return 0;
  // The heuristic's count for either kind of cache (the layout is not an argument here): the larger.
  auto heuristic = [&](const detail::DeviceSpec& dev, int64_t page_size) {
    return decode_attention_num_splits(batch, heads_kv, seqlen_q * (heads_q / heads_kv), head_dim, max_seqlen_k,
                                       dev.sm_count, page_size, dev.smem_per_sm);
  };
  int splits = num_splits;
  if (splits == 0) {  // only then is the device asked
    const detail::DeviceSpec dev = detail::current_device_spec();
    splits = std::max(heuristic(dev, 0), heuristic(dev, 1));
  }
  return dec::workspace_bytes(batch * seqlen_q * heads_q, head_dim, splits, with_kvcache);
}

void decode_attention(AttnConstTensor q, AttnConstTensor k_cache, AttnConstTensor v_cache, const int32_t* cache_seqlens,
                      AttnTensor out, float* lse, const DecodeAttentionParams& params, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* fn = "decode_attention";
  Shape s = validate(fn, q, k_cache, v_cache, cache_seqlens, out, lse, params, 0);
  if (q.batch == 0) return;
  const int64_t rows_total = q.batch * q.seqlen * q.heads;
  if (params.num_splits > 0)  // known without the device: checked with the other arguments
    check_workspace(fn, workspace, workspace_bytes, dec::workspace_bytes(rows_total, q.head_dim, params.num_splits, false));
  detail::check_device_pointer(fn, "q", q.data);
  detail::check_device_pointer(fn, "k_cache", k_cache.data);
  detail::check_device_pointer(fn, "v_cache", v_cache.data);
  detail::check_device_pointer(fn, "out", out.data);
  detail::check_device_pointer(fn, "cache_seqlens", cache_seqlens);
  if (params.cache_leftpad) detail::check_device_pointer(fn, "params.cache_leftpad", params.cache_leftpad);
  if (lse) detail::check_device_pointer(fn, "lse", lse);
  if (params.block_table) detail::check_device_pointer(fn, "params.block_table", params.block_table);
  detail::check_compute_capability(fn, 8, 0);
  s.splits = resolve_splits(q, k_cache, s, params.num_splits);
  check_workspace(fn, workspace, workspace_bytes, dec::workspace_bytes(rows_total, q.head_dim, s.splits, false));
  if (s.splits > 1) detail::check_device_pointer(fn, "workspace", workspace);
  check_smem(fn, q.head_dim, s.m_frags);
  dec::Params p = make_params(q, k_cache, v_cache, cache_seqlens, out, lse, params, s, 0);
  carve(p, workspace, rows_total, q.head_dim, nullptr);
  launch(p, nullptr, q.dtype, q.head_dim, s, stream);
}

void decode_attention_with_kvcache(AttnConstTensor q, AttnTensor k_cache, AttnTensor v_cache, AttnConstTensor k_new,
                                   AttnConstTensor v_new, const int32_t* cache_seqlens, const RotaryParams& rotary,
                                   AttnTensor out, float* lse, const DecodeAttentionParams& params, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* fn = "decode_attention_with_kvcache";
  Shape s = validate(fn, q, k_cache, v_cache, cache_seqlens, out, lse, params, q.seqlen);
  check_tensor(fn, "k_new", k_new, 65535);
  check_tensor(fn, "v_new", v_new, 65535);
  check_like(fn, "k_new", k_new, "q", q, true, true, false);
  if (k_new.heads != k_cache.heads)
    throw_arg(fn, "k_new", cat("has heads = ", k_new.heads), cat("the heads of 'k_cache' (", k_cache.heads, ")"));
  check_like(fn, "v_new", v_new, "k_new", k_new, true, true, true);
  const detail::Span so = span_of_tensor(out);
  detail::check_no_overlap(fn, "out", so, "k_new", span_of_tensor(k_new));
  detail::check_no_overlap(fn, "out", so, "v_new", span_of_tensor(v_new));
  const detail::Span sk = span_of_tensor(k_cache), sv = span_of_tensor(v_cache);
  detail::check_no_overlap(fn, "k_cache", sk, "v_cache", sv);
  detail::check_no_overlap(fn, "k_cache", sk, "k_new", span_of_tensor(k_new));
  detail::check_no_overlap(fn, "v_cache", sv, "v_new", span_of_tensor(v_new));
  detail::check_no_overlap(fn, "k_cache", sk, "q", span_of_tensor(q));

  dec::AppendParams a{};
  if (rotary.cos != nullptr || rotary.sin != nullptr) {
    if (rotary.cos == nullptr || rotary.sin == nullptr)
      throw_arg(fn, rotary.cos ? "rotary.sin" : "rotary.cos", "is null while the other table is set", "both tables or neither");
    const int64_t r = rotary.rotary_dim == 0 ? q.head_dim : rotary.rotary_dim;
    if (r < 2 || r % 2 != 0 || r > q.head_dim)
      throw_arg(fn, "rotary.rotary_dim", cat("is ", rotary.rotary_dim), cat("0 (= head_dim) or an even value in [2, ", q.head_dim, "]"));
    const int64_t ld = rotary.ld == 0 ? r / 2 : rotary.ld;
    if (ld < r / 2) throw_arg(fn, "rotary.ld", cat("is ", rotary.ld, " with rotary_dim = ", r), "0 or >= rotary_dim / 2");
    if (rotary.max_positions < s.capacity)
      throw_arg(fn, "rotary.max_positions", cat("is ", rotary.max_positions),
                cat(">= the cache's capacity (", s.capacity, " positions)"));
    if (rotary.max_positions * ld >= (int64_t(1) << 40))
      throw_arg(fn, "rotary.max_positions", cat("is ", rotary.max_positions), "a table below 2^40 elements");
    const int align = rotary.fp32 ? 4 : 2;
    for (auto [name, ptr] : {std::pair<const char*, const void*>{"rotary.cos", rotary.cos}, {"rotary.sin", rotary.sin}})
      if (reinterpret_cast<std::uintptr_t>(ptr) % align != 0)
        throw_arg(fn, name, cat("pointer ", ptr, " is not ", align, "-byte aligned"), "an aligned table of its dtype");
    a.cos = rotary.cos, a.sin = rotary.sin, a.rot_fp32 = rotary.fp32, a.interleaved = rotary.interleaved;
    a.rotary_dim = static_cast<int>(r), a.rot_ld = ld, a.max_positions = static_cast<int>(std::min<int64_t>(rotary.max_positions, INT32_MAX));
  }
  if (q.batch == 0) return;
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"q", q.data}, {"k_cache", k_cache.data}, {"v_cache", v_cache.data},
                           {"k_new", k_new.data}, {"v_new", v_new.data}, {"out", out.data}, {"cache_seqlens", cache_seqlens}})
    detail::check_device_pointer(fn, name, ptr);
  if (lse) detail::check_device_pointer(fn, "lse", lse);
  if (params.block_table) detail::check_device_pointer(fn, "params.block_table", params.block_table);
  if (a.cos) detail::check_device_pointer(fn, "rotary.cos", a.cos), detail::check_device_pointer(fn, "rotary.sin", a.sin);
  detail::check_compute_capability(fn, 8, 0);
  s.splits = resolve_splits(q, k_cache, s, params.num_splits);
  const int64_t rows_total = q.batch * q.seqlen * q.heads;
  check_workspace(fn, workspace, workspace_bytes, dec::workspace_bytes(rows_total, q.head_dim, s.splits, true));
  detail::check_device_pointer(fn, "workspace", workspace);
  check_smem(fn, q.head_dim, s.m_frags);

  const AttnConstTensor q_rot = make_attn_tensor(static_cast<const void*>(nullptr), q.dtype, q.batch, q.seqlen, q.heads, q.head_dim);
  dec::Params p = make_params(q_rot, k_cache, v_cache, cache_seqlens, out, lse, params, s, q.seqlen);
  void* q_copy = nullptr;
  carve(p, workspace, rows_total, q.head_dim, &q_copy);
  p.q = q_copy;
  a.q = q.data, a.k_new = k_new.data, a.v_new = v_new.data, a.q_out = q_copy;
  a.q_batch_stride = q.batch_stride, a.q_row_stride = q.seq_stride, a.q_head_stride = q.head_stride;
  a.kn_batch_stride = k_new.batch_stride, a.kn_row_stride = k_new.seq_stride, a.kn_head_stride = k_new.head_stride;
  a.vn_batch_stride = v_new.batch_stride, a.vn_row_stride = v_new.seq_stride, a.vn_head_stride = v_new.head_stride;
  launch(p, &a, q.dtype, q.head_dim, s, stream);
}

}  // namespace blockfuse
