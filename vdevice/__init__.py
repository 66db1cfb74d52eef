"""vDevice: rPrograms built with Append/Wait, run as one persistent interpreter launch each (or op by op)."""
from pathlib import Path

from .executors import GraphExecutor, OpByOpExecutor, PersistentExecutor, VDevice, VDeviceError
from .program import (ArgRef, KernelRef, Op, Program, ProgramError, Run, TaskRef, Wait, plan_from_json, plan_to_json,
                      validate, validate_plan)

RUNTIME_INCLUDE = Path(__file__).resolve().parent / "include"  # rtask_runtime.cuh, vdevice_runtime.cuh

__all__ = ["RUNTIME_INCLUDE",
           "ArgRef", "GraphExecutor", "KernelRef", "Op", "OpByOpExecutor", "PersistentExecutor", "Program",
           "ProgramError", "Run", "TaskRef", "VDevice", "VDeviceError", "Wait", "plan_from_json", "plan_to_json",
           "validate", "validate_plan"]
