"""The mechanism of plans with more than one kind of step: given where each node runs (its backend, or LAUNCH),
order the nodes so a segment of one kind goes on while the data allow, cut the order into runs of rKernel nodes
(each planned by a policy into rPrograms), runs of launched nodes (launch segments: each node's fastest legacy
kernel at its own occupancy, one CUDA Graph on the GPU, on one stream a chain of programmatic dependent launches)
and library calls (each its own step), each closing the step before it, and join the parts into one Plan over one
op list."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from vdevice.program import Program, Run, TaskRef, validate_plan

from .backends import BACKENDS
from .graph import SchedulerError
from .plan import (Choice, LaunchGroup, LibraryCall, MakeOp, Plan, ProgramOp, Programs, Step, StepKind,
                   default_vdevice_op, program_ops, vdevice_ops)
from .workload import Candidate, OpSpec, Workload

CALL_BACKENDS = tuple(b.name for b in BACKENDS.values() if b.is_call)  # their nodes are steps of their own
LAUNCH = "launch"  # a node run outside the rPrograms as its fastest legacy kernel, in a launch segment
KIND_RANK = {"rkernel": 0, "launch": 1, "call": 2}  # which ready kind an order takes first


@dataclass
class Placement:
    """Where each node runs: backend name by node index, and the reason, for plan.json and report.md."""

    backend: dict[int, str]
    why: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def is_call(self, i: int) -> bool:
        """Whether node i is a library step."""
        return self.backend[i] in CALL_BACKENDS

    def kind(self, i: int) -> str:
        """The segment kind node i runs in: "rkernel" (an rProgram), "launch" (a launch segment) or "call"."""
        return "call" if self.is_call(i) else LAUNCH if self.backend[i] == LAUNCH else "rkernel"


def step_order(workload: Workload, placement: Placement) -> list[int]:
    """A topological order that keeps to the current segment's kind while a node of it is ready (fewer, longer
    segments), else takes rKernel nodes before launched ones before library calls; lowest index first."""
    indeg = [len(set(op.preds)) for op in workload.ops]
    succ = workload.successors()
    ready: dict[str, list[int]] = {k: [] for k in KIND_RANK}
    for i, d in enumerate(indeg):
        if d == 0:
            heapq.heappush(ready[placement.kind(i)], i)
    order: list[int] = []
    current = "rkernel"
    while any(ready.values()):
        if not ready[current] or current == "call":
            current = min((k for k in ready if ready[k]), key=KIND_RANK.__getitem__)
        i = heapq.heappop(ready[current])
        order.append(i)
        for j in set(succ[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready[placement.kind(j)], j)
    if len(order) != len(workload.ops):
        raise SchedulerError("the workload has a dependency cycle")
    return order


def segments(order: list[int], placement: Placement) -> list[tuple[str, list[int]]]:
    """Maximal runs of rKernel nodes ("rkernel", nodes) and of launched nodes ("launch", nodes), and single library
    nodes ("call", [node]), in order."""
    out: list[tuple[str, list[int]]] = []
    for i in order:
        kind = placement.kind(i)
        if kind != "call" and out and out[-1][0] == kind:
            out[-1][1].append(i)
        else:
            out.append((kind, [i]))
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


@dataclass
class LaunchPart:
    """A launch segment before it joins the plan: its nodes' launches in order, the edges among them (indices into
    `ops`), its predicted time and the variant each node launches."""

    ops: list[ProgramOp]
    deps: list[tuple[int, int]]
    us: float
    choices: dict[str, Choice]
    chain: bool = False  # one stream: each op after the one before (a PDL chain where the device has PDL)


def fastest_alone(profiler: Any, spec: OpSpec) -> Candidate:
    """The node's candidate whose legacy launches, each alone on the device, take least (any rKernel backend)."""
    from .baselines import candidate_alone_us
    return min(spec.candidates, key=lambda c: candidate_alone_us(profiler, c))


def launch_part(workload: Workload, nodes: list[int], profiler: Any, fork: bool | None = None,
                after_step: bool = False) -> LaunchPart:
    """A run of launched nodes: each node's fastest legacy variant at its own occupancy (resident launches unpinned:
    their readers read global memory, their loads do nothing), a launch after the node's previous one (an independent
    one after the node's inputs), a node's first after its predecessors in the run; priced as one CUDA Graph whose
    independent branches run on parallel streams (scheduler.baselines.multi_stream_us), or on one stream (its edges
    a chain in this topological order: the executor then forks nothing) where that is predicted faster, as when the
    cross-stream edges cost more than the overlap gains. On one stream the segment is a chain of programmatic
    dependent launches where the device has PDL (Profiler.chain_launch), priced by the same function and figures
    as the cuda-graph-pdl baseline (Profiler.launched_us), so a plan of one such segment costs what that baseline
    does. `after_step`: an rProgram or a library call runs before the segment; its first kernel then pays an
    ordinary graph node's gap, not the PDL gap: the step before it has no trigger (a library kernel, or the
    interpreter before the graph's launch), so nothing of its launch is hidden. `fork` True keeps the branches on
    their streams whatever the prices say (the multi-stream baseline times exactly that graph); False always takes
    one stream."""
    from kernel_corpus.bindings import as_unpinned

    from .baselines import NodeKernels, launch_share, multi_stream_us
    ops: list[ProgramOp] = []
    deps: list[tuple[int, int]] = []
    ends: dict[int, list[int]] = {}
    kernels: list[NodeKernels] = []
    choices: dict[str, Choice] = {}
    local = {g: k for k, g in enumerate(nodes)}
    for g in nodes:
        spec = workload.ops[g]
        if not spec.candidates:
            raise SchedulerError(f"node '{spec.name}' placed on launches, but it has no legacy kernel")
        cand = fastest_alone(profiler, spec)
        inputs = [e for p in sorted(set(spec.preds)) if p in ends for e in ends[p]]
        chain, mine = inputs, []
        for k, launch in enumerate(cand.launches):
            op = ProgramOp(spec.name, spec.op_type, cand.variant, cand.source, k, launch, list(spec.inputs),
                           list(spec.outputs))
            op.rtask_us = profiler.legacy_kernel_us(as_unpinned(launch))
            ops.append(op)
            i = len(ops) - 1
            deps += [(j, i) for j in (inputs if launch.independent else chain)]
            if not launch.independent:
                chain = [i]
            mine.append(i)
        ends[g] = [i for i in mine[:-1] if ops[i].launch.independent] + mine[-1:]
        kernels.append(NodeKernels(spec.name, sorted({local[p] for p in spec.preds if p in local}), cand.variant,
                                   [ops[i].rtask_us for i in mine],
                                   [launch_share(profiler, as_unpinned(ops[i].launch)) for i in mine]))
        choices[spec.name] = Choice(cand.variant, "launched: the fastest legacy variant at its own occupancy", LAUNCH)
    forked = multi_stream_us(kernels, profiler)
    serial = profiler.launched_us([op.rtask_us for op in ops], profiler.chain_launch,
                                  first="graph" if after_step else None)
    # forking does not pay (cross-stream edges, or the PDL chain's smaller gaps), or gains nothing (one op): one
    # stream, each op after the one before
    if fork is False or (fork is None and serial <= forked):
        return LaunchPart(ops, [(i - 1, i) for i in range(1, len(ops))], serial, choices, chain=True)
    return LaunchPart(ops, deps, forked, choices)


def plan_steps(workload: Workload, placement: Placement, plan_run: PlanFn, call_us: Callable[[LibraryCall], float],
               policy: str, profiler: Any, make_op: MakeOp = default_vdevice_op, fork_launches: bool | None = None
               ) -> Plan:
    """Plan each run of rKernel nodes with `plan_run`, each run of launched nodes as a launch segment and each
    library node as a call step, then join them."""
    parts: list[Plan | LaunchPart | LibraryCall] = []
    for kind, nodes in segments(step_order(workload, placement), placement):
        if kind == "rkernel":
            parts.append(plan_run(sub_workload(workload, nodes, placement)))
            continue
        if kind == LAUNCH:
            parts.append(launch_part(workload, nodes, profiler, fork_launches, after_step=bool(parts)))
            continue
        spec = workload.ops[nodes[0]]
        if not spec.calls:
            raise SchedulerError(f"node '{spec.name}' placed on the library, which cannot run it")
        call = spec.calls[0]
        call.us = call_us(call)
        parts.append(call)
    plan = join(parts, policy, profiler, make_op)
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


def join(parts: list[Plan | LaunchPart | LibraryCall], policy: str, profiler: Any,
         make_op: MakeOp = default_vdevice_op) -> Plan:
    """One plan from its parts in run order: the rPrograms of each part over one op list (op ids shifted), launch
    segments' ops on that list too (in no rProgram), library calls as steps between them. Segments and calls
    between two rPrograms run as one CUDA Graph (vdevice.executors.SegmentGraphs): only the first segment of such a
    run pays the graph's launch."""
    ops: list = []
    vops: list = []
    placed: list[tuple[int, Sequence[Program], int]] = []  # (op offset, the part's programs, which one)
    used: list[list[int]] = []
    veus: int | None = None
    program_us: list[float] = []
    needs: list = []
    calls: list[LibraryCall] = []
    groups: list[LaunchGroup] = []
    steps: list[Step] = []
    choices: dict[str, Choice] = {}
    notes: list[str] = []
    graph_open = False  # a launch segment of the current run between rPrograms already paid the graph's launch
    for part in parts:
        if isinstance(part, LibraryCall):
            steps.append(Step(StepKind.LIBRARY, len(calls)))
            calls.append(part)
            continue
        offset = len(ops)
        ops += part.ops
        choices.update(part.choices)
        if isinstance(part, LaunchPart):
            vops += [make_op(op) for op in part.ops]
            steps.append(Step(StepKind.LAUNCHES, len(groups)))
            # the executor captures a run of segments and calls as one graph: one launch for the run
            us = part.us - (profiler.launches.eager_us if graph_open else 0.0)
            groups.append(LaunchGroup([offset + i for i in range(len(part.ops))],
                                      [(offset + a, offset + b) for a, b in part.deps], us, part.chain))
            graph_open = True
            continue
        graph_open = False
        vops += vdevice_ops(part.programs)
        for k, (us, need, runs) in enumerate(zip(part.program_us, part.veu_needs, program_ops(part.programs))):
            steps.append(Step(StepKind.PROGRAM, len(placed)))
            placed.append((offset, part.programs, k))
            used.append([i + offset for i in runs])
            program_us.append(us)
            needs.append(need)
            veus = veus or part.veus
        notes += part.notes
    # written when first read (plan.Programs): a placement search prices its plans without instruction lists
    programs = Programs(vops, used, lambda: [shifted(progs[k], vops, offset) for offset, progs, k in placed])
    return Plan(policy, profiler.device.name, profiler.describe(), veus or profiler.veus, ops, programs, program_us,
                choices, {}, notes, needs, calls=calls, steps=steps, launches=groups, vops=vops)


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
        elif step.kind == StepKind.LAUNCHES:
            for op in plan.launches[step.index].ops:
                step_of.setdefault(plan.ops[op].node, k)
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
        validate_plan(plan.programs, op_edges, plan.outside)
