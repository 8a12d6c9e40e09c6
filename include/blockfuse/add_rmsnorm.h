// blockfuse/add_rmsnorm.h — fused residual add + RMSNorm, the norm at the start of every decoder
// sub-block (input_layernorm / post_attention_layernorm of Llama, Mistral, Qwen, Gemma).
//
//   residual_out = x + residual                                  (rounded to the dtype)
//   out          = residual_out · rsqrt(mean(residual_out²) + eps) · w     (or · (1 + w), Gemma)
//
// One pass over global memory: each row is read once (x, residual), kept in registers between the
// fp32 reduction and the writes, and written once (residual_out, out). The unfused pipeline a
// PyTorch model runs (add; pow/mean; mul; mul) moves the row 3-4 times. On sm_90, for decode-sized
// batches, rows of 8192..131072 elements are split over a thread-block cluster of 4 or 8 CTAs (one
// SM per row is the bottleneck there); the result is deterministic (the partial sums are added in
// a fixed order) and the same on every call.
//
// Numerics (the same as PyTorch's `hidden = x + residual` in bf16/fp16 followed by RMSNorm of
// `hidden`): x_i + residual_i is summed in fp32 and rounded to the dtype; **the norm is computed
// from those rounded values r_i** (not from the unrounded sums), so `out` is exactly the RMSNorm of
// the `residual_out` that is written. mean(r²) is an fp32 sum of squares divided by H;
// v_i = r_i · rsqrt(mean + eps) · w_i in fp32 (w_i → 1 + w_i with gemma_one_plus_w, the addition
// in fp32); out_i = round(v_i) to the dtype (round to nearest even), or to FP8 e4m3 (fp8.h).
// NaN/Inf propagate as in the reference: a NaN anywhere in a row makes that row's `out` NaN; an
// Inf in a row makes the row's mean Inf, so its Inf elements give NaN and the others 0 (r · 0).
#pragma once

#include <cstddef>
#include <cstdint>

#include "blockfuse/common.h"
#include "blockfuse/fp8.h"

namespace blockfuse {

struct RmsNormOptions {
  float eps = 1e-6f;              // added to mean(r²); must be finite and > 0
  bool gemma_one_plus_w = false;  // Gemma's RMSNorm scales by (1 + w) (its weights are stored as w)
};

// All matrices are [M, H] row-major views of device memory on the current device (row stride ld,
// in elements) except weight, [1, H]. Arguments:
//   x            [M, H], bf16 or fp16. M may be 0 (then nothing is launched).
//   residual     [M, H] with x's dtype, or *absent*: an empty view (data == nullptr and rows == 0,
//                e.g. ConstMatrix{}) — the first layer, which has no residual stream yet; then
//                r = x (no addition).
//   weight       [1, H], x's dtype (the norm's gain; read through the read-only cache, shared by
//                every row).
//   residual_out [M, H] with x's dtype, or *absent*: an empty view (data == nullptr and rows == 0,
//                e.g. Matrix{}) to skip writing it (only the normalised output is wanted). It may
//                alias `residual` exactly (same data pointer and ld: the in-place update of the
//                residual stream); any other overlap with an input or with `out` is an error.
//   out          [M, H] with x's dtype (add_rmsnorm) or FP8 e4m3 (add_rmsnorm_fp8); must not
//                overlap any other argument.
// Requirements (all checked before anything is launched; a violation throws blockfuse::Error
// naming the argument): dtypes equal; shapes as above; H % 8 == 0 (16-byte vectors); every ld a
// multiple of 8 elements; data pointers 16-byte aligned; opt.eps finite and > 0; no overlaps
// other than the exact residual_out == residual alias; compute capability >= 8.0.
void add_rmsnorm(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out, Matrix out,
                 RmsNormOptions opt = {}, cudaStream_t stream = nullptr);

// The same with the normalised output in FP8 e4m3 (see fp8.h for the format and both scale modes;
// the quantised value is v_i above, before any rounding to bf16/fp16):
//   kStaticPerTensor: scale.scale points to one device float (> 0, read by the kernel, so the call
//                     can be captured in a CUDA graph while the value changes; its value is the
//                     caller's responsibility — it lives in device memory and is not checked);
//                     q = sat(v · (1/scale)).
//   kDynamicPerRow:   scale.scale points to M device floats, written: scale_r = amax_r / 448 over
//                     the row's finite v (1 when amax_r == 0); q = sat(v · (1/scale_r)).
// Additional requirements: out.rows == M, out.cols == H, out.ld >= H and a multiple of 8 bytes, out
// 16-byte aligned; scale.scale non-null, 4-byte aligned device memory that overlaps no output
// (and, dynamic, no input); a known scale mode.
void add_rmsnorm_fp8(ConstMatrix x, ConstMatrix residual, ConstMatrix weight, Matrix residual_out, Fp8Matrix out,
                     Fp8Scale scale, RmsNormOptions opt = {}, cudaStream_t stream = nullptr);


// ---- Backward (training) -------------------------------------------------------------------------
//
// The gradients of out = h̃ · w_eff with h̃ = h · rstd, rstd = rsqrt(mean(h²) + eps), w_eff = w (or
// 1 + w with gemma_one_plus_w), where h is the normed input: x for rmsnorm, the rounded
// residual_out = x + residual for add_rmsnorm (the rounding is treated as the identity, as autograd
// of `hidden = x + residual` in bf16/fp16 does). Given dy = d out:
//   g        = dy · w_eff
//   dh       = rstd · (g − h̃ · mean(g · h̃))   (+ d_residual_out, the gradient of the returned
//              residual stream, for add_rmsnorm)
//   dx       = dh (and d_residual = dh: both inputs of the sum get the same gradient)
//   dweight  = Σ_rows dy · h̃                   (the same with gemma_one_plus_w: d(1 + w)/dw = 1)
// All in fp32 from the dtype inputs (rstd recomputed from h, never saved), one rounding per output.
//
// One kernel per call computes dh and, per CTA, fp32 partial sums of dweight over the rows that CTA
// handled ([rmsnorm_backward_ctas(M), H] in the caller's workspace); the partials are then added in
// a fixed order and rounded once: by the same kernel after a grid-wide barrier where H <= 4096 and
// all its CTAs fit on the device at once (a cooperative launch: one launch per call), else by a
// second kernel. The number of CTAs and every summation order depend only on (M, H), so the result
// is bitwise the same on every call and either way (for a given build and device: the compiler's
// and the device's math may differ elsewhere). Both forms can be captured into a CUDA graph.
//
// Arguments ([M, H] row-major views, row stride ld in elements, of device memory on the current
// device; dtype bf16 or fp16, all equal):
//   dy              [M, H]  the gradient of `out`. M may be 0 (then dweight, if given, is zeroed).
//   d_residual_out  [M, H]  (add_rmsnorm_backward) the gradient of residual_out, or absent: an empty
//                           view (ConstMatrix{}) when residual_out was not used.
//   h / x           [M, H]  the forward's normed input (add_rmsnorm: its residual_out).
//   weight          [1, H]
//   dh / dx         [M, H]  written; or absent (Matrix{}) when no input needs a gradient. May alias
//                           dy or d_residual_out exactly (same pointer and ld: in place); any other
//                           overlap with an argument is an error.
//   dweight         [1, H]  written; or absent (Matrix{}) for a frozen weight. At least one of
//                           dh / dx and dweight must be given.
//   workspace       device memory of at least rmsnorm_backward_workspace_bytes(M, H) bytes, 16-byte
//                   aligned, overlapping no other argument; only read when dweight is given (may be
//                   nullptr with workspace_bytes 0 otherwise). Its contents need no initialisation.
// Requirements (checked before anything is launched, blockfuse::Error naming the argument): as for
// add_rmsnorm (H % 8 == 0, ld % 8 == 0, 16-byte aligned pointers, eps finite and > 0, cc >= 8.0).
int64_t rmsnorm_backward_ctas(int64_t rows);
size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t h);

void rmsnorm_backward(ConstMatrix dy, ConstMatrix x, ConstMatrix weight, Matrix dx, Matrix dweight, void* workspace,
                      size_t workspace_bytes, RmsNormOptions opt = {}, cudaStream_t stream = nullptr);

void add_rmsnorm_backward(ConstMatrix dy, ConstMatrix d_residual_out, ConstMatrix h, ConstMatrix weight, Matrix dh,
                          Matrix dweight, void* workspace, size_t workspace_bytes, RmsNormOptions opt = {},
                          cudaStream_t stream = nullptr);

}  // namespace blockfuse
