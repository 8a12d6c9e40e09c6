// Internal: the launchers of the decode kernels, one translation unit per head dim. Each runs the
// append kernel (when `append` is given), the split kernel with m_frags 16-row fragments per CTA
// over m_blocks row blocks, and the merge kernel when p.num_splits > 1.
#pragma once

#include <cuda_runtime_api.h>

#include "attention/decode_params.h"

namespace blockfuse::attn::decode {

void launch_d64(const Params& p, const AppendParams* append, DType dtype, int m_frags, int m_blocks, cudaStream_t stream);
void launch_d128(const Params& p, const AppendParams* append, DType dtype, int m_frags, int m_blocks, cudaStream_t stream);
void launch_d256(const Params& p, const AppendParams* append, DType dtype, int m_frags, int m_blocks, cudaStream_t stream);

}  // namespace blockfuse::attn::decode
