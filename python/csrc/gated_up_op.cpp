// The PyTorch ops of the fused gated up-projection (include/blockfuse/gated_up.h) and of its
// interleaved weight layout (include/blockfuse/weight_layout.h):
//   gated_up(x [..., K], w [2U, K] interleaved, activation, recompute) -> h [..., U] CUDA; autograd in C++
//   gated_mlp(x [..., K], w [2U, K], w_down [N, U], activation) -> y [..., N]    CUDA; autograd in C++
//   gated_mlp_dgated_(dy [M, N], w_down [N, U], z [M, 2U] -> dz, activation, want_h) -> h [M, U]  CUDA
//   interleave_gate_up(gate [U, K], up [U, K]) -> w [2U, K]                       CUDA, CPU
//   interleave_stacked(stacked [2U, K] = [gate; up]) -> w [2U, K]                 CUDA, CPU
//   deinterleave_gate_up(w [2U, K]) -> (gate [U, K], up [U, K])                   CUDA, CPU
//   deinterleave_to_stacked(w [2U, K]) -> stacked [2U, K]                         CUDA, CPU
// Schemas at the end; the fake implementations are in the Python package.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string_view>
#include <tuple>
#include <vector>

#include "binding.h"
#include "blockfuse/swiglu.h"
#include "workspace.h"

namespace {

using namespace blockfuse_torch;

// ---- gated_up ----------------------------------------------------------------------------------

// Validates gated_up's tensors (every error names the argument); returns U.
int64_t check_gated_up_args(const at::Tensor& x, const at::Tensor& w, const char* fn = "gated_up") {
  (void)check_operands(fn, x, {{&w, "w"}});
  TORCH_CHECK_VALUE(x.dim() >= 1, "blockfuse.", fn, ": argument 'x' is 0-dimensional; required: [..., K]");
  TORCH_CHECK_VALUE(w.dim() == 2, "blockfuse.", fn, ": argument 'w' has sizes ", dims(w.sizes()),
                    "; required: a 2-D interleaved weight [2U, K] (row 2j = up_j, row 2j+1 = gate_j)");
  const int64_t K = x.size(-1);
  TORCH_CHECK_VALUE(w.size(1) == K, "blockfuse.", fn, ": argument 'w' has sizes ", dims(w.sizes()),
                    "; required: w.size(1) == x.size(-1) (K = ", num(K), ")");
  TORCH_CHECK_VALUE(w.size(0) % 2 == 0, "blockfuse.", fn, ": argument 'w' has ", num(w.size(0)),
                    " rows; required: an even number 2U (interleaved [up_0; gate_0; up_1; ...])");
  return w.size(0) / 2;
}

// The checks of the training forward that keeps z (torch's GEMM, then swiglu): the same inputs as
// the fused kernel takes, with its messages, so a shape is accepted or refused in training and
// inference alike.
void check_training_args(const at::Tensor& x, const at::Tensor& w, const char* fn = "gated_up") {
  const int64_t U = check_gated_up_args(x, w, fn);
  (void)as_rows(x, fn, "x");
  (void)as_matrix(w, fn, "w");
  TORCH_CHECK_VALUE(x.size(-1) % 8 == 0, "blockfuse.", fn, ": argument 'x' has K = ", num(x.size(-1)),
                    "; required: K % 8 == 0 (16-byte rows)");
  TORCH_CHECK_VALUE(U % 8 == 0, "blockfuse.", fn, ": argument 'w' has 2U = ", num(2 * U),
                    " rows; required: U % 8 == 0");
}

// The fused kernel's call; `fn` names the op in errors (gated_up, or gated_mlp's first half).
at::Tensor run_gated_up(const at::Tensor& x, const at::Tensor& w, c10::string_view activation, const char* fn) {
  const blockfuse::Activation act = parse_activation(activation, fn);
  const int64_t U = check_gated_up_args(x, w, fn);
  const DType dt = to_dtype(x, fn, "x");
  const RowView xv = as_rows(x, fn, "x");
  const RowView wv = as_matrix(w, fn, "w");

  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(with_last(x, U), x.options());  // contiguous: row stride U
  const RowView ov{xv.rows, U, U};
  // Up to 32 rows the decode kernel runs; where it splits K (2U too small to fill the SMs) it uses
  // the binding's decode workspace, shared with decode_gemm (workspace.h: such a shape must have
  // run once eagerly before it is captured).
  // Above 32 rows the same buffer buys the sm90 stream-K row where the heuristic picks it with a
  // workspace (gated_up.h; its region sits after the decode counters, which stay zeroed). That
  // region is optional: an eager call grows the buffer, a capture passes what is reserved, and
  // gated_up runs the row chosen without a workspace when it is too small (never an error).
  const cudaStream_t stream = current_stream(x);
  const int device = x.device().index();
  const bool sizes_ok = wv.cols >= 8 && wv.cols % 8 == 0 && U >= 8 && U % 8 == 0;
  size_t ws_bytes = 0;
  void* ws = nullptr;
  if (xv.rows <= blockfuse::kDecodeGemmMaxM) {
    const size_t need = sizes_ok ? decode_workspace_need(xv.rows, 2 * U, wv.cols, device) : 0;
    if (need > 0)
      ws = device_workspace(WorkspaceKind::kDecodeGemm, device, need, stream, &ws_bytes, fn,
                            kDecodeReserveHint);
  } else if (sizes_ok) {
    size_t need = 0, base = 0;
    call_blockfuse([&] {
      need = blockfuse::gated_up_workspace_size(xv.rows, wv.cols, U, device, blockfuse::GatedUpOptions{});
      base = blockfuse::gated_up_workspace_size(xv.rows, wv.cols, U, device);
    });
    if (need > base) {  // beyond the decode region (which no call above 32 rows uses): the stream-K row's
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      const bool eager = cudaStreamIsCapturing(stream, &status) == cudaSuccess && status == cudaStreamCaptureStatusNone;
      ws = eager
               ? device_workspace(WorkspaceKind::kDecodeGemm, device, need, stream, &ws_bytes, fn,
                                  "one eager call of blockfuse.ops.gated_up with this shape")
               : reserved_workspace(WorkspaceKind::kDecodeGemm, device, &ws_bytes);
    }
  }
  call_blockfuse([&] {
    blockfuse::gated_up(cview(x, xv, dt), cview(w, wv, dt), mview(out, ov, dt), act, ws, ws_bytes, stream);
  });
  return out;
}

// `recompute` only matters to the backward (GatedUpFunction below): the kernel is the same.
at::Tensor gated_up_cuda(const at::Tensor& x, const at::Tensor& w, c10::string_view activation, bool /*recompute*/) {
  return run_gated_up(x, w, activation, "gated_up");
}

at::Tensor gated_up_cpu(const at::Tensor& x, const at::Tensor&, c10::string_view, bool) {
  check_cuda(x, "gated_up", "x");  // always throws: names the argument
  return {};
}

// The backward of gated_up, in C++ so that an inference call pays no Python autograd kernel (a
// torch.library.register_autograd formula runs Python on every call, grad or not). Two modes when an
// input needs a gradient:
//   saved pre-activation (recompute = false, the default): the forward computes z = x·wᵀ [M, 2U]
//     with torch (cuBLAS) and h = swiglu(z) with blockfuse's interleaved swiglu, and keeps z: the
//     backward runs no GEMM beyond the two it needs. z is [M, 2U] in x's dtype, what eager torch
//     keeps as its gate and up.
//   recompute (recompute = true): the forward is the fused kernel and keeps only x; the backward
//     recomputes z (one more GEMM of the forward's size) for the smallest memory.
// Either way the backward then writes, in place over z, blockfuse::swiglu_backward in gated_up's
// interleaved layout:
//   dz_up = g · act(gate),  dz_gate = g · up · act'(gate)     (fp32 math, one rounding)
//   dx = dz · w,  dw = dzᵀ · x
// A saved z is consumed by the first backward (overwritten by dz); a second backward through the
// same graph (retain_graph) recomputes it. ops.gated_up_backward is the same formula in plain torch,
// which the CPU tests check against autograd.
// The backward's z = x·wᵀ [M, 2U] to turn into dz in place: the forward's saved z on the first
// backward (it is consumed), recomputed on a later one (retain_graph) or where none was saved.
at::Tensor take_z(torch::autograd::AutogradContext* ctx, const at::Tensor* saved_z, const at::Tensor& x2,
                  const at::Tensor& w) {
  const auto fresh = ctx->saved_data.find("z_fresh");
  if (saved_z != nullptr && fresh != ctx->saved_data.end() && fresh->second.toBool()) {
    ctx->saved_data["z_fresh"] = false;
    return *saved_z;
  }
  return at::mm(x2, w.t());
}

class GatedUpFunction : public torch::autograd::Function<GatedUpFunction> {
 public:
  // save_z: gated_up_autograd's decision (grad mode on, an input requiring grad, not recompute),
  // made before apply because forward runs with grad mode off.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            c10::string_view activation, bool recompute, bool save_z) {
    parse_activation(activation, "gated_up");
    at::Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      static auto op = c10::Dispatcher::singleton()
                           .findSchemaOrThrow("blockfuse::gated_up", "")
                           .typed<at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view, bool)>();
      if (save_z && x.is_cuda()) {
        // The fused kernel's requirements and messages, before torch's GEMM. Under torch.compile the
        // tensors are fakes with symbolic sizes: the ops' fakes check what they can, and the real call
        // checks the rest; hence the sym_ sizes below too.
        if (!has_symbolic_sizes(x) && !has_symbolic_sizes(w)) check_training_args(x, w);
        static auto swiglu = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("blockfuse::swiglu", "")
                                 .typed<at::Tensor(const at::Tensor&, c10::string_view, c10::string_view)>();
        const at::Tensor z = at::mm(x.reshape_symint({-1, x.sym_size(-1)}), w.t());  // [M, 2U], interleaved like w
        std::vector<c10::SymInt> h_sizes(x.sym_sizes().begin(), x.sym_sizes().end());
        h_sizes.back() = w.sym_size(0) / 2;
        out = swiglu.call(z, activation, "interleaved").view_symint(h_sizes);
        ctx->save_for_backward({x, w, z});
        ctx->saved_data["z_fresh"] = true;
      } else {
        out = op.call(x, w, activation, recompute);
        ctx->save_for_backward({x, w});
      }
    }
    ctx->saved_data["act"] = std::string(activation.data(), activation.size());
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const std::string act = ctx->saved_data["act"].toStringRef();
    const c10::SymInt k = x.sym_size(-1), u = w.sym_size(0) / 2;  // symbolic under torch.compile
    const at::Tensor x2 = x.reshape_symint({-1, k});
    // z, then dz in place: [M, 2U] contiguous, interleaved like w (recompute mode saves no z).
    const at::Tensor dz = take_z(ctx, saved.size() > 2 ? &saved[2] : nullptr, x2, w);
    const at::Tensor g2 = grads[0].reshape_symint({-1, u}).contiguous();
    // Through the dispatcher (the mutation is in the schema): torch.compile traces this backward.
    static auto swiglu_backward_ = c10::Dispatcher::singleton()
                                       .findSchemaOrThrow("blockfuse::swiglu_backward_", "")
                                       .typed<void(const at::Tensor&, const at::Tensor&, c10::string_view,
                                                   c10::string_view)>();
    swiglu_backward_.call(g2, dz, act, "interleaved");
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = at::mm(dz, w).reshape_symint(x.sym_sizes());
    if (ctx->needs_input_grad(1)) dw = at::mm(dz.t(), x2);
    return {dx, dw, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor gated_up_autograd(const at::Tensor& x, const at::Tensor& w, c10::string_view activation, bool recompute) {
  const bool save_z = !recompute && at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad());
  return GatedUpFunction::apply(x, w, activation, recompute, save_z);
}

// Whether gated_mlp's backward takes the fused kernel (gated_mlp_dgated): only when the environment
// sets BLOCKFUSE_DGATED=fused, since the kernel runs at 0.48-0.71x the speed of the unfused pair on an
// H100 today (results/gated_up.json `dgated`; docs/gated_up.md), and then on a device where it runs,
// with concrete sizes (a FakeTensor under torch.compile traces the unfused ops), contiguous
// 16-byte-aligned operands and N, U multiples of 8. Otherwise the backward is the GEMM dh = dy·w_down
// and swiglu_backward's pass.
bool dgated_applies(const at::Tensor& dy, const at::Tensor& w_down, const at::Tensor& z) {
  const char* opt_in = std::getenv("BLOCKFUSE_DGATED");
  if (opt_in == nullptr || std::string_view(opt_in) != "fused") return false;
  if (has_symbolic_sizes(dy) || has_symbolic_sizes(z) || !dy.is_cuda()) return false;
  if (dy.scalar_type() != at::kBFloat16 && dy.scalar_type() != at::kHalf) return false;
  if (w_down.scalar_type() != dy.scalar_type() || z.scalar_type() != dy.scalar_type()) return false;
  if (!dy.is_contiguous() || !w_down.is_contiguous() || !z.is_contiguous() || dy.size(0) == 0) return false;
  const int64_t N = w_down.size(0), U = w_down.size(1);
  if (N % 8 != 0 || U % 8 != 0 || z.size(1) != 2 * U) return false;
  for (const at::Tensor* t : {&dy, &w_down, &z})
    if (reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0) return false;
  bool ok = false;
  call_blockfuse([&] { ok = blockfuse::gated_mlp_dgated_available(dy.device().index()); });
  return ok;
}

// gated_mlp_dgated_(dy [M, N], w_down [N, U], z [M, 2U] (written: dz), activation, want_h) -> h [M, U]
// (or [0] without want_h): gated_mlp's backward from dy to dz, an op of its own so that
// torch.compile traces it through its fake. The GEMM dh = dy·w_down and swiglu_backward's pass (dh
// rounded to the dtype in between); with BLOCKFUSE_DGATED=fused on Hopper (dgated_applies) one
// kernel, blockfuse::gated_mlp_dgated, whose GEMM epilogue reads z and writes dz and h.
at::Tensor gated_mlp_dgated_cuda(const at::Tensor& dy, const at::Tensor& w_down, const at::Tensor& z,
                                 c10::string_view activation, bool want_h) {
  constexpr const char* fn = "gated_mlp_dgated_";
  const blockfuse::Activation act = parse_activation(activation, fn);
  (void)check_operands(fn, dy, {{&w_down, "w_down"}, {&z, "z"}});
  TORCH_CHECK_VALUE(dy.dim() == 2 && w_down.dim() == 2 && z.dim() == 2 && w_down.size(0) == dy.size(1) &&
                        z.size(0) == dy.size(0) && z.size(1) == 2 * w_down.size(1),
                    "blockfuse.", fn, ": arguments 'dy', 'w_down', 'z' have sizes ", dims(dy.sizes()), ", ",
                    dims(w_down.sizes()), ", ", dims(z.sizes()), "; required: [M, N], [N, U], [M, 2U]");
  const int64_t M = dy.size(0), U = w_down.size(1);
  c10::cuda::CUDAGuard guard(dy.device());
  if (dgated_applies(dy, w_down, z)) {
    const DType dt = to_dtype(dy, fn, "dy");
    at::Tensor h = at::empty({want_h ? M : 0, U}, dy.options());
    call_blockfuse([&] {
      blockfuse::gated_mlp_dgated(cview(dy, as_matrix(dy, fn, "dy"), dt), cview(w_down, as_matrix(w_down, fn, "w_down"), dt),
                                  cview(z, as_matrix(z, fn, "z"), dt), mview(z, as_matrix(z, fn, "z"), dt),
                                  want_h ? mview(h, RowView{M, U, U}, dt) : blockfuse::Matrix{}, act, current_stream(dy));
    });
    return want_h ? h : at::empty({0}, dy.options());
  }
  const at::Tensor dh = at::mm(dy, w_down);  // [M, U]
  using Backward = at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view, c10::string_view);
  static auto with_out = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("blockfuse::swiglu_backward_with_out_", "")
                             .typed<Backward>();
  static auto in_place = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("blockfuse::swiglu_backward_", "")
                             .typed<void(const at::Tensor&, const at::Tensor&, c10::string_view, c10::string_view)>();
  if (want_h) return with_out.call(dh, z, activation, "interleaved");  // the forward's h, from the same pass
  in_place.call(dh, z, activation, "interleaved");
  return at::empty({0}, dy.options());
}

at::Tensor gated_mlp_dgated_cpu(const at::Tensor& dy, const at::Tensor&, const at::Tensor&, c10::string_view, bool) {
  check_cuda(dy, "gated_mlp_dgated_", "dy");  // always throws: names the argument
  return {};
}

// ---- gated_mlp: down(gated_up(x)) in training ---------------------------------------------------
// y = h·w_downᵀ with h = gated_up(x, w): a GatedMLP's forward as one op, so that its backward can
// keep z = x·wᵀ [M, 2U] alone. gated_up followed by nn.Linear keeps z and h (the Linear saves its
// input): 3U values a token, where eager torch keeps 4U (gate, up, act(gate), h) and
// torch.compile's partitioner 2U. This op keeps 2U and gets h back in the backward from the pass
// that turns z into dz anyway (swiglu_backward_with_out_: one more [M, U] store, no second read):
//   forward   z = x·wᵀ (torch's GEMM), h = swiglu(z) (interleaved), y = h·w_downᵀ
//   backward  dh = dy·w_down; dz (over z) and h from one pass; dw_down = dyᵀ·h, dx = dz·w,
//             dw = dzᵀ·x. With BLOCKFUSE_DGATED=fused on Hopper (dgated_applies) the first two
//             are one kernel, blockfuse::gated_mlp_dgated, whose GEMM epilogue reads z and writes
//             dz and h, so dh ([M, U]) is never stored.
// Without a recorded gradient it is gated_up's fused kernel and one GEMM.

// w_down's checks against x and w (U from w); every message names the argument.
void check_down_arg(const at::Tensor& x, const at::Tensor& w_down, int64_t U) {
  constexpr const char* fn = "gated_mlp";
  (void)check_operands(fn, x, {{&w_down, "w_down"}});
  TORCH_CHECK_VALUE(w_down.dim() == 2 && w_down.size(1) == U, "blockfuse.gated_mlp: argument 'w_down' has sizes ",
                    dims(w_down.sizes()), "; required: the down projection's weight [N, U] (nn.Linear(U, N).weight, U = ",
                    num(U), ")");
}

at::Tensor gated_mlp_cuda(const at::Tensor& x, const at::Tensor& w, const at::Tensor& w_down,
                          c10::string_view activation) {
  const int64_t U = check_gated_up_args(x, w, "gated_mlp");
  check_down_arg(x, w_down, U);
  const at::Tensor h = run_gated_up(x, w, activation, "gated_mlp");
  return at::mm(h.reshape({-1, U}), w_down.t()).view(with_last(x, w_down.size(0)));
}

at::Tensor gated_mlp_cpu(const at::Tensor& x, const at::Tensor&, const at::Tensor&, c10::string_view) {
  check_cuda(x, "gated_mlp", "x");  // always throws: names the argument
  return {};
}

class GatedMlpFunction : public torch::autograd::Function<GatedMlpFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& w_down, c10::string_view activation) {
    parse_activation(activation, "gated_mlp");
    at::AutoDispatchBelowADInplaceOrView guard;
    // Under torch.compile the tensors are fakes with symbolic sizes, and meta tensors have no device
    // to check: the fakes check what they can and the real kernels the rest.
    if (!x.is_meta() && !has_symbolic_sizes(x) && !has_symbolic_sizes(w) && !has_symbolic_sizes(w_down)) {
      check_training_args(x, w, "gated_mlp");
      check_down_arg(x, w_down, w.size(0) / 2);
    } else {  // the shapes the GEMMs need, symbolically (torch's own mm errors would not name them)
      TORCH_CHECK_VALUE(x.dim() >= 1 && w.dim() == 2 && w_down.dim() == 2, "blockfuse.gated_mlp: arguments 'x', 'w', "
                        "'w_down' have ", x.dim(), ", ", w.dim(), ", ", w_down.dim(), " dims; required: [..., K], [2U, K], [N, U]");
      TORCH_SYM_CHECK(x.sym_size(-1).sym_eq(w.sym_size(1)), "blockfuse.gated_mlp: argument 'w' has K = ", w.sym_size(1),
                      "; required: x.size(-1) = ", x.sym_size(-1));
      TORCH_SYM_CHECK(w_down.sym_size(1).sym_eq(w.sym_size(0) / 2), "blockfuse.gated_mlp: argument 'w_down' has U = ",
                      w_down.sym_size(1), "; required: w.size(0) / 2 = ", w.sym_size(0) / 2);
    }
    static auto swiglu = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("blockfuse::swiglu", "")
                             .typed<at::Tensor(const at::Tensor&, c10::string_view, c10::string_view)>();
    const at::Tensor z = at::mm(x.reshape_symint({-1, x.sym_size(-1)}), w.t());  // [M, 2U], interleaved like w
    const at::Tensor y = at::mm(swiglu.call(z, activation, "interleaved"), w_down.t());
    ctx->save_for_backward({x, w, w_down, z});
    ctx->saved_data["z_fresh"] = true;
    ctx->saved_data["act"] = std::string(activation.data(), activation.size());
    std::vector<c10::SymInt> y_sizes(x.sym_sizes().begin(), x.sym_sizes().end());
    y_sizes.back() = w_down.sym_size(0);
    return y.view_symint(y_sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &w_down = saved[2];
    const std::string act = ctx->saved_data["act"].toStringRef();
    const at::Tensor x2 = x.reshape_symint({-1, x.sym_size(-1)});
    const at::Tensor dy = grads[0].reshape_symint({-1, w_down.sym_size(0)}).contiguous();
    const at::Tensor dz = take_z(ctx, &saved[3], x2, w);  // dz is written over it
    // dh = dy·w_down, then dz over z and h (the forward's, for dw_down) from z: a GEMM and one pass
    // (or the fused kernel, opted in: gated_mlp_dgated_cuda).
    static auto dgated = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("blockfuse::gated_mlp_dgated_", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view,
                                               bool)>();
    at::Tensor dx, dw, dw_down;
    const bool want_h = ctx->needs_input_grad(2);  // a frozen down projection (LoRA) needs no h
    {  // h ([M, U]) is released before dx and dw are allocated: it is not part of the step's peak
      const at::Tensor h = dgated.call(dy, w_down, dz, act, want_h);
      if (want_h) dw_down = at::mm(dy.t(), h);
    }
    if (ctx->needs_input_grad(0)) dx = at::mm(dz, w).reshape_symint(x.sym_sizes());
    if (ctx->needs_input_grad(1)) dw = at::mm(dz.t(), x2);
    return {dx, dw, dw_down, at::Tensor()};
  }
};

at::Tensor gated_mlp_autograd(const at::Tensor& x, const at::Tensor& w, const at::Tensor& w_down,
                              c10::string_view activation) {
  const bool grad = at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad() || w_down.requires_grad());
  if (!grad) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("blockfuse::gated_mlp", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view)>();
    return op.call(x, w, w_down, activation);
  }
  return GatedMlpFunction::apply(x, w, w_down, activation);
}

// ---- weight layout -----------------------------------------------------------------------------
// The C++ helpers move whole rows (cudaMemcpy2DAsync on the device, memcpy on the host), so they
// serve both backends; the tensors' device picks which.

// Checks dtype/device agreement of a helper's tensors (the first is the reference).
DType check_layout_args(const char* fn, std::initializer_list<NamedTensor> args) {
  const NamedTensor& ref = *args.begin();
  const DType dt = to_dtype(*ref.t, fn, ref.name);
  for (const NamedTensor& a : args) {
    if (a.t == ref.t) continue;
    check_same_device(*a.t, *ref.t, fn, a.name, ref.name);
    check_same_dtype(*a.t, *ref.t, fn, a.name, ref.name);
  }
  return dt;
}

// Runs the device form of a layout helper (given the stream) for a CUDA tensor `t`, the host form
// otherwise.
template <typename Device, typename Host>
void on_tensor_device(const at::Tensor& t, Device&& device, Host&& host) {
  if (t.is_cuda()) {
    c10::cuda::CUDAGuard guard(t.device());
    const cudaStream_t stream = current_stream(t);
    call_blockfuse([&] { device(stream); });
  } else {
    call_blockfuse(host);
  }
}

at::Tensor interleave_gate_up_op(const at::Tensor& gate, const at::Tensor& up) {
  constexpr const char* fn = "interleave_gate_up";
  const DType dt = check_layout_args(fn, {{&gate, "gate"}, {&up, "up"}});
  const RowView gv = as_matrix(gate, fn, "gate"), uv = as_matrix(up, fn, "up");
  check_same_sizes(up, gate, fn, "up", "gate");
  at::Tensor out = at::empty({2 * gv.rows, gv.cols}, gate.options());
  const RowView ov{2 * gv.rows, gv.cols, gv.cols};
  const ConstMatrix g = cview(gate, gv, dt), u = cview(up, uv, dt);
  const Matrix o = mview(out, ov, dt);
  on_tensor_device(
      gate, [&](cudaStream_t s) { blockfuse::interleave_gate_up(g, u, o, s); },
      [&] { blockfuse::interleave_gate_up_host(g, u, o); });
  return out;
}

// The two row permutations [2U, K] -> [2U, K] (stacked [gate; up] <-> interleaved), by the C++
// helpers `device(in, out, stream)` and `host(in, out)`.
template <typename Device, typename Host>
at::Tensor permute_rows(const at::Tensor& in, const char* fn, const char* arg, Device&& device, Host&& host) {
  const DType dt = check_layout_args(fn, {{&in, arg}});
  const RowView v = as_matrix(in, fn, arg);
  at::Tensor out = at::empty({v.rows, v.cols}, in.options());
  const ConstMatrix i = cview(in, v, dt);
  const Matrix o = mview(out, RowView{v.rows, v.cols, v.cols}, dt);
  on_tensor_device(in, [&](cudaStream_t s) { device(i, o, s); }, [&] { host(i, o); });
  return out;
}

at::Tensor interleave_stacked_op(const at::Tensor& stacked) {
  return permute_rows(stacked, "interleave_stacked", "stacked", blockfuse::interleave_stacked_gate_up,
                      blockfuse::interleave_stacked_gate_up_host);
}

at::Tensor deinterleave_to_stacked_op(const at::Tensor& w) {
  return permute_rows(w, "deinterleave_to_stacked", "w", blockfuse::deinterleave_to_stacked,
                      blockfuse::deinterleave_to_stacked_host);
}

std::tuple<at::Tensor, at::Tensor> deinterleave_gate_up_op(const at::Tensor& w) {
  constexpr const char* fn = "deinterleave_gate_up";
  const DType dt = check_layout_args(fn, {{&w, "w"}});
  const RowView wv = as_matrix(w, fn, "w");
  TORCH_CHECK_VALUE(wv.rows % 2 == 0, "blockfuse.", fn, ": argument 'w' has ", num(wv.rows),
                    " rows; required: an even number 2U");
  const int64_t U = wv.rows / 2;
  at::Tensor gate = at::empty({U, wv.cols}, w.options());
  at::Tensor up = at::empty({U, wv.cols}, w.options());
  const RowView hv{U, wv.cols, wv.cols};
  const ConstMatrix in = cview(w, wv, dt);
  const Matrix g = mview(gate, hv, dt), u = mview(up, hv, dt);
  on_tensor_device(
      w, [&](cudaStream_t s) { blockfuse::deinterleave_gate_up(in, g, u, s); },
      [&] { blockfuse::deinterleave_gate_up_host(in, g, u); });
  return {gate, up};
}

void impls(torch::Library& m) {
  m.impl("interleave_gate_up", &interleave_gate_up_op);
  m.impl("interleave_stacked", &interleave_stacked_op);
  m.impl("deinterleave_gate_up", &deinterleave_gate_up_op);
  m.impl("deinterleave_to_stacked", &deinterleave_to_stacked_op);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(blockfuse, m) {
  def_ops(m, {"gated_up(Tensor x, Tensor w, str activation='silu', bool recompute=False) -> Tensor",
               "gated_mlp(Tensor x, Tensor w, Tensor w_down, str activation='silu') -> Tensor",
               "gated_mlp_dgated_(Tensor dy, Tensor w_down, Tensor(a!) z, str activation='silu', bool want_h=True) "
               "-> Tensor",
               "interleave_gate_up(Tensor gate, Tensor up) -> Tensor",
               "interleave_stacked(Tensor stacked) -> Tensor",
               "deinterleave_gate_up(Tensor w) -> (Tensor, Tensor)",
               "deinterleave_to_stacked(Tensor w) -> Tensor"});
}

// gated_up and gated_mlp have CPU kernels of their own (they only raise); the layout helpers run on
// both backends.
TORCH_LIBRARY_IMPL(blockfuse, CUDA, m) {
  m.impl("gated_up", &gated_up_cuda);
  m.impl("gated_mlp", &gated_mlp_cuda);
  m.impl("gated_mlp_dgated_", &gated_mlp_dgated_cuda);
  impls(m);
}
TORCH_LIBRARY_IMPL(blockfuse, CPU, m) {
  m.impl("gated_up", &gated_up_cpu);
  m.impl("gated_mlp", &gated_mlp_cpu);
  m.impl("gated_mlp_dgated_", &gated_mlp_dgated_cpu);
  impls(m);
}
TORCH_LIBRARY_IMPL(blockfuse, Autograd, m) {
  m.impl("gated_up", &gated_up_autograd);
  m.impl("gated_mlp", &gated_mlp_autograd);
}
