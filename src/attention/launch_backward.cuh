// Internal: instantiation and launch of the backward kernels for one head dim.
#pragma once

#include "attention/backward_sm80.cuh"
#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"

namespace blockfuse::attn::bwd {

template <class T, int D>
void launch_typed(const BwdParams& p, int batch, int rows_dsum, cudaStream_t stream, DkdvLauncher dkdv) {
  // A varlen call may have no key (max_seqlen_k = 0, as the forward allows): no dK/dV grid, and the
  // dQ kernel writes dq = 0. Queries are never absent here (the launcher returns before).
  bwd_dsum_kernel<T, D><<<dim3((rows_dsum + 3) / 4, p.heads_q, batch), 128, 0, stream>>>(p, rows_dsum);
  BF_CHECK_LAUNCH();
  if (p.dq_accum != nullptr) {
    // dQ by atomics in the dK/dV kernel (into dq_accum, zeroed by the launcher; ordered in the sm90a
    // kernel's deterministic mode), then converted; no dQ kernel.
    if (p.seqlen_k > 0 && dkdv != nullptr) {
      dkdv(p, stream);
    } else if (p.seqlen_k > 0) {
      auto kernel = bwd_dkdv_kernel<T, D, true>;
      static blockfuse::detail::PerDeviceCache<bool> once;
      blockfuse::detail::opt_in_dynamic_smem_once(once, kernel, dkdv_smem_bytes<D>());
      kernel<<<dim3((p.seqlen_k + kBlock - 1) / kBlock, p.heads_kv, p.batch), kThreads, dkdv_smem_bytes<D>(), stream>>>(p);
      BF_CHECK_LAUNCH();
    }
    const int64_t chunks = int64_t(rows_dsum) * (D / 8);
    bwd_dq_convert_kernel<T, D><<<dim3(unsigned((chunks + 127) / 128), p.heads_q, batch), 128, 0, stream>>>(p, rows_dsum);
    BF_CHECK_LAUNCH();
    return;
  }
  if (p.seqlen_k > 0) {
    auto kernel = bwd_dkdv_kernel<T, D>;
    static blockfuse::detail::PerDeviceCache<bool> once;
    blockfuse::detail::opt_in_dynamic_smem_once(once, kernel, dkdv_smem_bytes<D>());
    kernel<<<dim3((p.seqlen_k + kBlock - 1) / kBlock, p.heads_kv, p.batch), kThreads, dkdv_smem_bytes<D>(), stream>>>(p);
    BF_CHECK_LAUNCH();
  }
  {
    auto kernel = bwd_dq_kernel<T, D>;
    static blockfuse::detail::PerDeviceCache<bool> once;
    blockfuse::detail::opt_in_dynamic_smem_once(once, kernel, dq_smem_bytes<D>());
    kernel<<<dim3((p.seqlen_q + kBlock - 1) / kBlock, p.heads_q, p.batch), kThreads, dq_smem_bytes<D>(), stream>>>(p);
    BF_CHECK_LAUNCH();
  }
}

template <int D>
void launch_head_dim(const BwdParams& p, DType dtype, int batch, int rows_dsum, cudaStream_t stream,
                     DkdvLauncher dkdv) {
  if (dtype == DType::kBF16)
    launch_typed<__nv_bfloat16, D>(p, batch, rows_dsum, stream, dkdv);
  else
    launch_typed<__half, D>(p, batch, rows_dsum, stream, dkdv);
}

}  // namespace blockfuse::attn::bwd
