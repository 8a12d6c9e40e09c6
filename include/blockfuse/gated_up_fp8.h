// blockfuse/gated_up_fp8.h — the fused gated up-projection with FP8 (e4m3) operands:
//   h = act(x·W_gateᵀ) ⊙ (x·W_upᵀ), x and w in e4m3 with dequantisation scales.
//
// Same weight layout as gated_up() (gated_up.h, weight_layout.h): w is the interleaved [2U, K]
// matrix, row 2j = up_j, row 2j+1 = gate_j. The layout helpers move rows of bytes, so they build
// the e4m3 matrix too when given it as a [2U, K/2] 2-byte view. Per-channel weight scales follow
// the same order: w_scale[2j] = up_j's scale, w_scale[2j+1] = gate_j's.
//
// Numerics. Each product sum is accumulated in fp32 on the tensor cores (wgmma e4m3, "fast
// accumulation"), then dequantised: up_j = C(m, 2j)·sx(m)·sw(2j), gate_j = C(m, 2j+1)·sx(m)·sw(2j+1),
// where C = x_q·w_qᵀ of the stored e4m3 values, sx is the x scale (per tensor, or per row m) and
// sw the w scale (per tensor, or per output channel n of the interleaved [2U] order). Then h =
// act(gate)·up in fp32, and one conversion to the output: a rounding to bf16, or an e4m3
// quantisation with a static per-tensor output scale as blockfuse/fp8.h defines it
// (q = sat(h·(1/s)), non-finite h -> NaN; the reciprocal 1/s is computed on the device within an
// ulp of the correctly rounded one), or with a dynamic per-row scale (the overload with a
// workspace: h rounded to bf16 first, see there).
#pragma once

#include "blockfuse/common.h"
#include "blockfuse/fp8.h"
#include "blockfuse/gated_up.h"  // Activation, Sm90Raster

namespace blockfuse {

// How an FP8 input is scaled: dequantised value = float(q) · scale.
enum class Fp8InputScaleMode : int {
  kPerTensor = 0,   // one float
  kPerRow = 1,      // x: one float per row m ([M]); w: one per output channel n ([2U], interleaved)
};
const char* fp8_input_scale_mode_name(Fp8InputScaleMode m);

struct Fp8InputScale {
  Fp8InputScaleMode mode = Fp8InputScaleMode::kPerTensor;
  const float* scale = nullptr;  // device memory, read on the device (graph-safe): 1 or rows floats
};

// A read-only row-major matrix of 1-byte e4m3 elements in device memory.
struct Fp8ConstMatrix {
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // row stride in elements (= bytes); >= cols
};
inline Fp8ConstMatrix make_fp8_const_matrix(const void* data, int64_t rows, int64_t cols, int64_t ld = -1) {
  return Fp8ConstMatrix{data, rows, cols, ld < 0 ? cols : ld};
}

struct GatedUpFp8Options {
  int tile_config = -1;  // index into the FP8 sm90 tile table (src/gated_up/tile_configs_fp8_sm90.h);
                         // -1 = heuristic
  Sm90Raster sm90_raster = Sm90Raster::kAuto;  // the tile order (gated_up.h); kAuto: the row's
};
// Whether this build contains the FP8 sm90a kernel (the same build switch as the 16-bit sm90 one).
bool gated_up_fp8_has_sm90();
int gated_up_fp8_num_tile_configs();

// h = act(x·w_gateᵀ) ⊙ (x·w_upᵀ) in bf16.
//   x        [M, K]  e4m3, row stride x.ld
//   x_scale  per tensor (1 float) or per row (M floats)
//   w        [2U, K] e4m3, interleaved, row stride w.ld
//   w_scale  per tensor (1 float) or per output channel (2U floats, interleaved order)
//   out      [M, U]  bf16, row stride out.ld
// Requirements (checked before anything is launched; a violation throws blockfuse::Error naming the
// argument): compute capability 9.0 and a build with the sm90a kernel (there is no FP8 kernel for
// other devices: blockfuse::Error "not supported", nothing launched); every buffer on the current
// device; K % 16 == 0 and K >= 16, x.ld % 16 == 0, w.ld % 16 == 0 and 16-byte aligned x and w
// (TMA moves 16-byte rows); U % 8 == 0 and U >= 8, out.ld % 8 == 0, 16-byte aligned out; non-null,
// 4-byte aligned scale pointers (per-channel w scales 8-byte aligned: read as (up, gate) pairs);
// out must not overlap x, w or the scales. M may be any value >= 0 (M == 0 launches nothing).
// Asynchronous on `stream`.
void gated_up_fp8(Fp8ConstMatrix x, Fp8InputScale x_scale, Fp8ConstMatrix w, Fp8InputScale w_scale, Matrix out,
                  Activation act, cudaStream_t stream = nullptr, const GatedUpFp8Options& options = {});

// The same with an e4m3 output [M, U] for an FP8 down projection: out_scale.mode must be
// Fp8ScaleMode::kStaticPerTensor (1 float > 0 in device memory, read on the device); U % 16 == 0,
// out.ld % 16 == 0 and a 16-byte aligned out pointer (the TMA store moves 16-byte row segments).
// Fp8ScaleMode::kDynamicPerRow needs the overload with a workspace below: here it throws
// blockfuse::Error naming 'out_scale' (nothing launched).
void gated_up_fp8(Fp8ConstMatrix x, Fp8InputScale x_scale, Fp8ConstMatrix w, Fp8InputScale w_scale, Fp8Matrix out,
                  Fp8Scale out_scale, Activation act, cudaStream_t stream = nullptr,
                  const GatedUpFp8Options& options = {});

// Bytes of device workspace the e4m3 overload below needs for M rows of U outputs: 0 for
// kStaticPerTensor; for kDynamicPerRow the bf16 h of the whole call (M·U·2 bytes, rounded up to 256).
// Throws blockfuse::Error naming 'm', 'u' or 'out_scale_mode' for a negative size or an unknown mode.
size_t gated_up_fp8_workspace_size(int64_t m, int64_t u, Fp8ScaleMode out_scale_mode);

// e4m3 output [M, U] with either scale mode (blockfuse/fp8.h). kDynamicPerRow: out_scale.scale points
// to M floats, written: a row's scale is its amax over every N tile of the row, which no CTA of the
// GEMM sees, so this runs two launches on `stream` (no host sync; graph-capturable): the GEMM
// stores h rounded to bf16 into the workspace ([M, U], row stride U), then a row kernel takes each
// row's largest finite |h|, writes out_scale[m] = amax / 448 (1 when the row has no finite non-zero
// value) and quantises the row as fp8.h defines. The v it quantises is h rounded to bf16 — what the
// bf16 overload returns — not the fp32 h of the static path: the scale is within 2^-9 (relative) of
// the fp32 row's, and a value can land one e4m3 step away where the bf16 rounding crosses a rounding
// midpoint of the e4m3 grid. Traffic: h written and read once in bf16 (4 bytes per output) plus the
// e4m3 output, against 9 for cuBLASLt's [M, 2U] bf16 GEMM output followed by swiglu_fp8.
// workspace: at least gated_up_fp8_workspace_size(M, U, kDynamicPerRow) bytes of device memory,
// 16-byte aligned, overlapping no other argument; once the call has run it holds h in bf16 (one stream
// at a time). kStaticPerTensor: as the overload above (the workspace is not used and may be null).
// Every argument is checked before anything is launched (blockfuse::Error naming it).
void gated_up_fp8(Fp8ConstMatrix x, Fp8InputScale x_scale, Fp8ConstMatrix w, Fp8InputScale w_scale, Fp8Matrix out,
                  Fp8Scale out_scale, Activation act, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream = nullptr, const GatedUpFp8Options& options = {});

}  // namespace blockfuse
