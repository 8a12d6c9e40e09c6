// The standalone gated activation: out[M, U] = act(gate) ⊙ up from a [M, 2U] input, stacked or
// interleaved. Memory-bound: each thread moves 16-byte vectors (8 outputs), grid-stride over rows
// and 8-column chunks, one pass, fp32 math, one rounding.
#include "blockfuse/swiglu.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/check.h"
#include "gated_up/activation.cuh"

namespace blockfuse {

const char* layout_name(GateUpLayout l) {
  switch (l) {
    case GateUpLayout::kStacked: return "stacked";
    case GateUpLayout::kInterleaved: return "interleaved";
  }
  return "unknown";
}

namespace {

template <class T>
__device__ __forceinline__ float to_f(T v) { return static_cast<float>(v); }

template <class T, bool kInterleaved>
__global__ void swiglu_kernel(const T* __restrict__ in, int64_t ldi, T* __restrict__ out, int64_t ldo,
                              int64_t rows, int64_t u, int act) {
  const int64_t chunks_per_row = u / 8;
  const int64_t total = rows * chunks_per_row;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = idx / chunks_per_row;
    const int64_t c = (idx - r * chunks_per_row) * 8;  // first output column of this chunk
    const T* row = in + r * ldi;
    float g[8], up[8];
    if constexpr (kInterleaved) {
      // 16 interleaved inputs (up, gate, up, gate, ...) = two 16-byte vectors.
      uint4 v[2];
      v[0] = *reinterpret_cast<const uint4*>(row + 2 * c);
      v[1] = *reinterpret_cast<const uint4*>(row + 2 * c + 8);
      const T* e = reinterpret_cast<const T*>(v);
#pragma unroll
      for (int i = 0; i < 8; ++i) { up[i] = to_f(e[2 * i]); g[i] = to_f(e[2 * i + 1]); }
    } else {
      uint4 vg = *reinterpret_cast<const uint4*>(row + c);
      uint4 vu = *reinterpret_cast<const uint4*>(row + u + c);
      const T* eg = reinterpret_cast<const T*>(&vg);
      const T* eu = reinterpret_cast<const T*>(&vu);
#pragma unroll
      for (int i = 0; i < 8; ++i) { g[i] = to_f(eg[i]); up[i] = to_f(eu[i]); }
    }
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

void swiglu(ConstMatrix gate_up, Matrix out, Activation act, GateUpLayout layout, cudaStream_t stream) {
  constexpr const char* kFn = "swiglu";
  using detail::cat;
  if (act != Activation::kSiLU && act != Activation::kGeluTanh)
    detail::throw_arg(kFn, "activation", cat("has code ", int(act)), "Activation::kSiLU or Activation::kGeluTanh");
  if (layout != GateUpLayout::kStacked && layout != GateUpLayout::kInterleaved)
    detail::throw_arg(kFn, "layout", cat("has code ", int(layout)), "GateUpLayout::kStacked or kInterleaved");
  detail::check_matrix_shape(kFn, "gate_up", gate_up);
  detail::check_matrix_shape(kFn, "out", out);
  detail::check_same_dtype(kFn, "out", out, "gate_up", gate_up.dtype);
  if (gate_up.rows != out.rows)
    detail::throw_arg(kFn, "out", cat("has rows = ", out.rows), cat("out.rows == gate_up.rows (= ", gate_up.rows, ")"));
  if (gate_up.cols != 2 * out.cols)
    detail::throw_arg(kFn, "gate_up", cat("has cols = ", gate_up.cols), cat("gate_up.cols == 2 * out.cols (= ", 2 * out.cols, ")"));
  if (out.cols % 8 != 0)
    detail::throw_arg(kFn, "out", cat("has cols U = ", out.cols), "U % 8 == 0 (16-byte vectors)");
  detail::check_alignment(kFn, "gate_up", gate_up, 16, 8);
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
