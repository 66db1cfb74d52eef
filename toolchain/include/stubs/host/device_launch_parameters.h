// <device_launch_parameters.h>: one stub for the three consumers of CUDA sources without the CUDA toolkit's host side
// (toolchain/include/stubs/README.md): the parser (RT_PARSE), the CPU emulator (RT_CPU_EMULATOR), NVRTC.
#pragma once
#if defined(RT_CPU_EMULATOR)
#include "cuda_emu.h"  // everything device code needs
#endif
// RT_PARSE: the parse prelude declares the device API; NVRTC: device code needs nothing of the host runtime
