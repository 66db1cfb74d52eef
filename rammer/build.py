"""`rammer build`: an ONNX model becomes a folder holding the plan, the converted rKernels, the generated
persistent program, the weights, a timeline and a report (rammer.runtime reads it back and runs it).

Data path: onnx -> scheduler.pipeline (import, passes, policy, validation) -> converter (the legacy sources the
plan uses) -> vdevice.codegen (one interpreter module) -> rammer.runtime (CPU emulator or GPU executors).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import onnx

from converter import RKernelMeta
from kernel_corpus.bindings import DEFAULT_PRECISION, PRECISIONS, Temp
from scheduler.graph import Graph
from scheduler.passes import VEU_HEADER_BYTES as HEADER_BYTES
from scheduler.plan import temp_buffer
from vdevice.program import Op, Program, plan_to_json

from toolchain.files import Inputs, regular_file_error
from toolchain.outdir import STAGING_MARK, Replacement

from .build_output import check_output_folder, commit_build, foreign_files  # noqa: F401  (re-exported)
from .runtime import MANIFEST, BufferSpec, BuildError, Built, Manifest, TensorSpec, npz_key, rebind_programs

CPU_DEFAULT_VEUS = 8  # the emulator runs every vEU thread as a fiber on one core: keep the vDevice small


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

    from scheduler.measure import device_spec
    from scheduler.profiler import H100, Profiler
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
    from scheduler.measure import measure_workload
    return measure_workload(workload, profiler, target, quiet=quiet, convert=lambda ops: convert_ops(ops, paths))


def build_model(model_path: str | Path, out_dir: str | Path, corpus: str | Path | None = None,
                policy: str = "wavefront", target: str = "gpu", veus: int | None = None,
                quiet: bool = False, compile_check: bool = True, profile: str = "auto",
                disable_passes: tuple[str, ...] | list[str] = (), dump_after: tuple[str, ...] | list[str] = (),
                backends: tuple[str, ...] | list[str] | None = None, placement: str | None = None,
                user_libs: tuple[str, ...] | list[str] = (), merge: str = "off",
                precision: str = DEFAULT_PRECISION, veus_per_sm: int | None = None) -> "Built":
    """Build MODEL into OUT_DIR atomically (a temp folder renamed into place); returns the loaded build.
    `disable_passes` leaves graph passes out; `dump_after` writes the graph after each named pass as
    `after-NAME.onnx` into the build folder. `backends` (default: rtask, plus user when `user_libs` name kernel
    library folders; "library" adds vendor calls) and `placement` (dp, search, rtask-only; default search when
    some node has a choice) say where each node may run, see scheduler.placement. `merge` is the IOS sibling merge
    (off, auto: where it wins by the profiler, always; scheduler.merge). `precision` (PRECISIONS) is the least
    accurate arithmetic the kernels may use. `veus_per_sm` sizes resident slices for that many vEUs sharing an SM
    (default: searched by a GPU build without `veus`, else ceil(vEUs / SMs) on a GPU and 1 on the CPU)."""
    from scheduler.export import graph_to_onnx
    from scheduler.onnx_files import save_standalone
    from scheduler.passes import check_pass_names
    from scheduler.pipeline import load_workload, op_dependencies, plan_workload
    from scheduler.profiler import H100
    from scheduler.report import render_report, schedule_slices, schedule_source, timeline_svg, timeline_trace

    out = Path(out_dir)
    real_out = check_output_folder(out, model_path, build_inputs(model_path, corpus, user_libs))
    check_pass_names(list(disable_passes) + list(dump_after))
    off = [n for n in dump_after if n in disable_passes]
    if off:
        raise BuildError(f"--dump-after {off[0]}: that pass is disabled, there is nothing to dump")
    prog = Progress(quiet)
    if precision not in PRECISIONS:
        raise BuildError(f"--precision {precision}: choose from {', '.join(PRECISIONS)}")
    registry = corpus_registry(corpus).restricted(precision)
    backends, registry = enabled_backends(backends, target, registry, user_libs)
    num_veus = veus if veus is not None else (CPU_DEFAULT_VEUS if target == "cpu" else H100.sms)
    check_veus(num_veus, target)
    profiler = make_profiler(profile, target, num_veus)
    if not quiet:
        print(f"  {profiler.describe(target)}", file=sys.stderr)
    dumps: dict[int, dict[str, Any]] = {}  # per vEUs per SM the slices were sized for: pass name -> graph

    def load_at(k: int, prof: Any, what: str) -> tuple[Graph, Any]:
        """Import and run the passes with resident slices sized for k vEUs per SM."""
        def dump(name: str, g: Any) -> None:
            if name in dump_after:
                dumps.setdefault(k, {})[name] = graph_to_onnx(g, registry, name=f"after {name}")
        return prog.step(what, lambda: load_workload(model_path, registry, tuple(disable_passes), dump, backends,
                                                     target, merge, prof, policy, prof.num_veus, k))

    size_k = veus_per_sm or (-(-num_veus // H100.sms) if target == "gpu" and veus is not None else 1)
    graph, workload = load_at(size_k, profiler, "load, import, passes")
    paths = source_paths(registry)
    if profiler.mode == "measured":
        done, cached = prog.step(f"measure launch shapes on the {profiler.device.name}",
                                 lambda: profile_workload(workload, profiler, target, paths, quiet), own_line=True)
        if not quiet:
            dev = profiler.device
            print(f"  profiler: {done} launch shape(s) measured, {cached} from the cache; barrier-rTask "
                  f"{dev.barrier_us:.3g} us, rProgram launch {dev.launch_us:.3g} us", file=sys.stderr)
    costs = backend_costs(profiler, target, backends)
    sch = prog.step(f"{policy} plan", lambda: plan_workload(graph, workload, policy, profiler, placement=placement,
                                                            costs=costs, num_veus=num_veus))
    plan = sch.plan
    ops0 = plan.programs[0].ops if plan.programs else []
    ops, texts = prog.step(f"convert {len({op.kernel.source_id for op in ops0})} legacy source(s)",
                           lambda: convert_ops(list(ops0), paths))
    def plan_at(k: int, wl: Any, g: Graph) -> Planned:
        """The plan on k vEUs per SM (the profiler re-measures per vEU count in measured mode)."""
        prof = make_profiler(profile, target, k * H100.sms)
        if prof.mode == "measured":  # rTask times depend on the vEUs sharing an SM: measured per vEU count
            prog.step(f"measure launch shapes on {prof.num_veus} vEUs",
                      lambda: profile_workload(wl, prof, target, paths, quiet), own_line=True)
        s2 = prog.step(f"{policy} plan on {prof.num_veus} vEUs",
                       lambda: plan_workload(g, wl, policy, prof, num_veus=prof.num_veus))
        o2, t2 = convert_ops(list(s2.plan.programs[0].ops if s2.plan.programs else []), paths)
        return Planned(s2, o2, t2, prof, k)

    def reload_at(k: int) -> tuple[Graph, Any]:
        return load_at(k, make_profiler(profile, target, k * H100.sms), f"load with resident slices for {k}/SM")

    planned = Planned(sch, ops, texts, profiler, 1)
    budget = resident = None
    if target == "gpu" and veus is None and ops and compile_check:  # re-plan until the plan's vEUs fit
        planned = fit_occupancy(planned, lambda k: plan_at(k, workload, graph), prog, MOST_VEUS_PER_SM)
        budget, planned = register_budget_plan(planned, workload, lambda k, wl: plan_at(k, wl, graph), prog)
        if veus_per_sm is None:
            resident, budget, planned = resident_search(planned, budget, reload_at, plan_at, prog)
    sch, ops, texts, profiler, occupancy = (planned.sch, planned.ops, planned.texts, planned.profiler,
                                            planned.occupancy)
    per_sm, graph, plan = planned.veus_per_sm, sch.graph, sch.plan
    num_veus = profiler.num_veus
    programs = rebind_programs(plan.programs, ops)
    buffers, views = plan_buffers(graph, plan, ops)
    deps = op_dependencies(plan, sch.workload) if plan.ops else []
    sources = {sid: f"{Path(sid).stem}.rtask.cu" for sid in texts}
    manifest = Manifest(str(model_path), hashlib.sha256(Path(model_path).read_bytes()).hexdigest(), target, policy,
                        num_veus, tensor_specs(graph, graph.inputs), tensor_specs(graph, graph.outputs), buffers,
                        views, sources, deps, plan.predicted_us, steps=list(plan.steps), calls=list(plan.calls))
    with Replacement(real_out) as rep:  # staged beside the user's files, swapped in with a journal
        tmp = rep.staging
        (tmp / "rkernels").mkdir()
        for sid, text in texts.items():
            (tmp / "rkernels" / sources[sid]).write_text(text)
        copy_headers(texts, paths, tmp / "rkernels")
        if ops:
            from vdevice.codegen import generate
            gen = prog.step("generate program", lambda: generate(ops, texts, veus_per_sm=per_sm))
            (tmp / "program.cu").write_text(gen.source)
        (tmp / "programs.json").write_text(plan_to_json(programs) if programs else '{"ops": [], "programs": []}')
        plan.save(tmp / "plan.json")
        weights = {b.name: graph.weights[b.name] for b in buffers if b.kind == "weight"}
        np.savez(tmp / "weights.npz", **{npz_key(k): np.ascontiguousarray(v) for k, v in weights.items()})
        save_standalone(model_path, tmp / "model.onnx")  # with its external data, for `rammer run --check`
        (tmp / "timeline.svg").write_text(timeline_svg(plan, programs, profiler.barrier_cost_us, target))
        slices = schedule_slices(plan, programs, profiler.barrier_cost_us)
        (tmp / "timeline.json").write_text(timeline_trace({schedule_source(target): slices},
                                                          {"model": str(model_path), "policy": policy,
                                                           "profiler": profiler.describe(target)}))
        for name, model in dumps.get(graph.veus_per_sm, {}).items():
            onnx.save(model, str(tmp / f"after-{name}.onnx"))
        manifest.stats = _stats(plan, programs, ops) | {"profiler": profiler.describe(target), "precision": precision,
                                                        "passes": [r.to_json() for r in graph.pass_log],
                                                        "veus_per_sm": per_sm,
                                                        "occupancy": occupancy.describe() if occupancy else None,
                                                        "register_budget": budget.to_json() if budget else None,
                                                        "resident_search": resident.to_json() if resident else None,
                                                        "backends": list(backends),
                                                        **weight_traffic(plan, graph, model_path),
                                                        "placement": placement_name(placement, sch.workload)}
        built = Built(tmp, manifest, ops, programs, texts, weights)
        if compile_check and ops:
            prog.step(f"compile for {target}", lambda: built.compile(target))
        manifest.stats["build_s"] = round(prog.total, 2)
        manifest.stats["step_s"] = {k: round(v, 2) for k, v in prog.times.items()}
        (tmp / "report.md").write_text(render_report(manifest, plan, sch.workload))
        manifest.files = sorted([p.relative_to(tmp).as_posix() for p in tmp.rglob("*")
                                 if p.is_file() and p.name != STAGING_MARK] + [MANIFEST])
        (tmp / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1))
        commit_build(rep, manifest.files)
    built.folder = out
    return built


MOST_VEUS_PER_SM = 4  # the occupancy search's ceiling (the CPU tests cover 1..4)
BUDGET_ROUNDS = 4  # re-plans per vEU count the register budget may take, each leaving out one more instantiation


@dataclass
class Planned:
    """A plan on some vEUs per SM with its converted ops, and the occupancy ptxas gave it (None: not checked)."""

    sch: Any  # scheduler.pipeline.Scheduled
    ops: list[Op]
    texts: dict[str, str]
    profiler: Any
    veus_per_sm: int
    occupancy: Any = None


def fit_occupancy(p: Planned, plan_at: Callable[[int], Planned], prog: Any, most: int) -> Planned:
    """Re-plan on the vEUs per SM ptxas allows the plan's interpreter until the count holds (vdevice.occupancy)."""
    while p.ops:
        occ = prog.step("vEUs per SM from ptxas", lambda: choose_occupancy(p.ops, p.texts, p.sch.plan, most))
        if occ is None or occ.veus_per_sm == p.veus_per_sm:
            p.occupancy = occ
            return p
        most = occ.veus_per_sm
        p = plan_at(most)
        p.occupancy = occ
    return p


def register_budget_plan(p: Planned, workload: Any, plan_at: Callable[[int, Any], Planned],
                         prog: Any) -> tuple[Any, Planned]:
    """When register-hungry instantiations keep the vEUs per SM below MOST_VEUS_PER_SM, also plan at each higher
    count (fewest first, while the prediction improves) without the candidates of the hungriest instantiations over
    its budget, one more per re-plan until ptxas allows the count, and keep the plan BudgetChoice.decide prefers
    (policy: rammer.budget; ptxas' registers per instantiation, cached). Returns (the BudgetChoice or None, the
    plan kept)."""
    from .budget import (BudgetChoice, BudgetTarget, BudgetTrial, budget_targets, over_budget, search_trials,
                         without_candidates)
    if p.occupancy is None or p.veus_per_sm >= MOST_VEUS_PER_SM:
        return None, p
    threads, smem = veu_footprint(p.sch.plan, p.ops, p.texts)
    registers = prog.step("registers per rKernel instantiation", lambda: instantiation_registers(p.ops, p.texts))
    targets = budget_targets(registers, threads, smem, p.veus_per_sm, MOST_VEUS_PER_SM)
    if not targets:
        return None, p
    choice = BudgetChoice(p.veus_per_sm, p.sch.plan.predicted_us)

    def attempt(target: BudgetTarget) -> tuple[BudgetTrial, Planned]:
        trial, q = BudgetTrial(target), p
        for _ in range(BUDGET_ROUNDS):  # until ptxas allows k: leave out the next hungriest over the budget
            reduced = without_candidates(workload, trial.target.excluded)
            if reduced is None:
                break
            wl, trial.dropped = reduced
            k = target.veus_per_sm
            q = fit_occupancy(plan_at(k, wl), lambda k2: plan_at(k2, wl), prog, k)
            trial.veus_per_sm, trial.predicted_us = q.veus_per_sm, q.sch.plan.predicted_us
            more = [e for e in over_budget(instantiation_registers(q.ops, q.texts), target.registers)
                    if e not in trial.target.excluded]
            if q.veus_per_sm >= k or not more:
                break
            trial.target = dataclasses.replace(trial.target, excluded=(*trial.target.excluded, more[0]))
        return trial, q
    # more vEUs per SM stop paying once a count is no faster: the higher counts leave out more
    plans = search_trials(targets, attempt, choice.trials, choice.predicted_all_us)
    kept = choice.decide()
    if not prog.quiet:
        print(f"  {choice.describe()}", file=sys.stderr)
    return choice, (plans[kept] if kept >= 0 else p)


def resident_search(p: Planned, budget: Any, load_at: Callable[[int], tuple[Graph, Any]],
                    plan_at: Callable[[int, Any, Graph], Planned], prog: Any) -> tuple[Any, Any, Planned]:
    """When the resident_weights pass packed some family and the plan stays below MOST_VEUS_PER_SM, also plan with
    the slices sized for each higher count k (the workload re-loaded for k: smaller slices on more vEUs; families
    beyond the vEUs stream), fit each to ptxas and (when it packs as many families as the first pins) the register
    budget as the first plan was, and keep the plan ResidentChoice.decide prefers (policy: rammer.budget). Returns
    (the ResidentChoice or None, the kept plan's BudgetChoice or None, the kept plan); `p` and `budget` are the plan
    with slices sized as loaded."""
    from .budget import ResidentChoice, search_trials
    if p.occupancy is None or p.veus_per_sm >= MOST_VEUS_PER_SM or not packed_families(p.sch.graph):
        return None, budget, p
    choice = ResidentChoice([resident_trial(p.sch.graph.veus_per_sm, p, budget)])
    budgets = [budget]

    def attempt(k: int) -> tuple[Any, Planned]:
        g, wl = load_at(k)
        q = fit_occupancy(plan_at(k, wl, g), lambda k2: plan_at(k2, wl, g), prog, k)
        b = None
        if packed_families(g) >= choice.trials[0].pinned:  # else it cannot be kept: its budget re-plans are moot
            b, q = register_budget_plan(q, wl, lambda k2, w: plan_at(k2, w, g), prog)
        budgets.append(b)
        return resident_trial(k, q, b), q
    # every count is planned: what each gives is the evidence for the choice
    plans = [p] + search_trials(range(p.sch.graph.veus_per_sm + 1, MOST_VEUS_PER_SM + 1), attempt, choice.trials,
                                p.sch.plan.predicted_us, stop_when_slower=False)
    kept = choice.decide()
    if not prog.quiet:
        print(f"  {choice.describe()}", file=sys.stderr)
    return choice, budgets[kept], plans[kept]


def packed_families(g: Graph) -> int:
    """How many families the resident_weights pass packed in this graph."""
    return sum(r.changes for r in g.pass_log if r.name == "resident_weights")


def resident_trial(k: int, q: Planned, budget: Any) -> Any:
    """The record of a plan whose slices were sized for k vEUs per SM (rammer.budget.ResidentTrial)."""
    from .budget import ResidentTrial
    threads, smem = veu_footprint(q.sch.plan, q.ops, q.texts)
    pinned = [op.launch.resident for op in q.sch.plan.ops if op.pinned]
    usage = q.occupancy.usage if q.occupancy else None
    kept = budget.trials[budget.chosen] if budget is not None and budget.chosen >= 0 else None
    return ResidentTrial(k, packed_families(q.sch.graph), len({r.family for r in pinned}),
                         max((r.slice_bytes for r in pinned), default=0),
                         smem + (usage.static_smem if usage else 0), usage.registers if usage else 0,
                         usage.spill_bytes if usage else 0, q.veus_per_sm, q.sch.plan.predicted_us,
                         list(kept.target.excluded) if kept else [])


def instantiation_registers(ops: list[Op], texts: Mapping[str, str]) -> dict[str, int]:
    """Per kernel expression of the ops, ptxas' registers in an interpreter of its own, unbounded
    (vdevice.occupancy.instantiation_usage, cached)."""
    from vdevice.occupancy import instantiation_usage
    return {e: u.registers for e, u in instantiation_usage(ops, texts).items()}


def veu_footprint(plan: Any, ops: list[Op], texts: Mapping[str, str]) -> tuple[int, int]:
    """A vEU's threads and dynamic shared memory for the plan: as the executor will launch it (veu_shared_bytes)
    when nvcc is there, else the plan's estimate (the launches' dynamic bytes and resident slices, plus the
    header)."""
    from toolchain.nvcc import find_nvcc
    threads = max(n.threads for n in plan.veu_needs)
    if find_nvcc() is None or not ops:
        return threads, max(n.smem_bytes for n in plan.veu_needs) + HEADER_BYTES
    return threads, veu_shared_bytes(rebind_programs(plan.programs, ops), ops, texts)


def veu_shared_bytes(programs: list[Program], ops: list[Op], texts: Mapping[str, str]) -> int:
    """The dynamic shared memory the executor launches the programs' vEUs with: each rTask's dynamic bytes and
    converted layout (sized by the device compiler: vdevice.occupancy.device_layout_sizes; ptxas does not see it),
    the header and the resident region (vdevice.codegen.veu_smem_bytes), the most of any program (nvcc needed)."""
    from vdevice.codegen import generate, program_regions, veu_smem_bytes
    from vdevice.occupancy import device_layout_sizes
    from vdevice.program import resident_bytes
    gen, sizes = generate(ops, texts), device_layout_sizes(ops, texts)
    return max(veu_smem_bytes(program_regions(p, gen), sizes, resident_bytes(p))[0] for p in programs)


def choose_occupancy(ops: list[Op], texts: Mapping[str, str], plan: Any, most: int) -> Any:
    """The most vEUs per SM the plan's interpreter keeps co-resident without spills, by ptxas' figures
    (vdevice.occupancy); None without nvcc (the build then keeps one vEU per SM)."""
    from toolchain.nvcc import find_nvcc
    from vdevice.codegen import generate
    from vdevice.occupancy import choose_veus_per_sm, interpreter_usage
    if find_nvcc() is None:
        return None
    threads, smem = veu_footprint(plan, ops, texts)

    def usage(k: int) -> Any:
        gen = generate(ops, texts, veus_per_sm=k)
        return interpreter_usage(gen.source, gen.include_dirs)
    return choose_veus_per_sm(usage, threads, smem, most=most)


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




def enabled_backends(backends: Any, target: str, registry: Any, user_libs: Any) -> tuple[tuple[str, ...], Any]:
    """The backends a build may use (checked; default rtask, plus user when libraries are given) and the registry
    with the user libraries' bindings added."""
    from scheduler.backends import check_backends
    from scheduler.backends.user import with_user_libraries
    if backends is None:
        backends = ("rtask", "user") if user_libs else ("rtask",)
    names = check_backends(tuple(backends), target)
    if "user" in names and not user_libs:
        raise BuildError("--backends user needs a kernel library: --user-lib FOLDER (a bindings.yaml beside .cu "
                         "files)")
    if user_libs and "user" not in names:
        raise BuildError("--user-lib given but the user backend is not enabled (add it to --backends)")
    return names, with_user_libraries(registry, list(user_libs))


def backend_costs(profiler: Any, target: str, backends: tuple[str, ...]) -> Any:
    """Library call prices: measured ones from the profile cache of this device when the profiler measures, the
    cost model otherwise."""
    from scheduler.backends.costs import BackendCache, BackendCosts
    if "library" not in backends or profiler.mode != "measured":
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
    busy = sum(op.rtasks * op.rtask_us for op in plan.ops)
    capacity = plan.num_veus * plan.predicted_us
    return {"operators": len({op.node for op in plan.ops} | {c.node for c in plan.calls}), "launches": len(ops),
            "library_calls": len(plan.calls),
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
        raise BuildError(f"error: --veus must be >= 1, got {num_veus}")
    if target == "gpu":
        limit = H100.sms * GPU_MAX_BLOCKS_PER_SM
        if num_veus > limit:
            raise BuildError(f"error: --veus {num_veus}: at most {limit} vEUs can be co-resident on the target "
                             f"({H100.sms} SMs x {GPU_MAX_BLOCKS_PER_SM} blocks)")
        return
    from cuda_emu.module import DEFAULT_STACK_SIZE, available_memory
    per_veu = CPU_VEU_THREADS_BOUND * DEFAULT_STACK_SIZE
    limit = max(1, available_memory() // (2 * per_veu))
    if num_veus > limit:
        raise BuildError(f"error: --veus {num_veus}: the CPU emulator keeps every vEU thread alive as a fiber "
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
