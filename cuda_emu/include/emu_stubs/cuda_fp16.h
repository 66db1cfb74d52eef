// Stub for the CPU emulator: everything CUDA device code needs comes from cuda_emu.h.
#pragma once
#include "cuda_emu.h"
