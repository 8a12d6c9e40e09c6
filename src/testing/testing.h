// blockfuse_testing — device-side helpers shared by the GPU tests, the benchmark and the
// correctness-table program. Not part of the public API; links cuBLAS. Nothing here is used by the
// kernels themselves.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "blockfuse/common.h"
#include "testing/compare.h"

namespace blockfuse::testing {

// Fill a 2-byte (bf16/fp16) matrix with uniform values in [lo, hi), from a counter-based hash of
// (seed, row, col): fresh data for every seed, deterministic for a given seed, any ld.
void fill_uniform(Matrix m, float lo, float hi, uint64_t seed, cudaStream_t stream = nullptr);
// Fill with a bit pattern (e.g. 0x7fff = NaN in bf16, 0x7e00 = NaN in fp16) to poison outputs.
void fill_bits(Matrix m, uint16_t bits, cudaStream_t stream = nullptr);
// The NaN pattern for a dtype.
uint16_t nan_bits(DType t);

// GPU reference of gated_up in higher precision: C = x · wᵀ through cuBLAS with fp32 accumulation
// and fp32 output (into an internally allocated [M, 2U] fp32 workspace), then
// ref[m, j] = act(C[m, 2j+1]) · C[m, 2j] in fp32 (same formula as the CPU reference; not rounded).
// ref is a device fp32 [M, U] buffer with row stride ld_ref.
void gated_up_reference_gpu(ConstMatrix x, ConstMatrix w, float* ref, int64_t ld_ref, Activation act,
                            cudaStream_t stream = nullptr);

// Comparison of a 2-byte result with an fp32 reference, computed on the device in fp64 (compare.h).
CompareStats compare(ConstMatrix out, const float* ref, int64_t ld_ref, double atol, double rtol,
                     cudaStream_t stream = nullptr);
inline CompareStats compare(ConstMatrix out, const float* ref, int64_t ld_ref, const Tolerance& tol,
                            cudaStream_t stream = nullptr) {
  return compare(out, ref, ld_ref, tol.atol, tol.rtol, stream);
}

// Is there a usable CUDA device? (false on CPU-only machines; never throws)
bool has_cuda_device();

}  // namespace blockfuse::testing
