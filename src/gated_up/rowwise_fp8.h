// Internal: the second launch of gated_up_fp8's dynamic per-row e4m3 output (gated_up_fp8.cpp).
// A row's amax spans every N tile of the row, which no single CTA of the GEMM sees, so the GEMM
// stores h in bf16 into the caller's workspace and this row kernel (rowwise_fp8.cu) reads it back
// once: per row, the largest finite |h|, scale = amax / 448 (1 for a row without a finite non-zero
// value), and q = sat(h · (1/scale)) with blockfuse/fp8.h's rule. The launch shape is a pure
// function (rowwise_fp8_config), CPU-tested in test_rowwise_fp8.cpp.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

namespace blockfuse::detail {

// Chunks of 8 bf16 values (16 bytes) each thread keeps in registers between the amax and the
// stores: 4 raw uint4 = 16 registers, so a 1024-thread block (the 64-register cap) holds rows of up
// to 4096 chunks (U <= 32768) on chip; wider rows are read twice (the second read mostly from L2).
constexpr int kRowwiseFp8Chunks = 4;
constexpr int kRowwiseFp8MaxThreads = 1024;

struct RowwiseFp8Config {
  int threads;      // per block: whole warps, 32..1024
  bool on_chip;     // the row fits threads x kRowwiseFp8Chunks chunks: one read
  int64_t blocks;   // grid: one block per row up to `blocks`, a grid-stride loop beyond
};

// `chunks` = U / 8 per row (U % 16 == 0 for an e4m3 output, so chunks is even and >= 2), `rows` >=
// 1, `sms` the device's multiprocessors. Threads: enough for the row in kRowwiseFp8Chunks chunks
// each (U = 14336: 448 threads, so several blocks share an SM), at most 1024. Blocks: one per row,
// at most as many as fit on the device at once (2048 threads per SM), the rest by grid stride.
inline RowwiseFp8Config rowwise_fp8_config(int64_t chunks, int64_t rows, int sms) {
  const int64_t want = (chunks + kRowwiseFp8Chunks - 1) / kRowwiseFp8Chunks;
  const int threads = static_cast<int>(std::clamp<int64_t>((want + 31) / 32 * 32, 32, kRowwiseFp8MaxThreads));
  const int64_t resident = int64_t(std::max(sms, 1)) * std::max(1, 2048 / threads);
  return {threads, chunks <= int64_t(threads) * kRowwiseFp8Chunks, std::max<int64_t>(1, std::min(rows, resident))};
}

// h [rows, 8·chunks] bf16 (row stride ldh elements, 16-byte aligned rows) -> out [rows, 8·chunks]
// e4m3 (row stride ldo bytes, 16-byte aligned rows), scale[rows] written. rows >= 1. Asynchronous
// on `stream`; the caller has validated every argument.
void launch_rowwise_fp8(const void* h, int64_t ldh, void* out, int64_t ldo, int64_t rows, int64_t chunks, float* scale,
                        cudaStream_t stream);

}  // namespace blockfuse::detail
