// Internal: an inline-asm statement for sm_90+ only (cluster barriers, PDL's griddepcontrol): it
// compiles to nothing below sm_90, where the instructions do not exist.
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define BF_SM90_ASM(insn) asm volatile(insn ::: "memory")
#else
#define BF_SM90_ASM(insn) \
  do {                    \
  } while (0)
#endif
