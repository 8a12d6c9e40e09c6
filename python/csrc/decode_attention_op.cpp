// The PyTorch binding of blockfuse::decode_attention (include/blockfuse/decode_attention.h): two
// operators,
//
//   blockfuse::decode_attention(q [B, Sq, Hq, D], k_cache, v_cache, cache_seqlens [B] int32,
//                               block_table [B, max_blocks] int32 or None, ...,
//                               cache_leftpad [B] int32 or None)
//       -> (out [B, Sq, Hq, D], lse [B, Hq, Sq] fp32, or [0] when return_lse is false)
//   blockfuse::decode_attention_with_kvcache(q, k_cache (written), v_cache (written), k_new [B, Sq, Hkv, D],
//                                            v_new [B, Sq, Hkv, D], cache_seqlens, block_table or None,
//                                            rotary_cos [P, R/2] or None, rotary_sin or None, ...)
//       -> (out, lse) as above
//
// The cache is contiguous [B, S_max, Hkv, D] (Hugging Face's StaticCache; a DynamicCache's
// [B, Hkv, S, D] tensors .transpose(1, 2), passed with their strides, no copy) or, with a
// block_table, paged [num_blocks, page_size, Hkv, D]. 1 <= Sq <= 16. The caches of the second op are
// mutated (Tensor(a!) / Tensor(b!) in the schema, so torch.compile orders reads and writes around it).
//
// As in attention_op.cpp, the op maps tensors to the launcher's strided views and checks only what a
// view cannot express: bf16/fp16 (TypeError), the rank and a contiguous head dim, the index tensors'
// dtype (int32, TypeError), rank, contiguity, device; everything else (shapes, GQA ratio, strides,
// page size, window/soft-cap, num_splits, the rotary tables' shape) the C++ launcher validates and
// reports as blockfuse::Error naming the argument, re-raised as a ValueError.
//
// cache_seqlens and block_table are read on the device only: no host synchronisation, so both ops
// can be captured in a CUDA graph and replayed with new lengths written into the same tensor. The
// workspace (split-KV partials, the rotated q) is allocated per call with at::empty: the caching
// allocator makes that free after the first call, and in a capture it comes from the graph's pool.
// max_seqlen_k = 0 means the cache's capacity; the op passes the same bound to the workspace size and
// to the launcher so the heuristic's split count is the same in both.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "binding.h"

namespace {

using namespace blockfuse_torch;

// Every tensor argument on CUDA, on q's device (first the CUDA check, naming the argument).
void check_devices(const char* fn, const at::Tensor& q, std::initializer_list<NamedTensor> others) {
  TORCH_CHECK_VALUE(q.is_cuda(), "blockfuse::", fn, ": argument 'q' is on ", dev_str(q),
                    "; required: CUDA tensors (the kernel runs on the GPU)");
  for (const NamedTensor& o : others) {
    if (o.t == nullptr) continue;
    TORCH_CHECK_VALUE(o.t->is_cuda() && o.t->device() == q.device(), "blockfuse::", fn, ": argument '", o.name,
                      "' is on ", dev_str(*o.t), "; required: q's device (", dev_str(q),
                      ")", o.t->is_cuda() ? "" : " (it is read on the device: a host tensor would cost a synchronisation)");
  }
}

// A per-sequence int32 tensor [B] (cache_seqlens, cache_leftpad).
const int32_t* seqlens_ptr(const at::Tensor& s, int64_t batch, const char* fn, const char* name = "cache_seqlens") {
  TORCH_CHECK_TYPE(s.scalar_type() == at::kInt, "blockfuse::", fn, ": argument '", name, "' has dtype ",
                   dtype_str(s), "; required: torch.int32");
  TORCH_CHECK_VALUE(s.dim() == 1 && s.size(0) == batch && (s.stride(0) == 1 || batch <= 1), "blockfuse::", fn,
                    ": argument '", name, "' has ", shape_str(s), "; required: a contiguous 1-D [B] tensor, B = ",
                    num(batch), " (q's batch)");
  return s.data_ptr<int32_t>();
}

// The scalar parameters and the block table.
blockfuse::DecodeAttentionParams decode_params(const char* fn, const std::optional<at::Tensor>& block_table,
                                               std::optional<double> softmax_scale, bool causal, int64_t window_left,
                                               int64_t window_right, double softcap, int64_t num_splits,
                                               int64_t max_seqlen_k) {
  check_scale(softmax_scale, fn);
  blockfuse::DecodeAttentionParams p;
  p.softmax_scale = softmax_scale.has_value() ? static_cast<float>(*softmax_scale) : 0.0f;
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  p.softcap = static_cast<float>(softcap);
  TORCH_CHECK_VALUE(num_splits >= 0 && num_splits <= blockfuse::kDecodeAttentionMaxSplits, "blockfuse::", fn,
                    ": argument 'num_splits' is ", num(num_splits), "; required: 0 (the heuristic) or 1..",
                    num(blockfuse::kDecodeAttentionMaxSplits));
  p.num_splits = static_cast<int>(num_splits);
  TORCH_CHECK_VALUE(max_seqlen_k >= 0, "blockfuse::", fn, ": argument 'max_seqlen_k' is ", num(max_seqlen_k),
                    "; required: >= 0 (0: the cache's capacity)");
  p.max_seqlen_k = max_seqlen_k;
  if (block_table.has_value()) {
    const at::Tensor& t = *block_table;
    TORCH_CHECK_TYPE(t.scalar_type() == at::kInt, "blockfuse::", fn, ": argument 'block_table' has dtype ",
                     dtype_str(t), "; required: torch.int32");
    TORCH_CHECK_VALUE(t.dim() == 2 && (t.stride(1) == 1 || t.size(1) <= 1), "blockfuse::", fn,
                      ": argument 'block_table' has ", shape_str(t),
                      "; required: a 2-D [B, max_blocks] tensor with contiguous rows");
    p.block_table = t.data_ptr<int32_t>();
    p.max_blocks = t.size(1);
    p.block_table_stride = t.size(0) <= 1 ? t.size(1) : t.stride(0);
  }
  return p;
}

// The cache's capacity in keys per sequence: S_max, or max_blocks · page_size.
int64_t capacity(const blockfuse::AttnConstTensor& k_cache, const blockfuse::DecodeAttentionParams& p) {
  return p.block_table != nullptr ? p.max_blocks * k_cache.seqlen : k_cache.seqlen;
}

std::tuple<at::Tensor, at::Tensor> outputs(const at::Tensor& q, bool return_lse) {
  at::Tensor out = at::empty(q.sizes(), q.options());  // contiguous [B, Sq, Hq, D]
  at::Tensor lse = return_lse ? at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat))
                              : at::empty({0}, q.options().dtype(at::kFloat));
  return {out, lse};
}

// The call's workspace from the caching allocator (nullptr when it needs none).
at::Tensor workspace(const at::Tensor& q, const blockfuse::AttnConstTensor& qv, const blockfuse::AttnConstTensor& kv,
                     const blockfuse::DecodeAttentionParams& p, bool with_kvcache, size_t* bytes) {
  call_blockfuse([&] {
    *bytes = blockfuse::decode_attention_workspace_size(qv.batch, qv.seqlen, qv.heads, kv.heads, qv.head_dim,
                                                        p.max_seqlen_k, p.num_splits, with_kvcache);
  });
  return at::empty({static_cast<int64_t>(*bytes)}, q.options().dtype(at::kByte));
}

std::tuple<at::Tensor, at::Tensor> decode_attention_op(const at::Tensor& q, const at::Tensor& k_cache,
                                                       const at::Tensor& v_cache, const at::Tensor& cache_seqlens,
                                                       const std::optional<at::Tensor>& block_table,
                                                       std::optional<double> softmax_scale, bool causal,
                                                       int64_t window_left, int64_t window_right, double softcap,
                                                       int64_t num_splits, int64_t max_seqlen_k, bool return_lse,
                                                       const std::optional<at::Tensor>& cache_leftpad) {
  constexpr const char* fn = "decode_attention";
  check_devices(fn, q, {{&k_cache, "k_cache"}, {&v_cache, "v_cache"}, {&cache_seqlens, "cache_seqlens"},
                        {block_table ? &*block_table : nullptr, "block_table"},
                        {cache_leftpad ? &*cache_leftpad : nullptr, "cache_leftpad"}});
  const auto qv = view_of(q, false, fn, "q");
  const auto kv = view_of(k_cache, false, fn, "k_cache");
  const auto vv = view_of(v_cache, false, fn, "v_cache");
  const int32_t* seqlens = seqlens_ptr(cache_seqlens, qv.batch, fn);
  auto prm = decode_params(fn, block_table, softmax_scale, causal, window_left, window_right, softcap, num_splits,
                           max_seqlen_k);
  if (cache_leftpad.has_value()) prm.cache_leftpad = seqlens_ptr(*cache_leftpad, qv.batch, fn, "cache_leftpad");
  if (prm.max_seqlen_k == 0) prm.max_seqlen_k = capacity(kv, prm);
  c10::cuda::CUDAGuard guard(q.device());
  auto [out, lse] = outputs(q, return_lse);
  const auto ov = out_view(out, false, fn);
  size_t bytes = 0;
  at::Tensor ws = workspace(q, qv, kv, prm, false, &bytes);
  call_blockfuse([&] {
    blockfuse::decode_attention(qv, kv, vv, seqlens, ov, return_lse ? lse.data_ptr<float>() : nullptr, prm,
                                bytes ? ws.data_ptr() : nullptr, bytes, current_stream(q));
  });
  return {out, lse};
}

// The rotary tables: cos and sin [max_positions, R/2] with contiguous rows, fp32 or q's dtype, both
// or neither.
blockfuse::RotaryParams rotary_params(const char* fn, const at::Tensor& q, const std::optional<at::Tensor>& cos,
                                      const std::optional<at::Tensor>& sin, bool interleaved) {
  blockfuse::RotaryParams r;
  TORCH_CHECK_VALUE(cos.has_value() == sin.has_value(), "blockfuse::", fn, ": argument '",
                    cos.has_value() ? "rotary_sin" : "rotary_cos",
                    "' is None; required: rotary_cos and rotary_sin both given (rotary embedding) or both None");
  if (!cos.has_value()) return r;
  for (const auto& [t, name] : {std::pair<const at::Tensor*, const char*>{&*cos, "rotary_cos"}, {&*sin, "rotary_sin"}}) {
    TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat || t->scalar_type() == q.scalar_type(), "blockfuse::", fn,
                     ": argument '", name, "' has dtype ", dtype_str(*t), "; required: torch.float32 or q's dtype (",
                     dtype_str(q), ")");
    TORCH_CHECK_VALUE(t->dim() == 2 && (t->stride(1) == 1 || t->size(1) <= 1), "blockfuse::", fn, ": argument '",
                      name, "' has ", shape_str(*t),
                      "; required: a 2-D [max_positions, rotary_dim / 2] table with contiguous rows");
  }
  check_same_dtype(*sin, *cos, fn, "rotary_sin", "rotary_cos");
  TORCH_CHECK_VALUE(sin->sizes() == cos->sizes() && sin->stride(0) == cos->stride(0), "blockfuse::", fn,
                    ": argument 'rotary_sin' has ", shape_str(*sin), "; required: the sizes and row stride of "
                    "'rotary_cos' (", shape_str(*cos), ")");
  r.cos = cos->data_ptr();
  r.sin = sin->data_ptr();
  r.fp32 = cos->scalar_type() == at::kFloat;
  r.rotary_dim = 2 * cos->size(1);
  r.max_positions = cos->size(0);
  r.ld = cos->size(0) <= 1 ? cos->size(1) : cos->stride(0);
  r.interleaved = interleaved;
  return r;
}

std::tuple<at::Tensor, at::Tensor> decode_attention_with_kvcache_op(
    const at::Tensor& q, at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& k_new, const at::Tensor& v_new,
    const at::Tensor& cache_seqlens, const std::optional<at::Tensor>& block_table,
    const std::optional<at::Tensor>& rotary_cos, const std::optional<at::Tensor>& rotary_sin, bool rotary_interleaved,
    std::optional<double> softmax_scale, bool causal, int64_t window_left, int64_t window_right, double softcap,
    int64_t num_splits, int64_t max_seqlen_k, bool return_lse) {
  constexpr const char* fn = "decode_attention_with_kvcache";
  check_devices(fn, q, {{&k_cache, "k_cache"}, {&v_cache, "v_cache"}, {&k_new, "k_new"}, {&v_new, "v_new"},
                        {&cache_seqlens, "cache_seqlens"}, {block_table ? &*block_table : nullptr, "block_table"},
                        {rotary_cos ? &*rotary_cos : nullptr, "rotary_cos"},
                        {rotary_sin ? &*rotary_sin : nullptr, "rotary_sin"}});
  const auto qv = view_of(q, false, fn, "q");
  const auto kv = out_view(k_cache, false, fn, "k_cache");
  const auto vv = out_view(v_cache, false, fn, "v_cache");
  const auto knv = view_of(k_new, false, fn, "k_new");
  const auto vnv = view_of(v_new, false, fn, "v_new");
  const int32_t* seqlens = seqlens_ptr(cache_seqlens, qv.batch, fn);
  auto prm = decode_params(fn, block_table, softmax_scale, causal, window_left, window_right, softcap, num_splits,
                           max_seqlen_k);
  if (prm.max_seqlen_k == 0) prm.max_seqlen_k = capacity(kv, prm);
  const auto rot = rotary_params(fn, q, rotary_cos, rotary_sin, rotary_interleaved);
  c10::cuda::CUDAGuard guard(q.device());
  auto [out, lse] = outputs(q, return_lse);
  const auto ov = out_view(out, false, fn);
  size_t bytes = 0;
  at::Tensor ws = workspace(q, qv, kv, prm, true, &bytes);
  call_blockfuse([&] {
    blockfuse::decode_attention_with_kvcache(qv, kv, vv, knv, vnv, seqlens, rot, ov,
                                             return_lse ? lse.data_ptr<float>() : nullptr, prm,
                                             bytes ? ws.data_ptr() : nullptr, bytes, current_stream(q));
  });
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(blockfuse, m) {
  def_ops(m, {"decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor cache_seqlens, "
               "Tensor? block_table=None, float? softmax_scale=None, bool causal=False, int window_left=-1, "
               "int window_right=-1, float softcap=0.0, int num_splits=0, int max_seqlen_k=0, "
               "bool return_lse=False, Tensor? cache_leftpad=None) -> (Tensor, Tensor)",
               "decode_attention_with_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor k_new, "
               "Tensor v_new, Tensor cache_seqlens, Tensor? block_table=None, Tensor? rotary_cos=None, "
               "Tensor? rotary_sin=None, bool rotary_interleaved=False, float? softmax_scale=None, "
               "bool causal=False, int window_left=-1, int window_right=-1, float softcap=0.0, int num_splits=0, "
               "int max_seqlen_k=0, bool return_lse=False) -> (Tensor, Tensor)"});
}

// The same functions serve CPU tensors: their first check names the argument that is not on CUDA.
BLOCKFUSE_TORCH_IMPLS(m) {
  m.impl("decode_attention", &decode_attention_op);
  m.impl("decode_attention_with_kvcache", &decode_attention_with_kvcache_op);
}
