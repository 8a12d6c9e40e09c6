// The PyTorch op of blockfuse::rope (include/blockfuse/rope.h):
//   rope(x [B, H, S, D], cos [Bc, S, D], sin [Bc, S, D], backward) -> out like x
// in Hugging Face's layout: x is what apply_rotary_pos_emb receives (a [B, S, H, D] projection viewed
// transposed, any strides with a contiguous head dim), cos and sin the rotary embedding's output (Bc
// 1 or B; the same dtype as x). The output has x's strides. backward = True applies the transpose (the
// gradient). The fake and the autograd are in blockfuse/rope.py.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "binding.h"
#include "blockfuse/rope.h"

namespace {

using namespace blockfuse_torch;

at::Tensor rope_op(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool backward) {
  constexpr const char* fn = "rope";
  check_cuda(x, fn, "x");
  check_cuda(cos, fn, "cos");
  check_cuda(sin, fn, "sin");
  TORCH_CHECK_VALUE(x.dim() == 4, "blockfuse::", fn, ": argument 'x' has sizes ", dims(x.sizes()),
                    "; required: [batch, heads, seqlen, head_dim] (Hugging Face's query or key states)");
  const int64_t B = x.size(0), S = x.size(2), D = x.size(3);
  for (const auto& [t, name] : {std::pair<const at::Tensor*, const char*>{&cos, "cos"}, {&sin, "sin"}}) {
    check_same_device(*t, x, fn, name, "x");
    TORCH_CHECK_VALUE(t->scalar_type() == x.scalar_type(), "blockfuse::", fn, ": argument '", name, "' has dtype ",
                      dtype_str(*t), "; required: x's dtype (", dtype_str(x), ")");
    TORCH_CHECK_VALUE(t->dim() == 3 && (t->size(0) == 1 || t->size(0) == B) && t->size(1) == S && t->size(2) == D,
                      "blockfuse::", fn, ": argument '", name, "' has sizes ", dims(t->sizes()),
                      "; required: [1 or batch, seqlen, head_dim] = [1 or ", num(B), ", ", num(S), ", ", num(D), "]");
    TORCH_CHECK_VALUE(t->stride(2) == 1 || D <= 1, "blockfuse::", fn, ": argument '", name, "' has strides ",
                      dims(t->strides()), "; required: a contiguous head dim");
  }
  TORCH_CHECK_VALUE(used_stride(cos, 0) == used_stride(sin, 0) && used_stride(cos, 1) == used_stride(sin, 1),
                    "blockfuse::", fn, ": arguments 'cos' and 'sin' have strides ", dims(cos.strides()), " and ",
                    dims(sin.strides()), "; required: the same strides");
  const at::Tensor xs = x.transpose(1, 2);  // [B, S, H, D]: the kernel's view
  at::Tensor out = at::empty_like(x);        // x's strides (a dense transposed view stays one)
  const at::Tensor os = out.transpose(1, 2);
  const blockfuse::AttnConstTensor xv = view_of(xs, false, fn, "x");
  const blockfuse::AttnTensor ov = out_view(os, false, fn, "out");
  blockfuse::RopeTables t;
  t.cos = cos.data_ptr();
  t.sin = sin.data_ptr();
  t.batch = cos.size(0);
  t.batch_stride = used_stride(cos, 0);
  t.seq_stride = S > 1 ? cos.stride(1) : D;
  c10::cuda::CUDAGuard guard(x.device());
  if (out.numel() == 0) return out;
  call_blockfuse([&] { blockfuse::rope(xv, ov, t, backward, current_stream(x)); });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(blockfuse, m) {
  def_ops(m, {"rope(Tensor x, Tensor cos, Tensor sin, bool backward=False) -> Tensor"});
}

BLOCKFUSE_TORCH_IMPLS(m) { m.impl("rope", &rope_op); }
