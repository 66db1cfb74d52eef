"""Price what ran on the H100 on 2026-11-27 with today's cost model, beside what was measured (issue 28).

The measurements (results/h100-2026-11-27/*.json) timed commit 3f2544c's builds: a persistent build ("rammer") and
the CUDA Graph of the same build's launches ("cuda-graph"), each at the vEUs the JSON names. Those plans are rebuilt
here from that commit (`git archive BASE`, `build_model(..., target="gpu", veus, veus_per_sm, profile="model",
backends=rtask,library)` as headline.py ran them, one build at a time, resumable: WORK keeps them), then priced
with THIS checkout's profiler: the rProgram by the simulation, the graph by the legacy kernels' model and the launch
costs. No GPU needed; every "predicted" number is the cost model's.

    python3 tests/calibration.py [--work DIR] [--base COMMIT] [--set FIELD=VALUE ...]

`--set` overrides a DeviceSpec field for a what-if (e.g. `--set saturating_warps=48`). Prints the markdown table
of BENCHMARKS.md's "Measured against predicted" and the largest error. Not collected by pytest."""
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
from scheduler.legacy_usage import LegacyRegisters  # noqa: E402
from scheduler.profiler import H100, Profiler  # noqa: E402
from vdevice.program import plan_from_json  # noqa: E402

RESULTS = ROOT / "results" / "h100-2026-11-27"
BASE = "3f2544c"  # the commit the H100 ran
BUILD = """
import sys
from rammer.build import build_model
name, onnx_path, out, veus, k = sys.argv[1:6]
build_model(onnx_path, out, policy="wavefront", target="gpu", veus=int(veus), veus_per_sm=int(k), profile="model",
            quiet=True, backends=("rtask", "library"))
"""


@dataclasses.dataclass(frozen=True)
class Figure:
    """One measured time: a model's build at some vEUs, run persistently or as a CUDA Graph of its launches."""

    model: str
    veus: int
    veus_per_sm: int
    variant: str  # "rammer" | "cuda-graph"
    measured_us: float


def measured_figures(folder: Path = RESULTS) -> list[Figure]:
    """Every timed rammer / cuda-graph variant in the results' JSON files."""
    out = []
    for path in sorted(folder.glob("*.json")):
        rec = json.loads(path.read_text())
        for v in rec["variants"]:
            if v["name"] in ("rammer", "cuda-graph") and v.get("status") == "ok":
                out.append(Figure(rec["model"], rec["veus"], rec["veus_per_sm"], v["name"], v["median_ms"] * 1e3))
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


def built(fig: Figure, work: Path, base: str) -> Path:
    """The base commit's build of the figure's configuration (built now unless WORK has it)."""
    out = work / f"{fig.model}-{fig.veus}"
    if (out / "plan.json").is_file():
        return out
    tree = base_tree(work, base)
    onnx_path = work / f"{fig.model}.onnx"
    cli = [sys.executable, "-c", "from rammer.cli import main; main()"]
    if not onnx_path.is_file():
        subprocess.run(cli + ["zoo", fig.model, "-o", str(onnx_path)], cwd=tree, check=True, capture_output=True)
    print(f"building {fig.model} at {fig.veus} vEUs with {base} ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-c", BUILD, fig.model, str(onnx_path), str(out), str(fig.veus),
                    str(fig.veus_per_sm)], cwd=tree, check=True)
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


def predict(fig: Figure, folder: Path, overrides: dict[str, Any], registers: LegacyRegisters) -> float:
    """Today's model's price of what ran: the persistent build, or the CUDA Graph of its launches."""
    plan, launches = stored_launches(folder)
    device = dataclasses.replace(H100, **overrides)
    prof = Profiler(device, plan["num_veus"], legacy_registers=registers)
    prof.resident_bytes = weight_bytes(folder)
    if fig.variant == "cuda-graph":
        alone = [as_unpinned(launch) for launch in launches]  # legacy kernels read their weights from memory
        registers.prefetch(alone)
        return prof.baselines_us(alone)["cuda-graph"]
    programs = plan_from_json((folder / "programs.json").read_text())
    return sum(prof.program_us(p, launches) for p in programs)


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
    ap.add_argument("--base", default=BASE, help="the commit the measurements ran")
    ap.add_argument("--set", action="append", default=[], help="DeviceSpec FIELD=VALUE for a what-if")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    overrides = parse_set(args.set)
    registers = LegacyRegisters()
    rows, worst = [], 1.0
    for fig in measured_figures():
        us = predict(fig, built(fig, work, args.base), overrides, registers)
        err = max(fig.measured_us / us, us / fig.measured_us)
        worst = max(worst, err)
        rows.append(f"| {fig.model} | {fig.veus} ({fig.veus_per_sm}/SM) | {fig.variant} | {fig.measured_us:.0f} | "
                    f"{us:.0f} | {fig.measured_us / us:.2f} |")
    print("| model | vEUs of the build | variant | measured (µs) | predicted (µs) | measured / predicted |\n"
          "|---|---|---|---|---|---|\n" + "\n".join(rows))
    print(f"largest error: {worst:.2f}x" + (f" (with {overrides})" if overrides else ""))


if __name__ == "__main__":
    main()
