// Internal: the decode kernel's launcher and configuration, shared by decode_gemm and gated_up's
// decode path (gated_up.cpp), so that both run one kernel with one workspace layout.
#pragma once

#include <cstddef>
#include <cstdint>

#include "blockfuse/decode_gemm.h"

namespace blockfuse::decode {

// What the kernel writes: y = x·wᵀ [M, N], or with `gated` the gated up-projection h [M, N / 2]
// from gated_up's interleaved w [2U, K] (decode_gemm_sm80.cuh).
struct Epilogue {
  bool gated = false;
  int act = 0;  // Activation code (gated)
};

// decode_gemm_heuristic's choice with split_k capped at split_cap (gated_up without a workspace: 1);
// arguments as decode_gemm_heuristic requires, unchecked (heuristic.cpp).
DecodeGemmConfig choose_config(int64_t m, int64_t n, int64_t k, int sm_count, int split_cap);

// Throws, naming `fn`'s arguments, unless the workspace fits configuration `c` for x·wᵀ: non-null,
// large enough, 16-byte aligned and overlapping no matrix, when c splits K.
void check_workspace(const char* fn, const ConstMatrix& x, const ConstMatrix& w, const ConstMatrix& y, void* ws,
                     size_t bytes, DecodeGemmConfig c);

// Launches after the caller has validated every argument (shapes, dtypes, alignment, device
// pointers, workspace); checks the compute capability and the grid limits itself.
void launch(const char* fn, const ConstMatrix& x, const ConstMatrix& w, const Matrix& y, void* ws, DecodeGemmConfig c,
            Epilogue e, cudaStream_t stream);

}  // namespace blockfuse::decode
