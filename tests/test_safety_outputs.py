"""Issue 30, first family: one write path for every command. A hostile user's outputs: every command that writes
refuses, in one line, to write over, into or above any of the run's inputs (sources, every header the parse opens,
-include files, specs, models, the build, the compile database); folder outputs never mix with a folder of the
user's; deletions only of files the tool wrote, inside its output. And crash safety: a simulated kill at every
filesystem step of a rebuild and of convert-all, each followed by the next run."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_scheduler import mlp_model

from rammer.build import build_model
from rammer.runtime import BuildError
from toolchain import files as tfiles
from toolchain.files import Inputs, OutputError, own_path, remove_own

REPO = Path(__file__).resolve().parent.parent


def cli(tool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); from {tool}.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd or REPO, capture_output=True, text=True,
                          timeout=600)


def refused(res: subprocess.CompletedProcess, *needles: str) -> str:
    """Non-zero, no traceback, one error line holding every needle."""
    assert res.returncode != 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith(
        ("note:", "rammer build ", "  ", "Usage: ", "Try '"))]  # click's usage lines around its one error
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under root: file bytes, link targets, empty folders (what a user would miss)."""
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_file():
            out[rel] = p.read_bytes()
        elif p.is_dir() and not any(p.iterdir()):
            out[rel] = "empty dir"
    return out


KERNEL = """\
#include "inc/common.h"
#if 0
#include "never.h"
#endif
__global__ void k(float* a, int n) { int i = threadIdx.x; if (i < n) a[i] = scale(2.0f); }
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "common.h").write_text("__device__ inline float scale(float x) { return x * 3.0f; }\n")
    (tmp_path / "never.h").write_text("// only under #if 0\n")
    (tmp_path / "pre.h").write_text("#define PRE 1\n")
    (tmp_path / "k.cu").write_text(KERNEL)
    (tmp_path / "k.yaml").write_text("kernel: k\ngrid: [1]\nblock: [32]\nargs:\n"
                                     "  - {name: a, kind: buffer, dtype: float32, size: 32}\n"
                                     "  - {name: n, kind: scalar, dtype: int32, value: 32}\noutputs: [a]\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "file": "k.cu", "arguments": ["nvcc", "-DFROM_DB=1", "-c", "k.cu"]}]))
    return tmp_path


@pytest.mark.parametrize("case", ["header", "header-under-if0", "forced-include", "source-hardlink", "spec-o-source",
                                  "spec-o-header", "compile-db", "run-save-header", "run-save-spec",
                                  "run-save-db"])
def test_no_command_writes_over_a_file_its_run_reads(project: Path, case: str) -> None:
    before = snapshot(project)
    k, spec = str(project / "k.cu"), str(project / "k.yaml")
    if case == "source-hardlink":
        os.link(project / "k.cu", project / "hard.cu")
        before = snapshot(project)
    args = {
        "header": ["convert", k, "-o", str(project / "inc" / "common.h")],
        "header-under-if0": ["convert", k, "-o", str(project / "never.h")],
        "forced-include": ["convert", k, "-include", str(project / "pre.h"), "-o", str(project / "pre.h")],
        "source-hardlink": ["convert", k, "-o", str(project / "hard.cu")],
        "spec-o-source": ["spec", k, "--kernel", "k", "-o", k],
        "spec-o-header": ["spec", k, "--kernel", "k", "-o", str(project / "inc" / "common.h")],
        "compile-db": ["convert", k, "-p", str(project / "build"), "-o", str(project / "build" / "compile_commands.json")],
        "run-save-header": ["run", k, "--spec", spec, "--save", str(project / "inc" / "common.h")],
        "run-save-spec": ["run", k, "--spec", spec, "--save", spec],
        "run-save-db": ["run", k, "--spec", spec, "-p", str(project / "build"),
                        "--save", str(project / "build" / "compile_commands.json")],
    }[case]
    line = refused(cli("rtransform", *args))
    assert "an input of this run" in line, line
    assert snapshot(project) == before


def test_a_header_the_converted_metadata_would_overwrite_is_refused(project: Path) -> None:
    """convert writes OUT and OUT's .rkernels.json: the second may be an input too."""
    (project / "inc" / "x.rkernels.json").write_text("{}")
    (project / "k2.cu").write_text('#include "inc/x.rkernels.json"\n' + KERNEL)
    before = snapshot(project)
    refused(cli("rtransform", "convert", str(project / "k2.cu"), "-o", str(project / "inc" / "x.cu")),
            "an input of this run")
    assert snapshot(project) == before


def test_a_header_reached_only_through_a_macro_is_an_input_too(project: Path) -> None:
    """The parse's own list of opened files catches what a textual scan cannot (#include MACRO)."""
    (project / "m.cu").write_text('#define HDR "inc/common.h"\n#include HDR\n'
                                  "__global__ void k(float* a) { a[threadIdx.x] = scale(1.0f); }\n")
    before = snapshot(project)
    refused(cli("rtransform", "convert", str(project / "m.cu"), "-o", str(project / "inc" / "common.h")),
            "an input of this run")
    assert snapshot(project) == before


def test_a_symlinked_output_is_written_through_and_stays_a_link(project: Path) -> None:
    (project / "outs").mkdir()
    (project / "latest.cu").symlink_to("outs/real.cu")
    res = cli("rtransform", "convert", str(project / "k.cu"), "-o", str(project / "latest.cu"))
    assert res.returncode == 0, res.stderr
    assert (project / "latest.cu").is_symlink() and "k__rtask" in (project / "outs" / "real.cu").read_text()


@pytest.mark.parametrize("name", ["plan-over-model", "zoo-over-folder", "bench-into-models-folder"])
def test_rammer_outputs_never_replace_an_input_or_a_folder(tmp_path: Path, name: str) -> None:
    onnx.save(mlp_model(2), tmp_path / "m.onnx")
    before = snapshot(tmp_path)
    args = {"plan-over-model": ["plan", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.onnx")],
            "zoo-over-folder": ["zoo", "lstm-tc", "--small", "-o", str(tmp_path)],
            "bench-into-models-folder": ["bench", str(tmp_path / "m.onnx"), "--out", str(tmp_path)]}[name]
    refused(cli("rammer", *args))
    assert snapshot(tmp_path) == before


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("b")
    onnx.save(mlp_model(2), root / "m.onnx")
    build_model(root / "m.onnx", root / "b", target="cpu", veus=2, quiet=True)
    return root / "b"


@pytest.mark.parametrize("target", ["build.json", "plan.json", "rkernels", ".", "../b/program.cu"])
def test_run_save_never_damages_the_build(built: Path, target: str) -> None:
    before = snapshot(built)
    refused(cli("rammer", "run", str(built), "--save", str(built / target)))
    assert snapshot(built) == before


def test_build_output_may_not_hold_the_model_its_data_or_a_library(tmp_path: Path) -> None:
    (tmp_path / "proj" / "lib").mkdir(parents=True)
    onnx.save(mlp_model(2), tmp_path / "proj" / "m.onnx")
    (tmp_path / "proj" / "lib" / "bindings.yaml").write_text("library: x\nops: []\n")
    before = snapshot(tmp_path)
    for out in (tmp_path, tmp_path / "proj", tmp_path / "proj" / "m.onnx"):
        with pytest.raises(BuildError, match="error: -o"):
            build_model(tmp_path / "proj" / "m.onnx", out, target="cpu", veus=2, quiet=True)
    with pytest.raises(BuildError, match="a user kernel library"):
        build_model(tmp_path / "proj" / "m.onnx", tmp_path / "proj" / "lib", target="cpu", veus=2, quiet=True,
                    user_libs=[str(tmp_path / "proj" / "lib")])
    assert snapshot(tmp_path) == before


def test_guard_rules_directly(tmp_path: Path) -> None:
    """The guard's own contract: over, into a sealed folder, above; a long name; a missing folder; a FIFO."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.cu").write_text("x")
    (tmp_path / "sealed").mkdir()
    g = Inputs().file(tmp_path / "src" / "a.cu").folder(tmp_path / "sealed", sealed=True)
    for bad, needle in [(tmp_path / "src" / "a.cu", "is "), (tmp_path / "sealed" / "new.txt", "lies inside"),
                        (tmp_path / "src", "holds"), (tmp_path / ("x" * 253 + ".cu"), "file name of 256 bytes"),
                        (tmp_path / "no" / "dir" / "o.npz", "does not exist")]:
        with pytest.raises(OutputError, match=needle):
            g.check_file(bad)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OutputError, match="not a regular file"):
        g.check_file(tmp_path / "fifo")
    with pytest.raises(OutputError, match="holds"):
        g.check_folder(tmp_path)
    assert g.check_file(tmp_path / "src" / "b.cu") == (tmp_path / "src" / "b.cu").resolve()


def test_deletions_stay_inside_and_only_touch_what_was_written(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "victim.txt").write_text("keep")
    (tmp_path / "out" / "link").symlink_to(tmp_path)
    (tmp_path / "out" / "mine.txt").write_text("ours")
    for rel in ["../victim.txt", str(tmp_path / "victim.txt"), "link/victim.txt", "", ".", "a/../../victim.txt"]:
        assert own_path(tmp_path / "out", rel) is None, rel
        assert not remove_own(tmp_path / "out", rel)
    assert (tmp_path / "victim.txt").read_text() == "keep"
    assert not remove_own(tmp_path / "out", "mine.txt", digest="0" * 64)  # edited since: not ours to delete
    assert remove_own(tmp_path / "out", "mine.txt", digest=tfiles.sha256_file(tmp_path / "out" / "mine.txt"))


# ---- convert-all ----------------------------------------------------------------------------------------------
def tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "a.cu").write_text("__global__ void a(float* x) { x[threadIdx.x] = 1.0f; }\n")
    (root / "sub" / "b.cu").write_text("__device__ float two() { return 2.0f; }\n")
    (root / "r.cu").write_text('__global__ void r(float* x) { unsigned b; asm("mov.u32 %0, %%ctaid.x;" : "=r"(b)); '
                               "x[b] = 1; }\n")
    return root


def convert_all(src: Path, out: Path) -> dict:
    from rtransform import batch
    return batch.convert_all(src, out, jobs=1)


@pytest.mark.parametrize("where", ["holds-sources", "parent-of-input", "users-folder", "source-itself"])
def test_convert_all_refuses_folders_that_are_not_its_own(tmp_path: Path, where: str) -> None:
    src = tree(tmp_path / "proj" / "src")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "util.cu").write_text("// the user's\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    out = {"holds-sources": tmp_path / "lib", "parent-of-input": tmp_path / "proj", "users-folder": tmp_path / "notes",
           "source-itself": src}[where]
    before = snapshot(tmp_path)
    res = cli("rtransform", "convert-all", str(src), "-o", str(out))
    assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, \
        res.stderr
    assert snapshot(tmp_path) == before


def test_convert_all_keeps_the_users_files_in_its_own_folder(tmp_path: Path) -> None:
    src = tree(tmp_path / "src")
    out = tmp_path / "out"
    convert_all(src, out)
    (out / "NOTES.md").write_text("mine")
    (out / "a.cu").unlink()
    (out / "a.cu").write_text("my own a.cu")  # the user replaced an output of ours: it is theirs now?
    cache = json.loads((out / ".convert-all-cache.json").read_text())
    cache["entries"]["a.cu"]["outputs"].pop("a.cu")  # ... once the cache no longer lists it as ours
    (out / ".convert-all-cache.json").write_text(json.dumps(cache))
    (src / "a.cu").write_text((src / "a.cu").read_text() + "// edited\n")
    report = convert_all(src, out)
    a = next(f for f in report["files"] if f["path"] == "a.cu")
    assert a["status"] == "failed" and "is not an output of convert-all" in a["reason"]
    assert (out / "a.cu").read_text() == "my own a.cu" and (out / "NOTES.md").read_text() == "mine"


def test_convert_all_stale_outputs_from_an_edited_cache_are_never_deleted_outside(tmp_path: Path) -> None:
    src = tree(tmp_path / "src")
    out = tmp_path / "out"
    convert_all(src, out)
    victim = tmp_path / "victim.cu"
    victim.write_text("precious")
    digest = tfiles.sha256_file(victim)
    cache = json.loads((out / ".convert-all-cache.json").read_text())
    cache["entries"]["gone.cu"] = {"key": "x", "record": {}, "outputs": {"../victim.cu": digest}}
    cache["entries"]["gone2.cu"] = {"key": "x", "record": {}, "outputs": {str(victim): digest}}
    (out / "link").symlink_to(tmp_path)
    cache["entries"]["gone3.cu"] = {"key": "x", "record": {}, "outputs": {"link/victim.cu": digest}}
    (out / ".convert-all-cache.json").write_text(json.dumps(cache))
    convert_all(src, out)
    assert victim.read_text() == "precious"
    # a vanished source's outputs go, unless the user edited them since
    (src / "sub" / "b.cu").unlink()
    (src / "a.cu").unlink()
    (out / "a.cu").write_text((out / "a.cu").read_text() + "// my edit\n")
    convert_all(src, out)
    assert not (out / "sub" / "b.cu").exists() and not (out / "sub").exists()
    assert (out / "a.cu").read_text().endswith("// my edit\n")


@pytest.mark.parametrize("kind", ["fifo-source", "fifo-include", "long-name", "non-utf8-name"])
def test_convert_all_odd_files_fail_alone_and_the_report_is_written(tmp_path: Path, kind: str) -> None:
    src = tree(tmp_path / "src")
    if kind == "fifo-source":
        os.mkfifo(src / "pipe.cu")
    elif kind == "fifo-include":
        os.mkfifo(src / "hdr.h")
        (src / "inc.cu").write_text('#include "hdr.h"\n__global__ void i(float* x) { x[0] = 1; }\n')
    elif kind == "long-name":
        (src / ("k" * 250 + ".cu")).write_text("__global__ void lk(float* x) { x[0] = 1; }\n")
    else:
        with open(os.fsencode(src) + b"/caf\xe9.cu", "w") as fh:
            fh.write("__global__ void nu(float* x) { x[0] = 1; }\n")
    res = cli("rtransform", "convert-all", str(src), "-o", str(tmp_path / "out"), "--json")
    assert "Traceback" not in res.stderr, res.stderr
    report = json.loads(res.stdout)
    assert json.loads((tmp_path / "out" / "report.json").read_text())["counts"] == report["counts"]
    assert {f["path"]: f["status"] for f in report["files"]}["a.cu"] == "converted"
    odd = [f for f in report["files"] if f["path"] not in ("a.cu", "r.cu", "sub/b.cu")]
    assert len(odd) == 1
    if kind.startswith("fifo"):
        assert odd[0]["status"] == "failed" and ("FIFO" in odd[0]["reason"]), odd[0]
    table = cli("rtransform", "convert-all", str(src), "-o", str(tmp_path / "out"))
    assert "Traceback" not in table.stderr and table.stdout.strip(), table.stderr


# ---- crash safety: a simulated kill at every step --------------------------------------------------------------
class Snapshots:
    """The step hook of the crash tests: before each filesystem step, a copy of the whole tree (the state a kill at
    that instant would leave)."""

    def __init__(self, root: Path, dest: Path):
        self.root, self.dest, self.steps = root, dest, []

    def __call__(self, step: str) -> None:
        snap = self.dest / f"s{len(self.steps):03d}"
        shutil.copytree(self.root, snap, symlinks=True)
        self.steps.append((step, snap))

    def run(self, fn, *args, **kwargs):
        """fn(*args, **kwargs) with a snapshot before each of its filesystem steps."""
        tfiles.set_step_hook(self)
        try:
            return fn(*args, **kwargs)
        finally:
            tfiles.set_step_hook(None)


def user_files(root: Path) -> None:
    """A user's things inside a build folder: notes, a saved output, symlinks (to a file, a folder, nowhere),
    an empty folder, a file inside rkernels/."""
    (root / "NOTES.md").write_text("my notes")
    (root / "runs").mkdir()
    np.save(root / "runs" / "out.npy", np.arange(3))
    (root / "empty").mkdir()
    (root / "to-notes").symlink_to("NOTES.md")
    (root / "to-runs").symlink_to("runs")
    (root / "dangling").symlink_to("nowhere")
    (root / "rkernels" / "my_kernel.cu").write_text("// mine")


def test_a_kill_at_every_step_of_a_rebuild_loses_nothing(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    onnx.save(mlp_model(2), root / "m.onnx")
    (root / "real").mkdir()
    (root / "b").symlink_to("real")  # -o through a symlink: the link stays
    build_model(root / "m.onnx", root / "b", target="cpu", veus=2, quiet=True)
    user_files(root / "real")
    mine = {k: v for k, v in snapshot(root / "real").items() if not k.startswith(tuple(
        json.loads((root / "real" / "build.json").read_text())["files"]))}
    old = snapshot(root / "real")
    hook = Snapshots(root, tmp_path / "snaps")
    hook.run(build_model, root / "m.onnx", root / "b", target="cpu", veus=3, quiet=True)
    new = snapshot(root / "real")
    assert (root / "b").is_symlink() and {k: new[k] for k in mine} == mine
    assert len(hook.steps) > 15, [s for s, _ in hook.steps]
    outcomes = set()
    from toolchain.outdir import finish_pending
    for step, snap in hook.steps:
        finish_pending(snap / "real")  # what the next run (build, or `rammer run`) does first
        after = snapshot(snap / "real")
        assert {k: after.get(k) for k in mine} == mine, step  # the user's files never moved
        assert after in (old, new), (step, set(after) ^ set(new))
        outcomes.add("old" if after == old else "new")
    assert outcomes == {"old", "new"}
    # and the next build over a folder killed mid-swap finishes the swap, then rebuilds
    mid = next(snap for step, snap in hook.steps if step.startswith("move "))
    build_model(mid / "m.onnx", mid / "b", target="cpu", veus=2, quiet=True)
    assert {k: v for k, v in snapshot(mid / "real").items() if k in mine} == mine
    assert json.loads((mid / "real" / "build.json").read_text())["num_veus"] == 2


def test_a_kill_during_a_first_build_leaves_no_build_and_the_next_run_builds(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    onnx.save(mlp_model(2), root / "m.onnx")
    hook = Snapshots(root, tmp_path / "snaps")
    hook.run(build_model, root / "m.onnx", root / "b", target="cpu", veus=2, quiet=True)
    final = snapshot(root / "b")
    from toolchain.outdir import finish_pending
    for step, snap in hook.steps:
        if (snap / "b").is_dir():
            finish_pending(snap / "b")
            after = snapshot(snap / "b")
            assert after in ({}, final), step
    last = hook.steps[len(hook.steps) // 2][1]
    build_model(last / "m.onnx", last / "b", target="cpu", veus=2, quiet=True)
    assert set(snapshot(last / "b")) == set(final)


def test_a_kill_at_every_step_of_convert_all_loses_nothing(tmp_path: Path, monkeypatch) -> None:
    from rtransform import batch

    def serial(jobs, workers, on_done):
        """The pool in this process, one file after another (a kill is one instant of one process)."""
        out = {}
        for job in jobs:
            rec = batch.run_job(job)
            out[rec.path] = rec
            on_done(rec)
        return out

    monkeypatch.setattr(batch, "run_pool", serial)
    root = tmp_path / "w"
    src = tree(root / "src")
    (src / "old.cu").write_text("__global__ void o(float* x) { x[0] = 1; }\n")
    out = root / "out"
    convert_all(src, out)
    (out / "NOTES.md").write_text("mine")
    (src / "old.cu").unlink()  # its outputs are stale: the next run deletes them
    (src / "a.cu").write_text((src / "a.cu").read_text() + "// v2\n")
    (src / "c.cu").write_text("__global__ void c(float* x) { x[1] = 2; }\n")
    hook = Snapshots(root, tmp_path / "snaps")
    hook.run(convert_all, src, out)

    def outputs(folder: Path, src_dir: Path) -> dict:
        """The output tree, with the source folder's path (in #line directives) made neutral."""
        return {k: v.replace(os.fsencode(src_dir), b"SRC") if isinstance(v, bytes) else v
                for k, v in snapshot(folder).items() if k != "report.json"}

    want = outputs(out, src)
    assert len(hook.steps) > 8, [s for s, _ in hook.steps]
    for step, snap in hook.steps:
        assert snapshot(snap / "src") == snapshot(src), step  # the sources are never touched
        report = convert_all(snap / "src", snap / "out")  # the next run
        got = outputs(snap / "out", snap / "src")
        assert (snap / "out" / "NOTES.md").read_text() == "mine", step
        assert set(got) == set(want), (step, set(got) ^ set(want))
        for k in want:
            if k != ".convert-all-cache.json":
                assert got[k] == want[k], (step, k)
        assert report["exit_code"] == 0
