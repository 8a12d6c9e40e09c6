// Internal: asynchronous global -> shared copies (cp.async, sm_80+), without CuTe: the
// copied bytes occupy no registers while in flight, so a kernel can keep many of them outstanding.
#pragma once

#include <cuda_runtime.h>

namespace blockfuse::detail {

// Starts copying 16 bytes (both addresses 16-byte aligned); L2 only (.cg: streamed data).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
// The same through L1 (.ca): two copies of the two 16-byte halves of one 32-byte sector meet in L1
// instead of each fetching the sector from L2.
__device__ __forceinline__ void cp_async16_ca(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
// 16 bytes global -> shared, or 16 zero bytes when !pred (the source is then not read).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool pred) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(pred ? 16 : 0) : "memory");
}
// 4 bytes global -> shared (both 4-byte aligned; .ca, the only cache mode that takes 4), or 4 zero
// bytes when !pred (the source is then not read).
__device__ __forceinline__ void cp_async4_zfill(void* smem, const void* gmem, bool pred) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(pred ? 4 : 0) : "memory");
}
// Closes the group of this thread's copies issued so far.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits for all of this thread's committed groups: its copies are then visible to itself (other
// threads need a barrier as well).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Waits until at most `kPending` of this thread's committed groups (the latest) are incomplete.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace blockfuse::detail
