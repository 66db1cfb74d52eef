"""`rammer build`: an ONNX model becomes a folder holding the plan, the converted rKernels, the generated
persistent program, the weights, a timeline and a report (rammer.runtime reads it back and runs it).

Data path: onnx -> scheduler.pipeline (import, passes, policy, validation) -> converter (the legacy sources the
plan uses) -> vdevice.codegen (one interpreter module) -> rammer.runtime (CPU emulator or GPU executors).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

import numpy as np
import onnx

from converter import RKernelMeta
from kernel_corpus.bindings import DEFAULT_PRECISION, PRECISIONS, Temp
from scheduler.export import graph_to_onnx
from scheduler.graph import Graph
from scheduler.passes import check_pass_names, packed_shapes, resident_unit_caps, spread_blocks
from scheduler.plan import default_vdevice_op, temp_buffer
from scheduler.profiler import H100, Profiler
from scheduler.onnx_files import save_standalone
from scheduler.report import render_report, schedule_slices, schedule_source, timeline_svg, timeline_trace
from scheduler.search import Planned, SearchResult, TargetSearch, choose_occupancy, without_candidates
from scheduler.workload import Workload
from vdevice.program import Op, Program, plan_to_json
from vdevice.target import H100 as H100_DEVICE
from vdevice.target import BackendName, Target, TargetKind

from toolchain.files import Inputs, regular_file_error
from toolchain.outdir import STAGING_MARK, Replacement

from .build_output import check_output_folder, commit_build, foreign_files  # noqa: F401  (re-exported)
from .runtime import MANIFEST, BufferSpec, BuildError, Built, Manifest, TensorSpec, npz_key, rebind_programs


T = TypeVar("T")


# ---- build --------------------------------------------------------------------------------------------------
class Progress:
    """One line per build step on stderr with its duration, so long steps are visible."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet, self.t0 = quiet, time.perf_counter()
        self.times: dict[str, float] = {}

    def step(self, what: str, fn: Callable[[], T], own_line: bool = False) -> T:
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
            text = device_text(path, sorted(kernels))
            res = convert_source(text, str(path), kernels=sorted(kernels), include_dirs=[str(path.parent)])
        except ConversionError as exc:
            raise BuildError("; ".join(exc.diagnostics[:3])) from None
        refused = {r["name"]: r["diagnostics"] for r in res.refused}
        for k in kernels:
            if k in refused:
                raise BuildError(f"kernel '{k}' of {source} was refused by the converter: {refused[k][0]}")
        texts[source] = res.output
        meta[source] = {m.name: m for m in res.rkernels}
    return texts, meta


def device_text(path: Path, kernels: list[str]) -> str:
    """A source's text for conversion: the corpus's as it is (device code only); a user library's with its host
    code (launchers, `<<<...>>>`, main) sliced away, lines and columns kept."""
    from kernel_corpus.bindings import LEGACY_DIR
    text = path.read_text()
    if path.parent.resolve() == LEGACY_DIR.resolve():
        return text
    from converter.slice import SliceError, slice_source
    try:
        return slice_source(text, str(path), kernels, [str(path.parent)]).text
    except SliceError as exc:
        raise BuildError("; ".join(exc.diagnostics[:3])) from None


def resolve_ops(ops: list[Op], meta: Mapping[str, Mapping[str, RKernelMeta]]) -> list[Op]:
    """Check each op's rKernel against the converter's metadata (name, wrapper, layout struct)."""
    import dataclasses
    out = []
    for op in ops:
        k = op.kernel
        m = meta.get(k.source_id, {}).get(k.wrapper_name)
        if m is None:
            raise BuildError(f"op {op.name}: the converter produced no rKernel for '{k.wrapper_name}' "
                             f"of {k.source_id}")
        layout = m.layout.split("<", 1)[0] if m.layout else None
        out.append(dataclasses.replace(op, kernel=dataclasses.replace(k, rkernel=m.rkernel, layout=layout,
                                                                      wrapper=m.wrapper)))
    return out


def plan_buffers(graph: Graph, plan: Any, ops: list[Op]) -> tuple[list[BufferSpec], dict[str, tuple[str, int]]]:
    """Allocations (tensors that are not views, and each launch's temps) and byte-offset views for the rest."""
    temps: dict[str, int] = {}
    for pop in plan.ops:
        for arg in pop.launch.args:
            if isinstance(arg, Temp):
                name = temp_buffer(pop.node, arg)
                temps[name] = max(temps.get(name, 0), int(arg.nbytes))
    used = {a.buffer for op in ops for a in op.args if a.buffer is not None}
    used |= set(graph.inputs) | set(graph.outputs)
    used |= {n for call in plan.calls for n in call.inputs + call.outputs if n}
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
    texts, meta = convert_sources(paths, kernels_of(ops))
    return resolve_ops(ops, meta), texts


def source_paths(registry: Any) -> dict[str, Path]:
    """Legacy source file of each source id: the registry's, then the built-in corpus's."""
    from kernel_corpus.bindings import LEGACY_DIR
    paths = {b.source: b.source_path for b in registry.all()}
    paths.update({p.name: p for p in LEGACY_DIR.glob("*.cu") if p.name not in paths})
    return paths


PROFILES = ("auto", "model", "measured")


def make_profiler(profile: str, kind: TargetKind | str, veus: int) -> Profiler:
    """The profiler of a build: `auto` measures on a GPU build when a GPU is visible and models otherwise;
    `measured` on a CPU build times the emulator (slow; it exercises the mechanism, not GPU timings)."""
    from vdevice.gpu import gpu_available

    from scheduler.legacy_usage import LegacyRegisters
    from scheduler.measure import device_spec
    if profile not in PROFILES:
        raise BuildError(f"--profile must be one of {', '.join(PROFILES)}, not '{profile}'")
    gpu, why = gpu_available() if kind == TargetKind.GPU and profile != "model" else (False, "")
    if profile == "auto":
        profile = "measured" if gpu else "model"
    if profile == "model":  # legacy kernels (launch segments) at ptxas' registers, as the baselines price them
        return Profiler(H100, veus, "model", legacy_registers=LegacyRegisters())
    if kind == TargetKind.GPU and not gpu:
        raise BuildError(f"--profile measured with --target gpu needs a GPU ({why})")
    return Profiler(device_spec(str(kind)), veus, "measured", legacy_registers=LegacyRegisters())


def profile_workload(workload: Any, profiler: Any, target: str, paths: Mapping[str, Path],
                     quiet: bool = False) -> tuple[int, int]:
    """Measured mode: time the workload's launch shapes the cache lacks (sources from `paths`, see source_paths);
    returns (measured, from the cache)."""
    from scheduler.measure import measure_workload
    return measure_workload(workload, profiler, target, quiet=quiet, convert=lambda ops: convert_ops(ops, paths))


@dataclass(frozen=True)
class BuildOptions:
    """Everything `rammer build` takes besides the model and the folder (the CLI's options, the same names).
    `backends` (default: rtask, plus user when `user_libs` name kernel library folders; "library" adds vendor calls)
    and `placement` (dp, search, rtask-only; default search when some node has a choice) say where each node may
    run (scheduler.placement). `merge` is the IOS sibling merge (off, auto: where it wins by the profiler, always;
    scheduler.merge). `precision` (PRECISIONS) is the least accurate arithmetic kernels may use. `veus_per_sm` sizes
    resident slices for that many vEUs sharing an SM (default: searched by a GPU build without `veus`, else
    ceil(vEUs / SMs) on a GPU and 1 on the CPU). `disable_passes` leaves graph passes out; `dump_after` writes the
    graph after each named pass as `after-NAME.onnx` into the build folder."""

    target: str = "gpu"
    veus: int | None = None
    veus_per_sm: int | None = None
    policy: str = "wavefront"
    profile: str = "auto"
    precision: str = DEFAULT_PRECISION
    backends: tuple[str, ...] | None = None
    user_libs: tuple[str, ...] = ()
    placement: str | None = None
    merge: str = "off"
    corpus: str | Path | None = None
    disable_passes: tuple[str, ...] = ()
    dump_after: tuple[str, ...] = ()
    compile_check: bool = True  # compile the generated program (nvcc without a GPU)
    # nodes may run outside the rPrograms as launch segments where that is predicted faster (None: on for the
    # GPU target, off for the CPU emulator's builds unless --force asks for a launch)
    launches: bool | None = None
    force: tuple[str, ...] = ()  # "PATTERN=KIND": node names (fnmatch) that must run as rtask, launch or library
    # launch segments fork independent branches over streams: None where predicted faster, True always (the
    # multi-stream baseline of rammer bench times that graph), False never
    fork_launches: bool | None = None
    # J, the most hidden units per resident LSTM rTask (vdevice.target.Target.resident_units): None lets the build
    # choose it by the cost model (Build.resident_spread), a number forces that cap (0: the fewest-fit J, no choice)
    resident_units: int | None = None
    # named dynamic dimensions of the model and their sizes (--dim NAME=N): an exporter's "batch" or "seq"
    dims: tuple[tuple[str, int], ...] = ()

    def check(self) -> None:
        """One-line errors for options that contradict each other, before any work."""
        check_pass_names(list(self.disable_passes) + list(self.dump_after))
        off = [n for n in self.dump_after if n in self.disable_passes]
        if off:
            raise BuildError(f"--dump-after {off[0]}: that pass is disabled, there is nothing to dump")
        if self.precision not in PRECISIONS:
            raise BuildError(f"--precision {self.precision}: choose from {', '.join(PRECISIONS)}")
        if self.target not in set(TargetKind):
            raise BuildError(f"--target {self.target}: choose from {', '.join(TargetKind)}")
        self.forced()
        if self.resident_units is not None and self.resident_units < 0:
            raise BuildError(f"resident units {self.resident_units}: J must be at least 1 (0: the fewest-fit J)")

    def forced(self) -> dict[str, str]:
        """--force as {pattern: kind}; a one-line error for a malformed one."""
        out = {}
        for item in self.force:
            pattern, sep, kind = item.rpartition("=")
            if not sep or not pattern or kind not in ("rtask", "launch", "library"):
                raise BuildError(f"--force {item}: expected PATTERN=KIND with KIND rtask, launch or library")
            out[pattern] = kind
        return out

    @property
    def launch_segments(self) -> bool:
        """Whether nodes may be placed on launch segments (LaunchGroup) by the placement's prices."""
        return self.launches if self.launches is not None else self.target == TargetKind.GPU

    @property
    def searches(self) -> bool:
        """Whether the build searches the vEUs per SM (a GPU build without --veus that compiles its program)."""
        return self.target == TargetKind.GPU and self.veus is None and self.compile_check


def build_model(model_path: str | Path, out_dir: str | Path, options: BuildOptions | None = None,
                quiet: bool = False, **fields: Any) -> Built:
    """Build MODEL into OUT_DIR atomically (a temp folder renamed into place); returns the loaded build. `options`
    (BuildOptions), with any of its fields given by name overriding it (`build_model(m, out, target="cpu")`).
    Reads as load -> passes -> search -> generate -> write."""
    opts = dataclasses.replace(options or BuildOptions(), **fields)
    out = Path(out_dir)
    real_out = check_output_folder(out, model_path, build_inputs(model_path, opts.corpus, opts.user_libs))
    build = Build.load(Path(model_path), opts, Progress(quiet))
    build.progress.step("import, graph passes", build.passes)
    return build.write(build.generate(build.search()), out, real_out)


RECENT_PLANS = 4  # plans a build remembers: ptxas sends a fit back to a count it just planned, not further
CPU_DEFAULT_VEUS = 8  # the emulator runs every vEU thread as a fiber on one core: keep the vDevice small


def build_target(opts: BuildOptions, backends: tuple[BackendName, ...]) -> Target:
    """The build's Target: --veus (default: --veus-per-sm vEUs on every SM of the GPU, else one per SM;
    CPU_DEFAULT_VEUS on the CPU), checked against what the target can hold, and the vEUs per SM (--veus-per-sm, else
    ceil(vEUs / SMs) on a GPU, 1 on the CPU)."""
    kind = TargetKind(opts.target)
    gpu_default = (opts.veus_per_sm or 1) * H100_DEVICE.sms
    veus = opts.veus if opts.veus is not None else (CPU_DEFAULT_VEUS if kind == TargetKind.CPU else gpu_default)
    check_veus(veus, kind)
    per_sm = opts.veus_per_sm or (-(-veus // H100_DEVICE.sms) if kind == TargetKind.GPU else 1)
    return Target(kind, veus, per_sm, H100_DEVICE, opts.precision, backends, opts.resident_units or 0)


@dataclass
class Build:
    """One build in progress: its options, the registry (precision and user libraries applied), the Target, the
    legacy sources, the passes' dumps, and the plans made so far (the same graph, workload and target give the same
    plan: the search asks again when ptxas sends it back to a count it planned)."""

    model: Path
    opts: BuildOptions
    progress: "Progress"
    registry: Any
    target: Target
    paths: dict[str, Path]
    dumps: "Dumps"
    plans: dict[tuple, tuple[Any, Any, Planned]] = field(default_factory=dict)
    converted: dict[tuple[str, frozenset], tuple[str, dict]] = field(default_factory=dict)  # (source, kernels)
    graph: Graph | None = None  # imported and passed once (passes)

    @staticmethod
    def load(model: Path, opts: BuildOptions, progress: "Progress") -> "Build":
        """Check the options, enable the backends, make the Target; prints the profiler line."""
        opts.check()
        backends, registry = enabled_backends(opts.backends, corpus_registry(opts.corpus).restricted(opts.precision),
                                              opts.user_libs)
        target = build_target(opts, backends)
        build = Build(model, opts, progress, registry, target, source_paths(registry), Dumps(opts.dump_after, registry))
        if not progress.quiet:
            print(f"  {build.profiler(target).describe(opts.target)}", file=sys.stderr)
        return build

    def passes(self) -> Graph:
        """ONNX import and the graph passes: once per build, whatever targets the search then tries."""
        from scheduler.pipeline import import_graph
        self.graph = import_graph(self.model, self.registry, self.opts.disable_passes, self.dumps.recorder(None),
                                  dict(self.opts.dims))
        return self.graph

    def profiler(self, target: Target) -> Profiler:
        """The profiler of one vEU count (a measured rTask time depends on the vEUs sharing the device)."""
        return make_profiler(self.opts.profile, self.opts.target, target.veus)

    # ---- the Planner the target search asks -----------------------------------------------------------------
    def specialise(self, target: Target, prof: Profiler | None = None) -> Graph:
        """The passed graph made for `target`: target passes and the IOS merge (priced on `prof`, else a profiler
        of the target's vEUs)."""
        from scheduler.pipeline import specialise
        assert self.graph is not None, "passes() first"
        return specialise(self.graph, target, self.registry, self.opts.disable_passes, self.dumps.recorder(target),
                          self.opts.merge, prof or self.profiler(target), self.opts.policy)

    def workload(self, graph: Graph, target: Target) -> Workload:
        """What the policies schedule: the candidates of the target's backends per node (the support check)."""
        from scheduler.workload import build_workload
        return build_workload(graph, self.registry, target)

    def plan(self, graph: Graph, workload: Workload, target: Target, sized_for: Target,
             prof: Profiler | None = None) -> Planned:
        """The policy's plan on `target` (with `prof`, else a profiler of the target's vEUs) with its ops bound to
        converted rKernels (the launch shapes measured first in measured mode)."""
        key = (id(graph), id(workload), target)
        if key not in self.plans:
            planned = self.plan_now(graph, workload, target, sized_for, prof or self.profiler(target))
            self.plans[key] = (graph, workload, planned)  # the graph and workload kept alive: their ids stay theirs
            while len(self.plans) > RECENT_PLANS:
                del self.plans[next(iter(self.plans))]
        return dataclasses.replace(self.plans[key][2])  # a record of its own: the search sets its occupancy

    def plan_now(self, graph: Graph, workload: Workload, target: Target, sized_for: Target,
                 prof: Profiler, placement: str | None = None) -> Planned:
        """plan() without the memo (`placement`: instead of the options')."""
        from scheduler.pipeline import plan_workload
        if prof.mode == "measured":
            self.measure(workload, prof)
        what = f"{self.opts.policy} plan" + (f" on {target.veus} vEUs" if self.plans else "") + (
            f" ({placement})" if placement else "")
        sch = self.progress.step(what, lambda: plan_workload(graph, workload, self.opts.policy, prof,
                                                             validate=False,
                                                             placement=placement or self.opts.placement,
                                                             costs=backend_costs(prof, target),
                                                             launches=self.opts.launch_segments,
                                                             force=self.opts.forced(),
                                                             fork_launches=self.opts.fork_launches,
                                                             veus=target.veus))
        planned = list(sch.plan.vdevice_ops)
        ops, texts = self.convert(planned + [default_vdevice_op(op) for op in sch.plan.setup])
        return Planned(target, sized_for, sch, ops[:len(planned)], texts, prof, setup=ops[len(planned):])

    def fallback(self, kept: Planned) -> Planned:
        """The plan kept, or a plan of launches where that is predicted faster: every node as its fastest legacy
        kernel in one launch segment (and, with the library enabled, vendor calls where it can), on the graph
        without the weight-stationary pass (the baselines' graph: scheduler.baselines). Never slower than the
        strongest runnable baseline's price for that reason."""
        from scheduler.baselines import BASELINE_DISABLED
        from scheduler.pipeline import specialise
        if not self.opts.launch_segments or self.opts.force or self.opts.placement in ("rtask-only",):
            return kept
        assert self.graph is not None, "passes() first"
        graph = specialise(self.graph, self.target, self.registry, tuple(self.opts.disable_passes) + BASELINE_DISABLED)
        workload = self.workload(graph, self.target)
        placements = ["launch-only"] + (["library-launch"] if BackendName.LIBRARY in self.target.backends else [])
        best = kept
        for placement in placements:
            trial = self.plan_now(graph, workload, self.target, self.target, self.profiler(self.target), placement)
            if trial.predicted_us < best.predicted_us - 1e-6:
                best = trial
        if best is not kept:
            best.sch.plan.notes.append(f"fallback: every node launched (vendor calls where the library runs "
                                       f"faster) on the graph without the weight-stationary pass, predicted "
                                       f"{best.predicted_us:.1f} us, beats the search's plan at "
                                       f"{kept.predicted_us:.1f} us")
        return best

    def measure(self, workload: Workload, prof: Profiler) -> None:
        """Measured mode: time the launch shapes the profile cache lacks on this vEU count."""
        done, cached = self.progress.step(f"measure launch shapes on {prof.veus} vEUs of the {prof.device.name}",
                                          lambda: profile_workload(workload, prof, self.opts.target, self.paths,
                                                                   self.progress.quiet), own_line=True)
        if not self.progress.quiet:
            dev = prof.device
            print(f"  profiler: {done} launch shape(s) measured, {cached} from the cache; barrier-rTask "
                  f"{dev.barrier_us:.3g} us, rProgram launch {dev.launch_us:.3g} us", file=sys.stderr)

    def convert(self, ops: list[Op]) -> tuple[list[Op], dict[str, str]]:
        """Bind the ops to converted rKernels (each source converted once per build for each set of its kernels)."""
        needed = kernels_of(ops)
        todo = {sid: kernels for sid, kernels in needed.items() if (sid, frozenset(kernels)) not in self.converted}
        if todo:
            texts, meta = self.progress.step(f"convert {len(todo)} legacy source(s)",
                                             lambda: convert_sources(self.paths, todo))
            self.converted |= {(sid, frozenset(todo[sid])): (texts[sid], meta[sid]) for sid in todo}
        done = {sid: self.converted[(sid, frozenset(kernels))] for sid, kernels in sorted(needed.items())}
        return resolve_ops(ops, {sid: m for sid, (_, m) in done.items()}), {sid: t for sid, (t, _) in done.items()}

    # ---- the search, generation and the folder ----------------------------------------------------------------
    def search(self) -> SearchResult:
        """The first plan on the build's target, then (a GPU build without --veus) the target search."""
        prof = self.profiler(self.target)  # the merge prices with the first plan's profiler (and its memo)
        graph = self.specialise(self.target, prof)
        first = self.plan(graph, self.workload(graph, self.target), self.target, self.target, prof)
        if not self.opts.searches or not first.ops:
            return SearchResult(self.fallback(self.resident_spread(first)))
        result = TargetSearch(self, self.progress).run(first, slices=self.opts.veus_per_sm is None)
        budget = result.budget
        excluded = budget.trials[budget.chosen].target.excluded if budget is not None and budget.chosen >= 0 else ()
        spread = self.resident_spread(result.planned, tuple(excluded), fitted=True)
        return dataclasses.replace(result, planned=self.fallback(spread))

    def resident_spread(self, first: Planned, excluded: tuple[str, ...] = (), fitted: bool = False) -> Planned:
        """The J choice: when the resident pass packed families, also plan with J (hidden units per resident rTask)
        capped lower (scheduler.passes.resident_unit_caps: more rTasks per step, shorter cell bodies, while every
        family still pins vEUs of its own), and keep the plan predicted fastest among those that pin as many
        families; the fewest-fit J (the first plan) is kept unless another is faster, so never worse by the model.
        Runs on the plan the target search kept (its vEUs per SM, its slices' sizing, the instantiations its register
        budget `excluded`): the caps are bounded by that plan's vEUs, and when the search `fitted` it to ptxas, a
        candidate (a new lstm_cell_resident<J> instantiation) must keep its vEUs per SM without spills to be kept."""
        caps = [] if self.opts.resident_units is not None else resident_unit_caps(first.sch.graph, first.target.veus)
        if not caps:
            return first
        best, tried = first, [spread_clause(first)]
        for cap in caps:
            sized = dataclasses.replace(first.sized_for, resident_units=cap)
            graph = self.specialise(sized, first.profiler)
            workload = self.workload(graph, sized)
            reduced = without_candidates(workload, excluded) if excluded else (workload, {})
            if reduced is None:
                continue
            q = self.plan(graph, reduced[0], dataclasses.replace(first.target, resident_units=cap), sized,
                          first.profiler)
            q.occupancy = first.occupancy
            held = not fitted or self.holds(q)
            tried.append(spread_clause(q) + ("" if held else f", fewer than {q.veus_per_sm}/SM by ptxas: not kept"))
            if held and pinned_families(q) >= pinned_families(first) and q.predicted_us < best.predicted_us - 1e-6:
                best = q
        line = (f"resident J: tried {'; '.join(tried)}; kept J = "
                f"{max((j for _, j in packed_shapes(best.sch.graph)), default=0)}")
        best.sch.plan.notes.append(line)
        if not self.progress.quiet:
            print(f"  {line}", file=sys.stderr)
        return best

    def holds(self, q: Planned) -> bool:
        """Whether ptxas lets q's interpreter keep q's vEUs per SM without spills (vdevice.occupancy)."""
        occ = self.progress.step("vEUs per SM from ptxas", lambda: choose_occupancy(
            q.ops, q.texts, q.sch.plan, q.veus_per_sm, q.veus_per_sm - 1))
        if occ is not None:
            q.occupancy = occ
        return occ is None or occ.veus_per_sm >= q.veus_per_sm

    def generate(self, result: SearchResult) -> "Generated":
        """The kept plan as the folder's contents: programs over the converted rKernels, buffers, the manifest with the
        build's figures, and the generated program."""
        from scheduler.pipeline import op_dependencies
        from vdevice.codegen import generate
        kept = result.planned
        sch, ops, texts = kept.sch, kept.ops, kept.texts
        graph, plan = sch.graph, sch.plan
        programs = rebind_programs(plan.programs, ops)
        everything = ops + kept.setup  # the setup ops last: run once at load (Manifest.setup), in no step
        buffers, views = plan_buffers(graph, plan, everything)
        deps = op_dependencies(plan, sch.workload) if plan.ops else []
        sources = {sid: f"{Path(sid).stem}.rtask.cu" for sid in texts}
        manifest = Manifest(str(self.model), hashlib.sha256(self.model.read_bytes()).hexdigest(), self.opts.target,
                            self.opts.policy, kept.target.veus, tensor_specs(graph, graph.inputs),
                            tensor_specs(graph, graph.outputs), buffers, views, sources, deps, plan.predicted_us,
                            steps=list(plan.steps), calls=list(plan.calls), launches=list(plan.launches),
                            setup=list(range(len(ops), len(everything))))
        from scheduler.pipeline import graph_baselines
        passed = self.graph
        assert passed is not None, "passes() first"
        baselines = self.progress.step("price the baselines", lambda: graph_baselines(passed, self.registry))
        plan.baselines_us = baselines.us
        manifest.stats = _stats(plan, programs, ops) | self.figures(result) | baselines.summary(plan.predicted_us) \
            | {"baseline_variants": baselines.variants}
        source = self.progress.step("generate program", lambda: generate(  # the runtime's op list: setup ops too
            everything, texts, veus_per_sm=kept.veus_per_sm)).source if ops else None
        weights = {b.name: graph.weights[b.name] for b in buffers if b.kind == "weight"}
        return Generated(kept, programs, manifest, weights, source)

    def figures(self, result: SearchResult) -> dict:
        """build.json's stats beyond the plan's counts: profiler, precision, passes, the search's records."""
        kept = result.planned
        graph = kept.sch.graph
        return {"profiler": kept.profiler.describe(self.opts.target), "precision": self.opts.precision,
                "passes": [r.to_json() for r in graph.pass_log], "veus_per_sm": kept.veus_per_sm,
                "occupancy": kept.occupancy.describe() if kept.occupancy else None,
                "register_budget": result.budget.to_json() if result.budget else None,
                "resident_search": result.resident.to_json() if result.resident else None,
                "backends": [str(b) for b in self.target.backends],
                **weight_traffic(kept.sch.plan, graph, self.model),
                "placement": placement_name(self.opts.placement, kept.sch.workload)}

    def write(self, gen: "Generated", out: Path, real_out: Path | None = None) -> Built:
        """Stage the folder beside the user's files in OUT_DIR (`real_out`: where a symlinked -o points), compile-check
        it while the plan is validated and the other files are written, and swap it in with a journal
        (rammer/build_output.py: a crash at any point leaves the old build or the new one)."""
        from scheduler.pipeline import validate_scheduled
        with Replacement(real_out or out) as rep:
            tmp = rep.staging
            built = self.write_sources(gen, tmp)
            check = self.compile_check(built)
            self.progress.step("validate the plan", lambda: validate_scheduled(gen.planned.sch, gen.programs))
            self.write_files(gen, tmp)
            if check is not None:
                self.progress.step(f"compile for {self.opts.target} (started beside the writing)", check.join)
            manifest = gen.manifest
            manifest.stats["build_s"] = round(self.progress.total, 2)
            manifest.stats["step_s"] = {k: round(v, 2) for k, v in self.progress.times.items()}
            (tmp / "report.md").write_text(render_report(manifest, gen.planned.sch.plan, gen.planned.sch.workload))
            manifest.files = sorted([p.relative_to(tmp).as_posix() for p in tmp.rglob("*")
                                     if p.is_file() and p.name != STAGING_MARK] + [MANIFEST])
            (tmp / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1))
            commit_build(rep, manifest.files)
        built.folder = out
        return built

    def write_sources(self, gen: "Generated", tmp: Path) -> Built:
        """The converted rKernels (with the headers they include) and the generated program: what compiles."""
        texts = gen.planned.texts
        (tmp / "rkernels").mkdir()
        for sid, text in texts.items():
            (tmp / "rkernels" / gen.manifest.sources[sid]).write_text(text)
        copy_headers(texts, self.paths, tmp / "rkernels")
        if gen.source is not None:
            (tmp / "program.cu").write_text(gen.source)
        everything = gen.planned.ops + gen.planned.setup  # the programs run over the op list the vDevice loads
        return Built(tmp, gen.manifest, everything, rebind_programs(gen.programs, everything), texts, gen.weights)

    def compile_check(self, built: Built) -> "Background | None":
        """Compile the build for its target: without a GPU nvcc checks the program, in a thread beside the Python
        work that follows (a compiler subprocess needs no GIL); with one the module is built here (CUDA state stays
        on the main thread), as the CPU emulator's is. None when there is nothing to wait for."""
        from vdevice.gpu import gpu_available
        if not self.opts.compile_check or not built.ops:
            return None
        if self.opts.target == TargetKind.GPU and not gpu_available()[0]:
            return Background(functools.partial(built.compile, self.opts.target))
        self.progress.step(f"compile for {self.opts.target}", lambda: built.compile(self.opts.target))
        return None

    def write_files(self, gen: "Generated", tmp: Path) -> None:
        """Every file but the sources, the report and the manifest: programs, plan, weights, model, timeline,
        dumps."""
        kept = gen.planned
        plan, profiler = kept.sch.plan, kept.profiler
        (tmp / "programs.json").write_text(plan_to_json(gen.programs, kept.ops + kept.setup))
        plan.save(tmp / "plan.json")
        arrays = {npz_key(k): np.asarray(v, order="C") for k, v in gen.weights.items()}
        np.savez(tmp / "weights.npz", **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as allow_pickle
        # with its external data and its --dim sizes, for `rammer run --check`
        save_standalone(self.model, tmp / "model.onnx", dims=dict(self.opts.dims))
        step_costs = profiler.step_costs(lambda op: 0.0)  # the simulation's terms; durations are the plan's
        slices = schedule_slices(plan, gen.programs, step_costs)
        (tmp / "timeline.svg").write_text(timeline_svg(plan, gen.programs, step_costs, self.opts.target, slices))
        (tmp / "timeline.json").write_text(timeline_trace({schedule_source(self.opts.target): slices},
                                                          {"model": str(self.model), "policy": self.opts.policy,
                                                           "profiler": profiler.describe(self.opts.target)}))
        for name, model in self.dumps.kept(kept.sized_for).items():
            onnx.save(model, str(tmp / f"after-{name}.onnx"))


class Background:
    """A step run in a thread beside the build's Python work; its error is raised where it is joined."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.run, args=(fn,), daemon=True)
        self.thread.start()

    def run(self, fn: Callable[[], Any]) -> None:
        """The thread's body: the step, its error kept for join."""
        try:
            fn()
        except BaseException as exc:  # raised again in the joining thread
            self.error = exc

    def join(self) -> None:
        """Wait for the step; raise its error."""
        self.thread.join()
        if self.error is not None:
            raise self.error


@dataclass
class Generated:
    """A build's contents before they are written: the kept plan, its programs over the converted rKernels, the
    manifest and weights, and the generated program's source (None: nothing runs as rTasks)."""

    planned: Planned
    programs: list[Program]
    manifest: Manifest
    weights: dict[str, np.ndarray]
    source: str | None


class Dumps:
    """--dump-after: the graph after each named pass as ONNX; the graph passes' once, the target passes' per target
    tried (the kept target's are written)."""

    def __init__(self, names: tuple[str, ...], registry: Any) -> None:
        self.names, self.registry = set(names), registry
        self.graphs: dict[Target | None, dict[str, Any]] = {}

    def recorder(self, target: Target | None) -> Callable[[str, Graph], None] | None:
        """The `after(name, graph)` hook of the passes run for `target` (None: the graph passes)."""
        return functools.partial(self.record, target) if self.names else None

    def record(self, target: Target | None, name: str, g: Graph) -> None:
        """Keep the graph after pass `name` when it is to be dumped."""
        if name in self.names:
            self.graphs.setdefault(target, {})[name] = graph_to_onnx(g, self.registry, name=f"after {name}")

    def kept(self, target: Target) -> dict[str, Any]:
        """The dumps of a build whose plan was made for `target`."""
        return self.graphs.get(None, {}) | self.graphs.get(target, {})


def pinned_families(p: Planned) -> int:
    """Families whose rTasks run pinned in the plan (the rest stream their weights)."""
    return len({op.launch.resident.family for op in p.sch.plan.ops if op.pinned})


def spread_clause(p: Planned) -> str:
    """One clause of the J choice's line: J per family, rTasks per step over all families, the prediction."""
    shapes = packed_shapes(p.sch.graph)
    js = sorted({j for _, j in shapes}, reverse=True)
    return (f"J {'/'.join(map(str, js))}: {spread_blocks(shapes, max(js, default=1))} rTasks per step over "
            f"{len(shapes)} families, {pinned_families(p)} pinned, predicted {p.predicted_us:.1f} us")


def kernels_of(ops: list[Op]) -> dict[str, set[str]]:
    """The legacy kernels the ops launch, by source."""
    needed: dict[str, set[str]] = {}
    for op in ops:
        needed.setdefault(op.kernel.source_id, set()).add(op.kernel.wrapper_name)
    return needed


def weight_traffic(plan: Any, graph: Any, model_path: str | Path) -> dict:
    """The weight bytes the plan reads per inference (scheduler.report.weight_bytes_read), the model's own weight
    bytes (its ONNX initializers, counted from the file, not from our graph) and how many resident families run
    pinned: the figures issue 15 compares (weight-stationary layers read their weights once)."""
    from scheduler.onnx_files import initializer_bytes, load_structure
    from scheduler.report import weight_bytes_read
    own = initializer_bytes(load_structure(model_path))  # from types and dims: external data is not read
    families = {op.launch.resident.family for op in plan.ops if op.pinned}
    return {"weight_bytes_read": weight_bytes_read(plan, graph), "model_weight_bytes": int(own),
            "resident_families": len(families)}




def enabled_backends(backends: tuple[str, ...] | list[str] | None, registry: Any,
                     user_libs: tuple[str, ...] | list[str]) -> tuple[tuple[BackendName, ...], Any]:
    """The backends a build may use (checked; default: scheduler.backends.default_backends) and the registry with
    the libraries they take (user kernel libraries) added."""
    from scheduler.backends import add_libraries, check_backends, default_backends
    names = check_backends(tuple(backends) if backends is not None else default_backends(bool(user_libs)),
                           bool(user_libs))
    return names, add_libraries(registry, names, list(user_libs))


def backend_costs(profiler: Profiler, target: Target) -> Any:
    """Call-step prices: measured ones from the profile cache of this device when the profiler measures and some
    enabled backend makes calls, the cost model otherwise."""
    from scheduler.backends import BACKENDS
    from scheduler.backends.costs import BackendCache, BackendCosts
    if profiler.mode != "measured" or not any(BACKENDS[n].is_call for n in target.backends):
        return BackendCosts(profiler.device)
    return BackendCosts(profiler.device, BackendCache(profiler.device.name))


def placement_name(placement: str | None, workload: Any) -> str:
    """What placement the build used: the given one, else search when some node had a choice, else none."""
    from scheduler.pipeline import needs_placement
    return placement or ("search" if needs_placement(workload) else "none (one backend per node)")


def copy_headers(texts: Mapping[str, str], paths: Mapping[str, Path], dest: Path) -> None:
    """Headers beside the user libraries' sources go into rkernels/ (the converted sources include them), so the
    build folder compiles on its own."""
    from kernel_corpus.bindings import LEGACY_DIR
    for sid in texts:
        folder = paths[sid].parent
        if folder.resolve() == LEGACY_DIR.resolve():
            continue
        for header in sorted(folder.glob("*.cuh")) + sorted(folder.glob("*.h")):
            shutil.copyfile(header, dest / header.name)


def _stats(plan: Any, programs: list[Program], ops: list[Op]) -> dict:
    """Counts for the report and the bench: operators, launches, rTasks, programs, barriers."""
    from vdevice.program import Wait
    barriers = sum(isinstance(i, Wait) for p in programs for v in p.veus for i in v)
    outside = set(plan.outside)
    busy = sum(op.rtasks * op.rtask_us for i, op in enumerate(plan.ops) if i not in outside)
    capacity = plan.veus * sum(plan.program_us)
    return {"operators": len({op.node for op in plan.ops} | {c.node for c in plan.calls}), "launches": len(ops),
            "library_calls": len(plan.calls), "launch_segments": len(plan.launches),
            "launched_ops": len(outside),
            "rtasks": sum(op.kernel.rtasks for op in ops), "programs": len(programs), "barrier_rtasks": barriers,
            "predicted_us": round(plan.predicted_us, 3),
            "predicted_busy_pct": round(100 * busy / capacity, 1) if capacity else 0.0,
            "predicted_baselines_us": {k: round(v, 3) for k, v in plan.baselines_us.items()}, "notes": plan.notes}


GPU_MAX_BLOCKS_PER_SM = 32     # resident blocks per SM on sm_80/sm_90 (CUDA C++ Programming Guide, table 21)
CPU_VEU_THREADS_BOUND = 256    # threads per vEU assumed before planning (the planner's default vEU size)


def check_veus(num_veus: int, target: str) -> None:
    """Refuse up front a vEU count the target cannot hold: co-residency on the GPU, fiber stacks on the CPU."""
    from scheduler.profiler import H100
    if num_veus < 1:
        raise BuildError(f"--veus must be >= 1, got {num_veus}")
    if target == "gpu":
        limit = H100.sms * GPU_MAX_BLOCKS_PER_SM
        if num_veus > limit:
            raise BuildError(f"--veus {num_veus}: at most {limit} vEUs can be co-resident on the target "
                             f"({H100.sms} SMs x {GPU_MAX_BLOCKS_PER_SM} blocks)")
        return
    from cuda_emu.module import DEFAULT_STACK_SIZE, available_memory
    per_veu = CPU_VEU_THREADS_BOUND * DEFAULT_STACK_SIZE
    limit = max(1, available_memory() // (2 * per_veu))
    if num_veus > limit:
        raise BuildError(f"--veus {num_veus}: the CPU emulator keeps every vEU thread alive as a fiber "
                         f"({per_veu // 2**20} MiB of stacks per {CPU_VEU_THREADS_BOUND}-thread vEU); this machine "
                         f"holds at most {limit}")


def build_inputs(model_path: str | Path, corpus: str | Path | None, user_libs: Any) -> Inputs:
    """Everything a build reads, which its output folder must not be at or above: the model (and its external
    data, beside it), the corpus and the user libraries."""
    if os.path.lexists(model_path) and regular_file_error(model_path, "ONNX model"):
        from scheduler.onnx_import import ModelError
        raise ModelError(str(regular_file_error(model_path, "ONNX model")))  # a FIFO would block the read
    guard = Inputs().file(model_path, "the model being built")
    for f in external_data_files(model_path):
        guard.file(f, "external data of the model")
    guard.folder(corpus, "the kernel corpus")
    for lib in user_libs or ():
        guard.folder(lib, "a user kernel library")
    return guard


def external_data_files(model_path: str | Path) -> list[Path]:
    """The files an ONNX model's external-data tensors name (beside the model), read without loading the data."""
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception:  # noqa: BLE001 - an unreadable model is reported by the import, with its own message
        return []
    from onnx.external_data_helper import _get_all_tensors, uses_external_data
    out = []
    for t in _get_all_tensors(model):
        if uses_external_data(t):
            loc = next((e.value for e in t.external_data if e.key == "location"), None)
            if loc:
                out.append(Path(model_path).parent / loc)
    return sorted(set(out))
