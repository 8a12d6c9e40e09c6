// gated_up_fp8's dynamic per-row e4m3 output, second launch: bf16 h rows -> amax -> e4m3 + scale
// (rowwise_fp8.h says why it is a second launch). One block per row, grid-stride over rows; a row of
// up to threads x kRowwiseFp8Chunks chunks is loaded once into registers (raw bf16, 16 bytes per
// chunk), its finite amax reduced over the block, then quantised from the same registers; wider rows
// are read a second time for the stores. The quantisation is common/fp8_device.cuh's, the one every
// blockfuse kernel with an e4m3 output applies (bit-exact with host::fp8_quantize).
#include "gated_up/rowwise_fp8.h"

#include <cuda_bf16.h>

#include "common/check.h"
#include "common/device.h"
#include "common/fp8_device.cuh"
#include "common/launch.h"
#include "common/reduce.cuh"

namespace blockfuse::detail {
namespace {

// The 8 bf16 values of a 16-byte chunk as fp32 (element 2i in the low half of word i).
__device__ __forceinline__ void unpack_bf16x8(const uint4& r, float (&v)[8]) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ float chunk_amax(const uint4& r, float amax) {
  float v[8];
  unpack_bf16x8(r, v);
#pragma unroll
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, finite_abs(v[j]));
  return amax;
}

__device__ __forceinline__ void store_chunk(uint8_t* dst, const uint4& r, float inv) {
  float v[8];
  unpack_bf16x8(r, v);
  store_fp8x8(dst, v, inv);
}

template <int V>
__global__ void __launch_bounds__(kRowwiseFp8MaxThreads) rowwise_fp8_kernel(const uint4* __restrict__ h, int64_t ldh16,
                                                                             uint8_t* __restrict__ out, int64_t ldo,
                                                                             int64_t rows, int64_t chunks,
                                                                             float* __restrict__ scale) {
  __shared__ float partial[32];
  const int tid = threadIdx.x, nt = blockDim.x;
  const bool on_chip = chunks <= int64_t(nt) * V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint4* row = h + r * ldh16;
    uint8_t* orow = out + r * ldo;
    float amax = 0.0f;
    if (on_chip) {
      uint4 raw[V];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int64_t ch = tid + int64_t(i) * nt;
        raw[i] = ch < chunks ? __ldcs(row + ch) : make_uint4(0u, 0u, 0u, 0u);  // zeros leave the amax alone
      }
#pragma unroll
      for (int i = 0; i < V; ++i) amax = chunk_amax(raw[i], amax);
      const float inv = fp8_write_dynamic_scale(block_reduce<MaxOp>(amax, partial), scale + r, tid == 0);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int64_t ch = tid + int64_t(i) * nt;
        if (ch < chunks) store_chunk(orow + ch * 8, raw[i], inv);
      }
    } else {
      for (int64_t ch = tid; ch < chunks; ch += nt) amax = chunk_amax(__ldcg(row + ch), amax);
      const float inv = fp8_write_dynamic_scale(block_reduce<MaxOp>(amax, partial), scale + r, tid == 0);
      for (int64_t ch = tid; ch < chunks; ch += nt) store_chunk(orow + ch * 8, __ldcs(row + ch), inv);
    }
  }
}

}  // namespace

void launch_rowwise_fp8(const void* h, int64_t ldh, void* out, int64_t ldo, int64_t rows, int64_t chunks, float* scale,
                        cudaStream_t stream) {
  const RowwiseFp8Config c = rowwise_fp8_config(chunks, rows, current_device_spec().sm_count);
  launch_kernel(rowwise_fp8_kernel<kRowwiseFp8Chunks>, dim3(unsigned(c.blocks)), dim3(unsigned(c.threads)), 0, stream,
                dim3(1, 1, 1), /*pdl=*/false, static_cast<const uint4*>(h), ldh / 8, static_cast<uint8_t*>(out), ldo, rows,
                chunks, scale);
}

}  // namespace blockfuse::detail
