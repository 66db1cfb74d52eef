// <cuda_runtime.h>: one stub for the three consumers of CUDA sources without the CUDA toolkit's host side
// (toolchain/include/stubs/README.md): the parser (RT_PARSE), the CPU emulator (RT_CPU_EMULATOR), NVRTC.
#pragma once
// RT_CPU_EMULATOR: nothing here; cuda_emu.h, included first (it defines the macro), declares it all
// RT_PARSE: the parse prelude declares the device API; NVRTC: device code needs nothing of the host runtime
#if defined(RT_CPU_EMULATOR) || defined(__CUDACC_RTC__)
// Legacy headers often declare their host API next to their device helpers (a library's `sgemm(...)` returning
// cudaError_t and taking a stream). Device code never calls it, but its declarations must compile: the types and
// names such declarations use, declared only (host functions are sliced out of the sources before conversion).
#ifndef RT_STUB_HOST_RUNTIME_DECLS
#define RT_STUB_HOST_RUNTIME_DECLS
typedef int cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
enum { cudaSuccess = 0 };
#endif
#endif
#if defined(RT_PARSE)
// nvcc's cuda_runtime.h brings the host C library (its crt/common_functions.h includes these): host code around the
// kernels calls malloc, free, exit, rand, memcpy, strcmp, printf, clock with no #include of its own. Only files
// that include <cuda_runtime.h> pay for parsing them (the parse prelude itself stays small).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#endif
