// <cooperative_groups.h>: one stub for the two consumers of CUDA sources without the CUDA toolkit's host side
// (toolchain/include/stubs/README.md): the parser (RT_PARSE), the CPU emulator (RT_CPU_EMULATOR); NVRTC and nvcc
// bring their own (this folder is never on their path).
#pragma once
// RT_CPU_EMULATOR: nothing here; cuda_emu.h, included first (it defines the macro), declares it all
// RT_PARSE: the parse prelude declares it
