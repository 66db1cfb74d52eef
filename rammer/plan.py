"""`rammer plan MODEL.onnx`: plan a model with one policy, print a summary, write plan.json (no conversion, no
code generation)."""
from __future__ import annotations

import json
import sys

from kernel_corpus.bindings import registry as default_registry
from scheduler.baselines import Baselines
from scheduler.pipeline import model_baselines
from scheduler.graph import SchedulerError
from scheduler.onnx_import import ModelError
from scheduler.pipeline import default_target, load_workload, plan_workload
from scheduler.profiler import H100
from toolchain.exits import Exit

from toolchain.files import OutputError, write_atomic

from .build import build_inputs, make_profiler, profile_workload, source_paths


def plan_command(model: str, policy: str = "wavefront", veus: int | None = None, profile: str = "auto",
                 out: str | None = None, as_json: bool = False, dims: dict[str, int] | None = None) -> int:
    """Plan, report, save; a scheduler error is one line on stderr and exit status 1 (2 for a model that cannot be
    read, 3 for --profile measured without a GPU). With `as_json` the summary is one JSON object on stdout."""
    say = (lambda *a: None) if as_json else print
    if profile == "measured":
        from vdevice.gpu import gpu_available
        gpu, why = gpu_available()
        if not gpu:
            print(f"error: --profile measured times rTasks on a GPU and none is visible ({why.splitlines()[0]}); "
                  f"use --profile model", file=sys.stderr)
            return Exit.MISSING
    target = None
    if out:
        try:  # refused before the work: over, into or above the model (or its external data)
            target = build_inputs(model, None, ()).check_file(out, "-o")
        except (OutputError, SchedulerError) as exc:
            print(str(exc), file=sys.stderr)
            return Exit.USAGE
    try:
        profiler = make_profiler(profile, "gpu", veus or H100.sms)
        say(profiler.describe())
        graph, workload = load_workload(model, target=default_target(veus), dims=dims)
        if profiler.mode == "measured":
            done, cached = profile_workload(workload, profiler, "gpu", source_paths(default_registry))
            say(f"profiler: {done} launch shape(s) measured, {cached} from the cache")
        sch = plan_workload(graph, workload, policy, profiler, veus=veus)
        baselines = model_baselines(model, dims=dims)
        sch.plan.baselines_us = baselines.us
    except SchedulerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Exit.USAGE if isinstance(exc, ModelError) else Exit.FAILED
    plan = sch.plan
    tasks = sum(p.steps(v) for p in plan.programs for v in range(p.num_veus))
    say(f"{policy}: {len(sch.workload.ops)} operators, {len(plan.ops)} launches, {tasks} rTasks, "
        f"{len(plan.programs)} rProgram(s), predicted {plan.predicted_us:.1f} us")
    for line in baseline_lines(baselines, plan.predicted_us):
        say(line)
    for note in plan.notes:
        say(f"note: {note}")
    if target is not None:
        try:
            write_atomic(target, json.dumps(plan.to_json()))
        except OSError as exc:
            print(f"{out}: error: cannot write the plan: {exc.strerror or exc}", file=sys.stderr)
            return 1
        say(f"plan written to {out}")
    if as_json:
        print(json.dumps({"model": model, "policy": policy, "profiler": profiler.describe(),
                          "operators": len(sch.workload.ops), "launches": len(plan.ops), "rtasks": tasks,
                          "programs": len(plan.programs), "predicted_us": round(plan.predicted_us, 3),
                          "predicted_baselines_us": {k: round(v, 3) for k, v in plan.baselines_us.items()},
                          **baselines.summary(plan.predicted_us),
                          "notes": plan.notes, "plan_json": out}))
    return 0


def baseline_lines(baselines: Baselines, predicted_us: float) -> list[str]:
    """One line per baseline (predicted µs, and the plan's speed-up over it), the strongest named."""
    out = []
    for name, us in baselines.us.items():
        mark = "  <- strongest" if name == baselines.strongest else ""
        out.append(f"  baseline {name}: predicted {us:.1f} us (plan {us / max(predicted_us, 1e-9):.2f}x){mark}")
    ratio = baselines.ratio(predicted_us)
    out.append(f"  no baseline: {baselines.unavailable}" if ratio is None else
               f"  vs the strongest baseline ({baselines.strongest}): {ratio:.2f}x")
    return out
