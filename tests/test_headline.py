"""The GPU headline script (tests/gpu/headline.py) on the CPU: its dry run takes the device run's code path on the
emulator, a kill at any point keeps every finished row, and the measured table reads those rows right."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rammer.zoo import NAMES

GPU_DIR = Path(__file__).resolve().parent / "gpu"
sys.path.insert(0, str(GPU_DIR))

import headline  # noqa: E402
import measured_table  # noqa: E402
from rammer.bench import RTOL  # noqa: E402

SCRIPT = GPU_DIR / "headline.py"


def _rows(out: Path) -> list[dict]:
    return headline.read_rows(out / headline.RESULTS)


def test_pinned_configs_name_real_models_and_precisions():
    """Every pinned model is a zoo model with a precision and policy the build accepts."""
    from kernel_corpus.bindings import PRECISIONS
    _, pins = headline.load_config()
    assert {p.name for p in pins} >= {"lstm-tc", "resnext", "transformer"}
    for p in pins:
        assert p.name in NAMES and p.precision in PRECISIONS and p.policy in ("wavefront", "ios", "sequential")
        assert p.veus is None or p.veus >= 1


@pytest.mark.slow
def test_dry_run_every_headline_model_matches_onnxruntime(tmp_path):
    """The device run's code path on the emulator: preflight, micro stage, each pinned model built, the persistent
    build and op by op checked against onnxruntime (status ok only within rammer.bench's tolerance), the CUDA
    Graph row present and honest about the CPU, a summary written."""
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out), "--budget", "900"],
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = _rows(out)
    kinds = [r["kind"] for r in rows]
    assert kinds[0] == "start" and kinds[1] == "preflight" and kinds[-1] == "end"
    assert rows[1]["missing"] == [], rows[1]
    assert any(r["kind"] == "micro" for r in rows)
    _, pins = headline.load_config()
    for pin in pins:
        build = [r for r in rows if r["kind"] == "build" and r["model"] == pin.name]
        assert len(build) == 1 and build[0]["status"] == "ok", build
        variants = {r["name"]: r for r in rows if r["kind"] == "variant" and r["model"] == pin.name}
        for name in ("rammer", "rammer-op-by-op", "op-by-op"):  # the build's and the launch baselines' executors
            assert variants[name]["status"] == "ok", variants[name]
            assert variants[name]["max_err"] <= RTOL
        for name in ("rammer-graph", "cuda-graph", "library-graph"):  # graphs need a GPU: rows with the reason
            assert variants[name]["status"] == "unavailable", variants[name]
        kernels = [r for r in rows if r["kind"] == "kernel" and r["model"] == pin.name]
        assert kernels and all(r.get("status") != "error" for r in kernels), kernels[-1:]
        assert all(r["agree"] for r in kernels if r.get("library")), kernels  # the library computes what ours did
    summary = (out / "summary.md").read_text()
    assert "DRY RUN" in summary and all(p.name in summary for p in pins) and "Kernel rates" in summary


@pytest.mark.slow
def test_a_kill_mid_run_keeps_the_finished_rows(tmp_path):
    """SIGKILL of the whole run once the first variant row exists: every line written is a complete row (the torn
    tail, if any, is skipped), the finished rows are all there, and the table renders from them."""
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out), "--budget", "900",
                             "--no-micro"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 600  # watchdog: the first model's first variant row, or fail
    try:
        while not any(r["kind"] == "variant" for r in _rows(out)):
            assert proc.poll() is None, "the dry run ended before writing a variant row"
            assert time.time() < deadline, "no variant row within 600 s"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    raw = (out / headline.RESULTS).read_text()
    complete = [ln for ln in raw.splitlines(keepends=True) if ln.endswith("\n")]
    assert all(json.loads(ln) for ln in complete)
    rows = _rows(out)
    assert [r["kind"] for r in rows[:3]] == ["start", "preflight", "build"]
    assert not any(r["kind"] == "end" for r in rows)
    # a torn last line (a kill inside a write) is skipped, the rows before it kept
    with open(out / headline.RESULTS, "a") as f:
        f.write('{"kind": "variant", "model": "x", "na')
    assert _rows(out) == rows
    text = measured_table.render_summary(rows)
    assert "did not reach its end" in text and rows[2]["model"] in text


def _variant(model: str, name: str, ms: float | None, status: str = "ok") -> dict:
    return {"kind": "variant", "model": model, "name": name, "status": status, "median_ms": ms}


def test_measured_table_names_the_strongest_baseline_and_its_ratio():
    """By hand: baselines 2.7, 2.577 (graph), 3.2 ms, a faster mismatching one ignored, rammer 4.736 ms: the
    strongest is the graph, and rammer is 2.577 / 4.736 = 0.54x of it."""
    rows = [{"kind": "preflight", "nvidia_smi": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: x)",
             "clocks": "Clocks\n    Graphics : 1980 MHz\n    SM : 1980 MHz\nMax Clocks\n    Graphics : 1980 MHz\n"
                       "    SM : 1980 MHz\n", "commit": "abc", "dry_run": False},
            {"kind": "build", "model": "resnext", "status": "ok", "veus": 132, "veus_per_sm": 1, "same_plan": True,
             "predicted_us": 1500.0, "predicted_baselines_us": {"op-by-op": 1100.0, "cuda-graph": 915.0}},
            _variant("resnext", "rammer", 4.736), _variant("resnext", "rammer-base", 2.7),
            _variant("resnext", "cuda-graph", 2.577), _variant("resnext", "pytorch", 3.2),
            _variant("resnext", "torch-compile", 1.0, "mismatch")]
    table = measured_table.model_table(rows)
    line = next(ln for ln in table.splitlines() if ln.startswith("| resnext"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[-3] == "cuda-graph" and cells[-2] == f"{2.577 / 4.736:.2f}x"
    assert cells[-1] == "1500.0 / 915.0" and "mismatch" in cells
    assert "1980 MHz" in measured_table.render_summary(rows)


def test_update_replaces_only_the_measured_section(tmp_path):
    """--update rewrites what lies between the markers and nothing else; a file without them is refused."""
    doc = tmp_path / "B.md"
    doc.write_text(f"# top\nkeep\n{measured_table.BEGIN}\nold\n{measured_table.END}\nafter\n")
    measured_table.update(doc, "new table\n")
    assert doc.read_text() == f"# top\nkeep\n{measured_table.BEGIN}\nnew table\n{measured_table.END}\nafter\n"
    bare = tmp_path / "C.md"
    bare.write_text("no markers\n")
    with pytest.raises(SystemExit):
        measured_table.update(bare, "x")
    assert bare.read_text() == "no markers\n"


def test_benchmarks_md_has_the_measured_markers(repo_root):
    """The measured table has a place in BENCHMARKS.md for the script to fill."""
    text = (repo_root / "BENCHMARKS.md").read_text()
    assert text.count(measured_table.BEGIN) == 1 and text.count(measured_table.END) == 1


def test_unknown_model_is_one_line(tmp_path):
    """--models naming an unpinned model stops before any work, naming what is pinned."""
    res = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path), "--models", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "nope not in headline.yaml" in res.stderr
    assert not (tmp_path / headline.RESULTS).exists()
