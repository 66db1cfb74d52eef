"""NVRTC without CuPy (ctypes over libnvrtc): the one compiler the GPU runtime loads modules from and the build
sizes vEUs by, so the registers a build counts on are those of the module that runs (issue 28). NVRTC needs no GPU:
the `nvidia-cuda-nvrtc` wheel (extra `nvrtc`) or a CUDA toolkit's libnvrtc is enough to compile a CUBIN here.

    compile_cubin(source, options, name_expressions) -> Compiled(cubin, log, lowered, version)

A compile runs in a child process under a watchdog (NVRTC 13.0 never finished the interpreter on an H100: a hung
compiler must not hang `rammer build` or `run`): past $RAMMER_NVRTC_TIMEOUT seconds (default NVRTC_TIMEOUT_S, well
above the biggest interpreter's compile) the child is killed and the compile fails in one line naming the limit and
the variable. RAMMER_NVRTC_TIMEOUT=0 compiles in this process, with no watchdog.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import pickle
import signal
import subprocess
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


_LOADED: dict[str, str] = {}  # the loaded library's name -> the path it was found at


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
        _LOADED[lib._name] = path  # the watchdog's child loads this same library
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


NVRTC_TIMEOUT_S = 900.0  # the full-size lstm-tc interpreter compiles in about 25 s on the H100 host
TIMEOUT_ENV = "RAMMER_NVRTC_TIMEOUT"


def compile_timeout() -> float:
    """The watchdog's limit in seconds ($RAMMER_NVRTC_TIMEOUT, default NVRTC_TIMEOUT_S); 0: no watchdog."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return NVRTC_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise NvrtcError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds (0: no limit)") from None
    if value < 0 or value != value:
        raise NvrtcError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds >= 0 (0: no limit)")
    return value


def compile_cubin(source: str, options: Sequence[str], name_expressions: Sequence[str] = (),
                  name: str = "vd_generated.cu", timeout_s: float | None = None) -> Compiled:
    """Compile `source` with exactly `options` (which must name a real architecture, sm_XX, so NVRTC emits SASS)
    and return the CUBIN and the lowered name of each expression. In a child process killed after `timeout_s`
    seconds (default: compile_timeout()); 0 compiles in this process."""
    limit = compile_timeout() if timeout_s is None else timeout_s
    if limit <= 0:
        return _compile_here(source, options, name_expressions, name)
    return _compile_watched(source, list(options), list(name_expressions), name, limit)


def _compile_watched(source: str, options: list[str], names: list[str], name: str, limit: float) -> Compiled:
    """compile_cubin in a fresh child interpreter (no fork of a process that may hold a CUDA context), which loads
    the library this process loaded; killed with its process group past `limit` seconds."""
    lib = _library()
    env = {**os.environ, "RAMMER_NVRTC": _LOADED.get(lib._name, "") or os.environ.get("RAMMER_NVRTC", ""),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                          *filter(None, [os.environ.get("PYTHONPATH")])])}
    request = pickle.dumps((source, options, names, name))
    proc = subprocess.Popen([sys.executable, "-c", "from vdevice.nvrtc import _child_main; _child_main()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(request, timeout=limit)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise NvrtcError(f"NVRTC did not finish compiling {name} within {limit:g} s (a compiler hang?); raise the "
                         f"limit with {TIMEOUT_ENV}=SECONDS (0: no limit)") from None
    except BaseException:  # Ctrl-C: the child goes too
        _kill_group(proc)
        raise
    try:
        kind, value = pickle.loads(out)
    except Exception:  # noqa: BLE001 - the child died (a crash in libnvrtc): its exit status and stderr say how
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise NvrtcError(f"NVRTC's compile of {name} died: {tail[0]}") from None
    if kind == "error":
        raise NvrtcError(value)
    return Compiled(*value)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def _child_main() -> None:
    """The watchdog's child: one request (pickled) on stdin, ("ok", Compiled fields) or ("error", message) out."""
    source, options, names, name = pickle.loads(sys.stdin.buffer.read())
    reply: tuple[str, object]
    try:
        c = _compile_here(source, options, names, name)
        reply = ("ok", (c.cubin, c.log, c.lowered, c.version))
    except NvrtcError as exc:
        reply = ("error", str(exc))
    sys.stdout.buffer.write(pickle.dumps(reply))
    sys.stdout.buffer.flush()


def _compile_here(source: str, options: Sequence[str], name_expressions: Sequence[str] = (),
                  name: str = "vd_generated.cu") -> Compiled:
    """compile_cubin in this process (no watchdog)."""
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
