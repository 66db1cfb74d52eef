// <stdlib.h>: one stub for the three consumers of CUDA sources without the CUDA toolkit's host side
// (toolchain/include/stubs/README.md): the parser (RT_PARSE), the CPU emulator (RT_CPU_EMULATOR), NVRTC.
#pragma once
#if defined(RT_CPU_EMULATOR)
#include_next <stdlib.h>  // g++: the real header
#elif defined(__CUDACC_RTC__)
// NVRTC has no host headers: the few macros and typedefs device code takes from it
#else  // the parser (RT_PARSE: system headers parse with stubs/clang/) and other compilers
#include_next <stdlib.h>
#endif
