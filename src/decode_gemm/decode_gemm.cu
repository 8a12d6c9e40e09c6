// decode_gemm: validation, configuration and launch of the split-K decode kernel. Read in this
// order: params.h (parameters and the geometry everything shares), heuristic.cpp (the pure split-K
// cost model), decode_gemm_sm80.cuh (the kernel), launch.h + this file, reference.cpp.
#include "blockfuse/decode_gemm.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/check.h"
#include "common/device.h"
#include "decode_gemm/decode_gemm_sm80.cuh"
#include "decode_gemm/launch.h"
#include "decode_gemm/params.h"

namespace blockfuse {

namespace {

constexpr const char* kFn = "decode_gemm";
using detail::cat;

// Everything that needs no device: shapes, dtypes, alignment, overlaps by address. Runs first so
// every argument error is reported identically on machines without a GPU.
void validate_host(const ConstMatrix& x, const ConstMatrix& w, const Matrix& y) {
  detail::check_matrix_shape(kFn, "x", x);
  detail::check_matrix_shape(kFn, "w", w);
  detail::check_matrix_shape(kFn, "y", y);
  if (x.rows > kDecodeGemmMaxM)
    detail::throw_arg(kFn, "x", cat("has M = ", x.rows, " rows"),
                      cat("M <= ", kDecodeGemmMaxM, " (decode_gemm is for decode batches; for more rows use a GEMM)"));
  detail::check_same_dtype(kFn, "w", w, "x", x.dtype);
  detail::check_same_dtype(kFn, "y", y, "x", x.dtype);
  if (w.cols != x.cols)
    detail::throw_arg(kFn, "w", cat("has cols = ", w.cols), cat("w.cols == x.cols == K (= ", x.cols, ")"));
  if (x.cols % 8 != 0) detail::throw_arg(kFn, "x", cat("has K = ", x.cols, " columns"), "K % 8 == 0 (16-byte loads)");
  if (y.rows != x.rows)
    detail::throw_arg(kFn, "y", cat("has rows = ", y.rows), cat("y.rows == x.rows (= ", x.rows, ")"));
  if (y.cols != w.rows)
    detail::throw_arg(kFn, "y", cat("has cols = ", y.cols), cat("y.cols == w.rows == N (= ", w.rows, ")"));
  detail::check_alignment(kFn, "x", x, 16, 8);
  detail::check_alignment(kFn, "w", w, 16, 8);
  detail::check_alignment(kFn, "y", y, 2, 1);
  detail::check_no_overlap(kFn, "y", y, "x", x);
  detail::check_no_overlap(kFn, "y", y, "w", w);
}

template <class T, int NT>
void launch_nt(const decode::DecodeGemmParams& p, int warps, dim3 grid, cudaStream_t stream) {
  if (warps == 4)
    decode::decode_gemm_kernel<T, NT, 4><<<grid, 4 * 32, 0, stream>>>(p);
  else
    decode::decode_gemm_kernel<T, NT, 8><<<grid, 8 * 32, 0, stream>>>(p);
}

template <class T>
void launch_typed(const decode::DecodeGemmParams& p, int warps, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(decode::n_blocks(p.n, warps)), static_cast<unsigned>(p.split));
  switch (decode::m_tiles(p.m)) {
    case 1: launch_nt<T, 1>(p, warps, grid, stream); break;
    case 2: launch_nt<T, 2>(p, warps, grid, stream); break;
    case 3: launch_nt<T, 3>(p, warps, grid, stream); break;
    default: launch_nt<T, 4>(p, warps, grid, stream); break;
  }
  BF_CHECK_LAUNCH();
}

}  // namespace

namespace decode {

void check_workspace(const char* fn, const ConstMatrix& x, const ConstMatrix& w, const ConstMatrix& y, void* ws,
                     size_t bytes, DecodeGemmConfig c) {
  const size_t need = workspace_bytes(x.rows, w.rows, c);
  if (need == 0) return;
  if (ws == nullptr)
    detail::throw_arg(fn, "workspace", cat("is null with split_k = ", c.split_k),
                      cat("a zero-initialised device buffer of >= ", need, " bytes (", fn, "_workspace_size)"));
  if (bytes < need)
    detail::throw_arg(fn, "workspace_bytes", cat("is ", bytes, " with split_k = ", c.split_k),
                      cat(">= ", need, " (", fn, "_workspace_size)"));
  detail::check_pointer_alignment(fn, "workspace", ws, 16);
  // The workspace as a byte "matrix" for the overlap checks.
  const ConstMatrix wsm{ws, DType::kBF16, 1, int64_t(need / 2), int64_t(need / 2)};
  detail::check_no_overlap(fn, "workspace", wsm, "y", y);
  detail::check_no_overlap(fn, "workspace", wsm, "x", x);
  detail::check_no_overlap(fn, "workspace", wsm, "w", w);
}

void launch(const char* fn, const ConstMatrix& x, const ConstMatrix& w, const Matrix& y, void* ws, DecodeGemmConfig c,
            Epilogue e, cudaStream_t stream) {
  detail::check_compute_capability(fn, 8, 0);
  // gridDim.x holds the N blocks (< 2^31); split-K counts them in a fixed region of kMaxCounters.
  if (n_blocks(w.rows, c.warps_per_block) > 0x7fffffff)
    detail::throw_arg(fn, "w", cat("has N = ", w.rows, " rows"),
                      cat("ceil(N / ", block_n(c.warps_per_block), ") < 2^31 (the grid's x dimension)"));
  if (c.split_k > 1 && n_blocks(w.rows, 4) > kMaxCounters)
    detail::throw_arg(fn, "w", cat("has N = ", w.rows, " rows with split_k = ", c.split_k),
                      cat("N <= ", kMaxCounters * kWarpN * 4, " when K is split (the workspace's counters), or split_k = 1"));
  DecodeGemmParams p{};
  p.x = x.data;
  p.w = w.data;
  p.y = y.data;
  p.m = x.rows;
  p.n = w.rows;
  p.k = x.cols;
  p.ldx = x.ld;
  p.ldw = w.ld;
  p.ldy = y.ld;
  p.gated = e.gated ? 1 : 0;
  p.act = e.act;
  p.split = c.split_k;
  p.slice = slice_k(std::max<int64_t>(p.k, 1), c.split_k);
  if (c.split_k > 1) {
    p.counters = static_cast<int*>(ws);
    p.partials = reinterpret_cast<float*>(static_cast<char*>(ws) + kCounterBytes);
  }
  if (x.dtype == DType::kBF16)
    launch_typed<__nv_bfloat16>(p, c.warps_per_block, stream);
  else
    launch_typed<__half>(p, c.warps_per_block, stream);
}

}  // namespace decode

size_t decode_gemm_workspace_size(int64_t m, int64_t n, int64_t k, int device) {
  if (m < 0 || m > kDecodeGemmMaxM)
    detail::throw_arg("decode_gemm_workspace_size", "m", cat("is ", m),
                      cat("0 <= m <= ", kDecodeGemmMaxM, " (for more rows use a GEMM)"));
  if (n < 0) detail::throw_arg("decode_gemm_workspace_size", "n", cat("is ", n), "n >= 0");
  if (k < 0 || k % 8 != 0)
    detail::throw_arg("decode_gemm_workspace_size", "k", cat("is ", k), "k >= 0 and k % 8 == 0");
  if (m == 0 || n == 0) return 0;
  const int sms = detail::device_spec(device < 0 ? detail::current_device() : device).sm_count;
  size_t most = 0;
  for (int64_t mm = 1; mm <= m; ++mm)
    most = std::max(most, decode::workspace_bytes(mm, n, decode_gemm_heuristic(mm, n, k, sms)));
  return most;
}

void decode_gemm(ConstMatrix x, ConstMatrix w, Matrix y, void* workspace, size_t workspace_bytes,
                 DecodeGemmConfig config, cudaStream_t stream) {
  validate_host(x, w, y);
  decode::check_config(kFn, x.cols, config);
  decode::check_workspace(kFn, x, w, y, workspace, workspace_bytes, config);
  if (x.rows == 0 || w.rows == 0) return;
  detail::check_device_matrix(kFn, "x", x);
  detail::check_device_matrix(kFn, "w", w);
  detail::check_device_matrix(kFn, "y", y);
  decode::launch(kFn, x, w, y, workspace, config, {}, stream);
}

void decode_gemm(ConstMatrix x, ConstMatrix w, Matrix y, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) {
  validate_host(x, w, y);
  if (x.rows == 0 || w.rows == 0) return;
  // The configuration depends on the SM count: the device's pointers are checked first so a
  // host pointer is reported as such rather than as a CUDA error of the attribute query.
  detail::check_device_matrix(kFn, "x", x);
  detail::check_device_matrix(kFn, "w", w);
  detail::check_device_matrix(kFn, "y", y);
  const DecodeGemmConfig c = decode_gemm_heuristic(x.rows, w.rows, x.cols, detail::current_device_spec().sm_count);
  decode::check_workspace(kFn, x, w, y, workspace, workspace_bytes, c);
  decode::launch(kFn, x, w, y, workspace, c, {}, stream);
}

}  // namespace blockfuse
