// The dgated epilogue collective of the gated MLP's fused backward (sm90a; dgated_sm90.cu holds the
// kernel type around it): the GEMM dh = dy · w_down leaves dh in fp32 accumulators, and instead of
// storing it this epilogue reads the forward's pre-activation z (interleaved [M, 2U] like the gated
// weight: column 2j = up_j, 2j + 1 = gate_j) and writes
//   dz = [dh · act(gate), dh · up · act'(gate)]   in z's interleaved order (over z, or elsewhere),
//   h  = act(gate) · up                           the forward's output, for dW_down = dyᵀ · h,
// so the [M, U] dh of the unfused backward (a GEMM, then swiglu_backward's pass over dh and z) is
// never written nor read again (quack's gemm_dgated). fp32 math on the accumulators, one rounding.
//
// Staging of z. The producer warpgroup's epilogue warp (the kernel's epilogue-load role, which runs
// beside the mainloop's TMA warp) copies each tile's z rows into shared memory with bulk copies
// (cp.async.bulk, one 512-byte row segment each, completing on the load pipeline's full barrier)
// while the tile's mainloop runs, in two subtiles of 64 rows (the two 64-row MMA atoms of the
// 128-row tile), one pipeline stage each. The consumer warpgroup waits for a subtile, reads its
// pairs' 8 bytes from shared memory and releases the stage, so the epilogue's z latency is off the
// critical path; the direct loads it replaces cost ~40 µs a tile under ping-pong
// (docs/gated_up.md, results/gated_up.json `dgated`). Rows are padded to 544 bytes so a warp's 8 rows
// of 32 bytes fall on distinct banks (two wavefronts for its 256 bytes, the minimum).
//
// Stores. In wgmma's accumulator layout each thread's values come in pairs of adjacent columns
// (n, n + 1) of one row, n even (the pairing gating_sm90.cuh checks for the forward's epilogue), so a
// pair writes one 8-byte dz and one 4-byte h directly to global memory; the four threads of a quad
// cover 8 consecutive columns of a row (32 bytes of dz: one sector).
//
// The collective-epilogue interface's common members come from NoLoadEpilogueBase
// (epilogue_base_sm90.cuh), with the load pipeline, load(), load_tail() and the increments replaced
// here.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

#include <cute/arch/copy_sm90_tma.hpp>

#include "cutlass/arch/barrier.h"
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
  // The subtile is one 64-row MMA atom of the tile (so a subtile is the accumulators' mode-1 slice).
  static constexpr int kSubRows = 64;
  static constexpr int kSubtiles = BM / kSubRows;
  static_assert(BM % kSubRows == 0, "whole 64-row subtiles");
  static constexpr int kRowBytes = 2 * BN * int(sizeof(Element));  // a tile row of z: BN (up, gate) pairs
  static constexpr int kRowPitch = kRowBytes + 32;                   // padded: 8 rows on distinct banks
  static constexpr int kStages = 2;
  static_assert(kRowBytes % 16 == 0 && kRowPitch % 16 == 0, "bulk copies move 16-byte multiples");

  using ElementC = Element;
  using ElementD = Element;
  using LoadPipeline = cutlass::PipelineTransactionAsync<kStages>;
  using LoadPipelineState = cutlass::PipelineState<kStages>;
  using PipelineStorage = typename LoadPipeline::SharedStorage;
  // Each lane of the producer warp arrives with its own copies' byte count (rows past M and columns
  // past U are not copied), so the pipeline's fixed transaction count is not used.
  constexpr static uint32_t TmaTransactionBytes = 0;
  constexpr static bool RequiresTransactionBytes = false;
  struct SharedStorage {
    alignas(128) uint8_t z[kStages][kSubRows * kRowPitch];
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

  // z's bulk copies (16-byte-aligned rows, 16-byte multiples: U % 4 == 0), and the 8-byte dz and
  // 4-byte h stores of a pair (n even).
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto mnkl = append<4>(problem_shape, 1);
    auto aligned = [](const void* ptr, int64_t ld, int bytes) {
      return reinterpret_cast<uintptr_t>(ptr) % bytes == 0 && (ld * int64_t(sizeof(Element))) % bytes == 0;
    };
    return get<1>(mnkl) % 4 == 0 && aligned(args.z, args.ldz, 16) && aligned(args.dz, args.lddz, 8) &&
           (args.h == nullptr || aligned(args.h, args.ldh, 4));
  }

  // ---- device side ----
  CUTLASS_HOST_DEVICE DGatedEpilogue(Params const& params, TensorStorage& storage)
      : params_(params), storage_(storage) {}

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const&) {}

  template <class CtaTileMNK>
  CUTLASS_HOST_DEVICE static constexpr int get_load_pipe_increment(CtaTileMNK) {
    return kSubtiles;
  }
  CUTLASS_DEVICE bool is_producer_load_needed() const { return true; }

  // The producer warp: the tile's z rows into the next kSubtiles stages, lane l copying rows l and
  // l + 32 of each subtile (one bulk copy of the tile's valid columns each).
  template <class ProblemShapeMNKL, class CtaTileMNK, class CtaCoordMNKL, class TiledMma>
  CUTLASS_DEVICE auto load(LoadPipeline load_pipeline, LoadPipelineState state, ProblemShapeMNKL, CtaTileMNK,
                           CtaCoordMNKL cta_coord_mnkl, TiledMma, int lane, TensorStorage& storage,
                           [[maybe_unused]] int subtile_index = -1) {
    const int m_base = int(get<0>(cta_coord_mnkl)) * BM, n_base = int(get<1>(cta_coord_mnkl)) * BN;
    const int cols = min(BN, params_.u - n_base);  // valid pairs of the tile's rows (U % 8 == 0: 32-byte multiples)
    const uint32_t bytes = uint32_t(cols) * 2u * uint32_t(sizeof(Element));
    CUTLASS_PRAGMA_UNROLL
    for (int s = 0; s < kSubtiles; ++s) {
      load_pipeline.producer_acquire(state);
      uint64_t* full = load_pipeline.producer_get_barrier(state);
      const int r0 = m_base + s * kSubRows + lane, r1 = r0 + 32;
      const uint32_t mine = (r0 < params_.m ? bytes : 0u) + (r1 < params_.m ? bytes : 0u);
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(full, mine);
      uint8_t* dst = storage.z[state.index()];
      if (r0 < params_.m)
        cute::SM90_BULK_COPY_G2S::copy(params_.z + int64_t(r0) * params_.ldz + 2 * n_base, full,
                                       dst + lane * kRowPitch, int32_t(bytes));
      if (r1 < params_.m)
        cute::SM90_BULK_COPY_G2S::copy(params_.z + int64_t(r1) * params_.ldz + 2 * n_base, full,
                                       dst + (lane + 32) * kRowPitch, int32_t(bytes));
      ++state;
    }
    return state;
  }

  CUTLASS_DEVICE auto load_tail(LoadPipeline load_pipeline, LoadPipelineState state) {
    load_pipeline.producer_tail(state);
    return state;
  }

  // The two 16-bit values of a 32-bit word as floats, and back (one rounding each).
  CUTLASS_DEVICE static float lo(uint32_t w) { return float(Element::bitcast(uint16_t(w & 0xffffu))); }
  CUTLASS_DEVICE static float hi(uint32_t w) { return float(Element::bitcast(uint16_t(w >> 16))); }
  CUTLASS_DEVICE static uint32_t pack(float a, float b) {
    return uint32_t(Element(a).raw()) | (uint32_t(Element(b).raw()) << 16);
  }

  // One output tile, by the consumer warpgroup that computed it (ping-pong: 128 threads).
  template <class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class AccEngine, class AccLayout,
            class TiledMma>
  CUTLASS_DEVICE auto store(LoadPipeline load_pipeline, LoadPipelineState load_state, StorePipeline,
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
    static_assert(size<1>(accumulators) == kSubtiles, "one MMA_M slice of the accumulators per 64-row subtile");
    const int m_base = int(get<0>(tile_coord_mnkl)) * BM, n_base = int(get<1>(tile_coord_mnkl)) * BN;
    const int act = params_.act;
    CUTE_UNROLL
    for (int s = 0; s < kSubtiles; ++s) {
      Tensor acc = accumulators(_, s, _);
      Tensor coord = tC(_, s, _);
      constexpr int kPairs = int(size(acc)) / 2;
      load_pipeline.consumer_wait(load_state);
      const uint8_t* zs = storage_.z[load_state.index()];
      uint2 zv[kPairs];
      CUTE_UNROLL
      for (int c = 0; c < kPairs; ++c) {  // every read of the subtile first; stale bytes past M or U are never used
        const int ml = get<0>(coord(2 * c)) - s * kSubRows, nl = get<1>(coord(2 * c));
        zv[c] = *reinterpret_cast<const uint2*>(zs + ml * kRowPitch + nl * 2 * int(sizeof(Element)));
      }
      load_pipeline.consumer_release(load_state);
      ++load_state;
      CUTE_UNROLL
      for (int c = 0; c < kPairs; ++c) {
        const int m = m_base + get<0>(coord(2 * c)), n = n_base + get<1>(coord(2 * c));
        if (m >= params_.m || n >= params_.u) continue;
        // zv = (up_n, gate_n, up_n+1, gate_n+1); accumulators 2c, 2c + 1 = dh(m, n), dh(m, n + 1).
        const float up0 = lo(zv[c].x), gate0 = hi(zv[c].x), up1 = lo(zv[c].y), gate1 = hi(zv[c].y);
        float a0, da0, a1, da1;
        act_and_grad_fast(act, gate0, a0, da0);
        act_and_grad_fast(act, gate1, a1, da1);
        const float d0 = acc(2 * c), d1 = acc(2 * c + 1);
        const uint2 dzv = make_uint2(pack(d0 * a0, d0 * up0 * da0), pack(d1 * a1, d1 * up1 * da1));
        __stcs(reinterpret_cast<uint2*>(params_.dz + int64_t(m) * params_.lddz + 2 * n), dzv);
        if (params_.h != nullptr)
          __stcs(reinterpret_cast<uint32_t*>(params_.h + int64_t(m) * params_.ldh + n), pack(a0 * up0, a1 * up1));
      }
    }
    return cute::make_tuple(load_state, store_pipe_producer_state);
  }

  CUTLASS_DEVICE auto store_tail(LoadPipeline, LoadPipelineState load_pipe_consumer_state, StorePipeline,
                                 StorePipelineState store_pipe_producer_state) {
    return cute::make_tuple(load_pipe_consumer_state, store_pipe_producer_state);
  }

 private:
  Params const& params_;
  TensorStorage& storage_;
};

}  // namespace blockfuse::sm90
