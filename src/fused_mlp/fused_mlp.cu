// fused_mlp: validation, configuration and launch of the one-launch MLP kernel
// (fused_mlp_sm80.cuh; the heuristic is heuristic.cpp), and the device-side list check.
#include "blockfuse/fused_mlp.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/device.h"
#include "common/check.h"
#include "common/launch.h"
#include "fused_mlp/fused_mlp_sm80.cuh"
#include "fused_mlp/params.h"

namespace blockfuse {

namespace {

using detail::cat;
using detail::throw_arg;
using fmlp::ListMode;

constexpr const char* kFn = "fused_mlp";
constexpr const char* kSparseFn = "fused_mlp_sparse";

// The problem as the checks see it.
struct Problem {
  int64_t m = 0, k = 0, u = 0;
};

// Everything that needs no device: shapes, dtypes, alignment, overlaps by address.
Problem validate_matrices(const char* fn, const ConstMatrix& x, const ConstMatrix& wgu, const ConstMatrix& wd,
                          const Matrix& y, Activation act) {
  detail::check_matrix_shape(fn, "x", x);
  detail::check_matrix_shape(fn, "w_gate_up", wgu);
  detail::check_matrix_shape(fn, "w_down_t", wd);
  detail::check_matrix_shape(fn, "y", y);
  if (x.rows < 1 || x.rows > kFusedMlpMaxM)
    throw_arg(fn, "x", cat("has M = ", x.rows, " rows"),
              cat("1 <= M <= ", kFusedMlpMaxM, " (the fused MLP is for decode batches; for more rows use gated_up and a GEMM)"));
  detail::check_same_dtype(fn, "w_gate_up", wgu, "x", x.dtype);
  detail::check_same_dtype(fn, "w_down_t", wd, "x", x.dtype);
  detail::check_same_dtype(fn, "y", y, "x", x.dtype);
  const int64_t k = x.cols, u = wd.rows;
  if (k < 8 || k % 8 != 0) throw_arg(fn, "x", cat("has K = ", k, " columns"), "K >= 8 and K % 8 == 0 (16-byte loads)");
  if (wgu.cols != k) throw_arg(fn, "w_gate_up", cat("has cols = ", wgu.cols), cat("w_gate_up.cols == x.cols == K (= ", k, ")"));
  if (wd.cols != k) throw_arg(fn, "w_down_t", cat("has cols = ", wd.cols), cat("w_down_t.cols == K (= ", k, "): w_down_t is down_proj.weight transposed, [U, K]"));
  if (u < 16 || u % 16 != 0)
    throw_arg(fn, "w_down_t", cat("has U = ", u, " rows"), "U >= 16 and U % 16 == 0 (16-neuron groups)");
  if (wgu.rows != 2 * u)
    throw_arg(fn, "w_gate_up", cat("has rows = ", wgu.rows), cat("rows == 2 * w_down_t.rows == 2U (= ", 2 * u, ")"));
  if (y.rows != x.rows) throw_arg(fn, "y", cat("has rows = ", y.rows), cat("y.rows == x.rows (= ", x.rows, ")"));
  if (y.cols != k) throw_arg(fn, "y", cat("has cols = ", y.cols), cat("y.cols == K (= ", k, ")"));
  if (act != Activation::kSiLU && act != Activation::kGeluTanh)
    throw_arg(fn, "act", cat("is ", int(act)), "Activation::kSiLU or Activation::kGeluTanh");
  detail::check_alignment(fn, "x", x, 16, 8);
  detail::check_alignment(fn, "w_gate_up", wgu, 16, 8);
  detail::check_alignment(fn, "w_down_t", wd, 16, 8);
  detail::check_alignment(fn, "y", y, 2, 1);
  detail::check_no_overlap(fn, "y", y, "x", x);
  detail::check_no_overlap(fn, "y", y, "w_gate_up", wgu);
  detail::check_no_overlap(fn, "y", y, "w_down_t", wd);
  return Problem{x.rows, k, u};
}

void validate_config(const char* fn, const FusedMlpConfig& c) {
  if (c.neurons_per_block != 0 && c.neurons_per_block != 16 && c.neurons_per_block != 32 && c.neurons_per_block != 64)
    throw_arg(fn, "config", cat("has neurons_per_block = ", c.neurons_per_block), "0 (heuristic), 16, 32 or 64");
  if (c.reduction != MlpReduction::kAtomic && c.reduction != MlpReduction::kDeterministic)
    throw_arg(fn, "config", cat("has reduction = ", int(c.reduction)), "MlpReduction::kAtomic or kDeterministic");
  if (c.split != MlpSplitRule::kAuto && c.split != MlpSplitRule::kNever && c.split != MlpSplitRule::kAlways)
    throw_arg(fn, "config", cat("has split = ", int(c.split)), "MlpSplitRule::kAuto, kNever or kAlways");
  if (!fmlp::valid_block_warps(c.block_warps))
    throw_arg(fn, "config", cat("has block_warps = ", c.block_warps), "0 (the rule), 8 or 16");
}

void validate_block_size(const char* fn, const char* arg, int bs, int64_t u) {
  if (bs != 16 && bs != 32 && bs != 64) throw_arg(fn, arg, cat("has block_size = ", bs), "16, 32 or 64");
  if (u % bs != 0) throw_arg(fn, arg, cat("has block_size = ", bs, " for U = ", u), "block_size dividing U");
}

void check_int_pointer(const char* fn, const char* arg, const int32_t* p) {
  if (p == nullptr) throw_arg(fn, arg, "is null", "a device pointer to int32");
  if (reinterpret_cast<std::uintptr_t>(p) % 4 != 0)
    throw_arg(fn, arg, cat("pointer ", static_cast<const void*>(p), " is not 4-byte aligned"), "a 4-byte aligned pointer");
}

void validate_workspace(const char* fn, const Problem& pr, const Matrix& y, void* ws, size_t bytes, size_t need,
                        const ConstMatrix& x, const ConstMatrix& wgu, const ConstMatrix& wd) {
  if (ws == nullptr)
    throw_arg(fn, "workspace", "is null", cat("a zero-initialised device buffer of >= ", need, " bytes (fused_mlp_workspace_size)"));
  if (bytes < need)
    throw_arg(fn, "workspace_bytes", cat("is ", bytes), cat(">= ", need, " (fused_mlp_workspace_size for M = ", pr.m, ")"));
  if (reinterpret_cast<std::uintptr_t>(ws) % 16 != 0)
    throw_arg(fn, "workspace", cat("pointer ", static_cast<const void*>(ws), " is not 16-byte aligned"), "a 16-byte aligned pointer");
  const detail::Span w = detail::span_of_bytes(ws, int64_t(need));
  detail::check_no_overlap(fn, "workspace", w, "y", detail::span_of(ConstMatrix(y)));
  detail::check_no_overlap(fn, "workspace", w, "x", detail::span_of(x));
  detail::check_no_overlap(fn, "workspace", w, "w_gate_up", detail::span_of(wgu));
  detail::check_no_overlap(fn, "workspace", w, "w_down_t", detail::span_of(wd));
}

int sm_count_now() { return detail::current_device_spec().sm_count; }

int resolve_neurons(const FusedMlpConfig& c, int64_t m, int64_t k, int64_t groups) {
  return c.neurons_per_block != 0 ? c.neurons_per_block : fused_mlp_heuristic(m, k, groups, sm_count_now()).neurons_per_block;
}

// Launches as clusters of p.split CTAs when p.split > 1 (the grid a multiple of it).
template <class T, int NT, int NG>
void launch_ng(const fmlp::FusedMlpParams& p, unsigned grid, cudaStream_t s) {
  const auto go = [&](auto kernel, int warps) {
    detail::launch_kernel(kernel, dim3(grid), dim3(warps * 32), 0, s, dim3(unsigned(p.split), 1, 1), false, p);
  };
  if constexpr (NT == 1) {  // wider blocks (params.h: auto_block_warps)
    if (p.warps == 16) return go(fmlp::fused_mlp_kernel<T, 1, NG, 16>, 16);
  }
  go(fmlp::fused_mlp_kernel<T, NT, NG>, fmlp::kWarps);
}

template <class T, int NT>
void launch_nt(const fmlp::FusedMlpParams& p, int ng, unsigned grid, cudaStream_t s) {
  switch (ng) {
    case 1: launch_ng<T, NT, 1>(p, grid, s); break;
    case 2: launch_ng<T, NT, 2>(p, grid, s); break;
    default: launch_ng<T, NT, 4>(p, grid, s); break;
  }
}

// Whether split launches may run here: sm_90+ with sm_90 code loaded for the kernel (a build for
// sm_80 only runs on a Hopper through PTX, where the split path is a trap).
bool split_path_available() {
  static detail::PerDeviceCache<bool> cache;
  return detail::sm90_code_loaded(cache, reinterpret_cast<const void*>(fmlp::fused_mlp_kernel<__nv_bfloat16, 1, 4>));
}

// Whether the deterministic mode's second launch may carry the PDL attribute (common/launch.h).
bool sum_pdl_available() {
  static detail::PerDeviceCache<bool> cache;
  return detail::pdl_launchable(cache, reinterpret_cast<const void*>(fmlp::fused_mlp_sum_kernel<__nv_bfloat16>));
}

template <class T>
void launch(const fmlp::FusedMlpParams& p, int ng, unsigned grid, cudaStream_t s) {
  switch (int(fmlp::ceil_div(p.m, 8))) {
    case 1: launch_nt<T, 1>(p, ng, grid, s); break;
    case 2: launch_nt<T, 2>(p, ng, grid, s); break;
    case 3: launch_nt<T, 3>(p, ng, grid, s); break;
    default: launch_nt<T, 4>(p, ng, grid, s); break;
  }
  BF_CHECK_LAUNCH();
  if (p.deterministic) {  // the slots' fixed-order sum (fused_mlp_sum_kernel)
    const int lanes = fmlp::sum_lanes(p.m, p.k, grid, sm_count_now());
    detail::launch_kernel(fmlp::fused_mlp_sum_kernel<T>, dim3(unsigned(fmlp::sum_grid(p.m, p.k, lanes))),
                          dim3(fmlp::kSumThreads), 0, s, dim3(1, 1, 1), sum_pdl_available(), p, lanes);
    BF_CHECK_LAUNCH();
  }
}

// Everything validated; the device pointers checked here, then the launch.
void run(const char* fn, const Problem& pr, const ConstMatrix& x, const ConstMatrix& wgu, const ConstMatrix& wd,
         const Matrix& y, Activation act, fmlp::FusedMlpParams p, int neurons, const FusedMlpConfig& config, void* ws,
         cudaStream_t stream, bool dynamic_groups = false) {
  const MlpReduction red = config.reduction;
  detail::check_compute_capability(fn, 8, 0);
  // Dynamic groups: one block per listed group (the most the list can need), up to 4 groups each.
  if (dynamic_groups) neurons = 16;
  // Split launches (params.h: kSplitMaxRows): clusters of 2 CTAs, a unit per listed group.
  const fmlp::SplitRule rule = config.split;
  p.split = dynamic_groups && fmlp::split_launch(pr.m, rule, split_path_available()) ? fmlp::kSplitCtas : 1;
  p.split_always = rule == fmlp::SplitRule::kAlways;
  const detail::DeviceSpec spec = detail::current_device_spec();
  p.warps = fmlp::launch_block_warps(pr.m, spec.cc_major, dynamic_groups, red == MlpReduction::kDeterministic,
                                     fmlp::dram_gbps_per_sm(spec.dram_gbps, spec.sm_count), config.block_warps);
  const int64_t grid = fmlp::grid_blocks(p.groups, neurons) * p.split;
  if (grid > 0x7fffffff) throw_arg(fn, "w_down_t", cat("has U = ", pr.u), "fewer than 2^31 neuron blocks");
  p.x = x.data;
  p.wgu = wgu.data;
  p.wd = wd.data;
  p.y = y.data;
  p.m = pr.m;
  p.k = pr.k;
  p.u = pr.u;
  p.ldx = x.ld;
  p.ldgu = wgu.ld;
  p.ldd = wd.ld;
  p.ldy = y.ld;
  p.act = int(act);
  p.deterministic = red == MlpReduction::kDeterministic;
  char* w = static_cast<char*>(ws);
  p.counters = reinterpret_cast<int*>(w);
  if (p.deterministic) {
    p.flags = reinterpret_cast<int*>(w + fmlp::deterministic_offset(pr.k));
    p.det_blocks = p.flags + grid;
    p.partials = reinterpret_cast<float*>(w + fmlp::deterministic_offset(pr.k) + fmlp::flag_bytes(grid));
  } else {
    p.acc = reinterpret_cast<float*>(w + fmlp::counter_bytes(pr.k));
  }
  p.dynamic_groups = dynamic_groups;
  p.sm_count = dynamic_groups ? sm_count_now() : 0;
  const int ng = dynamic_groups ? 4 : fmlp::groups_per_block(neurons);
  if (x.dtype == DType::kBF16)
    launch<__nv_bfloat16>(p, ng, unsigned(grid), stream);
  else
    launch<__half>(p, ng, unsigned(grid), stream);
}

void check_devices(const char* fn, const ConstMatrix& x, const ConstMatrix& wgu, const ConstMatrix& wd, const Matrix& y,
                   void* ws) {
  detail::check_device_matrix(fn, "x", x);
  detail::check_device_matrix(fn, "w_gate_up", wgu);
  detail::check_device_matrix(fn, "w_down_t", wd);
  detail::check_device_matrix(fn, "y", y);
  detail::check_device_pointer(fn, "workspace", ws);
}


// The workspace and device checks every entry point shares; returns the neurons per block. With an
// explicit block size the workspace is checked before any device query; the heuristic's choice
// needs the SM count, so its size is checked after.
int check_workspace_and_devices(const char* fn, const Problem& pr, const ConstMatrix& x, const ConstMatrix& wgu,
                                const ConstMatrix& wd, const Matrix& y, void* ws, size_t bytes, FusedMlpConfig config,
                                int64_t groups) {
  if (config.neurons_per_block != 0)
    validate_workspace(fn, pr, y, ws, bytes,
                       fmlp::workspace_bytes(pr.m, pr.k, groups, config.neurons_per_block, config.reduction), x, wgu,
                       wd);
  check_devices(fn, x, wgu, wd, y, ws);
  const int neurons = resolve_neurons(config, pr.m, pr.k, groups);
  validate_workspace(fn, pr, y, ws, bytes, fmlp::workspace_bytes(pr.m, pr.k, groups, neurons, config.reduction), x,
                     wgu, wd);
  return neurons;
}
}  // namespace

size_t fused_mlp_workspace_size(int64_t m, int64_t k, int64_t list_groups, FusedMlpConfig config) {
  constexpr const char* fn = "fused_mlp_workspace_size";
  if (m < 0 || m > kFusedMlpMaxM) throw_arg(fn, "m", cat("is ", m), cat("0 <= m <= ", kFusedMlpMaxM));
  if (k < 0 || k % 8 != 0) throw_arg(fn, "k", cat("is ", k), "k >= 0 and k % 8 == 0");
  if (list_groups < 0) throw_arg(fn, "list_groups", cat("is ", list_groups), "list_groups >= 0");
  validate_config(fn, config);
  if (m == 0 || k == 0) return 0;
  if (config.reduction == MlpReduction::kAtomic)  // independent of the block size
    return fmlp::workspace_bytes(m, k, list_groups, 64, config.reduction);
  if (config.neurons_per_block != 0)
    return fmlp::workspace_bytes(m, k, list_groups, config.neurons_per_block, config.reduction);
  size_t most = 0;
  const int sms = sm_count_now();
  for (int64_t mm = 1; mm <= m; ++mm)
    most = std::max(most, fmlp::workspace_bytes(mm, k, list_groups,
                                                fused_mlp_heuristic(mm, k, list_groups, sms).neurons_per_block,
                                                config.reduction));
  return most;
}

void fused_mlp(ConstMatrix x, ConstMatrix w_gate_up, ConstMatrix w_down_t, Matrix y, Activation act, void* workspace,
               size_t workspace_bytes, FusedMlpConfig config, cudaStream_t stream) {
  const Problem pr = validate_matrices(kFn, x, w_gate_up, w_down_t, y, act);
  validate_config(kFn, config);
  const int64_t groups = pr.u / fmlp::kGroup;
  const int neurons =
      check_workspace_and_devices(kFn, pr, x, w_gate_up, w_down_t, y, workspace, workspace_bytes, config, groups);
  fmlp::FusedMlpParams p{};
  p.mode = ListMode::kDense;
  p.list_groups_per_block = 1;
  p.list_blocks = groups;
  p.groups = groups;
  run(kFn, pr, x, w_gate_up, w_down_t, y, act, p, neurons, config, workspace, stream);
}

namespace {

// What the two sparse entry points share: a device list of neuron blocks (`len` entries per row:
// the union list's capacity, or the per-token lists' row stride ld), its checks and the launch.
struct SparseList {
  ListMode mode;
  const int32_t* idx;
  const int32_t* cnt;
  int64_t len;
  int block_size;
  const char* len_name;  // "capacity" or "ld"
  const char* cnt_name;  // "blocks.count" or "blocks.counts"
};

SparseList sparse_list(const NeuronBlockList& b) {
  return {ListMode::kUnion, b.indices, b.count, b.capacity, b.block_size, "capacity", "blocks.count"};
}
SparseList sparse_list(const PerTokenNeuronBlocks& b) {
  return {ListMode::kPerToken, b.indices, b.counts, b.ld, b.block_size, "ld", "blocks.counts"};
}

void run_sparse(const SparseList& l, const ConstMatrix& x, const ConstMatrix& w_gate_up, const ConstMatrix& w_down_t,
                const Matrix& y, Activation act, void* workspace, size_t workspace_bytes, FusedMlpConfig config,
                cudaStream_t stream) {
  const Problem pr = validate_matrices(kSparseFn, x, w_gate_up, w_down_t, y, act);
  validate_config(kSparseFn, config);
  validate_block_size(kSparseFn, "blocks", l.block_size, pr.u);
  const int64_t n_blocks = pr.u / l.block_size;
  if (l.len < 0 || l.len > n_blocks)
    throw_arg(kSparseFn, "blocks", cat("has ", l.len_name, " = ", l.len),
              cat("0 <= ", l.len_name, " <= U / block_size (= ", n_blocks, ")"));
  check_int_pointer(kSparseFn, l.cnt_name, l.cnt);
  if (l.len > 0) check_int_pointer(kSparseFn, "blocks.indices", l.idx);
  // A union list covers only its blocks; with per-token lists every neuron block may be selected by
  // some token, so the grid covers all of them.
  const int64_t groups = l.mode == ListMode::kUnion ? l.len * (l.block_size / fmlp::kGroup) : pr.u / fmlp::kGroup;
  const int neurons = check_workspace_and_devices(kSparseFn, pr, x, w_gate_up, w_down_t, y, workspace,
                                                  workspace_bytes, config, groups);
  detail::check_device_pointer(kSparseFn, l.cnt_name, l.cnt);
  if (l.len > 0) detail::check_device_pointer(kSparseFn, "blocks.indices", l.idx);
  fmlp::FusedMlpParams p{};
  p.mode = l.mode;
  p.idx = l.idx;
  p.cnt = l.cnt;
  if (l.mode == ListMode::kUnion)
    p.capacity = l.len;
  else
    p.idx_ld = l.len;
  p.list_groups_per_block = l.block_size / fmlp::kGroup;
  p.list_blocks = n_blocks;
  p.groups = groups;
  // A union list's count is known only on the device: with the heuristic's block size the kernel
  // applies the heuristic to the count there (deterministic mode keeps the host's choice: its
  // workspace has one slot per block of the grid the host sized).
  const bool dynamic = l.mode == ListMode::kUnion && config.neurons_per_block == 0 &&
                       config.reduction == MlpReduction::kAtomic;
  run(kSparseFn, pr, x, w_gate_up, w_down_t, y, act, p, neurons, config, workspace, stream, dynamic);
}

}  // namespace

void fused_mlp_sparse(ConstMatrix x, ConstMatrix w_gate_up, ConstMatrix w_down_t, Matrix y, Activation act,
                      NeuronBlockList blocks, void* workspace, size_t workspace_bytes, FusedMlpConfig config,
                      cudaStream_t stream) {
  run_sparse(sparse_list(blocks), x, w_gate_up, w_down_t, y, act, workspace, workspace_bytes, config, stream);
}

void fused_mlp_sparse(ConstMatrix x, ConstMatrix w_gate_up, ConstMatrix w_down_t, Matrix y, Activation act,
                      PerTokenNeuronBlocks blocks, void* workspace, size_t workspace_bytes, FusedMlpConfig config,
                      cudaStream_t stream) {
  run_sparse(sparse_list(blocks), x, w_gate_up, w_down_t, y, act, workspace, workspace_bytes, config, stream);
}

// ---- debug check of device lists -----------------------------------------------------------------

namespace {

// err[0]: the smallest flat position (row · (ld + 1) + i, i == ld for the count) found bad, err[1]
// its code (1: count out of range, 2: index out of range, 3: not strictly increasing).
__global__ void check_blocks_kernel(const int32_t* idx, const int32_t* counts, int64_t rows, int64_t ld,
                                    int64_t n_blocks, unsigned long long* err) {
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < rows * (ld + 1); q += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = q / (ld + 1), i = q % (ld + 1);
    const int64_t c = counts[r];
    int code = 0;
    if (i == ld) {
      if (c < 0 || c > ld) code = 1;
    } else if (i < c && c <= ld) {
      const int64_t v = idx[r * ld + i];
      if (v < 0 || v >= n_blocks) code = 2;
      else if (i > 0 && idx[r * ld + i - 1] >= v) code = 3;
    }
    if (code) atomicMin(err, (static_cast<unsigned long long>(q) << 2) | unsigned(code));
  }
}

}  // namespace

void fused_mlp_check_blocks(const int32_t* indices, const int32_t* counts, int64_t rows, int64_t ld, int64_t n_blocks,
                            cudaStream_t stream) {
  constexpr const char* fn = "fused_mlp_check_blocks";
  if (rows < 1 || rows > kFusedMlpMaxM) throw_arg(fn, "rows", cat("is ", rows), cat("1 <= rows <= ", kFusedMlpMaxM));
  if (ld < 0) throw_arg(fn, "ld", cat("is ", ld), "ld >= 0");
  if (n_blocks < 1) throw_arg(fn, "n_blocks", cat("is ", n_blocks), "n_blocks >= 1");
  check_int_pointer(fn, "counts", counts);
  if (ld > 0) check_int_pointer(fn, "indices", indices);
  detail::check_device_pointer(fn, "counts", counts);
  if (ld > 0) detail::check_device_pointer(fn, "indices", indices);
  unsigned long long* err = nullptr;
  BF_CUDA_CHECK(cudaMalloc(&err, sizeof *err));
  const unsigned long long none = ~0ull;
  unsigned long long e = none;
  cudaError_t rc = cudaMemcpyAsync(err, &none, sizeof none, cudaMemcpyHostToDevice, stream);
  if (rc == cudaSuccess) {
    const int64_t total = rows * (ld + 1);
    const unsigned grid = unsigned(std::min<int64_t>(fmlp::ceil_div(total, 256), 1024));
    check_blocks_kernel<<<grid, 256, 0, stream>>>(indices, counts, rows, ld, n_blocks, err);
    rc = cudaGetLastError();
  }
  if (rc == cudaSuccess) rc = cudaMemcpyAsync(&e, err, sizeof e, cudaMemcpyDeviceToHost, stream);
  if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
  cudaFree(err);
  BF_CUDA_CHECK(rc);
  if (e == none) return;
  const int64_t q = int64_t(e >> 2), r = q / (ld + 1), i = q % (ld + 1);
  const int code = int(e & 3);
  if (code == 1) throw_arg(fn, "counts", cat("[", r, "] is out of range"), cat("0 <= count <= ", ld));
  if (code == 2) throw_arg(fn, "indices", cat("[", r, "][", i, "] is out of range"), cat("0 <= index < ", n_blocks));
  throw_arg(fn, "indices", cat("[", r, "][", i, "] is not greater than the entry before it"),
            "sorted ascending, no duplicates");
}

}  // namespace blockfuse
