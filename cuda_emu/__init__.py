"""CUDA C++ on the CPU: g++ builds a CUDA source against `include/cuda_emu.h`; every CUDA thread is a fiber.

Used by `rtransform run/verify`, the corpus tests and the vDevice's CPU backend; needs no GPU and no CUDA
toolkit. What it emulates, what it does not, and its knobs: README.md beside this file."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .module import INCLUDE_DIR, CpuModule, EmuCompileError, EmuError, LaunchStats, rewrite_shared


def __getattr__(name: str) -> Any:
    """The public names load the emulator on first use, so that `import cuda_emu.options` (the CLIs' start-up)
    stays light."""
    if name in __all__:
        from . import module
        return getattr(module, name)
    raise AttributeError(f"module 'cuda_emu' has no attribute {name!r}")


__all__ = ["INCLUDE_DIR", "CpuModule", "EmuCompileError", "EmuError", "LaunchStats", "rewrite_shared"]
