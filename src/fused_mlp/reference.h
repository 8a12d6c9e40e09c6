// Internal: the fp64 CPU reference of the fused MLP, on host copies (tests and debugging).
#pragma once

#include <cstdint>

#include "blockfuse/common.h"

namespace blockfuse::fmlp {

// y[m, c] = Σ_n h[m, n] · w_down_t[n, c], h[m, n] = act(x[m]·gate_n) · (x[m]·up_n), in fp64 from host
// bf16/fp16 matrices (any ld); w_gate_up interleaved (row 2n = up_n, 2n+1 = gate_n). neuron_on, when
// non-null, is [M, U] (row stride U): h[m, n] counts only where neuron_on[m·U + n] != 0 (sparse lists).
// y is [M, K] with row stride ldy. abs_sum, when non-null, receives Σ_n |h[m, n] · w_down_t[n, c]|
// (same layout): the scale of the rounding of h and of any fp32 summation order, for tolerances.
// NaN/Inf propagate as in IEEE arithmetic.
void reference(const ConstMatrix& x, const ConstMatrix& w_gate_up, const ConstMatrix& w_down_t, Activation act,
               const unsigned char* neuron_on, double* y, int64_t ldy, double* abs_sum = nullptr);

// Neuron-level mask [M, U] of per-token block lists (rows of `ld` entries, counts[m] used) or, with
// per_token false, of one union list (row 0, counts[0]) applied to every token.
void neuron_mask_from_blocks(const int32_t* indices, const int32_t* counts, int64_t ld, bool per_token, int64_t m,
                             int64_t u, int block_size, unsigned char* mask);

}  // namespace blockfuse::fmlp
