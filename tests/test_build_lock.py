"""The emulator's per-module build lock: processes (pytest-xdist workers) that build the same module at once compile
it once; the others wait and then load the cached library."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cuda_emu.module import build_lock

REPO = Path(__file__).resolve().parent.parent


def test_lock_admits_one_holder_at_a_time(tmp_path: Path) -> None:
    lib = tmp_path / "m.so"
    order: list[str] = []
    inside = threading.Event()
    release = threading.Event()

    def first() -> None:
        with build_lock(lib):
            order.append("first in")
            inside.set()
            release.wait(30)
            order.append("first out")

    def second() -> None:
        inside.wait(30)
        with build_lock(lib):
            order.append("second in")

    a, b = threading.Thread(target=first), threading.Thread(target=second)
    a.start()
    b.start()
    inside.wait(30)
    b.join(0.3)  # the second one is still waiting: the first holds the lock
    assert b.is_alive() and order == ["first in"]
    release.set()
    a.join(30)
    b.join(30)
    assert order == ["first in", "first out", "second in"]


@pytest.mark.parametrize("workers", [2, 3])
def test_concurrent_builds_of_one_module_compile_once(tmp_path: Path, workers: int) -> None:
    """Several processes build the same (new) module together: g++ compiles it once (a wrapper named by $CXX logs
    every compile, as opposed to preprocessing, which each process does to find the cache key), there is one .so,
    and every process loads it."""
    log = tmp_path / "compiles.log"
    wrapper = tmp_path / "gxx"
    wrapper.write_text(f'#!/bin/sh\ncase " $* " in *" -E "*|*" --version "*) ;; *) echo x >> {log} ;; esac\n'
                       'exec g++ "$@"\n')
    wrapper.chmod(0o755)
    src = f"__global__ void fill(int* o) {{ o[threadIdx.x] = {workers * 1000 + 7}; }}\n"
    code = (f"import sys\nsys.path.insert(0, {str(REPO)!r})\nfrom cuda_emu import CpuModule\n"
            f"m = CpuModule({src!r}, ['fill'])\nprint(m.library_path)")
    env = {**os.environ, "RAMMER_CACHE": str(tmp_path / "cache"), "CXX": str(wrapper)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(workers)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert len({o.strip() for o, _ in outs}) == 1 and len(list((tmp_path / "cache" / "emu").glob("*.so"))) == 1
    assert log.read_text().count("x") == 1
