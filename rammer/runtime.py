"""A build folder in memory: what `rammer build` writes (build.json's Manifest, buffers, tensors), how it is read
back (`load`) and how it runs (`Built`: executors on the CPU emulator or the GPU, by the build's target).
"""
from __future__ import annotations

import hashlib
import json
import zipfile
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from scheduler.graph import SchedulerError, View
from scheduler.plan import LaunchGroup, LibraryCall, Step, StepKind, program_steps, rebind_programs
from toolchain.files import InputError, OutputError, load_npz
from toolchain.outdir import finish_pending
from vdevice.program import Op, Program, plan_from_json

BUILD_FORMAT = 2   # 2: the manifest names itself (MARKER) and lists the files the build wrote
MANIFEST = "build.json"
MARKER = "rammer build folder"


class BuildError(SchedulerError):
    """A model that cannot be built or run, reported as one line."""


# ---- what a build folder holds ------------------------------------------------------------------------------
@dataclass
class BufferSpec:
    """One device allocation: a model tensor that is not a view of another, or an operator's scratch space."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str  # input | weight | intermediate | output | temp

    @property
    def nbytes(self) -> int:
        """Bytes of the allocation."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass
class TensorSpec:
    """A model input or output as the caller sees it: name, shape, dtype and where its bytes live."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    base: str
    offset: int  # bytes into the base buffer


@dataclass
class Manifest:
    """build.json: everything `rammer run` needs besides the weights and the converted sources."""

    model: str
    model_sha256: str
    target: str
    policy: str
    veus: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    buffers: list[BufferSpec]
    views: dict[str, tuple[str, int]]  # buffer argument name -> (base buffer, byte offset)
    sources: dict[str, str]  # source id -> converted file name in rkernels/
    deps: list[tuple[int, int]]  # op-level edges, for the op-by-op baselines
    predicted_us: float
    stats: dict[str, Any] = field(default_factory=dict)
    format: int = BUILD_FORMAT
    files: list[str] = field(default_factory=list)  # every file the build wrote, relative, build.json included
    steps: list[Step] = field(default_factory=list)  # run order: rPrograms, launch segments and library calls
    calls: list[LibraryCall] = field(default_factory=list)  # the library steps
    launches: list[LaunchGroup] = field(default_factory=list)  # the launch segments
    setup: list[int] = field(default_factory=list)  # ops run once when the build loads (Launch.setup), in order

    def to_json(self) -> dict:
        """JSON-ready form."""
        return {
            "marker": MARKER, "format": self.format, "files": self.files, "model": self.model,
            "model_sha256": self.model_sha256, "target": self.target,
            "policy": self.policy, "num_veus": self.veus,
            "inputs": [vars(t) | {"shape": list(t.shape)} for t in self.inputs],
            "outputs": [vars(t) | {"shape": list(t.shape)} for t in self.outputs],
            "buffers": [vars(b) | {"shape": list(b.shape)} for b in self.buffers],
            "views": {k: list(v) for k, v in self.views.items()}, "sources": self.sources,
            "deps": [list(d) for d in self.deps], "predicted_us": round(self.predicted_us, 3), "stats": self.stats,
            "steps": [s.to_json() for s in self.steps], "library_calls": [c.to_json() for c in self.calls],
            "launch_groups": [g.to_json() for g in self.launches],
        } | ({"setup_ops": list(self.setup)} if self.setup else {})

    @staticmethod
    def from_json(obj: Any, where: str = MANIFEST) -> "Manifest":
        """Inverse of to_json; a manifest that is not one, or is damaged, is a one-line BuildError."""
        if not is_manifest(obj):
            raise BuildError(f"{where}: error: not a rammer build manifest (rebuild with `rammer build`)")
        if obj.get("format") != BUILD_FORMAT:
            raise BuildError(f"{where}: error: build format {obj.get('format')} is not {BUILD_FORMAT}: "
                             f"rebuild the model")
        try:
            tensor = lambda t: TensorSpec(t["name"], tuple(t["shape"]), t["dtype"], t["base"], t["offset"])  # noqa: E731
            return Manifest(obj["model"], obj["model_sha256"], obj["target"], obj["policy"], obj["num_veus"],
                            [tensor(t) for t in obj["inputs"]], [tensor(t) for t in obj["outputs"]],
                            [BufferSpec(b["name"], tuple(b["shape"]), b["dtype"], b["kind"]) for b in obj["buffers"]],
                            {k: (v[0], int(v[1])) for k, v in obj["views"].items()}, obj["sources"],
                            [tuple(d) for d in obj["deps"]], obj["predicted_us"], obj.get("stats", {}),
                            files=list(obj["files"]),
                            steps=[Step.from_json(s) for s in obj.get("steps", [])],
                            calls=[LibraryCall.from_json(c) for c in obj.get("library_calls", [])],
                            launches=[LaunchGroup.from_json(g) for g in obj.get("launch_groups", [])],
                            setup=[int(i) for i in obj.get("setup_ops", [])])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise BuildError(f"{where}: error: corrupt or incomplete build: manifest field {exc} is missing or "
                             f"malformed; rebuild the model") from None



def is_manifest(obj: Any) -> bool:
    """Whether a parsed build.json was written by `rammer build` (it names itself and lists its files)."""
    return isinstance(obj, dict) and obj.get("marker") == MARKER and isinstance(obj.get("files"), list)


def read_manifest(folder: Path) -> Manifest | None:
    """The manifest of a build folder, None when the folder holds none that proves it is a build."""
    path = Path(folder) / MANIFEST
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return Manifest.from_json(obj, str(path)) if is_manifest(obj) else None



def npz_key(name: str) -> str:
    """npz member names must be plain: tensor names may hold '/' or ':'."""
    return "w_" + hashlib.sha1(name.encode()).hexdigest()[:16]



# ---- load and run -------------------------------------------------------------------------------------------
class Built:
    """A build folder in memory: ops, programs, converted sources, weights; makes executors and runs them."""

    def __init__(self, folder: Path, manifest: Manifest, ops: list[Op], programs: list[Program],
                 sources: dict[str, str], weights: dict[str, np.ndarray]) -> None:
        self.folder, self.manifest, self.ops, self.programs = folder, manifest, ops, programs
        self.sources, self.weights = sources, weights
        self.steps = manifest.steps or program_steps(len(programs))
        self._vdevices: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._executors: dict[tuple[str, str, tuple[str, ...]], Any] = {}
        self._setup_stale: set[int] = set()  # vDevices (id) whose last inference stopped part-way

    @property
    def input_names(self) -> list[str]:
        """Graph inputs, in model order."""
        return [t.name for t in self.manifest.inputs]

    @property
    def output_names(self) -> list[str]:
        """Graph outputs, in model order."""
        return [t.name for t in self.manifest.outputs]

    def host_buffers(self) -> dict[str, np.ndarray]:
        """Fresh host arrays for every allocation, weights filled in."""
        out = {}
        for b in self.manifest.buffers:
            out[b.name] = (np.array(self.weights[b.name], dtype=b.dtype, order="C").reshape(b.shape)
                           if b.kind == "weight" else np.zeros(b.shape, dtype=b.dtype))  # own, writable copies
        return out

    def vdevice(self, backend: str, sanitize: tuple[str, ...] = ()) -> Any:
        """One compiled module and buffer set per backend (and set of CPU sanitizers), shared by its executors."""
        key = (backend, tuple(sanitize))
        if key not in self._vdevices:
            from vdevice.executors import run_once
            from vdevice.pdl import chain_vdevice
            if not self.ops and not self.manifest.calls:
                return None
            # one-stream launch segments run as PDL chains: their wrappers get the prologue (on the CPU, a no-op)
            chained = [i for g in self.manifest.launches if g.chain for i in g.ops]
            vd = chain_vdevice(self.ops, self.sources, self.host_buffers(), backend, chained,
                               include_dirs=[str(self.folder / "rkernels")], views=self.manifest.views,
                               sanitize=sanitize, veus_per_sm=int(self.manifest.stats.get("veus_per_sm", 1)))
            run_once(vd, self.manifest.setup)  # the setup ops' tables, for every executor sharing these buffers
            self._vdevices[key] = vd
        return self._vdevices[key]

    def compile(self, backend: str) -> None:
        """Build the module for a backend (GPU: when one is present; otherwise nvcc checks the source)."""
        if backend == "gpu":
            from vdevice.gpu import gpu_available
            ok, _ = gpu_available()
            if not ok:
                self._nvcc_check()
                return
        self.vdevice(backend)

    def _nvcc_check(self) -> None:
        """Without a GPU, compile the generated program with nvcc (when installed) so errors show at build time."""
        from toolchain.nvcc import find_nvcc, nvcc_command
        from vdevice.codegen import INCLUDE_DIR
        if find_nvcc() is None:
            return
        import subprocess
        cmd = nvcc_command(self.folder / "program.cu", os.devnull,
                           include_dirs=[str(INCLUDE_DIR), str(self.folder / "rkernels")])
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if res.returncode:
            errs = [ln for ln in res.stderr.splitlines() if "error" in ln][:3]
            raise BuildError("nvcc cannot compile the generated program: " + " | ".join(errs or [res.stderr[-300:]]))

    def executor(self, kind: str = "persistent", backend: str | None = None, sanitize: tuple[str, ...] = ()) -> Any:
        """persistent (one launch per rProgram), op-by-op (one launch per op) or graph (CUDA Graph of those);
        `sanitize` runs it under the CPU emulator's sanitizers."""
        from vdevice.executors import GraphExecutor, OpByOpExecutor, PersistentExecutor
        backend = backend or self.manifest.target
        key = (kind, backend, tuple(sanitize))
        if key not in self._executors:
            vd = self.vdevice(backend, tuple(sanitize))
            if vd is None:
                return None
            ex: Any
            if kind == "persistent":
                ex = PersistentExecutor(self.ops, self.programs, self.sources, {}, vdevice=vd,
                                        steps=self.executor_steps(lambda k: k))
            elif kind in ("op-by-op", "graph"):
                by_program = self.program_ops()
                cls = OpByOpExecutor if kind == "op-by-op" else GraphExecutor
                ex = cls(self.ops, self.sources, {}, deps=self.manifest.deps, vdevice=vd,
                         steps=self.executor_steps(lambda k: by_program[k], lambda g: list(g.ops)))
            else:
                raise BuildError(f"unknown executor '{kind}' (persistent, op-by-op, graph)")
            self._executors[key] = ex
        return self._executors[key]

    @property
    def outside(self) -> list[int]:
        """The ops in no rProgram: the launch segments' and the setup ops (run once when the build loads)."""
        return [i for g in self.manifest.launches for i in g.ops] + list(self.manifest.setup)

    def program_ops(self) -> list[list[int]]:
        """The ops each rProgram runs (every op runs in exactly one)."""
        from vdevice.program import Run
        return [sorted({i.task.op for v in p.veus for i in v if isinstance(i, Run)}) for p in self.programs]

    def executor_steps(self, program_step: Any, segment: Any = None) -> list[Any]:
        """The build's steps for an executor: `program_step(k)` for rProgram k, `segment(group)` for a launch
        segment (default: a LaunchStep), a CallStep per library call."""
        from vdevice.executors import CallStep, LaunchStep
        segment = segment or (lambda g: LaunchStep(tuple(g.ops), tuple(g.deps), g.chain))
        out = []
        for s in self.steps:
            if s.kind == StepKind.PROGRAM:
                out.append(program_step(s.index))
            elif s.kind == StepKind.LAUNCHES:
                out.append(segment(self.manifest.launches[s.index]))
            else:
                out.append(CallStep(self.manifest.calls[s.index].node, library_step(self.manifest.calls[s.index])))
        return out

    def check_inputs(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Inputs as contiguous arrays of the built dtype; one-line error on a missing, extra or misshapen one."""
        want = {t.name: t for t in self.manifest.inputs}
        extra = sorted(set(feeds) - set(want))
        if extra:
            raise BuildError(f"unknown input(s) {', '.join(extra)}; the model takes {', '.join(want) or 'none'}")
        out = {}
        for name, t in want.items():
            if name not in feeds:
                raise BuildError(f"input '{name}' missing (shape {list(t.shape)}, {t.dtype})")
            arr = np.asarray(feeds[name])
            if tuple(arr.shape) != tuple(t.shape):
                raise BuildError(f"input '{name}' has shape {list(arr.shape)}; the model was built for "
                                 f"{list(t.shape)} (rebuild for another shape)")
            if arr.dtype.kind not in "fiub":
                raise BuildError(f"input '{name}' has dtype {arr.dtype}; expected {t.dtype}")
            out[name] = np.asarray(arr, dtype=t.dtype, order="C")
        return out

    def run(self, feeds: Mapping[str, np.ndarray], kind: str = "persistent",
            backend: str | None = None, sanitize: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
        """Run the model once; returns every graph output as a new array."""
        data = self.check_inputs(feeds)
        ex = self.executor(kind, backend, tuple(sanitize))
        if ex is None:  # nothing to run: outputs are inputs or constants
            host = self.host_buffers()
        else:
            # only the buffers holding inputs and outputs travel; weights stay resident on the device
            vd = ex.vd
            names = {t.base for t in self.manifest.inputs + self.manifest.outputs}
            host = {n: np.array(vd.read(n)) if vd.backend.name != "cpu" else vd.buffers[n] for n in names}
        for t in self.manifest.inputs:
            _view(host, t)[...] = data[t.name]
        if ex is not None:
            self._run_fresh(ex, host)
        return {t.name: _view(host, t).copy() for t in self.manifest.outputs}

    def _run_fresh(self, ex: Any, host: dict[str, np.ndarray]) -> None:
        """One inference on `ex`. One that stops part-way (an error, the watchdog, Ctrl-C) may leave state the setup ops
        own half-updated (a split launch's arrival counters armed by the rTasks that ran): the setup ops run again
        before the next inference on that vDevice."""
        from vdevice.executors import run_once
        if id(ex.vd) in self._setup_stale:
            run_once(ex.vd, self.manifest.setup)
            self._setup_stale.discard(id(ex.vd))
        try:
            ex.run(host)
        except BaseException:
            if self.manifest.setup:
                self._setup_stale.add(id(ex.vd))
            raise

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """`rammer.load(dir)(x=...)`: run on the build's target."""
        return self.run(inputs)


def library_step(call: LibraryCall) -> Any:
    """The body of a call step: the call's tensors as shaped arrays of the vDevice's buffers (views included), run
    by its backend on numpy (the CPU emulator's buffers) or CuPy (on the backend stream)."""
    from scheduler.backends import run_call

    def run(vd: Any) -> None:
        gpu = vd.backend.name == "gpu"
        xp = vd.backend.cp if gpu else np
        shapes = dict(zip(call.inputs, call.input_shapes)) | dict(zip(call.outputs, call.output_shapes))
        arrays = {n: device_tensor(vd, n, tuple(s), call.dtypes.get(n, call.dtype), xp, call.strides.get(n))
                  for n, s in shapes.items() if n and s is not None}
        run_call(call, arrays, xp)
    return run


def device_tensor(vd: Any, name: str, shape: tuple[int, ...], dtype: str, xp: Any,
                  strides: list[int] | None = None) -> Any:
    """A tensor of `shape` at the start of a buffer or view on the vDevice (no copy); a strided view's elements
    through its element `strides` (scheduler.graph.View)."""
    item = np.dtype(dtype).itemsize
    if strides is None:
        n = int(np.prod(shape, dtype=np.int64)) * item
        return vd.array(name).reshape(-1).view(xp.uint8)[:n].view(dtype).reshape(shape)
    _, span = View(name, 0, tuple(strides)).extent(shape)
    flat = vd.array(name).reshape(-1).view(xp.uint8)[:span * item].view(dtype)
    return xp.lib.stride_tricks.as_strided(flat, shape, tuple(s * item for s in strides))


def _view(host: Mapping[str, np.ndarray], t: TensorSpec) -> np.ndarray:
    """The caller's tensor inside its base buffer."""
    flat = host[t.base].reshape(-1).view(np.uint8)
    n = int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
    return flat[t.offset:t.offset + n].view(t.dtype).reshape(t.shape)


def load(out_dir: str | Path) -> Built:
    """Read a build folder written by build_model; anything missing or damaged is one line: corrupt or incomplete
    build, and what."""
    folder = Path(out_dir)
    try:
        finish_pending(folder)  # a rebuild killed while swapping its files in is finished first
    except OutputError as exc:
        raise BuildError(str(exc)) from None
    mpath = folder / MANIFEST
    if not mpath.is_file():
        raise BuildError(f"{folder}: error: not a rammer build folder (no {MANIFEST}); run `rammer build` first")
    try:
        obj = json.loads(mpath.read_text())
    except (OSError, ValueError) as exc:
        raise BuildError(f"{mpath}: error: corrupt or incomplete build: {MANIFEST} is not readable JSON "
                         f"({exc})") from None
    manifest = Manifest.from_json(obj, str(mpath))
    missing = [f for f in manifest.files if not (folder / f).is_file()]
    if missing:
        raise BuildError(f"{folder}: error: corrupt or incomplete build: {', '.join(missing[:3])} "
                         f"{'is' if len(missing) == 1 else 'are'} missing; rebuild the model")
    try:
        sources = {sid: (folder / "rkernels" / name).read_text() for sid, name in manifest.sources.items()}
        table = json.loads((folder / "programs.json").read_text())
        ops = [Op.from_json(o) for o in table["ops"]]
        programs = rebind_programs(plan_from_json(json.dumps(table)), ops) if ops else []
        wanted = {npz_key(b.name): b.shape for b in manifest.buffers if b.kind == "weight"}
        arrays = load_npz(folder / "weights.npz", "the build's weights", wanted,
                          sum(b.nbytes for b in manifest.buffers if b.kind == "weight"))
        weights = {b.name: arrays[npz_key(b.name)] for b in manifest.buffers if b.kind == "weight"}
    except InputError as exc:
        raise BuildError(f"{folder}: error: corrupt or incomplete build: {str(exc).split(': error: ', 1)[-1]}; "
                         f"rebuild the model") from None
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        raise BuildError(f"{folder}: error: corrupt or incomplete build: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}; rebuild the model") from None
    return Built(folder, manifest, ops, programs, sources, weights)
