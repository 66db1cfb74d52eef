"""vDevice: rPrograms built with Append/Wait, run as one persistent interpreter launch each (or op by op).

The public names load their modules on first use, so that importing a light part (vdevice.target, which the
corpus bindings and the CLIs' start-up read) does not load the executors, the code generator and numpy."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .executors import GraphExecutor, OpByOpExecutor, PersistentExecutor, VDevice, VDeviceError
    from .program import (ArgRef, KernelRef, Op, Program, ProgramError, Run, TaskRef, Wait, plan_from_json,
                          plan_to_json, validate, validate_plan)

RUNTIME_INCLUDE = Path(__file__).resolve().parent / "include"  # rtask_runtime.cuh, vdevice_runtime.cuh

_EXECUTORS = {"GraphExecutor", "OpByOpExecutor", "PersistentExecutor", "VDevice", "VDeviceError"}

__all__ = ["RUNTIME_INCLUDE",
           "ArgRef", "GraphExecutor", "KernelRef", "Op", "OpByOpExecutor", "PersistentExecutor", "Program",
           "ProgramError", "Run", "TaskRef", "VDevice", "VDeviceError", "Wait", "plan_from_json", "plan_to_json",
           "validate", "validate_plan"]


def __getattr__(name: str) -> Any:
    """Load the module that holds a public name on first use."""
    if name in __all__:
        from . import executors, program
        return getattr(executors if name in _EXECUTORS else program, name)
    raise AttributeError(f"module 'vdevice' has no attribute {name!r}")
