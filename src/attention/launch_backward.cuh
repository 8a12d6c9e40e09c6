// Internal: instantiation and launch of the backward kernels for one head dim.
#pragma once

#include "attention/backward_sm80.cuh"
#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"

namespace blockfuse::attn::bwd {

// One kernel instantiation launched with `smem` bytes of dynamic shared memory (opted in once per
// device and instantiation).
template <auto kKernel>
void launch_smem(dim3 grid, int smem, const BwdParams& p, cudaStream_t stream) {
  static blockfuse::detail::PerDeviceCache<bool> once;
  blockfuse::detail::opt_in_dynamic_smem_once(once, kKernel, smem);
  kKernel<<<grid, kThreads, smem, stream>>>(p);
  BF_CHECK_LAUNCH();
}

// The sm80 dK/dV and dQ kernels with the soft-cap chosen at compile time: chosen at run time, its
// 1 − tanh² values for dS (16 registers a thread) stay allocated in every call, and at D = 128 they
// are what spills (ptxas, sm_90: spill stores of the dQ kernel 48 bytes with them, 0 without; of the
// dK/dV kernels 72 and 120, 24 without).
template <class T, int D, bool kSoftcap>
void launch_main(const BwdParams& p, cudaStream_t stream) {
  const dim3 dkdv_grid((p.seqlen_k + kBlock - 1) / kBlock, p.heads_kv, p.batch);
  if (p.dq_accum != nullptr) {
    launch_smem<bwd_dkdv_kernel<T, D, true, kSoftcap>>(dkdv_grid, dkdv_smem_bytes<D>(), p, stream);
    return;
  }
  if (p.seqlen_k > 0) launch_smem<bwd_dkdv_kernel<T, D, false, kSoftcap>>(dkdv_grid, dkdv_smem_bytes<D>(), p, stream);
  launch_smem<bwd_dq_kernel<T, D, kSoftcap>>(dim3((p.seqlen_q + kBlock - 1) / kBlock, p.heads_q, p.batch),
                                             dq_smem_bytes<D>(), p, stream);
}

template <class T, int D>
void launch_typed(const BwdParams& p, int batch, int rows_dsum, cudaStream_t stream, DkdvLauncher dkdv) {
  // A varlen call may have no key (max_seqlen_k = 0, as the forward allows): no dK/dV grid, and the
  // dQ kernel writes dq = 0. Queries are never absent here (the launcher returns before).
  bwd_dsum_kernel<T, D><<<dim3((rows_dsum + 3) / 4, p.heads_q, batch), 128, 0, stream>>>(p, rows_dsum);
  BF_CHECK_LAUNCH();
  // With dq_accum: dQ by atomics in the dK/dV kernel (into dq_accum, zeroed by the launcher; ordered
  // in the sm90a kernel's deterministic mode), then converted, no dQ kernel; without keys only the
  // conversion (dq = 0). Else the dK/dV kernel (where there are keys) and the dQ kernel.
  if (p.dq_accum != nullptr && p.seqlen_k > 0 && dkdv != nullptr)
    dkdv(p, stream);
  else if (p.dq_accum == nullptr || p.seqlen_k > 0)
    p.softcap_mul != 0.f ? launch_main<T, D, true>(p, stream) : launch_main<T, D, false>(p, stream);
  if (p.dq_accum != nullptr) {
    const int64_t chunks = int64_t(rows_dsum) * (D / 8);
    bwd_dq_convert_kernel<T, D><<<dim3(unsigned((chunks + 127) / 128), p.heads_q, batch), 128, 0, stream>>>(p, rows_dsum);
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
