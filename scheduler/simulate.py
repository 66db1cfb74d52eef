"""Timing of an rProgram (vdevice.program.Program) by running its vEUs in simulation, and the timing rule the
mechanism shares with it. A wait that can never be met is reported, never looped on.

What each instruction costs is a `StepCosts` (the profiler makes one from scheduler/dispatch_costs.py): an rTask
its dispatch and body, plus the argument fetch from L2 when it is the first of its op on the vEU or follows a wait
(the acquire invalidated L1), plus the publish when some wait awaits it (on its own vEU: the fence drains before the
vEU can dispatch again); a barrier-rTask whose rTasks are already visible costs the satisfied wait, else it ends
when the last awaited rTask's publish is seen (the hand-off by fan-in)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Union

from vdevice.program import Program, Run, Wait

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


def awaited_steps(program: Program) -> set[tuple[int, int]]:
    """(vEU, order among its rTasks) of every rTask some barrier-rTask awaits: the ones that publish."""
    return {t for instrs in program.veus for i in instrs if isinstance(i, Wait) for t in i.targets}


def simulate(program: Program, costs: StepCosts) -> Timeline:
    """Every Run's start and end, per vEU; advances each vEU until it blocks, wakes it when it may go on."""
    nv = program.num_veus
    publishes = awaited_steps(program) if costs.publish_us else set()
    pc = [0] * nv
    ready = [0.0] * nv  # when the vEU may start its next Run (after its last Run, its publish and any Wait since)
    last_op = [-1] * nv  # the op of the vEU's previous Run, -1 after a wait (L1 invalidated) or at the start
    starts: list[list[float]] = [[] for _ in range(nv)]
    ends: list[list[float]] = [[] for _ in range(nv)]
    blocked: list[list[tuple[int, int]]] = [[] for _ in range(nv)]  # per awaited vEU: (order, waiting vEU)
    queue = list(range(nv))
    while queue:
        v = queue.pop()
        instrs = program.veus[v]
        while pc[v] < len(instrs):
            instr = instrs[pc[v]]
            if isinstance(instr, Run):
                op = instr.task.op
                start = ready[v]
                end = start + costs.duration(op) + (costs.arg_fetch_us if op != last_op[v] else 0.0)
                starts[v].append(start)
                ends[v].append(end)
                ready[v] = end + (costs.publish_us if (v, len(ends[v]) - 1) in publishes else 0.0)
                last_op[v] = op
            else:
                missing = next(((u, k) for u, k in instr.targets if len(ends[u]) <= k), None)
                if missing is not None:
                    blocked[missing[0]].append((missing[1], v))
                    break
                seen = max(ends[u][k] for u, k in instr.targets) + barrier_cost(costs.visible, len(instr.targets))
                ready[v] = max(ready[v] + costs.satisfied_us, seen)
                last_op[v] = -1
            pc[v] += 1
        still = []
        for k, w in blocked[v]:  # each vEU sits in the queue or in one blocked list, never in both
            if len(ends[v]) > k:
                queue.append(w)
            else:
                still.append((k, w))
        blocked[v] = still
    stuck = [v for v in range(nv) if pc[v] < len(program.veus[v])]
    if stuck:
        raise SchedulerError(f"rProgram deadlocks: vEU {stuck[0]} is stuck at instruction {pc[stuck[0]]} "
                             f"({len(stuck)} vEU(s) stuck)")
    return Timeline(starts, ends)
