// blockfuse::rope (include/blockfuse/rope.h): validation, the kernel and its launch.
//
// One thread per (row, 16-byte chunk of the first half): it loads the chunk's 8 elements and their
// partners D/2 further (16 bytes each), the position's cos and sin at both places, and writes both
// output chunks; rows are (batch, position, head), so a warp covers consecutive heads of a position
// and the cos/sin rows it reads are shared by the whole warp (L1 hits). Memory-bound: x read once,
// out written once, the tables (one row per position) read once per head from L1/L2.
#include <algorithm>
#include <cstdint>
#include <utility>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/tensor_check.h"
#include "blockfuse/rope.h"
#include "common/check.h"
#include "common/device.h"
#include "common/launch.h"
#include "common/vec.cuh"

namespace blockfuse {
namespace {

using detail::Vec8;

struct RopeParams {
  const void* x;
  void* out;
  const void* cos;
  const void* sin;
  int64_t x_b, x_s, x_h;        // element strides of x
  int64_t o_b, o_s, o_h;        // of out
  int64_t t_b, t_s;             // of the tables (t_b 0: shared)
  int64_t seqlen, heads;
  int64_t rows;                 // batch · seqlen · heads
  int chunks;                   // 16-byte chunks of a half row: head_dim / 16 (4, 8 or 16)
  int chunk_shift;              // log2(chunks)
  int half;                     // head_dim / 2
  bool backward;
};

template <class T>
__global__ void __launch_bounds__(256) rope_kernel(const RopeParams p) {
  // 32-bit index arithmetic (the launcher keeps rows · chunks < 2^31): the divisions by heads and
  // seqlen are a few instructions per 32 bytes moved, not a 64-bit division's tens.
  const uint32_t total = uint32_t(p.rows) * uint32_t(p.chunks);
  for (uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {
    const uint32_t c = idx & uint32_t(p.chunks - 1);  // chunks: 4, 8 or 16
    const uint32_t row = idx >> p.chunk_shift;
    const uint32_t h = row % uint32_t(p.heads), bs = row / uint32_t(p.heads);
    const uint32_t s = bs % uint32_t(p.seqlen), b = bs / uint32_t(p.seqlen);
    const int e = int(c) * 8;  // first element of the chunk in the first half
    const T* xr = static_cast<const T*>(p.x) + int64_t(b) * p.x_b + int64_t(s) * p.x_s + int64_t(h) * p.x_h;
    T* orow = static_cast<T*>(p.out) + int64_t(b) * p.o_b + int64_t(s) * p.o_s + int64_t(h) * p.o_h;
    const int64_t toff = int64_t(b) * p.t_b + int64_t(s) * p.t_s;
    const T* cr = static_cast<const T*>(p.cos) + toff;
    const T* sr = static_cast<const T*>(p.sin) + toff;
    float x1[8], x2[8], c1[8], c2[8], s1[8], s2[8], y1[8], y2[8];
    Vec8<T>::unpack(*reinterpret_cast<const uint4*>(xr + e), x1);
    Vec8<T>::unpack(*reinterpret_cast<const uint4*>(xr + e + p.half), x2);
    Vec8<T>::unpack(__ldg(reinterpret_cast<const uint4*>(cr + e)), c1);
    Vec8<T>::unpack(__ldg(reinterpret_cast<const uint4*>(cr + e + p.half)), c2);
    Vec8<T>::unpack(__ldg(reinterpret_cast<const uint4*>(sr + e)), s1);
    Vec8<T>::unpack(__ldg(reinterpret_cast<const uint4*>(sr + e + p.half)), s2);
    if (!p.backward) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        y1[j] = fmaf(x1[j], c1[j], -x2[j] * s1[j]);
        y2[j] = fmaf(x2[j], c2[j], x1[j] * s2[j]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        y1[j] = fmaf(x1[j], c1[j], x2[j] * s2[j]);
        y2[j] = fmaf(x2[j], c2[j], -x1[j] * s1[j]);
      }
    }
    // Both input chunks are in registers before either output chunk is stored: in place is safe.
    *reinterpret_cast<uint4*>(orow + e) = Vec8<T>::pack(y1);
    *reinterpret_cast<uint4*>(orow + e + p.half) = Vec8<T>::pack(y2);
  }
}

constexpr const char* kFn = "rope";

void check_tables(const AttnConstTensor& x, const RopeTables& t) {
  if (t.batch != 1 && t.batch != x.batch)
    detail::throw_arg(kFn, "tables.batch", detail::cat("is ", t.batch, " for x.batch = ", x.batch),
                      "1 (one table for every sequence) or x.batch");
  if (t.seq_stride % 8 != 0 || (x.seqlen > 1 && t.seq_stride < x.head_dim))
    detail::throw_arg(kFn, "tables.seq_stride", detail::cat("is ", t.seq_stride, " with head_dim = ", x.head_dim),
                      "a multiple of 8 elements, >= head_dim");
  if (t.batch > 1 && (t.batch_stride % 8 != 0 || t.batch_stride < 0))
    detail::throw_arg(kFn, "tables.batch_stride", detail::cat("is ", t.batch_stride), "a multiple of 8 elements, >= 0");
  const std::pair<const char*, const void*> tables[] = {{"tables.cos", t.cos}, {"tables.sin", t.sin}};
  for (const auto& [name, ptr] : tables) {
    if (ptr == nullptr) detail::throw_arg(kFn, name, "is null", "a device pointer to the table rows");
    detail::check_pointer_alignment(kFn, name, ptr, 16);
  }
}

void check_on_device(const AttnConstTensor& x, const AttnTensor& out, const RopeTables& t) {
  detail::check_device_pointer(kFn, "x", x.data);
  detail::check_device_pointer(kFn, "out", out.data);
  detail::check_device_pointer(kFn, "tables.cos", t.cos);
  detail::check_device_pointer(kFn, "tables.sin", t.sin);
}

}  // namespace

void rope(AttnConstTensor x, AttnTensor out, const RopeTables& tables, bool backward, cudaStream_t stream) {
  attn::check_tensor(kFn, "x", x, int64_t(1) << 31);
  attn::check_tensor(kFn, "out", out, int64_t(1) << 31);
  if (out.dtype != x.dtype)
    detail::throw_arg(kFn, "out", detail::cat("has dtype code ", int(out.dtype), ", x ", int(x.dtype)), "x's dtype");
  if (out.batch != x.batch || out.seqlen != x.seqlen || out.heads != x.heads || out.head_dim != x.head_dim)
    detail::throw_arg(kFn, "out",
                      detail::cat("is [", out.batch, ", ", out.seqlen, ", ", out.heads, ", ", out.head_dim, "], x [",
                                  x.batch, ", ", x.seqlen, ", ", x.heads, ", ", x.head_dim, "]"),
                      "x's sizes");
  if (x.batch == 0 || x.seqlen == 0) return;  // nothing to rotate, nothing launched
  check_tables(x, tables);
  const bool in_place = out.data == x.data && out.batch_stride == x.batch_stride && out.seq_stride == x.seq_stride &&
                        out.head_stride == x.head_stride;
  if (!in_place) detail::check_no_overlap(kFn, "out", attn::span_of_tensor(out), "x", attn::span_of_tensor(x));
  check_on_device(x, out, tables);

  RopeParams p{};
  p.x = x.data;
  p.out = out.data;
  p.cos = tables.cos;
  p.sin = tables.sin;
  p.x_b = x.batch_stride, p.x_s = x.seq_stride, p.x_h = x.head_stride;
  p.o_b = out.batch_stride, p.o_s = out.seq_stride, p.o_h = out.head_stride;
  p.t_b = tables.batch == 1 ? 0 : tables.batch_stride;
  p.t_s = tables.seq_stride;
  p.seqlen = x.seqlen;
  p.heads = x.heads;
  p.rows = x.batch * x.seqlen * x.heads;
  p.half = int(x.head_dim / 2);
  p.chunks = p.half / 8;
  p.chunk_shift = p.chunks == 4 ? 2 : p.chunks == 8 ? 3 : 4;
  p.backward = backward;
  const int64_t total = p.rows * p.chunks;
  if (total >= (int64_t(1) << 31))
    detail::throw_arg(kFn, "x", detail::cat("has ", p.rows, " rows (batch · seqlen · heads) of head_dim ", x.head_dim),
                      "rows · head_dim / 16 < 2^31 (the kernel's 32-bit indices)");
  // Grid-stride over 16 CTAs of 256 threads per SM (enough bytes in flight to saturate the DRAM).
  const int sms = detail::current_device_spec().sm_count;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, int64_t(sms) * 16);
  if (x.dtype == DType::kBF16)
    detail::launch_kernel(rope_kernel<__nv_bfloat16>, dim3(unsigned(blocks)), dim3(256), 0, stream, dim3(1, 1, 1),
                          false, p);
  else
    detail::launch_kernel(rope_kernel<__half>, dim3(unsigned(blocks)), dim3(256), 0, stream, dim3(1, 1, 1), false, p);
  BF_CHECK_LAUNCH();
}

}  // namespace blockfuse
