"""Backends as registrations: each one a small module saying what it runs and how (`rtask`: the corpus's rKernels
inside rPrograms; `user`: a user's legacy kernel library, converted to rKernels like the corpus; `library`: vendor
calls as their own plan steps). A backend of kind "rkernel" contributes corpus-style bindings (its nodes are
rTasks); one of kind "call" contributes `LibraryCall` steps that close the current rProgram.

Fallback API (for nodes without an rKernel): `library_call(node_info, inputs, outputs, target)` returns the
`scheduler.plan.LibraryCall` step that runs the node, or the `Refusal` saying why it cannot; `build_workload(...,
backends=("rtask", "library"))` puts those calls on `OpSpec.calls`, so a node with no rKernel but a call is
planned as a library step instead of being refused."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import library, rtask, user
from .library import fallback_call, library_call

__all__ = ["BACKENDS", "Backend", "available_backends", "check_backends", "fallback_call", "library_call"]


@dataclass(frozen=True)
class Backend:
    """One registered backend: its name, kind ("rkernel" or "call") and whether it runs on a target."""

    name: str
    kind: str
    available: Callable[[str], "str | None"]  # target -> None, or why it is unavailable there
    about: str


def _library_available(target: str) -> str | None:
    """numpy on the CPU target; on the GPU CuPy (cuBLAS, cuDNN) must import."""
    if target != "gpu":
        return None
    try:
        import cupy  # noqa: F401
    except ImportError as exc:
        return f"CuPy is not installed ({exc}); pip install -e '.[gpu]'"
    return None


BACKENDS: dict[str, Backend] = {
    rtask.NAME: Backend(rtask.NAME, rtask.KIND, rtask.available, "corpus rKernels inside persistent rPrograms"),
    library.NAME: Backend(library.NAME, library.KIND, _library_available,
                          "vendor calls as plan steps: cuBLAS/cuDNN through CuPy on the GPU, numpy on the CPU"),
    user.NAME: Backend(user.NAME, user.KIND, user.available,
                       "a user's legacy kernel library (.cu + bindings.yaml), converted to rKernels"),
}


def available_backends(target: str) -> list[str]:
    """The backends that run on `target` on this machine: the default of `rammer build --backends`."""
    return [b.name for b in BACKENDS.values() if b.available(target) is None]


def check_backends(names: list[str] | tuple[str, ...], target: str) -> tuple[str, ...]:
    """Known backends, at least one; a one-line error otherwise. A backend named explicitly is planned for even
    where it cannot run on this machine (a GPU build without CuPy here): running the build needs it."""
    from ..graph import SchedulerError
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise SchedulerError(f"unknown backend '{unknown[0]}' (choose from {', '.join(BACKENDS)})")
    if not names:
        raise SchedulerError("no backend enabled: name at least one of " + ", ".join(BACKENDS))
    return tuple(dict.fromkeys(names))
