// CPU reference of the fused gated up-projection, beside the kernel it checks.
// Same definition as the kernel: fp32 accumulation over k = 0..K-1, the activation and the product
// in fp32 on the fp32 sums, one rounding to the output dtype. Host memory; bf16/fp16 as raw bits.
// Tested against a naive fp64 version in test_reference.cpp.
#pragma once

#include "blockfuse/common.h"

namespace blockfuse {

// out[m, j] = round(act(Σ_k x[m,k]·w[2j+1,k]) · Σ_k x[m,k]·w[2j,k])   (w interleaved: even = up)
void gated_up_reference_host(ConstMatrix x, ConstMatrix w, Matrix out, Activation act);
// The same without the final rounding: out is fp32 [M, U] with row stride ldo.
void gated_up_reference_host_f32(ConstMatrix x, ConstMatrix w, float* out, int64_t ldo, Activation act);

}  // namespace blockfuse
