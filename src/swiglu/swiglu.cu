// The standalone gated activation: out[M, U] = act(gate) ⊙ up from a [M, 2U] input, stacked or
// interleaved. Memory-bound: each thread moves 16-byte vectors (8 outputs), grid-stride over rows
// and 8-column chunks, one pass, fp32 math, one rounding.
#include "blockfuse/swiglu.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/check.h"
#include "gated_up/activation.cuh"
#include "swiglu/gate_up_load.cuh"
#include "swiglu/validate.h"

namespace blockfuse {

const char* layout_name(GateUpLayout l) {
  switch (l) {
    case GateUpLayout::kStacked: return "stacked";
    case GateUpLayout::kInterleaved: return "interleaved";
  }
  return "unknown";
}

namespace {

template <class T, bool kInterleaved>
__global__ void swiglu_kernel(const T* __restrict__ in, int64_t ldi, T* __restrict__ out, int64_t ldo,
                              int64_t rows, int64_t u, int act) {
  const int64_t chunks_per_row = u / 8;
  const int64_t total = rows * chunks_per_row;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = idx / chunks_per_row;
    const int64_t c = (idx - r * chunks_per_row) * 8;  // first output column of this chunk
    float g[8], up[8];
    load_gate_up_chunk<T, kInterleaved>(in + r * ldi, u, c, g, up);
    uint4 o;
    T* eo = reinterpret_cast<T*>(&o);
#pragma unroll
    for (int i = 0; i < 8; ++i) eo[i] = static_cast<T>(gated_act(act, g[i], up[i]));
    *reinterpret_cast<uint4*>(out + r * ldo + c) = o;
  }
}

template <class T>
void launch(const ConstMatrix& in, const Matrix& out, Activation act, GateUpLayout layout, cudaStream_t stream) {
  const int64_t total = out.rows * (out.cols / 8);
  const int threads = 256;
  int dev = 0, sms = 0;
  BF_CUDA_CHECK(cudaGetDevice(&dev));
  BF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, int64_t(sms) * 16);
  auto* ip = static_cast<const T*>(in.data);
  auto* op = static_cast<T*>(out.data);
  if (layout == GateUpLayout::kInterleaved)
    swiglu_kernel<T, true><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(ip, in.ld, op, out.ld, out.rows, out.cols, int(act));
  else
    swiglu_kernel<T, false><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(ip, in.ld, op, out.ld, out.rows, out.cols, int(act));
  BF_CHECK_LAUNCH();
}

}  // namespace

namespace detail {

void check_swiglu_codes_and_input(const char* fn, const ConstMatrix& gate_up, Activation act, GateUpLayout layout) {
  if (act != Activation::kSiLU && act != Activation::kGeluTanh)
    throw_arg(fn, "activation", cat("has code ", int(act)), "Activation::kSiLU or Activation::kGeluTanh");
  if (layout != GateUpLayout::kStacked && layout != GateUpLayout::kInterleaved)
    throw_arg(fn, "layout", cat("has code ", int(layout)), "GateUpLayout::kStacked or kInterleaved");
  check_matrix_shape(fn, "gate_up", gate_up);
}

void check_swiglu_shapes(const char* fn, const ConstMatrix& gate_up, int64_t out_rows, int64_t out_cols) {
  if (gate_up.rows != out_rows)
    throw_arg(fn, "out", cat("has rows = ", out_rows), cat("out.rows == gate_up.rows (= ", gate_up.rows, ")"));
  if (gate_up.cols != 2 * out_cols)
    throw_arg(fn, "gate_up", cat("has cols = ", gate_up.cols), cat("gate_up.cols == 2 * out.cols (= ", 2 * out_cols, ")"));
  if (out_cols % 8 != 0)
    throw_arg(fn, "out", cat("has cols U = ", out_cols), "U % 8 == 0 (16-byte vectors)");
  check_alignment(fn, "gate_up", gate_up, 16, 8);
}

}  // namespace detail

void swiglu(ConstMatrix gate_up, Matrix out, Activation act, GateUpLayout layout, cudaStream_t stream) {
  constexpr const char* kFn = "swiglu";
  detail::check_swiglu_codes_and_input(kFn, gate_up, act, layout);
  detail::check_matrix_shape(kFn, "out", out);
  detail::check_same_dtype(kFn, "out", out, "gate_up", gate_up.dtype);
  detail::check_swiglu_shapes(kFn, gate_up, out.rows, out.cols);
  detail::check_alignment(kFn, "out", out, 16, 8);
  if (out.rows == 0 || out.cols == 0) return;
  detail::check_device_matrix(kFn, "gate_up", gate_up);
  detail::check_device_matrix(kFn, "out", out);
  detail::check_no_overlap(kFn, "out", out, "gate_up", gate_up);
  detail::check_compute_capability(kFn, 8, 0);
  if (gate_up.dtype == DType::kBF16)
    launch<__nv_bfloat16>(gate_up, out, act, layout, stream);
  else
    launch<__half>(gate_up, out, act, layout, stream);
}

}  // namespace blockfuse
