// blockfuse/weight_layout.h — build the interleaved gate/up weight that gated_up() consumes.
//
// Checkpoints store the gated MLP either as two [U, K] matrices (Hugging Face's gate_proj.weight and
// up_proj.weight) or stacked as one [2U, K] matrix [gate; up] (fused checkpoints, vLLM's gate_up_proj).
// gated_up() wants them interleaved: row 2j = up row j, row 2j+1 = gate row j. These helpers convert
// in both directions, on the host (plain memory) and on the device (asynchronous strided copies).
// They move rows of bytes, so they work for any 2-byte dtype; K is the row length in elements.
#pragma once

#include "blockfuse/common.h"

namespace blockfuse {

// ---- device (pointers in device memory; asynchronous on `stream`) ----
// gate [U, K], up [U, K] -> out [2U, K] interleaved.
void interleave_gate_up(ConstMatrix gate, ConstMatrix up, Matrix out, cudaStream_t stream = nullptr);
// stacked [2U, K] = [gate; up] -> out [2U, K] interleaved.
void interleave_stacked_gate_up(ConstMatrix stacked, Matrix out, cudaStream_t stream = nullptr);
// interleaved [2U, K] -> gate [U, K], up [U, K].
void deinterleave_gate_up(ConstMatrix interleaved, Matrix gate, Matrix up, cudaStream_t stream = nullptr);
// interleaved [2U, K] -> stacked [2U, K] = [gate; up].
void deinterleave_to_stacked(ConstMatrix interleaved, Matrix stacked, cudaStream_t stream = nullptr);

// ---- host (pointers in host memory; synchronous) ----
void interleave_gate_up_host(ConstMatrix gate, ConstMatrix up, Matrix out);
void interleave_stacked_gate_up_host(ConstMatrix stacked, Matrix out);
void deinterleave_gate_up_host(ConstMatrix interleaved, Matrix gate, Matrix up);
void deinterleave_to_stacked_host(ConstMatrix interleaved, Matrix stacked);

}  // namespace blockfuse
