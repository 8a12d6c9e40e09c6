// Internal, for the tests and the bench only: an explicit override of swiglu_fp8's row-kernel rule,
// passed per call (no process-wide state). The default is what the public entry point uses.
#pragma once

#include "blockfuse/swiglu.h"
#include "swiglu/config.h"

namespace blockfuse::detail {

struct SwigluTuning {
  SwigluRowRule row_rule = kSwigluDefaultRowRule;  // the dynamic-scale row kernel's shape rule (config.h)
};

// blockfuse::swiglu_fp8 with the given overrides (same checks, same kernels).
void swiglu_fp8(ConstMatrix gate_up, Fp8Matrix out, Fp8Scale scale, Activation act, GateUpLayout layout,
                const SwigluTuning& tuning, cudaStream_t stream);

}  // namespace blockfuse::detail
