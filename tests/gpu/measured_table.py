#!/usr/bin/env python3
"""The "Measured" table of BENCHMARKS.md, from a headline run's results.jsonl (tests/gpu/headline.py).

    python3 tests/gpu/measured_table.py results/h100-DATE/results.jsonl [--update BENCHMARKS.md]

Prints the table; `--update` replaces what lies between the `<!-- measured:begin -->` and `<!-- measured:end -->`
markers of the file. Every figure comes from a row the device wrote: nothing here is predicted except the columns
that say so (the build's own cost model, for comparison).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # rammer, where the tree is not installed

BEGIN, END = "<!-- measured:begin -->", "<!-- measured:end -->"
PERSISTENT = "rammer"
# variants that are not a way a user would launch the model without this project's persistent build
NOT_BASELINES = {PERSISTENT, "rammer-ios"}


def _ms(v: Any) -> str:
    """A latency in ms, or a dash."""
    return f"{v:.3f}" if isinstance(v, (int, float)) else "–"


def sm_clock(clocks: str) -> str:
    """The SM clock line of `nvidia-smi -q -d CLOCK` (current, then max), or '?'."""
    found = re.findall(r"^\s*SM\s*:\s*(\d+ MHz)", clocks or "", flags=re.M)
    return " / max ".join(found[:1] + found[2:3]) if found else "?"


def model_table(rows: list[dict[str, Any]]) -> str:
    """One row per model: the persistent build, every baseline that ran and matched, the strongest of them and the
    ratio against it, and the build's predictions beside them."""
    builds = {r["model"]: r for r in rows if r.get("kind") == "build"}
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r.get("kind") == "variant":
            by_model.setdefault(r["model"], {})[r["name"]] = r
    names: list[str] = []
    for vs in by_model.values():
        names += [n for n in vs if n not in names]
    head = ["model", "vEUs (per SM)", "same plan as pinned"] + [f"{n} ms" for n in names] + [
        "strongest baseline", "rammer vs strongest", "predicted rammer / strongest µs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model in list(builds) + [m for m in by_model if m not in builds]:
        b, vs = builds.get(model, {}), by_model.get(model, {})
        ok = {n: v["median_ms"] for n, v in vs.items() if v.get("status") == "ok"}
        base = {n: t for n, t in ok.items() if n not in NOT_BASELINES}
        strongest = min(base, key=base.__getitem__) if base else None
        ratio = (f"{base[strongest] / ok[PERSISTENT]:.2f}x" if strongest and PERSISTENT in ok else "–")
        cells = [model, f"{b.get('veus', '–')} ({b.get('veus_per_sm', '–')})",
                 {True: "yes", False: "**no**"}.get(b.get("same_plan"), "–")]
        cells += [_ms(ok.get(n)) if n in ok else (vs[n].get("status", "–") if n in vs else "–") for n in names]
        pb = b.get("predicted_baselines_us") or {}
        pred_strong = min(pb.values()) if pb else None
        cells += [strongest or "–", ratio,
                  f"{b.get('predicted_us', '–')} / {pred_strong if pred_strong is not None else '–'}"]
        if b.get("status") not in (None, "ok"):
            cells[2] = f"build {b.get('status')}: {b.get('note', '')[:60]}"
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def render_summary(rows: list[dict[str, Any]]) -> str:
    """The whole summary: where and when it ran, then the table, then what did not finish."""
    pre = next((r for r in rows if r.get("kind") == "preflight"), {})
    start = next((r for r in rows if r.get("kind") == "start"), {})
    end = next((r for r in rows if r.get("kind") == "end"), None)
    device = (pre.get("nvidia_smi") or "?").splitlines()[0] if pre else "?"
    head = [f"Device: {device}; SM clock {sm_clock(pre.get('clocks', ''))}; commit {pre.get('commit', '?')} "
            f"(configurations pinned at {start.get('pinned_at') or '?'}); run {start.get('time', '?')}"
            + ("; DRY RUN on the CPU emulator (no GPU figures)" if pre.get("dry_run") else "") + ".",
            ("Emulator wall-clock times of a dry run: they test the script, they are no GPU figures; outputs checked "
             "against onnxruntime." if pre.get("dry_run") else
             "Medians of CUDA-event timings after warm-up; outputs checked against onnxruntime before timing "
             "(tests/gpu/headline.py).") + " 'predicted' columns are the build's cost model, not measurements.", "",
            model_table(rows)]
    rates = [r for r in rows if r.get("kind") == "kernel" and "ours_us" in r]
    if rates:
        from rammer.kernel_rates import render
        head += ["", "Kernel rates: each GEMM / convolution of the pinned builds alone, its kernels against the vendor "
                 "library's call on the same buffers (rammer.kernel_rates).", "",
                 "\n".join(f"{m}:\n\n" + render([r for r in rates if r["model"] == m])
                           for m in dict.fromkeys(r["model"] for r in rates))]
    missing = pre.get("missing") or []
    if missing:
        head.append(f"\nPreflight missing: {', '.join(missing)}")
    errors = [r for r in rows if r.get("status") in ("error", "mismatch") or r.get("kind") == "model-end"]
    for r in errors:
        head.append(f"- {r.get('model', '')} {r.get('name', r.get('kind'))}: {r.get('status', r.get('rc'))} "
                    f"{r.get('note', '')[:200]}")
    head.append("\n" + (f"Run ended: {end.get('status')} after {end.get('seconds')} s." if end else
                        "Run did not reach its end (killed or timed out): the rows above are what finished."))
    return "\n".join(head) + "\n"


def update(path: Path, text: str) -> None:
    """Replace the measured section of a Markdown file (between the markers), atomically."""
    doc = path.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{path}: error: no '{BEGIN}' ... '{END}' markers to replace")
    before, rest = doc.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{before}{BEGIN}\n{text}{END}{after}")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    """CLI."""
    from headline import read_rows
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="a headline run's results.jsonl")
    p.add_argument("--update", metavar="FILE", help="replace the measured section of this Markdown file")
    args = p.parse_args(argv)
    rows = read_rows(Path(args.results))
    if not rows:
        raise SystemExit(f"{args.results}: error: no complete result rows")
    text = render_summary(rows)
    if args.update:
        update(Path(args.update), text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
