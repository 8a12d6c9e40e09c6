// blockfuse/decode_gemm.h — y[M, N] = x[M, K] · Wᵀ for the decode case, M = 1..32.
//
// At decode time a linear layer multiplies a few token rows by a large weight W [N, K]: the work is
// reading W once (N·K·2 bytes) and the matrix math is negligible. A GEMM tiled for large M launches
// too few blocks at N of a few thousand to keep every SM streaming weights; decode_gemm splits K
// over blocks (split-K) so that every SM streams, issues 16-byte loads with many in flight, and sums
// the fp32 partials of one N tile in the last block to finish it — no second kernel, no second pass.
// Measured on the H100 (results/decode_gemm.json, docs/decode_gemm.md): 77-97 %
// of copy bandwidth on the Llama-3 decode shapes, 0.94-1.04x cuBLAS — whose decode path, timed the
// same way (W rotated past L2, calls in a CUDA graph), already reaches 78-95 %.
//
// Numerics: products accumulated in fp32 (tensor cores), the split-K partials summed in fp32 in a
// fixed order (deterministic: the same inputs and configuration give the same bits), y rounded once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "blockfuse/common.h"

namespace blockfuse {

// How the work is split. split_k: K is cut into split_k slices of ceil(K / split_k) rounded up to
// a multiple of 32, every slice non-empty; warps_per_block: 4 or 8 warps, each warp owning 16
// consecutive output columns n (rows of W), so a block covers 16·warps_per_block columns.
struct DecodeGemmConfig {
  int split_k = 1;
  int warps_per_block = 4;
};

// The largest M decode_gemm accepts; beyond it W is read once per ~32 rows anyway, use a GEMM.
constexpr int64_t kDecodeGemmMaxM = 32;
// The largest split_k a configuration may use (bounds the workspace).
constexpr int kDecodeGemmMaxSplitK = 64;

// The configuration decode_gemm(x, w, y, ...) picks for [m, k] · [n, k]ᵀ on a device with
// `sm_count` multiprocessors — a pure function (documented in src/decode_gemm/heuristic.cpp).
// Requires 1 <= m <= 32, n >= 1, k >= 0, sm_count >= 1 (throws blockfuse::Error otherwise).
DecodeGemmConfig decode_gemm_heuristic(int64_t m, int64_t n, int64_t k, int sm_count);

// Workspace bytes one call with this configuration needs (0 when split_k == 1). Validates the
// configuration against (m, n, k) like decode_gemm does.
size_t decode_gemm_workspace_size(int64_t m, int64_t n, int64_t k, DecodeGemmConfig config);

// Workspace bytes that suffice for every call decode_gemm(x, w, y, ws, ...) with x.rows <= m on
// `device` (-1: the current device): the maximum over the configurations the heuristic picks for
// M' = 1..m. Allocate it once (16-byte aligned, e.g. cudaMalloc), zero it once with cudaMemset
// before the first call, and reuse it: the kernel returns its split-K counters to zero itself, so
// calls need no memset and may be captured into CUDA graphs and replayed. The counters sit in a
// fixed region at its start, so one workspace also serves calls of other shapes (and gated_up's
// decode path) when it is large enough for each. One workspace serves one stream at a time (two
// calls running concurrently must not share it).
size_t decode_gemm_workspace_size(int64_t m, int64_t n, int64_t k, int device = -1);

// y[M, N] = x[M, K] · w[N, K]ᵀ, configuration from decode_gemm_heuristic for the current device.
// Requirements (checked, before anything is launched): 0 <= M <= 32 (above: use a GEMM), x, w, y
// of one dtype (bf16 or fp16), w.cols == x.cols == K, y is [M, N] with N == w.rows, K % 8 == 0,
// x and w 16-byte aligned with ld % 8 == 0 (16-byte loads), y any ld >= N (2-byte stores), device
// pointers on the current device, y overlapping neither x, w nor the workspace, and — when the
// configuration splits K — N <= 1048576, and a non-null, 16-byte aligned workspace of at least the
// size above, zeroed before its first use. M == 0 or N == 0 launches nothing; K == 0 writes zeros.
void decode_gemm(ConstMatrix x, ConstMatrix w, Matrix y, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream = nullptr);

// The same with an explicit configuration (tests, benchmarks, tuning). The workspace must be at
// least decode_gemm_workspace_size(M, N, K, config) bytes when config.split_k > 1.
void decode_gemm(ConstMatrix x, ConstMatrix w, Matrix y, void* workspace, size_t workspace_bytes,
                 DecodeGemmConfig config, cudaStream_t stream = nullptr);

}  // namespace blockfuse
