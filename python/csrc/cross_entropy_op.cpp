// The PyTorch op of the cross-entropy kernel (include/blockfuse/cross_entropy.h):
//   cross_entropy_fwd_bwd_(logits [M, V] (written: the gradient, when grad_scale is given),
//                          labels [M] int64, ignore_index, grad_scale [] fp32 or None) -> loss [M] fp32
// what blockfuse.loss.linear_cross_entropy runs on each chunk's logits. The fake is in the package.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "binding.h"
#include "blockfuse/cross_entropy.h"

namespace {

using namespace blockfuse_torch;

at::Tensor cross_entropy_fwd_bwd_op(const at::Tensor& logits, const at::Tensor& labels, int64_t ignore_index,
                                    const c10::optional<at::Tensor>& grad_scale) {
  constexpr const char* fn = "cross_entropy_fwd_bwd_";
  check_cuda(logits, fn, "logits");
  const DType dt = to_dtype(logits, fn, "logits");
  const RowView lv = as_matrix(logits, fn, "logits");
  check_cuda(labels, fn, "labels");
  TORCH_CHECK_VALUE(labels.scalar_type() == at::kLong && labels.dim() == 1 && labels.size(0) == lv.rows &&
                        (labels.is_contiguous() || labels.size(0) <= 1),
                    "blockfuse.", fn, ": argument 'labels' has ", shape_str(labels),
                    "; required: a contiguous int64 vector of logits.size(0) = ", num(lv.rows), " labels");
  TORCH_CHECK_VALUE(labels.device() == logits.device(), "blockfuse.", fn, ": argument 'labels' is on ",
                    labels.device().str(), "; required: the device of 'logits' (", logits.device().str(), ")");
  const float* scale = nullptr;
  if (grad_scale.has_value()) {
    const at::Tensor& s = *grad_scale;
    check_cuda(s, fn, "grad_scale");
    TORCH_CHECK_VALUE(s.scalar_type() == at::kFloat && s.numel() == 1 && s.device() == logits.device(),
                      "blockfuse.", fn, ": argument 'grad_scale' has ", shape_str(s),
                      "; required: one float32 on the device of 'logits'");
    scale = s.data_ptr<float>();
  }
  c10::cuda::CUDAGuard guard(logits.device());
  at::Tensor loss = at::empty({lv.rows}, logits.options().dtype(at::kFloat));
  if (lv.rows == 0) return loss;
  call_blockfuse([&] {
    blockfuse::cross_entropy_forward_backward(mview(logits, lv, dt), labels.data_ptr<int64_t>(), ignore_index,
                                              loss.data_ptr<float>(), scale, current_stream(logits));
  });
  return loss;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(blockfuse, m) {
  def_ops(m, {"cross_entropy_fwd_bwd_(Tensor(a!) logits, Tensor labels, int ignore_index=-100, "
              "Tensor? grad_scale=None) -> Tensor"});
}

BLOCKFUSE_TORCH_IMPLS(m) { m.impl("cross_entropy_fwd_bwd_", &cross_entropy_fwd_bwd_op); }
