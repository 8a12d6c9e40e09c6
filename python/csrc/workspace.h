// Device workspaces the binding owns for ops whose kernels need one (the decode kernel's split-K
// counters and partials, shared by decode_gemm and gated_up at <= 32 rows,
// the fused MLP's accumulator, the router's scores): one buffer per (kind, device, key), zeroed when
// it is allocated, grown (never shrunk, never freed while the process lives: a CUDA graph captured
// earlier keeps using the buffer it was captured with) the first time a call needs more.
//
// Growing needs cudaMalloc and a memset, which a stream capture forbids, so a shape must have run
// once eagerly (or the op's *_reserve helper) on the device before it is captured; a capture that
// would grow a workspace raises a ValueError saying so. The kernels that need zeroed memory return
// it to zero themselves, so no call needs a memset. A workspace serves one stream at a time per
// device (the usual single-stream inference): two streams running the same kind of op concurrently
// on one device would race on it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace blockfuse_torch {

// What reserves the kDecodeGemm workspace outside a capture (for the error message).
constexpr const char* kDecodeReserveHint = "blockfuse.ops.decode_gemm_reserve(w)";

enum class WorkspaceKind : int { kDecodeGemm = 0, kFusedMlp = 1, kRouter = 2 };

// A zeroed buffer of at least `need` bytes (16-byte aligned) for `kind` on `device`; *bytes gets its
// size. The memset of a new buffer is ordered on `stream`. `fn` names the op and `reserve_hint`
// the call that reserves the workspace outside a capture (both for the error message).
// `key` separates buffers of one kind whose layout depends on a shape: the fused MLP's regions move
// with K (src/fused_mlp/params.h), so a call of another K could find an earlier call's deterministic
// partials where its accumulator must be zero; its buffers are keyed by K. The decode kernel's
// layout is the same for every shape (key 0).
void* device_workspace(WorkspaceKind kind, int device, size_t need, cudaStream_t stream, size_t* bytes,
                       const char* fn, const char* reserve_hint, int64_t key = 0);

// The buffer `device_workspace` holds for (kind, device, key) now, never grown (nullptr and *bytes = 0
// when there is none): for a region a call can do without, so that a capture never fails for it —
// gated_up's sm90 stream-K row above 32 rows, which falls back to the row chosen without a workspace
// when the buffer is too small.
void* reserved_workspace(WorkspaceKind kind, int device, size_t* bytes, int64_t key = 0);

// The bytes of the kDecodeGemm workspace one call of the decode kernel with x [m, k] and N = n
// output columns needs under decode_gemm_heuristic's configuration (decode_gemm; gated_up's decode
// path with n = 2U): 0 when it does not split K, and for arguments the launcher will reject (it
// reports them itself, naming them).
size_t decode_workspace_need(int64_t m, int64_t n, int64_t k, int device);

}  // namespace blockfuse_torch
