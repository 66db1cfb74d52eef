"""`rammer bench`: one model on one GPU, rammer's builds (wavefront, IOS) against every baseline a user has —
the fastest legacy variant of each operator at its own occupancy launched op by op, as a CUDA Graph, as a CUDA
Graph with programmatic dependent launch (vdevice/pdl.py), as a multi-stream graph and (with vendor calls for
Conv/MatMul/Gemm) as the library graph; PyTorch eager, a PyTorch CUDA Graph and torch.compile (reduce-overhead,
max-autotune-no-cudagraphs) — each checked against onnxruntime, then timed; the strongest baseline named and
rammer's ratio against it, the cost model's prediction beside each.

torch and cupy exist only on the GPU machine, so both are imported inside the functions that need them.
"""
from __future__ import annotations

import datetime as _dt
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from toolchain.exits import Exit

import numpy as np
import onnx

from .check import VARIANT_RTOL, reference_outputs, relative_error
from .torch_baseline import TorchGraph

RAMMER_VARIANTS = ("rammer", "rammer-ios")
# the plan-independent baselines (scheduler/baselines.py's names), run from builds that launch every node
LAUNCH_VARIANTS = ("op-by-op", "cuda-graph", "cuda-graph-pdl", "multi-stream-graph", "library-graph")
TORCH_VARIANTS = ("pytorch", "pytorch-cuda-graph", "torch-compile", "torch-compile-max-autotune")
VARIANTS = RAMMER_VARIANTS + LAUNCH_VARIANTS + TORCH_VARIANTS
BASELINES = LAUNCH_VARIANTS + TORCH_VARIANTS
RTOL = VARIANT_RTOL  # max |out - ref| allowed, relative to max |ref| (rammer.check)


# ---- timing ------------------------------------------------------------------------------------------
@dataclass
class Timer:
    """Event API of one runtime: stream-ordered timestamps, so GPU work is timed on the GPU."""

    event: Callable[[], Any]
    record: Callable[[Any], None]
    wait: Callable[[Any], None]
    elapsed_ms: Callable[[Any, Any], float]


def cpu_timer() -> Timer:
    """Host clock with the Timer interface (synchronous work, and the tests of measure())."""
    return Timer(event=lambda: {}, record=lambda e: e.__setitem__("t", time.perf_counter()),
                 wait=lambda e: None, elapsed_ms=lambda a, b: (b["t"] - a["t"]) * 1e3)


def torch_timer() -> Timer:
    """CUDA events on torch's current stream."""
    import torch
    return Timer(event=lambda: torch.cuda.Event(enable_timing=True), record=lambda e: e.record(),
                 wait=lambda e: e.synchronize(), elapsed_ms=lambda a, b: a.elapsed_time(b))


@dataclass
class Timing:
    """Per-run latencies of one variant, in ms."""

    runs: list[float]

    @property
    def median(self) -> float:
        """The reported figure: robust to the odd slow run."""
        return statistics.median(self.runs)

    @property
    def minimum(self) -> float:
        """Best case, for spotting noisy medians."""
        return min(self.runs)


def measure(run: Callable[[], None], timer: Timer, repeats: int = 100, warmup: int = 10) -> Timing:
    """Warm up, then time each run between two events, starting each from an idle device (latency)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    for _ in range(warmup):
        run()
    pairs = []
    for _ in range(repeats):
        start, end = timer.event(), timer.event()
        if pairs:
            timer.wait(pairs[-1][1])
        timer.record(start)
        run()
        timer.record(end)
        pairs.append((start, end))
    timer.wait(pairs[-1][1])
    return Timing([timer.elapsed_ms(a, b) for a, b in pairs])


# ---- variants ----------------------------------------------------------------------------------------
@dataclass
class Variant:
    """One way of running the model: enqueue an inference, read its outputs, time it with its runtime."""

    name: str
    run: Callable[[], None]
    outputs: Callable[[], list[np.ndarray]]
    timer: Timer | None = None
    timed: Callable[[int], float] | None = None  # the executor's own event timing: median ms of n runs
    note: Callable[[], str] | None = None  # what the row's note says when it ran (evidence about the variant)


@dataclass
class Unavailable:
    """A variant that cannot run here, and why."""

    name: str
    reason: str


@dataclass
class Measurement:
    """What the table and the JSON report for one variant."""

    name: str
    status: str                      # ok | mismatch | unavailable | error
    median_ms: float | None = None
    min_ms: float | None = None
    max_err: float | None = None     # max |out - onnxruntime| / max |onnxruntime| over all outputs
    note: str = ""


@dataclass
class BenchResult:
    """One model's benchmark on one device."""

    model: str
    batch: int
    device: str
    date: str
    repeats: int
    variants: list[Measurement] = field(default_factory=list)
    builds: dict[str, dict] = field(default_factory=dict)  # policy -> build stats, folder, ncu utilisation
    kernels: list[dict] = field(default_factory=list)  # --kernels: rammer.kernel_rates rows of the launched kernels

    def ms(self, name: str) -> float | None:
        """Median of a variant that ran and matched, else None."""
        for m in self.variants:
            if m.name == name and m.status == "ok":
                return m.median_ms
        return None

    def speedup(self, baseline: str, of: str = "rammer") -> float | None:
        """How many times faster `of` is than `baseline` (baseline ms / of ms)."""
        a, b = self.ms(baseline), self.ms(of)
        return a / b if a and b else None

    @property
    def strongest(self) -> str | None:
        """The fastest baseline that ran and matched (None: none did)."""
        ran = [(self.ms(b), b) for b in BASELINES if self.ms(b) is not None]
        return min(ran)[1] if ran else None


def evaluate(variant: Variant | Unavailable, refs: list[np.ndarray], repeats: int,
             warmup: int) -> Measurement:
    """Check a variant's outputs against the reference, and time it only when they match."""
    if isinstance(variant, Unavailable):
        return Measurement(variant.name, "unavailable", note=variant.reason)
    try:
        variant.run()
        err = relative_error(variant.outputs(), refs)
        if not err <= RTOL:
            return Measurement(variant.name, "mismatch", max_err=err, note=f"error {err:.3g} > {RTOL:g}")
        if variant.timed is not None:
            for _ in range(warmup):
                variant.run()
            return Measurement(variant.name, "ok", variant.timed(repeats), None, err, _note(variant))
        t = measure(variant.run, variant.timer, repeats, warmup)
    except Exception as exc:  # a failing variant must not hide the others' results
        return Measurement(variant.name, "error", note=_first_line(exc))
    return Measurement(variant.name, "ok", t.median, t.minimum, err, _note(variant))


def _note(variant: Variant) -> str:
    """The variant's own note, or '' (a note that fails says so: it never fails the row)."""
    try:
        return variant.note() if variant.note is not None else ""
    except Exception as exc:
        return f"note failed: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    """Exception type and first message line, for one-line reports."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


# ---- rammer's builds and the launch baselines: the project's executors ---------------------------------------
BENCH_MARK = ".rammer-bench"  # marks a --out folder as bench's own


def rammer_variants(model: onnx.ModelProto, feeds: dict[str, np.ndarray], workdir: Path,
                    stats: dict[str, dict] | None = None, target: str = "gpu") -> list[Variant | Unavailable]:
    """rammer (wavefront) and rammer (IOS): `rammer build --target gpu` run by the persistent executor (its rPrograms,
    launch segments and library calls); each build's statistics and folder (timeline.svg, report.md) go into
    `stats[policy]`."""
    path = model_file(model, workdir)
    out: list[Variant | Unavailable] = []
    for name, policy in (("rammer", "wavefront"), ("rammer-ios", "ios")):
        built = checked_build(path, workdir / policy, target, policy=policy)
        if isinstance(built, Unavailable):
            out.append(Unavailable(name, built.reason))
            continue
        if stats is not None:
            stats[policy] = dict(built.manifest.stats, folder=str(workdir / policy))
        out.append(executor_variant(name, built, "persistent", feeds, target))
    return out


def launch_variants(model: onnx.ModelProto, feeds: dict[str, np.ndarray], workdir: Path, target: str = "gpu"
                    ) -> list[Variant | Unavailable]:
    """The baselines that launch legacy kernels: a build of every node as its fastest legacy variant at its own
    occupancy on the graph without the weight-stationary pass (placement launch-only, the baselines' choice) run op
    by op, as a one-stream CUDA Graph and as its launch segment (a graph forked over streams where nodes are
    independent); a build with vendor calls wherever the library runs them faster (placement library-launch) captured as
    one CUDA Graph; the launch-only build's kernels from a copy of its sources with the PDL prologue, on one stream
    with programmatic dependent launch, as one CUDA Graph (pdl_variant). `target` cpu runs them on the emulator (the
    graphs are GPU-only rows there; the PDL copy runs op by op, its prologue a no-op)."""
    path = model_file(model, workdir)
    common: dict[str, Any] = dict(disable_passes=("resident_weights",), launches=True)
    launched = checked_build(path, workdir / "launches", target, placement="launch-only", backends=("rtask",),
                             fork_launches=True, **common)  # its segment is the multi-stream graph, forked
    library = checked_build(path, workdir / "library", target, placement="library-launch",
                            backends=("rtask", "library"), **common)
    out: list[Variant | Unavailable] = []
    for name, built, kind in (("op-by-op", launched, "op-by-op"), ("cuda-graph", launched, "graph"),
                              ("multi-stream-graph", launched, "persistent"), ("library-graph", library, "graph")):
        out.append(Unavailable(name, built.reason) if isinstance(built, Unavailable) else
                   executor_variant(name, built, kind, feeds, target))
    out.insert(2, Unavailable("cuda-graph-pdl", launched.reason) if isinstance(launched, Unavailable) else
               pdl_variant(launched, feeds, target))
    return out


def model_file(model: onnx.ModelProto, workdir: Path) -> Path:
    """The model saved once in the bench's folder."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / BENCH_MARK).write_text("rammer bench folder\n")  # the folder's marker: a later --out may reuse it
    path = workdir / "model.onnx"
    if not path.is_file():
        onnx.save(model, str(path))
    return path


def checked_build(path: Path, out: Path, target: str = "gpu", **options: Any) -> Any:
    """`rammer build --target TARGET` with `options`, or the reason it failed (a row, not a crash)."""
    from rammer.build import build_model
    try:
        return build_model(path, out, target=target, quiet=True, **options)
    except Exception as exc:  # a model the toolchain cannot build is a row with its reason
        return Unavailable(out.name, f"build failed: {_first_line(exc)}")


def executor_variant(name: str, built: Any, kind: str, feeds: dict[str, np.ndarray], backend: str = "gpu"
                     ) -> Variant | Unavailable:
    """build_variant, or the executor's error as an unavailable row."""
    try:
        return build_variant(name, built, kind, feeds, backend)
    except Exception as exc:
        return Unavailable(name, f"{kind} executor: {_first_line(exc)}")


def build_variant(name: str, built: Any, kind: str, feeds: dict[str, np.ndarray], backend: str = "gpu") -> Variant:
    """A built model's executor as a Variant: run() uploads inputs and copies outputs back (for the check),
    timed(n) times launches on the device-resident buffers with CUDA events (median ms; on the "cpu" backend, the
    emulator's wall time: the headline's dry run)."""
    ex = built.executor(kind, backend)
    if ex is None:
        raise ValueError("the model has no operators to run")
    result: dict[str, np.ndarray] = {}

    def run() -> None:
        result.clear()
        result.update(built.run(feeds, kind=kind, backend=backend))

    return Variant(name, run=run, outputs=lambda: [result[k] for k in built.output_names], timed=ex.time)


PDL_NAME = "cuda-graph-pdl"


def pdl_variant(built: Any, feeds: dict[str, np.ndarray], backend: str = "gpu") -> Variant | Unavailable:
    """CUDA Graph + programmatic dependent launch of a launch build's kernels (vdevice.pdl): its own compile of
    the PDL copy of the sources, run and timed like the other executors; unavailable with the reason where the
    GPU is older than sm_90, cuda.bindings is missing or the copy cannot be made."""
    try:
        ex = pdl_executor(built, backend)
    except Exception as exc:  # PdlUnavailable, or a compile/launch error of the copy: a row with its reason
        return Unavailable(PDL_NAME, f"PDL executor: {_first_line(exc)}")
    if ex is None:
        return Unavailable(PDL_NAME, "the model has no operators to run")
    result: dict[str, np.ndarray] = {}

    def run() -> None:
        result.clear()
        result.update(run_executor(built, ex, feeds))

    return Variant(PDL_NAME, run=run, outputs=lambda: [result[k] for k in built.output_names], timed=ex.time,
                   note=lambda: pdl_note(ex))


def pdl_note(ex: Any) -> str:
    """The PDL row's evidence: how many of the captured graph's edges are programmatic (GPU), or why not known."""
    edges = ex.edge_types()
    if not isinstance(edges, dict):  # a Refusal: why they were not counted
        return f"graph edges: {edges}"
    return f"graph edges: {edges['programmatic']} programmatic, {edges['default']} default"


def pdl_executor(built: Any, backend: str = "gpu") -> Any:
    """A PdlGraphExecutor of a build (rammer.runtime.Built) on `backend`: the build's ops, steps and buffers,
    compiled from the PDL copy of its sources; None when it has no operators."""
    from vdevice.executors import run_once
    from vdevice.pdl import PdlGraphExecutor, make_vdevice
    if not built.ops:
        return None
    vd = make_vdevice(built.ops, built.sources, built.host_buffers(), backend,
                      include_dirs=[str(built.folder / "rkernels")], views=built.manifest.views,
                      veus_per_sm=int(built.manifest.stats.get("veus_per_sm", 1)))
    run_once(vd, built.manifest.setup)  # its own buffers: the setup ops' tables computed here too
    by_program = built.program_ops()
    return PdlGraphExecutor(built.ops, built.sources, {}, deps=built.manifest.deps, vdevice=vd,
                            steps=built.executor_steps(lambda k: by_program[k], lambda g: list(g.ops)))


def run_executor(built: Any, ex: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Built.run with an executor of our own: the inputs into their buffers, one run, the outputs copied out."""
    from rammer.runtime import _view
    data = built.check_inputs(feeds)
    vd = ex.vd
    names = {t.base for t in built.manifest.inputs + built.manifest.outputs}
    host = {n: np.array(vd.read(n)) if vd.backend.name != "cpu" else vd.buffers[n] for n in names}
    for t in built.manifest.inputs:
        _view(host, t)[...] = data[t.name]
    ex.run(host)
    return {t.name: _view(host, t).copy() for t in built.manifest.outputs}


# ---- PyTorch on the same graph ---------------------------------------------------------------------------------
def torch_variants(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[Variant | Unavailable]:
    """PyTorch eager running the ONNX graph node by node, the same captured in a torch CUDA Graph, and
    torch.compile of it with mode 'reduce-overhead' (CUDA Graphs) and 'max-autotune-no-cudagraphs'."""
    try:
        import torch
    except ImportError as exc:
        return [Unavailable(n, f"torch not importable: {_first_line(exc)}") for n in TORCH_VARIANTS]
    if not torch.cuda.is_available():
        return [Unavailable(n, "torch has no CUDA device") for n in TORCH_VARIANTS]
    torch.backends.cuda.matmul.allow_tf32 = False  # same fp32 arithmetic as the rKernels
    torch.backends.cudnn.allow_tf32 = False
    try:
        module = TorchGraph.build(model, "cuda")
    except ValueError as exc:
        return [Unavailable(n, str(exc)) for n in TORCH_VARIANTS]
    args = [torch.from_numpy(feeds[n]).cuda() for n in module.input_names]
    out: list[Variant | Unavailable] = [_torch_variant("pytorch", module, args)]
    try:
        out.append(_torch_variant("pytorch-cuda-graph", torch_graph(module, args), []))
    except Exception as exc:  # capture refused (a host sync inside the module): a row with its reason
        out.append(Unavailable("pytorch-cuda-graph", f"capture failed: {_first_line(exc)}"))
    out.append(_torch_variant("torch-compile", torch.compile(module, mode="reduce-overhead"), args))
    out.append(_torch_variant("torch-compile-max-autotune",
                              torch.compile(module, mode="max-autotune-no-cudagraphs"), args))
    return out


def torch_graph(module: Callable, args: list) -> Callable[[], list]:
    """The module captured once in a torch CUDA Graph on its (static) inputs; calling it replays the graph and
    returns the static outputs."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.inference_mode():
        for _ in range(3):  # warm-up outside the capture (allocator, cuDNN/cuBLAS handles and plans)
            module(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.inference_mode():
        outputs = list(module(*args))

    def replay() -> list:
        graph.replay()
        return outputs
    return replay


def _torch_variant(name: str, fn: Callable, args: list) -> Variant:
    """Wrap a torch callable: run keeps the last outputs, outputs copies them to the host."""
    import torch
    last: list = []

    def run() -> None:
        with torch.inference_mode():
            last[:] = list(fn(*args))

    return Variant(name, run, lambda: [t.detach().cpu().numpy() for t in last], torch_timer())


# ---- model, reference, report ----------------------------------------------------------------------------
def load_bench_model(model_path: str, batch: int) -> tuple[onnx.ModelProto, str]:
    """An ONNX file (symbolic dims fixed to `batch`) or a zoo model name generated at `batch`."""
    path = Path(model_path)
    if path.is_file():
        try:
            model = onnx.load(str(path))
        except Exception as exc:  # protobuf raises several unrelated types for a file that is not ONNX
            raise ValueError(f"cannot read ONNX model {path}: {_first_line(exc)}") from None
        for vi in model.graph.input:
            for d in vi.type.tensor_type.shape.dim:
                if not d.HasField("dim_value"):
                    d.dim_value = batch
        return model, path.stem
    from rammer.zoo import NAMES, generate
    if model_path in NAMES:
        return generate(model_path, batch=batch), model_path
    raise ValueError(f"{model_path!r} is neither an ONNX file nor a zoo model ({', '.join(NAMES)})")


def gpu_unavailable() -> str | None:
    """Why no GPU benchmark can run here, or None when cupy sees a CUDA device."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return f"cupy is not importable ({_first_line(exc)})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"CUDA runtime error ({_first_line(exc)})"
    return None if count > 0 else "no CUDA device"


def device_name() -> str:
    """Name of CUDA device 0."""
    import cupy
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def run_bench(model: onnx.ModelProto, label: str, batch: int, repeats: int = 100,
              warmup: int = 10, out_dir: str | Path | None = None, ncu: bool = True,
              kernels: bool = False) -> BenchResult:
    """All six variants of one model: outputs checked against onnxruntime, then timed; the builds (with their
    timelines) stay in `out_dir` when given, and ncu's utilisation of each persistent build is added when ncu
    is on the PATH. `kernels`: each GEMM / convolution of the launch baselines' build timed alone against the
    vendor library's call (rammer.kernel_rates)."""
    from rammer.zoo import random_inputs
    feeds = random_inputs(model, seed=0)
    refs = reference_outputs(model, feeds)
    result = BenchResult(label, batch, device_name(), _dt.datetime.now().isoformat(timespec="seconds"), repeats)
    with tempfile.TemporaryDirectory(prefix="rammer-bench-") as tmp:
        work = Path(out_dir) if out_dir is not None else Path(tmp)
        variants = (rammer_variants(model, feeds, work, result.builds) + launch_variants(model, feeds, work)
                    + torch_variants(model, feeds))
        for v in variants:
            result.variants.append(evaluate(v, refs, repeats, warmup))
        if kernels and (work / "launches" / "build.json").is_file():
            from rammer.kernel_rates import kernel_rates
            from rammer.runtime import load
            result.kernels = [r.to_json() for r in kernel_rates(load(work / "launches"), repeats=max(3, repeats // 10))]
        for info in result.builds.values():
            info["ncu"] = ncu_utilisation(info["folder"]) if ncu else {"unavailable": "not asked for"}
            if out_dir is None:
                del info["folder"]  # a temporary folder: gone after this function
    return result


# ---- GPU utilisation of a persistent build, from Nsight Compute ----------------------------------------------
NCU_METRICS = {  # ncu metric -> what the report calls it
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "gpu__time_duration.sum": "duration",
}


def ncu_utilisation(folder: str | Path, timeout: int = 600) -> dict[str, Any]:
    """Run the build once under `ncu` (clocks left alone) and read the interpreter kernel's metrics; without ncu,
    or when it fails, {'unavailable': reason}."""
    import shutil
    import subprocess

    from vdevice.codegen import INTERPRETER
    ncu = shutil.which("ncu")
    if ncu is None:
        return {"unavailable": "ncu is not on the PATH"}
    cmd = [ncu, "--csv", "--clock-control", "none", "--kernel-name", INTERPRETER, "--launch-count", "1",
           "--metrics", ",".join(NCU_METRICS), sys.executable, "-c",
           "from rammer.cli import main; main()", "run", str(folder), "--device", "gpu"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"unavailable": f"ncu took more than {timeout} s"}
    found = parse_ncu_csv(res.stdout)
    if not found:
        tail = (res.stderr or res.stdout).strip().splitlines()
        return {"unavailable": f"ncu exit {res.returncode}: {tail[-1] if tail else 'no metrics in its output'}"}
    return found


def parse_ncu_csv(text: str) -> dict[str, Any]:
    """The metrics of the first profiled kernel in `ncu --csv` output (its '==PROF==' lines are skipped);
    durations are converted to microseconds."""
    import csv
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return {}
    out: dict[str, Any] = {}
    first_id = None
    for row in csv.DictReader(lines[start:]):
        if first_id is None:
            first_id = row.get("ID")
        name = NCU_METRICS.get(row.get("Metric Name", ""))
        if row.get("ID") != first_id or name is None:
            continue
        try:
            value = float(row.get("Metric Value", "").replace(",", ""))
        except ValueError:
            continue
        if name == "duration":
            unit = row.get("Metric Unit", "").strip().lower()
            scale = {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit)
            if scale is None:
                continue
            name, value = "duration_us", value * scale
        out[name] = round(value, 3)
    return out


def _fmt(v: float | None, spec: str, suffix: str = "") -> str:
    """A number or 'n/a'."""
    return "n/a" if v is None else f"{v:{spec}}{suffix}"


def render_text(r: BenchResult) -> str:
    """Console table: per variant its latency, error, and rammer's speed-up over it; the strongest baseline named
    with rammer's ratio against it; each build's prediction beside the measurements."""
    lines = [f"model {r.model}  batch {r.batch}  device {r.device}  date {r.date}  "
             f"median of {r.repeats} runs (CUDA events)",
             f"{'variant':26s} {'status':11s} {'median ms':>10s} {'min ms':>9s} {'max err':>9s} "
             f"{'rammer x':>9s}  note"]
    for m in r.variants:
        lines.append(f"{m.name:26s} {m.status:11s} {_fmt(m.median_ms, '.4f'):>10s} {_fmt(m.min_ms, '.4f'):>9s} "
                     f"{_fmt(m.max_err, '.2g'):>9s} {_fmt(r.speedup(m.name), '.2f', 'x'):>9s}  {m.note}")
    strongest = r.strongest
    if strongest is not None:
        lines.append(f"strongest baseline: {strongest} ({r.ms(strongest):.4f} ms); rammer "
                     f"{_fmt(r.speedup(strongest), '.2f', 'x')} against it")
    for policy, b in r.builds.items():
        lines.append(f"build {policy}: {_build_summary(b)}")
        compared = predicted_vs_measured(r, policy, b)
        if compared:
            lines.append("  cost model vs measured: " + "; ".join(
                f"{name} predicted {p:.1f} us, measured {m:.1f} us ({m / p:.2f}x)" for name, p, m in compared))
        if b.get("folder"):
            lines.append(f"  timeline {Path(b['folder']) / 'timeline.svg'}, report {Path(b['folder']) / 'report.md'}")
    if r.kernels:
        from rammer.kernel_rates import render
        lines += ["kernel rates (each node's fastest legacy kernels alone vs the vendor library, same buffers):",
                  render(r.kernels)]
    return "\n".join(lines)


def predicted_vs_measured(r: BenchResult, policy: str, b: dict) -> list[tuple[str, float, float]]:
    """(variant, predicted µs, measured median µs) for each variant this build predicted that ran: the policy's
    own plan, and (on the wavefront build, which prices them) every baseline the cost model prices."""
    predicted = {"wavefront": "rammer", "ios": "rammer-ios"}
    out = []
    if policy in predicted and b.get("predicted_us") and r.ms(predicted[policy]) is not None:
        out.append((predicted[policy], float(b["predicted_us"]), r.ms(predicted[policy]) * 1e3))
    if policy == "wavefront":
        for name, us in (b.get("predicted_baselines_us") or {}).items():
            measured = r.ms(name)
            if us and measured is not None:
                out.append((name, float(us), measured * 1e3))
    return out


def _build_summary(b: dict) -> str:
    """One line: build time, rTasks, rPrograms, barriers, prediction, predicted and measured utilisation."""
    ncu = b.get("ncu") or {}
    util = (f"achieved occupancy {ncu['achieved_occupancy_pct']:.1f}%, SM throughput "
            f"{ncu.get('sm_throughput_pct', float('nan')):.1f}% (ncu)" if "achieved_occupancy_pct" in ncu
            else f"ncu: {ncu.get('unavailable', 'not run')}")
    return (f"{b.get('build_s', 0):.1f} s, {b['launches']} launches, {b['rtasks']} rTasks, {b['programs']} "
            f"rProgram(s), {b['barrier_rtasks']} barrier-rTasks, predicted {b['predicted_us']:.1f} us with vEUs "
            f"{b.get('predicted_busy_pct', 0):.0f}% busy; {util}")


def markdown_builds(results: list[BenchResult]) -> str:
    """BENCHMARKS.md table of the rammer builds: build time, size of the schedule, utilisation."""
    head = ["model", "policy", "build (s)", "rTasks", "rPrograms", "barrier-rTasks", "predicted (µs)",
            "predicted vEU busy", "achieved occupancy (ncu)", "SM throughput (ncu)"]
    rows = []
    for r in results:
        for policy, b in r.builds.items():
            ncu = b.get("ncu") or {}
            rows.append([r.model, policy, f"{b.get('build_s', 0):.1f}", str(b["rtasks"]), str(b["programs"]),
                         str(b["barrier_rtasks"]), f"{b['predicted_us']:.1f}", f"{b.get('predicted_busy_pct', 0):.0f}%",
                         _fmt(ncu.get("achieved_occupancy_pct"), ".1f", "%"),
                         _fmt(ncu.get("sm_throughput_pct"), ".1f", "%")])
    return _markdown(head, rows)


def _markdown(head: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])


def markdown_table(results: list[BenchResult]) -> str:
    """BENCHMARKS.md table: one row per model, latency of every variant, the strongest baseline and rammer's
    speed-up over it."""
    head = (["model", "batch", "device"] + [f"{v} (ms)" for v in VARIANTS]
            + ["strongest baseline", "rammer vs strongest"])
    rows = [[r.model, str(r.batch), r.device] + [_fmt(r.ms(v), ".3f") for v in VARIANTS]
            + [r.strongest or "n/a", _fmt(r.speedup(r.strongest) if r.strongest else None, ".2f", "x")]
            for r in results]
    return _markdown(head, rows)


def bench_command(model_path: str, batch: int, json_out: bool, repeats: int = 100,
                  out_dir: str | None = None, kernels: bool = False) -> int:
    """CLI body of `rammer bench MODEL [--batch B] [--json] [--repeats N] [--out DIR]`; exit 3 without a GPU,
    2 for a bad option or model (toolchain.exits)."""
    if repeats < 1 or batch < 1:
        print(f"rammer bench: --repeats and --batch must be >= 1 (got {repeats}, {batch})", file=sys.stderr)
        return 2
    if out_dir is not None:
        from toolchain.files import Inputs, OutputError
        try:  # before anything runs: never at or above the model, never into a folder of the user's
            Inputs().file(model_path if Path(model_path).exists() else None, "the model").check_folder(
                out_dir, "--out", ours=lambda p: (p / BENCH_MARK).is_file(),
                tool=f"a rammer bench folder (no {BENCH_MARK})")
        except OutputError as exc:
            print(str(exc), file=sys.stderr)
            return 2
    reason = gpu_unavailable()
    if reason:
        print(f"rammer bench: no GPU: {reason}", file=sys.stderr)
        return Exit.MISSING
    try:
        model, label = load_bench_model(model_path, batch)
    except ValueError as exc:
        print(f"rammer bench: {exc}", file=sys.stderr)
        return 2
    result = run_bench(model, label, batch, repeats, warmup=max(10, repeats // 10), out_dir=out_dir,
                       kernels=kernels)
    print(json.dumps(asdict(result), indent=2) if json_out else render_text(result))
    return 1 if any(m.status in ("mismatch", "error") for m in result.variants) else 0
