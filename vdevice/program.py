"""rPrograms: per-vEU lists of rTasks and barrier-rTasks, built with Append/Wait, checked by simulation."""
from __future__ import annotations

import bisect
import itertools
import json
from dataclasses import dataclass, field
from collections import deque
from typing import AbstractSet, Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from toolchain.jsonio import dumps


class ProgramError(ValueError):
    """A program that is malformed, misses a dependency, runs a task twice or can deadlock."""


class TaskRef(NamedTuple):
    """One rTask: rtask id `rtask` of operator instance `op` (an index into Program.ops); a tuple for speed."""

    op: int
    rtask: int


@dataclass(frozen=True)
class KernelRef:
    """One bound launch shape of an rKernel from a converted source (docs/ARCHITECTURE.md §1)."""

    source_id: str
    rkernel: str
    layout: str | None = None
    template_args: tuple = ()
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    dynamic_smem: int = 0
    wrapper: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "template_args", tuple(self.template_args))
        object.__setattr__(self, "grid", _dims(self.grid, "grid"))
        object.__setattr__(self, "block", _dims(self.block, "block"))
        if self.threads > 1024:
            raise ProgramError(f"rKernel {self.rkernel}: {self.threads} threads per rTask exceed 1024")
        if self.dynamic_smem < 0:
            raise ProgramError(f"rKernel {self.rkernel}: negative dynamic shared memory")

    @property
    def rtasks(self) -> int:
        """Number of rTasks (legacy blocks) of one launch."""
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads(self) -> int:
        """Threads of one rTask (legacy block size)."""
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def wrapper_name(self) -> str:
        """The plain __global__ wrapper keeps the legacy name: the rKernel name without `__rtask`."""
        if self.wrapper:
            return self.wrapper
        return self.rkernel[: -len("__rtask")] if self.rkernel.endswith("__rtask") else self.rkernel

    def instantiation(self) -> tuple:
        """What makes two launches share generated code: source, rKernel, layout and template arguments."""
        return (self.source_id, self.rkernel, self.layout, self.template_args)


def _dims(value: Sequence[int], what: str) -> tuple[int, int, int]:
    """Normalise a 1..3 element launch dimension to three positive ints."""
    dims = tuple(int(v) for v in value) + (1, 1, 1)
    if len(value) > 3 or any(d < 1 for d in dims[:3]):
        raise ProgramError(f"bad {what} {tuple(value)}: expected 1..3 positive sizes")
    return dims[0], dims[1], dims[2]


@dataclass(frozen=True)
class ArgRef:
    """One kernel argument: a buffer by name, or a typed scalar (numpy dtype name and value)."""

    buffer: str | None = None
    dtype: str | None = None
    value: float | int | None = None

    @staticmethod
    def buf(name: str) -> "ArgRef":
        """A device pointer to the named buffer."""
        return ArgRef(buffer=name)

    @staticmethod
    def scalar(dtype: str, value: float | int) -> "ArgRef":
        """A scalar passed by value with the given numpy dtype."""
        if np.dtype(dtype).itemsize > 8:
            raise ProgramError(f"scalar arguments of at most 8 bytes, got {dtype}")
        return ArgRef(dtype=str(np.dtype(dtype)), value=value)

    def to_json(self) -> dict:
        """JSON form: {buffer} or {dtype, value}."""
        return {"buffer": self.buffer} if self.buffer is not None else {"dtype": self.dtype, "value": self.value}

    @staticmethod
    def from_json(obj: dict) -> "ArgRef":
        """Inverse of to_json."""
        return ArgRef.buf(obj["buffer"]) if "buffer" in obj else ArgRef.scalar(obj["dtype"], obj["value"])


@dataclass(frozen=True)
class Resident:
    """An op whose rTask r uses slice r of a family's resident operands in its vEU's resident region
    (docs/ARCHITECTURE.md §7): the family's load op fills the region, its other ops read it. Their rTasks run with
    VD_RESIDENT, so __rt.resident points at the region; check_resident proves every reader finds its own slice."""

    family: str
    slice_bytes: int
    load: bool = False

    def to_json(self) -> dict:
        """JSON form."""
        return {"family": self.family, "slice_bytes": self.slice_bytes, "load": self.load}


@dataclass(frozen=True)
class Op:
    """An rOperator instance: one bound launch of an rKernel with its arguments."""

    name: str
    kernel: KernelRef
    args: tuple[ArgRef, ...] = ()
    resident: Resident | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        if self.resident is not None and self.resident.slice_bytes % 16:
            raise ProgramError(f"op '{self.name}': resident slices are whole 16-byte units, got "
                               f"{self.resident.slice_bytes} B")

    def to_json(self) -> dict:
        """JSON form of the op."""
        k = self.kernel
        kernel = {"source_id": k.source_id, "rkernel": k.rkernel, "layout": k.layout,
                  "template_args": list(k.template_args), "grid": list(k.grid), "block": list(k.block),
                  "dynamic_smem": k.dynamic_smem, "wrapper": k.wrapper}
        out = {"name": self.name, "kernel": kernel, "args": [a.to_json() for a in self.args]}
        return out | ({"resident": self.resident.to_json()} if self.resident else {})

    @staticmethod
    def from_json(obj: dict) -> "Op":
        """Inverse of to_json."""
        resident = Resident(**obj["resident"]) if obj.get("resident") else None
        return Op(obj["name"], KernelRef(**obj["kernel"]), tuple(ArgRef.from_json(a) for a in obj["args"]),
                  resident)


@dataclass(frozen=True)
class Run:
    """Run one rTask on this vEU."""

    task: TaskRef


@dataclass(frozen=True)
class Wait:
    """Barrier-rTask: wait until each (vEU, order) rTask has finished; order counts rTasks of that vEU from 0."""

    targets: tuple[tuple[int, int], ...]


Instr = Run | Wait
NOT_AWAITED = -1


def uncovered(latest: np.ndarray, awaited: np.ndarray, veu: int) -> np.ndarray:
    """The barrier-coverage rule, kept in this one place (Program.append and the scheduler's ProgramBuilder both
    call it, so a plan's predicted waits are the program's real ones). `latest[u]` is the order of the latest
    rTask on vEU u that a task about to run on `veu` awaits (NOT_AWAITED for none); `awaited` is `veu`'s row of
    what its earlier barrier-rTasks already waited for. A vEU's own tasks never need a barrier (they ran before,
    in order), nor do tasks an earlier barrier on `veu` covered. Returns the vEUs to wait for, ascending, and
    records them in `awaited`."""
    need = latest > awaited
    need[veu] = False
    us = need.nonzero()[0]
    awaited[us] = latest[us]
    return us


@dataclass
class Program:
    """prog[vEU] = instructions; built with wait(task, tasks) then append(task, veu)."""

    ops: list[Op]
    num_veus: int
    veus: list[list[Instr]] = field(default_factory=list)
    # The vEU of each Run in an order the program can run them (each after the tasks its waits await): a certificate
    # the deadlock check and simulations verify in one vectorised pass instead of searching for an order (None:
    # unknown; a program built by append keeps its own).
    run_order: list[int] | None = field(default=None, repr=False, compare=False)
    # The targets of some waits as arrays (awaited vEUs, orders) by (vEU, instruction index), when whoever wrote the
    # instructions had them: WaitTable takes them as they are instead of reading the tuples back.
    wait_arrays: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] | None = field(default=None, repr=False,
                                                                                   compare=False)
    # several small rTasks per vEU: consecutive rTasks of one op that fit the vEU together run side by side
    # (vdevice.codegen.gang_sizes). Off unless the plan asks: a gang takes a shared region per rTask, which can cost
    # vEUs per SM, so the policy that weighs the two (the cost model) decides.
    side_by_side: bool = False
    # a folded program (fold): rTask -> which of its vEU's resident regions it uses (the original vEU's "home" on
    # the vEU that hosts it); empty: one region per vEU
    home_of: dict[TaskRef, int] = field(default_factory=dict, repr=False, compare=False)
    _pending: dict[TaskRef, list[TaskRef]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _pending_ops: dict[TaskRef, list[int]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _op_last: dict[int, dict[int, int]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _op_count: dict[int, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _where: dict[TaskRef, tuple[int, int]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _awaited: np.ndarray | None = field(default=None, init=False, repr=False,
                                        compare=False)  # [vEU, other vEU]: latest order an earlier barrier awaited
    _waits: "WaitTable | None" = field(default=None, init=False, repr=False, compare=False)
    _order: "list[Step] | None" = field(default=None, init=False, repr=False, compare=False)
    _counts: list[int] = field(default_factory=list, init=False, repr=False, compare=False)
    _rtasks: list[int] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.num_veus < 1:
            raise ProgramError(f"a program needs at least one vEU, got {self.num_veus}")
        if not self.veus:
            self.veus = [[] for _ in range(self.num_veus)]
            self.run_order = []
        if len(self.veus) != self.num_veus:
            raise ProgramError(f"{len(self.veus)} instruction lists for {self.num_veus} vEUs")
        self._rtasks = [op.kernel.rtasks for op in self.ops]
        self._where = {}
        self._counts = [0] * self.num_veus
        for v, instrs in enumerate(self.veus):
            for instr in instrs:
                if isinstance(instr, Run):
                    self._where.setdefault(instr.task, (v, self._counts[v]))
                    self._note_run(instr.task, v)

    def awaited(self) -> np.ndarray:
        """[vEU, other vEU]: the latest order an earlier barrier-rTask of the vEU awaited (built from the given
        instructions when first needed: a program read back or written by the scheduler whole never needs it)."""
        if self._awaited is None:
            self._awaited = np.full((self.num_veus, self.num_veus), NOT_AWAITED, np.int64)
            for v, instrs in enumerate(self.veus):
                for instr in instrs:
                    if isinstance(instr, Wait):
                        for u, k in instr.targets:
                            self._awaited[v, u] = max(k, int(self._awaited[v, u]))
        return self._awaited

    def wait(self, task: TaskRef, tasks: Iterable[TaskRef]) -> None:
        """Record that `task` must not start before every task in `tasks` has finished (call before append)."""
        if task in self._where:
            raise ProgramError(f"wait() for {task} after it was appended")
        self._check_task(task)
        self._pending.setdefault(task, []).extend(tasks)

    def wait_ops(self, task: TaskRef, ops: Iterable[int]) -> None:
        """wait() for every rTask of each op in `ops` (all already appended); costs O(vEUs) per op, not O(rTasks)."""
        if task in self._where:
            raise ProgramError(f"wait_ops() for {task} after it was appended")
        self._check_task(task)
        self._pending_ops.setdefault(task, []).extend(ops)

    def append(self, task: TaskRef, veu: int) -> None:
        """Append `task` to `veu`, preceded by a barrier-rTask for its pending waits when any is needed."""
        self._check_task(task)
        if not 0 <= veu < self.num_veus:
            raise ProgramError(f"vEU {veu} out of range 0..{self.num_veus - 1}")
        if task in self._where:
            raise ProgramError(f"{task} appended twice")
        targets = self._resolve_waits(task, veu)
        if targets:
            self.veus[veu].append(Wait(targets))
        self._waits = self._order = None
        self._where[task] = (veu, self._counts[veu])
        self._note_run(task, veu)
        self.veus[veu].append(Run(task))
        if self.run_order is not None:
            self.run_order.append(veu)

    def wait_table(self) -> "WaitTable":
        """Every barrier-rTask's targets in flat arrays (WaitTable): what the checks and simulations vectorise over
        (built once, again after an append)."""
        if self._waits is None:
            self._waits = WaitTable.of(self)
        return self._waits

    def _note_run(self, task: TaskRef, veu: int) -> None:
        """Count a run on `veu` and remember it as its op's latest rTask there."""
        self._op_last.setdefault(task.op, {})[veu] = self._counts[veu]
        self._op_count[task.op] = self._op_count.get(task.op, 0) + 1
        self._counts[veu] += 1

    def _resolve_waits(self, task: TaskRef, veu: int) -> tuple[tuple[int, int], ...]:
        """Latest awaited rTask per other vEU, minus those an earlier barrier on `veu` already covers (uncovered)."""
        deps, ops = self._pending.pop(task, ()), self._pending_ops.pop(task, ())
        if not deps and not ops:
            return ()
        latest = np.full(self.num_veus, NOT_AWAITED, np.int64)
        for dep in deps:
            pos = self._where.get(dep)
            if pos is None:
                raise ProgramError(f"{task} waits for {dep}, which is not appended yet")
            latest[pos[0]] = max(int(latest[pos[0]]), pos[1])
        for op in ops:
            self._check_task(TaskRef(op, 0))
            if self._op_count.get(op, 0) != self._rtasks[op]:
                raise ProgramError(f"{task} waits for op '{self.ops[op].name}', whose rTasks are not all appended")
            for u, k in self._op_last[op].items():
                latest[u] = max(int(latest[u]), k)
        return tuple((int(u), int(latest[u])) for u in uncovered(latest, self.awaited()[veu], veu))

    def _check_task(self, task: TaskRef) -> None:
        """Reject tasks outside the op list or the op's rTask range."""
        if not 0 <= task.op < len(self._rtasks):
            raise ProgramError(f"{task}: op index out of range 0..{len(self.ops) - 1}")
        n = self._rtasks[task.op]
        if not 0 <= task.rtask < n:
            raise ProgramError(f"{task}: rtask out of range 0..{n - 1} of op '{self.ops[task.op].name}'")

    def steps(self, veu: int) -> int:
        """Number of rTasks (run instructions) on `veu` so far."""
        return self._counts[veu]

    def runs(self, veu: int) -> list[TaskRef]:
        """The rTasks of `veu` in order (position = order in Wait targets)."""
        return [i.task for i in self.veus[veu] if isinstance(i, Run)]

    def position(self, task: TaskRef) -> tuple[int, int]:
        """(vEU, order) of an appended task."""
        return self._where[task]

    def to_json(self, with_ops: bool = True) -> dict:
        """JSON-ready dict: ["r", op, rtask] and ["w", [[veu, order], ...]] per vEU."""
        veus = [[["r", i.task.op, i.task.rtask] if isinstance(i, Run) else ["w", i.targets]  # tuples: JSON arrays
                 for i in instrs] for instrs in self.veus]
        out: dict = {"num_veus": self.num_veus, "veus": veus} | ({"side_by_side": True} if self.side_by_side else {})
        if with_ops:
            out["ops"] = [op.to_json() for op in self.ops]
        return out

    @staticmethod
    def from_json(obj: dict | str, ops: list[Op] | None = None) -> "Program":
        """Inverse of to_json; `ops` replaces the stored op list (plans store it once)."""
        data: dict = json.loads(obj) if isinstance(obj, str) else obj
        ops = ops if ops is not None else [Op.from_json(o) for o in data["ops"]]
        veus = [[_instr_from_json(i) for i in instrs] for instrs in data["veus"]]
        return Program(ops, int(data["num_veus"]), veus, side_by_side=bool(data.get("side_by_side", False)))


def _target_arrays(wait: Wait) -> tuple[np.ndarray, np.ndarray]:
    """A wait's targets as arrays (awaited vEUs, their orders)."""
    flat = np.fromiter(itertools.chain.from_iterable(wait.targets), np.int64, 2 * len(wait.targets))
    return flat[0::2], flat[1::2]


@dataclass(frozen=True)
class WaitTable:
    """A program's barrier-rTasks as flat arrays: wait i sits on vEU `veu[i]` at instruction `pc[i]` after
    `ordinal[i]` runs of that vEU, and awaits `order[j]` on vEU `target[j]` for j in starts[i]:starts[i + 1]."""

    veu: np.ndarray
    pc: np.ndarray
    ordinal: np.ndarray
    starts: np.ndarray  # one more than there are waits
    target: np.ndarray
    order: np.ndarray
    index: dict[tuple[int, int], int]  # (vEU, instruction) -> wait

    @staticmethod
    def of(program: Program) -> "WaitTable":
        """The table of one program (its targets read in one pass, or taken from program.wait_arrays)."""
        rows: list[tuple[int, int, int]] = []
        waits: list[Wait] = []
        for v, instrs in enumerate(program.veus):
            runs = 0
            for pc, instr in enumerate(instrs):
                if isinstance(instr, Wait):
                    rows.append((v, pc, runs))
                    waits.append(instr)
                else:
                    runs += 1
        given = program.wait_arrays or {}
        parts = [given[(v, pc)] if (v, pc) in given else _target_arrays(w) for (v, pc, _), w in zip(rows, waits)]
        sizes = np.fromiter((len(us) for us, _ in parts), np.int64, len(parts))
        cols = np.array(rows, np.int64).reshape(-1, 3)
        empty = np.zeros(0, np.int64)
        return WaitTable(cols[:, 0], cols[:, 1], cols[:, 2], np.concatenate([[0], np.cumsum(sizes)]),
                         np.concatenate([us for us, _ in parts]) if parts else empty,
                         np.concatenate([ks for _, ks in parts]) if parts else empty,
                         {(v, pc): i for i, (v, pc, _) in enumerate(rows)})

    def targets(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Wait i's awaited vEUs and orders (views)."""
        lo, hi = self.starts[i], self.starts[i + 1]
        return self.target[lo:hi], self.order[lo:hi]


def _instr_from_json(item: list) -> Instr:
    """Decode one instruction of Program.to_json."""
    if item[0] == "r":
        return Run(TaskRef(int(item[1]), int(item[2])))
    if item[0] == "w":
        return Wait(tuple((int(v), int(k)) for v, k in item[1]))
    raise ProgramError(f"unknown instruction {item!r}")


def plan_to_json(programs: Sequence[Program], ops: Sequence[Op] | None = None) -> str:
    """A plan (programs run one after another over the same ops) as JSON, ops stored once; `ops` when no program
    carries the op list (every op launched outside the programs)."""
    ops = list(programs[0].ops) if ops is None and programs else ops
    if ops is None:
        raise ProgramError("empty plan")
    return dumps({"ops": [op.to_json() for op in ops], "programs": [p.to_json(with_ops=False) for p in programs]})


def plan_from_json(text: str) -> list[Program]:
    """Inverse of plan_to_json."""
    obj = json.loads(text)
    ops = [Op.from_json(o) for o in obj["ops"]]
    return [Program.from_json(p, ops) for p in obj["programs"]]


# ---- validation by simulation ----------------------------------------------------------------------------


@dataclass
class _Clocks:
    """Vector clocks of one program's rTasks: what is known finished before each position of each vEU."""

    num_veus: int
    starts: list[list[int]]
    snaps: list[list[np.ndarray]]

    @staticmethod
    def empty(num_veus: int) -> "_Clocks":
        """Every vEU starts knowing nothing."""
        zero = np.zeros(num_veus, dtype=np.int64)
        return _Clocks(num_veus, [[0] for _ in range(num_veus)], [[zero] for _ in range(num_veus)])

    def after(self, veu: int, order: int) -> np.ndarray:
        """Steps of every vEU known finished once rTask `order` of `veu` has finished."""
        idx = bisect.bisect_right(self.starts[veu], order) - 1
        clock = self.snaps[veu][idx].copy()
        clock[veu] = order + 1
        return clock

    def merge(self, veu: int, done: int, clocks: list[np.ndarray]) -> None:
        """After a barrier-rTask, `veu` knows the maximum of its knowledge and the awaited clocks."""
        merged = np.maximum.reduce([self.snaps[veu][-1], *clocks])
        if self.starts[veu][-1] == done:
            self.snaps[veu][-1] = merged
        else:
            self.starts[veu].append(done)
            self.snaps[veu].append(merged)

    def before(self, veu: int, order: int) -> np.ndarray:
        """Steps known finished when rTask `order` of `veu` starts."""
        clock = self.after(veu, order)
        clock[veu] = order
        return clock


def _check_instructions(program: Program) -> None:
    """Reject instructions that point outside the program (vEUs, ops, rTasks, negative orders)."""
    for v, instrs in enumerate(program.veus):
        for pc, instr in enumerate(instrs):
            if isinstance(instr, Run):
                program._check_task(instr.task)
                continue
            for u, k in instr.targets:
                if not 0 <= u < program.num_veus or k < 0:
                    raise ProgramError(f"vEU {v} instruction {pc}: bad wait target (vEU {u}, order {k})")


def _check_exactly_once(programs: Sequence[Program], ops: Sequence[Op], outside: AbstractSet[int] = frozenset()
                        ) -> dict[TaskRef, int]:
    """Every rTask of every op but those run `outside` the programs appears in exactly one run instruction of the
    plan, those in none; returns task -> program."""
    seen: dict[TaskRef, int] = {}
    for p_index, program in enumerate(programs):
        for v, instrs in enumerate(program.veus):
            for instr in instrs:
                if not isinstance(instr, Run):
                    continue
                if instr.task.op in outside:
                    raise ProgramError(f"op '{ops[instr.task.op].name}' runs outside the programs and in program "
                                       f"{p_index}")
                if instr.task in seen:
                    t = instr.task
                    raise ProgramError(f"rTask {t.rtask} of op '{ops[t.op].name}' runs twice "
                                       f"(program {seen[t]} and program {p_index}, vEU {v})")
                seen[instr.task] = p_index
    for index, op in enumerate(ops):
        if index in outside:
            continue
        homes = {seen[TaskRef(index, r)] for r in range(op.kernel.rtasks) if TaskRef(index, r) in seen}
        if len(homes) > 1:
            raise ProgramError(f"op '{op.name}' is split over programs {sorted(homes)}: keep an op in one program")
        missing = [r for r in range(op.kernel.rtasks) if TaskRef(index, r) not in seen]
        if missing:
            raise ProgramError(f"op '{op.name}': rTasks {missing[:8]}{'...' if len(missing) > 8 else ''} "
                               f"never run ({len(missing)} of {op.kernel.rtasks})")
    return seen


def simulate(program: Program) -> _Clocks:
    """Run the vEUs greedily (waits are monotone, so greedy finds a deadlock iff one exists); returns clocks."""
    _check_instructions(program)
    clocks = _Clocks.empty(program.num_veus)
    totals = [program.steps(v) for v in range(program.num_veus)]
    pc = [0] * program.num_veus
    done = [0] * program.num_veus
    progress = True
    while progress:
        progress = False
        for v in range(program.num_veus):
            moved = _advance(program, v, pc, done, clocks)
            progress = progress or moved
    if any(pc[v] < len(program.veus[v]) for v in range(program.num_veus)):
        raise ProgramError(_deadlock_message(program, pc, done, totals))
    return clocks


def _advance(program: Program, v: int, pc: list[int], done: list[int], clocks: _Clocks) -> bool:
    """Run vEU `v` until it blocks on a wait or ends; True when it moved."""
    instrs = program.veus[v]
    start = pc[v]
    while pc[v] < len(instrs):
        instr = instrs[pc[v]]
        if isinstance(instr, Run):
            done[v] += 1
        elif all(done[u] > k for u, k in instr.targets):
            clocks.merge(v, done[v], [clocks.after(u, k) for u, k in instr.targets])
        else:
            break
        pc[v] += 1
    return pc[v] != start


def _deadlock_message(program: Program, pc: list[int], done: list[int], totals: list[int]) -> str:
    """Name every stuck vEU, what it waits for, and a wait cycle when there is one."""
    lines = []
    waits_for: dict[int, int] = {}
    for v in range(program.num_veus):
        if pc[v] >= len(program.veus[v]):
            continue
        instr = program.veus[v][pc[v]]
        assert isinstance(instr, Wait)  # only a barrier-rTask blocks a vEU
        for u, k in instr.targets:
            if done[u] <= k:
                waits_for.setdefault(v, u)
                never = " (it has only %d rTasks: never)" % totals[u] if k >= totals[u] else ""
                lines.append(f"vEU {v} instruction {pc[v]} waits for vEU {u} rTask #{k}{never}")
    cycle = _find_cycle(waits_for)
    head = "program can deadlock"
    if cycle:
        head += ": wait cycle " + " -> ".join(f"vEU {v}" for v in cycle)
    return head + "; " + "; ".join(lines[:8])


def _find_cycle(edges: dict[int, int]) -> list[int]:
    """A cycle in a functional graph (each node one successor), or [] when there is none."""
    for start in edges:
        path: list[int] = []
        node = start
        while node in edges and node not in path:
            path.append(node)
            node = edges[node]
        if node in path:
            return path[path.index(node):] + [node]
    return []


def validate(program: Program, deps: Iterable[tuple[int, int]]) -> None:
    """Check one program alone: all rTasks of all its ops exactly once, all op-level deps ordered, no deadlock."""
    validate_plan([program], deps)


def validate_plan(programs: Sequence[Program], deps: Iterable[tuple[int, int]], outside: Iterable[int] = ()
                  ) -> None:
    """Check programs run one after another: each rTask once, deps ordered by launches, waits or vEU order. Ops in
    `outside` run in steps between the programs (launched as legacy kernels): in no program, and in no dep."""
    if not programs:
        raise ProgramError("empty plan")
    ops = programs[0].ops
    for program in programs:
        if program.ops is not ops and program.ops != ops:
            raise ProgramError("programs of one plan must share the op list")
        _check_runs(program)
        _check_targets(program)
    where = _check_exactly_once(programs, ops, set(outside))
    preds = _predecessors(deps, len(ops))
    for index, program in enumerate(programs):
        check_resident(program)
        deque(execution_order(program), maxlen=0)  # run to the end, or a ProgramError names the deadlock
        needs = _requirements(program, index, preds, where)
        if not _directly_covered(program, needs):  # the exact check, by vector clocks
            _check_deps(program, index, simulate(program), preds, where)


def _check_runs(program: Program) -> None:
    """Reject run instructions outside the op list or an op's rTask range."""
    for instrs in program.veus:
        for instr in instrs:
            if isinstance(instr, Run):
                program._check_task(instr.task)


def _check_targets(program: Program) -> None:
    """Reject wait targets outside the program (vEUs, negative orders): _check_instructions over arrays."""
    table = program.wait_table()
    bad = np.flatnonzero((table.target < 0) | (table.target >= program.num_veus) | (table.order < 0))
    if bad.size:
        i = int(np.searchsorted(table.starts, bad[0], side="right")) - 1
        u, k = int(table.target[bad[0]]), int(table.order[bad[0]])
        raise ProgramError(f"vEU {table.veu[i]} instruction {table.pc[i]}: bad wait target (vEU {u}, order {k})")


Step = tuple[int, Instr, "tuple[np.ndarray, np.ndarray] | None"]  # vEU, instruction, a wait's target arrays


def execution_order(program: Program) -> Iterator[Step]:
    """(vEU, instruction, a barrier-rTask's targets as arrays or None) in an order the vEUs can run them: each vEU in
    its own order, a barrier-rTask once every task it awaits has run. The program's run_order when it proves to be
    one (certified_order); else found greedily (waits are monotone, so it finishes iff the program cannot deadlock;
    a ProgramError names the deadlock): a blocked vEU waits on the awaited vEU furthest from the task it needs and
    is woken when that one passes it."""
    if program._order is None:
        order = certified_order(program)
        if order is None:  # found step by step: it may end in a deadlock, named when reached
            yield from greedy_order(program)
            return
        program._order = order
    yield from program._order


def certified_order(program: Program) -> list[Step] | None:
    """The program's run_order as execution steps, if it is one: every vEU's runs in its own order, each wait's
    targets run before the run the wait precedes (checked over all waits at once); None otherwise."""
    nv, order = program.num_veus, program.run_order
    counts = np.asarray([program.steps(v) for v in range(nv)], np.int64)
    if order is None or len(order) != int(counts.sum()) or np.bincount(order, minlength=nv).tolist() != counts.tolist():
        return None
    offsets = np.concatenate([[0], np.cumsum(counts)])
    rank = np.empty(len(order), np.int64)  # global position of each run, by vEU then ordinal
    seen = [0] * nv
    for g, v in enumerate(order):
        rank[offsets[v] + seen[v]] = g
        seen[v] += 1
    table = program.wait_table()
    if len(table.veu):
        if np.any(table.ordinal >= counts[table.veu]):
            return None  # a wait after a vEU's last run: the greedy order decides
        us, ks = table.target, table.order
        if np.any((us < 0) | (us >= nv) | (ks < 0) | (ks >= counts[np.clip(us, 0, nv - 1)])):
            return None
        waiting = rank[offsets[table.veu] + table.ordinal]  # the run each wait precedes
        filled = np.diff(table.starts) > 0
        latest = np.full(len(table.veu), -1, np.int64)
        latest[filled] = np.maximum.reduceat(rank[offsets[us] + ks], table.starts[:-1][filled])
        if np.any(latest >= waiting):
            return None
    steps: list[Step] = []
    cursor = [0] * nv
    for v in order:
        instrs = program.veus[v]
        while isinstance(instrs[cursor[v]], Wait):
            steps.append((v, instrs[cursor[v]], table.targets(table.index[(v, cursor[v])])))
            cursor[v] += 1
        steps.append((v, instrs[cursor[v]], None))
        cursor[v] += 1
    return steps


def greedy_order(program: Program) -> Iterator[Step]:
    """execution_order found by running the vEUs greedily."""
    nv = program.num_veus
    table = program.wait_table()
    pc, done = [0] * nv, np.zeros(nv, np.int64)
    blocked: list[list[tuple[int, int]]] = [[] for _ in range(nv)]  # per awaited vEU: (order, waiting vEU)
    queue = list(range(nv))
    while queue:
        v = queue.pop()
        instrs = program.veus[v]
        while pc[v] < len(instrs):
            instr = instrs[pc[v]]
            targets = None
            if isinstance(instr, Run):
                done[v] += 1
            else:
                targets = table.targets(table.index[(v, pc[v])])
                us, ks = targets
                short = ks - done[us]  # >= 0: that many more rTasks of the vEU to go
                j = int(np.argmax(short)) if us.size else 0
                if us.size and short[j] >= 0:
                    blocked[int(us[j])].append((int(ks[j]), v))
                    break
            yield v, instr, targets
            pc[v] += 1
        still = []
        for k, w in blocked[v]:  # each vEU sits in the queue or in one blocked list, never in both
            if done[v] > k:
                queue.append(w)
            else:
                still.append((k, w))
        blocked[v] = still
    if any(pc[v] < len(program.veus[v]) for v in range(nv)):
        totals = [program.steps(v) for v in range(nv)]
        raise ProgramError(_deadlock_message(program, pc, [int(d) for d in done], totals))


def _directly_covered(program: Program, needs: dict[int, np.ndarray]) -> bool:
    """Whether every rTask of each consumer op starts after its producers' rTasks by the vEU's own order and the
    targets of its own earlier barrier-rTasks alone (no chain through other vEUs): enough for the dependency check
    (what a vEU awaited directly it knows finished), and what the scheduler's programs satisfy by construction
    (ProgramBuilder awaits every producer rTask no earlier barrier of the vEU covered). False: not shown this way."""
    table = program.wait_table()
    for v, instrs in enumerate(program.veus):
        known = np.zeros(program.num_veus, np.int64)
        order = 0
        for pc, instr in enumerate(instrs):
            if isinstance(instr, Wait):
                us, ks = table.targets(table.index[(v, pc)])
                np.maximum.at(known, us, ks + 1)
                continue
            need = needs.get(instr.task.op)
            if need is not None:
                known[v] = order
                if (known < need).any():
                    return False
            order += 1
    return True


def _predecessors(deps: Iterable[tuple[int, int]], num_ops: int) -> dict[int, list[int]]:
    """consumer op -> producer ops, with range checks."""
    preds: dict[int, list[int]] = {}
    for producer, consumer in deps:
        if not (0 <= producer < num_ops and 0 <= consumer < num_ops) or producer == consumer:
            raise ProgramError(f"bad dependency edge ({producer}, {consumer}) for {num_ops} ops")
        preds.setdefault(consumer, []).append(producer)
    return preds


def _check_deps(program: Program, index: int, clocks: _Clocks, preds: dict[int, list[int]],
                where: dict[TaskRef, int]) -> None:
    """Every rTask of a consumer in this program starts after all rTasks of each producer finished."""
    ops = program.ops
    needs = _requirements(program, index, preds, where)
    for v in range(program.num_veus):
        for order, task in enumerate(program.runs(v)):
            need = needs.get(task.op)
            if need is None:
                continue
            known = clocks.before(v, order)
            short = np.nonzero(known < need)[0]
            if short.size:
                u = int(short[0])
                producer = _producer_at(program, u, int(need[u]) - 1)
                raise ProgramError(
                    f"dependency not honoured: rTask {task.rtask} of op '{ops[task.op].name}' (vEU {v}, "
                    f"order {order}) can start before rTask {producer.rtask} of op '{ops[producer.op].name}' "
                    f"(vEU {u}, order {int(need[u]) - 1}) has finished")


def _requirements(program: Program, index: int, preds: dict[int, list[int]],
                  where: dict[TaskRef, int]) -> dict[int, np.ndarray]:
    """consumer op -> steps per vEU that must be finished before any of its rTasks in this program."""
    last = np.zeros((len(program.ops), program.num_veus), dtype=np.int64)
    for v in range(program.num_veus):
        for order, task in enumerate(program.runs(v)):
            last[task.op, v] = order + 1
    needs: dict[int, np.ndarray] = {}
    for consumer, producers in preds.items():
        if where.get(TaskRef(consumer, 0)) != index:
            continue
        for producer in producers:
            p_index = where[TaskRef(producer, 0)]
            if p_index > index:
                raise ProgramError(f"op '{program.ops[consumer].name}' (program {index}) depends on op "
                                   f"'{program.ops[producer].name}' that runs in a later program {p_index}")
        same = [p for p in producers if where[TaskRef(p, 0)] == index]
        if same:
            needs[consumer] = np.max(last[same], axis=0)
    return needs


def _producer_at(program: Program, veu: int, order: int) -> TaskRef:
    """The rTask at (vEU, order)."""
    return program.runs(veu)[order]


def used_ops(program: Program) -> list[int]:
    """Indices of the ops the program runs an rTask of, ascending."""
    return sorted({i.task.op for instrs in program.veus for i in instrs if isinstance(i, Run)})


def resident_bytes(program: Program, ops_run: Sequence[int] | None = None) -> int:
    """Bytes of the resident region every vEU of the program keeps: its largest resident slice (0: none). The ops it
    runs: `ops_run`, else read from its vEUs."""
    used = ops_run if ops_run is not None else used_ops(program)
    slices = [res.slice_bytes for res in (program.ops[o].resident for o in used) if res is not None]
    return max(slices, default=0)


def check_resident(program: Program) -> None:
    """Every rTask that reads a resident slice runs on a vEU whose region holds that slice: the same family's load
    rTask of the same rtask id ran earlier on that vEU, and no other load replaced it since (a vEU's rTasks run in
    order, so the region is then filled and intact). A wrong pin or an overwrite is a ProgramError here, before
    anything runs."""
    for v in range(program.num_veus):
        held: dict[int, tuple[str, int]] = {}  # region (home) -> the slice it holds
        for task in program.runs(v):
            res = program.ops[task.op].resident
            if res is None:
                continue
            home = program.home_of.get(task, 0)
            if res.load:
                held[home] = (res.family, task.rtask)
            elif held.get(home) != (res.family, task.rtask):
                have = held.get(home)
                what = "nothing" if have is None else f"slice {have[1]} of family '{have[0]}'"
                region = f"region {home}" if program.home_of else "region"
                raise ProgramError(f"vEU {v}: rTask {task.rtask} of op '{program.ops[task.op].name}' reads resident "
                                   f"slice {task.rtask} of family '{res.family}', but the vEU's {region} holds {what}")


def resident_homes(program: Program) -> int:
    """Resident regions each vEU of the program keeps: 1, or, folded, the most original vEUs one of them hosts."""
    return 1 + max(program.home_of.values(), default=0)


# ---- launch what fits: a program folded onto fewer vEUs ------------------------------------------------------


def fold(program: Program, veus: int) -> Program:
    """The program on `veus` < program.num_veus vEUs, for a GPU that keeps fewer co-resident (launch what fits):
    vEU u's rTasks go to vEU u % veus, in their own order, interleaved with the others there in the order of one
    execution of the original (linear_order), and each rTask's waits are re-derived at its new place (append's
    coverage rule). Each hosted vEU keeps its own resident region there (home_of: u // veus). Deadlock-free: every
    wait names rTasks earlier in that order, so a stuck vEU would wait for one that is earlier still, stuck at or
    before it, and so on down a finite order. Dependencies hold: a vEU's own order is kept, and a wait for rTask k
    of vEU u now waits for it where it landed, after u's earlier ones."""
    if not 1 <= veus < program.num_veus:
        raise ProgramError(f"fold onto {veus} vEUs: expected 1 .. {program.num_veus - 1}")
    runs = [program.runs(v) for v in range(program.num_veus)]
    out = Program(program.ops, veus, side_by_side=program.side_by_side)
    for v, task, targets in linear_order(program):
        awaited = [runs[u][k] for u, k in targets if k < len(runs[u])]
        if awaited:
            out.wait(task, awaited)
        out.append(task, v % veus)
        if program.ops[task.op].resident is not None:
            out.home_of[task] = v // veus
    return out


def linear_order(program: Program) -> list[tuple[int, TaskRef, tuple[tuple[int, int], ...]]]:
    """Every rTask as (vEU, task, the waits just before it), in the order of one execution in which every wait is
    satisfied when reached: the vEUs advance one instruction at a time, first come first served, a blocked vEU
    resumes when what it waits for has run. ProgramError when the program can deadlock."""
    from collections import deque

    pc, done = [0] * program.num_veus, [0] * program.num_veus
    pending: list[list[tuple[int, int]]] = [[] for _ in range(program.num_veus)]
    sleepers: dict[tuple[int, int], list[int]] = {}
    ready = deque(range(program.num_veus))
    order: list[tuple[int, TaskRef, tuple[tuple[int, int], ...]]] = []
    while ready:
        v = ready.popleft()
        instrs = program.veus[v]
        if pc[v] >= len(instrs):
            continue
        instr = instrs[pc[v]]
        if isinstance(instr, Wait):
            late = next(((u, k) for u, k in instr.targets if done[u] <= k), None)
            if late is not None:
                sleepers.setdefault(late, []).append(v)
                continue
            pending[v].extend(instr.targets)
        else:
            order.append((v, instr.task, tuple(pending[v])))
            pending[v] = []
            ready.extend(sleepers.pop((v, done[v]), ()))
            done[v] += 1
        pc[v] += 1
        ready.append(v)
    if any(pc[v] < len(program.veus[v]) for v in range(program.num_veus)):
        raise ProgramError("program can deadlock: it cannot be folded onto fewer vEUs")
    return order
