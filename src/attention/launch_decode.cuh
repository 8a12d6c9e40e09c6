// Internal: instantiation and launch of the decode kernels for one head dim (launch_decode_d<D>.cu).
#pragma once

#include "attention/decode_launch.h"
#include "attention/decode_sm80.cuh"
#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"

namespace blockfuse::attn::decode {

template <class T, int D, int MF, int kLayout>
void launch_split(const Params& p, int m_blocks, cudaStream_t stream) {
  using Tr = Traits<T, D, MF>;
  auto kernel = decode_split_kernel<T, D, MF, kLayout>;
  static blockfuse::detail::PerDeviceCache<bool> once;
  blockfuse::detail::opt_in_dynamic_smem_once(once, kernel, Tr::kSmemBytes);
  const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(p.heads_kv * p.num_splits),
                  static_cast<unsigned>(p.batch));
  kernel<<<grid, kThreads, Tr::kSmemBytes, stream>>>(p);
  BF_CHECK_LAUNCH();
}

template <class T, int D, int MF>
void launch_split(const Params& p, int m_blocks, cudaStream_t stream) {
  switch (kv_layout(p)) {
    case kPagedTile: launch_split<T, D, MF, kPagedTile>(p, m_blocks, stream); break;
    case kPagedPow2: launch_split<T, D, MF, kPagedPow2>(p, m_blocks, stream); break;
    case kPagedAny: launch_split<T, D, MF, kPagedAny>(p, m_blocks, stream); break;
    default: launch_split<T, D, MF, kContiguous>(p, m_blocks, stream);
  }
}

template <class T, int D>
void launch_typed(const Params& p, const AppendParams* append, int m_frags, int m_blocks, cudaStream_t stream) {
  if (append) {
    decode_append_kernel<T, D><<<static_cast<unsigned>(p.batch * p.seqlen_q), 256, 0, stream>>>(p, *append);
    BF_CHECK_LAUNCH();
  }
  if constexpr (max_m_frags(D) >= 4) {
    if (m_frags == 4) launch_split<T, D, 4>(p, m_blocks, stream);
  }
  if constexpr (max_m_frags(D) >= 2) {
    if (m_frags == 2) launch_split<T, D, 2>(p, m_blocks, stream);
  }
  if (m_frags == 1) launch_split<T, D, 1>(p, m_blocks, stream);
  if (p.num_splits > 1) {
    const int rows_total = p.batch * p.seqlen_q * p.heads_q;
    if (p.num_splits >= kMergeRowWarpsFrom)
      decode_merge_kernel<T, D, 4><<<static_cast<unsigned>(rows_total), 128, 0, stream>>>(p);
    else
      decode_merge_kernel<T, D, 1><<<static_cast<unsigned>((rows_total + 3) / 4), 128, 0, stream>>>(p);
    BF_CHECK_LAUNCH();
  }
}

template <int D>
void launch_head_dim(const Params& p, const AppendParams* append, DType dtype, int m_frags, int m_blocks,
                     cudaStream_t stream) {
  if (dtype == DType::kBF16)
    launch_typed<__nv_bfloat16, D>(p, append, m_frags, m_blocks, stream);
  else
    launch_typed<__half, D>(p, append, m_frags, m_blocks, stream);
}

}  // namespace blockfuse::attn::decode
