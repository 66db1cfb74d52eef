// <cooperative_groups/scan.h>: one stub for the two consumers of CUDA sources without the CUDA toolkit's host side
// (toolchain/include/stubs/README.md): the parser (RT_PARSE), the CPU emulator (RT_CPU_EMULATOR); NVRTC and nvcc
// bring their own (this folder is never on their path).
#pragma once
#if defined(RT_CPU_EMULATOR)
#include "cuda_emu.h"  // everything device code needs
#endif
// RT_PARSE: the parse prelude declares it
