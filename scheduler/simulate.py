"""Timing of an rProgram (vdevice.program.Program) by running its vEUs in simulation, and the timing rule the
mechanism shares with it. A wait that can never be met is reported, never looped on.

What each instruction costs is a `StepCosts` (the profiler makes one from scheduler/dispatch_costs.py): an rTask
its dispatch and body, plus the argument fetch from L2 when it is the first of its op on the vEU or follows a wait
(the acquire invalidated L1), plus the publish when some wait awaits it (on its own vEU: the fence drains before the
vEU can dispatch again); a barrier-rTask whose rTasks are already visible costs the satisfied wait, else it ends
when the last awaited rTask's publish is seen (the hand-off by fan-in)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, Union

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


@dataclass(frozen=True)
class StepCosts:
    """How the simulation prices a program's instructions (µs); the defaults of the extra terms are zero, which is
    the simple model: an rTask takes its duration, a wait ends a barrier after the last awaited rTask."""

    duration: Callable[[int], float]  # op -> one rTask's dispatch and body
    visible: Barrier                  # awaited vEUs -> from the last awaited rTask's end until the waiter goes on
    arg_fetch_us: float = 0.0         # an rTask of another op than its vEU's previous one, or after a wait
    publish_us: float = 0.0           # an awaited rTask's release, on its own vEU
    satisfied_us: float = 0.0         # a wait whose awaited rTasks are already visible when it is reached


@dataclass
class Timeline:
    """Start and end of every Run, per vEU in order (the end is the body's; a publish follows it)."""

    starts: list[list[float]]
    ends: list[list[float]]

    @property
    def span(self) -> float:
        """When the last vEU finishes its last rTask."""
        return max((e[-1] for e in self.ends if e), default=0.0)


def makespan(program: Program, duration: Callable[[int], float], barrier_us: Barrier) -> float:
    """When the last vEU finishes, each Run taking duration(op) and each Wait costing a barrier."""
    return simulate(program, StepCosts(duration, barrier_us)).span


def veu_ends(program: Program, duration: Callable[[int], float], barrier_us: Barrier) -> list[list[float]]:
    """End time of every Run, per vEU in order (the simple model, see StepCosts)."""
    return simulate(program, StepCosts(duration, barrier_us)).ends


OrderedInstr = tuple[int, "int | None", "tuple[np.ndarray, np.ndarray] | None"]  # (vEU, a Run's op, a Wait's targets)


def simulate(program: Program, costs: StepCosts) -> Timeline:
    """Every Run's start and end, per vEU, running the vEUs in an order they can run them
    (vdevice.program.execution_order); the rTasks some wait awaits (they publish) marked from the wait table."""
    table = program.wait_table()
    steps = ((v, instr.task.op if isinstance(instr, Run) else None,
              targets if targets is not None and targets[0].size else None)
             for v, instr, targets in execution_order(program))
    try:
        return simulate_steps([program.steps(v) for v in range(program.num_veus)], steps,
                              [(table.target, table.order)], costs)
    except ProgramError as exc:
        raise SchedulerError(f"rProgram deadlocks: {exc}") from None


def simulate_steps(counts: Sequence[int], steps: Iterable[OrderedInstr],
                   awaited: Iterable[tuple[np.ndarray, np.ndarray]], costs: StepCosts) -> Timeline:
    """The timing rule over an execution order: `counts` Runs per vEU; each step a Run of an op on a vEU, or a
    barrier-rTask's awaited (vEUs, orders among their Runs), every awaited Run already run; `awaited` lists every
    wait's targets (the Runs that publish). A mechanism's records give the same steps before any Program exists."""
    nv = len(counts)
    offsets = np.cumsum([0, *counts])
    flat = np.zeros(int(offsets[-1]))  # every Run's end, vEU after vEU
    publishes = np.zeros(int(offsets[-1]), bool)
    if costs.publish_us:
        for us, ks in awaited:
            publishes[offsets[us] + ks] = True
    ready = [0.0] * nv  # when the vEU may start its next Run (after its last Run, its publish and any Wait since)
    last_op = [-1] * nv  # the op of the vEU's previous Run, -1 after a wait (L1 invalidated) or at the start
    starts: list[list[float]] = [[] for _ in range(nv)]
    ends: list[list[float]] = [[] for _ in range(nv)]
    for v, op, targets in steps:
        if op is not None:
            k = offsets[v] + len(ends[v])
            end = ready[v] + costs.duration(op) + (costs.arg_fetch_us if op != last_op[v] else 0.0)
            starts[v].append(ready[v])
            ends[v].append(end)
            flat[k] = end
            ready[v] = end + (costs.publish_us if publishes[k] else 0.0)
            last_op[v] = op
        elif targets is not None:
            us, ks = targets
            seen = float(flat[offsets[us] + ks].max()) + barrier_cost(costs.visible, len(us))
            ready[v] = max(ready[v] + costs.satisfied_us, seen)
            last_op[v] = -1
    return Timeline(starts, ends)
