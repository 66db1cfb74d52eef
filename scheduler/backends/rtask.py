"""The `rtask` backend: the corpus's rKernels (every variant), run as rTasks inside persistent rPrograms."""
from __future__ import annotations

NAME = "rtask"
KIND = "rkernel"  # its nodes run inside rPrograms


def available(target: str) -> str | None:
    """rKernels run on every target (the GPU, and the CPU through the emulator)."""
    return None
