// The part of CUTLASS's sm90 collective-epilogue interface (the members the warp-specialised
// GemmUniversal kernels name: Sm90TmaWarpSpecializedAdapter's) that an epilogue without a source
// tensor C implements the same way: no load pipeline, no workspace, no tensor maps to update.
// GatedEpilogue (epilogue_sm90.cuh) and DGatedEpilogue (dgated_epilogue_sm90.cuh) derive from it and
// add their types, arguments, store() and store_tail().
#pragma once

#include <cstddef>
#include <cstdint>

#include <cute/tensor.hpp>

#include "cutlass/cutlass.h"
#include "cutlass/pipeline/pipeline.hpp"

namespace blockfuse::sm90 {

struct NoLoadEpilogueBase {
  using StrideC = cute::Stride<int64_t, cute::Int<1>, int64_t>;  // C is never read
  using StrideD = StrideC;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  // A zero-stage load pipeline, as CUTLASS's operator-style adapter uses; the store "pipeline" is only
  // a state the kernel threads through (each epilogue does its own synchronisation).
  using LoadPipeline = cutlass::PipelineTransactionAsync<0>;
  using LoadPipelineState = cutlass::PipelineState<0>;
  using StorePipeline = cutlass::PipelineTmaStore<0>;
  using StorePipelineState = cutlass::PipelineState<0>;
  using PipelineStorage = typename LoadPipeline::SharedStorage;
  constexpr static uint32_t TmaTransactionBytes = 0;
  constexpr static bool RequiresTransactionBytes = false;

  template <class ProblemShape, class Arguments>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape, class Arguments>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class CtaTileMNK>
  CUTLASS_HOST_DEVICE static constexpr int get_load_pipe_increment(CtaTileMNK) {
    return 1;
  }
  template <class CtaTileMNK>
  CUTLASS_HOST_DEVICE static constexpr int get_store_pipe_increment(CtaTileMNK) {
    return 1;
  }

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  template <class Params, class TensorMapStorage>
  CUTLASS_DEVICE auto load_init(Params const&, TensorMapStorage&, int32_t, int32_t) {
    return cute::make_tuple(nullptr);
  }
  template <class ProblemShapeMNKL, class CtaTileMNK, class CtaCoordMNKL, class TiledMma, class TensorStorage>
  CUTLASS_DEVICE auto load(LoadPipeline, LoadPipelineState load_pipe_producer_state, ProblemShapeMNKL, CtaTileMNK,
                           CtaCoordMNKL, TiledMma, int, TensorStorage&, int = -1) {
    return load_pipe_producer_state;
  }
  CUTLASS_DEVICE auto load_tail(LoadPipeline, LoadPipelineState load_pipe_producer_state) {
    return load_pipe_producer_state;
  }
  template <class Params, class TensorMapStorage>
  CUTLASS_DEVICE auto store_init(Params const&, TensorMapStorage&, int32_t, int32_t, int32_t) {
    return cute::make_tuple(nullptr);
  }

  // Ptr-array (grouped) kernels only.
  template <bool IsLoad, class TensorMapStorage, class Params, class ProblemShapeMNKL>
  CUTLASS_DEVICE void tensormaps_perform_update(TensorMapStorage&, Params const&, cute::TmaDescriptor const*,
                                                ProblemShapeMNKL, int32_t, int32_t) {}
  template <bool IsLoad, class TensorMapStorage>
  CUTLASS_DEVICE void tensormaps_cp_fence_release(TensorMapStorage&, cute::TmaDescriptor const*, int32_t) {}
  template <bool IsLoad>
  CUTLASS_DEVICE void tensormaps_fence_acquire(cute::TmaDescriptor const*) {}
};

}  // namespace blockfuse::sm90
