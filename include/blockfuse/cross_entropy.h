// blockfuse/cross_entropy.h — the cross-entropy loss and its gradient over rows of logits, in one
// kernel that writes the gradient over the logits (the step a chunked linear cross-entropy runs per
// chunk: blockfuse.loss.linear_cross_entropy in PyTorch).
//
// Per row m of logits [M, V]:
//   loss[m] = logsumexp(row) − row[labels[m]]           fp32; 0 where labels[m] == ignore_index,
//                                                       NaN where the label is outside [0, V)
//   row     = (softmax(row) − onehot(labels[m])) · s    when grad_scale is given (s = *grad_scale, a
//                                                       device float: a mean's 1 / count without a
//                                                       host read); 0 on ignored rows, NaN on bad ones
// fp32 math, one rounding of the gradient to the logits' dtype. Two passes over the row: the
// online max and sum of exponentials, then the gradient.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "blockfuse/common.h"

namespace blockfuse {

// logits      [M, V] bf16 or fp16, row stride ld; overwritten with the gradient when grad_scale is
//             non-null, only read otherwise
// labels      M int64 on the device
// loss        M floats on the device, written
// grad_scale  null (the loss only) or one float on the device
// Requirements (checked; a violation throws blockfuse::Error naming the argument, nothing launched):
// V >= 8 and V % 8 == 0, ld % 8 == 0, a 16-byte-aligned logits pointer, 8- and 4-byte-aligned
// labels and loss, everything on the current device (compute capability >= 8.0), loss not
// overlapping logits or labels. M == 0 is a no-op.
void cross_entropy_forward_backward(Matrix logits, const int64_t* labels, int64_t ignore_index, float* loss,
                                    const float* grad_scale, cudaStream_t stream = nullptr);

}  // namespace blockfuse
