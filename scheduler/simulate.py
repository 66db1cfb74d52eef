"""Timing of an rProgram (vdevice.program.Program) by running its vEUs in simulation, and the timing rule the
mechanism shares with it. A wait that can never be met is reported, never looped on."""
from __future__ import annotations

from typing import Callable, Iterable, Union

import numpy as np
from vdevice.program import Program, ProgramError, Run, execution_order

from .graph import SchedulerError


def start_time(prev_end: float, wait_ends: Iterable[float], barrier_us: float) -> float:
    """A task starts when its vEU is free and, after a barrier-rTask, when the tasks it awaits have finished."""
    ends = list(wait_ends)
    return max(prev_end, max(ends) + barrier_us) if ends else prev_end


Barrier = Union[float, Callable[[int], float]]  # a barrier-rTask's cost, or its cost by count of awaited vEUs


def barrier_cost(barrier: Barrier, awaited: int) -> float:
    """The cost of a barrier-rTask that awaits `awaited` vEUs."""
    return barrier(awaited) if callable(barrier) else barrier


def makespan(program: Program, duration: Callable[[int], float], barrier_us: Barrier) -> float:
    """When the last vEU finishes, each Run taking duration(op) and each Wait costing a barrier."""
    ends = veu_ends(program, duration, barrier_us)
    return max((lst[-1] for lst in ends if lst), default=0.0)


def veu_ends(program: Program, duration: Callable[[int], float], barrier_us: Barrier) -> list[list[float]]:
    """End time of every Run, per vEU in order, running the vEUs in an order they can run them
    (vdevice.program.execution_order); a barrier-rTask's awaited ends are gathered from one array."""
    nv = program.num_veus
    offsets = np.cumsum([0] + [program.steps(v) for v in range(nv)])
    flat = np.zeros(int(offsets[-1]))  # every Run's end, vEU after vEU
    ready = [0.0] * nv  # when the vEU may start its next Run (after its last Run and any Wait since)
    ends: list[list[float]] = [[] for _ in range(nv)]
    try:
        for v, instr, targets in execution_order(program):
            if isinstance(instr, Run):
                ready[v] = ready[v] + duration(instr.task.op)
                flat[offsets[v] + len(ends[v])] = ready[v]
                ends[v].append(ready[v])
            elif targets is not None and targets[0].size:
                us, ks = targets
                latest = float(flat[offsets[us] + ks].max())
                ready[v] = start_time(ready[v], [latest], barrier_cost(barrier_us, len(us)))
    except ProgramError as exc:
        raise SchedulerError(f"rProgram deadlocks: {exc}") from None
    return ends
