// The dgated epilogue collective of the gated MLP's fused backward (sm90a; dgated_sm90.cu holds the
// kernel type around it): the GEMM dh = dy · w_down leaves dh in fp32 accumulators, and instead of
// storing it this epilogue reads the forward's pre-activation z (interleaved [M, 2U] like the gated
// weight: column 2j = up_j, 2j + 1 = gate_j) and writes
//   dz = [dh · act(gate), dh · up · act'(gate)]   in z's interleaved order (over z, or elsewhere),
//   h  = act(gate) · up                           the forward's output, for dW_down = dyᵀ · h,
// so the [M, U] dh of the unfused backward (a GEMM, then swiglu_backward's pass over dh and z) is
// never written nor read again (quack's gemm_dgated). fp32 math on the accumulators, one rounding.
//
// Access pattern. In wgmma's accumulator layout each thread's values come in pairs of adjacent
// columns (n, n + 1) of one row, n even (the pairing gating_sm90.cuh checks for the forward's
// epilogue), so a pair needs z's four elements [2n, 2n + 4) of its row: one 8-byte load, one 8-byte
// store of dz and one 4-byte store of h. The four threads of a quad cover 8 consecutive columns of a
// row (32 bytes of z: one sector), so every load and dz store moves whole sectors. The loads are
// issued kChunk pairs at a time before any is used, so their latency overlaps; with the ping-pong
// schedule one warpgroup's epilogue runs under the other's mainloop.
//
// The collective-epilogue interface's common members come from NoLoadEpilogueBase
// (epilogue_base_sm90.cuh); nothing is staged in shared memory and there is no TMA store.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

#include "cutlass/cutlass.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/pipeline/pipeline.hpp"

#include "common/activation.cuh"
#include "gated_up/epilogue_base_sm90.cuh"
#include "gated_up/gating_sm90.cuh"

namespace blockfuse::sm90 {

using namespace cute;

template <class Element_, class TileShape_>
class DGatedEpilogue : public NoLoadEpilogueBase {
 public:
  using Element = Element_;
  using TileShape = TileShape_;
  static constexpr int BM = size<0>(TileShape{});
  static constexpr int BN = size<1>(TileShape{});
  static_assert(sizeof(Element) == 2, "bf16 or fp16");
  // Pairs whose z loads are in flight together: 2 registers each.
  static constexpr int kChunk = 16;

  using ElementC = Element;
  using ElementD = Element;
  struct SharedStorage {
    int unused;
  };
  using TensorStorage = SharedStorage;
  using TensorMapStorage = SharedStorage;

  struct Arguments {
    const Element* z = nullptr;  // [M, 2U] interleaved, row stride ldz
    int64_t ldz = 0;
    Element* dz = nullptr;       // [M, 2U], row stride lddz; may be z itself (each element is read
    int64_t lddz = 0;            // and then written by the same thread)
    Element* h = nullptr;        // [M, U], row stride ldh; nullptr: not written
    int64_t ldh = 0;
    int act = 0;                 // blockfuse::Activation code (0 = SiLU, 1 = tanh-GELU)
  };

  struct Params {
    const Element* z = nullptr;
    int64_t ldz = 0;
    Element* dz = nullptr;
    int64_t lddz = 0;
    Element* h = nullptr;
    int64_t ldh = 0;
    int32_t m = 0, u = 0;
    int act = 0;
  };

  // ---- host side ----
  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                        [[maybe_unused]] void* workspace) {
    auto mnkl = append<4>(problem_shape, 1);
    return Params{args.z, args.ldz, args.dz, args.lddz, args.h, args.ldh, int32_t(get<0>(mnkl)), int32_t(get<1>(mnkl)),
                  args.act};
  }

  // The 8-byte z / dz and 4-byte h accesses of a pair (n even): U even, 8-byte-aligned z and dz rows,
  // 4-byte-aligned h rows.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto mnkl = append<4>(problem_shape, 1);
    auto aligned = [](const void* ptr, int64_t ld, int bytes) {
      return reinterpret_cast<uintptr_t>(ptr) % bytes == 0 && (ld * int64_t(sizeof(Element))) % bytes == 0;
    };
    return get<1>(mnkl) % 2 == 0 && aligned(args.z, args.ldz, 8) && aligned(args.dz, args.lddz, 8) &&
           (args.h == nullptr || aligned(args.h, args.ldh, 4));
  }

  // ---- device side ----
  CUTLASS_HOST_DEVICE DGatedEpilogue(Params const& params, [[maybe_unused]] TensorStorage& storage)
      : params_(params) {}

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const&) {}

  // The two 16-bit values of a 32-bit word as floats, and back (one rounding each).
  CUTLASS_DEVICE static float lo(uint32_t w) { return float(Element::bitcast(uint16_t(w & 0xffffu))); }
  CUTLASS_DEVICE static float hi(uint32_t w) { return float(Element::bitcast(uint16_t(w >> 16))); }
  CUTLASS_DEVICE static uint32_t pack(float a, float b) {
    return uint32_t(Element(a).raw()) | (uint32_t(Element(b).raw()) << 16);
  }

  // One output tile, by every consumer thread of it (256 cooperative, 128 ping-pong).
  template <class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class AccEngine, class AccLayout,
            class TiledMma>
  CUTLASS_DEVICE auto store(LoadPipeline, LoadPipelineState load_pipe_consumer_state, StorePipeline,
                            StorePipelineState store_pipe_producer_state, ProblemShapeMNKL, TileShapeMNK,
                            TileCoordMNKL tile_coord_mnkl, cute::Tensor<AccEngine, AccLayout> accumulators,
                            TiledMma tiled_mma, int thread_idx, [[maybe_unused]] TensorStorage& storage,
                            [[maybe_unused]] int subtile_index = -1) {
    static_assert(is_same_v<typename AccEngine::value_type, float>, "fp32 accumulators");
    static_assert(accumulator_pairs_are_adjacent_columns<TiledMma>(),
                  "each thread's accumulators must come in adjacent column pairs (n, n + 1)");
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor tC = thr_mma.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));  // (m, n) per accumulator
    static_assert(size(tC) == size(accumulators) && size<0, 0>(accumulators) == 2,
                  "the coordinate partition must match the accumulators, column pairs first");
    constexpr int kPairs = int(size(accumulators)) / 2;
    static_assert(kPairs % kChunk == 0, "whole chunks of pairs");
    const int m_base = int(get<0>(tile_coord_mnkl)) * BM, n_base = int(get<1>(tile_coord_mnkl)) * BN;
    const int act = params_.act;
    CUTE_UNROLL
    for (int c0 = 0; c0 < kPairs; c0 += kChunk) {
      uint2 zv[kChunk];
      // Every load of the chunk first (rows past M and columns past U, tile tails, are skipped).
      CUTE_UNROLL
      for (int c = 0; c < kChunk; ++c) {
        const int i = 2 * (c0 + c);
        const int m = m_base + get<0>(tC(i)), n = n_base + get<1>(tC(i));
        zv[c] = make_uint2(0u, 0u);
        if (m < params_.m && n < params_.u)
          zv[c] = __ldcs(reinterpret_cast<const uint2*>(params_.z + int64_t(m) * params_.ldz + 2 * n));
      }
      CUTE_UNROLL
      for (int c = 0; c < kChunk; ++c) {
        const int i = 2 * (c0 + c);
        const int m = m_base + get<0>(tC(i)), n = n_base + get<1>(tC(i));
        if (m >= params_.m || n >= params_.u) continue;
        // zv = (up_n, gate_n, up_n+1, gate_n+1); accumulators i, i + 1 = dh(m, n), dh(m, n + 1).
        const float up0 = lo(zv[c].x), gate0 = hi(zv[c].x), up1 = lo(zv[c].y), gate1 = hi(zv[c].y);
        float a0, da0, a1, da1;
        act_and_grad_fast(act, gate0, a0, da0);
        act_and_grad_fast(act, gate1, a1, da1);
        const float d0 = accumulators(i), d1 = accumulators(i + 1);
        const uint2 dzv = make_uint2(pack(d0 * a0, d0 * up0 * da0), pack(d1 * a1, d1 * up1 * da1));
        __stcs(reinterpret_cast<uint2*>(params_.dz + int64_t(m) * params_.lddz + 2 * n), dzv);
        if (params_.h != nullptr)
          __stcs(reinterpret_cast<uint32_t*>(params_.h + int64_t(m) * params_.ldh + n), pack(a0 * up0, a1 * up1));
      }
    }
    return cute::make_tuple(load_pipe_consumer_state, store_pipe_producer_state);
  }

  CUTLASS_DEVICE auto store_tail(LoadPipeline, LoadPipelineState load_pipe_consumer_state, StorePipeline,
                                 StorePipelineState store_pipe_producer_state) {
    return cute::make_tuple(load_pipe_consumer_state, store_pipe_producer_state);
  }

 private:
  Params const& params_;
};

}  // namespace blockfuse::sm90
