// <nvtx3/nvToolsExt.h>: a vendor library header kernels do not need (toolchain/include/stubs/README.md). The parser (RT_PARSE)
// and the CPU emulator (RT_CPU_EMULATOR) get the types, enumerators and macros host code around kernels names,
// so that a file (or a local header) using the library parses and its device code builds; NVRTC gets nothing;
// any other compiler gets the real header.
#pragma once
#if defined(RT_PARSE) || defined(RT_CPU_EMULATOR)
typedef int nvtxRangeId_t;
#define nvtxRangePush(name) ((void)(name), 0)
#define nvtxRangePushA(name) ((void)(name), 0)
#define nvtxRangePop() 0
#define nvtxMarkA(name) ((void)(name))
#define nvtxNameOsThreadA(id, name) ((void)(id), (void)(name))
#elif !defined(__CUDACC_RTC__)
#include_next <nvtx3/nvToolsExt.h>
#endif
