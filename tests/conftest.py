"""Fixtures shared by the test files (keep small; add, never remove)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# The suite keeps its own toolchain cache (emulator builds, profiles), never the user's ~/.cache/rammer: a folder
# of its own under the temp directory, kept between runs so repeated runs stay fast ($RAMMER_TEST_CACHE overrides).
os.environ["RAMMER_CACHE"] = os.environ.get("RAMMER_TEST_CACHE") or str(
    Path(tempfile.gettempdir()) / f"rammer-test-cache-{os.getuid()}")


def pytest_report_header(config: pytest.Config) -> str:
    """Which emulator cache this run uses and how full it is: the suite's time depends on it (README, "Measured":
    an empty cache adds one g++ build per emulator module; pytest-xdist workers share it, each module built once)."""
    emu = Path(os.environ["RAMMER_CACHE"]) / "emu"
    builds = len(list(emu.glob("*.so"))) if emu.is_dir() else 0
    return f"rammer test cache: {os.environ['RAMMER_CACHE']} ({builds} emulator builds{', cold' if not builds else ''})"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root, so tests never depend on the working directory."""
    return REPO


@pytest.fixture(scope="session")
def nvcc_path() -> str:
    """A working nvcc, or a visible skip saying why there is none."""
    from toolchain.nvcc import find_nvcc
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found: install a CUDA toolkit or the nvidia-cuda-nvcc wheel (or set $NVCC)")
    return nvcc


# $RAMMER_TEST_CPU_LOG=FILE: each test's CPU seconds (its process and the children it waited for, g++ and
# subprocesses included; setup + call + teardown) appended to FILE as "SECONDS NODEID" lines, one per test, from every
# xdist worker. CPU time, unlike --durations' wall time, does not grow with the machine's load: sort -n FILE shows
# what the suite's time is made of.
_CPU_LOG = os.environ.get("RAMMER_TEST_CPU_LOG")


def _cpu_seconds() -> float:
    import resource
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


if _CPU_LOG:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
        start = _cpu_seconds()
        yield
        with open(_CPU_LOG, "a") as fh:
            fh.write(f"{_cpu_seconds() - start:.2f} {item.nodeid}\n")
