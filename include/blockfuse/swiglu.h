// blockfuse/swiglu.h — standalone gated activation: out = act(gate) ⊙ up, from a [M, 2U] input.
//
// This is the second kernel of the *unfused* pipeline (GEMM into [M, 2U], then this) — the baseline
// gated_up() is measured against — and the kernel a user runs when the GEMM is not blockfuse's.
// It is memory-bound: 16-byte loads and stores, one pass.
#pragma once

#include "blockfuse/common.h"
#include "blockfuse/fp8.h"

namespace blockfuse {

// How gate and up sit in the columns of the [M, 2U] input.
enum class GateUpLayout : int {
  kStacked = 0,      // columns [0, U) = gate, [U, 2U) = up: x · [W_gate; W_up]ᵀ (fused checkpoints)
  kInterleaved = 1,  // column 2j = up_j, 2j+1 = gate_j: x · w_interleavedᵀ (gated_up's layout)
};
const char* layout_name(GateUpLayout l);

// out[M, U] = act(gate) ⊙ up, computed in fp32, one rounding.
// Requirements (checked): device pointers on the current device, dtypes equal, gate_up.rows ==
// out.rows, gate_up.cols == 2 * out.cols, U % 8 == 0, ld % 8 == 0, 16-byte aligned pointers, and
// out must not overlap gate_up.
void swiglu(ConstMatrix gate_up, Matrix out, Activation act, GateUpLayout layout,
            cudaStream_t stream = nullptr);

// The same with an FP8 (e4m3) output for an FP8 down-projection: out[M, U] bytes, quantised from the
// fp32 act(gate) ⊙ up (no bf16 rounding in between) as blockfuse/fp8.h defines: with
// scale.mode == kStaticPerTensor, q = sat(v / *scale.scale) (scale read on the device, > 0); with
// kDynamicPerRow, the kernel writes scale.scale[r] = amax_r / 448 (amax over the row's finite v; 1 if
// it is 0) and q = sat(v / scale.scale[r]). Non-finite v gives NaN (0x7f).
// Requirements (checked) as for swiglu(), plus: out.ld % 8 == 0 and an 8-byte aligned out pointer,
// a non-null 4-byte aligned device scale pointer (`rows` floats for kDynamicPerRow), and no overlap
// between out, the scales and gate_up. One pass over gate_up in both modes.
void swiglu_fp8(ConstMatrix gate_up, Fp8Matrix out, Fp8Scale scale, Activation act, GateUpLayout layout,
                cudaStream_t stream = nullptr);

// The backward of swiglu (training): given dh [M, U] (the gradient of `out`) and the forward's input
// gate_up [M, 2U], writes d_gate_up [M, 2U] in the same layout:
//   d_gate = dh · up · act'(gate),   d_up = dh · act(gate)
// in fp32 (act and act' from one sigmoid), one rounding to the dtype. One pass: 16-byte loads of dh
// and both halves, 16-byte stores.
// Requirements (checked): act and layout known; dtypes equal; gate_up.cols == 2 * dh.cols,
// gate_up.rows == dh.rows; U % 8 == 0; every ld % 8 == 0 and 16-byte aligned pointers; d_gate_up of
// gate_up's shape. d_gate_up may alias gate_up exactly (same pointer and ld: the gradient written
// over the saved activation, each element read before it is written by the same thread); any other
// overlap between the three is an error.
void swiglu_backward(ConstMatrix dh, ConstMatrix gate_up, Matrix d_gate_up, Activation act, GateUpLayout layout,
                     cudaStream_t stream = nullptr);

// The same pass, also writing the forward's output out [M, U] = act(gate) · up (fp32, one rounding:
// swiglu()'s value up to the special-function sigmoid's last bit). A training step that keeps only
// gate_up gets from it the input of the down projection's weight gradient without a second pass over
// gate_up (blockfuse.ops.gated_mlp). Requirements: as above, plus out of dh's shape and dtype,
// out.ld % 8 == 0, a 16-byte aligned pointer, and no overlap with dh, gate_up or d_gate_up.
void swiglu_backward(ConstMatrix dh, ConstMatrix gate_up, Matrix d_gate_up, Matrix out, Activation act,
                     GateUpLayout layout, cudaStream_t stream = nullptr);

}  // namespace blockfuse
