// Internal: instantiation and launch of the sm80 attention kernel for one tile configuration.
#pragma once

#include <cstddef>
#include <utility>

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

// Row I of kTileConfigs, if it is of head dim D and is the configuration asked for.
template <int D, std::size_t I>
bool launch_row_if(const Params& p, const TileConfig& c, DType dtype, cudaStream_t stream) {
  constexpr TileConfig t = kTileConfigs[I];
  if constexpr (t.head_dim != D) {
    return false;
  } else {
    return launch_if<D, t.block_m, t.block_n, t.warps>(p, c, dtype, stream);
  }
}

// The kernels of every kTileConfigs row of head dim D: what launch_sm80_d<D>.cu instantiates.
template <int D, std::size_t... I>
void launch_head_dim(const Params& p, const TileConfig& c, DType dtype, cudaStream_t stream,
                     std::index_sequence<I...>) {
  if (!(launch_row_if<D, I>(p, c, dtype, stream) || ...)) no_such_config(c);
}
template <int D>
void launch_head_dim(const Params& p, const TileConfig& c, DType dtype, cudaStream_t stream) {
  launch_head_dim<D>(p, c, dtype, stream, std::make_index_sequence<kNumTileConfigs>{});
}

}  // namespace blockfuse::attn
