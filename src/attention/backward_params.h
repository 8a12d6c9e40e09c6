// Internal: the attention backward's Params (the forward's, plus the gradient tensors and the Dsum
// buffer) and its shared-memory sizes.
#pragma once

#include <cstdint>

#include "attention/params.h"

namespace blockfuse::attn {

struct BwdParams : Params {
  const void* dout;  // [B, Sq, Hq, D] like out
  int64_t do_batch_stride, do_row_stride, do_head_stride;
  void* dq;
  int64_t dq_batch_stride, dq_row_stride, dq_head_stride;
  void* dk;
  int64_t dk_batch_stride, dk_row_stride, dk_head_stride;
  void* dv;
  int64_t dv_batch_stride, dv_row_stride, dv_head_stride;
  float* dsum;  // rowsum(dO ∘ O), laid out like lse (the workspace)
  float scale;  // dS's factor into dQ and dK: the softmax scale (natural units)
  // Non-deterministic mode (AttentionParams::deterministic = false): the dK/dV kernel adds dS·K into
  // this fp32 [rows, Hq, D] buffer (zeroed first; rows = B·Sq, or the packed total) with atomics, and a
  // conversion kernel writes dq from it; nullptr in the deterministic mode (the dQ kernel).
  float* dq_accum;
  // dq_accum's layout: 0 for the sm80 kernels' [rows, Hq, D]; the sm90a kernel's is [Hq, this many
  // rows, D] with dq_accum_col's chunk order, the rows padded by a 64-row block past the last so a
  // partial block's whole-block reduction stays inside (its rows past the sequence add zeros).
  int64_t dq_accum_head_rows = 0;
  // The sm90a kernel's deterministic mode: the dQ additions into dq_accum of each (query head, 64-row
  // block) are made one key block after another, in order, counted by this int32 [rows, Hq] buffer
  // (zeroed first; entry row·Hq + head for the block starting at row); nullptr otherwise.
  int* dq_semaphore;
};

// The head dims the sm80 backward is compiled for (dK and dV of 16 keys × D per warp in registers).
inline bool backward_supports(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

}  // namespace blockfuse::attn

namespace blockfuse::attn::bwd {
// The launchers (launch_backward_d<D>.cu): Dsum over `rows_dsum` rows of `batch` (grid z), then
// the dK/dV and dQ kernels over p.batch sequences of at most p.seqlen_q / p.seqlen_k rows.
// `dkdv`, where given, launches the dK/dV kernel in place of the sm80 one (the sm90a kernel:
// launch_backward_sm90.h; then p.dq_accum is set in both modes, and p.dq_semaphore when deterministic).
using DkdvLauncher = void (*)(const BwdParams& p, cudaStream_t stream);
void launch_d64(const BwdParams& p, DType dtype, int batch, int rows_dsum, cudaStream_t stream,
                DkdvLauncher dkdv = nullptr);
void launch_d128(const BwdParams& p, DType dtype, int batch, int rows_dsum, cudaStream_t stream,
                 DkdvLauncher dkdv = nullptr);
}  // namespace blockfuse::attn::bwd
