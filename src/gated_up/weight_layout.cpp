// Interleaving of the gate/up weights for gated_up() (see include/blockfuse/weight_layout.h).
//
// Every conversion is a strided copy of whole rows — interleaved row 2j is up row j, row 2j+1 is
// gate row j — so a device conversion is two cudaMemcpy2DAsync calls (one per parity, the pitch
// doubling on the interleaved side) and needs no kernel; a host conversion is the same loop of row
// memcpys. Any ld >= cols is accepted on either side: only `cols` elements of each row move.
//
// Validation order matters for CPU-only CI: every shape/dtype check runs before the first CUDA call
// (the device-pointer checks), so a bad shape is reported the same way with or without a GPU.
#include "blockfuse/weight_layout.h"

#include <cstring>

#include "common/check.h"

namespace blockfuse {
namespace {

using detail::cat;
using detail::throw_arg;

// A matrix argument and the name the caller knows it by (the header's parameter name).
struct Arg {
  const char* name;
  ConstMatrix m;
};

// Copies `rows` rows of `src.cols` elements: src row (src_first + i·src_step) -> dst row
// (dst_first + i·dst_step), i = 0..rows-1.
void copy_rows(const ConstMatrix& dst, int64_t dst_first, int64_t dst_step, const ConstMatrix& src,
               int64_t src_first, int64_t src_step, int64_t rows, bool device, cudaStream_t stream) {
  if (rows == 0 || src.cols == 0) return;
  const size_t es = dtype_size(src.dtype);
  char* d = static_cast<char*>(const_cast<void*>(dst.data)) + dst_first * dst.ld * es;
  const char* s = static_cast<const char*>(src.data) + src_first * src.ld * es;
  const size_t dpitch = dst_step * dst.ld * es, spitch = src_step * src.ld * es, width = src.cols * es;
  if (device) {
    BF_CUDA_CHECK(cudaMemcpy2DAsync(d, dpitch, s, spitch, width, static_cast<size_t>(rows),
                                    cudaMemcpyDeviceToDevice, stream));
  } else {
    for (int64_t i = 0; i < rows; ++i) std::memcpy(d + i * dpitch, s + i * spitch, width);
  }
}

void check_shape_is(const char* fn, const Arg& a, int64_t rows, int64_t cols, const std::string& why) {
  if (a.m.rows != rows || a.m.cols != cols)
    throw_arg(fn, a.name, cat("has shape [", a.m.rows, ", ", a.m.cols, "]"),
              cat("shape [", rows, ", ", cols, "] (", why, ")"));
}

// Shape and dtype checks shared by all conversions (no CUDA calls). args[0] is the argument the
// others must match in dtype.
void check_views(const char* fn, const Arg* args, int n) {
  for (int i = 0; i < n; ++i) detail::check_matrix_shape(fn, args[i].name, args[i].m);
  for (int i = 1; i < n; ++i) detail::check_same_dtype(fn, args[i].name, args[i].m, args[0].name, args[0].m.dtype);
}

// Device-memory checks (device conversions only), then overlap: an output must not overlap any
// input nor another output (a copy into its own source would read rows it has already overwritten).
void check_memory(const char* fn, const Arg* inputs, int n_in, const Arg* outputs, int n_out, bool device) {
  if (device) {
    for (int i = 0; i < n_in; ++i) detail::check_device_matrix(fn, inputs[i].name, inputs[i].m);
    for (int i = 0; i < n_out; ++i) detail::check_device_matrix(fn, outputs[i].name, outputs[i].m);
  }
  for (int o = 0; o < n_out; ++o) {
    for (int i = 0; i < n_in; ++i)
      detail::check_no_overlap(fn, outputs[o].name, outputs[o].m, inputs[i].name, inputs[i].m);
    for (int p = o + 1; p < n_out; ++p)
      detail::check_no_overlap(fn, outputs[o].name, outputs[o].m, outputs[p].name, outputs[p].m);
  }
}

void check_even_rows(const char* fn, const Arg& a, const char* layout) {
  if (a.m.rows % 2 != 0)
    throw_arg(fn, a.name, cat("has rows = ", a.m.rows), cat("an even number of rows (2U, ", layout, ")"));
}

// gate [U, K], up [U, K] -> out [2U, K] interleaved.
void interleave_pair(const char* fn, ConstMatrix gate, ConstMatrix up, Matrix out, bool device, cudaStream_t stream) {
  const Arg in[] = {{"gate", gate}, {"up", up}};
  const Arg res[] = {{"out", out}};
  const Arg all[] = {in[0], in[1], res[0]};
  check_views(fn, all, 3);
  const int64_t U = gate.rows, K = gate.cols;
  check_shape_is(fn, in[1], U, K, "the shape of 'gate'");
  check_shape_is(fn, res[0], 2 * U, K, "[2 * gate.rows, gate.cols]");
  check_memory(fn, in, 2, res, 1, device);
  copy_rows(out, 0, 2, up, 0, 1, U, device, stream);    // even rows: up
  copy_rows(out, 1, 2, gate, 0, 1, U, device, stream);  // odd rows: gate
}

// interleaved [2U, K] -> gate [U, K], up [U, K].
void deinterleave_pair(const char* fn, ConstMatrix inter, Matrix gate, Matrix up, bool device, cudaStream_t stream) {
  const Arg in[] = {{"interleaved", inter}};
  const Arg res[] = {{"gate", gate}, {"up", up}};
  const Arg all[] = {in[0], res[0], res[1]};
  check_views(fn, all, 3);
  check_even_rows(fn, in[0], "interleaved [up_0; gate_0; up_1; ...]");
  const int64_t U = inter.rows / 2, K = inter.cols;
  check_shape_is(fn, res[0], U, K, "[interleaved.rows / 2, interleaved.cols]");
  check_shape_is(fn, res[1], U, K, "[interleaved.rows / 2, interleaved.cols]");
  check_memory(fn, in, 1, res, 2, device);
  copy_rows(up, 0, 1, inter, 0, 2, U, device, stream);
  copy_rows(gate, 0, 1, inter, 1, 2, U, device, stream);
}

// stacked [2U, K] = [gate; up] <-> interleaved [2U, K]. `src` is the input, `dst` the output;
// `to_interleaved` says which of them is stacked.
void convert_stacked(const char* fn, const Arg& src, const Arg& dst, bool to_interleaved, bool device,
                     cudaStream_t stream) {
  const Arg all[] = {src, dst};
  check_views(fn, all, 2);
  check_even_rows(fn, src, to_interleaved ? "stacked [gate; up]" : "interleaved [up_0; gate_0; up_1; ...]");
  check_shape_is(fn, dst, src.m.rows, src.m.cols, cat("the shape of '", src.name, "'"));
  check_memory(fn, &src, 1, &dst, 1, device);
  const int64_t U = src.m.rows / 2;
  if (to_interleaved) {
    copy_rows(dst.m, 0, 2, src.m, U, 1, U, device, stream);  // up   = stacked rows [U, 2U)
    copy_rows(dst.m, 1, 2, src.m, 0, 1, U, device, stream);  // gate = stacked rows [0, U)
  } else {
    copy_rows(dst.m, U, 1, src.m, 0, 2, U, device, stream);  // even interleaved rows -> up half
    copy_rows(dst.m, 0, 1, src.m, 1, 2, U, device, stream);  // odd interleaved rows -> gate half
  }
}

}  // namespace

void interleave_gate_up(ConstMatrix gate, ConstMatrix up, Matrix out, cudaStream_t stream) {
  interleave_pair("interleave_gate_up", gate, up, out, true, stream);
}
void interleave_stacked_gate_up(ConstMatrix stacked, Matrix out, cudaStream_t stream) {
  convert_stacked("interleave_stacked_gate_up", {"stacked", stacked}, {"out", out}, true, true, stream);
}
void deinterleave_gate_up(ConstMatrix interleaved, Matrix gate, Matrix up, cudaStream_t stream) {
  deinterleave_pair("deinterleave_gate_up", interleaved, gate, up, true, stream);
}
void deinterleave_to_stacked(ConstMatrix interleaved, Matrix stacked, cudaStream_t stream) {
  convert_stacked("deinterleave_to_stacked", {"interleaved", interleaved}, {"stacked", stacked}, false, true, stream);
}

void interleave_gate_up_host(ConstMatrix gate, ConstMatrix up, Matrix out) {
  interleave_pair("interleave_gate_up_host", gate, up, out, false, nullptr);
}
void interleave_stacked_gate_up_host(ConstMatrix stacked, Matrix out) {
  convert_stacked("interleave_stacked_gate_up_host", {"stacked", stacked}, {"out", out}, true, false, nullptr);
}
void deinterleave_gate_up_host(ConstMatrix interleaved, Matrix gate, Matrix up) {
  deinterleave_pair("deinterleave_gate_up_host", interleaved, gate, up, false, nullptr);
}
void deinterleave_to_stacked_host(ConstMatrix interleaved, Matrix stacked) {
  convert_stacked("deinterleave_to_stacked_host", {"interleaved", interleaved}, {"stacked", stacked}, false, false,
                  nullptr);
}

}  // namespace blockfuse
