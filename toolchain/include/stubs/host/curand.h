// <curand.h>: a vendor library header kernels do not need (toolchain/include/stubs/README.md). The parser (RT_PARSE)
// and the CPU emulator (RT_CPU_EMULATOR) get the types, enumerators and macros host code around kernels names,
// so that a file (or a local header) using the library parses and its device code builds; NVRTC gets nothing;
// any other compiler gets the real header.
#pragma once
#if defined(RT_PARSE) || defined(RT_CPU_EMULATOR)
#include "cuda_runtime.h"
typedef enum { CURAND_STATUS_SUCCESS = 0, CURAND_STATUS_NOT_INITIALIZED = 101 } curandStatus_t;
typedef enum { CURAND_RNG_PSEUDO_DEFAULT = 100, CURAND_RNG_PSEUDO_XORWOW = 101, CURAND_RNG_PSEUDO_PHILOX4_32_10 = 161,
               CURAND_RNG_QUASI_DEFAULT = 200 } curandRngType_t;
typedef struct curandGenerator_st* curandGenerator_t;
#elif !defined(__CUDACC_RTC__)
#include_next <curand.h>
#endif
