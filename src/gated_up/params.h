// Internal: the launch parameters of the gated up-projection kernels. Plain pointers and int64
// strides, no framework types (FlashAttention's flash.h style).
#pragma once

#include <cstdint>

namespace blockfuse {

struct GatedUpParams {
  const void* x;    // [m, k]      row stride ldx
  const void* w;    // [2u, k]     interleaved: row 2j = up_j, row 2j+1 = gate_j; row stride ldw
  void* out;        // [m, u]      row stride ldo
  int64_t m, k, u;
  int64_t ldx, ldw, ldo;
  int act;           // blockfuse::Activation
  int raster_group;  // CTA rasterisation: m-tiles per group (see gated_up_sm80.cuh)
};

}  // namespace blockfuse
