// <helper_string.h>: a vendor library header kernels do not need (toolchain/include/stubs/README.md). The parser (RT_PARSE)
// and the CPU emulator (RT_CPU_EMULATOR) get the types, enumerators and macros host code around kernels names,
// so that a file (or a local header) using the library parses and its device code builds; NVRTC gets nothing;
// any other compiler gets the real header.
#pragma once
#if defined(RT_PARSE) || defined(RT_CPU_EMULATOR)
#include <string.h>
#include <stdlib.h>
// cuda-samples Common/helper_string.h: command-line helpers (host code only)
inline bool checkCmdLineFlag(int, const char**, const char*) { return false; }
inline int getCmdLineArgumentInt(int, const char**, const char*) { return 0; }
inline float getCmdLineArgumentFloat(int, const char**, const char*) { return 0.0f; }
inline bool getCmdLineArgumentString(int, const char**, const char*, char**) { return false; }
inline char* sdkFindFilePath(const char*, const char*) { return nullptr; }
#elif !defined(__CUDACC_RTC__)
#include_next <helper_string.h>
#endif
