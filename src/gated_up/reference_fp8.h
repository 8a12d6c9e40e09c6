// CPU reference of the FP8 fused gated up-projection (gated_up_fp8), beside the kernel it checks.
// Definition: C = Σ_k x_q(m,k)·w_q(n,k) over the e4m3 values (exact products, summed in double),
// up_j = C(m,2j)·sx(m)·sw(2j), gate_j = C(m,2j+1)·sx(m)·sw(2j+1), h = act(gate)·up in double,
// returned unrounded as fp32; the tests round it to bf16 or quantise it with host::fp8_quantize
// (common/fp8_host.h), the kernel's output rules. Host memory. Tested against hand-computed values
// in test_reference_fp8.cpp.
#pragma once

#include <cstdint>

#include "blockfuse/common.h"

namespace blockfuse {

struct GatedUpFp8HostProblem {
  const uint8_t* x;  // [m, k] e4m3 bytes, row stride ldx
  const uint8_t* w;  // [2u, k] e4m3 bytes, interleaved (row 2j = up_j, 2j+1 = gate_j), row stride ldw
  int64_t m, k, u, ldx, ldw;
  const float* x_scale;  // 1 float, or m floats when x_per_row
  const float* w_scale;  // 1 float, or 2u floats when w_per_channel
  bool x_per_row, w_per_channel;
  Activation act;
};

// out[m·ldo + j] = h(m, j) (fp32, unrounded). Throws blockfuse::Error naming a bad argument.
// With `sensitivity` (same shape and stride as out), also the first-order change of h per unit
// relative error of the two dot products' accumulation, for the tests' error bound:
//   sens = |act(gate)|·A_up + |act'(gate)|·|up|·A_gate,   A = Σ_k |x_q w_q|·sx·sw,
// i.e. |Δh| <= eps·sens when each accumulated sum is off by at most eps·Σ|terms| (the wgmma FP8
// "fast accumulation" keeps fewer bits than fp32 in its running sums).
void gated_up_fp8_reference_host_f32(const GatedUpFp8HostProblem& p, float* out, int64_t ldo,
                                     float* sensitivity = nullptr);

}  // namespace blockfuse
