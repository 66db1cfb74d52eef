"""The `rtask` backend: the corpus's rKernels (every variant), run as rTasks inside persistent rPrograms. They run
on every target (the GPU, and the CPU through the emulator)."""
from __future__ import annotations

from vdevice.target import BackendName

from .base import Backend, binding_candidates

BACKEND = Backend(BackendName.RTASK, "corpus rKernels inside persistent rPrograms",
                  candidates=binding_candidates(BackendName.RTASK), in_default=True)
