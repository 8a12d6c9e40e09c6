// Internal: the CPU reference of decode_gemm, in fp64 on host copies (tests and debugging).
#pragma once

#include <cstdint>

#include "blockfuse/common.h"

namespace blockfuse::decode {

// y[m, n] = Σ_k x[m, k] · w[n, k] in fp64 from host bf16/fp16 matrices (any ld). y is [x.rows,
// w.rows] with row stride ldy. When abs_sum is non-null it receives Σ_k |x[m, k] · w[n, k]| (same
// layout): the scale of the rounding error any fp32 accumulation order may make, for tolerances.
// NaN/Inf propagate as in IEEE arithmetic (Inf · w > 0 = Inf, Inf − Inf = NaN).
void reference(const ConstMatrix& x, const ConstMatrix& w, double* y, int64_t ldy, double* abs_sum = nullptr);

}  // namespace blockfuse::decode
