// <helper_cuda.h>: a vendor library header kernels do not need (toolchain/include/stubs/README.md). The parser (RT_PARSE)
// and the CPU emulator (RT_CPU_EMULATOR) get the types, enumerators and macros host code around kernels names,
// so that a file (or a local header) using the library parses and its device code builds; NVRTC gets nothing;
// any other compiler gets the real header.
#pragma once
#if defined(RT_PARSE) || defined(RT_CPU_EMULATOR)
#include <stdio.h>
#include <stdlib.h>
#include "cuda_runtime.h"
// cuda-samples Common/helper_cuda.h: its error-checking macros and device queries (host code only)
#ifndef checkCudaErrors
#define checkCudaErrors(val) ((void)(val))
#endif
#ifndef getLastCudaError
#define getLastCudaError(msg) ((void)(msg))
#endif
#define printLastCudaError(msg) ((void)(msg))
#ifndef MAX
#define MAX(a, b) (a > b ? a : b)
#endif
#ifndef MIN
#define MIN(a, b) (a < b ? a : b)
#endif
inline int findCudaDevice(int, const char**) { return 0; }
inline int gpuDeviceInit(int id) { return id; }
inline int _ConvertSMVer2Cores(int, int) { return 128; }
inline const char* _ConvertSMVer2ArchName(int, int) { return "Hopper"; }
#elif !defined(__CUDACC_RTC__)
#include_next <helper_cuda.h>
#endif
