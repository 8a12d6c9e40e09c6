// Internal: instantiation and launch of the sm80 attention kernel for one tile configuration.
#pragma once

#include "attention/attention_sm80.cuh"
#include "attention/launch.h"
#include "common/check.h"

namespace blockfuse::attn {

template <class Element, int D, int BM, int BN, int W>
void launch_tile(const Params& p, cudaStream_t stream) {
  using Traits = KernelTraits<Element, D, BM, BN, W>;
  static_assert(Traits::kSmemBytes == smem_bytes(TileConfig{D, BM, BN, W}), "params.h smem_bytes");
  auto kernel = attention_fwd_sm80<Traits>;
  constexpr int smem = Traits::kSmemBytes;
  // Above 48 KB the block must opt in; the attribute is per function (not a stream operation, so
  // it is allowed during graph capture).
  if (smem > 48 * 1024) BF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((p.seqlen_q + BM - 1) / BM), static_cast<unsigned>(p.heads_q),
                  static_cast<unsigned>(p.batch));
  kernel<<<grid, Traits::kNThreads, smem, stream>>>(p);
  BF_CHECK_LAUNCH();
}

template <int D, int BM, int BN, int W>
bool launch_if(const Params& p, const TileConfig& c, DType dtype, cudaStream_t stream) {
  if (c.head_dim != D || c.block_m != BM || c.block_n != BN || c.warps != W) return false;
  if (dtype == DType::kBF16)
    launch_tile<cutlass::bfloat16_t, D, BM, BN, W>(p, stream);
  else
    launch_tile<cutlass::half_t, D, BM, BN, W>(p, stream);
  return true;
}

[[noreturn]] inline void no_such_config(const TileConfig& c) {
  throw Error(detail::cat("blockfuse::attention: no kernel compiled for head_dim ", c.head_dim, ", block ",
                          c.block_m, " x ", c.block_n, ", ", c.warps, " warps"));
}

}  // namespace blockfuse::attn
