"""Three ways to run the same rKernels: one persistent launch per rProgram, one launch per op, a CUDA Graph."""
from __future__ import annotations

import heapq
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence, Union

import numpy as np

from cuda_emu.env import MAX_YIELD_BUDGET
from cuda_emu.module import DEFAULT_YIELD_BUDGET

from .codegen import INTERPRETER, LAYOUT_QUERY, ArgTable, GeneratedModule, ProgramTables, encode, generate
from .program import KernelRef, Op, Program, ProgramError, Run, fold

CPU_WATCHDOG_POLLS = 200_000          # barrier polls (each one an emulator yield) before a wait is declared stuck
# The emulator's whole-launch yield budget for one rProgram grows with its instructions: the zoo --small models
# made 157-651 yields per instruction (lstm-tc, resnext, transformer; 2026-11-25), full-size rTasks poll longer.
CPU_YIELDS_PER_INSTRUCTION = 50_000

GPU_WATCHDOG_CYCLES = 2_000_000_000   # clock64 cycles (about a second) before a wait is declared stuck
_U32_LIMIT = 2**32 - 1


def cpu_yield_budget(units: int, per_unit: int = DEFAULT_YIELD_BUDGET) -> int:
    """The emulator's whole-launch yield budget for a persistent launch that runs `units` pieces of work one after
    another (an rProgram's instructions, the rTasks one vEU of `rtransform verify` takes): `per_unit` yields each,
    never below the emulator's default for one launch, nor above the largest budget a launch takes."""
    return min(MAX_YIELD_BUDGET, max(DEFAULT_YIELD_BUDGET, per_unit * max(1, units)))


def tell(notes: list[str], note: str) -> None:
    """Keep a note of what the executor changed on this device (the executor's `notes`) and print it on stderr."""
    notes.append(note)
    print(note, file=sys.stderr)


class VDeviceError(RuntimeError):
    """The vDevice refused a program (co-residency, shapes) or a run got stuck (watchdog)."""


# ---- backends: where modules are compiled, buffers live and kernels launch --------------------------------


class _CpuBackend:
    """The CPU emulator: numpy buffers are the device buffers; cooperative launches keep all vEUs alive."""

    name = "cpu"

    def __init__(self, gen: GeneratedModule, sanitize: Sequence[str] = ()):
        from cuda_emu import CpuModule

        self.module = CpuModule(gen.source, gen.kernel_names, list(gen.include_dirs), sanitize=tuple(sanitize))
        # sanitized: every device array lives in a guarded region, registered by name for the reports
        self.guarded = bool(self.module.sanitize)
        self._registered: dict[int, tuple[str, np.ndarray]] = {}

    def to_device(self, array: np.ndarray, name: str = "table") -> np.ndarray:
        """Host memory is device memory here (a guarded copy under the sanitizers)."""
        if not self.guarded:
            return np.asarray(array, order="C")
        src = np.asarray(array, order="C")
        out = self.module.guarded_array(src.shape, src.dtype, name)
        out[...] = src
        if out.size:
            self._registered[int(out.ctypes.data)] = (name, out)
        return out

    def to_host(self, array: np.ndarray) -> np.ndarray:
        """Identity on the CPU."""
        return array

    def pointer(self, array: np.ndarray) -> int:
        """Address of the first element."""
        return int(array.ctypes.data)

    def launch(self, expr: str, grid: tuple, block: tuple, smem: int, args: list, cooperative: bool = False,
               yield_budget: int | None = None) -> None:
        """Run a kernel to completion (`yield_budget`: the emulator's watchdog for this launch)."""
        extra = {"buffers": self._registered} if self.guarded else {}
        self.module.launch(expr, grid, block, smem, args, cooperative=cooperative, yield_budget=yield_budget,
                           **extra)

    def zero(self, array: np.ndarray) -> None:
        """Clear a buffer."""
        array[...] = 0

    def max_coresident(self, expr: str, threads: int, smem: int) -> int | None:
        """The emulator keeps every block of a cooperative launch alive: no limit."""
        return None

    def synchronize(self) -> None:
        """Launches are synchronous on the CPU."""


class _GpuBackend:
    """CuPy: NVRTC module, device arrays, launches on one stream (cooperative for the interpreter)."""

    name = "gpu"

    def __init__(self, gen: GeneratedModule):
        import cupy

        from .gpu import GpuModule

        self.cp = cupy
        self.module = GpuModule(gen.source, gen.kernel_names, list(gen.include_dirs))  # NVRTC build (vdevice.nvrtc)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._functions: dict[str, Any] = {}
        self._smem_set: dict[str, int] = {}

    def function(self, expr: str) -> Any:
        """The compiled kernel of a name expression."""
        if expr not in self._functions:
            self._functions[expr] = self.module.get_function(expr)
        return self._functions[expr]

    def to_device(self, array: np.ndarray, name: str = "table") -> Any:
        """Copy to a new device array (ordered on the backend stream); `name` is for the CPU sanitizers' reports."""
        with self.stream:
            out = self.cp.asarray(np.asarray(array, order="C"))
        self.stream.synchronize()
        return out

    def to_host(self, array: Any) -> np.ndarray:
        """Copy back to the host after the stream's work."""
        self.stream.synchronize()
        return self.cp.asnumpy(array, stream=self.stream)

    def zero(self, array: Any) -> None:
        """Clear a device buffer, ordered with the launches."""
        with self.stream:
            array.fill(0)

    def pointer(self, array: Any) -> int:
        """Device address of the first element."""
        return int(array.data.ptr)

    def _allow_smem(self, expr: str, smem: int) -> Any:
        """Opt in to more than 48 KiB of dynamic shared memory when a kernel needs it."""
        fn = self.function(expr)
        if smem > 48 * 1024 and self._smem_set.get(expr, 0) < smem:
            fn.max_dynamic_shared_size_bytes = smem
            self._smem_set[expr] = smem
        return fn

    def launch(self, expr: str, grid: tuple, block: tuple, smem: int, args: list, cooperative: bool = False,
               yield_budget: int | None = None, stream: Any = None) -> None:
        """Enqueue a kernel on the backend stream (or `stream`; cuLaunchCooperativeKernel when cooperative); the
        hardware has no yield budget (the interpreter's own watchdog bounds its waits)."""
        fn = self._allow_smem(expr, smem)
        fn.kernel(tuple(grid), tuple(block), tuple(args), shared_mem=smem, stream=stream or self.stream,
                  enable_cooperative_groups=cooperative)

    def max_coresident(self, expr: str, threads: int, smem: int) -> int | None:
        """Blocks that can be resident at once: occupancy of this kernel, threads and shared memory × SMs."""
        fn = self._allow_smem(expr, smem)
        attrs = self.cp.cuda.Device().attributes
        if not attrs.get("CooperativeLaunch", 0):
            raise VDeviceError("this GPU does not support cooperative launches: the vDevice cannot run")
        per_sm = self.cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, smem)
        return int(per_sm) * int(attrs["MultiProcessorCount"])

    def synchronize(self) -> None:
        """Wait for the stream."""
        self.stream.synchronize()


def _make_backend(kind: str, gen: GeneratedModule, sanitize: Sequence[str] = ()) -> _CpuBackend | _GpuBackend:
    """Backend by name (`sanitize`: the emulator's sanitizers, CPU only)."""
    if kind == "cpu":
        return _CpuBackend(gen, sanitize)
    if sanitize:
        raise VDeviceError("the sanitizers run on the CPU emulator only (backend cpu)")
    if kind == "gpu":
        from .gpu import gpu_available

        ok, why = gpu_available()
        if not ok:
            raise VDeviceError(f"the gpu backend is unavailable: {why}")
        return _GpuBackend(gen)
    raise VDeviceError(f"unknown backend '{kind}' (cpu or gpu)")


# ---- the shared part: one compiled module and one set of device buffers -----------------------------------


class VDevice:
    """Compiled rKernels of a model and its buffers, shared by the executors built on it."""

    def __init__(self, ops: Sequence[Op], sources: Mapping[str, str], buffers: Mapping[str, np.ndarray],
                 backend: str = "cpu", include_dirs: Sequence[str] = (), catalog: Sequence[KernelRef] = (),
                 views: Mapping[str, tuple[str, int]] | None = None, veus_per_sm: int = 1,
                 sanitize: Sequence[str] = ()):
        self.ops = list(ops)
        self.gen = generate(self.ops, sources, include_dirs, catalog, veus_per_sm)
        self.backend = _make_backend(backend, self.gen, sanitize)
        self.args = ArgTable.build(self.ops)
        # a view is a name for bytes inside another buffer (zero-copy reshapes and slices of the model)
        self.views = {name: (base, int(off)) for name, (base, off) in (views or {}).items()}
        for name, (base, off) in self.views.items():
            if base not in buffers or not 0 <= off <= np.asarray(buffers[base]).nbytes:
                raise VDeviceError(f"view '{name}' points {off} bytes into '{base}', which is not a buffer that large")
        missing = self.args.buffer_names() - set(buffers) - set(self.views)
        if missing:
            raise VDeviceError(f"buffers not given: {sorted(missing)}")
        self.buffers = {name: self.backend.to_device(np.asarray(arr), name) for name, arr in buffers.items()}
        self.generation = 0  # bumped whenever a buffer address changes (CPU rebinding)
        self._argtab: tuple[int, Any] = (-1, None)
        self.layout_sizes = self._query_layouts()
        # a build's one-stream launch segments as PDL chains (vdevice.pdl.chain_vdevice sets these): the ops whose
        # wrappers were compiled with the PDL prologue, the GPU's launcher for them, or why the segments are plain
        self.pdl_chained: frozenset[int] = frozenset()
        self.pdl_launcher: Any = None
        self.pdl_note = ""

    def _query_layouts(self) -> np.ndarray:
        """[vEU header bytes, aligned layout bytes of each instantiation] measured by the compiler itself."""
        out = self.backend.to_device(np.zeros(len(self.gen.instantiations) + 1, dtype=np.uint64))
        self.backend.launch(LAYOUT_QUERY, (1, 1, 1), (1, 1, 1), 0, [out])
        return np.asarray(self.backend.to_host(out)).copy()

    def bind(self, buffers: Mapping[str, np.ndarray] | None) -> None:
        """Make `buffers` the run's data: used in place on the CPU, uploaded into the device buffers on the GPU."""
        if buffers is None:
            return
        for name, arr in buffers.items():
            if name not in self.buffers:
                continue
            if self.backend.name == "cpu" and getattr(self.backend, "guarded", False):
                if self.buffers[name] is not arr:  # sanitized: the data moves into the guarded buffer
                    self.buffers[name][...] = np.asarray(arr).reshape(self.buffers[name].shape)
            elif self.backend.name == "cpu":
                if not (isinstance(arr, np.ndarray) and arr.flags.c_contiguous):
                    raise VDeviceError(f"buffer '{name}' must be a C-contiguous numpy array")
                if self.buffers[name] is not arr:
                    self.buffers[name] = arr
                    self.generation += 1
            else:
                self.buffers[name].set(np.asarray(arr, order="C"), stream=self.backend.stream)

    def unbind(self, buffers: Mapping[str, np.ndarray] | None) -> None:
        """Copy device results back into the caller's numpy arrays (GPU); nothing to do on the CPU."""
        if buffers is None:
            return
        if self.backend.name == "cpu":
            if getattr(self.backend, "guarded", False):
                for name, arr in buffers.items():
                    if name in self.buffers and self.buffers[name] is not arr:
                        arr[...] = self.buffers[name].reshape(arr.shape)
            return
        for name, arr in buffers.items():
            if name in self.buffers:
                arr[...] = self.backend.to_host(self.buffers[name]).reshape(arr.shape)

    def argtab(self) -> Any:
        """Device argument table for the current buffers (rebuilt only after a buffer address changed)."""
        if self._argtab[0] != self.generation:
            table = self.args.fill(self.pointer)
            self._argtab = (self.generation, self.backend.to_device(table))
        return self._argtab[1]

    def pointer(self, name: str) -> int:
        """Device address of a buffer or of a view into one."""
        if name in self.views:
            base, off = self.views[name]
            return self.backend.pointer(self.buffers[base]) + off
        return self.backend.pointer(self.buffers[name])

    def array(self, name: str) -> Any:
        """The device array of a buffer, or the bytes from a view's offset to the end of its base."""
        if name in self.views:
            base, off = self.views[name]
            return self.buffers[base].reshape(-1).view(np.uint8)[off:]
        return self.buffers[name]

    def op_launch_args(self, index: int) -> list:
        """Arguments of op `index` for its plain __global__ wrapper."""
        out = []
        for arg in self.ops[index].args:
            out.append(self.array(arg.buffer) if arg.buffer is not None else np.dtype(arg.dtype).type(arg.value))
        return out

    def wrapper(self, index: int) -> str:
        """Name expression of op `index`'s wrapper."""
        return self.gen.instantiations[self.gen.op_kernel[index]].wrapper_expr

    def read(self, name: str) -> np.ndarray:
        """A buffer's current contents on the host."""
        return np.asarray(self.backend.to_host(self.buffers[name])).copy()


def _median_ms(backend: Any, n: int, body) -> float:
    """Median over n runs of `body` (ms): CUDA events on the backend stream on the GPU; wall time around the
    emulator's synchronous launches on the CPU (emulated time, useful only to compare runs on one machine)."""
    body()
    backend.synchronize()
    samples = []
    for _ in range(n):
        if backend.name != "gpu":
            t0 = time.perf_counter()
            body()
            samples.append((time.perf_counter() - t0) * 1e3)
            continue
        start, stop = backend.cp.cuda.Event(), backend.cp.cuda.Event()
        start.record(backend.stream)
        body()
        stop.record(backend.stream)
        stop.synchronize()
        samples.append(backend.cp.cuda.get_elapsed_time(start, stop))
    return float(statistics.median(samples))


# ---- plans with more than one kind of step ----------------------------------------------------------------


@dataclass(frozen=True)
class CallStep:
    """A plan step that is not an rProgram: a host-issued call (a vendor library) on the vDevice's buffers, issued
    in stream order between the launches (on the GPU inside the backend stream, so a CUDA Graph captures it)."""

    name: str
    run: Callable[["VDevice"], None]


@dataclass(frozen=True)
class LaunchStep:
    """A launch segment: ops run as their plain legacy kernels (one block per rTask, no interpreter), in `ops` order
    on the CPU emulator; on the GPU captured once as a CUDA Graph whose ops wait only for their `deps` (edges among
    the segment's ops: independent branches go on parallel streams) and replayed. `chain`: one stream, each op after
    the one before, launched as a PDL chain where the vDevice compiled its wrappers with the prologue
    (SegmentGraphs.capture_chain)."""

    ops: tuple[int, ...]
    deps: tuple[tuple[int, int], ...] = ()
    chain: bool = False


RunStep = Union[int, CallStep, LaunchStep]  # what the persistent executor runs, in order: an rProgram index, a call
# or a launch segment
MAX_SEGMENT_STREAMS = 8  # parallel streams one captured launch segment may fork into


def run_call(vd: "VDevice", step: CallStep) -> None:
    """Issue one call step on the vDevice's stream."""
    if vd.backend.name == "gpu":
        with vd.backend.stream:
            step.run(vd)
    else:
        step.run(vd)


def run_once(vd: "VDevice", ops: Sequence[int]) -> None:
    """Launch these ops (a build's setup ops: tables computed from scalars into buffers that keep them) one after
    another as their plain kernels, and wait: what every later run of any executor on `vd` reads."""
    for index in ops:
        launch_op(vd, index)
    if ops:
        vd.backend.synchronize()


def launch_op(vd: "VDevice", index: int, stream: Any = None) -> None:
    """Launch op `index` as its plain legacy kernel (on `stream`, else the backend's)."""
    k = vd.ops[index].kernel
    if stream is None:
        vd.backend.launch(vd.wrapper(index), k.grid, k.block, k.dynamic_smem, vd.op_launch_args(index))
    else:
        vd.backend.launch(vd.wrapper(index), k.grid, k.block, k.dynamic_smem, vd.op_launch_args(index),
                          stream=stream)


def stream_of_each(step: LaunchStep, streams: int = MAX_SEGMENT_STREAMS) -> list[int]:
    """Which stream each op of a segment goes on: its first predecessor's when that one was the last op put there
    (a chain stays on one stream), else the least recently used stream; stream 0 is the capturing one."""
    preds: dict[int, list[int]] = {}
    for a, b in step.deps:
        preds.setdefault(b, []).append(a)
    where: dict[int, int] = {}
    last_on: dict[int, int] = {}
    used: list[int] = []  # streams, least recently used first
    out = []
    for op in step.ops:
        mine = [p for p in preds.get(op, []) if p in where]
        s = next((where[p] for p in mine if last_on.get(where[p]) == p), None)
        if s is None:
            s = len(last_on) if len(last_on) < streams else used[0]
        where[op], last_on[s] = s, op
        used = [u for u in used if u != s] + [s]
        out.append(s)
    return out


StepRun = tuple[Union[LaunchStep, CallStep], ...]  # consecutive steps between rPrograms: one CUDA Graph on the GPU


def step_runs(steps: Sequence[RunStep]) -> list[Union[int, StepRun]]:
    """The steps with every maximal run of launch segments and call steps as one tuple (rPrograms stay ints)."""
    out: list[Union[int, StepRun]] = []
    for step in steps:
        if isinstance(step, int):
            out.append(step)
        elif out and isinstance(out[-1], tuple):
            out[-1] = out[-1] + (step,)
        else:
            out.append((step,))
    return out


class SegmentGraphs:
    """Each run of launch segments and call steps between rPrograms captured once on the GPU as ONE CUDA Graph (a
    segment forked over parallel streams where its ops are independent, a call on the capturing stream), replayed
    per run; on the CPU the ops are launched and the calls made in order."""

    def __init__(self, vd: "VDevice", notes: list[str] | None = None) -> None:
        self.vd = vd
        self.graphs: dict[StepRun, Any] = {}
        self.notes = notes if notes is not None else []  # the executor's notes: a PDL chain the driver refused

    def run(self, steps: StepRun) -> None:
        """Run one run of steps."""
        if self.vd.backend.name != "gpu":
            for step in steps:
                if isinstance(step, CallStep):
                    run_call(self.vd, step)
                else:
                    for op in step.ops:
                        launch_op(self.vd, op)
            return
        if steps not in self.graphs:
            try:
                self.graphs[steps] = self.capture(steps)
            except Exception as exc:
                if not any(isinstance(s, LaunchStep) and self.chained(s) for s in steps):
                    raise
                self.refuse_chains(exc)
                self.graphs[steps] = self.capture(steps)
        self.graphs[steps].launch(self.vd.backend.stream)

    def refuse_chains(self, exc: BaseException) -> None:
        """A driver that refused a PDL chain's capture (never run on a GPU before it ships): every later capture
        launches the chained wrappers as plain graph nodes, where the prologue's griddepcontrol.wait has no
        prerequisite grid in flight and returns at once (PTX ISA), with a note, instead of failing the run."""
        self.vd.pdl_launcher = None
        reason = (str(exc).strip().splitlines() or [""])[0]
        note = (f"note: the driver refused a launch segment's PDL chain ({type(exc).__name__}: {reason}); launch "
                f"segments run as plain CUDA Graph nodes")
        self.vd.pdl_note = note
        tell(self.notes, note)

    def capture(self, steps: StepRun) -> Any:
        """Stream-capture the run: each segment's ops on their streams (capture_segment), each call on the
        capturing stream after the segment before it has joined."""
        be = self.vd.backend
        for step in steps:  # load the functions and set their attributes outside the capture
            for op in step.ops if isinstance(step, LaunchStep) else ():
                be._allow_smem(self.vd.wrapper(op), self.vd.ops[op].kernel.dynamic_smem)
        be.synchronize()
        be.stream.begin_capture()
        try:
            for step in steps:
                if isinstance(step, CallStep):
                    run_call(self.vd, step)
                elif self.chained(step):
                    self.capture_chain(step)
                else:
                    self.capture_segment(step)
        finally:
            graph = be.stream.end_capture()
        return graph

    def chained(self, step: LaunchStep) -> bool:
        """Whether a segment runs as a PDL chain: it is one (one stream) and every op's wrapper has the prologue."""
        return step.chain and self.vd.pdl_launcher is not None and self.vd.pdl_chained.issuperset(step.ops)

    def capture_chain(self, step: LaunchStep) -> None:
        """Inside a capture: a one-stream segment as a PDL chain on the capturing stream. Its first op is an ordinary
        launch: what precedes it in the graph (a library call, or nothing after an rProgram) never triggers, so it
        gains nothing from the attribute (priced as an ordinary graph node: scheduler.segments.launch_part). Every
        later op goes through cuLaunchKernelEx with programmatic stream serialization (vdevice.pdl.PdlLauncher):
        its blocks may be scheduled as its predecessor's blocks trigger, and wait in the prologue's
        griddepcontrol.wait for the predecessor's completion and memory (the ordering argument: vdevice/pdl.py)."""
        be = self.vd.backend
        launch_op(self.vd, step.ops[0], be.stream)
        for op in step.ops[1:]:
            self.vd.pdl_launcher.launch_op(self.vd, op, be.stream.ptr)

    def capture_segment(self, step: LaunchStep) -> None:
        """Inside a capture: each op on its stream (stream_of_each), after events of its predecessors on other
        streams; every forked stream joins the capturing one at the end."""
        be = self.vd.backend
        lanes = stream_of_each(step)
        streams = [be.stream] + [be.cp.cuda.Stream(non_blocking=True) for _ in range(max(lanes) if lanes else 0)]
        preds: dict[int, list[int]] = {}
        for a, b in step.deps:
            preds.setdefault(b, []).append(a)
        lane_of = dict(zip(step.ops, lanes))
        done: dict[int, Any] = {}
        fork = be.stream.record()
        for s in streams[1:]:
            s.wait_event(fork)
        for op, lane in zip(step.ops, lanes):
            for p in preds.get(op, []):
                if lane_of[p] != lane:
                    streams[lane].wait_event(done[p])
            launch_op(self.vd, op, streams[lane])
            done[op] = streams[lane].record()
        for s in streams[1:]:
            be.stream.wait_event(s.record())


# ---- (1) persistent: one cooperative launch of the interpreter per rProgram -------------------------------


@dataclass
class _Loaded:
    """One program's tables on the device and its run count (the counters' epoch)."""

    program: Program
    tables: ProgramTables
    device: dict[str, Any]
    smem: int
    ctl_offset: int
    gang_span: int = 0  # one region of rTasks side by side (vdevice.codegen.gang_span)
    runs: int = 0


class PersistentExecutor:
    """Runs a plan (rPrograms one after another), each as ONE launch of the persistent interpreter; `steps` puts
    call steps between them (default: the programs in order)."""

    def __init__(self, ops: Sequence[Op], programs: Sequence[Program], sources: Mapping[str, str],
                 buffers: Mapping[str, np.ndarray], *, backend: str = "cpu", include_dirs: Sequence[str] = (),
                 watchdog: int | None = None, vdevice: VDevice | None = None, steps: Sequence[RunStep] | None = None):
        self.vd = vdevice or VDevice(ops, sources, buffers, backend, include_dirs)
        be = self.vd.backend
        self.watchdog = watchdog if watchdog is not None else (
            CPU_WATCHDOG_POLLS if be.name == "cpu" else GPU_WATCHDOG_CYCLES)
        self.notes: list[str] = []  # what the GPU made the executor change (a program folded onto fewer vEUs)
        self.loaded = [self._load(p) for p in programs]
        self.segments = SegmentGraphs(self.vd, self.notes)
        self.steps: list[RunStep] = list(range(len(programs))) if steps is None else list(steps)
        bad = [s for s in self.steps if isinstance(s, int) and not 0 <= s < len(self.loaded)]
        if bad:
            raise VDeviceError(f"step names rProgram {bad[0]}, but the plan has {len(self.loaded)}")
        self.runs = step_runs(self.steps)
        if self.vd.pdl_note and any(isinstance(s, LaunchStep) and s.chain for s in self.steps):
            tell(self.notes, self.vd.pdl_note)  # decided when the vDevice was compiled (vdevice.pdl.chain_vdevice)

    def _load(self, program: Program) -> _Loaded:
        """Encode, check co-residency and upload one program."""
        be = self.vd.backend
        if program.ops is not self.vd.ops and program.ops != self.vd.ops:
            raise VDeviceError("a program's op list differs from the vDevice's op list")
        tables = encode(program, self.vd.gen, self.vd.args)
        smem, ctl_offset = tables.smem_bytes(self.vd.layout_sizes)
        limit = be.max_coresident(INTERPRETER, tables.threads, smem)
        while limit is not None and program.num_veus > limit:  # a fold can gang more rTasks: fit again
            program, tables = self._fold(program, limit, smem)
            smem, ctl_offset = tables.smem_bytes(self.vd.layout_sizes)
            limit = be.max_coresident(INTERPRETER, tables.threads, smem)
        device = {k: be.to_device(getattr(tables, k)) for k in ("instr", "veu_begin", "targets")}
        device["counters"] = be.to_device(np.zeros(tables.num_counters, dtype=np.uint32))
        device["progress"] = be.to_device(np.zeros(program.num_veus, dtype=np.uint32))
        device["err"] = be.to_device(np.zeros(8, dtype=np.uint32))
        return _Loaded(program, tables, device, smem, ctl_offset, tables.gang_span(self.vd.layout_sizes))

    def _fold(self, program: Program, limit: int, smem: int) -> tuple[Program, ProgramTables]:
        """Launch what fits (issue 28): the program folded onto the `limit` vEUs this GPU keeps co-resident
        (vdevice.program.fold; each hosted vEU keeps its own resident region), with a note."""
        if limit < 1:
            raise VDeviceError(f"not one vEU of {smem} B shared memory fits on this GPU")
        folded = fold(program, limit)
        note = (f"note: only {limit} of the program's {program.num_veus} vEUs ({smem} B shared memory each) can be "
                f"co-resident on this GPU: launched on {limit}, each running the rTasks of "
                f"{-(-program.num_veus // limit)} vEUs in one valid order (slower than the plan predicts)")
        tell(self.notes, note)
        return folded, encode(folded, self.vd.gen, self.vd.args)

    def _run_index(self, ld: _Loaded) -> int:
        """This launch's index since the counters were zeroed (a wait needs (run + 1) * count); the counters
        restart from 0 only before 32-bit overflow, never per run."""
        if (ld.runs + 2) * ld.tables.max_count >= _U32_LIMIT:
            self.vd.backend.zero(ld.device["counters"])
            ld.runs = 0
        run = ld.runs
        ld.runs += 1
        return run

    def _launch(self, ld: _Loaded) -> None:
        """Enqueue the interpreter for one program."""
        d = ld.device
        args = [d["instr"], d["veu_begin"], d["targets"], self.vd.argtab(), d["counters"], d["progress"], d["err"],
                np.uint32(self._run_index(ld)), np.uint32(ld.ctl_offset), np.uint32(ld.gang_span),
                np.uint32(ld.tables.home_bytes), np.uint64(self.watchdog)]
        budget = None if self.vd.backend.name != "cpu" else cpu_yield_budget(len(ld.tables.instr),
                                                                              CPU_YIELDS_PER_INSTRUCTION)
        self.vd.backend.launch(INTERPRETER, (ld.tables.num_veus, 1, 1), (ld.tables.threads, 1, 1), ld.smem, args,
                               cooperative=True, yield_budget=budget)

    def run(self, buffers: Mapping[str, np.ndarray] | None = None) -> None:
        """Run every step once on `buffers` (in place); raise VDeviceError naming a stuck wait."""
        self.vd.bind(buffers)
        for step in self.runs:
            if isinstance(step, tuple):
                self.segments.run(step)
                continue
            ld = self.loaded[step]
            try:
                self._launch(ld)
            except RuntimeError as exc:  # the emulator's deadlock/budget errors, the driver's launch errors
                self._check(ld)
                raise VDeviceError(f"vDevice launch of a {ld.tables.num_veus}-vEU program failed: {exc}") from exc
            self._check(ld)
        self.vd.unbind(buffers)

    def _issue_all(self) -> None:
        """Enqueue every step once."""
        for step in self.runs:
            if isinstance(step, tuple):
                self.segments.run(step)
            else:
                self._launch(self.loaded[step])

    def time(self, n: int = 20) -> float:
        """Median ms of one run of the whole plan on the device-resident buffers."""
        ms = _median_ms(self.vd.backend, n, self._issue_all)
        for ld in self.loaded:
            self._check(ld)
        return ms

    def _check(self, ld: _Loaded) -> None:
        """Read the watchdog record; raise with the vEU, the rTask and what it waited for."""
        err = [int(x) for x in np.asarray(self.vd.backend.to_host(ld.device["err"]))]
        if err[0] == 0:
            return
        self.vd.backend.zero(ld.device["err"])
        done = [int(x) for x in np.asarray(self.vd.backend.to_host(ld.device["progress"]))]
        progress = [sum(isinstance(i, Run) for i in instrs[:n]) for instrs, n in zip(ld.program.veus, done)]
        raise VDeviceError(watchdog_message(ld.program, ld.tables, err, progress))


def watchdog_message(program: Program, tables: ProgramTables, err: Sequence[int], progress: Sequence[int]) -> str:
    """Human-readable watchdog record {flag, vEU, instruction, counter, needed, observed}, with the first rTask of
    the counter's group that had not finished (progress: rTasks each vEU had finished when it left)."""
    _, veu, pc, counter, need, observed = err[:6]
    local = pc - int(tables.veu_begin[veu])
    nxt = next((i.task for i in program.veus[veu][local:] if isinstance(i, Run)), None)
    ops = program.ops
    waiter = f"rTask {nxt.rtask} of op '{ops[nxt.op].name}'" if nxt else "the end of its list"
    head = f"vDevice watchdog: vEU {veu} stuck at instruction {local} (barrier-rTask before {waiter}) waiting for "
    members = tables.counters.members[counter] if counter < len(tables.counters.members) else ()
    late = [(u, k) for u, k in members if k >= progress[u]]
    if not late:  # every rTask of the group left its vEU: some increment never came
        names = ", ".join(_step_name(program, u, k) for u, k in members[:4]) + (", ..." if len(members) > 4 else "")
        return head + (f"counter {counter} ({names}) to reach {need}; it had {observed} although those rTasks "
                       f"finished: a publish is missing")
    awaited, order = late[0]
    runs = program.runs(awaited)
    if order < len(runs):
        target = runs[order]
        what = f"finish rTask {target.rtask} of op '{ops[target.op].name}' (its step {order + 1})"
    else:
        what = f"reach step {order + 1}, beyond its {len(runs)} rTasks"
    return head + f"vEU {awaited} to {what}; it had finished {progress[awaited]}"


def _step_name(program: Program, veu: int, order: int) -> str:
    """'rTask R of op 'X' on vEU U' for a (vEU, order) step."""
    task = program.runs(veu)[order]
    return f"rTask {task.rtask} of op '{program.ops[task.op].name}' on vEU {veu}"


# ---- (2) one launch per op, (3) the same launches in a CUDA Graph -----------------------------------------


def topological_order(num_ops: int, deps: Iterable[tuple[int, int]] | None) -> list[int]:
    """Kahn's order, lowest index first among ready ops; the op list order when no deps are given."""
    if deps is None:
        return list(range(num_ops))
    succ: dict[int, list[int]] = {}
    indeg = [0] * num_ops
    for producer, consumer in deps:
        succ.setdefault(producer, []).append(consumer)
        indeg[consumer] += 1
    ready = [i for i in range(num_ops) if indeg[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        op = heapq.heappop(ready)
        order.append(op)
        for nxt in succ.get(op, []):
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                heapq.heappush(ready, nxt)
    if len(order) != num_ops:
        raise ProgramError("dependency cycle among ops")
    return order


class OpByOpExecutor:
    """RammerBase: every op is one launch of its plain __global__ wrapper, in topological order; `steps` groups the
    ops (each group run in that order) with call steps between the groups (default: one group of every op)."""

    def __init__(self, ops: Sequence[Op], sources: Mapping[str, str], buffers: Mapping[str, np.ndarray], *,
                 deps: Iterable[tuple[int, int]] | None = None, backend: str = "cpu",
                 include_dirs: Sequence[str] = (), vdevice: VDevice | None = None,
                 steps: Sequence[Sequence[int] | CallStep] | None = None):
        self.vd = vdevice or VDevice(ops, sources, buffers, backend, include_dirs)
        self.order = topological_order(len(self.vd.ops), deps)
        rank = {op: k for k, op in enumerate(self.order)}
        self.steps: list[list[int] | CallStep] = [list(self.order)] if steps is None else [
            s if isinstance(s, CallStep) else sorted(s, key=rank.__getitem__) for s in steps]
        self._calls: tuple[int, list] = (-1, [])

    def _launch_all(self) -> None:
        """Enqueue every step once (argument lists rebuilt only after a buffer address changed)."""
        vd = self.vd
        if self._calls[0] != vd.generation:
            calls = [s if isinstance(s, CallStep) else [(vd.wrapper(i), vd.ops[i].kernel, vd.op_launch_args(i))
                                                        for i in s] for s in self.steps]
            self._calls = (vd.generation, calls)
        for step in self._calls[1]:
            if isinstance(step, CallStep):
                run_call(vd, step)
                continue
            for expr, k, args in step:
                vd.backend.launch(expr, k.grid, k.block, k.dynamic_smem, args)

    def run(self, buffers: Mapping[str, np.ndarray] | None = None) -> None:
        """Run all ops once on `buffers` (in place)."""
        self.vd.bind(buffers)
        self._launch_all()
        self.vd.backend.synchronize()
        self.vd.unbind(buffers)

    def time(self, n: int = 20) -> float:
        """Median ms of one pass over all ops (GPU)."""
        return _median_ms(self.vd.backend, n, self._launch_all)


class GraphExecutor(OpByOpExecutor):
    """The op-by-op launches captured once in a CUDA Graph and replayed (GPU only)."""

    def __init__(self, ops: Sequence[Op], sources: Mapping[str, str], buffers: Mapping[str, np.ndarray], *,
                 deps: Iterable[tuple[int, int]] | None = None, backend: str = "gpu",
                 include_dirs: Sequence[str] = (), vdevice: VDevice | None = None,
                 steps: Sequence[Sequence[int] | CallStep] | None = None):
        if (vdevice.backend.name if vdevice else backend) != "gpu":
            raise VDeviceError("GraphExecutor needs the gpu backend (CUDA Graphs)")
        super().__init__(ops, sources, buffers, deps=deps, backend="gpu", include_dirs=include_dirs,
                         vdevice=vdevice, steps=steps)
        be = self.vd.backend
        OpByOpExecutor._launch_all(self)  # loads every function and sets attributes outside the capture
        be.synchronize()
        be.stream.begin_capture()
        try:
            OpByOpExecutor._launch_all(self)
        finally:
            self.graph = be.stream.end_capture()

    def _launch_all(self) -> None:
        """Replay the captured graph."""
        self.graph.launch(self.vd.backend.stream)
