#!/usr/bin/env python3
"""Per-model times of built models (issue: `rammer build` on a GPU): the test models of tests/test_build.py and
the zoo at --small, each built with every policy, checked against onnxruntime, then timed three ways with the
executors' own CUDA events (persistent rPrograms, one launch per op, those launches in a CUDA Graph).

    python tests/gpu/models.py [--target gpu|cpu] [--models mlp,lstm,...] [--repeats N] [--out table.md]

`--target cpu` is a dry run on the emulator (emulated wall time; the CUDA Graph column is n/a)."""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_build import ort_outputs  # noqa: E402
from test_scheduler import MODELS, feeds_for  # noqa: E402

from rammer.build import build_model  # noqa: E402
from rammer.zoo import NAMES, generate  # noqa: E402

POLICIES = ("wavefront", "ios", "sequential")
KINDS = ("persistent", "op-by-op", "graph")


def models(names: list[str]) -> dict[str, onnx.ModelProto]:
    """Test models by name, zoo models (at --small) as `zoo:NAME`."""
    out = {}
    for name in names:
        out[name] = generate(name[4:], small=True) if name.startswith("zoo:") else MODELS[name]()
    return out


def max_rel_error(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> float:
    """Largest |got - want| over all outputs, relative to each reference's magnitude."""
    return max(float(np.abs(got[k].astype(np.float64) - v).max()) / max(float(np.abs(v).max()), 1e-6)
               for k, v in want.items())


def one(name: str, model: onnx.ModelProto, policy: str, target: str, repeats: int, work: Path) -> list[str]:
    """Build, check, time: one table row."""
    path = work / f"{name.replace(':', '_')}.onnx"
    onnx.save(model, path)
    t0 = time.perf_counter()
    built = build_model(path, work / f"{path.stem}-{policy}", policy=policy, target=target, quiet=True)
    build_s = time.perf_counter() - t0
    feeds = feeds_for(model, seed=1)
    err = max_rel_error(built.run(feeds), ort_outputs(model, feeds))
    times = []
    for kind in KINDS:
        try:
            built.run(feeds, kind=kind)
            times.append(f"{1e3 * built.executor(kind).time(repeats):.1f}")
        except Exception as exc:  # the CUDA Graph executor on the CPU, or a failing executor: say so in the row
            times.append(f"n/a ({type(exc).__name__})")
    s = built.manifest.stats
    return [name, policy, f"{build_s:.1f}", str(s["rtasks"]), str(s["barrier_rtasks"]), f"{s['predicted_us']:.1f}",
            *times, f"{err:.1e}", "PASS" if err <= 1e-4 else "FAIL"]


def main() -> int:
    """Every model x policy; a markdown table on stdout (and in --out)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=["gpu", "cpu"], default="gpu")
    ap.add_argument("--models", default=",".join([*MODELS, *(f"zoo:{n}" for n in NAMES)]))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    head = ["model", "policy", "build (s)", "rTasks", "barrier-rTasks", "predicted (µs)",
            *(f"{k} (µs)" for k in KINDS), "max rel err", "check"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    print(lines[0], flush=True)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="rammer-models-") as tmp:
        for name, model in models(args.models.split(",")).items():
            for policy in args.policies.split(","):
                try:
                    cells = one(name, model, policy, args.target, args.repeats, Path(tmp))
                except Exception as exc:
                    cells = [name, policy, f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"]
                failed += cells[-1] != "PASS"
                lines.append("| " + " | ".join(cells) + " |")
                print(lines[-1], flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
