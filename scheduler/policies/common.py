"""What the policies share: a candidate rKernel's standalone time and total work, and the waves of a DFG."""
from __future__ import annotations

from ..profiler import Profiler
from ..workload import Candidate, OpSpec, Workload


def candidate_us(profiler: Profiler, cand: Candidate, veus: int) -> float:
    """The rKernel alone on `veus` vEUs: rounds of rTasks per launch, a barrier between its launches."""
    total = sum(profiler.launch_us(launch, veus) for launch in cand.launches)
    return total + profiler.device.barrier_us * (len(cand.launches) - 1)


def candidate_work(profiler: Profiler, cand: Candidate) -> float:
    """vEU-time the rKernel occupies: rTasks x rTask time, summed over its launches."""
    return sum(launch.rtasks * profiler.rtask_us(launch) for launch in cand.launches)


def candidate_rtasks(cand: Candidate) -> int:
    """rTasks the rKernel can run at once: its widest launch."""
    return max(launch.rtasks for launch in cand.launches)


def fastest(profiler: Profiler, spec: OpSpec, veus: int) -> Candidate:
    """Least standalone time on `veus` vEUs (ties: fewer rTasks, then corpus order)."""
    return min(spec.candidates, key=lambda c: (candidate_us(profiler, c, veus), candidate_rtasks(c)))


def most_efficient(profiler: Profiler, spec: OpSpec) -> Candidate:
    """Least rTask time x rTasks (ties: the faster one is not known here, so corpus order)."""
    return min(spec.candidates, key=lambda c: candidate_work(profiler, c))


def waves(workload: Workload) -> list[list[int]]:
    """BFS fringes: wave k holds the nodes whose longest path from a source has k edges."""
    level = [0] * len(workload.ops)
    for op in workload.ops:
        level[op.index] = 1 + max((level[p] for p in op.preds), default=-1)
    out: list[list[int]] = [[] for _ in range(max(level, default=-1) + 1)]
    for op in workload.ops:
        out[level[op.index]].append(op.index)
    return out
