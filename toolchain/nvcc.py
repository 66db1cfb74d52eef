"""Find the CUDA compiler: the machine's nvcc, $CUDA_HOME, or the nvidia-cuda-nvcc wheel."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path


@functools.lru_cache(maxsize=None)
def find_nvcc() -> str | None:
    """Path of a working nvcc, or None (callers skip or report with a reason)."""
    cands = [os.environ.get("NVCC"), shutil.which("nvcc")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(str(Path(os.environ[var]) / "bin" / "nvcc"))
    cands.append("/usr/local/cuda/bin/nvcc")
    for site in sys.path:
        cands.append(str(Path(site) / "nvidia" / "cuda_nvcc" / "bin" / "nvcc"))
        cands.append(str(Path(site) / "nvidia" / "cu13" / "bin" / "nvcc"))
    for c in cands:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            try:
                subprocess.run([c, "--version"], capture_output=True, check=True, timeout=30)
                return c
            except (OSError, subprocess.SubprocessError):
                continue
    return None


def nvcc_compile(source: Path, out: Path, arch: str = "sm_90", extra: list[str] | None = None,
                 timeout: int = 300, include_dirs: list[str] | tuple[str, ...] = (),
                 phase: str = "-c") -> subprocess.CompletedProcess:
    """Compile one .cu to an object (or, with phase="--ptx", to PTX) with `include_dirs` and the source's folder on
    the include path."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found (install the nvidia-cuda-nvcc wheel or a CUDA toolkit)")
    cmd = [nvcc, f"-arch={arch}", "-std=c++17", *(f"-I{d}" for d in include_dirs), "-I", str(source.parent),
           phase, str(source), "-o", str(out)] + (extra or [])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
