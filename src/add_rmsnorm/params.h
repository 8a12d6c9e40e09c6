// Internal: the launch parameters of the add_rmsnorm kernels. Plain pointers and int64 strides,
// no framework types; built from the validated arguments by the launcher (add_rmsnorm.cu).
#pragma once

#include <cstdint>

namespace blockfuse {

// What the kernels write as `out` (a template parameter of every kernel).
enum class AddRmsNormOutput : int {
  kDtype = 0,            // x's dtype (bf16/fp16)
  kFp8StaticScale = 1,   // e4m3 bytes, one per-tensor scale read from *scale
  kFp8DynamicScale = 2,  // e4m3 bytes, one scale per row computed and written to scale[row]
};

struct AddRmsNormParams {
  const void* x;
  int64_t ldx;
  const void* res;  // nullptr: absent (r = x)
  int64_t ldr;
  const void* w;
  void* res_out;  // nullptr: not written
  int64_t ldro;
  void* out;  // dtype elements or e4m3 bytes
  int64_t ldo;
  float* scale;  // fp8 static: read (1 float); dynamic: written (rows floats)
  int64_t rows;
  int h;  // elements per row, % 8 == 0
  float eps;
  bool gemma;
};

// The backward kernels (backward_sm80.cuh): dh and the per-CTA dweight partials, then their
// fixed-order reduction.
struct RmsNormBackwardParams {
  const void* dy;
  int64_t lddy;
  const void* dres;  // d_residual_out; nullptr: absent
  int64_t lddres;
  const void* in;  // the normed input h (x, or add_rmsnorm's residual_out)
  int64_t ldin;
  const void* w;
  void* dh;  // nullptr: not written
  int64_t lddh;
  float* partials;  // [gridDim.x, h] fp32; nullptr: dweight not wanted
  void* dweight;    // [h]
  int64_t rows;
  int h;  // elements per row, % 8 == 0
  float eps;
  bool gemma;
};

namespace detail {
// Whether a backward call of `rows` x `h` with dweight (and d_residual_out when `dres`) adds the
// dweight partials inside its row kernel after a grid-wide barrier (backward.cu: H <= 4096, every CTA
// resident on the current device, cooperative launches supported) rather than in a second kernel.
// Either way the bits are the same.
bool rmsnorm_backward_fused_reduce_applies(int64_t rows, int64_t h, bool dres);
// For tests: forbid (false) or allow (true, the default) the fused reduction in this process.
void set_rmsnorm_backward_fused_reduce(bool allowed);
}  // namespace detail

}  // namespace blockfuse
