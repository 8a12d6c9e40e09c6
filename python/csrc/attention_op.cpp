// The PyTorch binding of blockfuse::attention (include/blockfuse/attention.h): two operators,
//
//   blockfuse::attention(q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, D], ...)
//       -> (out [B, Sq, Hq, D], lse [B, Hq, Sq] fp32, or [0] when return_lse is false)
//   blockfuse::attention_varlen(q [Tq, Hq, D], k [Tk, Hkv, D], v [Tk, Hkv, D],
//                               cu_seqlens_q [N + 1] int32, cu_seqlens_k [N + 1] int32,
//                               max_seqlen_q, max_seqlen_k, ...)
//       -> (out [Tq, Hq, D], lse [Hq, Tq] fp32, or [0])
//   blockfuse::attention_backward(dout, q, k, v, out, lse, ...) -> (dq, dk, dv)   (and _varlen_backward)
//       the gradients, from the forward's out and lse; python/blockfuse/attention.py registers them as
//       the two forward ops' autograd formulas.
//
// The op only maps tensors to blockfuse's strided views (data pointer, dtype, sizes and the element
// strides the tensors carry, so transposed [B, H, S, D] -> [B, S, H, D] views and slices of a fused
// QKV projection need no copy); every check of shapes, strides, alignment, head dim, GQA ratio,
// window/causal and device lives in the C++ launcher, which throws blockfuse::Error naming the
// argument before anything is launched. That error is re-raised as a Python ValueError with the same
// message (binding.h's call_blockfuse; a CUDA failure the launcher detects is a RuntimeError). The binding itself checks only what a view cannot express: a dtype other than bf16/fp16,
// a non-unit head-dim stride, the rank, and the int32 dtype / 1-D shape of cu_seqlens.
//
// Outputs come from at::empty (the caching allocator) and the kernel runs on the current stream, so
// both ops can be captured in CUDA graphs; the fake (meta) implementations are in
// python/blockfuse/attention.py. Messages here say "blockfuse::<op>", as the launcher's do.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "binding.h"

namespace {

using namespace blockfuse_torch;

blockfuse::AttentionParams scalar_params(std::optional<double> softmax_scale, bool causal, int64_t window_left,
                                         int64_t window_right, double softcap) {
  blockfuse::AttentionParams p;
  p.softmax_scale = softmax_scale.has_value() ? static_cast<float>(*softmax_scale) : 0.0f;  // 0: 1/sqrt(D)
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  p.softcap = static_cast<float>(softcap);
  return p;
}

// The sm90a forward's tile counter (AttentionParams::sm90_tile_counter; the launcher decides where
// to walk it). Eager calls share one pair per device and stream, zeroed once on that stream: the
// kernel leaves the pair at zero and calls on one stream run in order. A call captured into a CUDA
// graph gets a pair of its own, zeroed by a node of the graph (as FlashAttention-3 allocates its
// semaphore per call): a shared pair could be in use by eager calls on another stream while the graph
// replays. `scratch` keeps that pair alive until the call is enqueued (the caching allocator orders
// its reuse after the kernel).
int32_t* tile_counter(const at::Tensor& q, at::Tensor& scratch) {
  const auto stream = c10::cuda::getCurrentCUDAStream(q.device().index());
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream.stream(), &capturing) != cudaSuccess) {
    (void)cudaGetLastError();  // no counter then: one CTA per tile; a real CUDA failure the launcher reports
    return nullptr;
  }
  if (capturing != cudaStreamCaptureStatusNone) {
    scratch = at::zeros({2}, q.options().dtype(at::kInt));
    return scratch.data_ptr<int32_t>();
  }
  static std::mutex mu;
  // Never destroyed, so nothing is freed after the CUDA context is gone at exit.
  static auto* pairs = new std::map<std::pair<int, c10::StreamId>, at::Tensor>();
  std::lock_guard<std::mutex> lock(mu);
  at::Tensor& t = (*pairs)[{static_cast<int>(q.device().index()), stream.id()}];
  if (!t.defined()) t = at::zeros({2}, q.options().dtype(at::kInt));
  return t.data_ptr<int32_t>();
}

std::tuple<at::Tensor, at::Tensor> attention_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  std::optional<double> softmax_scale, bool causal,
                                                  int64_t window_left, int64_t window_right, double softcap,
                                                  bool return_lse) {
  constexpr const char* fn = "attention";
  check_scale(softmax_scale, fn);
  const auto qv = view_of(q, false, fn, "q");
  const auto kv = view_of(k, false, fn, "k");
  const auto vv = view_of(v, false, fn, "v");
  c10::cuda::CUDAGuard guard(q.device());
  at::Tensor out = at::empty(q.sizes(), q.options());  // contiguous [B, Sq, Hq, D]
  at::Tensor lse = return_lse ? at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat))
                              : at::empty({0}, q.options().dtype(at::kFloat));
  const auto ov = out_view(out, false, fn);
  auto prm = scalar_params(softmax_scale, causal, window_left, window_right, softcap);
  at::Tensor counter_scratch;
  prm.sm90_tile_counter = tile_counter(q, counter_scratch);
  call_blockfuse([&] {
    blockfuse::attention(qv, kv, vv, ov, return_lse ? lse.data_ptr<float>() : nullptr, prm, current_stream(q));
  });
  return {out, lse};
}

void check_cu_seqlens(const char* fn, const at::Tensor& cu, const char* arg) {
  TORCH_CHECK_TYPE(cu.scalar_type() == at::kInt, "blockfuse::", fn, ": argument '", arg, "' has dtype ",
                   dtype_str(cu), "; required: torch.int32");
  TORCH_CHECK_VALUE(cu.dim() == 1 && cu.size(0) >= 2 && (cu.stride(0) == 1 || cu.size(0) <= 1),
                    "blockfuse::", fn, ": argument '", arg, "' has sizes ", dims(cu.sizes()), ", strides ",
                    dims(cu.strides()), "; required: a contiguous 1-D [num_seqs + 1] tensor, num_seqs >= 1");
}

// `prm` in varlen mode, the offset tensors checked (the forward's and the backward's op alike).
blockfuse::AttentionParams varlen_params(const char* fn, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                         int64_t max_seqlen_q, int64_t max_seqlen_k, blockfuse::AttentionParams prm) {
  check_cu_seqlens(fn, cu_seqlens_q, "cu_seqlens_q");
  check_cu_seqlens(fn, cu_seqlens_k, "cu_seqlens_k");
  TORCH_CHECK_VALUE(cu_seqlens_k.size(0) == cu_seqlens_q.size(0), "blockfuse::", fn, ": argument 'cu_seqlens_k' has ",
                    num(cu_seqlens_k.size(0)), " entries; required: as many as 'cu_seqlens_q' (",
                    num(cu_seqlens_q.size(0)), ")");
  prm.cu_seqlens_q = cu_seqlens_q.data_ptr();
  prm.cu_seqlens_k = cu_seqlens_k.data_ptr();
  prm.cu_seqlens_type = blockfuse::IndexType::kInt32;
  prm.num_seqs = cu_seqlens_q.size(0) - 1;
  prm.max_seqlen_q = max_seqlen_q;
  prm.max_seqlen_k = max_seqlen_k;
  return prm;
}

std::tuple<at::Tensor, at::Tensor> attention_varlen_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, std::optional<double> softmax_scale,
    bool causal, int64_t window_left, int64_t window_right, double softcap, bool return_lse) {
  constexpr const char* fn = "attention_varlen";
  check_scale(softmax_scale, fn);
  const auto qv = view_of(q, true, fn, "q");
  const auto kv = view_of(k, true, fn, "k");
  const auto vv = view_of(v, true, fn, "v");
  auto prm = varlen_params(fn, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           scalar_params(softmax_scale, causal, window_left, window_right, softcap));
  c10::cuda::CUDAGuard guard(q.device());
  at::Tensor counter_scratch;
  prm.sm90_tile_counter = tile_counter(q, counter_scratch);
  // Contiguous [Tq, Hq, D], zero-filled: rows past cu_seqlens_q[N] (padding) are never written by the
  // kernel and must not carry garbage (NaN bit patterns) into the next layer or its gradients.
  at::Tensor out = at::zeros(q.sizes(), q.options());
  at::Tensor lse = return_lse ? at::empty({q.size(1), q.size(0)}, q.options().dtype(at::kFloat))
                              : at::empty({0}, q.options().dtype(at::kFloat));
  const auto ov = out_view(out, true, fn);
  call_blockfuse([&] {
    blockfuse::attention(qv, kv, vv, ov, return_lse ? lse.data_ptr<float>() : nullptr, prm, current_stream(q));
  });
  return {out, lse};
}

// The backward of both ops: gradients allocated like q, k, v (contiguous), Dsum from the caching
// allocator; dout made contiguous (autograd may hand over any strides).
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_common(
    const char* fn, bool varlen, const at::Tensor& dout_in, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, blockfuse::AttentionParams prm) {
  // (an empty tensor counts as contiguous whatever its strides: out.sum().backward() of a batch
  // without queries hands over stride-0 dims, which view_of would refuse)
  const at::Tensor dout = dout_in.numel() == 0 ? at::empty(dout_in.sizes(), dout_in.options()) : dout_in.contiguous();
  const auto qv = view_of(q, varlen, fn, "q");
  const auto kv = view_of(k, varlen, fn, "k");
  const auto vv = view_of(v, varlen, fn, "v");
  const auto ov = view_of(out, varlen, fn, "out");
  const auto dov = view_of(dout, varlen, fn, "dout");
  TORCH_CHECK_TYPE(lse.scalar_type() == at::kFloat, "blockfuse::", fn, ": argument 'lse' has dtype ", dtype_str(lse),
                   "; required: torch.float32 (the forward's lse)");
  const int64_t lse_numel = varlen ? q.size(0) * q.size(1) : q.size(0) * q.size(1) * q.size(2);
  TORCH_CHECK_VALUE(lse.is_contiguous() && lse.numel() == lse_numel, "blockfuse::", fn, ": argument 'lse' has sizes ",
                    dims(lse.sizes()), "; required: the forward's contiguous lse (",
                    varlen ? "[Hq, total]" : "[B, Hq, Sq]", ", ", num(lse_numel),
                    " values; call the forward with return_lse=True)");
  c10::cuda::CUDAGuard guard(q.device());
  // Zero-filled where the kernels may leave rows unwritten: varlen rows outside every sequence
  // (cu_seqlens[N] < total: padding, which must not carry garbage into the projections' weight
  // gradients), and dk / dv of a call without queries (the launcher then launches nothing).
  const bool zero = varlen || q.numel() == 0;
  auto alloc = [&](const at::Tensor& t) { return zero ? at::zeros(t.sizes(), t.options()) : at::empty(t.sizes(), t.options()); };
  at::Tensor dq = alloc(q), dk = alloc(k), dv = alloc(v);
  const size_t bytes = blockfuse::attention_backward_workspace_size(qv, prm.deterministic);
  at::Tensor ws = at::empty({static_cast<int64_t>(std::max<size_t>(bytes, 16))}, q.options().dtype(at::kByte));
  const auto dqv = out_view(dq, varlen, fn, "dq"), dkv = out_view(dk, varlen, fn, "dk"), dvv = out_view(dv, varlen, fn, "dv");
  call_blockfuse([&] {
    blockfuse::attention_backward(qv, kv, vv, ov, dov, lse.data_ptr<float>(), dqv, dkv, dvv, prm, ws.data_ptr(),
                                  static_cast<size_t>(ws.numel()), current_stream(q));
  });
  return {dq, dk, dv};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cuda(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, std::optional<double> softmax_scale, bool causal, int64_t window_left, int64_t window_right,
    double softcap, bool deterministic) {
  check_scale(softmax_scale, "attention_backward");
  auto prm = scalar_params(softmax_scale, causal, window_left, window_right, softcap);
  prm.deterministic = deterministic;
  return backward_common("attention_backward", false, dout, q, k, v, out, lse, prm);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_varlen_backward_cuda(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
    int64_t max_seqlen_k, std::optional<double> softmax_scale, bool causal, int64_t window_left, int64_t window_right,
    double softcap, bool deterministic) {
  constexpr const char* fn = "attention_varlen_backward";
  check_scale(softmax_scale, fn);
  auto prm = varlen_params(fn, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           scalar_params(softmax_scale, causal, window_left, window_right, softcap));
  prm.deterministic = deterministic;
  return backward_common(fn, true, dout, q, k, v, out, lse, prm);
}

// CPU tensors: the kernel runs only on the GPU; say so, naming the argument, rather than torch's
// "could not run with arguments from the CPU backend".
std::tuple<at::Tensor, at::Tensor> refuse_cpu(const char* fn, const at::Tensor& q) {
  TORCH_CHECK_VALUE(false, "blockfuse::", fn, ": argument 'q' is on ", dev_str(q),
                    "; required: CUDA tensors (the kernel runs on the GPU)");
  return {};  // unreachable
}

std::tuple<at::Tensor, at::Tensor> attention_cpu(const at::Tensor& q, const at::Tensor&, const at::Tensor&,
                                                 std::optional<double>, bool, int64_t, int64_t, double, bool) {
  return refuse_cpu("attention", q);
}

std::tuple<at::Tensor, at::Tensor> attention_varlen_cpu(const at::Tensor& q, const at::Tensor&, const at::Tensor&,
                                                        const at::Tensor&, const at::Tensor&, int64_t, int64_t,
                                                        std::optional<double>, bool, int64_t, int64_t, double, bool) {
  return refuse_cpu("attention_varlen", q);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(blockfuse, m) {
  def_ops(m, {"attention(Tensor q, Tensor k, Tensor v, float? softmax_scale=None, bool causal=False, "
               "int window_left=-1, int window_right=-1, float softcap=0.0, bool return_lse=False) -> (Tensor, Tensor)",
               "attention_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
               "int max_seqlen_q, int max_seqlen_k, float? softmax_scale=None, bool causal=False, int window_left=-1, "
               "int window_right=-1, float softcap=0.0, bool return_lse=False) -> (Tensor, Tensor)",
               "attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
               "float? softmax_scale=None, bool causal=False, int window_left=-1, int window_right=-1, "
               "float softcap=0.0, bool deterministic=True) -> (Tensor, Tensor, Tensor)",
               "attention_varlen_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
               "Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float? softmax_scale=None, "
               "bool causal=False, int window_left=-1, int window_right=-1, float softcap=0.0, bool deterministic=True) "
               "-> (Tensor, Tensor, Tensor)"});
}

TORCH_LIBRARY_IMPL(blockfuse, CUDA, m) {
  m.impl("attention", &attention_cuda);
  m.impl("attention_varlen", &attention_varlen_cuda);
  m.impl("attention_backward", &attention_backward_cuda);
  m.impl("attention_varlen_backward", &attention_varlen_backward_cuda);
}

TORCH_LIBRARY_IMPL(blockfuse, CPU, m) {
  m.impl("attention", &attention_cpu);
  m.impl("attention_varlen", &attention_varlen_cpu);
}
