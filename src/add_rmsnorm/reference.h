// Internal: the CPU reference of add_rmsnorm (plain C++ on host arrays of bf16/fp16 bits), used by
// the CPU tests (against hand-computed rows) and the GPU tests (against the kernel).
//
// It follows the documented numerics (blockfuse/add_rmsnorm.h) step by step: the sum x + residual
// in fp32 (as the kernel does) rounded to the dtype — bit-exact with the kernel's residual_out — and
// then the norm in fp64 from the rounded values, so the kernel's only differences are its fp32
// arithmetic (sum order, rsqrtf) and the final rounding.
#pragma once

#include <cstdint>
#include <vector>

#include "blockfuse/common.h"

namespace blockfuse::reference {

// One add + RMSNorm over M rows of H elements (host bits, row strides in elements).
//   residual may be nullptr (absent: r = x). Writes r_out[m * H + i] (the rounded residual_out
//   bits, contiguous) and v[m * H + i] = r · (1 / sqrt(mean(r²) + eps)) · w (or · (1 + w)) in fp64,
//   before any output rounding.
void add_rmsnorm(DType t, int64_t M, int64_t H, const uint16_t* x, int64_t ldx, const uint16_t* residual,
                 int64_t ldr, const uint16_t* w, double eps, bool gemma_one_plus_w, uint16_t* r_out, double* v);

// The backward of rmsnorm / add_rmsnorm (blockfuse/add_rmsnorm.h) in fp64 from host bits: h is the
// normed input (x, or residual_out) [M, H], dy its output's gradient, dres the gradient of
// residual_out (nullptr: absent), w the weight. Writes, before any rounding,
//   dh[m * H + i] = rstd · (g − h̃ · mean(g · h̃)) (+ dres), g = dy · w_eff, h̃ = h · rstd,
//                   rstd = 1 / sqrt(mean(h²) + eps)
//   dweight[i]    = Σ_m dy · h̃
// (either may be nullptr).
void rmsnorm_backward(DType t, int64_t M, int64_t H, const uint16_t* dy, int64_t lddy, const uint16_t* dres,
                      int64_t lddres, const uint16_t* h, int64_t ldh, const uint16_t* w, double eps,
                      bool gemma_one_plus_w, double* dh, double* dweight);

// v rounded to the dtype (through fp32, as a host conversion can; at most one ulp from a direct
// fp64 rounding in rare double-rounding ties — inside every test's tolerance).
uint16_t round_to_dtype(DType t, double v);

// FP8 e4m3 (OCP): round to nearest even, saturating to ±448 (as __NV_SATFINITE: ±Inf → ±448),
// NaN → 0x7f. Subnormals: multiples of 2^-9 below 2^-6. Thin wrappers of common/fp8_host.h.
uint8_t e4m3_from_double(double v);
double e4m3_to_double(uint8_t b);  // NaN for 0x7f / 0xff

// The dynamic per-row scale of fp8.h: max |v| over the finite values of v[0..n) / 448, or 1 when
// that max is 0 (all zero or all non-finite). Computed as float(amax) / 448 in fp32, as the kernel.
float e4m3_dynamic_scale(const double* v, int64_t n);

}  // namespace blockfuse::reference
