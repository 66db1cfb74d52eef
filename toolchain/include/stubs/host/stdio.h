// <stdio.h>: one stub for the three consumers of CUDA sources without the CUDA toolkit's host side
// (toolchain/include/stubs/README.md): the parser (RT_PARSE), the CPU emulator (RT_CPU_EMULATOR), NVRTC.
#pragma once
#if defined(RT_CPU_EMULATOR)
#include_next <stdio.h>  // g++: the real header
#elif defined(__CUDACC_RTC__)
// NVRTC has no host headers: the few macros and typedefs device code takes from it
#elif defined(RT_PARSE)
typedef struct __rt_parse_FILE FILE;
extern FILE* stdin;
extern FILE* stdout;
extern FILE* stderr;
extern "C" int fprintf(FILE*, const char*, ...);
extern "C" int sprintf(char*, const char*, ...);
extern "C" int snprintf(char*, unsigned long, const char*, ...);
extern "C" int puts(const char*);
extern "C" int fflush(FILE*);
extern "C" FILE* fopen(const char*, const char*);
extern "C" int fclose(FILE*);
#else
#include_next <stdio.h>
#endif
