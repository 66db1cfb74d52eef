"""The mechanism of plans with more than one kind of step: given where each node runs (its backend), order the
nodes so rKernel nodes run before a library call whenever the data allow, cut the order into runs of rKernel nodes
(each planned by a policy into rPrograms) and library calls (each its own step, closing the rProgram before it and
opening the next after it), and join the parts into one Plan over one op list."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Callable

from vdevice.program import Program, Run, TaskRef, validate_plan

from .backends import BACKENDS
from .graph import SchedulerError
from .plan import Choice, LibraryCall, Plan, Step, StepKind
from .workload import OpSpec, Workload

CALL_BACKENDS = tuple(b.name for b in BACKENDS.values() if b.kind == "call")  # their nodes are steps of their own


@dataclass
class Placement:
    """Where each node runs: backend name by node index, and the reason, for plan.json and report.md."""

    backend: dict[int, str]
    why: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def is_call(self, i: int) -> bool:
        """Whether node i is a library step."""
        return self.backend[i] in CALL_BACKENDS


def step_order(workload: Workload, placement: Placement) -> list[int]:
    """A topological order that runs every ready rKernel node before any ready library node (fewer, longer
    rPrograms), lowest index first within each kind."""
    indeg = [len(set(op.preds)) for op in workload.ops]
    succ = workload.successors()
    ready: list[tuple[int, int]] = [(int(placement.is_call(i)), i) for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for j in set(succ[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, (int(placement.is_call(j)), j))
    if len(order) != len(workload.ops):
        raise SchedulerError("the workload has a dependency cycle")
    return order


def segments(order: list[int], placement: Placement) -> list[tuple[str, list[int]]]:
    """Maximal runs of rKernel nodes ("rkernel", nodes) and single library nodes ("call", [node]), in order."""
    out: list[tuple[str, list[int]]] = []
    for i in order:
        if placement.is_call(i):
            out.append(("call", [i]))
        elif out and out[-1][0] == "rkernel":
            out[-1][1].append(i)
        else:
            out.append(("rkernel", [i]))
    return out


def sub_workload(workload: Workload, nodes: list[int], placement: Placement) -> Workload:
    """The nodes of one run as a workload of their own: re-indexed, predecessors outside it dropped (they finished
    in earlier steps), candidates limited to the backend the node was placed on."""
    local = {g: k for k, g in enumerate(nodes)}
    ops = []
    for k, g in enumerate(nodes):
        spec = workload.ops[g]
        cands = [c for c in spec.candidates if c.backend == placement.backend[g]]
        if not cands:
            raise SchedulerError(f"node '{spec.name}' placed on backend '{placement.backend[g]}', which has no "
                                 f"rKernel for it")
        ops.append(OpSpec(k, spec.name, spec.op_type, cands, sorted({local[p] for p in spec.preds if p in local}),
                          spec.inputs, spec.outputs))
    return Workload(ops, workload.graph)


PlanFn = Callable[[Workload], Plan]


def plan_steps(workload: Workload, placement: Placement, plan_run: PlanFn, call_us: Callable[[LibraryCall], float],
               policy: str, profiler: Any) -> Plan:
    """Plan each run of rKernel nodes with `plan_run` and each library node as a call step, then join them."""
    parts: list[Plan | LibraryCall] = []
    for kind, nodes in segments(step_order(workload, placement), placement):
        if kind == "rkernel":
            parts.append(plan_run(sub_workload(workload, nodes, placement)))
            continue
        spec = workload.ops[nodes[0]]
        if not spec.calls:
            raise SchedulerError(f"node '{spec.name}' placed on the library, which cannot run it")
        call = spec.calls[0]
        call.us = call_us(call)
        parts.append(call)
    plan = join(parts, policy, profiler)
    for i, backend in placement.backend.items():
        spec = workload.ops[i]
        choice = plan.choices.get(spec.name)
        why = placement.why.get(i, "")
        if backend in CALL_BACKENDS:
            plan.choices[spec.name] = Choice(spec.calls[0].function, why, backend)
        elif choice is not None:
            plan.choices[spec.name] = Choice(choice.variant, f"{why}; {choice.why}" if why else choice.why, backend)
    plan.notes = placement.notes + plan.notes
    return plan


def join(parts: list[Plan | LibraryCall], policy: str, profiler: Any) -> Plan:
    """One plan from its parts in run order: the rPrograms of each part over one op list (op ids shifted),
    library calls as steps between them."""
    ops: list = []
    vops: list = []
    placed: list[tuple[int, Program]] = []
    program_us: list[float] = []
    needs: list = []
    calls: list[LibraryCall] = []
    steps: list[Step] = []
    choices: dict[str, Choice] = {}
    notes: list[str] = []
    for part in parts:
        if isinstance(part, LibraryCall):
            steps.append(Step(StepKind.LIBRARY, len(calls)))
            calls.append(part)
            continue
        offset = len(ops)
        ops += part.ops
        vops += part.programs[0].ops if part.programs else []
        for prog, us, need in zip(part.programs, part.program_us, part.veu_needs):
            steps.append(Step(StepKind.PROGRAM, len(placed)))
            placed.append((offset, prog))
            program_us.append(us)
            needs.append(need)
        choices.update(part.choices)
        notes += part.notes
    programs = [shifted(prog, vops, offset) for offset, prog in placed]
    num_veus = placed[0][1].num_veus if placed else profiler.num_veus
    return Plan(policy, profiler.device.name, profiler.describe(), num_veus, ops, programs, program_us, choices,
                {}, notes, needs, calls=calls, steps=steps)


def shifted(prog: Program, ops: list, offset: int) -> Program:
    """The same instruction lists over a longer op list, op ids moved by `offset`."""
    veus = [[Run(TaskRef(i.task.op + offset, i.task.rtask)) if isinstance(i, Run) else i for i in v]
            for v in prog.veus]
    return Program(ops, prog.num_veus, veus)


def check_steps(plan: Plan, workload: Workload, op_edges: list[tuple[int, int]]) -> None:
    """Every node runs once, after its predecessors' steps; the rPrograms pass vdevice's validator."""
    step_of: dict[str, int] = {}
    for k, step in enumerate(plan.steps):
        if step.kind == StepKind.LIBRARY:
            step_of[plan.calls[step.index].node] = k
    for k, step in enumerate(plan.steps):
        if step.kind == StepKind.PROGRAM:
            for op in {i.task.op for v in plan.programs[step.index].veus for i in v if isinstance(i, Run)}:
                step_of.setdefault(plan.ops[op].node, k)
    for spec in workload.ops:
        if spec.name not in step_of:
            raise SchedulerError(f"node '{spec.name}' is missing from the plan")
        for p in spec.preds:
            mine, theirs = step_of[spec.name], step_of[workload.ops[p].name]
            if theirs > mine or (theirs == mine and plan.steps[mine].kind == StepKind.LIBRARY):
                raise SchedulerError(f"node '{spec.name}' runs in step {mine}, before its predecessor "
                                     f"'{workload.ops[p].name}' (step {theirs})")
    if plan.programs:
        validate_plan(plan.programs, op_edges)
