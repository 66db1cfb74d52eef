// <helper_functions.h>: a vendor library header kernels do not need (toolchain/include/stubs/README.md). The parser (RT_PARSE)
// and the CPU emulator (RT_CPU_EMULATOR) get the types, enumerators and macros host code around kernels names,
// so that a file (or a local header) using the library parses and its device code builds; NVRTC gets nothing;
// any other compiler gets the real header.
#pragma once
#if defined(RT_PARSE) || defined(RT_CPU_EMULATOR)
#include "helper_string.h"
#include "helper_timer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#elif !defined(__CUDACC_RTC__)
#include_next <helper_functions.h>
#endif
