// CPU reference of attention: one query row at a time, fp64 scores, exponentials and sums.
#include "attention/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/host_float.h"

namespace blockfuse::attn {

bool reference_visible(int64_t i, int64_t j, int64_t sq, int64_t sk, const AttentionParams& p) {
  if (j < 0 || j >= sk) return false;
  const int64_t diag = i + sk - sq;  // the key on this row's bottom-right aligned diagonal
  const int64_t right = p.causal ? 0 : p.window_right;
  if (right >= 0 && j > diag + right) return false;
  if (p.window_left >= 0 && j < diag - p.window_left) return false;
  return true;
}

namespace {

double elem(const AttnConstTensor& t, int64_t b, int64_t s, int64_t h, int64_t d) {
  const auto* bits = static_cast<const uint16_t*>(t.data);
  return host::to_float(t.dtype, bits[b * t.batch_stride + s * t.seq_stride + h * t.head_stride + d]);
}

}  // namespace

void attention_reference(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v,
                         const AttentionParams& p, std::vector<float>& out, std::vector<float>& lse) {
  const bool varlen = p.cu_seqlens_q != nullptr || p.host_cu_seqlens_q != nullptr;
  const int64_t D = q.head_dim, Hq = q.heads, group = q.heads / k.heads;
  const int64_t nb = varlen ? p.num_seqs : q.batch;
  const double scale = p.softmax_scale > 0 ? p.softmax_scale : 1.0 / std::sqrt(double(D));
  const int64_t rows_total = varlen ? q.seqlen : q.batch * q.seqlen;
  out.assign(size_t(rows_total * Hq * D), 0.0f);
  lse.assign(size_t(rows_total * Hq), 0.0f);
  std::vector<double> s, acc(static_cast<size_t>(D));
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t q0 = varlen ? p.host_cu_seqlens_q[b] : 0, k0 = varlen ? p.host_cu_seqlens_k[b] : 0;
    const int64_t sq = varlen ? p.host_cu_seqlens_q[b + 1] - q0 : q.seqlen;
    const int64_t sk = varlen ? p.host_cu_seqlens_k[b + 1] - k0 : k.seqlen;
    const int64_t tb = varlen ? 0 : b;  // tensor batch index
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < sq; ++i) {
        s.assign(size_t(sk), 0.0);
        double m = -std::numeric_limits<double>::infinity();
        bool any = false;
        for (int64_t j = 0; j < sk; ++j) {
          if (!reference_visible(i, j, sq, sk, p)) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += elem(q, tb, q0 + i, h, d) * elem(k, tb, k0 + j, hk, d);
          double x = dot * scale;
          if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
          s[size_t(j)] = x;
          any = true;
          if (x > m) m = x;  // NaN never wins: it reaches the sum below instead
        }
        const int64_t row = varlen ? q0 + i : b * q.seqlen + i;
        float* o = &out[size_t((row * Hq + h) * D)];
        float& l = lse[size_t(varlen ? h * q.seqlen + row : (b * Hq + h) * q.seqlen + i)];
        if (!any) {
          l = -std::numeric_limits<float>::infinity();
          continue;  // out stays 0
        }
        if (std::isinf(m)) m = 0;  // every visible score NaN: keep exp(NaN − 0) = NaN
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < sk; ++j) {
          if (!reference_visible(i, j, sq, sk, p)) continue;
          const double e = std::exp(s[size_t(j)] - m);
          sum += e;
          for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += e * elem(v, tb, k0 + j, hk, d);
        }
        for (int64_t d = 0; d < D; ++d) o[d] = static_cast<float>(acc[size_t(d)] / sum);
        l = static_cast<float>(m + std::log(sum));
      }
    }
  }
}

void attention_backward_reference(const AttnConstTensor& q, const AttnConstTensor& k, const AttnConstTensor& v,
                                  const AttnConstTensor& dout, const AttentionParams& p, std::vector<float>& dq,
                                  std::vector<float>& dk, std::vector<float>& dv) {
  const bool varlen = p.cu_seqlens_q != nullptr || p.host_cu_seqlens_q != nullptr;
  const int64_t D = q.head_dim, Hq = q.heads, Hkv = k.heads, group = q.heads / k.heads;
  const int64_t nb = varlen ? p.num_seqs : q.batch;
  const double scale = p.softmax_scale > 0 ? p.softmax_scale : 1.0 / std::sqrt(double(D));
  const int64_t q_rows = varlen ? q.seqlen : q.batch * q.seqlen, k_rows = varlen ? k.seqlen : k.batch * k.seqlen;
  dq.assign(size_t(q_rows * Hq * D), 0.0f);
  dk.assign(size_t(k_rows * Hkv * D), 0.0f);
  dv.assign(size_t(k_rows * Hkv * D), 0.0f);
  std::vector<double> dk_acc(dk.size(), 0.0), dv_acc(dv.size(), 0.0);
  std::vector<double> s, pr, dp, dqrow(static_cast<size_t>(D));
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t q0 = varlen ? p.host_cu_seqlens_q[b] : 0, k0 = varlen ? p.host_cu_seqlens_k[b] : 0;
    const int64_t sq = varlen ? p.host_cu_seqlens_q[b + 1] - q0 : q.seqlen;
    const int64_t sk = varlen ? p.host_cu_seqlens_k[b + 1] - k0 : k.seqlen;
    const int64_t tb = varlen ? 0 : b;
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < sq; ++i) {
        s.assign(size_t(sk), 0.0), pr.assign(size_t(sk), 0.0), dp.assign(size_t(sk), 0.0);
        std::vector<double> tanh_v(size_t(sk), 0.0);
        double m = -std::numeric_limits<double>::infinity();
        bool any = false;
        for (int64_t j = 0; j < sk; ++j) {
          if (!reference_visible(i, j, sq, sk, p)) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += elem(q, tb, q0 + i, h, d) * elem(k, tb, k0 + j, hk, d);
          double x = dot * scale;
          if (p.softcap > 0) tanh_v[size_t(j)] = std::tanh(x / p.softcap), x = p.softcap * tanh_v[size_t(j)];
          s[size_t(j)] = x;
          any = true;
          if (x > m) m = x;
        }
        if (!any) continue;  // no visible key: no gradient through this row
        double sum = 0;
        for (int64_t j = 0; j < sk; ++j)
          if (reference_visible(i, j, sq, sk, p)) pr[size_t(j)] = std::exp(s[size_t(j)] - m), sum += pr[size_t(j)];
        double rowdot = 0;  // Σ_j P_ij dP_ij = rowsum(dout ∘ out)
        for (int64_t j = 0; j < sk; ++j) {
          if (!reference_visible(i, j, sq, sk, p)) continue;
          pr[size_t(j)] /= sum;
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += elem(dout, tb, q0 + i, h, d) * elem(v, tb, k0 + j, hk, d);
          dp[size_t(j)] = acc;
          rowdot += pr[size_t(j)] * acc;
        }
        std::fill(dqrow.begin(), dqrow.end(), 0.0);
        const int64_t krow_base = varlen ? k0 : b * k.seqlen;
        for (int64_t j = 0; j < sk; ++j) {
          if (!reference_visible(i, j, sq, sk, p)) continue;
          double ds = pr[size_t(j)] * (dp[size_t(j)] - rowdot) * scale;
          if (p.softcap > 0) ds *= 1.0 - tanh_v[size_t(j)] * tanh_v[size_t(j)];
          double* dkr = &dk_acc[size_t(((krow_base + j) * Hkv + hk) * D)];
          double* dvr = &dv_acc[size_t(((krow_base + j) * Hkv + hk) * D)];
          for (int64_t d = 0; d < D; ++d) {
            dqrow[size_t(d)] += ds * elem(k, tb, k0 + j, hk, d);
            dkr[d] += ds * elem(q, tb, q0 + i, h, d);
            dvr[d] += pr[size_t(j)] * elem(dout, tb, q0 + i, h, d);
          }
        }
        const int64_t row = varlen ? q0 + i : b * q.seqlen + i;
        for (int64_t d = 0; d < D; ++d) dq[size_t((row * Hq + h) * D + d)] = static_cast<float>(dqrow[size_t(d)]);
      }
    }
  }
  for (size_t i = 0; i < dk.size(); ++i) dk[i] = static_cast<float>(dk_acc[i]), dv[i] = static_cast<float>(dv_acc[i]);
}

}  // namespace blockfuse::attn
