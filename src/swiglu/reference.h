// CPU reference of swiglu / swiglu_fp8, beside the kernels it checks. Same definition as the
// kernels: act(gate) · up in fp32 with the formulas of common/activation.cuh, then one rounding to
// the output type (bf16/fp16, or the FP8 quantisation of blockfuse/fp8.h). Host memory; bf16/fp16
// as raw bits. Any U (no vector-width rule), so tests can check the shapes the kernels reject.
#pragma once

#include <cstdint>

#include "blockfuse/fp8.h"
#include "blockfuse/swiglu.h"

namespace blockfuse {

// v[r, j] = act(gate[r, j]) · up[r, j] in fp32 (out: fp32 [rows, U] with row stride ldo).
void swiglu_reference_host_f32(ConstMatrix gate_up, float* out, int64_t ldo, Activation act, GateUpLayout layout);

// The same, rounded to out.dtype.
void swiglu_reference_host(ConstMatrix gate_up, Matrix out, Activation act, GateUpLayout layout);

// The FP8 output: out bytes [rows, U] with row stride ldo. mode kStaticPerTensor: scales[0] is read;
// kDynamicPerRow: scales[r] is written (amax of the row's finite values / 448, or 1).
void swiglu_fp8_reference_host(ConstMatrix gate_up, uint8_t* out, int64_t ldo, Fp8ScaleMode mode, float* scales,
                               Activation act, GateUpLayout layout);

// The backward in fp64 (act_f64 / act_grad_f64 of common/activation.cuh) from host bits: dh [rows, U]
// (row stride lddh) and gate_up in `layout`; writes d_gate_up [rows, 2U] as fp64 in the same layout
// (row stride ldo), before any rounding: d_gate = dh · up · act'(gate), d_up = dh · act(gate).
void swiglu_backward_reference_host(ConstMatrix dh, ConstMatrix gate_up, double* d_gate_up, int64_t ldo, Activation act,
                                    GateUpLayout layout);

}  // namespace blockfuse
