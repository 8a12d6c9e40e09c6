// The PyTorch ops of the decode GEMM (include/blockfuse/decode_gemm.h): y = x · wᵀ for 1..32 rows.
//   decode_gemm(x [..., K] with <= 32 rows, w [N, K]) -> y [..., N]
//   decode_gemm_reserve(w [N, K]) -> int                       (workspace bytes reserved, for capture)
// Schemas at the end; the fake implementation is in the Python package. The split-K workspace is
// the binding's (workspace.h), shared with gated_up's decode path: a shape must have run once
// eagerly, or ops.decode_gemm_reserve(w), before it is captured into a CUDA graph.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <vector>

#include "binding.h"
#include "workspace.h"

namespace {

using namespace blockfuse_torch;

at::Tensor decode_gemm_op(const at::Tensor& x, const at::Tensor& w) {
  constexpr const char* fn = "decode_gemm";
  const DType dt = check_operands(fn, x, {{&w, "w"}});
  const RowView xv = as_rows(x, fn, "x");
  const RowView wv = as_matrix(w, fn, "w");
  TORCH_CHECK_VALUE(wv.cols == xv.cols, "blockfuse.decode_gemm: argument 'w' has sizes ", dims(w.sizes()),
                    "; required: w.size(1) == x.size(-1) (K = ", num(xv.cols), ")");
  const int device = x.device().index();
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty(with_last(x, wv.rows), x.options());
  const RowView yv{xv.rows, wv.rows, wv.rows};
  if (xv.rows == 0) return y;
  const cudaStream_t stream = current_stream(x);
  const size_t need = decode_workspace_need(xv.rows, wv.rows, xv.cols, device);
  size_t ws_bytes = 0;
  void* ws = need > 0 ? device_workspace(WorkspaceKind::kDecodeGemm, device, need, stream, &ws_bytes, fn,
                                         kDecodeReserveHint)
                       : nullptr;
  call_blockfuse([&] {
    blockfuse::decode_gemm(cview(x, xv, dt), cview(w, wv, dt), mview(y, yv, dt), ws, ws_bytes, stream);
  });
  return y;
}

// Reserves (allocates and zeroes) the workspace every decode_gemm(x, w) with 1..32 rows of x needs
// on w's device, so such calls can then be captured. Returns the bytes reserved on that device.
int64_t decode_gemm_reserve_op(const at::Tensor& w) {
  constexpr const char* fn = "decode_gemm_reserve";
  check_cuda(w, fn, "w");
  TORCH_CHECK_VALUE(w.dim() == 2, "blockfuse.", fn, ": argument 'w' has sizes ", dims(w.sizes()),
                    "; required: a 2-D weight [N, K]");
  const int device = w.device().index();
  c10::cuda::CUDAGuard guard(w.device());
  size_t need = 0;
  call_blockfuse([&] {
    need = blockfuse::decode_gemm_workspace_size(blockfuse::kDecodeGemmMaxM, w.size(0), w.size(1), device);
  });
  size_t bytes = 0;
  if (need > 0)
    device_workspace(WorkspaceKind::kDecodeGemm, device, need, current_stream(w), &bytes, fn,
                     kDecodeReserveHint);
  return static_cast<int64_t>(bytes);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(blockfuse, m) {
  def_ops(m, {"decode_gemm(Tensor x, Tensor w) -> Tensor"});
  m.def("decode_gemm_reserve(Tensor w) -> int");  // a host int: no fake, not traced
}

BLOCKFUSE_TORCH_IMPLS(m) {
  m.impl("decode_gemm", &decode_gemm_op);
  m.impl("decode_gemm_reserve", &decode_gemm_reserve_op);
}
