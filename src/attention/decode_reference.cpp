// CPU references of decode attention: one query row at a time, fp64 scores, exponentials and sums,
// the cache addressed through the block table exactly as the header describes.
#include "attention/decode_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/reference.h"
#include "common/host_float.h"

namespace blockfuse::attn {

namespace {

bool paged(const DecodeReferenceInput& in) { return in.host_block_table != nullptr; }

int64_t table_stride(const DecodeAttentionParams& p) { return p.block_table_stride == 0 ? p.max_blocks : p.block_table_stride; }

// Keys one sequence can hold: S_max, or max_blocks · page_size.
int64_t capacity(const DecodeReferenceInput& in, const DecodeAttentionParams& p) {
  return paged(in) ? p.max_blocks * in.k_cache.seqlen : in.k_cache.seqlen;
}

// Element offset of (key j, kv head h, dim 0) of sequence b in a cache view.
int64_t slot(const DecodeReferenceInput& in, const DecodeAttentionParams& p, const AttnConstTensor& c, int64_t b,
             int64_t j, int64_t h) {
  int64_t blk = b, row = j;
  if (paged(in)) {
    blk = in.host_block_table[b * table_stride(p) + j / c.seqlen];
    row = j % c.seqlen;
  }
  return blk * c.batch_stride + row * c.seq_stride + h * c.head_stride;
}

double at(const AttnConstTensor& t, int64_t offset) {
  return host::to_float(t.dtype, static_cast<const uint16_t*>(t.data)[offset]);
}

double table_at(const RotaryReference& r, DType dt, int64_t half, int64_t pos, int64_t i, bool sin) {
  const int64_t ld = r.ld == 0 ? half : r.ld;
  const void* base = sin ? r.sin : r.cos;
  if (r.fp32) return static_cast<const float*>(base)[pos * ld + i];
  return host::to_float(dt, static_cast<const uint16_t*>(base)[pos * ld + i]);
}

}  // namespace

bool decode_reference_guarded(const DecodeReferenceInput& in, const DecodeAttentionParams& p, int64_t b,
                              int64_t new_tokens) {
  const int64_t len = in.cache_seqlens[b], pad = in.cache_leftpad ? in.cache_leftpad[b] : 0;
  if (len < 0 || len + new_tokens > capacity(in, p)) return true;
  if (pad < 0 || pad > len) return true;
  if (!paged(in)) return false;
  const int64_t pages = (len + new_tokens + in.k_cache.seqlen - 1) / in.k_cache.seqlen;
  for (int64_t i = pad / in.k_cache.seqlen; i < pages; ++i) {
    const int64_t pg = in.host_block_table[b * table_stride(p) + i];
    if (pg < 0 || pg >= in.k_cache.batch) return true;
  }
  return false;
}

void decode_attention_reference(const DecodeReferenceInput& in, const DecodeAttentionParams& p,
                                std::vector<double>& out, std::vector<double>& lse) {
  const AttnConstTensor& q = in.q;
  const int64_t B = q.batch, Sq = q.seqlen, Hq = q.heads, D = q.head_dim, group = q.heads / in.k_cache.heads;
  const double scale = p.softmax_scale > 0 ? p.softmax_scale : 1.0 / std::sqrt(double(D));
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  AttentionParams fwd;  // the forward's visibility rule
  fwd.causal = p.causal;
  fwd.window_left = p.window_left;
  fwd.window_right = p.window_right;
  out.assign(size_t(B * Sq * Hq * D), 0.0);
  lse.assign(size_t(B * Hq * Sq), 0.0);
  std::vector<double> s, acc(static_cast<size_t>(D));
  for (int64_t b = 0; b < B; ++b) {
    const bool guarded = decode_reference_guarded(in, p, b);
    const int64_t L = in.cache_seqlens[b], P = in.cache_leftpad ? in.cache_leftpad[b] : 0;
    for (int64_t t = 0; t < Sq; ++t)
      for (int64_t h = 0; h < Hq; ++h) {
        double* o = &out[size_t(((b * Sq + t) * Hq + h) * D)];
        double& l = lse[size_t((b * Hq + h) * Sq + t)];
        if (guarded) {
          std::fill(o, o + D, nan);
          l = nan;
          continue;
        }
        const int64_t hk = h / group;
        const int64_t q0 = b * q.batch_stride + t * q.seq_stride + h * q.head_stride;
        s.assign(size_t(std::max<int64_t>(L, 0)), 0.0);
        double m = -inf;
        bool any = false;
        for (int64_t j = 0; j < L; ++j) {
          if (j < P || !reference_visible(t, j, Sq, L, fwd)) continue;
          const int64_t k0 = slot(in, p, in.k_cache, b, j, hk);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(q, q0 + d) * at(in.k_cache, k0 + d);
          double x = dot * scale;
          if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
          s[size_t(j)] = x;
          any = true;
          if (x > m) m = x;
        }
        if (!any) {
          l = -inf;
          continue;  // out stays 0
        }
        if (std::isinf(m)) m = 0;  // every visible score NaN: keep exp(NaN − 0) = NaN
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < L; ++j) {
          if (j < P || !reference_visible(t, j, Sq, L, fwd)) continue;
          const double e = std::exp(s[size_t(j)] - m);
          sum += e;
          const int64_t v0 = slot(in, p, in.v_cache, b, j, hk);
          for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += e * at(in.v_cache, v0 + d);
        }
        for (int64_t d = 0; d < D; ++d) o[d] = acc[size_t(d)] / sum;
        l = m + std::log(sum);
      }
  }
}

void rotary_reference(const RotaryReference& r, DType dtype, int64_t head_dim, int64_t pos, const double* x,
                      double* y) {
  std::copy(x, x + head_dim, y);
  if (r.cos == nullptr) return;
  const int64_t R = r.rotary_dim == 0 ? head_dim : r.rotary_dim, half = R / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double c = table_at(r, dtype, half, pos, i, false), sn = table_at(r, dtype, half, pos, i, true);
    // GPT-J: (2i, 2i + 1); GPT-NeoX rotate-half: (i, i + R/2).
    const int64_t a = r.interleaved ? 2 * i : i, bb = r.interleaved ? 2 * i + 1 : i + half;
    y[a] = x[a] * c - x[bb] * sn;
    y[bb] = x[bb] * c + x[a] * sn;
  }
}

void decode_attention_with_kvcache_reference(const AttnConstTensor& q, const AttnTensor& k_cache,
                                             const AttnTensor& v_cache, const AttnConstTensor& k_new,
                                             const AttnConstTensor& v_new, const int32_t* cache_seqlens,
                                             const int32_t* host_block_table, const RotaryReference& r,
                                             const DecodeAttentionParams& p, std::vector<double>& out,
                                             std::vector<double>& lse) {
  const int64_t B = q.batch, Sq = q.seqlen, Hq = q.heads, Hkv = k_cache.heads, D = q.head_dim;
  const DType dt = q.dtype;
  DecodeReferenceInput in{q, k_cache, v_cache, cache_seqlens, host_block_table};
  // The rotated q, contiguous [B, Sq, Hq, D], rounded to the dtype as the kernels store it.
  std::vector<uint16_t> q_rot(size_t(B * Sq * Hq * D));
  std::vector<double> x(static_cast<size_t>(D)), y(static_cast<size_t>(D));
  auto rotate_into = [&](const AttnConstTensor& src, int64_t off, int64_t pos, uint16_t* dst) {
    for (int64_t d = 0; d < D; ++d) x[size_t(d)] = at(src, off + d);
    rotary_reference(r, dt, D, pos, x.data(), y.data());
    for (int64_t d = 0; d < D; ++d) dst[d] = host::from_float(dt, static_cast<float>(y[size_t(d)]));
  };
  std::vector<int32_t> lens(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const bool guarded = decode_reference_guarded(in, p, b, Sq);
    const int64_t L = cache_seqlens[b];
    lens[size_t(b)] = static_cast<int32_t>(guarded ? -1 : L + Sq);  // -1: guarded again below
    for (int64_t t = 0; t < Sq; ++t) {
      const int64_t pos = guarded ? 0 : L + t;
      for (int64_t h = 0; h < Hq; ++h)
        rotate_into(q, b * q.batch_stride + t * q.seq_stride + h * q.head_stride, pos,
                    &q_rot[size_t(((b * Sq + t) * Hq + h) * D)]);
      if (guarded) continue;  // nothing written
      for (int64_t h = 0; h < Hkv; ++h) {
        auto* kc = static_cast<uint16_t*>(k_cache.data) + slot(in, p, k_cache, b, pos, h);
        auto* vc = static_cast<uint16_t*>(v_cache.data) + slot(in, p, v_cache, b, pos, h);
        rotate_into(k_new, b * k_new.batch_stride + t * k_new.seq_stride + h * k_new.head_stride, pos, kc);
        const auto* vs = static_cast<const uint16_t*>(v_new.data) + b * v_new.batch_stride + t * v_new.seq_stride +
                         h * v_new.head_stride;
        std::copy(vs, vs + D, vc);
      }
    }
  }
  // Attention over the L_b + Sq keys with the rotated q.
  const DecodeReferenceInput after{make_attn_tensor(static_cast<const void*>(q_rot.data()), dt, B, Sq, Hq, D), k_cache,
                                   v_cache, lens.data(), host_block_table};
  decode_attention_reference(after, p, out, lse);
}

}  // namespace blockfuse::attn
