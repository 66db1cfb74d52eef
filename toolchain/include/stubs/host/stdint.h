// <stdint.h>: one stub for the three consumers of CUDA sources without the CUDA toolkit's host side
// (toolchain/include/stubs/README.md): the parser (RT_PARSE), the CPU emulator (RT_CPU_EMULATOR), NVRTC.
#pragma once
#if defined(RT_CPU_EMULATOR)
#include_next <stdint.h>  // g++: the real header
#elif defined(__CUDACC_RTC__)
// NVRTC has no host headers: the few macros and typedefs device code takes from it
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
typedef long intptr_t; typedef unsigned long uintptr_t;
#else  // the parser (RT_PARSE: system headers parse with stubs/clang/) and other compilers
#include_next <stdint.h>
#endif
