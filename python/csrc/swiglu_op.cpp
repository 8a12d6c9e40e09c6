// The PyTorch ops of the standalone gated activation (include/blockfuse/swiglu.h), with a
// bf16/fp16 or an FP8 (e4m3) output:
//   swiglu(gate_up [..., 2U], activation, layout) -> out [..., U]
//   swiglu_fp8(gate_up, scale?, activation, layout) -> (out e4m3, row_scales)
//   swiglu_backward(dh [..., U], gate_up [..., 2U], activation, layout) -> d_gate_up [..., 2U]
//   swiglu_backward_(dh, gate_up (written: d_gate_up), activation, layout) -> ()
//   swiglu_backward_with_out_(dh, gate_up (written: d_gate_up), activation, layout) -> h [..., U]
// (swiglu_backward serves swiglu's autograd formula, registered in Python: blockfuse/swiglu.py.)
// Schemas at the end; the fake implementations are in the Python package. FP8 scales as for
// rmsnorm_fp8 (binding.h's fp8_scale): a one-element float32 tensor is the static per-tensor scale
// (row_scales empty), None the dynamic per-row mode (row_scales written by the kernel).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "binding.h"

namespace {

using namespace blockfuse_torch;

blockfuse::GateUpLayout parse_layout(c10::string_view l, const char* fn) {
  if (l == "stacked") return blockfuse::GateUpLayout::kStacked;
  if (l == "interleaved") return blockfuse::GateUpLayout::kInterleaved;
  TORCH_CHECK_VALUE(false, "blockfuse.", fn, ": argument 'layout' is '", std::string(l.data(), l.size()),
                    "'; required: 'stacked' ([gate | up] columns) or 'interleaved' (column 2j = up_j, "
                    "2j+1 = gate_j)");
  return blockfuse::GateUpLayout::kStacked;  // unreachable
}

struct SwigluArgs {
  DType dt;
  RowView gv;
  int64_t u;
  blockfuse::Activation act;
  blockfuse::GateUpLayout layout;
};

SwigluArgs check_swiglu(const char* fn, const at::Tensor& gate_up, c10::string_view activation,
                        c10::string_view layout) {
  const blockfuse::Activation act = parse_activation(activation, fn);
  const blockfuse::GateUpLayout lay = parse_layout(layout, fn);
  check_cuda(gate_up, fn, "gate_up");
  const DType dt = to_dtype(gate_up, fn, "gate_up");
  const RowView gv = as_rows(gate_up, fn, "gate_up");
  TORCH_CHECK_VALUE(gv.cols % 2 == 0, "blockfuse.", fn, ": argument 'gate_up' has sizes ", dims(gate_up.sizes()),
                    "; required: an even last dimension 2U");
  return {dt, gv, gv.cols / 2, act, lay};
}

at::Tensor swiglu_op(const at::Tensor& gate_up, c10::string_view activation, c10::string_view layout) {
  constexpr const char* fn = "swiglu";
  const SwigluArgs a = check_swiglu(fn, gate_up, activation, layout);
  c10::cuda::CUDAGuard guard(gate_up.device());
  at::Tensor out = at::empty(with_last(gate_up, a.u), gate_up.options());
  const RowView ov{a.gv.rows, a.u, a.u};
  if (a.gv.rows == 0) return out;
  call_blockfuse([&] {
    blockfuse::swiglu(cview(gate_up, a.gv, a.dt), mview(out, ov, a.dt), a.act, a.layout, current_stream(gate_up));
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> swiglu_fp8_op(const at::Tensor& gate_up, const std::optional<at::Tensor>& scale,
                                                 c10::string_view activation, c10::string_view layout) {
  constexpr const char* fn = "swiglu_fp8";
  const SwigluArgs a = check_swiglu(fn, gate_up, activation, layout);
  c10::cuda::CUDAGuard guard(gate_up.device());
  at::Tensor row_scales;
  const blockfuse::Fp8Scale s = fp8_scale(fn, scale, gate_up, a.gv.rows, row_scales);
  at::Tensor out = fp8_like(gate_up, a.u);
  if (a.gv.rows == 0) return {out, row_scales};
  call_blockfuse([&] {
    blockfuse::swiglu_fp8(cview(gate_up, a.gv, a.dt), fp8_view(out, a.gv.rows, a.u), s, a.act, a.layout,
                          current_stream(gate_up));
  });
  return {out, row_scales};
}

// dh's checks (device, dtype, gate_up's sizes with the last halved); returns its row view.
RowView check_dh(const char* fn, const at::Tensor& dh, const at::Tensor& gate_up, const SwigluArgs& a) {
  check_cuda(dh, fn, "dh");
  check_same_device(dh, gate_up, fn, "dh", "gate_up");
  check_same_dtype(dh, gate_up, fn, "dh", "gate_up");
  const std::vector<int64_t> want = with_last(gate_up, a.u);
  TORCH_CHECK_VALUE(dh.sizes() == c10::IntArrayRef(want), "blockfuse.", fn, ": argument 'dh' has sizes ", dims(dh.sizes()),
                    "; required: gate_up's sizes with the last halved (", dims(want), ")");
  return as_rows(dh, fn, "dh");
}

at::Tensor swiglu_backward_op(const at::Tensor& dh, const at::Tensor& gate_up, c10::string_view activation,
                              c10::string_view layout) {
  constexpr const char* fn = "swiglu_backward";
  const SwigluArgs a = check_swiglu(fn, gate_up, activation, layout);
  const RowView dv = check_dh(fn, dh, gate_up, a);
  c10::cuda::CUDAGuard guard(gate_up.device());
  at::Tensor out = at::empty(gate_up.sizes(), gate_up.options());
  if (a.gv.rows == 0) return out;
  const RowView ov{a.gv.rows, 2 * a.u, 2 * a.u};
  call_blockfuse([&] {
    blockfuse::swiglu_backward(cview(dh, dv, a.dt), cview(gate_up, a.gv, a.dt), mview(out, ov, a.dt), a.act, a.layout,
                               current_stream(gate_up));
  });
  return out;
}

// The same, written over gate_up (the kernel reads each element before it writes it): what
// gated_up's backward runs on its [M, 2U] pre-activation, through the dispatcher so that
// torch.compile's tracing sees the mutation (Tensor(a!)) and can functionalise it.
void swiglu_backward_inplace_op(const at::Tensor& dh, const at::Tensor& gate_up, c10::string_view activation,
                                c10::string_view layout) {
  constexpr const char* fn = "swiglu_backward_";
  const SwigluArgs a = check_swiglu(fn, gate_up, activation, layout);
  const RowView dv = check_dh(fn, dh, gate_up, a);
  if (a.gv.rows == 0) return;
  c10::cuda::CUDAGuard guard(gate_up.device());
  call_blockfuse([&] {
    blockfuse::swiglu_backward(cview(dh, dv, a.dt), cview(gate_up, a.gv, a.dt), mview(gate_up, a.gv, a.dt), a.act,
                               a.layout, current_stream(gate_up));
  });
}

// The same in-place pass, also returning the forward's output h = act(gate)·up (a new tensor of
// dh's sizes): gated_mlp's backward keeps only z and needs h for the down projection's weight
// gradient, so the kernel writes it while it reads z anyway.
at::Tensor swiglu_backward_with_out_op(const at::Tensor& dh, const at::Tensor& gate_up, c10::string_view activation,
                                       c10::string_view layout) {
  constexpr const char* fn = "swiglu_backward_with_out_";
  const SwigluArgs a = check_swiglu(fn, gate_up, activation, layout);
  const RowView dv = check_dh(fn, dh, gate_up, a);
  c10::cuda::CUDAGuard guard(gate_up.device());
  at::Tensor h = at::empty(dh.sizes(), dh.options());
  if (a.gv.rows == 0) return h;
  const RowView hv{a.gv.rows, a.u, a.u};
  call_blockfuse([&] {
    blockfuse::swiglu_backward(cview(dh, dv, a.dt), cview(gate_up, a.gv, a.dt), mview(gate_up, a.gv, a.dt),
                               mview(h, hv, a.dt), a.act, a.layout, current_stream(gate_up));
  });
  return h;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(blockfuse, m) {
  def_ops(m, {"swiglu(Tensor gate_up, str activation='silu', str layout='stacked') -> Tensor",
               "swiglu_fp8(Tensor gate_up, Tensor? scale=None, str activation='silu', str layout='stacked') -> (Tensor, Tensor)",
               "swiglu_backward(Tensor dh, Tensor gate_up, str activation='silu', str layout='stacked') -> Tensor",
               "swiglu_backward_(Tensor dh, Tensor(a!) gate_up, str activation='silu', str layout='stacked') -> ()",
               "swiglu_backward_with_out_(Tensor dh, Tensor(a!) gate_up, str activation='silu', str layout='stacked') "
               "-> Tensor"});
}

BLOCKFUSE_TORCH_IMPLS(m) {
  m.impl("swiglu", &swiglu_op);
  m.impl("swiglu_fp8", &swiglu_fp8_op);
  m.impl("swiglu_backward", &swiglu_backward_op);
  m.impl("swiglu_backward_", &swiglu_backward_inplace_op);
  m.impl("swiglu_backward_with_out_", &swiglu_backward_with_out_op);
}
