// Internal: the launch parameters of the gated up-projection kernels. Plain pointers and int64
// strides, no framework types (FlashAttention's flash.h style).
#pragma once

#include <cstddef>
#include <cstdint>

#include "blockfuse/gated_up.h"

namespace blockfuse {

struct GatedUpParams {
  const void* x;    // [m, k]      row stride ldx
  const void* w;    // [2u, k]     interleaved: row 2j = up_j, row 2j+1 = gate_j; row stride ldw
  void* out;        // [m, u]      row stride ldo
  int64_t m, k, u;
  int64_t ldx, ldw, ldo;
  int act;  // blockfuse::Activation
  // Launch choices, one per kernel (the dispatcher, gated_up.cpp, sets the one it launches):
  int sm80_raster_group;  // sm80: CTAs are numbered down groups of this many m-tiles (gated_up_sm80.cuh)
  int sm90_max_swizzle;   // sm90: the persistent scheduler's max_swizzle_size (sm90_choose_swizzle)
  int sm90_raster;        // sm90: the scheduler's order, 0 CUTLASS's heuristic, 1 along M, 2 along N (sm90_raster_for)
  void* sm90_workspace;   // sm90 stream-K rows: the scheduler's workspace (sm90::workspace_bytes), else unused
  size_t sm90_workspace_bytes;
};

// The gated MLP's fused backward through the down projection (gated_mlp_dgated, sm90a):
// dh = dy · w_down in fp32, then dz and h from z in the epilogue (dgated_epilogue_sm90.cuh).
struct DGatedParams {
  const void* dy;      // [m, n]   row stride lddy
  const void* w_down;  // [n, u]   row stride ldw (nn.Linear's [out, in] weight of the down projection)
  const void* z;       // [m, 2u]  the forward's pre-activation, interleaved (2j = up_j, 2j+1 = gate_j)
  void* dz;            // [m, 2u]  its gradient, interleaved; may be z
  void* h;             // [m, u]   act(gate)·up, or nullptr
  int64_t m, n, u;
  int64_t lddy, ldw, ldz, lddz, ldh;
  int act;           // blockfuse::Activation
  int max_swizzle;   // the persistent scheduler's max_swizzle_size
};

// The FP8 kernel's parameters (gated_up_fp8): e4m3 x and w, the dequantisation scales, a bf16 or
// e4m3 output (out_fp8) with its static per-tensor scale.
struct GatedUpFp8Params {
  const void* x;    // [m, k] e4m3, row stride ldx (bytes = elements)
  const void* w;    // [2u, k] e4m3, interleaved as above
  void* out;        // [m, u] bf16 or e4m3, row stride ldo (elements)
  int64_t m, k, u;
  int64_t ldx, ldw, ldo;
  int act;
  const float* x_scale;   // 1 float, or m floats when x_per_row
  const float* w_scale;   // 1 float, or 2u floats (interleaved order) when w_per_channel
  bool x_per_row, w_per_channel;
  bool out_fp8;            // e4m3 output
  const float* out_scale;  // out_fp8: 1 float, the static per-tensor output scale
  int sm90_max_swizzle;
  int sm90_raster;
  void* sm90_workspace;  // unused by the FP8 rows (none is stream-K)
  size_t sm90_workspace_bytes;
};

// What kAuto runs (gated_up.cpp; a pure function, CPU-tested): the decode kernel up to 32 rows —
// W streamed once by every SM, where a GEMM tiled for large M leaves most SMs idle — unless a tile
// config is forced (it indexes a GEMM kernel's table); above, the sm90a kernel on compute capability
// 9.0 exactly when the build has it (sm_90a code is not forward compatible), else the sm80 kernel.
GatedUpKernel choose_gated_up_kernel(int64_t m, int tile_config, bool has_sm90, int cc_major, int cc_minor);

// The problem the tile heuristics see (both architectures).
struct GatedUpProblem {
  int64_t m, k, u;
};

}  // namespace blockfuse
