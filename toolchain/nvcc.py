"""The CUDA toolkit, found once, and the compiler command lines built in one place.

The toolkit is the one whose nvcc works here ($NVCC, nvcc on the PATH, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, the
nvidia-cuda-nvcc wheel), its header folders the ones that nvcc itself searches (`nvcc --dryrun`: `include/` and
`include/cccl`). Without a working nvcc its headers may still be there ($CUDA_HOME, ..., a wheel): a folder counts
as the toolkit's `include/` only when it holds `crt/` beside `cuda_runtime.h`, so a CUDA runtime wheel's folder
(CuPy's: `nvidia/cu13/include` has `mma.h` but not `crt/mma.h`) is never taken for it.

Both compilers put the toolkit's folders ahead of any other CUDA header folder: nvcc (`nvcc_command`) first of all,
NVRTC (`nvrtc_options`) right after the host stubs, which stand in for the host-only headers NVRTC cannot compile
(`cuda.h` needs `stdlib.h`). On the H100 every GPU build failed while CuPy's wheel folder came first."""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .stubs import stub_dirs

DEFAULT_ARCH = "sm_90"  # the H100: every static figure (registers, spills, SASS) is read for it
CXX_STD = "-std=c++17"
WHEEL_DIRS = ("cu13", "cuda_nvcc", "cu12")  # where the nvidia-cuda-* wheels put bin/ and include/ (site/nvidia/X)
_DRYRUN_INCLUDES = re.compile(r'^#\$ (SYSTEM_)?INCLUDES=(.*)$', re.M)
_QUOTED = re.compile(r'"([^"]+)"')


@dataclass(frozen=True)
class Toolkit:
    """The CUDA toolkit this machine compiles with: a working nvcc (None: none) and its header folders."""

    nvcc: str | None
    include_dirs: tuple[str, ...] = ()  # include/ of that toolkit: first on every CUDA include path
    system_dirs: tuple[str, ...] = ()   # include/cccl (libcu++, CUB, Thrust), which nvcc searches as a system folder

    @property
    def header_dirs(self) -> tuple[str, ...]:
        """Every header folder of the toolkit, include/ first."""
        return self.include_dirs + self.system_dirs


def _roots() -> list[Path]:
    """Folders that may hold a toolkit (bin/nvcc, include/), in the order they are tried."""
    roots = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    roots.append(Path("/usr/local/cuda"))
    roots += [Path(site) / "nvidia" / sub for site in sys.path if site for sub in WHEEL_DIRS]
    return roots


def _nvcc_candidates() -> list[str]:
    """Every nvcc this machine may have, in the order they are tried."""
    cands = [os.environ.get("NVCC"), shutil.which("nvcc")]
    return [c for c in cands if c] + [str(root / "bin" / "nvcc") for root in _roots()]


def _nvcc_toolkit(nvcc: str) -> Toolkit | None:
    """A working nvcc's toolkit: the header folders it searches itself (from `--dryrun`); None when it does not run."""
    if not (Path(nvcc).is_file() and os.access(nvcc, os.X_OK)):
        return None
    try:
        proc = subprocess.run([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    found: dict[bool, list[str]] = {False: [], True: []}
    for m in _DRYRUN_INCLUDES.finditer(proc.stdout + proc.stderr):
        found[bool(m.group(1))] += [os.path.normpath(p.removeprefix("-I")) for p in _QUOTED.findall(m.group(2))
                                    if p != "-isystem" and Path(p.removeprefix("-I")).is_dir()]
    return Toolkit(nvcc, tuple(dict.fromkeys(found[False])), tuple(dict.fromkeys(found[True])))


def is_toolkit_include(folder: Path) -> bool:
    """Whether a folder is a CUDA toolkit's include/ (crt/ beside cuda_runtime.h), not a runtime wheel's."""
    return (folder / "cuda_runtime.h").is_file() and (folder / "crt").is_dir()


def _root_toolkit(root: Path) -> Toolkit | None:
    """The headers of a toolkit folder without a working nvcc: include/ (or targets/*/include) and its cccl/."""
    for inc in [root / "include", *sorted(root.glob("targets/*/include"))]:
        if is_toolkit_include(inc):
            return Toolkit(None, (str(inc),), (str(inc / "cccl"),) if (inc / "cccl").is_dir() else ())
    return None


@functools.lru_cache(maxsize=None)
def find_toolkit() -> Toolkit:
    """The toolkit of the first working nvcc, else the first toolkit headers found without one (cached)."""
    for nvcc in _nvcc_candidates():
        toolkit = _nvcc_toolkit(nvcc)
        if toolkit is not None:
            return toolkit
    for root in _roots():
        toolkit = _root_toolkit(root)
        if toolkit is not None:
            return toolkit
    return Toolkit(None)


def find_nvcc() -> str | None:
    """Path of a working nvcc, or None (callers skip or report with a reason)."""
    return find_toolkit().nvcc


def nvcc_command(source: str | os.PathLike, out: str | os.PathLike, arch: str = DEFAULT_ARCH, output: str = "-c",
                 include_dirs: Sequence[str] = (), extra: Sequence[str] = (), ptxas_verbose: bool = False,
                 nvcc: str | None = None) -> list[str]:
    """The nvcc command line that compiles one .cu (`output`: -c an object, --cubin, --ptx): the toolkit's headers
    first, then `include_dirs` and the source's folder; `-Xptxas -v` for ptxas' resource figures."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found (install the nvidia-cuda-nvcc wheel or a CUDA toolkit, or set $NVCC)")
    toolkit = find_toolkit()
    dirs = [*toolkit.include_dirs, *include_dirs, str(Path(source).parent)]
    return [nvcc, f"-arch={arch}", CXX_STD, *(f"-I{d}" for d in dirs),
            *(a for d in toolkit.system_dirs for a in ("-isystem", d)), *(["-Xptxas", "-v"] if ptxas_verbose else []),
            output, str(source), "-o", str(out), *extra]


def nvcc_compile(source: Path, out: Path, arch: str = DEFAULT_ARCH, extra: list[str] | None = None,
                 timeout: int = 300, include_dirs: Sequence[str] = (),
                 phase: str = "-c") -> subprocess.CompletedProcess:
    """Run nvcc_command (phase: -c, --cubin or --ptx; `extra` after the source)."""
    cmd = nvcc_command(source, out, arch, phase, include_dirs, extra or ())
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def nvrtc_options(arch: str, include_dirs: Sequence[str] = ()) -> list[str]:
    """The NVRTC options of a module: `include_dirs`, the host stubs (NVRTC has no host headers; they stand in for the
    host-only ones it cannot compile), then the toolkit's headers, ahead of any folder CuPy adds."""
    dirs = [os.path.abspath(d) for d in include_dirs] + [str(d) for d in stub_dirs(device=False)]
    return [CXX_STD, f"--gpu-architecture={arch}", *(f"-I{d}" for d in [*dirs, *find_toolkit().header_dirs])]
