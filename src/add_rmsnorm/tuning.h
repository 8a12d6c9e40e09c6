// Internal, for the tests and the bench only: explicit overrides of add_rmsnorm's launch choices,
// passed per call (no process-wide state). The defaults are what the public entry points use.
#pragma once

#include <cstdint>

#include "add_rmsnorm/config.h"
#include "blockfuse/add_rmsnorm.h"

namespace blockfuse::detail {

struct AddRmsNormTuning {
  // false: every device takes the one-block-per-row (sm_80) kernels, so they are exercised and
  // measured on a Hopper too.
  bool clusters = true;
  // The one-block shape rule (config.h: AddRmsNormRule).
  AddRmsNormRule rule = kAddRmsNormDefaultRule;
  // The most rows x chunks that preload the weight (config.h: add_rmsnorm_preload_weight).
  int64_t preload_chunks = kAddRmsNormPreloadChunks;
};

// The shape add_rmsnorm launches for `rows` rows of nchunks chunks (every output kind alike) on the
// current device: one block with the weight preloaded for decode-sized calls, else the sm_90 cluster
// shape where the path is available and enabled and pays, else the one-block shape (reads the
// device, so not pure; also printed by the bench). dynamic_fp8: the call writes the dynamic-scale
// FP8 output (add_rmsnorm_auto_rule's exception).
AddRmsNormConfig add_rmsnorm_launch_config(int nchunks, int64_t rows, bool dynamic_fp8 = false,
                                           const AddRmsNormTuning& tuning = {});

// blockfuse::add_rmsnorm / add_rmsnorm_fp8 with the given overrides (same checks, same kernels).
void add_rmsnorm(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out, Matrix out,
                 RmsNormOptions opt, const AddRmsNormTuning& tuning, cudaStream_t stream);
void add_rmsnorm_fp8(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out, Fp8Matrix out,
                     Fp8Scale scale, RmsNormOptions opt, const AddRmsNormTuning& tuning, cudaStream_t stream);

}  // namespace blockfuse::detail
