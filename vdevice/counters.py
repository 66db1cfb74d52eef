"""Which counters an rProgram's barrier-rTasks poll: the awaited rTasks grouped so that one counter per group
(normally one per awaited op) serves every wait exactly, whatever its fan-in.

A wait (vEU v, targets {(u, k)}) needs rTask k of each vEU u finished. Every awaited rTask belongs to one group and,
when it finishes, adds 1 to its group's counter; a wait polls the counters of its targets' groups until each has
reached its group's size. That is no stronger than the wait itself only if every member of each such group is one
the wait already implies: a target, an earlier rTask on a target's vEU, an earlier rTask on v itself, or one an
earlier wait on v covered. Groups start as "the awaited rTasks of one op" and are split where a wait would
otherwise wait for more than it asked (a subset of an op's rTasks, say), so waits never gain a dependency (no new
deadlock) and never lose one."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .program import Program, Run, Wait

TaskPosition = tuple[int, int]  # an rTask by where it runs: (vEU, order among its rTasks)


@dataclass(frozen=True)
class Counters:
    """The grouping of one program's awaited rTasks."""

    of_step: dict[TaskPosition, int]  # awaited rTask -> its counter
    members: tuple[tuple[TaskPosition, ...], ...]  # counter -> the rTasks that increment it (once each per run)
    waits: tuple[tuple[int, ...], ...]  # barrier-rTask, in program order (vEU by vEU) -> counters it polls

    @property
    def sizes(self) -> list[int]:
        """Increments per run of each counter."""
        return [len(m) for m in self.members]


def group_waits(program: Program) -> Counters:
    """Group the awaited rTasks of `program` (see the module docstring)."""
    waits = [(v, pc, instr) for v, instrs in enumerate(program.veus) for pc, instr in enumerate(instrs)
             if isinstance(instr, Wait)]
    runs = [program.runs(v) for v in range(program.num_veus)]
    groups: list[list[TaskPosition]] = []
    of_step: dict[TaskPosition, int] = {}
    by_key: dict[tuple, int] = {}
    for _, _, w in waits:
        for u, k in w.targets:
            if (u, k) in of_step:
                continue
            key = ("op", runs[u][k].op) if k < len(runs[u]) else ("missing", u, k)  # a step that never runs
            g = by_key.setdefault(key, len(groups))
            if g == len(groups):
                groups.append([])
            groups[g].append((u, k))
            of_step[(u, k)] = g
    for known in _knowledge(program, waits):
        _split(groups, of_step, known[0], known[1])
    return Counters(of_step, tuple(tuple(g) for g in groups),
                    tuple(tuple(sorted({of_step[t] for t in w.targets})) for _, _, w in waits))


def _knowledge(program: Program, waits: list[tuple[int, int, Wait]]):
    """Per wait: (its targets, what is known finished once it passes: finished-count per vEU)."""
    known = np.zeros((program.num_veus, program.num_veus), np.int64)
    done = [0] * program.num_veus
    pcs = {(v, pc) for v, pc, _ in waits}
    for v, instrs in enumerate(program.veus):
        for pc, instr in enumerate(instrs):
            if isinstance(instr, Run):
                done[v] += 1
                continue
            if (v, pc) not in pcs:
                continue
            assert isinstance(instr, Wait)
            row = known[v]
            for u, k in instr.targets:
                row[u] = max(int(row[u]), k + 1)
            implied = row.copy()
            implied[v] = max(int(implied[v]), done[v])
            yield instr.targets, implied


def _split(groups: list[list[TaskPosition]], of_step: dict[TaskPosition, int], targets: tuple[TaskPosition, ...],
           implied: np.ndarray) -> None:
    """Move out of each group this wait touches the members it does not imply, into a new group."""
    for g in sorted({of_step[t] for t in targets}):
        inside = [s for s in groups[g] if s[1] < implied[s[0]]]
        if len(inside) == len(groups[g]):
            continue
        outside = [s for s in groups[g] if s[1] >= implied[s[0]]]
        groups[g] = inside
        for s in outside:
            of_step[s] = len(groups)
        groups.append(outside)
