// The gated epilogue collective of the sm90a fused gated up-projection (gated_up_sm90.cuh holds
// the kernel type around it). What replaces CUTLASS's epilogue is `GatedEpilogue` below: CUTLASS's epilogues write a tile as
// wide as the GEMM's N, ours writes half of it. It implements the collective-epilogue interface
// the sm90 warp-specialised kernels call (the same members as CUTLASS's
// Sm90TmaWarpSpecializedAdapter; those every epilogue without loads shares are
// epilogue_base_sm90.cuh's NoLoadEpilogueBase), and per output tile it
//   1. waits until the previous tile's TMA store has finished reading the staging buffer,
//   2. gates the accumulator pairs in registers and writes the BM x BN/2 tile into shared memory
//      in the 128-byte-swizzled layout TMA expects,
//   3. fences the generic-proxy writes for the async proxy, syncs the consumer threads,
//   4. one thread issues TMA stores (one per 64-column panel) and commits them as a bulk group.
// The store is asynchronous, so it drains while the consumers start the next tile's mainloop
// (the producer warp has already been filling the pipeline for it); the wait in step 1 of the
// next tile is normally free. TMA clips the store box at the tensor edge, which is the whole of
// the M and U tail handling; the loads zero-fill past M, 2U and K, which is the mainloop's.
//
// The gating on wgmma accumulators. In the m64nNk16 F32 accumulator layout (CUTLASS's
// GMMA::CLayout_64xN, ((4,8,4),(2,2,N/8)) : ((128,1,16),(64,8,512)) in m + 64·n) every thread's
// values come in pairs whose first value mode has extent 2 and stride 64 = one column of the
// 64-row atom: columns (n, n+1) of one row, with n = 8·b + 2·(lane % 4), even. Atoms tile N at
// multiples of 8 and M at multiples of 64, so each pair is exactly (up_j, gate_j) of the
// interleaved weight, j = n/2. As in the sm80 kernel, the gated tile H is viewed as a BM x BN
// tensor whose column mode (2, BN/2) has stride (0, ·): both columns of a pair name the same h
// element, so partitioning that view with the *same* thr_mma.partition_C as the accumulators
// gives each pair the shared-memory address of its h element — no hand-derived index math.
// In the flattened fragment ((2,2,N/8), MMA_M, MMA_N), the column-pair mode is the fastest, so
// flat indices (2p, 2p+1) are the pairs. test_gating_layout_sm90.cu checks all of this
// for every thread of every tile config.
#pragma once

#include <cute/tensor.hpp>

#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/pipeline/pipeline.hpp"

#include "common/fp8_device.cuh"
#include "gated_up/epilogue_base_sm90.cuh"
#include "gated_up/gating_sm90.cuh"

namespace blockfuse::sm90 {

using namespace cute;

// ---------------------------------------------------------------------------------------------
// The gated epilogue collective.
//   Element   output dtype: bf16/fp16, or e4m3 (cutlass::float_e4m3_t, quantised with the
//             static per-tensor output scale of blockfuse/fp8.h)
//   TileShape the CTA's GEMM tile (BM, BN, BK); the output tile is (BM, BN/2)
//   kDequant  the FP8 GEMM's dequantisation: each accumulator C(m, n) is multiplied by
//             sx(m)·sw(n) (per-tensor or per-row x scale, per-tensor or per-channel w scale,
//             Arguments below) before the gate. Off for the 16-bit GEMM, which has no scales.
// ---------------------------------------------------------------------------------------------
template <class Element_, class TileShape_, bool kDequant = false>
class GatedEpilogue : public NoLoadEpilogueBase {
 public:
  using Element = Element_;
  using TileShape = TileShape_;
  static constexpr int BM = size<0>(TileShape{});
  static constexpr int BN = size<1>(TileShape{});
  static constexpr int BH = BN / 2;  // gated columns per tile
  static constexpr bool kFp8Out = sizeof(Element) == 1;
  // Output panels of up to 128 bytes per row: one 128-byte swizzle atom (64 16-bit or 128 e4m3
  // elements) is the widest box a SWIZZLE_128B TMA can move, so the tile goes out as BH/kPanel TMA
  // stores. A row width that is not a multiple of 128 bytes goes out in 64-byte-swizzled panels:
  // BH = 64 e4m3 outputs (one panel), BH = 96 16-bit outputs (the 192-wide tiles: three panels).
  static constexpr int kRowBytes = BH * int(sizeof(Element));
  static constexpr int kPanelBytes = kRowBytes % 128 == 0 ? 128 : 64;
  static constexpr int kPanel = kPanelBytes / int(sizeof(Element));  // elements per panel row
  static constexpr int kPanels = BH / kPanel;
  static constexpr int kChunk = 16 / int(sizeof(Element));            // elements per 16-byte chunk
  static constexpr int kPhases = kPanelBytes / 16;                     // swizzle XOR range: 8 or 4
  static_assert(sizeof(Element) == 2 || sizeof(Element) == 1, "16-bit or e4m3 outputs");
  static_assert(kRowBytes % 64 == 0, "a 128- or 64-byte swizzle panel");
  static_assert(BH % kPanel == 0, "BN/2 must be a multiple of the panel width");
  static_assert(BM % 8 == 0 && BM <= 256, "a TMA box has at most 256 rows");
  using SwizzleAtom = std::conditional_t<kPanelBytes == 128, GMMA::Layout_K_SW128_Atom<Element>,
                                         GMMA::Layout_K_SW64_Atom<Element>>;

  // The kernels' type interface beyond NoLoadEpilogueBase's (no loads; the bulk-group waits below do
  // the store's synchronisation). C is never read.
  using ElementC = Element;
  using ElementD = Element;

  // The staging tile: kPanels panels of (BM, kPanel), each the GMMA/TMA swizzle atom (8 rows x
  // kPanelBytes, 16-byte chunk index XOR the row phase: row % 8 for 128-byte rows, (row / 2) % 4
  // for 64-byte rows) tiled down M. Panel p holds output columns [kPanel·p, kPanel·(p + 1)) of the
  // tile and starts at element BM·kPanel·p (a multiple of 1024 bytes, so every panel starts on a
  // swizzle-pattern boundary as TMA requires).
  using SmemLayoutPanel = decltype(tile_to_shape(SwizzleAtom{}, Shape<Int<BM>, Int<kPanel>>{}));
  // The whole tile, (BM, (kPanel, kPanels)) -> element offset: column j sits in panel j / kPanel.
  using SmemLayoutH = decltype(tile_to_shape(SwizzleAtom{}, Shape<Int<BM>, Int<BH>>{}));
  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, BM * BH, 1024> smem_h;
  };
  using TensorStorage = SharedStorage;
  using TensorMapStorage = SharedStorage;

  struct Arguments {
    Element* ptr_out = nullptr;  // [M, U], row stride ldo (elements)
    int64_t ldo = 0;
    int act = 0;                 // blockfuse::Activation code (0 = SiLU, 1 = tanh-GELU)
    // kDequant only: device scales. x_scale: 1 float, or M floats when x_per_row; w_scale: 1
    // float, or 2U floats in the interleaved order (8-byte aligned) when w_per_channel.
    const float* x_scale = nullptr;
    const float* w_scale = nullptr;
    bool x_per_row = false;
    bool w_per_channel = false;
    // e4m3 outputs only: the static per-tensor output scale (1 float, device); q = sat(v / s).
    const float* out_scale = nullptr;
  };

  // The TMA store of one (BM, 64) panel into out [M, U]; the global shape is dynamic, so the type
  // is derived from a placeholder tensor of the same types.
  using TmaStoreH = decltype(make_tma_copy(
      SM90_TMA_STORE{},
      make_tensor(make_gmem_ptr(static_cast<Element*>(nullptr)), make_shape(int32_t(0), int32_t(0)),
                  make_stride(int64_t(0), _1{})),
      SmemLayoutPanel{}));

  struct Params {
    TmaStoreH tma_store_h;
    int32_t m = 0, u = 0;
    int act = 0;
    const float* x_scale = nullptr;
    const float* w_scale = nullptr;
    bool x_per_row = false;
    bool w_per_channel = false;
    const float* out_scale = nullptr;
  };

  // ---- host side ----
  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                        [[maybe_unused]] void* workspace) {
    auto mnkl = append<4>(problem_shape, 1);
    const int32_t m = int32_t(get<0>(mnkl));
    const int32_t u = int32_t(get<1>(mnkl) / 2);  // the GEMM's N is 2U
    Tensor mH = make_tensor(make_gmem_ptr(args.ptr_out), make_shape(m, u), make_stride(args.ldo, _1{}));
    return Params{make_tma_copy(SM90_TMA_STORE{}, mH, SmemLayoutPanel{}), m, u, args.act,
                  args.x_scale, args.w_scale, args.x_per_row, args.w_per_channel, args.out_scale};
  }

  // TMA needs a 16-byte-aligned base and a row stride that is a multiple of 16 bytes; N = 2U even.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto mnkl = append<4>(problem_shape, 1);
    return get<1>(mnkl) % 2 == 0 && (reinterpret_cast<uintptr_t>(args.ptr_out) % 16) == 0 &&
           (args.ldo * int64_t(sizeof(Element))) % 16 == 0;
  }

  // The swizzle row phase of row m in a 1024-byte-aligned buffer: the address bits [7, 7 + log2
  // kPhases) of the row's start, which the swizzle XORs into the 16-byte chunk index.
  CUTLASS_HOST_DEVICE static constexpr int row_phase_aligned(int m) { return ((m * kPanelBytes) >> 7) % kPhases; }
  // The same from the buffer's absolute shared-memory address (what TMA swizzles).
  CUTLASS_HOST_DEVICE static constexpr int row_phase(uint32_t smem_base, int m) {
    return int(((smem_base + uint32_t(m * kPanelBytes)) >> 7) & uint32_t(kPhases - 1));
  }
  // Element offset of H(m, j) in the staging tile: panel j / kPanel (BM·kPanel elements each), row
  // m (kPanel elements), 16-byte chunk (j % kPanel) / kChunk XOR the row phase (the TMA/GMMA
  // swizzle), element j % kChunk. Equal to SmemLayoutH(m, j) (checked on the CPU).
  CUTLASS_HOST_DEVICE static constexpr int staging_offset(int m, int j) {
    return (j / kPanel) * (BM * kPanel) + m * kPanel + ((((j % kPanel) / kChunk) ^ row_phase_aligned(m)) * kChunk) +
           j % kChunk;
  }
  // staging_offset(m0 + dm, (n0 + dn) / 2) - (m0·kPanel + n0/2) for a thread whose first
  // accumulator is at (m0, n0), given dm % 8 == 0, dn % 8 == 0, n0 even and < 8 (see store()):
  // then j0 = n0/2 < 4 and dj = dn/2 is a multiple of 4, so j0 + dj % kChunk stays inside dj's
  // chunk, and the row phase of m0 + dm is that of m0. `phase` is row_phase(base, m0). (A thread of
  // the second warpgroup of an N-split tile starts at column n0 + BN/2: store() passes its n0 % 8
  // and adds the warpgroup's column offset to every dn.)
  CUTLASS_HOST_DEVICE static constexpr int staging_delta(int dm, int dn, int phase) {
    const int dj = dn / 2;
    return (dj / kPanel) * (BM * kPanel) + dm * kPanel + ((((dj % kPanel) / kChunk) ^ phase) * kChunk) + dj % kChunk;
  }

  // One gated value to the output type: a rounding to bf16/fp16, or the e4m3 quantisation of
  // blockfuse/fp8.h (non-finite -> NaN, v·(1/s), saturated to ±448) with inv_out = 1/s.
  CUTLASS_DEVICE static Element to_output(float v, [[maybe_unused]] float inv_out) {
    if constexpr (kFp8Out)
      return Element::bitcast(fp8_quantize(v, inv_out));
    else
      return static_cast<Element>(v);
  }

  // h = act(gate) · up for every accumulator pair (flat indices i = up, i + 1 = gate; the pair
  // mode is the fastest of the fragment), written to the staging tile.
  // kNOff: the column offset of the thread's warpgroup in an N-split tile (0 otherwise); n0 is the
  // thread's first accumulator column, kNOff + an even number < 8.
  template <int Act, int kNOff, class AccTensor, class CoordTensor>
  CUTLASS_DEVICE static void gate_pairs(AccTensor const& acc, CoordTensor const& coord, Element* thread_base, int m0,
                                        int n0, int phase, float inv_out) {
    CUTE_UNROLL
    for (int i = 0; i < size(acc); i += 2) {
      const int dm = get<0>(coord(i)) - m0;  // compile-time after unrolling
      const int dn = get<1>(coord(i)) - n0 + kNOff;
      const float up = acc(i);        // even column 2j:   up_j
      const float gate = acc(i + 1);  // odd column 2j+1:  gate_j
      thread_base[staging_delta(dm, dn, phase)] =
          to_output((Act == 0 ? silu_fast(gate) : gelu_tanh_fast(gate)) * up, inv_out);
    }
  }

  // The same with the FP8 dequantisation: up = C(m, 2j)·sx(m)·sw(2j), gate = C(m, 2j+1)·sx(m)·sw(2j+1).
  // The fragment ((2, 2, BN'/8), MMA_M, MMA_N) is walked as (pair, row half, column block) so that
  // a thread loads each of its 2·MMA_M row scales once per tile (registers) and each of its column
  // scale pairs once (one 8-byte load, reused for all its rows). Scales of rows >= M and columns
  // >= 2U (tile tails, whose stores TMA clips) are not read.
  template <int Act, class AccTensor, class CoordTensor>
  CUTLASS_DEVICE void gate_pairs_dequant(AccTensor const& acc, CoordTensor const& coord, Element* thread_base, int m0,
                                         int n0, int phase, float inv_out, int m_base, int n_base) const {
    constexpr int kHalves = decltype(size<0, 1>(acc))::value;  // 2 rows (8 apart) per 64-row atom
    constexpr int kBlocks = decltype(size<0, 2>(acc))::value;  // 8-column blocks per atom
    constexpr int kMmaM = decltype(size<1>(acc))::value;
    constexpr int kMmaN = decltype(size<2>(acc))::value;
    const int32_t n_total = 2 * params_.u;
    const float sx0 = __ldg(params_.x_scale);
    const float sw0 = params_.w_per_channel ? 1.0f : __ldg(params_.w_scale);
    float row_scale[kHalves][kMmaM];
    CUTE_UNROLL
    for (int mm = 0; mm < kMmaM; ++mm)
      CUTE_UNROLL
      for (int h = 0; h < kHalves; ++h) {
        const int m = m_base + get<0>(coord(make_coord(make_coord(0, h, 0), mm, 0)));
        float s = sx0;
        if (params_.x_per_row) s = m < params_.m ? __ldg(params_.x_scale + m) : 0.0f;
        row_scale[h][mm] = s * sw0;
      }
    CUTE_UNROLL
    for (int mn = 0; mn < kMmaN; ++mn)
      CUTE_UNROLL
      for (int b = 0; b < kBlocks; ++b) {
        const int n = n_base + get<1>(coord(make_coord(make_coord(0, 0, b), 0, mn)));  // even
        float2 cs = make_float2(1.0f, 1.0f);
        if (params_.w_per_channel && n < n_total) cs = __ldg(reinterpret_cast<const float2*>(params_.w_scale + n));
        CUTE_UNROLL
        for (int mm = 0; mm < kMmaM; ++mm)
          CUTE_UNROLL
          for (int h = 0; h < kHalves; ++h) {
            const auto iu = make_coord(make_coord(0, h, b), mm, mn);
            const auto ig = make_coord(make_coord(1, h, b), mm, mn);
            const int dm = get<0>(coord(iu)) - m0;  // compile-time after unrolling
            const int dn = get<1>(coord(iu)) - n0;
            const float up = acc(iu) * (row_scale[h][mm] * cs.x);
            const float gate = acc(ig) * (row_scale[h][mm] * cs.y);
            thread_base[staging_delta(dm, dn, phase)] =
                to_output((Act == 0 ? silu_fast(gate) : gelu_tanh_fast(gate)) * up, inv_out);
          }
      }
  }

  // ---- device side ----
  CUTLASS_HOST_DEVICE GatedEpilogue(Params const& params, [[maybe_unused]] TensorStorage& storage)
      : params_(params) {}

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_store_h.get_tma_descriptor());
  }

  // One output tile. Called by every consumer thread of the tile: all 256 (cooperative, thread_idx
  // 0..255 over both warpgroups) or the 128 of one warpgroup (ping-pong, thread_idx 0..127; the
  // kernel's ordering barrier keeps the two warpgroups' epilogues apart in time).
  template <class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class AccEngine, class AccLayout,
            class TiledMma>
  CUTLASS_DEVICE auto store(LoadPipeline, LoadPipelineState load_pipe_consumer_state, StorePipeline,
                            StorePipelineState store_pipe_producer_state, ProblemShapeMNKL,
                            TileShapeMNK, TileCoordMNKL tile_coord_mnkl,
                            cute::Tensor<AccEngine, AccLayout> accumulators, TiledMma tiled_mma, int thread_idx,
                            TensorStorage& storage, [[maybe_unused]] int subtile_index = -1) {
    static_assert(accumulator_pairs_are_adjacent_columns<TiledMma>(),
                  "the gating assumes each thread's accumulators come in adjacent column pairs");
    static_assert(is_same_v<typename AccEngine::value_type, float>, "fp32 accumulators");
    constexpr int kThreads = int(size(TiledMma{}));
    // The thread that issues (and therefore must wait for) the bulk stores.
    const bool issuer = thread_idx == 0;
    auto sync_consumers = [] {
      cutlass::arch::NamedBarrier::sync(kThreads, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
    };

    // 1. The staging buffer is free once the previous tile's stores have read it. Only the issuing
    //    thread can wait on its bulk groups; the barrier passes that on to everyone.
    if (issuer) tma_store_wait<0>();
    sync_consumers();

    // 2. Gate in registers, write H(m, j) into the swizzled staging tile.
    //    Addressing (see staging_offset): the thread's first accumulator sits at (m0, n0); every
    //    other one at (m0 + dm, n0 + dn) with compile-time dm, dn (after unrolling) where dm % 8 == 0
    //    and dn % 8 == 0, and n0 = 2·(lane % 4) < 8 (GMMA's C layout;
    //    test_gating_layout_sm90.cu checks all of it for every thread). So for h column
    //    j = n0/2 + dn/2 the swizzle phase m % 8 = m0 % 8 is per-thread, the 16-byte chunk
    //    (dn/2 % 64) / 8 and the panel dn/2 / 64 are compile-time, and each store is
    //    "one of 8 per-thread base registers + an immediate". (Going through a CuTe swizzled
    //    tensor instead swizzles each full address, which ptxas hoisted out of the persistent
    //    loop as 64 live addresses per thread and spilled.)
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor tC = thr_mma.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));  // (m, n) per accumulator
    static_assert(size(tC) == size(accumulators) && size<0, 0>(accumulators) == 2,
                  "the coordinate partition must match the accumulators, pairs first");
    const int m0 = get<0>(tC(0));
    const int n0 = get<1>(tC(0));
    // In an N-split tile the second warpgroup's columns start at kWgCols (a multiple of 8); its
    // addressing is the first one's with that offset in every compile-time dn (staging_delta).
    constexpr int kWgCols = BN / kSplitN<TiledMma>;
    static_assert(kWgCols % 8 == 0, "a warpgroup's columns start on an 8-column atom");
    [[maybe_unused]] const bool second_wg = kSplitN<TiledMma> == 2 && n0 >= kWgCols;
    // The swizzle XORs address bits [4, 4 + log2 kPhases) with bits [7, 7 + log2 kPhases) of the
    // *absolute* shared address, in TMA as in CuTe's swizzle pointers. The buffer is declared
    // 1024-byte aligned, so the row phase is row_phase_aligned(m0) (m0 % 8 for 128-byte rows);
    // taking it from the address keeps this right even if the dynamic shared-memory base were only
    // 128-byte aligned.
    const int phase = row_phase(cute::cast_smem_ptr_to_uint(storage.smem_h.data()), m0);
    Element* thread_base = storage.smem_h.data() + m0 * kPanel + (n0 % 8) / 2;
    float inv_out = 1.0f;
    if constexpr (kFp8Out) inv_out = reciprocal_newton(__ldg(params_.out_scale));
    if constexpr (kDequant) {
      static_assert(kSplitN<TiledMma> == 1, "the FP8 rows stack their warpgroups along M");
      const int m_base = int(get<0>(tile_coord_mnkl)) * BM, n_base = int(get<1>(tile_coord_mnkl)) * BN;
      if (params_.act == 0)
        gate_pairs_dequant<0>(accumulators, tC, thread_base, m0, n0, phase, inv_out, m_base, n_base);
      else
        gate_pairs_dequant<1>(accumulators, tC, thread_base, m0, n0, phase, inv_out, m_base, n_base);
    } else if (second_wg) {
      if (params_.act == 0)
        gate_pairs<0, kWgCols>(accumulators, tC, thread_base, m0, n0, phase, inv_out);
      else
        gate_pairs<1, kWgCols>(accumulators, tC, thread_base, m0, n0, phase, inv_out);
    } else {
      if (params_.act == 0)
        gate_pairs<0, 0>(accumulators, tC, thread_base, m0, n0, phase, inv_out);
      else
        gate_pairs<1, 0>(accumulators, tC, thread_base, m0, n0, phase, inv_out);
    }

    // 3. Generic-proxy writes must be made visible to the async proxy (TMA) by each writer, then
    //    all writers must be done before the store is issued.
    cutlass::arch::fence_view_async_shared();
    sync_consumers();

    // 4. One thread stores the kPanels (BM, 64) panels. Out-of-range rows (m >= M, including a
    //    cluster's padding tiles) and columns (j >= U) are clipped by TMA.
    if (issuer) {
      const int m_tile = int(get<0>(tile_coord_mnkl));
      const int n_tile = int(get<1>(tile_coord_mnkl));
      Tensor mH = params_.tma_store_h.get_tma_tensor(make_shape(params_.m, params_.u));               // (M, U)
      auto cta_tma = params_.tma_store_h.get_slice(Int<0>{});
      CUTE_UNROLL
      for (int p = 0; p < kPanels; ++p) {
        Tensor gP = local_tile(mH, Shape<Int<BM>, Int<kPanel>>{}, make_coord(m_tile, n_tile * kPanels + p));
        Tensor sP = make_tensor(make_smem_ptr(storage.smem_h.data() + p * BM * kPanel), SmemLayoutPanel{});
        copy(params_.tma_store_h, cta_tma.partition_S(sP), cta_tma.partition_D(gP));
      }
      tma_store_arrive();
    }
    return cute::make_tuple(load_pipe_consumer_state, store_pipe_producer_state);
  }

  // After a tile (ping-pong) or at the end of the consumer loop (cooperative): the staging buffer
  // must not be reused by the other warpgroup, nor freed by the CTA exiting, while TMA reads it.
  CUTLASS_DEVICE auto store_tail(LoadPipeline, LoadPipelineState load_pipe_consumer_state, StorePipeline,
                                 StorePipelineState store_pipe_producer_state) {
    // Only the issuing thread (thread 0 of the tile's consumers, i.e. lane 0 of each consumer
    // warpgroup's first warp in ping-pong) has outstanding bulk groups; for the others this is a
    // no-op.
    tma_store_wait<0>();
    return cute::make_tuple(load_pipe_consumer_state, store_pipe_producer_state);
  }

 private:
  // A reference to the kernel's __grid_constant__ parameter, not a copy: the TMA store needs the
  // descriptor's address, and a copy would be forced into a local-memory stack frame.
  Params const& params_;
};

}  // namespace blockfuse::sm90
