// <float.h>: one stub for the three consumers of CUDA sources without the CUDA toolkit's host side
// (toolchain/include/stubs/README.md): the parser (RT_PARSE), the CPU emulator (RT_CPU_EMULATOR), NVRTC.
#pragma once
#if defined(RT_CPU_EMULATOR)
#include_next <float.h>  // g++: the real header
#elif defined(__CUDACC_RTC__)
// NVRTC has no host headers: the few macros and typedefs device code takes from it
#define FLT_MAX 3.402823466e+38F
#define FLT_MIN 1.175494351e-38F
#define FLT_EPSILON 1.192092896e-07F
#define DBL_MAX 1.7976931348623158e+308
#else  // the parser (RT_PARSE: system headers parse with stubs/clang/) and other compilers
#include_next <float.h>
#endif
