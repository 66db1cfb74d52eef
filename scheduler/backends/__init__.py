"""Backends as registrations: each backend module defines one `Backend` (scheduler.backends.base) with the hooks it
contributes, and this registry lists them; the workload, the placement's prices, the build and the runtime loop over
the enabled ones and name none. `rtask`: the corpus's rKernels inside rPrograms; `user`: a user's legacy kernel
library, converted to rKernels like the corpus; `library`: vendor calls as their own plan steps (and the onnxruntime
fallback for a node nothing else runs on the CPU target)."""
from __future__ import annotations

from typing import Any

from vdevice.target import BackendName, TargetKind

from ..graph import SchedulerError
from . import library, rtask, user
from .base import Backend, Candidate

__all__ = ["BACKENDS", "Backend", "Candidate", "add_libraries", "available_backends", "call_cost", "check_backends",
           "default_backends", "run_call"]

BACKENDS: dict[BackendName, Backend] = {b.name: b for b in (rtask.BACKEND, library.BACKEND, user.BACKEND)}


def available_backends(kind: TargetKind | str, with_libraries: bool = True) -> list[BackendName]:
    """The backends that run on the target on this machine (those that take libraries only `with_libraries`): the
    default of `rammer build --backends`."""
    return [b.name for b in BACKENDS.values() if b.available(TargetKind(kind)) is None
            and (with_libraries or not b.takes)]


def default_backends(with_libraries: bool) -> tuple[BackendName, ...]:
    """What a build that names no backends plans for: the default ones (those that take libraries only when given
    some)."""
    return tuple(b.name for b in BACKENDS.values() if b.in_default and (with_libraries or not b.takes))


def check_backends(names: list[str] | tuple[str, ...], with_libraries: bool = False) -> tuple[BackendName, ...]:
    """Known backends, at least one, and libraries given exactly when an enabled backend takes them; a one-line
    error otherwise. A backend named explicitly is planned for even where it cannot run on this machine (a GPU build
    without CuPy here): running the build needs it."""
    unknown = [n for n in names if n not in set(BackendName)]
    if unknown:
        raise SchedulerError(f"unknown backend '{unknown[0]}' (choose from {', '.join(BACKENDS)})")
    if not names:
        raise SchedulerError("no backend enabled: name at least one of " + ", ".join(BACKENDS))
    enabled = tuple(dict.fromkeys(BackendName(n) for n in names))
    for b in (BACKENDS[n] for n in enabled):
        if b.takes and not with_libraries:
            raise SchedulerError(f"--backends {b.name} needs {b.takes}")
    if with_libraries and not any(BACKENDS[n].takes for n in enabled):
        takers = " or ".join(b.name for b in BACKENDS.values() if b.takes)
        raise SchedulerError(f"--user-lib given but the {takers} backend is not enabled (add it to --backends)")
    return enabled


def add_libraries(registry: Any, enabled: tuple[BackendName, ...], folders: list) -> Any:
    """The registry with the libraries (folders) added by each enabled backend that takes them."""
    for name in enabled:
        hook = BACKENDS[name].libraries
        if hook is not None and folders:
            registry = hook(registry, folders)
    return registry


def call_cost(call: Any, device: Any) -> float:
    """The cost model's µs of a call step (scheduler.plan.LibraryCall) on a device, by the backend that runs it."""
    cost = BACKENDS[BackendName(call.backend)].cost
    if cost is None:
        raise SchedulerError(f"backend {call.backend} prices no calls")
    return cost(call, device)


def run_call(call: Any, arrays: dict[str, Any], xp: Any) -> None:
    """Run one call step on named arrays (numpy or CuPy: `xp`) by the backend that runs it."""
    run = BACKENDS[BackendName(call.backend)].run
    if run is None:
        raise SchedulerError(f"backend {call.backend} runs no calls")
    run(call, arrays, xp)
