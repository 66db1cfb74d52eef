#!/usr/bin/env python3
"""The GPU headline in one device call: preflight, the runtime micro-benchmark, then the headline models at full
size with their build configuration pinned, each against every baseline, every row written the moment it exists.

    python3 tests/gpu/headline.py --out DIR [--budget S] [--models a,b] [--dry-run] [--no-extras]
    python3 tests/gpu/headline.py --pin [--models a,b]      (here, on the CPU machine: decide and store the configs)

A device lends 15 minutes per session with at most 10 per call, so this run is sized for one call of 7 minutes
(`--budget 420`, tests/gpu/headline.sh), leaving room for a rerun. Nothing is searched on the device: `--pin` runs
each model's full GPU build here (the occupancy, register-budget and resident-slice searches, with nvcc) and stores
the chosen vEUs, vEUs per SM, precision and a digest of the plan's per-node choices in tests/gpu/headline.yaml;
the device rebuilds with those values and records whether its plan has the same digest.

Kill-safety: all results go to one JSON-lines file, `results.jsonl`, one complete row per line, appended and
fsynced as each is measured (read_rows ignores a torn last line), so a timeout or a kill at any point keeps
every finished row. Each model runs in a child process with its own timeout, so one hang cannot eat the budget.
The files under DIR stay few (the device tool returns at most 8): results.jsonl, headline.log (via headline.sh),
models.log (the children's output), vdevice_bench.txt, vdevice_table.md, extras.txt, summary.md.

`--dry-run` is the same code path on the CPU emulator with --small models and a handful of repeats, so a Python
error or a missing import is found in CI (tests/test_headline.py), never on device time.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONFIG = Path(__file__).with_name("headline.yaml")
RESULTS = "results.jsonl"
# What a device run cannot do without; torch and cupy-only extras are reported, not required.
REQUIRED = ("numpy", "onnx", "onnxruntime", "yaml", "click", "simpleeval", "cxxfilt", "clang.cindex", "cupy")
OPTIONAL = ("torch", "cuda.bindings", "networkx", "tqdm")
DRY_RUN_VEUS = 8           # the CPU emulator keeps every vEU thread alive: a small vDevice (rammer.build's default)
RESERVE_S = 20             # left at the end of the budget for summary.md and the wrapper's own exit
MIN_MODEL_S = 45           # a model is not started with less than this left (build + check + three variants)
EXTRAS_MIN_S = 90          # sanitizer / pytest -m gpu only with this much left


# ---- rows ------------------------------------------------------------------------------------------------------
def append_row(out: Path, row: dict[str, Any]) -> None:
    """One complete JSON line, flushed and fsynced: a kill after this call keeps the row."""
    row = {"time": _dt.datetime.now().isoformat(timespec="seconds"), **row}
    line = json.dumps(row, default=str) + "\n"
    with open(out / RESULTS, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every complete row of a results file; a line torn by a kill (no newline, or not JSON) is skipped."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
        if not line.endswith("\n"):
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


# ---- pinned configurations ---------------------------------------------------------------------------------------
@dataclass
class Pinned:
    """One headline model's build configuration, decided on the CPU machine by `--pin`."""

    name: str
    policy: str = "wavefront"
    veus: int | None = None
    veus_per_sm: int | None = None
    precision: str = "3xtf32"
    plan_digest: str = ""
    predicted_us: float | None = None
    notes: list[str] = field(default_factory=list)


def load_config(path: Path = CONFIG) -> tuple[str, list[Pinned]]:
    """(the commit the pins were made at, the pinned models) from headline.yaml."""
    import yaml
    data = yaml.safe_load(path.read_text()) or {}
    return str(data.get("commit", "")), [Pinned(**m) for m in data.get("models", [])]


def plan_digest(plan_json: dict[str, Any]) -> str:
    """What the device must reproduce of a plan: per node its backend and variant, per op its kernel and grid, and
    the vEU count; not the predicted times (the cost model may be recalibrated without changing the plan)."""
    ops = [(o["node"], o["variant"], o["launch"].get("kernel"), o["launch"].get("grid")) for o in plan_json["ops"]]
    choices = sorted((k, c.get("backend"), c.get("variant")) for k, c in plan_json.get("choices", {}).items())
    text = json.dumps({"veus": plan_json.get("num_veus"), "ops": ops, "choices": choices}, sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def git_commit() -> str:
    """The commit of this tree: $HL_COMMIT, else git where the tree has its .git, else the wheelhouse's stamp (the
    device gets no .git). The stamp never wins over git: a stale .whl/COMMIT of an earlier GPU session once named
    the pins' commit wrongly."""
    if os.environ.get("HL_COMMIT"):
        return os.environ["HL_COMMIT"]
    if (ROOT / ".git").exists():
        try:
            res = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                 text=True, timeout=10)
            dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            if res.returncode == 0:
                return res.stdout.strip() + ("+dirty" if dirty else "")
        except (OSError, subprocess.SubprocessError):
            pass
    stamp = ROOT / ".whl" / "COMMIT"
    return stamp.read_text().strip() if stamp.is_file() else "unknown"


# ---- stage 1: preflight ------------------------------------------------------------------------------------------
def _run_text(cmd: list[str], timeout: float = 20) -> str:
    """A command's output, or why it did not run."""
    if shutil.which(cmd[0]) is None:
        return f"{cmd[0]}: not found"
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return (res.stdout + res.stderr).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{cmd[0]}: {exc}"


def import_report(names: tuple[str, ...]) -> dict[str, str]:
    """name -> version (or 'ok'), or 'MISSING: reason'."""
    import importlib
    import importlib.metadata as md
    dists = md.packages_distributions()
    out = {}
    for name in names:
        try:
            importlib.import_module(name)
            dist = dists.get(name.split(".")[0], [None])[0]
            out[name] = md.version(dist) if dist else "ok"
        except Exception as exc:  # ImportError, or a CUDA library that fails to load
            out[name] = f"MISSING: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return out


def preflight(out: Path, dry_run: bool) -> bool:
    """Everything the run needs, checked in seconds; the row says what is missing. False: stop here."""
    from toolchain.nvcc import find_nvcc
    required = import_report(REQUIRED if not dry_run else tuple(n for n in REQUIRED if n != "cupy"))
    gpu = "dry run: no GPU used"
    if not dry_run:
        from vdevice.gpu import gpu_available
        ok, why = gpu_available()
        gpu = why if ok else f"MISSING: {why}"
    nvcc = find_nvcc()
    row = {"kind": "preflight", "dry_run": dry_run, "commit": git_commit(), "python": sys.version.split()[0],
           "imports": required, "optional": import_report(OPTIONAL), "gpu": gpu,
           "nvcc": _run_text([nvcc, "--version"]).splitlines()[-1] if nvcc else "not found",
           "ptxas": shutil.which("ptxas") or (str(Path(nvcc).with_name("ptxas")) if nvcc else "not found"),
           "nvidia_smi": _run_text(["nvidia-smi", "-L"]),
           "clocks": _run_text(["nvidia-smi", "-q", "-d", "CLOCK"])}
    missing = [k for k, v in required.items() if v.startswith("MISSING")] + (["gpu"] if gpu.startswith("MISSING")
                                                                              else [])
    row["missing"] = missing
    append_row(out, row)
    for k in missing:
        print(f"preflight: {k}: {required.get(k, gpu)}", flush=True)
    return not missing


# ---- stage 2: the runtime micro-benchmark ----------------------------------------------------------------------------
def micro(out: Path, timeout_s: float, dry_run: bool) -> None:
    """tests/vdevice_gpu_bench.py --quick: its lines go to vdevice_bench.txt as they are printed (per-rTask
    overhead, dependent hand-off, barrier by fan-in, 1-4 vEUs per SM), its table to vdevice_table.md."""
    cmd = [sys.executable, "-u", str(ROOT / "tests" / "vdevice_gpu_bench.py"), "--quick", "--table",
           str(out / "vdevice_table.md")]
    rc = run_streamed(cmd, out / "vdevice_bench.txt", timeout_s)
    append_row(out, {"kind": "micro", "rc": rc, "dry_run": dry_run, "file": "vdevice_bench.txt"})


def run_streamed(cmd: list[str], log: Path, timeout_s: float) -> int | str:
    """Run a command with stdout+stderr appended line by line to `log`; its exit code, or 'timeout'."""
    with open(log, "ab") as f:
        try:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                                    env=dict(os.environ, PYTHONUNBUFFERED="1"))
        except OSError as exc:
            f.write(f"cannot start {cmd[0]}: {exc}\n".encode())
            return "error"
        try:
            return proc.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            f.write(f"\n[headline] killed after {timeout_s:.0f} s\n".encode())
            return "timeout"


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill a child and everything it started (compilers, CUDA helpers)."""
    import signal
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


# ---- stage 3: one model, every variant -----------------------------------------------------------------------------
def model_rows(pin: Pinned, out: Path, work: Path, repeats: int, dry_run: bool) -> None:
    """Build one model with its pinned configuration, check it against onnxruntime, then time every variant; a row
    per step, written as soon as it exists."""
    import onnx

    from rammer.bench import evaluate
    from rammer.check import reference_outputs
    from rammer.zoo import generate, random_inputs
    target = "cpu" if dry_run else "gpu"
    base = {"kind": "variant", "model": pin.name, "dry_run": dry_run}
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{pin.name}.onnx"
    t0 = time.perf_counter()
    onnx.save(generate(pin.name, small=dry_run), str(path))
    gen_s = time.perf_counter() - t0
    built, build_row = build_pinned(pin, path, work / "build", target, dry_run)
    append_row(out, dict(build_row, generate_s=round(gen_s, 2)))
    if built is None:
        return
    model = onnx.load(str(path))
    feeds = random_inputs(model, seed=0)
    refs = reference_outputs(model, feeds)
    warmup = 1 if dry_run else 5
    for variant in variants(built, model, feeds, target, dry_run, work):
        t = time.perf_counter()
        m = evaluate(variant, refs, repeats, warmup)
        append_row(out, dict(base, **asdict(m), seconds=round(time.perf_counter() - t, 2)))
        print(f"{pin.name:12s} {m.name:16s} {m.status:11s} {m.median_ms} ms {m.note[:100]}", flush=True)
    kernel_rows(built, pin.name, out, target, dry_run)


def kernel_rows(built: Any, model: str, out: Path, target: str, dry_run: bool) -> None:
    """Each GEMM / convolution of the pinned build timed alone, its kernels against the vendor library's call
    (rammer.kernel_rates: TFLOP/s, issue 25), a row per node as it is measured."""
    from rammer.kernel_rates import INNER, iter_kernel_rates
    try:
        for r in iter_kernel_rates(built, target, repeats=1 if dry_run else 10, inner=1 if dry_run else INNER):
            append_row(out, dict(r.to_json(), kind="kernel", model=model, dry_run=dry_run))
    except Exception as exc:  # the model's other rows stand; this says why the rates stopped
        append_row(out, {"kind": "kernel", "model": model, "status": "error",
                         "note": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})


def build_pinned(pin: Pinned, path: Path, folder: Path, target: str, dry_run: bool) -> tuple[Any, dict[str, Any]]:
    """The model built with the pinned configuration (no search), and its row: build time, predictions, digest."""
    from rammer.build import build_model
    row: dict[str, Any] = {"kind": "build", "model": pin.name, "dry_run": dry_run, "policy": pin.policy,
                           "precision": pin.precision}
    veus = DRY_RUN_VEUS if dry_run else pin.veus
    per_sm = None if dry_run else pin.veus_per_sm
    t0 = time.perf_counter()
    try:
        built = build_model(path, folder, policy=pin.policy, target=target, veus=veus, veus_per_sm=per_sm,
                            profile="model", precision=pin.precision, quiet=True)
    except Exception as exc:  # the row says why; the other models still run
        row.update(status="error", note=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                   build_s=round(time.perf_counter() - t0, 2))
        return None, row
    stats = built.manifest.stats
    digest = plan_digest(json.loads((folder / "plan.json").read_text()))
    row.update(status="ok", build_s=round(time.perf_counter() - t0, 2), veus=built.manifest.veus,
               veus_per_sm=stats.get("veus_per_sm"), rtasks=stats.get("rtasks"),
               barrier_rtasks=stats.get("barrier_rtasks"), programs=stats.get("programs"),
               predicted_us=stats.get("predicted_us"), predicted_baselines_us=stats.get("predicted_baselines_us"),
               plan_digest=digest,
               pinned_digest=pin.plan_digest, same_plan=(digest == pin.plan_digest) if pin.plan_digest and not dry_run
               else None)
    return built, row


def variants(built: Any, model: Any, feeds: dict, target: str, dry_run: bool, work: Path) -> Iterator[Any]:
    """The persistent build, its own kernels launched one by one and as a CUDA Graph, every launch baseline
    rammer.bench knows (each node's fastest legacy kernel op by op, as a graph, a multi-stream graph, the library
    graph: builds of their own in `work`), then PyTorch's (skipped in a dry run: CI has no torch and they would only
    say 'unavailable')."""
    from rammer.bench import Unavailable, build_variant, launch_variants
    for name, kind in (("rammer", "persistent"), ("rammer-op-by-op", "op-by-op"), ("rammer-graph", "graph")):
        try:
            yield build_variant(name, built, kind, feeds, backend=target)
        except Exception as exc:  # one executor that cannot run here is a row, not the end of the model
            yield Unavailable(name, f"{kind} on {target}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    try:
        yield from launch_variants(model, feeds, work / "baselines", target)
    except Exception as exc:  # the launch baselines' builds failing is a row too
        yield Unavailable("launch-baselines", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if not dry_run:
        from rammer.bench import torch_variants
        yield from torch_variants(model, feeds)


# ---- stage 4: extras --------------------------------------------------------------------------------------------
def extras(out: Path, deadline: float) -> None:
    """With time left: compute-sanitizer racecheck and synccheck of one --small build, then `pytest -m gpu`."""
    log = out / "extras.txt"
    rammer = [sys.executable, "-c", "from rammer.cli import main; main()"]
    work = Path(tempfile.mkdtemp(prefix="hl-extras-"))
    steps: list[tuple[str, list[str]]] = [
        ("zoo", rammer + ["zoo", "squeezenet", "--small", "-o", str(work / "m.onnx")]),
        ("build", rammer + ["build", str(work / "m.onnx"), "-o", str(work / "b"), "--target", "gpu", "--veus", "16"])]
    if shutil.which("compute-sanitizer"):
        steps += [(f"sanitize-{tool}", ["compute-sanitizer", "--tool", tool, "--print-limit", "5"] + rammer
                   + ["run", str(work / "b"), "--check"]) for tool in ("racecheck", "synccheck")]
    steps.append(("pytest-gpu", [sys.executable, "-m", "pytest", "-q", "-ra", "-m", "gpu", "-p", "no:cacheprovider",
                                 "-x", "tests"]))
    for name, cmd in steps:
        left = deadline - time.time()
        if left < 30:
            append_row(out, {"kind": "extra", "step": name, "rc": "skipped (deadline)"})
            continue
        with open(log, "ab") as f:
            f.write(f"\n==== {name}: {' '.join(cmd)}\n".encode())
        rc = run_streamed(cmd, log, left - 10)
        append_row(out, {"kind": "extra", "step": name, "rc": rc})


# ---- the run ------------------------------------------------------------------------------------------------
def main_run(args: argparse.Namespace) -> int:
    """Stages 1-4 under one deadline; each model in a child with its own timeout."""
    start = time.time()
    deadline = start + args.budget
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    commit, pins = load_config(Path(args.config))
    pins = select(pins, args.models)
    append_row(out, {"kind": "start", "budget_s": args.budget, "dry_run": args.dry_run, "pinned_at": commit,
                     "models": [p.name for p in pins]})
    if not preflight(out, args.dry_run):
        append_row(out, {"kind": "end", "status": "preflight failed", "seconds": round(time.time() - start, 1)})
        return 3
    if not args.no_micro:
        micro(out, min(150.0, deadline - time.time() - RESERVE_S - MIN_MODEL_S), args.dry_run)
    for pin in pins:
        left = deadline - time.time() - RESERVE_S
        if left < MIN_MODEL_S:
            append_row(out, {"kind": "build", "model": pin.name, "status": "skipped (deadline)"})
            continue
        cmd = [sys.executable, "-u", __file__, "--one", pin.name, "--out", str(out), "--config", args.config,
               "--repeats", str(args.repeats)] + (["--dry-run"] if args.dry_run else [])
        rc = run_streamed(cmd, out / "models.log", left)
        if rc != 0:
            append_row(out, {"kind": "model-end", "model": pin.name, "rc": rc})
    if not args.no_extras and not args.dry_run and deadline - time.time() > EXTRAS_MIN_S:
        extras(out, deadline - RESERVE_S)
    append_row(out, {"kind": "end", "status": "done", "seconds": round(time.time() - start, 1)})
    from measured_table import render_summary  # tests/gpu/measured_table.py, beside this file
    (out / "summary.md").write_text(render_summary(read_rows(out / RESULTS)))
    return 0


def select(pins: list[Pinned], names: str | None) -> list[Pinned]:
    """The pinned models named by --models (all when None), in the order given."""
    if not names:
        return pins
    by = {p.name: p for p in pins}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in by]
    if unknown:
        raise SystemExit(f"headline: error: {', '.join(unknown)} not in {CONFIG.name} "
                         f"(pinned: {', '.join(by)}); run --pin --models {','.join(unknown)} first")
    return [by[n] for n in wanted]


def main_one(args: argparse.Namespace) -> int:
    """Child process: one model's rows."""
    _, pins = load_config(Path(args.config))
    pin = select(pins, args.one)[0]
    with tempfile.TemporaryDirectory(prefix=f"hl-{pin.name}-") as tmp:
        model_rows(pin, Path(args.out), Path(tmp), args.repeats, args.dry_run)
    return 0


def main_pin(args: argparse.Namespace) -> int:
    """On the CPU machine: each model's full GPU build with the searches (nvcc/ptxas), stored as its pin."""
    import yaml

    from rammer.build import build_model
    from rammer.zoo import generate
    import onnx
    commit, pins = load_config(Path(args.config)) if Path(args.config).is_file() else ("", [])
    names = [n.strip() for n in (args.models or ",".join(p.name for p in pins)).split(",") if n.strip()]
    by = {p.name: p for p in pins}
    for name in names:
        old = by.get(name, Pinned(name))
        with tempfile.TemporaryDirectory(prefix=f"hl-pin-{name}-") as tmp:
            path = Path(tmp) / "m.onnx"
            onnx.save(generate(name), str(path))
            t0 = time.perf_counter()
            built = build_model(path, Path(tmp) / "b", policy=old.policy, target="gpu", profile="model",
                                precision=old.precision, quiet=False)
            plan = json.loads((Path(tmp) / "b" / "plan.json").read_text())
            stats = built.manifest.stats
            by[name] = Pinned(name, old.policy, built.manifest.veus, stats.get("veus_per_sm"), old.precision,
                              plan_digest(plan), stats.get("predicted_us"),
                              [f"pinned by --pin in {time.perf_counter() - t0:.0f} s on the CPU machine"])
            print(f"{name}: {by[name].veus} vEUs, {by[name].veus_per_sm}/SM, digest {by[name].plan_digest}",
                  flush=True)
    data = {"commit": git_commit(), "models": [asdict(by[n]) for n in [p.name for p in pins] + names if n in by]}
    seen: set[str] = set()
    data["models"] = [m for m in data["models"] if not (m["name"] in seen or seen.add(m["name"]))]
    header = ("# Pinned build configurations of the GPU headline (tests/gpu/headline.py). Written by\n"
              "# `python3 tests/gpu/headline.py --pin`: the full GPU build's searches run on the CPU machine (nvcc);\n"
              "# the device rebuilds with these values and records whether its plan digest is the same.\n")
    Path(args.config).write_text(header + yaml.safe_dump(data, sort_keys=False))
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "gpu-out"), help="results folder (default $OUT)")
    p.add_argument("--budget", type=float, default=400.0, help="seconds for the whole run (default 400)")
    p.add_argument("--models", help="comma-separated subset of the pinned models, in this order")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per variant (default 50; dry run 3)")
    p.add_argument("--config", default=str(CONFIG), help="pinned configurations (default tests/gpu/headline.yaml)")
    p.add_argument("--dry-run", action="store_true", help="CPU emulator, --small models, a few repeats (CI)")
    p.add_argument("--no-micro", action="store_true", help="skip the runtime micro-benchmark")
    p.add_argument("--no-extras", action="store_true", help="skip compute-sanitizer and pytest -m gpu")
    p.add_argument("--pin", action="store_true", help="decide and store the configurations (CPU machine, nvcc)")
    p.add_argument("--one", help=argparse.SUPPRESS)  # child: one model
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 3 if args.dry_run else 50
    if args.repeats < 1 or args.budget <= 0:
        p.error("--repeats and --budget must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Dispatch: --pin, a child's --one, or the run."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    args = parse(argv)
    if args.pin:
        return main_pin(args)
    if args.one:
        return main_one(args)
    return main_run(args)


if __name__ == "__main__":
    raise SystemExit(main())
