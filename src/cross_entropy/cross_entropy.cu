// cross_entropy_forward_backward (blockfuse/cross_entropy.h): validation, then one launch of the
// kernel (cross_entropy_sm80.cuh) with the block size of config.h. Read: config.h, cross_entropy_sm80.cuh, reference.h.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "blockfuse/cross_entropy.h"
#include "common/check.h"
#include "common/launch.h"
#include "cross_entropy/config.h"
#include "cross_entropy/cross_entropy_sm80.cuh"

namespace blockfuse {

namespace {

using detail::cat;
using detail::throw_arg;

constexpr const char* kFn = "cross_entropy_forward_backward";

}  // namespace

void cross_entropy_forward_backward(Matrix logits, const int64_t* labels, int64_t ignore_index, float* loss,
                                    const float* grad_scale, cudaStream_t stream) {
  detail::check_matrix_shape(kFn, "logits", logits);
  if (logits.dtype != DType::kBF16 && logits.dtype != DType::kFP16)
    throw_arg(kFn, "logits", cat("has dtype ", dtype_name(logits.dtype)), "bf16 or fp16");
  const int64_t M = logits.rows, V = logits.cols;
  if (V < 8 || V % 8 != 0) throw_arg(kFn, "logits", cat("has cols V = ", V), "V >= 8 and V % 8 == 0 (16-byte chunks)");
  if (M > (int64_t{1} << 31) - 1) throw_arg(kFn, "logits", cat("has rows M = ", M), "M < 2^31 (one CTA a row)");
  detail::check_alignment(kFn, "logits", logits, 16, 8);
  detail::check_pointer_alignment(kFn, "labels", labels, 8);
  detail::check_pointer_alignment(kFn, "loss", loss, 4);
  detail::check_pointer_alignment(kFn, "grad_scale", grad_scale, 4);
  if (M == 0) return;
  if (labels == nullptr) throw_arg(kFn, "labels", "is null", "M int64 labels on the device");
  if (loss == nullptr) throw_arg(kFn, "loss", "is null", "M floats on the device");
  detail::check_device_matrix(kFn, "logits", logits);
  detail::check_device_pointer(kFn, "labels", labels);
  detail::check_device_pointer(kFn, "loss", loss);
  if (grad_scale != nullptr) detail::check_device_pointer(kFn, "grad_scale", grad_scale);
  const detail::Span loss_span = detail::span_of_bytes(loss, M * int64_t(sizeof(float)));
  detail::check_no_overlap(kFn, "loss", loss_span, "logits", detail::span_of(logits));
  detail::check_no_overlap(kFn, "loss", loss_span, "labels", detail::span_of_bytes(labels, M * int64_t(sizeof(int64_t))));
  detail::check_compute_capability(kFn, 8, 0);

  const cross_entropy_detail::Params p{logits.data, logits.ld, M, V, labels, ignore_index, loss, grad_scale};
  const dim3 grid(static_cast<unsigned>(M)), block(static_cast<unsigned>(detail::cross_entropy_threads(V)));
  if (logits.dtype == DType::kBF16)
    cross_entropy_detail::cross_entropy_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(p);
  else
    cross_entropy_detail::cross_entropy_kernel<__half><<<grid, block, 0, stream>>>(p);
  BF_CHECK_LAUNCH();
}

}  // namespace blockfuse
