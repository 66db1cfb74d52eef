// <cuda.h>: one stub for the three consumers of CUDA sources without the CUDA toolkit's host side
// (toolchain/include/stubs/README.md): the parser (RT_PARSE), the CPU emulator (RT_CPU_EMULATOR), NVRTC.
#pragma once
// RT_CPU_EMULATOR: nothing here; cuda_emu.h, included first (it defines the macro), declares it all
// RT_PARSE: the parse prelude declares the device API; NVRTC: device code needs nothing of the host runtime
