// Internal: the device half of programmatic dependent launch (PDL, sm_90+; the host half is
// launch_kernel in launch.h and the switch in blockfuse/common.h).
//
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may have its CTAs made
// resident while the kernel before it in the stream is still draining; the launch gap (block
// scheduling, the predecessor's tail) then overlaps. Every kernel so launched calls pdl_wait()
// before its first global-memory access — inputs, weights and scale pointers alike, since any of
// them may be the predecessor's output — so it reads and writes exactly what it would without PDL.
// pdl_launch_dependents() lets the kernel after this one start its own launch early; that kernel's
// pdl_wait() still waits for this whole grid to complete and its writes to be visible (the CUDA
// contract for a programmatic dependent), so where the trigger sits changes timing, never results.
// Both compile to nothing below sm_90 and are no-ops when the launch carried no PDL attribute.
#pragma once

#include "common/sm90_asm.cuh"

namespace blockfuse::detail {

__device__ __forceinline__ void pdl_wait() { BF_SM90_ASM("griddepcontrol.wait;"); }

__device__ __forceinline__ void pdl_launch_dependents() { BF_SM90_ASM("griddepcontrol.launch_dependents;"); }

// The prologue of a PDL-launched kernel: wait for the predecessor, then let the successor launch.
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_launch_dependents();
}

}  // namespace blockfuse::detail
