// The PyTorch binding of blockfuse: defines the blockfuse operator library and its one op that
// belongs to no kernel family (the programmatic-dependent-launch switch).
//
// The binding files are the only C++ that sees torch: one `<family>_op.cpp` per kernel family
// (gated_up, gated_up_fp8, attention, fused_mlp, add_rmsnorm, swiglu, decode_gemm), the shared
// checks and views in binding.h, the device workspaces in workspace.h. They turn tensors into
// blockfuse's plain matrix views (pointer, dtype, rows, cols, row stride), check what a view cannot
// express (device, dtype, a contiguous last dimension, leading dimensions that flatten into rows
// with one row stride) with ValueErrors that name the argument, and call the C++ API on the current
// CUDA stream. Outputs come from at::empty (the caching allocator), so every op can be captured in
// a CUDA graph. The C++ API validates again and throws blockfuse::Error; it is re-raised as a
// Python ValueError with the same message.
//
// Python loads this library with torch.ops.load_library (python/blockfuse/_lib.py) — no pybind —
// and registers the fake (meta) implementations. This file defines the library (TORCH_LIBRARY);
// each family's file adds its ops with TORCH_LIBRARY_FRAGMENT.
//
//   set_programmatic_dependent_launch(enabled) -> bool      the previous setting
#include <torch/library.h>

#include "blockfuse/blockfuse.h"

namespace {

// The process-wide programmatic-dependent-launch switch (blockfuse/common.h); returns the previous
// setting. No tensor arguments: registered with its function (a catch-all kernel), not per backend.
bool set_pdl_op(bool enabled) { return blockfuse::set_programmatic_dependent_launch(enabled); }

}  // namespace

TORCH_LIBRARY(blockfuse, m) {
  m.def("set_programmatic_dependent_launch(bool enabled) -> bool", &set_pdl_op);
}
