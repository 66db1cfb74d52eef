"""NVRTC without CuPy (ctypes over libnvrtc): the one compiler the GPU runtime loads modules from and the build
sizes vEUs by, so the registers a build counts on are those of the module that runs (issue 28). NVRTC needs no GPU:
the `nvidia-cuda-nvrtc` wheel (extra `nvrtc`) or a CUDA toolkit's libnvrtc is enough to compile a CUBIN here.

    compile_cubin(source, options, name_expressions) -> Compiled(cubin, log, lowered, version)
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


class NvrtcError(RuntimeError):
    """libnvrtc is missing, or a compile failed (the message carries NVRTC's log)."""


@dataclass(frozen=True)
class Compiled:
    """One NVRTC compile: the CUBIN, NVRTC's log, each name expression's lowered (mangled) name, the version."""

    cubin: bytes
    log: str
    lowered: dict[str, str]
    version: tuple[int, int]


def _candidates() -> list[str]:
    """Where libnvrtc may be: $RAMMER_NVRTC, the nvidia wheels on sys.path, a toolkit, then the loader's own search."""
    out = [os.environ.get("RAMMER_NVRTC", "")]
    for site in sys.path:
        for rel in ("nvidia/cu13/lib/libnvrtc.so*", "nvidia/cuda_nvrtc/lib/libnvrtc.so*"):
            out += sorted(glob.glob(str(Path(site) / rel)), reverse=True)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            out += sorted(glob.glob(str(Path(os.environ[var]) / "lib64" / "libnvrtc.so*")), reverse=True)
    out += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"), reverse=True)
    return [c for c in out if c and "builtins" not in c] + ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]


@functools.lru_cache(maxsize=None)
def _library() -> ctypes.CDLL:
    """The first libnvrtc that loads (NvrtcError naming where it looked)."""
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            tried.append(f"{path} ({exc})")
            continue
        _declare(lib)
        return lib
    raise NvrtcError("libnvrtc not found (pip install nvidia-cuda-nvrtc, or set RAMMER_NVRTC): tried "
                     + "; ".join(tried[:4]))


def _declare(lib: ctypes.CDLL) -> None:
    """Argument and result types of the NVRTC calls used here (nvrtc.h)."""
    prog, cstr, size = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    sigs = {
        "nvrtcVersion": [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
        "nvrtcCreateProgram": [ctypes.POINTER(prog), cstr, cstr, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p],
        "nvrtcAddNameExpression": [prog, cstr],
        "nvrtcCompileProgram": [prog, ctypes.c_int, ctypes.POINTER(cstr)],
        "nvrtcGetProgramLogSize": [prog, ctypes.POINTER(size)],
        "nvrtcGetProgramLog": [prog, ctypes.c_char_p],
        "nvrtcGetCUBINSize": [prog, ctypes.POINTER(size)],
        "nvrtcGetCUBIN": [prog, ctypes.c_char_p],
        "nvrtcGetLoweredName": [prog, cstr, ctypes.POINTER(cstr)],
        "nvrtcDestroyProgram": [ctypes.POINTER(prog)],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p


def available() -> tuple[bool, str]:
    """(True, 'NVRTC 13.5') when libnvrtc loads, else (False, why): for skips and the build's fallback to nvcc."""
    try:
        major, minor = version()
    except NvrtcError as exc:
        return False, str(exc)
    return True, f"NVRTC {major}.{minor}"


def version() -> tuple[int, int]:
    """libnvrtc's (major, minor)."""
    lib = _library()
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def _check(lib: ctypes.CDLL, status: int, what: str, log: str = "") -> None:
    """Raise NvrtcError for a non-zero nvrtcResult."""
    if status != 0:
        text = lib.nvrtcGetErrorString(status).decode(errors="replace")
        raise NvrtcError(f"{what}: {text}" + (f"\n{log.strip()}" if log.strip() else ""))


def compile_cubin(source: str, options: Sequence[str], name_expressions: Sequence[str] = (),
                  name: str = "vd_generated.cu") -> Compiled:
    """Compile `source` with exactly `options` (which must name a real architecture, sm_XX, so NVRTC emits SASS)
    and return the CUBIN and the lowered name of each expression."""
    lib = _library()
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            _check(lib, lib.nvrtcAddNameExpression(prog, expr.encode()), f"nvrtcAddNameExpression({expr})")
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        status = lib.nvrtcCompileProgram(prog, len(options), opts)
        log = _log(lib, prog)
        _check(lib, status, "NVRTC cannot compile the program", log)
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
        if size.value == 0:
            raise NvrtcError("NVRTC made no CUBIN: the options must name a real architecture (sm_XX)")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
        lowered = {}
        for expr in name_expressions:
            out = ctypes.c_char_p()
            _check(lib, lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out)), f"lowered name of {expr}")
            lowered[expr] = (out.value or b"").decode()
        return Compiled(buf.raw, log, lowered, version())
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _log(lib: ctypes.CDLL, prog: ctypes.c_void_p) -> str:
    """NVRTC's program log (warnings, errors)."""
    size = ctypes.c_size_t()
    if lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) != 0 or size.value <= 1:
        return ""
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    return buf.value.decode(errors="replace")
