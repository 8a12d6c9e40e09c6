// Internal: every argument check of add_rmsnorm() and add_rmsnorm_fp8(), through the shared
// validators of common/check.h (the FP8 output and scale checks are the ones swiglu_fp8 uses).
// Checks that need no CUDA call come first, so every argument error is reported the same way on a
// machine without a GPU; the device-memory checks follow. Each returns false when there is nothing
// to launch (x.rows == 0: no pointer is inspected).
#pragma once

#include <cstddef>

#include "blockfuse/add_rmsnorm.h"

namespace blockfuse::detail {

bool check_add_rmsnorm_args(const char* fn, const ConstMatrix& x, const ConstMatrix& residual, const ConstMatrix& weight,
                            const Matrix& residual_out, const Matrix& out, const RmsNormOptions& opt);
bool check_add_rmsnorm_fp8_args(const char* fn, const ConstMatrix& x, const ConstMatrix& residual,
                                const ConstMatrix& weight, const Matrix& residual_out, const Fp8Matrix& out,
                                const Fp8Scale& scale, const RmsNormOptions& opt);

// rmsnorm_backward / add_rmsnorm_backward (their argument names given: "x"/"dx" or "h"/"dh"; dres
// absent for rmsnorm_backward). Returns false when M == 0 (then only dweight, when given, has been
// checked as device memory: the caller zeroes it).
bool check_rmsnorm_backward_args(const char* fn, const char* h_name, const char* dh_name, const ConstMatrix& dy,
                                 const ConstMatrix& dres, const ConstMatrix& h, const ConstMatrix& weight,
                                 const Matrix& dh, const Matrix& dweight, const void* workspace,
                                 size_t workspace_bytes, const RmsNormOptions& opt);

}  // namespace blockfuse::detail
