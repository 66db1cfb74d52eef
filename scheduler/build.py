"""`rammer build` / `rammer run`: an ONNX model becomes a folder holding the plan, the converted rKernels, the
generated persistent program, the weights, a timeline and a report; that folder is loaded and run again later.

Data path: onnx -> scheduler.pipeline.plan_model (import, passes, policy, validation) -> converter (the legacy
sources the plan uses) -> vdevice.codegen (one interpreter module) -> vdevice.executors (CPU emulator or GPU).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from vdevice.program import Op, Program, plan_from_json, plan_to_json

from .graph import Graph, SchedulerError
from .onnx_import import first_line

BUILD_FORMAT = 1
MANIFEST = "build.json"
CPU_DEFAULT_VEUS = 8  # the emulator runs every vEU thread as a fiber on one core: keep the vDevice small
RTOL = 1e-4


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
    num_veus: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    buffers: list[BufferSpec]
    views: dict[str, tuple[str, int]]  # buffer argument name -> (base buffer, byte offset)
    sources: dict[str, str]  # source id -> converted file name in rkernels/
    deps: list[tuple[int, int]]  # op-level edges, for the op-by-op baselines
    predicted_us: float
    stats: dict[str, Any] = field(default_factory=dict)
    format: int = BUILD_FORMAT

    def to_json(self) -> dict:
        """JSON-ready form."""
        return {
            "format": self.format, "model": self.model, "model_sha256": self.model_sha256, "target": self.target,
            "policy": self.policy, "num_veus": self.num_veus,
            "inputs": [vars(t) | {"shape": list(t.shape)} for t in self.inputs],
            "outputs": [vars(t) | {"shape": list(t.shape)} for t in self.outputs],
            "buffers": [vars(b) | {"shape": list(b.shape)} for b in self.buffers],
            "views": {k: list(v) for k, v in self.views.items()}, "sources": self.sources,
            "deps": [list(d) for d in self.deps], "predicted_us": round(self.predicted_us, 3), "stats": self.stats,
        }

    @staticmethod
    def from_json(obj: dict) -> "Manifest":
        """Inverse of to_json."""
        if obj.get("format") != BUILD_FORMAT:
            raise BuildError(f"build format {obj.get('format')} is not {BUILD_FORMAT}: rebuild the model")
        tensor = lambda t: TensorSpec(t["name"], tuple(t["shape"]), t["dtype"], t["base"], t["offset"])  # noqa: E731
        return Manifest(obj["model"], obj["model_sha256"], obj["target"], obj["policy"], obj["num_veus"],
                        [tensor(t) for t in obj["inputs"]], [tensor(t) for t in obj["outputs"]],
                        [BufferSpec(b["name"], tuple(b["shape"]), b["dtype"], b["kind"]) for b in obj["buffers"]],
                        {k: (v[0], int(v[1])) for k, v in obj["views"].items()}, obj["sources"],
                        [tuple(d) for d in obj["deps"]], obj["predicted_us"], obj.get("stats", {}))


# ---- build --------------------------------------------------------------------------------------------------
class Progress:
    """One line per build step on stderr with its duration, so long steps are visible."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet, self.t0, self.times = quiet, time.perf_counter(), {}

    def step(self, what: str, fn: Callable[[], Any], own_line: bool = False) -> Any:
        """Run one step, timing it; `own_line` for a step that draws its own progress bar below its name."""
        if not self.quiet:
            print(f"  {what} ...", end="\n" if own_line else "", file=sys.stderr, flush=True)
        t = time.perf_counter()
        try:
            out = fn()
        except BaseException:
            if not self.quiet:
                print(" failed", file=sys.stderr, flush=True)
            raise
        self.times[what] = time.perf_counter() - t
        if not self.quiet:
            print(f"  {what}: {self.times[what]:.2f} s" if own_line else f" {self.times[what]:.2f} s",
                  file=sys.stderr, flush=True)
        return out

    @property
    def total(self) -> float:
        """Seconds since the build started."""
        return time.perf_counter() - self.t0


def corpus_registry(corpus: str | Path | None):
    """The built-in corpus registry, or one loaded from DIR/ops/*.py with sources under DIR/legacy/."""
    from kernel_corpus.bindings import registry
    if corpus is None:
        return registry
    from kernel_corpus.bindings import Registry
    root = Path(corpus)
    if not (root / "ops").is_dir() or not (root / "legacy").is_dir():
        raise BuildError(f"{root}: error: a corpus folder holds ops/*.py (bindings) and legacy/*.cu (kernels)")
    return Registry.from_dir(root)


def convert_sources(paths: Mapping[str, Path], needed: Mapping[str, set[str]]) -> tuple[dict, dict]:
    """Convert each legacy source the plan uses; returns converted texts and rKernel metadata by kernel name."""
    from converter import ConversionError, convert_source
    texts, meta = {}, {}
    for source, kernels in sorted(needed.items()):
        path = paths[source]
        try:
            res = convert_source(path.read_text(), str(path), kernels=sorted(kernels),
                                 include_dirs=[str(path.parent)])
        except ConversionError as exc:
            raise BuildError("; ".join(exc.diagnostics[:3])) from None
        refused = {r["name"]: r["diagnostics"] for r in res.refused}
        for k in kernels:
            if k in refused:
                raise BuildError(f"kernel '{k}' of {source} was refused by the converter: {refused[k][0]}")
        texts[source] = res.output
        meta[source] = {m["name"]: m for m in res.rkernels}
    return texts, meta


def resolve_ops(ops: list[Op], meta: Mapping[str, Mapping[str, dict]]) -> list[Op]:
    """Check each op's rKernel against the converter's metadata (name, wrapper, layout struct)."""
    import dataclasses
    out = []
    for op in ops:
        k = op.kernel
        m = meta.get(k.source_id, {}).get(k.wrapper_name)
        if m is None:
            raise BuildError(f"op {op.name}: the converter produced no rKernel for '{k.wrapper_name}' "
                             f"of {k.source_id}")
        layout = m["layout"].split("<", 1)[0] if m.get("layout") else None
        out.append(dataclasses.replace(op, kernel=dataclasses.replace(k, rkernel=m["rkernel"], layout=layout,
                                                                      wrapper=m["wrapper"])))
    return out


def rebind_programs(programs: list[Program], ops: list[Op]) -> list[Program]:
    """The same instruction lists over the resolved op list."""
    return [Program(ops, p.num_veus, [list(v) for v in p.veus]) for p in programs]


def plan_buffers(graph: Graph, plan: Any, ops: list[Op]) -> tuple[list[BufferSpec], dict[str, tuple[str, int]]]:
    """Allocations (tensors that are not views, and each launch's temps) and byte-offset views for the rest."""
    temps: dict[str, int] = {}
    for pop in plan.ops:
        for arg in pop.launch.args:
            if arg[0] == "temp":
                name = f"{pop.node}/{arg[1]}"
                temps[name] = max(temps.get(name, 0), int(arg[2]))
    used = {a.buffer for op in ops for a in op.args if a.buffer is not None}
    used |= set(graph.inputs) | set(graph.outputs)
    bases: dict[str, BufferSpec] = {}
    views: dict[str, tuple[str, int]] = {}
    for name in sorted(used):
        if name in temps:
            bases[name] = BufferSpec(name, (-(-temps[name] // 4),), "float32", "temp")
            continue
        if name not in graph.tensors:
            raise BuildError(f"a launch names tensor '{name}', which the graph does not have")
        view = graph.buffer_of(name)
        base = graph.tensors[view.base]
        if view.base not in bases:
            bases[view.base] = BufferSpec(view.base, base.shape, base.dtype, _kind(graph, view.base))
        if view.base != name:
            views[name] = (view.base, view.offset * np.dtype(base.dtype).itemsize)
    return list(bases.values()), views


def _kind(graph: Graph, name: str) -> str:
    """What a base buffer holds, for upload and for the report."""
    if name in graph.weights:
        return "weight"
    if name in graph.inputs:
        return "input"
    return "output" if name in graph.outputs else "intermediate"


def tensor_specs(graph: Graph, names: list[str]) -> list[TensorSpec]:
    """Caller-visible tensors with the buffer and byte offset holding each."""
    out = []
    for name in names:
        t, view = graph.tensors[name], graph.buffer_of(name)
        item = np.dtype(graph.tensors[view.base].dtype).itemsize
        out.append(TensorSpec(name, tuple(t.shape), t.dtype, view.base, view.offset * item))
    return out


def convert_ops(ops: list[Op], paths: Mapping[str, Path]) -> tuple[list[Op], dict[str, str]]:
    """Convert the legacy sources these ops launch and bind each op to its rKernel; returns (ops, texts)."""
    needed: dict[str, set[str]] = {}
    for op in ops:
        needed.setdefault(op.kernel.source_id, set()).add(op.kernel.wrapper_name)
    texts, meta = convert_sources(paths, needed)
    return resolve_ops(ops, meta), texts


def source_paths(registry: Any) -> dict[str, Path]:
    """Legacy source file of each source id: the registry's, then the built-in corpus's."""
    from kernel_corpus.bindings import LEGACY_DIR
    paths = {b.source: b.source_path for b in registry.all()}
    paths.update({p.name: p for p in LEGACY_DIR.glob("*.cu") if p.name not in paths})
    return paths


PROFILES = ("auto", "model", "measured")


def make_profiler(profile: str, target: str, num_veus: int) -> Any:
    """The profiler of a build: `auto` measures on a GPU build when a GPU is visible and models otherwise;
    `measured` on a CPU build times the emulator (slow; it exercises the mechanism, not GPU timings)."""
    from vdevice.gpu import gpu_available

    from .measure import device_spec
    from .profiler import H100, Profiler
    if profile not in PROFILES:
        raise BuildError(f"--profile must be one of {', '.join(PROFILES)}, not '{profile}'")
    gpu, why = gpu_available() if target == "gpu" and profile != "model" else (False, "")
    if profile == "auto":
        profile = "measured" if gpu else "model"
    if profile == "model":
        return Profiler(H100, num_veus, "model")
    if target == "gpu" and not gpu:
        raise BuildError(f"--profile measured with --target gpu needs a GPU ({why})")
    return Profiler(device_spec(target), num_veus, "measured")


def profile_workload(workload: Any, profiler: Any, target: str, paths: Mapping[str, Path],
                     quiet: bool = False) -> tuple[int, int]:
    """Measured mode: time the workload's launch shapes the cache lacks (sources from `paths`, see source_paths);
    returns (measured, from the cache)."""
    from .measure import measure_workload
    return measure_workload(workload, profiler, target, quiet=quiet, convert=lambda ops: convert_ops(ops, paths))


def build_model(model_path: str | Path, out_dir: str | Path, corpus: str | Path | None = None,
                policy: str = "wavefront", target: str = "gpu", veus: int | None = None,
                quiet: bool = False, compile_check: bool = True, profile: str = "auto") -> "Built":
    """Build MODEL into OUT_DIR atomically (a temp folder renamed into place); returns the loaded build."""
    from .pipeline import load_workload, op_dependencies, plan_workload
    from .profiler import H100
    from .report import render_report, timeline_svg

    out = Path(out_dir)
    if out.exists() and not (out / MANIFEST).is_file() and any(out.iterdir()):
        raise BuildError(f"{out}: error: exists and is not a rammer build folder; refusing to replace it")
    prog = Progress(quiet)
    registry = corpus_registry(corpus)
    num_veus = veus or (CPU_DEFAULT_VEUS if target == "cpu" else H100.sms)
    if num_veus < 1:
        raise BuildError(f"--veus must be >= 1, got {num_veus}")
    profiler = make_profiler(profile, target, num_veus)
    if not quiet:
        print(f"  {profiler.describe()}", file=sys.stderr)
    graph, workload = prog.step("load, import, passes", lambda: load_workload(model_path, registry))
    paths = source_paths(registry)
    if profiler.mode == "measured":
        done, cached = prog.step(f"measure launch shapes on the {profiler.device.name}",
                                 lambda: profile_workload(workload, profiler, target, paths, quiet), own_line=True)
        if not quiet:
            dev = profiler.device
            print(f"  profiler: {done} launch shape(s) measured, {cached} from the cache; barrier-rTask "
                  f"{dev.barrier_us:.3g} us, rProgram launch {dev.launch_us:.3g} us", file=sys.stderr)
    sch = prog.step(f"{policy} plan", lambda: plan_workload(graph, workload, policy, profiler, num_veus=num_veus))
    plan = sch.plan
    ops0 = plan.programs[0].ops if plan.programs else []
    ops, texts = prog.step(f"convert {len({op.kernel.source_id for op in ops0})} legacy source(s)",
                           lambda: convert_ops(list(ops0), paths))
    programs = rebind_programs(plan.programs, ops)
    buffers, views = plan_buffers(graph, plan, ops)
    deps = op_dependencies(plan, sch.workload) if plan.ops else []
    sources = {sid: f"{Path(sid).stem}.rtask.cu" for sid in texts}
    manifest = Manifest(str(model_path), hashlib.sha256(Path(model_path).read_bytes()).hexdigest(), target, policy,
                        num_veus, tensor_specs(graph, graph.inputs), tensor_specs(graph, graph.outputs), buffers,
                        views, sources, deps, plan.predicted_us)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent if out.parent.exists() else None))
    try:
        (tmp / "rkernels").mkdir()
        for sid, text in texts.items():
            (tmp / "rkernels" / sources[sid]).write_text(text)
        if ops:
            from vdevice.codegen import generate
            gen = prog.step("generate program", lambda: generate(ops, texts))
            (tmp / "program.cu").write_text(gen.source)
        (tmp / "programs.json").write_text(plan_to_json(programs) if programs else '{"ops": [], "programs": []}')
        plan.save(tmp / "plan.json")
        weights = {b.name: graph.weights[b.name] for b in buffers if b.kind == "weight"}
        np.savez(tmp / "weights.npz", **{_npz_key(k): np.ascontiguousarray(v) for k, v in weights.items()})
        shutil.copyfile(model_path, tmp / "model.onnx")
        (tmp / "timeline.svg").write_text(timeline_svg(plan, programs, profiler.device.barrier_us))
        manifest.stats = _stats(plan, programs, ops) | {"profiler": profiler.describe()}
        built = Built(tmp, manifest, ops, programs, texts, weights)
        if compile_check and ops:
            prog.step(f"compile for {target}", lambda: built.compile(target))
        manifest.stats["build_s"] = round(prog.total, 2)
        manifest.stats["step_s"] = {k: round(v, 2) for k, v in prog.times.items()}
        (tmp / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1))
        (tmp / "report.md").write_text(render_report(manifest, plan, sch.workload))
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    built.folder = out
    return built


def _npz_key(name: str) -> str:
    """npz member names must be plain: tensor names may hold '/' or ':'."""
    return "w_" + hashlib.sha1(name.encode()).hexdigest()[:16]


def _stats(plan: Any, programs: list[Program], ops: list[Op]) -> dict:
    """Counts for the report and the bench: operators, launches, rTasks, programs, barriers."""
    from vdevice.program import Wait
    barriers = sum(isinstance(i, Wait) for p in programs for v in p.veus for i in v)
    busy = sum(op.rtasks * op.rtask_us for op in plan.ops)
    capacity = plan.num_veus * plan.predicted_us
    return {"operators": len({op.node for op in plan.ops}), "launches": len(ops),
            "rtasks": sum(op.kernel.rtasks for op in ops), "programs": len(programs), "barrier_rtasks": barriers,
            "predicted_us": round(plan.predicted_us, 3),
            "predicted_busy_pct": round(100 * busy / capacity, 1) if capacity else 0.0,
            "predicted_baselines_us": {k: round(v, 3) for k, v in plan.baselines_us.items()}, "notes": plan.notes}


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished build into place; an older build there is removed only after the new one is ready."""
    os.chmod(tmp, 0o755)
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, out)


# ---- load and run -------------------------------------------------------------------------------------------
class Built:
    """A build folder in memory: ops, programs, converted sources, weights; makes executors and runs them."""

    def __init__(self, folder: Path, manifest: Manifest, ops: list[Op], programs: list[Program],
                 sources: dict[str, str], weights: dict[str, np.ndarray]) -> None:
        self.folder, self.manifest, self.ops, self.programs = folder, manifest, ops, programs
        self.sources, self.weights = sources, weights
        self._vdevices: dict[str, Any] = {}
        self._executors: dict[tuple[str, str], Any] = {}

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

    def vdevice(self, backend: str) -> Any:
        """One compiled module and buffer set per backend, shared by its executors."""
        if backend not in self._vdevices:
            from vdevice.executors import VDevice
            if not self.ops:
                return None
            self._vdevices[backend] = VDevice(self.ops, self.sources, self.host_buffers(), backend,
                                              views=self.manifest.views)
        return self._vdevices[backend]

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
        from rtransform.toolchain import find_nvcc
        from vdevice.codegen import INCLUDE_DIR
        nvcc = find_nvcc()
        if nvcc is None:
            return
        import subprocess
        cmd = [nvcc, "-std=c++17", "-arch=sm_90", "-c", "-o", os.devnull, f"-I{INCLUDE_DIR}",
               str(self.folder / "program.cu")]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if res.returncode:
            errs = [ln for ln in res.stderr.splitlines() if "error" in ln][:3]
            raise BuildError("nvcc cannot compile the generated program: " + " | ".join(errs or [res.stderr[-300:]]))

    def executor(self, kind: str = "persistent", backend: str | None = None) -> Any:
        """persistent (one launch per rProgram), op-by-op (one launch per op) or graph (CUDA Graph of those)."""
        from vdevice.executors import GraphExecutor, OpByOpExecutor, PersistentExecutor
        backend = backend or self.manifest.target
        key = (kind, backend)
        if key not in self._executors:
            vd = self.vdevice(backend)
            if vd is None:
                return None
            if kind == "persistent":
                ex = PersistentExecutor(self.ops, self.programs, self.sources, {}, vdevice=vd)
            elif kind == "op-by-op":
                ex = OpByOpExecutor(self.ops, self.sources, {}, deps=self.manifest.deps, vdevice=vd)
            elif kind == "graph":
                ex = GraphExecutor(self.ops, self.sources, {}, deps=self.manifest.deps, vdevice=vd)
            else:
                raise BuildError(f"unknown executor '{kind}' (persistent, op-by-op, graph)")
            self._executors[key] = ex
        return self._executors[key]

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
            out[name] = np.ascontiguousarray(arr, dtype=t.dtype)
        return out

    def run(self, feeds: Mapping[str, np.ndarray], kind: str = "persistent",
            backend: str | None = None) -> dict[str, np.ndarray]:
        """Run the model once; returns every graph output as a new array."""
        data = self.check_inputs(feeds)
        ex = self.executor(kind, backend)
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
            ex.run(host)
        return {t.name: _view(host, t).copy() for t in self.manifest.outputs}

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """`rammer.load(dir)(x=...)`: run on the build's target."""
        return self.run(inputs)


def _view(host: Mapping[str, np.ndarray], t: TensorSpec) -> np.ndarray:
    """The caller's tensor inside its base buffer."""
    flat = host[t.base].reshape(-1).view(np.uint8)
    n = int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
    return flat[t.offset:t.offset + n].view(t.dtype).reshape(t.shape)


def load(out_dir: str | Path) -> Built:
    """Read a build folder written by build_model."""
    folder = Path(out_dir)
    mpath = folder / MANIFEST
    if not mpath.is_file():
        raise BuildError(f"{folder}: error: not a rammer build folder (no {MANIFEST}); run `rammer build` first")
    manifest = Manifest.from_json(json.loads(mpath.read_text()))
    sources = {sid: (folder / "rkernels" / name).read_text() for sid, name in manifest.sources.items()}
    ops = [Op.from_json(o) for o in json.loads((folder / "programs.json").read_text())["ops"]]
    programs = rebind_programs(plan_from_json((folder / "programs.json").read_text()), ops) if ops else []
    with np.load(folder / "weights.npz") as z:
        weights = {b.name: z[_npz_key(b.name)] for b in manifest.buffers if b.kind == "weight"}
    return Built(folder, manifest, ops, programs, sources, weights)


# ---- commands -----------------------------------------------------------------------------------------------
def build_command(model: str, out_dir: str, corpus: str | None = None, policy: str = "wavefront",
                  target: str = "gpu", veus: int | None = None, profile: str = "auto") -> int:
    """CLI body of `rammer build`: one error line and exit 1 on failure, a summary on success."""
    print(f"rammer build {model} -> {out_dir} (policy {policy}, target {target})", file=sys.stderr)
    try:
        built = build_model(model, out_dir, corpus, policy, target, veus, profile=profile)
    except SchedulerError as exc:
        print(_one_line(exc), file=sys.stderr)
        return 1
    except Exception as exc:  # the emulator's and converter's own errors: still one line, no traceback
        print(f"error: {type(exc).__name__}: {first_line(exc)}", file=sys.stderr)
        return 1
    s = built.manifest.stats
    print(f"{built.folder}: {s['operators']} operators, {s['launches']} launches, {s['rtasks']} rTasks, "
          f"{s['programs']} rProgram(s), {s['barrier_rtasks']} barrier-rTasks on {built.manifest.num_veus} vEUs, "
          f"predicted {s['predicted_us']:.1f} us, built in {s['build_s']:.1f} s")
    return 0


def _one_line(exc: Exception) -> str:
    """`FILE: error: ...` messages as they are, anything else prefixed with `error:`; first line only."""
    text = first_line(exc)
    return text if re.match(r"^\S+: error: ", text) else f"error: {text}"


def run_command(out_dir: str, inputs: str | None = None, check: bool = False, save: str | None = None,
                device: str | None = None, seed: int = 0) -> int:
    """CLI body of `rammer run`: run once, print outputs (and errors vs onnxruntime with --check)."""
    backend = device or "cpu"
    try:
        built = load(out_dir)
        if inputs:
            try:
                with np.load(inputs) as z:
                    feeds = {k: z[k] for k in z.files}
            except (OSError, ValueError) as exc:
                raise BuildError(f"{inputs}: error: cannot read inputs (.npz): {exc}") from None
        else:
            rng = np.random.default_rng(seed)
            feeds = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in built.manifest.inputs}
        backend = device or built.manifest.target
        if backend == "gpu":
            from vdevice.gpu import gpu_available
            ok, why = gpu_available()
            if not ok:
                raise BuildError(f"{why}; run with --device cpu or build with --target cpu")
        t = time.perf_counter()
        outs = built.run(feeds, backend=backend)
        secs = time.perf_counter() - t
    except SchedulerError as exc:
        print(_one_line(exc), file=sys.stderr)
        return 1
    except Exception as exc:  # emulator watchdog, device errors: one line
        hint = ""
        if "out of memory" in str(exc) and backend == "cpu":
            hint = (f" (the emulator runs every thread of {built.manifest.num_veus} vEUs as a fiber: "
                    f"rebuild with --target cpu or fewer --veus)")
        print(f"error: {type(exc).__name__}: {first_line(exc)}{hint}", file=sys.stderr)
        return 1
    print(f"ran {out_dir} on {backend} in {secs:.3f} s (first run, compile included when not cached)")
    from rtransform.bench import reference_outputs, relative_error
    worst = 0.0
    refs = dict(zip(built.output_names, reference_outputs(built.folder / "model.onnx", built.check_inputs(feeds)))) \
        if check else {}
    for name, arr in outs.items():
        line = f"  {name}: shape {list(arr.shape)} mean {float(np.mean(arr)):.6g}"
        if check:
            err = relative_error([arr], [refs[name]])
            worst = max(worst, err)
            line += f"  max rel error vs onnxruntime {err:.3g}"
        print(line)
    if save:
        np.savez(save, **outs)
    if check:
        ok = worst <= RTOL
        print(f"check: {'PASS' if ok else 'FAIL'} (max relative error {worst:.3g}, tolerance {RTOL:g})")
        return 0 if ok else 1
    return 0
