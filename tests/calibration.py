"""Price what ran on the H100 on 2026-11-27 with today's cost model, beside what was measured (issues 24, 25, 28).

Two runs. results/h100-2026-11-27/*.json timed commit 3f2544c's builds: a persistent build ("rammer") and the CUDA
Graph of the same build's launches (there "cuda-graph", here "rammer-graph"), each at the vEUs the JSON names.
results/h100-2026-11-27-0900/results.jsonl timed commit 79f1ec3's lstm-tc (264 vEUs, 2 per SM, pinned): the
persistent build, its own kernels op by op and as a graph, and the plan-independent baselines `rammer bench` runs
(rammer/bench.py launch_variants: a launch-only build run op by op, as a one-stream graph and as its multi-stream
launch segment; a library-launch build as a graph; PyTorch eager, priced as the library build's kernels with the
host's per-op overhead). Those builds are remade here from the commit that ran them (`git archive BASE`,
`build_model(...)` with the options that run used, one build at a time, resumable: WORK keeps them), then priced with
THIS checkout's profiler: an rProgram by the simulation, launches by the legacy kernels' model and the launch costs
(a multi-stream graph over the streams the executor assigns). No GPU needed; every "predicted" number is the cost
model's.

    python3 tests/calibration.py [--work DIR] [--set FIELD=VALUE ...]

`--set` overrides a DeviceSpec field for a what-if (e.g. `--set saturating_warps=48`). Prints the markdown table
of BENCHMARKS.md's "Measured against predicted" (predicted beside measured, per variant) and the largest error.
Not collected by pytest."""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tarfile
import io
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from kernel_corpus.bindings import Launch, ResidentUse, arg_from_json, as_unpinned  # noqa: E402
from scheduler.baselines import NodeKernels, launch_share, multi_stream_us  # noqa: E402
from scheduler.legacy_usage import LegacyRegisters  # noqa: E402
from scheduler.profiler import H100, Profiler  # noqa: E402
from vdevice.program import plan_from_json  # noqa: E402

RESULTS = ROOT / "results" / "h100-2026-11-27"
BASE = "3f2544c"  # the commit the first run ran
RESULTS_0900 = ROOT / "results" / "h100-2026-11-27-0900"
BASE_0900 = "79f1ec3"  # the commit the 09:00 run ran (its results.jsonl preflight row)
# How each build kind is made (the options of the run that measured it): the persistent build at the figure's vEUs
# (headline.py / the first run's script), and rammer bench's launch-only and library-launch builds
BUILD = """
import sys
from rammer.build import build_model
name, onnx_path, out, veus, k, kind = sys.argv[1:7]
if kind == "persistent":
    build_model(onnx_path, out, policy="wavefront", target="gpu", veus=int(veus), veus_per_sm=int(k), profile="model",
                quiet=True, backends=("rtask", "library"))
else:
    library = kind == "library"
    build_model(onnx_path, out, target="gpu", quiet=True, profile="model",
                placement="library-launch" if library else "launch-only",
                backends=("rtask", "library") if library else ("rtask",), disable_passes=("resident_weights",),
                launches=True)
"""
# What each measured variant runs: (build kind, how it is priced)
VARIANTS = {"rammer": ("persistent", "program"), "rammer-graph": ("persistent", "graph"),
            "rammer-op-by-op": ("persistent", "eager"), "op-by-op": ("launches", "eager"),
            "cuda-graph": ("launches", "graph"), "multi-stream-graph": ("launches", "multi-stream"),
            "library-graph": ("library", "graph"), "pytorch": ("library", "torch")}


@dataclasses.dataclass(frozen=True)
class Figure:
    """One measured time: a model's build at some vEUs, run persistently or as a CUDA Graph of its launches."""

    model: str
    veus: int
    veus_per_sm: int
    variant: str  # a key of VARIANTS
    measured_us: float
    base: str = BASE  # the commit that ran it
    run: str = "h100-2026-11-27"  # the results folder

    @property
    def kind(self) -> str:
        """The build the variant runs (VARIANTS)."""
        return VARIANTS[self.variant][0]


def measured_figures(folder: Path = RESULTS) -> list[Figure]:
    """Every timed rammer / cuda-graph variant in the first run's JSON files (its "cuda-graph" was the build's own
    launches: "rammer-graph" here)."""
    out = []
    for path in sorted(folder.glob("*.json")):
        rec = json.loads(path.read_text())
        for v in rec["variants"]:
            if v["name"] in ("rammer", "cuda-graph") and v.get("status") == "ok":
                name = "rammer-graph" if v["name"] == "cuda-graph" else v["name"]
                out.append(Figure(rec["model"], rec["veus"], rec["veus_per_sm"], name, v["median_ms"] * 1e3))
    return out


def headline_figures(folder: Path = RESULTS_0900, base: str = BASE_0900) -> list[Figure]:
    """Every timed variant of a headline run's results.jsonl that the cost model prices (VARIANTS), at the vEUs its
    build row names."""
    rows = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line.strip()]
    builds = {r["model"]: r for r in rows if r.get("kind") == "build" and r.get("status") == "ok"}
    out = []
    for r in rows:
        if r.get("kind") == "variant" and r.get("status") == "ok" and r["name"] in VARIANTS and r["model"] in builds:
            b = builds[r["model"]]
            out.append(Figure(r["model"], b["veus"], b["veus_per_sm"], r["name"], r["median_ms"] * 1e3, base,
                              folder.name))
    return out


def base_tree(work: Path, base: str) -> Path:
    """The base commit's files under WORK (extracted once)."""
    tree = work / f"base-{base}"
    if not (tree / "rammer").is_dir():
        data = subprocess.run(["git", "-C", str(ROOT), "archive", base], capture_output=True, check=True).stdout
        tree.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tree, filter="data")
    return tree


def built(fig: Figure, work: Path) -> Path:
    """The base commit's build of the figure's configuration (built now unless WORK has it)."""
    name = f"{fig.model}-{fig.veus}" if fig.base == BASE else f"{fig.model}-{fig.veus}-{fig.base}"
    out = work / (name if fig.kind == "persistent" else f"{fig.model}-{fig.kind}-{fig.base}")
    if (out / "plan.json").is_file():
        return out
    tree = base_tree(work, fig.base)
    onnx_path = work / (f"{fig.model}.onnx" if fig.base == BASE else f"{fig.model}-{fig.base}.onnx")
    cli = [sys.executable, "-c", "from rammer.cli import main; main()"]
    if not onnx_path.is_file():
        subprocess.run(cli + ["zoo", fig.model, "-o", str(onnx_path)], cwd=tree, check=True, capture_output=True)
    print(f"building {fig.model} ({fig.kind}) with {fig.base} ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-c", BUILD, fig.model, str(onnx_path), str(out), str(fig.veus),
                    str(fig.veus_per_sm), fig.kind], cwd=tree, check=True)
    return out


def stored_launches(folder: Path) -> tuple[dict, list[Launch]]:
    """plan.json and its ops' launches as they ran: pinned readers with their resident slices, the rest unpinned."""
    plan = json.loads((folder / "plan.json").read_text())
    out = []
    for op in plan["ops"]:
        fields = dict(op["launch"])
        res = fields.pop("resident")
        fields.update(args=[arg_from_json(a) for a in fields["args"]], grid=tuple(fields["grid"]),
                      block=tuple(fields["block"]))
        use = ResidentUse(res["family"], tuple(res["inputs"]), res["slice_bytes"], res["load"]) if res else None
        launch = Launch(**fields, resident=use)
        out.append(launch if op["vdevice"].get("resident") is not None else as_unpinned(launch))
    return plan, out


def weight_bytes(folder: Path) -> int:
    """The build's weights (the profiler's L2 term: whether they stay in L2 between inferences)."""
    manifest = json.loads((folder / "build.json").read_text())
    return sum(int(np.prod(b["shape"])) * np.dtype(b["dtype"]).itemsize for b in manifest["buffers"]
               if b["kind"] == "weight")


def segment_nodes(plan: dict, kernels: list[float], shares: list[float]) -> list[NodeKernels]:
    """A launch-only build's one launch segment as the multi-stream price takes it: each op a node after the ops its
    segment edges name (what the executor captures: vdevice.executors.stream_of_each assigns the same order)."""
    (group,) = plan["launch_groups"]
    local = {op: i for i, op in enumerate(group["ops"])}
    preds: dict[int, list[int]] = {}
    for a, b in group["deps"]:
        preds.setdefault(local[b], []).append(local[a])
    return [NodeKernels(str(op), sorted(preds.get(i, [])), "v", [kernels[op]], [shares[op]])
            for i, op in enumerate(group["ops"])]


def predict(fig: Figure, folder: Path, overrides: dict[str, Any], registers: LegacyRegisters) -> float:
    """Today's model's price of what ran: the persistent build by the simulation, or a build's launches as the
    variant launched them."""
    plan, launches = stored_launches(folder)
    device = dataclasses.replace(H100, **overrides)
    prof = Profiler(device, plan["num_veus"], legacy_registers=registers)
    prof.resident_bytes = weight_bytes(folder)
    how = VARIANTS[fig.variant][1]
    if how == "program":
        programs = plan_from_json((folder / "programs.json").read_text())
        return sum(prof.program_us(p, launches) for p in programs)
    if plan.get("library_calls"):
        raise SystemExit(f"error: {folder} has library calls, which this script does not price yet")
    alone = [as_unpinned(launch) for launch in launches]  # legacy kernels read their weights from memory
    registers.prefetch(alone)
    kernels = [prof.legacy_kernel_us(launch) for launch in alone]
    if how == "multi-stream":
        shares = [launch_share(prof, launch) for launch in alone]
        return multi_stream_us(segment_nodes(plan, kernels, shares), prof)
    return prof.launched_us(kernels, how)


def parse_set(items: list[str]) -> dict[str, Any]:
    """FIELD=VALUE pairs, typed like DeviceSpec's defaults."""
    out: dict[str, Any] = {}
    for item in items:
        field, _, value = item.partition("=")
        default = getattr(H100, field, None)
        if default is None:
            sys.exit(f"error: --set {item}: DeviceSpec has no field '{field}'")
        out[field] = type(default)(float(value)) if isinstance(default, (int, float)) else value
    return out


def main() -> None:
    """Build what ran (resuming), price it, print the table and the largest error."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/tmp/rammer-calibration", help="base tree, ONNX files and builds")
    ap.add_argument("--set", action="append", default=[], help="DeviceSpec FIELD=VALUE for a what-if")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    overrides = parse_set(args.set)
    registers = LegacyRegisters()
    rows, worst = [], 1.0
    for fig in measured_figures() + headline_figures():
        us = predict(fig, built(fig, work), overrides, registers)
        err = max(fig.measured_us / us, us / fig.measured_us)
        worst = max(worst, err)
        rows.append(f"| {fig.run} ({fig.base}) | {fig.model} | {fig.veus} ({fig.veus_per_sm}/SM) | {fig.variant} | "
                    f"{fig.measured_us:.0f} | {us:.0f} | {fig.measured_us / us:.2f} |")
        print(rows[-1], file=sys.stderr, flush=True)
    print("| run (commit) | model | vEUs of the build | variant | measured (µs) | predicted (µs) | "
          "measured / predicted |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows))
    print(f"largest error: {worst:.2f}x" + (f" (with {overrides})" if overrides else ""))


if __name__ == "__main__":
    main()
