// The PyTorch ops of the fused decode MLP (include/blockfuse/fused_mlp.h): the whole gated MLP of
// a decode step (1..32 token rows) in one launch, dense or over router-selected neuron blocks.
//
// Schemas (registered at the end; the fake implementations are in the Python package):
//   fused_mlp(x [..., K], w_gate_up [2U, K], w_down_t [U, K], activation, deterministic) -> y [..., K]
//   fused_mlp_sparse(x, w_gate_up, w_down_t, indices, counts, block_size, activation, deterministic)
//       indices int32 [capacity] + counts int32 [1]: one sorted list of neuron blocks for the batch;
//       indices int32 [M, ld]    + counts int32 [M]: one sorted list per token row.
//   neuron_block_router(x, router [U / block_size, K], mode, threshold, top_k)
//       -> (union_indices [n_blocks], union_count [1], token_indices [M, n_blocks], token_counts [M])
//   fused_mlp_reserve(w_down_t, deterministic) -> int        (workspace bytes reserved, for capture)
// x has at most 32 rows (its leading dims flattened). w_gate_up is interleaved (row 2j = up_j, row
// 2j+1 = gate_j, ops.interleave_gate_up); w_down_t is down_proj.weight transposed, made contiguous
// once. The lists' contents are trusted (checking them would synchronise):
// ops.fused_mlp_check_blocks validates them. Workspaces are the binding's (workspace.h).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "binding.h"
#include "workspace.h"

namespace {

using namespace blockfuse_torch;

constexpr const char* kReserveHint = "blockfuse.ops.fused_mlp_reserve(w_down_t)";

blockfuse::FusedMlpConfig mlp_config(bool deterministic) {
  blockfuse::FusedMlpConfig c;
  c.reduction = deterministic ? blockfuse::MlpReduction::kDeterministic : blockfuse::MlpReduction::kAtomic;
  return c;
}

// The three matrices and the output of a fused-MLP call, checked and viewed.
struct MlpArgs {
  DType dt;
  RowView xv, guv, dv;
  at::Tensor y;
  RowView yv;
};

MlpArgs mlp_args(const at::Tensor& x, const at::Tensor& w_gate_up, const at::Tensor& w_down_t, const char* fn) {
  MlpArgs a;
  a.dt = check_operands(fn, x, {{&w_gate_up, "w_gate_up"}, {&w_down_t, "w_down_t"}});
  a.xv = as_rows(x, fn, "x");
  a.guv = as_matrix(w_gate_up, fn, "w_gate_up");
  a.dv = as_matrix(w_down_t, fn, "w_down_t");
  a.y = at::empty(x.sizes(), x.options());
  a.yv = {a.xv.rows, a.xv.cols, std::max<int64_t>(a.xv.cols, 1)};
  return a;
}

// An int32 CUDA tensor on x's device with contiguous rows (a list or its counts).
void check_list_tensor(const at::Tensor& t, const at::Tensor& x, const char* fn, const char* arg) {
  check_cuda(t, fn, arg);
  check_same_device(t, x, fn, arg, "x");
  TORCH_CHECK_VALUE(t.scalar_type() == at::kInt, "blockfuse.", fn, ": argument '", arg, "' has dtype ",
                    dtype_str(t), "; required: torch.int32");
  TORCH_CHECK_VALUE(t.is_contiguous(), "blockfuse.", fn, ": argument '", arg, "' has ", shape_str(t),
                    "; required: a contiguous tensor");
}

size_t mlp_workspace_need(int64_t m, int64_t k, int64_t groups, bool deterministic) {
  size_t need = 0;
  call_blockfuse([&] { need = blockfuse::fused_mlp_workspace_size(m, k, groups, mlp_config(deterministic)); });
  return need;
}

// One buffer per K (workspace.h: the accumulator and the deterministic slots move with K).
void* mlp_workspace(const at::Tensor& t, int64_t k, size_t need, size_t* bytes, const char* fn) {
  return device_workspace(WorkspaceKind::kFusedMlp, t.device().index(), std::max<size_t>(need, 16),
                          current_stream(t), bytes, fn, kReserveHint, k);
}

at::Tensor fused_mlp_op(const at::Tensor& x, const at::Tensor& w_gate_up, const at::Tensor& w_down_t,
                        c10::string_view activation, bool deterministic) {
  constexpr const char* fn = "fused_mlp";
  const blockfuse::Activation act = parse_activation(activation, fn);
  MlpArgs a = mlp_args(x, w_gate_up, w_down_t, fn);  // checks the devices first
  c10::cuda::CUDAGuard guard(x.device());
  // Rows, K and U are checked by the launcher; the workspace size needs a valid M and K first.
  if (a.xv.rows == 0) return a.y;  // an empty batch: nothing to launch
  const bool sizes_ok = a.xv.rows <= blockfuse::kFusedMlpMaxM && a.xv.cols % 8 == 0;
  const size_t need = sizes_ok ? mlp_workspace_need(a.xv.rows, a.xv.cols, a.dv.rows / 16, deterministic) : 0;
  size_t bytes = 0;
  void* ws = sizes_ok ? mlp_workspace(x, a.xv.cols, need, &bytes, fn) : nullptr;
  call_blockfuse([&] {
    blockfuse::fused_mlp(cview(x, a.xv, a.dt), cview(w_gate_up, a.guv, a.dt), cview(w_down_t, a.dv, a.dt),
                         mview(a.y, a.yv, a.dt), act, ws, bytes, mlp_config(deterministic), current_stream(x));
  });
  return a.y;
}

at::Tensor fused_mlp_sparse_op(const at::Tensor& x, const at::Tensor& w_gate_up, const at::Tensor& w_down_t,
                               const at::Tensor& indices, const at::Tensor& counts, int64_t block_size,
                               c10::string_view activation, bool deterministic) {
  constexpr const char* fn = "fused_mlp_sparse";
  const blockfuse::Activation act = parse_activation(activation, fn);
  MlpArgs a = mlp_args(x, w_gate_up, w_down_t, fn);  // checks the devices first
  c10::cuda::CUDAGuard guard(x.device());
  check_list_tensor(indices, x, fn, "indices");
  check_list_tensor(counts, x, fn, "counts");
  TORCH_CHECK_VALUE(block_size == 16 || block_size == 32 || block_size == 64, "blockfuse.", fn,
                    ": argument 'block_size' is ", num(block_size), "; required: 16, 32 or 64");
  const bool per_token = indices.dim() == 2;
  if (per_token) {
    TORCH_CHECK_VALUE(indices.size(0) == a.xv.rows, "blockfuse.", fn, ": argument 'indices' has sizes ",
                      dims(indices.sizes()), "; required: [M, ld] with M = x's rows (", num(a.xv.rows),
                      ") for per-token lists, or 1-D [capacity] for one list");
    TORCH_CHECK_VALUE(counts.dim() == 1 && counts.size(0) == a.xv.rows, "blockfuse.", fn,
                      ": argument 'counts' has sizes ", dims(counts.sizes()), "; required: [M] = [",
                      num(a.xv.rows), "] (one count per token row of 'indices')");
  } else {
    TORCH_CHECK_VALUE(indices.dim() == 1, "blockfuse.", fn, ": argument 'indices' has sizes ",
                      dims(indices.sizes()), "; required: 1-D [capacity] (one list) or 2-D [M, ld] (per token)");
    TORCH_CHECK_VALUE(counts.dim() == 1 && counts.size(0) == 1, "blockfuse.", fn, ": argument 'counts' has sizes ",
                      dims(counts.sizes()), "; required: [1] (the number of entries of the 1-D 'indices')");
  }
  if (a.xv.rows == 0) return a.y;  // an empty batch: nothing to launch
  // Sizes the launcher rejects get no workspace (it names the argument before looking at one).
  const int64_t u = a.dv.rows;
  const int64_t list_len = per_token ? indices.size(1) : indices.size(0);
  const bool sizes_ok = a.xv.rows <= blockfuse::kFusedMlpMaxM && a.xv.cols % 8 == 0 && u % block_size == 0 &&
                        list_len <= u / block_size;
  const int64_t groups = per_token ? u / 16 : indices.size(0) * (block_size / 16);
  const size_t need = sizes_ok ? mlp_workspace_need(a.xv.rows, a.xv.cols, groups, deterministic) : 0;
  size_t bytes = 0;
  void* ws = sizes_ok ? mlp_workspace(x, a.xv.cols, need, &bytes, fn) : nullptr;
  const auto* idx = indices.numel() > 0 ? indices.data_ptr<int32_t>() : nullptr;
  const auto* cnt = counts.data_ptr<int32_t>();
  const auto run = [&](auto blocks) {  // NeuronBlockList or PerTokenNeuronBlocks
    call_blockfuse([&] {
      blockfuse::fused_mlp_sparse(cview(x, a.xv, a.dt), cview(w_gate_up, a.guv, a.dt), cview(w_down_t, a.dv, a.dt),
                                  mview(a.y, a.yv, a.dt), act, blocks, ws, bytes, mlp_config(deterministic),
                                  current_stream(x));
    });
  };
  if (per_token)
    run(blockfuse::PerTokenNeuronBlocks{idx, cnt, indices.size(1), int(block_size)});
  else
    run(blockfuse::NeuronBlockList{idx, cnt, indices.size(0), int(block_size)});
  return a.y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> neuron_block_router_op(const at::Tensor& x,
                                                                                  const at::Tensor& router,
                                                                                  c10::string_view mode,
                                                                                  double threshold, int64_t top_k) {
  constexpr const char* fn = "neuron_block_router";
  TORCH_CHECK_VALUE(mode == "threshold" || mode == "topk", "blockfuse.", fn, ": argument 'mode' is '",
                    std::string(mode.data(), mode.size()), "'; required: 'threshold' or 'topk'");
  const DType dt = check_operands(fn, x, {{&router, "router"}});
  const RowView xv = as_rows(x, fn, "x");
  const RowView rv = as_matrix(router, fn, "router");
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t m = xv.rows, n = rv.rows;
  const auto i32 = x.options().dtype(at::kInt);
  std::vector<int64_t> lead(x.sizes().begin(), x.sizes().end() - 1);
  std::vector<int64_t> tok_shape = lead;
  tok_shape.push_back(n);
  at::Tensor union_idx = at::empty({n}, i32), union_cnt = at::empty({1}, i32);
  at::Tensor tok_idx = at::empty(tok_shape, i32), tok_cnt = at::empty(lead, i32);
  const bool sizes_ok = m >= 1 && m <= blockfuse::kFusedMlpMaxM && n >= 1 && n <= 8192;
  size_t need = 0, bytes = 0;
  if (sizes_ok) call_blockfuse([&] { need = blockfuse::router_workspace_size(m, n); });
  void* ws = sizes_ok ? device_workspace(WorkspaceKind::kRouter, x.device().index(), std::max<size_t>(need, 16),
                                         current_stream(x), &bytes, fn, kReserveHint)
                      : nullptr;
  blockfuse::RouterOutputs out{union_idx.data_ptr<int32_t>(), union_cnt.data_ptr<int32_t>(),
                               tok_idx.numel() ? tok_idx.data_ptr<int32_t>() : nullptr, tok_cnt.data_ptr<int32_t>()};
  call_blockfuse([&] {
    blockfuse::neuron_block_router(cview(x, xv, dt), cview(router, rv, dt),
                                   mode == "topk" ? blockfuse::RouterMode::kTopK : blockfuse::RouterMode::kThreshold,
                                   static_cast<float>(threshold), static_cast<int>(top_k), out, ws, bytes,
                                   current_stream(x));
  });
  return {union_idx, union_cnt, tok_idx, tok_cnt};
}

// Reserves the fused MLP's and the router's workspaces for every call with up to 32 rows and this
// w_down_t [U, K] (dense or sparse, any block size), so such calls can then be captured.
int64_t fused_mlp_reserve_op(const at::Tensor& w_down_t, bool deterministic) {
  constexpr const char* fn = "fused_mlp_reserve";
  check_cuda(w_down_t, fn, "w_down_t");
  TORCH_CHECK_VALUE(w_down_t.dim() == 2, "blockfuse.", fn, ": argument 'w_down_t' has sizes ",
                    dims(w_down_t.sizes()), "; required: a 2-D weight [U, K]");
  const int64_t u = w_down_t.size(0), k = w_down_t.size(1);
  TORCH_CHECK_VALUE(u >= 16 && u % 16 == 0 && k % 8 == 0, "blockfuse.", fn, ": argument 'w_down_t' has sizes ",
                    dims(w_down_t.sizes()), "; required: U % 16 == 0 and K % 8 == 0");
  c10::cuda::CUDAGuard guard(w_down_t.device());
  const size_t need = mlp_workspace_need(blockfuse::kFusedMlpMaxM, k, u / 16, deterministic);
  size_t bytes = 0, router_bytes = 0;
  mlp_workspace(w_down_t, k, need, &bytes, fn);
  size_t router_need = 0;
  call_blockfuse([&] { router_need = blockfuse::router_workspace_size(blockfuse::kFusedMlpMaxM, std::min<int64_t>(u / 16, 8192)); });
  device_workspace(WorkspaceKind::kRouter, w_down_t.device().index(), router_need, current_stream(w_down_t),
                   &router_bytes, fn, kReserveHint);
  return static_cast<int64_t>(bytes + router_bytes);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(blockfuse, m) {
  def_ops(m, {"fused_mlp(Tensor x, Tensor w_gate_up, Tensor w_down_t, str activation='silu', bool deterministic=False) "
               "-> Tensor",
               "fused_mlp_sparse(Tensor x, Tensor w_gate_up, Tensor w_down_t, Tensor indices, Tensor counts, "
               "int block_size, str activation='silu', bool deterministic=False) -> Tensor",
               "neuron_block_router(Tensor x, Tensor router, str mode='threshold', float threshold=0.5, int top_k=0) "
               "-> (Tensor, Tensor, Tensor, Tensor)"});
  m.def("fused_mlp_reserve(Tensor w_down_t, bool deterministic=False) -> int");  // a host int: no fake, not traced
}

BLOCKFUSE_TORCH_IMPLS(m) {
  m.impl("fused_mlp", &fused_mlp_op);
  m.impl("fused_mlp_sparse", &fused_mlp_sparse_op);
  m.impl("neuron_block_router", &neuron_block_router_op);
  m.impl("fused_mlp_reserve", &fused_mlp_reserve_op);
}
