"""Regenerate BENCHMARKS.md's prediction tables: every zoo model at full size, batch 1, planned with each policy at
132 vEUs and built for the GPU without --veus (no GPU needed: nvcc's ptxas gives the vEUs per SM, the cost model
the times), against every plan-independent baseline (scheduler/baselines.py), the strongest named. Every number it
prints is a prediction of the cost model, not a measurement.

    python3 tests/predictions.py [--models a,b] [--work DIR] [--force]

Run from the repository root. Each model's results are kept in WORK/NAME.json, so an interrupted run resumes where
it stopped; models run one after another (one process at a time). Not collected by pytest (no `test_` prefix)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # this checkout, whose rammer both the import and the commands use
sys.path.insert(0, str(ROOT))
from rammer.zoo import MODELS  # noqa: E402

POLICIES = ("wavefront", "ios", "sequential")
PLAN_VEUS = 132  # the H100's SM count: one vEU per SM
CLI = [sys.executable, "-c", "from rammer.cli import main; main()"]
HEADER = ("| model | operators | rTasks (wavefront, 132 vEUs) | wavefront, 132 vEUs (µs) | IOS, 132 (µs) | "
          "sequential, 132 (µs) | vEUs per SM by ptxas | build (µs) | strongest baseline | its time (µs) | "
          "build vs strongest |\n|---|---|---|---|---|---|---|---|---|---|---|")
BASELINES = ("op-by-op", "cuda-graph", "cuda-graph-pdl", "multi-stream-graph", "library-graph", "pytorch")
BASELINE_HEADER = ("| model | " + " | ".join(f"{b} (µs)" for b in BASELINES) + " | build's steps |\n|---|"
                   + "---|" * (len(BASELINES) + 1))


def rammer(*args: str) -> str:
    """Run one `rammer` command from this checkout; its stdout, or exit with its stderr's last line."""
    done = subprocess.run(CLI + list(args), capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        sys.exit(f"error: rammer {' '.join(args)}: {last}")
    return done.stdout


def predict(name: str, work: Path) -> dict:
    """The model's plans at 132 vEUs and its GPU build's figures, as one JSON-ready dict."""
    onnx_path = work.resolve() / f"{name}.onnx"
    rammer("zoo", name, "-o", str(onnx_path))
    plans = {p: json.loads(rammer("plan", str(onnx_path), "--policy", p, "--veus", str(PLAN_VEUS),
                                  "--profile", "model", "--json"))
             for p in POLICIES}
    out = work.resolve() / f"build-{name}"
    # the backends of a GPU machine (CuPy: the library's cuBLAS/cuDNN calls), whether or not this one has them
    rammer("build", str(onnx_path), "-o", str(out), "--target", "gpu", "--profile", "model", "--backends",
           "rtask,library")
    manifest = json.loads((out / "build.json").read_text())
    stats = manifest["stats"]
    return {"model": name, "plans": plans,
            "build": {"num_veus": manifest["num_veus"], "veus_per_sm": stats["veus_per_sm"],
                      "predicted_us": stats["predicted_us"], "baselines_us": stats["predicted_baselines_us"],
                      "strongest": stats["strongest_baseline"], "vs_strongest": stats["vs_strongest"],
                      "rtasks": stats["rtasks"], "precision": stats["precision"],
                      "occupancy": stats["occupancy"], "steps": steps_summary(manifest)}}


def steps_summary(manifest: dict) -> str:
    """What the build runs, by step kind: '1 rProgram', '3 rPrograms + 12 launch groups + 2 library calls'."""
    kinds: dict[str, int] = {}
    for step in manifest.get("steps") or [{"kind": "program"}]:
        kinds[step["kind"]] = kinds.get(step["kind"], 0) + 1
    names = {"program": "rProgram", "launches": "launch segment", "library": "library call"}
    return " + ".join(f"{n} {names.get(k, k)}{'s' if n > 1 else ''}" for k, n in kinds.items())


def fmt(us: float | None) -> str:
    """Microseconds as the table rounds them; a dash where the build gave none."""
    return "-" if us is None else f"{us:.0f}"


def row(r: dict) -> str:
    """One row of the main table from a model's results."""
    wf, b = r["plans"]["wavefront"], r["build"]
    strongest = b["strongest"]
    return (f"| {r['model']} | {wf['operators']} | {wf['rtasks']} | "
            + " | ".join(fmt(r["plans"][p]["predicted_us"]) for p in POLICIES)
            + f" | {b['veus_per_sm']} ({b['num_veus']}) | {fmt(b['predicted_us'])} | {strongest} | "
            f"{fmt(b['baselines_us'][strongest])} | {b['vs_strongest']:.2f}x |")


def baseline_row(r: dict) -> str:
    """One row of the baselines table: every baseline's predicted time, and what the build runs."""
    base = r["build"]["baselines_us"]
    return (f"| {r['model']} | " + " | ".join(fmt(base.get(b)) for b in BASELINES) + f" | {r['build']['steps']} |")


def main() -> None:
    """Predict the chosen models (resuming from WORK), then print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated zoo models (default: all)")
    ap.add_argument("--work", default="/tmp/rammer-predictions", help="ONNX files, builds and per-model results")
    ap.add_argument("--force", action="store_true", help="redo models already predicted in WORK")
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        sys.exit(f"error: --models: unknown {', '.join(unknown)} (choose from {', '.join(MODELS)})")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        saved = work / f"{name}.json"
        if args.force or not saved.exists():
            print(f"{name} ...", file=sys.stderr, flush=True)
            saved.write_text(json.dumps(predict(name, work), indent=1))
        results.append(json.loads(saved.read_text()))
    print(HEADER)
    for r in results:
        print(row(r))
    print()
    print(BASELINE_HEADER)
    for r in results:
        print(baseline_row(r))
    for r in results:
        plans = {p: r["plans"][p]["predicted_baselines_us"] for p in POLICIES}
        same = all(v == r["build"]["baselines_us"] for v in plans.values())
        print(f"{r['model']}: baselines identical for the three plans at {PLAN_VEUS} vEUs and the build at "
              f"{r['build']['num_veus']}: {same}", file=sys.stderr)


if __name__ == "__main__":
    main()
