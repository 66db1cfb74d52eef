"""The scheduling mechanism every policy uses: Append(task, vEU) and Wait(task, [tasks]) on rPrograms under
construction, with predicted vEU clocks from the profiler; trial copies let a policy compare alternatives."""
from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
from kernel_corpus.bindings import Launch, as_unpinned, reads_constants_only
from vdevice.program import NOT_AWAITED, Instr, Op, Program, Run, TaskRef, Wait, uncovered

from .graph import SchedulerError, View
from .plan import Choice, MakeOp, Plan, ProgramOp, Programs, default_vdevice_op
from .profiler import Profiler, Resources
from .simulate import OrderedInstr, start_time
from .workload import Candidate, OpSpec

NONE = NOT_AWAITED  # no task awaited on a vEU (the same mark vdevice.program uses)


@dataclass(frozen=True)
class Awaited:
    """What one barrier-rTask waits for: the latest awaited rTask (its order among that vEU's rTasks of the
    program) on each awaited vEU, kept as arrays until a finished plan writes its Wait instructions."""

    veus: np.ndarray
    order: np.ndarray

    def wait(self) -> Wait:
        """The barrier-rTask as the program's instruction."""
        return Wait(tuple(zip(self.veus.tolist(), self.order.tolist())))


@dataclass
class DepSet:
    """The latest awaited task on each vEU (its order among that vEU's rTasks, its predicted end)."""

    order: np.ndarray
    end: np.ndarray

    def awaited(self, veus: np.ndarray) -> "Awaited":
        """The latest awaited task on each of these vEUs, kept as arrays until a program needs its Wait."""
        return Awaited(veus, self.order[veus])

    @staticmethod
    def empty(veus: int) -> "DepSet":
        """Nothing awaited."""
        return DepSet(np.full(veus, NONE, np.int64), np.zeros(veus))

    def copy(self) -> "DepSet":
        """An independent copy."""
        return DepSet(self.order.copy(), self.end.copy())

    def merge(self, other: "DepSet") -> "DepSet":
        """Union: per vEU the later of the two tasks."""
        later = other.order > self.order
        return DepSet(np.where(later, other.order, self.order), np.where(later, other.end, self.end))

    def any(self) -> bool:
        """True when some task is awaited."""
        return bool((self.order > NONE).any())

    def note(self, veu: int, order: int, end: float) -> None:
        """Record a task as the latest of its vEU."""
        self.order[veu], self.end[veu] = order, end


class ProgramBuilder:
    """One rProgram under construction: predicted clocks, per-vEU marks of what each vEU already awaited
    (as vdevice.program drops covered waits), the appended tasks in order, and where each op ran."""

    def __init__(self, mech: "Mechanism", index: int, parent: "ProgramBuilder | None" = None) -> None:
        self.mech, self.index, self.parent = mech, index, parent
        v = mech.veus
        self.clocks = parent.clocks.copy() if parent else np.zeros(v)
        self.counts = parent.counts.copy() if parent else np.zeros(v, np.int64)
        self.awaited = parent.awaited.copy() if parent else np.full((v, v), NONE, np.int64)
        # the op of each vEU's last rTask, NONE after a wait: a different op (or L1 invalidated) fetches its arguments
        self.last_op = parent.last_op.copy() if parent else np.full(v, NONE, np.int64)
        self.records: list[tuple[TaskRef, int, Awaited | None]] = []
        self.placed: dict[int, DepSet] = {}
        self.where: dict[TaskRef, tuple[int, int, float]] = {}
        self.node_ops: dict[int, list[int]] = {}
        self.new_ops: list[ProgramOp] = []
        self.pending: dict[TaskRef, DepSet] = {}
        self.families: dict[str, list[int]] = {}  # resident family -> the vEU of each of its rTask ids

    # ---- lookups through the parent chain ----------------------------------------------------------------
    def op(self, op_id: int) -> ProgramOp:
        """A committed op or one created in this builder."""
        base = len(self.mech.ops)
        return self.mech.ops[op_id] if op_id < base else self.new_ops[op_id - base]

    def lookup(self, table: str, key: object) -> object | None:
        """An entry of one of the builder's tables ('placed', 'where', 'node_ops'), here or in a parent."""
        b: ProgramBuilder | None = self
        while b is not None:
            entries = getattr(b, table)
            if key in entries:
                return entries[key]
            b = b.parent
        return None

    def placement(self, op_id: int) -> DepSet | None:
        """Latest task per vEU of an op in this program, or None when it is not in this program."""
        return self.lookup("placed", op_id)

    def position(self, task: TaskRef) -> tuple[int, int, float] | None:
        """(vEU, order, predicted end) of an appended task of this program."""
        return self.lookup("where", task)

    def family_veus(self, family: str) -> list[int] | None:
        """The vEUs a resident family of this program is pinned to (rTask r on entry r), None when it is not."""
        return self.lookup("families", family)

    def pinned_veus(self) -> set[int]:
        """Every vEU some family of this program keeps its resident slices on."""
        out: set[int] = set()
        b: ProgramBuilder | None = self
        while b is not None:
            for veus in b.families.values():
                out.update(veus)
            b = b.parent
        return out

    def pins(self, launch: Launch) -> list[int] | None:
        """Where a launch's rTasks must run (rTask r on the r-th vEU) to find their resident slices, or None to
        place it freely. A family's load launch claims vEUs no other family holds, those free soonest; its readers
        then go where it went. A family that finds too few free vEUs, or readers whose load is not in this
        rProgram (the region dies with its launch), run unpinned: readers read global memory, the load does
        nothing (ResidentUse), so the plan stays correct, only not weight-stationary."""
        use = getattr(launch, "resident", None)
        if use is None:
            return None
        if not use.load:
            return self.family_veus(use.family)
        if self.family_veus(use.family) is not None:
            return None  # a second load of one family: a policy bug the program check would catch; run it free
        taken = self.pinned_veus()
        free = [v for v in np.argsort(self.clocks, kind="stable").tolist() if v not in taken]
        if len(free) < launch.rtasks:
            return None
        self.families[use.family] = free[: launch.rtasks]
        return self.families[use.family]

    def ops_of_node(self, node: int) -> list[int] | None:
        """The ops of a workload node placed in this program."""
        return self.lookup("node_ops", node)

    def add_op(self, op: ProgramOp) -> int:
        """Register an op (its rTask time from the profiler) and return its plan-wide index."""
        op.rtask_us = self.mech.profiler.rtask_us(op.launch)
        self.new_ops.append(op)
        return len(self.mech.ops) + len(self.new_ops) - 1

    # ---- the two primitives ------------------------------------------------------------------------------
    def wait(self, task: TaskRef, tasks: Sequence[TaskRef] | DepSet) -> None:
        """`task` must not start before every task in `tasks` (of this program) has finished."""
        dep = tasks if isinstance(tasks, DepSet) else self.depset(tasks)
        self.pending[task] = self.pending[task].merge(dep) if task in self.pending else dep

    def append(self, task: TaskRef, veu: int) -> float:
        """Run `task` next on `veu` (after a barrier-rTask for its uncovered waits); returns its predicted end."""
        dep = self.pending.pop(task, None)
        refs: Awaited | None = None
        wait_ends: list[float] = []
        if dep is not None:
            us = uncovered(dep.order, self.awaited[veu], veu)  # the program's own rule: predicted waits are real
            if us.size:
                refs = dep.awaited(us)
                wait_ends = [float(dep.end[us].max())]
        terms = self.mech.terms
        start = float(self.clocks[veu])
        if refs is not None:  # a barrier-rTask: the satisfied wait's cost, or until the awaited rTasks are seen
            start = start_time(start + terms.satisfied_us, wait_ends,
                               self.mech.profiler.barrier_cost_us(len(refs.veus)))
        fetch = terms.arg_fetch_us if refs is not None or self.last_op[veu] != task.op else 0.0
        end = start + fetch + self.op(task.op).rtask_us
        self.last_op[veu] = task.op
        order = int(self.counts[veu])
        self.clocks[veu], self.counts[veu] = end, order + 1
        self.records.append((task, veu, refs))
        self.where[task] = (veu, order, end)
        if task.op not in self.placed:
            self.placed[task.op] = DepSet.empty(self.mech.veus)
        self.placed[task.op].note(veu, order, end)
        return end

    def depset(self, tasks: Sequence[TaskRef]) -> DepSet:
        """The latest of `tasks` per vEU; every task must already be appended to this program."""
        dep = DepSet.empty(self.mech.veus)
        for t in tasks:
            pos = self.position(t)
            if pos is None:
                raise SchedulerError(f"wait on {t}, which is not appended to this rProgram")
            veu, order, end = pos
            if order > dep.order[veu]:
                dep.note(veu, order, end)
        return dep

    # ---- SelectvEU over the rTasks of one op -------------------------------------------------------------
    def place(self, op_id: int, deps: DepSet | None, veus: Sequence[int] | None = None) -> None:
        """Put each rTask of the op on the vEU (of `veus`) where it can start earliest; the first rTask on a vEU
        waits for `deps`, later ones on that vEU are ordered after it anyway. An op with resident slices goes where
        its family is pinned (pins)."""
        pinned = self.pins(self.op(op_id).launch)
        if pinned is not None:
            self.op(op_id).pinned = True
            for rtask, v in enumerate(pinned):
                task = TaskRef(op_id, rtask)
                if deps is not None:
                    self.wait(task, deps)
                self.append(task, v)
            return
        if getattr(self.op(op_id).launch, "resident", None) is not None:  # unpinned: priced as it will run
            self.op(op_id).rtask_us = self.mech.profiler.rtask_us(as_unpinned(self.op(op_id).launch))
        veus = list(range(self.mech.veus)) if veus is None else list(veus)
        starts = np.maximum(self.clocks[veus], self.ready_times(deps, veus))
        heap = list(zip(starts.tolist(), veus))
        heapq.heapify(heap)
        waited: set[int] = set()
        for rtask in range(self.op(op_id).rtasks):
            _, v = heapq.heappop(heap)
            task = TaskRef(op_id, rtask)
            if deps is not None and v not in waited:
                self.wait(task, deps)
                waited.add(v)
            heapq.heappush(heap, (self.append(task, v), v))

    def ready_times(self, deps: DepSet | None, veus: list[int]) -> np.ndarray:
        """Per candidate vEU, when `deps` let it start (a barrier only for tasks it has not awaited yet)."""
        if deps is None or not deps.any():
            return np.zeros(len(veus))
        rows = np.array(veus)
        mask = deps.order[None, :] > self.awaited[rows]
        mask[np.arange(len(rows)), rows] = False
        ends = np.where(mask, deps.end[None, :], -np.inf).max(axis=1)
        barrier = self.mech.profiler.barrier_costs_us(mask.sum(axis=1))  # by the count of vEUs each would await
        return np.where(np.isfinite(ends), ends + barrier, 0.0)

    # ---- nodes ------------------------------------------------------------------------------------------------
    def node_deps(self, spec: OpSpec) -> DepSet | None:
        """What a node's launches wait for: each predecessor's end (node_end) in this program."""
        dep = None
        for p in spec.preds:
            ops = self.ops_of_node(p)
            if ops is None:
                if p not in self.mech.node_program:
                    raise SchedulerError(f"node '{spec.name}' scheduled before its predecessor "
                                         f"(node {p}): a policy bug")
                continue  # an earlier rProgram: finished before this one starts
            end = self.node_end(ops)
            dep = end if dep is None else dep.merge(end)
        return dep

    def node_end(self, ops: list[int]) -> DepSet | None:
        """What waiting for a node means: its last launch, and every independent launch (which no later launch of
        the node waits for)."""
        dep = self.placement(ops[-1])
        for op_id in ops[:-1]:
            if self.op(op_id).launch.independent:
                placed = self.placement(op_id)
                dep = placed if dep is None else (dep.merge(placed) if placed is not None else dep)
        return dep

    def schedule_node(self, spec: OpSpec, cand: Candidate, extra: DepSet | None = None,
                      veus: Sequence[int] | None = None) -> list[int]:
        """Append every launch of the chosen rKernel: a launch waits for all rTasks of the one before; an
        independent launch (Launch.independent) for the node's inputs only; a resident family's load for nothing
        (it reads constants: it runs when its vEUs are free, not after the node's inputs), so the launch after it
        waits for the node's inputs as well."""
        if spec.index in self.mech.node_program or self.ops_of_node(spec.index) is not None:
            raise SchedulerError(f"node '{spec.name}' scheduled twice: a policy bug")
        inputs = self.node_deps(spec)
        if extra is not None and extra.any():
            inputs = extra if inputs is None else inputs.merge(extra)
        ids: list[int] = []
        chain = inputs  # what the node's next ordinary launch waits for
        for k, launch in enumerate(cand.launches):
            op_id = self.add_op(ProgramOp(spec.name, spec.op_type, cand.variant, cand.source, k, launch,
                                          list(spec.inputs), list(spec.outputs)))
            load = reads_constants_only(launch)
            self.place(op_id, None if load else inputs if launch.independent else chain, veus)
            placed = self.placement(op_id)
            if load:
                chain = placed if inputs is None else (inputs.merge(placed) if placed is not None else inputs)
            elif not launch.independent:
                chain = placed
            ids.append(op_id)
        self.node_ops[spec.index] = ids
        return ids

    def barrier_after(self, nodes: list[int]) -> DepSet | None:
        """Waiting for this is a barrier after every rTask of these nodes in this program (None: nothing to
        wait for here)."""
        dep = None
        for node in nodes:
            ops = self.ops_of_node(node)
            for op_id in ops or []:
                placed = self.placement(op_id)
                dep = placed if dep is None else dep.merge(placed)
        return dep

    def time_us(self) -> float:
        """Predicted makespan of the vEUs (without the launch)."""
        return float(self.clocks.max()) if self.counts.any() else 0.0

    def program_us(self) -> float:
        """Predicted time of this rProgram: makespan plus one persistent launch (0 when empty)."""
        return self.time_us() + self.mech.profiler.device.launch_us if self.counts.any() else 0.0


def record_steps(records: list[tuple[TaskRef, int, "Awaited | None"]]) -> Iterator[OrderedInstr]:
    """A builder's records as the simulation's steps (scheduler.simulate.simulate_steps): the mechanism appended
    them in an order the vEUs can run them, so the plan is timed without writing its programs."""
    for task, veu, refs in records:
        if refs is not None:
            yield veu, None, (refs.veus, refs.order)
        yield veu, task.op, None


def write_programs(vops: list[Op], veus: int, builders: list["ProgramBuilder"]) -> list[Program]:
    """The vdevice Programs of finished builders, with the order their runs were appended in and their waits'
    targets as the arrays the mechanism kept."""
    out = []
    for b in builders:
        lists, arrays = instructions(b.records, veus)
        out.append(Program(vops, veus, lists, [veu for _, veu, _ in b.records], arrays))
    return out


def instructions(records: list[tuple[TaskRef, int, "Awaited | None"]],
                 veus: int) -> tuple[list[list[Instr]], dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]]:
    """Per vEU, the program's instructions from a builder's records (a barrier-rTask before each task that awaits
    some, then the task), and each barrier-rTask's targets as arrays by (vEU, instruction index)."""
    lists: list[list[Instr]] = [[] for _ in range(veus)]
    arrays: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for task, veu, refs in records:
        if refs is not None:
            arrays[(veu, len(lists[veu]))] = (refs.veus, refs.order)
            lists[veu].append(refs.wait())
        lists[veu].append(Run(task))
    return lists, arrays


class Mechanism:
    """The rPrograms of one plan: committed ops, closed programs, the current program and trials on it."""

    def __init__(self, profiler: Profiler, veus: int | None = None) -> None:
        self.profiler = profiler
        self.veus = veus or profiler.veus
        if self.veus < 1:
            raise SchedulerError(f"a vDevice needs at least one vEU, got {self.veus}")
        self.terms = profiler.step_costs(lambda op: 0.0)  # the interpreter's terms the online clocks charge
        self.ops: list[ProgramOp] = []
        self.closed: list[ProgramBuilder] = []
        self.node_program: dict[int, int] = {}
        self.current = ProgramBuilder(self, 0)

    def fork(self) -> ProgramBuilder:
        """A trial that continues the current rProgram."""
        return ProgramBuilder(self, self.current.index, parent=self.current)

    def fresh(self) -> ProgramBuilder:
        """A trial that starts a new rProgram after the current one."""
        return ProgramBuilder(self, self.current.index + 1)

    def commit(self, trial: ProgramBuilder) -> None:
        """Make a trial real: merge a fork into the current program, or close the current one for a fresh one."""
        if trial.parent is self.current:
            cur = self.current
            cur.clocks, cur.counts, cur.awaited, cur.last_op = trial.clocks, trial.counts, trial.awaited, trial.last_op
            cur.records.extend(trial.records)
            cur.placed.update(trial.placed)
            cur.where.update(trial.where)
            cur.node_ops.update(trial.node_ops)
            cur.families.update(trial.families)
        elif trial.parent is None and trial.index == self.current.index + 1:
            if self.current.records:
                self.closed.append(self.current)
            else:
                trial.index = self.current.index
            self.current = trial
        else:
            raise SchedulerError("commit of a stale trial: a policy bug")
        self.ops.extend(trial.new_ops)
        trial.new_ops = []
        for node in trial.node_ops:
            self.node_program[node] = self.current.index

    def finish(self, policy: str, choices: dict[str, Choice], notes: list[str],
               make_op: MakeOp = default_vdevice_op, aliases: dict[str, View] | None = None) -> Plan:
        """Close the current program and build vdevice Programs from the records: the waits the mechanism placed
        are the programs' own (both apply vdevice.program.uncovered), so the instruction lists are written as they
        are, not replayed through Program.wait/append."""
        builders = self.closed + ([self.current] if self.current.records else [])
        needs = [self.veu_needs(b) for b in builders]
        vops = [make_op(op) for op in self.ops]
        used = [sorted({task.op for task, _, _ in b.records}) for b in builders]
        programs = Programs(vops, used, functools.partial(write_programs, vops, self.veus, builders))
        duration = lambda op: self.ops[op].rtask_us  # noqa: E731  (pinned or not, as placed)
        times = [self.profiler.records_us(b.counts.tolist(), record_steps(b.records),
                                          [(r.veus, r.order) for _, _, r in b.records if r is not None], duration)
                 for b in builders]
        return Plan(policy, self.profiler.device.name, self.profiler.describe(), self.veus, list(self.ops),
                    programs, times, choices, aliases or {}, notes, needs)

    def veu_needs(self, b: ProgramBuilder) -> Resources:
        """What a vEU of this program must provide: the most threads and shared memory of its rKernels."""
        ops = [self.ops[op] for op in {task.op for task, _, _ in b.records}]
        res = [self.profiler.resources(op.launch) for op in ops]
        resident = max((op.launch.resident.slice_bytes for op in ops if op.pinned), default=0)
        need = Resources(max(r.threads for r in res), max(r.smem_bytes for r in res) + resident, None)
        dev = self.profiler.device
        if need.threads > dev.max_threads_per_block or need.smem_bytes > dev.max_smem_per_block:
            raise SchedulerError(f"rProgram {b.index} needs vEUs of {need.threads} threads and {need.smem_bytes} "
                                 f"B shared memory; {dev.name} allows {dev.max_threads_per_block} and "
                                 f"{dev.max_smem_per_block}")
        return need
