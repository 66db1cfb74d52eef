"""CUDA C++ on the CPU: g++ builds a CUDA source against `include/cuda_emu.h`; every CUDA thread is a fiber.

Used by `rtransform run/verify`, the corpus tests and the vDevice's CPU backend; needs no GPU and no CUDA
toolkit. What it emulates, what it does not, and its knobs: README.md beside this file."""
from .module import INCLUDE_DIR, CpuModule, EmuCompileError, EmuError, LaunchStats, rewrite_shared

__all__ = ["INCLUDE_DIR", "CpuModule", "EmuCompileError", "EmuError", "LaunchStats", "rewrite_shared"]
