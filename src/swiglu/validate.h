// Internal: the argument checks swiglu() and swiglu_fp8() share (everything about the input and the
// output's shape; each entry point checks its own output's type, alignment and memory).
#pragma once

#include <cstdint>

#include "blockfuse/swiglu.h"

namespace blockfuse::detail {

// Checked first: act and layout known, gate_up a valid bf16/fp16 view.
void check_swiglu_codes_and_input(const char* fn, const ConstMatrix& gate_up, Activation act, GateUpLayout layout);
// After the output's own shape checks: gate_up.rows == out_rows, gate_up.cols == 2 * out_cols,
// out_cols % 8 == 0, gate_up 16-byte aligned with ld % 8 == 0. Errors about the output name 'out'.
void check_swiglu_shapes(const char* fn, const ConstMatrix& gate_up, int64_t out_rows, int64_t out_cols);

}  // namespace blockfuse::detail
