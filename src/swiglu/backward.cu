// The backward of the standalone gated activation (blockfuse/swiglu.h: swiglu_backward): d_gate_up
// [M, 2U] in gate_up's layout from dh [M, U] and the saved gate_up. Memory-bound like the forward:
// one grid-stride elementwise kernel (the forward's grid, config.h: swiglu_elementwise_config), each
// thread one 8-column chunk: three 16-byte loads (dh, and gate and up in either layout), two 16-byte
// stores (three with the forward's output); act and act' from one sigmoid of the special-function
// unit (common/activation.cuh: act_and_grad_fast), fp32, one rounding.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "blockfuse/swiglu.h"
#include "common/activation.cuh"
#include "common/check.h"
#include "common/launch.h"
#include "common/vec.cuh"
#include "swiglu/config.h"
#include "swiglu/gate_up_load.cuh"
#include "swiglu/validate.h"

namespace blockfuse {
namespace swiglu_detail {

// Chunk t of the grid, then the grid-stride loop. With d_gate_up == gate_up (in place) each thread
// reads its chunk's two input vectors before it writes the same two.
template <class T, bool kInterleaved>
__global__ void __launch_bounds__(256) swiglu_backward_kernel(const T* __restrict__ dh, int64_t lddh, const T* in,
                                                              int64_t ldi, T* dout, int64_t ldo, T* hout,
                                                              int64_t ldh, int64_t rows, int64_t u, int act) {
  const int64_t chunks_per_row = u / 8;
  const int64_t total = rows * chunks_per_row;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const bool idx32 = total <= int64_t(INT32_MAX);  // 32-bit index arithmetic while it fits (the forward's reason)
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total; idx += stride) {
    int64_t r, c;
    if (idx32) {
      const uint32_t q = uint32_t(idx) / uint32_t(chunks_per_row);
      r = q;
      c = int64_t(uint32_t(idx) - q * uint32_t(chunks_per_row)) * 8;
    } else {
      r = idx / chunks_per_row;
      c = (idx - r * chunks_per_row) * 8;
    }
    uint4 raw[2];
    load_gate_up_raw<T, kInterleaved>(in + r * ldi, u, c, raw);
    const uint4 dv = *reinterpret_cast<const uint4*>(dh + r * lddh + c);
    float g[8], up[8], d[8], dg[8], du[8], h[8];
    unpack_gate_up<T, kInterleaved>(raw, g, up);
    detail::Vec8<T>::unpack(dv, d);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float a, da;
      act_and_grad_fast(act, g[j], a, da);
      dg[j] = d[j] * up[j] * da;
      du[j] = d[j] * a;
      h[j] = a * up[j];
    }
    if (hout != nullptr) *reinterpret_cast<uint4*>(hout + r * ldh + c) = detail::Vec8<T>::pack(h);
    T* row = dout + r * ldo;
    if constexpr (kInterleaved) {
      float e[16];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        e[2 * j] = du[j];
        e[2 * j + 1] = dg[j];
      }
      *reinterpret_cast<uint4*>(row + 2 * c) = detail::Vec8<T>::pack(e);
      *reinterpret_cast<uint4*>(row + 2 * c + 8) = detail::Vec8<T>::pack(e + 8);
    } else {
      *reinterpret_cast<uint4*>(row + c) = detail::Vec8<T>::pack(dg);
      *reinterpret_cast<uint4*>(row + u + c) = detail::Vec8<T>::pack(du);
    }
  }
}

}  // namespace swiglu_detail

namespace {

template <class T>
void launch_backward(const ConstMatrix& dh, const ConstMatrix& in, const Matrix& dout, const Matrix& hout,
                     Activation act, GateUpLayout layout, cudaStream_t stream) {
  const detail::SwigluElementwiseConfig cfg = detail::swiglu_elementwise_config(dh.rows * (dh.cols / 8));
  auto go = [&](auto kernel) {
    detail::launch_kernel(kernel, dim3(unsigned(cfg.blocks)), dim3(cfg.threads), 0, stream, dim3(1, 1, 1), false,
                          static_cast<const T*>(dh.data), dh.ld, static_cast<const T*>(in.data), in.ld,
                          static_cast<T*>(dout.data), dout.ld, static_cast<T*>(hout.data), hout.ld, dh.rows,
                          dh.cols, int(act));
  };
  if (layout == GateUpLayout::kInterleaved)
    go(swiglu_detail::swiglu_backward_kernel<T, true>);
  else
    go(swiglu_detail::swiglu_backward_kernel<T, false>);
  BF_CHECK_LAUNCH();
}

// Both public forms; out == nullptr: without the forward's output.
void backward_impl(const ConstMatrix& dh, const ConstMatrix& gate_up, const Matrix& d_gate_up, const Matrix* out_arg,
                   Activation act, GateUpLayout layout, cudaStream_t stream) {
  constexpr const char* kFn = "swiglu_backward";
  detail::check_swiglu_codes_and_input(kFn, gate_up, act, layout);
  detail::check_matrix_shape(kFn, "dh", dh);
  detail::check_same_dtype(kFn, "dh", dh, "gate_up", gate_up.dtype);
  if (dh.rows != gate_up.rows || 2 * dh.cols != gate_up.cols)
    detail::throw_arg(kFn, "dh", detail::cat("is [", dh.rows, ", ", dh.cols, "]"),
                      detail::cat("[gate_up.rows, gate_up.cols / 2] (= [", gate_up.rows, ", ", gate_up.cols / 2,
                                  "]) with gate_up.cols even"));
  if (dh.cols % 8 != 0) detail::throw_arg(kFn, "dh", detail::cat("has cols U = ", dh.cols), "U % 8 == 0 (16-byte vectors)");
  detail::check_alignment(kFn, "dh", dh, 16, 8);
  detail::check_alignment(kFn, "gate_up", gate_up, 16, 8);
  // An output like another matrix: its shape, gate_up's dtype, 16-byte rows.
  auto check_like = [&](const char* arg, const Matrix& m, const char* like_arg, const auto& like) {
    detail::check_matrix_shape(kFn, arg, m);
    detail::check_same_dtype(kFn, arg, m, "gate_up", gate_up.dtype);
    if (m.rows != like.rows || m.cols != like.cols)
      detail::throw_arg(kFn, arg, detail::cat("is [", m.rows, ", ", m.cols, "]"),
                        detail::cat("the shape of '", like_arg, "' [", like.rows, ", ", like.cols, "]"));
    detail::check_alignment(kFn, arg, m, 16, 8);
  };
  check_like("d_gate_up", d_gate_up, "gate_up", gate_up);
  const bool in_place = d_gate_up.data == gate_up.data && d_gate_up.ld == gate_up.ld;
  if (!in_place) detail::check_no_overlap(kFn, "d_gate_up", d_gate_up, "gate_up", gate_up);
  detail::check_no_overlap(kFn, "d_gate_up", d_gate_up, "dh", dh);
  detail::check_no_overlap(kFn, "dh", dh, "gate_up", gate_up);
  const bool with_out = out_arg != nullptr;
  const Matrix out = with_out ? *out_arg : Matrix{nullptr, dh.dtype, 0, 0, 0};
  if (with_out) {
    check_like("out", out, "dh", dh);
    detail::check_no_overlap(kFn, "out", out, "dh", dh);
    detail::check_no_overlap(kFn, "out", out, "gate_up", gate_up);
    detail::check_no_overlap(kFn, "out", out, "d_gate_up", d_gate_up);
  }
  if (dh.rows == 0 || dh.cols == 0) return;
  detail::check_device_matrix(kFn, "dh", dh);
  detail::check_device_matrix(kFn, "gate_up", gate_up);
  detail::check_device_matrix(kFn, "d_gate_up", d_gate_up);
  if (with_out) detail::check_device_matrix(kFn, "out", out);
  detail::check_compute_capability(kFn, 8, 0);
  if (dh.dtype == DType::kBF16)
    launch_backward<__nv_bfloat16>(dh, gate_up, d_gate_up, out, act, layout, stream);
  else
    launch_backward<__half>(dh, gate_up, d_gate_up, out, act, layout, stream);
}

}  // namespace

void swiglu_backward(ConstMatrix dh, ConstMatrix gate_up, Matrix d_gate_up, Activation act, GateUpLayout layout,
                     cudaStream_t stream) {
  backward_impl(dh, gate_up, d_gate_up, nullptr, act, layout, stream);
}

void swiglu_backward(ConstMatrix dh, ConstMatrix gate_up, Matrix d_gate_up, Matrix out, Activation act,
                     GateUpLayout layout, cudaStream_t stream) {
  backward_impl(dh, gate_up, d_gate_up, &out, act, layout, stream);
}

}  // namespace blockfuse
