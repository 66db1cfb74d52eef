"""The CPU emulator as a sanitizer: deliberately broken kernels (tests/emu_kernels/broken.cu) are each reported
by the matching sanitizer with the file:line of the faulty statement; legal kernels are not flagged; the
reports reach `rtransform run/verify`, and a verify of an out-of-bounds kernel never says "verified"."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuda_emu import CpuModule, EmuError

KERNELS = Path(__file__).resolve().parent / "emu_kernels"
BROKEN = KERNELS / "broken.cu"
NAMES = ["write_past_end", "read_before_start", "shared_overflow", "shared_read_overflow", "dynamic_overflow",
         "missing_barrier", "two_barriers", "early_exit_after_shared", "exited_lanes_in_mask", "late_leavers",
         "shuffle_from_exited"]


def line_of(tag: str) -> int:
    """Line number of the statement marked `// @tag` in broken.cu."""
    for number, text in enumerate(BROKEN.read_text().splitlines(), start=1):
        if f"// @{tag}" in text:
            return number
    raise KeyError(tag)


def at(tag: str) -> str:
    """What a report must say for the marked statement: its file and line."""
    return f"{BROKEN}:{line_of(tag)}"


@pytest.fixture(scope="module")
def broken() -> CpuModule:
    return CpuModule(BROKEN.read_text(), NAMES, name=str(BROKEN), sanitize="all")


def run(mod: CpuModule, kernel: str, grid, block, dyn=0, args=(), names=None) -> str | None:
    """The sanitizer's report of one launch, or None when the launch is clean."""
    try:
        mod.launch(kernel, grid, block, dyn, list(args), names=names)
    except EmuError as exc:
        return str(exc)
    return None


def f32(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.float32)


def test_memcheck_out_of_bounds_global_write(broken):
    out, inp = np.zeros(64, np.float32), f32(64)
    report = run(broken, "write_past_end", 3, 32, 0, [out, inp, np.int32(64)], ["out", "in", "n"])
    assert report is not None and report.startswith("write_past_end: memcheck: block (2,0,0) thread (0,0,0):")
    assert "out-of-bounds write of 4 bytes at out[+64] (global buffer 'out', 64 elements)" in report
    assert at("oob-write") in report
    assert np.array_equal(out[:64], 2 * inp)  # the in-bounds writes landed, the process lives on


def test_memcheck_out_of_bounds_global_read(broken):
    report = run(broken, "read_before_start", 1, 32, 0, [np.zeros(32, np.float32), f32(32), np.int32(32)],
                 ["out", "in", "n"])
    assert "memcheck: block (0,0,0) thread (0,0,0): out-of-bounds read of 4 bytes at in[-1]" in report
    assert at("oob-read") in report


@pytest.mark.parametrize("kernel,block,dyn,args,expect,tag", [
    ("shared_overflow", 48, 0, [np.zeros(48, np.float32)], "out-of-bounds write of 4 bytes at tile[+32] "
     "(shared buffer 'tile', 32 elements)", "shared-write"),
    ("shared_read_overflow", 64, 0, [np.zeros(64, np.float32)], "out-of-bounds read of 4 bytes at tile[+64]",
     "shared-read"),
    ("dynamic_overflow", 64, 4 * 40, [np.zeros(64, np.float32), np.int32(40)], "out-of-bounds write of 4 bytes "
     "at extern __shared__ (160 bytes)[+160]", "dyn-write"),
])
def test_memcheck_out_of_bounds_shared(broken, kernel, block, dyn, args, expect, tag):
    report = run(broken, kernel, 1, block, dyn, args)
    assert report is not None and "memcheck:" in report and expect in report, report
    assert at(tag) in report


def test_racecheck_reports_both_sites(broken):
    report = run(broken, "missing_barrier", 1, 128, 0, [np.zeros(128, np.float32)])
    assert report is not None and "racecheck: shared-memory race" in report, report
    assert at("race-write") in report and at("race-read") in report and "with no barrier in between" in report


@pytest.fixture(scope="module")
def synccheck() -> CpuModule:
    """synccheck alone: the kernels below also race, and racecheck would speak first."""
    return CpuModule(BROKEN.read_text(), NAMES, name=str(BROKEN), sanitize="synccheck")


def test_synccheck_divergent_barrier(synccheck):
    report = run(synccheck, "two_barriers", 1, 64, 0, [np.zeros(64, np.float32)])
    assert report is not None and "synccheck: divergent barrier" in report, report
    assert at("barrier-a") in report and at("barrier-b") in report


@pytest.mark.parametrize("n", [1, 17, 40, 63])
def test_early_exit_before_a_barrier_is_legal(broken, n):
    """sm_70+: threads that return (after touching shared memory) no longer count at the block's later barriers
    (PTX ISA, exit); all three sanitizers stay quiet and the live threads get the rotated values."""
    out = np.full(64, -1, np.float32)
    assert run(broken, "early_exit_after_shared", 1, 64, 0, [out, np.int32(n)]) is None
    assert out[:n].tolist() == [float((i + 1) % n) for i in range(n)] and (out[n:] == -1).all()


@pytest.mark.parametrize("kernel", ["exited_lanes_in_mask", "late_leavers"])
def test_exited_lanes_in_a_mask_are_legal(broken, kernel):
    """A mask may name lanes that return before the collective or while it waits (PTX ISA: shfl.sync waits for
    the non-exited lanes of membermask), as long as no lane reads from one that has exited."""
    out = np.zeros(32, np.float32)
    assert run(broken, kernel, 1, 32, 0, [out]) is None
    want = [float(i + (i ^ 1)) for i in range(16)] + [float(i) for i in range(16, 32)]
    assert out.tolist() == (want if kernel == "late_leavers" else want[:16] + [0.0] * 16)


@pytest.mark.parametrize("n,block", [(16, 32), (5, 32), (40, 64), (20, 20)])
def test_synccheck_shuffle_reading_an_exited_lane(synccheck, n, block):
    """The one thing the PTX ISA leaves undefined for exited threads: the value a shuffle sources from one. It is
    reported when the results depend on it (a rerun with the value poisoned changes them)."""
    out = np.zeros(64, np.float32)
    report = run(synccheck, "shuffle_from_exited", 1, block, 0, [out, np.int32(n), np.int32(1)])
    last = (n - 1) % 32
    what = "has exited" if n < block else "does not exist (the block's last warp is partial)"
    assert report is not None and f"__shfl_down_sync at {at('exited-source')}" in report, report
    assert f"thread ({n - 1},0,0) (lane {last}) reads lane {last + 1} of its warp, which {what}" in report
    assert report.endswith("the launch's results change with that value")
    assert out[:n - 1].tolist() == [2.0 * i + (i % 32 != 31) for i in range(n - 1)]  # the first run stays


@pytest.mark.parametrize("n,block", [(16, 32), (40, 64), (20, 20), (64, 64)])
def test_an_exited_lane_read_that_is_dropped_is_legal(synccheck, n, block):
    """A read of an exited (or missing) lane whose value is never used is no defect: nothing is reported."""
    out = np.zeros(64, np.float32)
    assert run(synccheck, "shuffle_from_exited", 1, block, 0, [out, np.int32(n), np.int32(0)]) is None
    other = [i + 1 if i % 32 != 31 else i for i in range(n)]  # lane 31's source is out of range: its own value
    assert out[:n].tolist() == [float(i + (other[i] if i + 1 < n else 0)) for i in range(n)]


@pytest.mark.parametrize("which", ["memcheck", "racecheck", "synccheck"])
def test_each_sanitizer_alone(which):
    """Only the asked-for sanitizer reports: a race is no memcheck error, an out-of-bounds write no race."""
    mod = CpuModule(BROKEN.read_text(), NAMES, name=str(BROKEN), sanitize=which)
    oob = run(mod, "write_past_end", 3, 32, 0, [np.zeros(64, np.float32), f32(64), np.int32(64)])
    race = run(mod, "missing_barrier", 1, 128, 0, [np.zeros(128, np.float32)])
    div = run(mod, "two_barriers", 1, 64, 0, [np.zeros(64, np.float32)])
    assert (oob is not None) == (which == "memcheck")
    assert (race is not None) == (which == "racecheck")
    assert (div is not None) == (which == "synccheck")


def test_unsanitized_builds_do_not_check():
    mod = CpuModule(BROKEN.read_text(), ["missing_barrier"], name=str(BROKEN))
    assert run(mod, "missing_barrier", 1, 128, 0, [np.zeros(128, np.float32)]) is None


# ---- through the command line ---------------------------------------------------------------------------------
SPEC = """\
kernel: write_past_end
grid: [3, 1, 1]
block: [32, 1, 1]
args:
  - {name: out, kind: buffer, dtype: float32, size: 64, init: zeros}
  - {name: in, kind: buffer, dtype: float32, size: 64, init: arange}
  - {name: n, kind: scalar, dtype: int32, value: 64}
outputs: [out]
"""


def rtransform(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from rtransform.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=600)


def test_verify_of_an_out_of_bounds_kernel_never_says_verified(tmp_path):
    src = tmp_path / "oob.cu"
    src.write_text(BROKEN.read_text())
    (tmp_path / "oob.yaml").write_text(SPEC)
    res = rtransform("verify", str(src), "--spec", str(tmp_path / "oob.yaml"))
    assert res.returncode != 0 and "verified" not in res.stdout
    assert "memcheck" in res.stderr and f"{src}:{line_of('oob-write')}" in res.stderr
    run_ = rtransform("run", str(src), "--spec", str(tmp_path / "oob.yaml"))  # memcheck is run's default
    assert run_.returncode != 0 and "out-of-bounds write" in run_.stderr
    off = rtransform("run", str(src), "--spec", str(tmp_path / "oob.yaml"), "--sanitize", "none")
    assert off.returncode == 0, off.stderr  # unchecked, it "works" (and wrote past the end of its buffer)
    assert re.search(r"out: float32\[64\]", off.stdout)
