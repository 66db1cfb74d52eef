// Stub for the CPU emulator: cg::reduce is in cuda_emu.h.
#pragma once
#include "cuda_emu.h"
