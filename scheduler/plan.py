"""What a policy hands to code generation: rPrograms (vdevice.program.Program) over one op list, the rKernel
chosen for each node and why, aliases and notes; plan.json. A plan is a sequence of steps, each a persistent
rProgram or a library call (`LibraryCall`, a node a vendor library or another host-issued call runs)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, overload

from kernel_corpus.bindings import Arg, In, Out, Scalar, Temp, arg_to_json
from .graph import View
from toolchain.jsonio import dumps
from vdevice.program import ArgRef, KernelRef, Op, Program, Resident, used_ops


@dataclass
class ProgramOp:
    """One launch of a chosen rKernel for one node: an op of the plan (its rTasks = its legacy blocks)."""

    node: str
    op_type: str
    variant: str
    source: str  # legacy file under kernel_corpus/legacy/
    launch_index: int
    launch: Any  # kernel_corpus.bindings.Launch
    inputs: list[str] = field(default_factory=list)  # the node's tensor names, for In(i) / Out(i)
    outputs: list[str] = field(default_factory=list)
    rtask_us: float = 0.0
    pinned: bool = False  # its rTasks sit on its resident family's vEUs: they run with the resident region

    @property
    def rtasks(self) -> int:
        """Number of rTasks: the launch's grid size."""
        return self.launch.rtasks

    @property
    def name(self) -> str:
        """Unique op name: the node, and the launch number when the rKernel needs several."""
        return f"{self.node}#{self.launch_index}"


MakeOp = Callable[[ProgramOp], Op]


def default_vdevice_op(op: ProgramOp) -> Op:
    """vdevice Op by the converter's naming (K -> K__rtask, wrapper K); buffers named by tensor (views keep
    their own names: resolve them with Plan.aliases), temps by node."""
    L = op.launch
    kernel = KernelRef(source_id=op.source, rkernel=f"{L.kernel}__rtask", layout=None,
                       template_args=tuple(L.template_args), grid=tuple(L.grid), block=tuple(L.block),
                       dynamic_smem=int(L.dynamic_smem), wrapper=L.kernel)
    use = getattr(L, "resident", None)
    resident = Resident(use.family, use.slice_bytes, use.load) if use is not None and op.pinned else None
    return Op(op.name, kernel, tuple(arg_ref(op, a) for a in L.args), resident)


def arg_ref(op: ProgramOp, arg: Arg) -> ArgRef:
    """One corpus launch argument as a vdevice ArgRef."""
    if isinstance(arg, In):
        return ArgRef.buf(op.inputs[arg.index] if arg.index < len(op.inputs) else f"{op.node}:in{arg.index}")
    if isinstance(arg, Out):
        return ArgRef.buf(op.outputs[arg.index] if arg.index < len(op.outputs) else f"{op.node}:out{arg.index}")
    if isinstance(arg, Temp):
        return ArgRef.buf(temp_buffer(op.node, arg))
    if isinstance(arg, Scalar):
        return ArgRef.scalar(arg.dtype, arg.value)
    raise ValueError(f"unknown launch argument {arg!r} of {op.name}")


def temp_buffer(node: str, arg: Temp) -> str:
    """The buffer name of one node's scratch argument (the launches of a node share it by name)."""
    return f"{node}/{arg.name}"


@dataclass
class LibraryCall:
    """One node run by a library backend as its own plan step: the rProgram before it is closed, the next opens
    after it. `function` names the backend's implementation (scheduler.backends); shapes travel with the call so
    the runtime needs no graph. Build one with `scheduler.backends.library_call(node_info, inputs, outputs)`."""

    node: str
    op_type: str
    backend: str                 # the registered backend that runs it ("library")
    function: str                # the backend's implementation, e.g. "matmul", "gemm", "conv2d"
    inputs: list[str]            # tensor names ('' absent)
    outputs: list[str]
    input_shapes: list[list[int] | None]
    output_shapes: list[list[int]]
    attrs: dict[str, Any] = field(default_factory=dict)
    dtype: str = "float32"
    flops: int = 0
    bytes: int = 0
    us: float = 0.0              # predicted (or measured) time of the call
    dtypes: dict[str, str] = field(default_factory=dict)  # per tensor, where one differs from `dtype`
    opset: int = 17              # the node's opset (the onnxruntime fallback rebuilds the node at it)
    strides: dict[str, list[int]] = field(default_factory=dict)  # element strides of tensors that are strided views

    def to_json(self) -> dict:
        """JSON form (plan.json, build.json's steps)."""
        return jsonable(dataclasses.asdict(self))

    @staticmethod
    def from_json(obj: dict) -> "LibraryCall":
        """Inverse of to_json."""
        return LibraryCall(**obj)


class StepKind(str, Enum):
    """What a plan step runs: an rProgram (one persistent launch), a library call, or a launch segment (ops as their
    legacy kernels, captured as one graph) between them."""

    PROGRAM = "program"
    LIBRARY = "library"
    LAUNCHES = "launches"


@dataclass(frozen=True)
class Step:
    """One step of a plan, in run order: rProgram `index` (StepKind.PROGRAM), library call `index` (LIBRARY) or
    launch group `index` (LAUNCHES)."""

    kind: StepKind
    index: int

    def to_json(self) -> dict:
        """{"kind", "index"}."""
        return {"kind": self.kind.value, "index": self.index}

    @staticmethod
    def from_json(obj: dict) -> "Step":
        """Inverse of to_json."""
        return Step(StepKind(obj["kind"]), int(obj["index"]))


def program_steps(n: int) -> list[Step]:
    """The steps of a plan of rPrograms only: each program once, in order."""
    return [Step(StepKind.PROGRAM, k) for k in range(n)]


@dataclass
class Choice:
    """The rKernel (binding variant) or library function chosen for a node, its backend, and the reason."""

    variant: str
    why: str
    backend: str = "rtask"


@dataclass
class LaunchGroup:
    """A launch segment of a plan: ops (indices into the plan's op list) launched as their legacy kernels, after the
    step before it and before the step after it: one CUDA Graph on the GPU (ops that do not depend on each other
    on parallel streams), in order on the CPU emulator. `deps` are the edges among its ops. `chain`: the segment
    runs on one stream (deps: each op after the one before), as a chain of programmatic dependent launches where
    the device allows (vdevice.executors.SegmentGraphs.capture_chain)."""

    ops: list[int]
    deps: list[tuple[int, int]] = field(default_factory=list)
    us: float = 0.0  # predicted time of the segment
    chain: bool = False

    def to_json(self) -> dict:
        """{"ops", "deps", "us"} and "chain": true for a one-stream segment."""
        return {"ops": list(self.ops), "deps": [list(d) for d in self.deps], "us": round(self.us, 3)} | (
            {"chain": True} if self.chain else {})

    @staticmethod
    def from_json(obj: dict) -> "LaunchGroup":
        """Inverse of to_json."""
        return LaunchGroup([int(i) for i in obj["ops"]], [(int(a), int(b)) for a, b in obj.get("deps", [])],
                           float(obj.get("us", 0.0)), bool(obj.get("chain", False)))


@dataclass
class Plan:
    """A scheduled model: steps (rPrograms, launch segments, library calls) run one after another over `ops`,
    per-node choices, aliases and notes."""

    policy: str
    device: str
    profiler: str
    veus: int
    ops: list[ProgramOp]
    programs: Sequence[Program]  # a list, or plan.Programs (written when first read)
    program_us: list[float]
    choices: dict[str, Choice]
    aliases: dict[str, View] = field(default_factory=dict)  # tensor -> the buffer holding it (graph.buffer_of)
    notes: list[str] = field(default_factory=list)
    veu_needs: list[Any] = field(default_factory=list)  # per program: profiler.Resources of one vEU
    baselines_us: dict[str, float] = field(default_factory=dict)  # predicted op-by-op and CUDA Graph times
    calls: list[LibraryCall] = field(default_factory=list)  # library steps
    steps: list[Step] = field(default_factory=list)  # run order; empty: the programs in order
    launches: list[LaunchGroup] = field(default_factory=list)  # launch segments
    vops: list[Op] = field(default_factory=list)  # the vdevice op list when no program carries it
    # the planned candidates' setup launches (tables of a node's shape): run once when a build loads, in no step
    setup: list[ProgramOp] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.steps:
            self.steps = program_steps(len(self.programs))

    @property
    def vdevice_ops(self) -> list[Op]:
        """The vdevice op of every plan op (the programs' shared op list, or the plan's own)."""
        return vdevice_ops(self.programs) if self.programs else self.vops

    @property
    def outside(self) -> list[int]:
        """The ops run by launch segments (in no rProgram)."""
        return [i for group in self.launches for i in group.ops]

    @property
    def predicted_us(self) -> float:
        """Predicted end-to-end time: the steps (programs, launch segments, library calls) run back to back."""
        return sum(self.program_us) + sum(c.us for c in self.calls) + sum(g.us for g in self.launches)

    def step_us(self, step: Step) -> float:
        """Predicted time of one step."""
        if step.kind == StepKind.LAUNCHES:
            return self.launches[step.index].us
        return self.program_us[step.index] if step.kind == StepKind.PROGRAM else self.calls[step.index].us

    def to_json(self) -> dict:
        """A JSON-ready dict: scheduler fields, each op (corpus launch and vdevice op) and each program."""
        return {
            "policy": self.policy, "device": self.device, "profiler": self.profiler, "num_veus": self.veus,
            "predicted_us": round(self.predicted_us, 3),
            "program_us": [round(t, 3) for t in self.program_us],
            "baselines_us": {k: round(v, 3) for k, v in self.baselines_us.items()},
            "choices": {k: dataclasses.asdict(c) for k, c in self.choices.items()},
            "aliases": {k: {"base": v.base, "offset": v.offset, **({"strides": list(v.strides)} if v.strides else {})}
                        for k, v in self.aliases.items()},
            "notes": self.notes,
            "ops": [op_json(op, vop) for op, vop in zip(self.ops, self.vdevice_ops)],
            "programs": [dict(p.to_json(with_ops=False), veu_threads=n.threads, veu_smem_bytes=n.smem_bytes)
                         for p, n in zip(self.programs, self.veu_needs)],
            "library_calls": [c.to_json() for c in self.calls],
            "launch_groups": [g.to_json() for g in self.launches],
            "steps": [s.to_json() for s in self.steps],
        } | ({"setup_ops": [{"node": op.node, "kernel": op.launch.expr, "rtasks": op.rtasks} for op in self.setup]}
             if self.setup else {})

    def save(self, path: str | Path) -> None:
        """Write plan.json."""
        Path(path).write_text(dumps(self.to_json()))


def op_json(op: ProgramOp, vop: Op) -> dict:
    """A plan op: node, variant, the corpus launch spelled out, and the vdevice op."""
    launch = dataclasses.asdict(op.launch) if dataclasses.is_dataclass(op.launch) else dict(vars(op.launch))
    launch["args"] = [arg_to_json(a) for a in op.launch.args]
    return {"node": op.node, "op_type": op.op_type, "variant": op.variant, "source": op.source,
            "launch_index": op.launch_index, "rtasks": op.rtasks, "rtask_us": round(op.rtask_us, 4),
            "inputs": op.inputs, "outputs": op.outputs, "launch": jsonable(launch), "vdevice": vop.to_json()}


def jsonable(value: Any) -> Any:
    """Tuples to lists and numpy scalars to python numbers, recursively."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return value


def rebind_programs(programs: Sequence[Program], ops: list[Op]) -> list[Program]:
    """The same instruction lists over another op list (the plan's ops bound to their converted rKernels)."""
    return [Program(ops, p.num_veus, [list(v) for v in p.veus], p.run_order, p.wait_arrays, p.side_by_side, p.home_of)
            for p in programs]


class Programs(Sequence[Program]):
    """A plan's rPrograms, written when first read: a search prices and fits its trial plans without their
    instruction lists. The op list they share and the ops each runs are known before."""

    def __init__(self, ops: list[Op], used: list[list[int]], write: Callable[[], list[Program]]) -> None:
        self.ops, self.used = ops, used
        self._write: Callable[[], list[Program]] | None = write
        self._programs: list[Program] | None = None

    def written(self) -> list[Program]:
        """The programs (written now if they were not yet)."""
        if self._programs is None:
            assert self._write is not None
            self._programs, self._write = self._write(), None
        return self._programs

    def __len__(self) -> int:
        return len(self.used)

    @overload
    def __getitem__(self, i: int) -> Program: ...

    @overload
    def __getitem__(self, i: slice) -> list[Program]: ...

    def __getitem__(self, i: int | slice) -> Program | list[Program]:
        return self.written()[i]

    def __iter__(self) -> Iterator[Program]:
        return iter(self.written())


def vdevice_ops(programs: Sequence[Program]) -> list[Op]:
    """The op list a plan's programs share (without writing lazy programs)."""
    if isinstance(programs, Programs):
        return programs.ops
    return list(programs[0].ops) if programs else []


def program_ops(programs: Sequence[Program]) -> list[list[int]]:
    """The ops each program runs (without writing lazy programs)."""
    return programs.used if isinstance(programs, Programs) else [used_ops(p) for p in programs]
