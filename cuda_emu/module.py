"""CPU execution of CUDA sources: g++ builds them against cuda_emu.h, ctypes runs their kernels on numpy data.

Build: the source is wrapped (``#include "cuda_emu.h"``, the source, one ``extern "C"`` launcher per kernel
expression), preprocessed with ``g++ -E``, its ``__shared__`` declarations are rewritten to per-block storage
(:func:`rewrite_shared`), and the result is compiled into a shared library cached by the sha256 of that
text and the compiler flags under ``$RAMMER_CACHE/emu`` (default ``~/.cache/rammer/emu``). The compile reads the
emulator's headers from a precompiled header when the cache has one for their text and flags (pch.py); the library
is the same either way.

Arguments of :meth:`CpuModule.launch`, in parameter order: a numpy array (any dimension, C-contiguous) or
``None`` is passed as a pointer; a numpy scalar (``np.float32(1)``, ``np.int32(3)``...) or a Python
int/float/bool (as int64/float64/bool) is passed by value: the launcher reads it as that dtype and converts
it to the parameter's C++ type; a numpy structured scalar or ``bytes`` is copied into a class parameter of
the same size.
"""

from __future__ import annotations

import contextlib
import functools
import ctypes
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from toolchain.cache import cache_dir as toolchain_cache_dir
from toolchain.cache import build_lock, content_key, evict
from toolchain.cxx import split_top_level
from toolchain.stubs import stub_dirs

from .inline_ptx import rewrite_inline_ptx

from . import env, pch
from .env import STALL_TIMEOUT_ENV, YIELD_BUDGET_ENV

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
DEFAULT_YIELD_BUDGET = 20_000_000
DEFAULT_STACK_SIZE = 64 * 1024
DEFAULT_STALL_TIMEOUT = 30.0      # seconds one thread may run without reaching a yield point
# hidden + no GNU unique: each library keeps its own emulator state; stack-clash protection makes a frame
# larger than the guard pages fault there instead of writing into the next fiber's stack.
COMPILE_FLAGS = ("-std=c++20", "-fPIC", "-shared", "-fvisibility=hidden", "-fno-strict-aliasing",
                 "-fno-gnu-unique", "-fstack-clash-protection")
# Sanitized builds (emu_sanitize.h): g++ calls a check before each load and store of the source.
SANITIZERS = {"memcheck": 1, "racecheck": 2, "synccheck": 4}
SANITIZE_FLAGS = ("-g1", "-gdwarf-4", "-DEMU_SANITIZE=1", "-fsanitize=kernel-address", "-fsanitize=bounds",
                  "-fsanitize-recover=bounds", "-fno-store-merging", "-fno-tree-sra",
                  "-fsanitize-recover=kernel-address", "--param", "asan-instrumentation-with-call-threshold=0",
                  "--param", "asan-stack=0", "--param", "asan-globals=0")
REDZONE = 1 << 16   # bytes of PROT_NONE around each buffer a sanitized launch copies into a guarded region
_SITE_RE = re.compile(r"@@SITE:\+0x([0-9a-f]+)@@")
_ERR_CAP = 8192
_LAUNCH_LOCK = threading.Lock()   # one launch at a time: a module's scheduler state is global to its library
_LIBS: dict[str, ctypes.CDLL] = {}


def available_memory() -> int:
    """Bytes this process can still allocate: MemAvailable from /proc/meminfo, else physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_yield_budget(value: object, where: str) -> int:
    """env.check_yield_budget, as an EmuError (a bad launch)."""
    try:
        return env.check_yield_budget(value, where)
    except env.LimitError as exc:
        raise EmuError(f"bad launch: {exc}") from None


def check_stall_timeout(value: object, where: str) -> float:
    """env.check_stall_timeout, as an EmuError (a bad launch)."""
    try:
        return env.check_stall_timeout(value, where)
    except env.LimitError as exc:
        raise EmuError(f"bad launch: {exc}") from None


def stall_ms(secs: float) -> int:
    """The launch's stall limit in milliseconds (0: off), rounded up: never below what was asked."""
    return math.ceil(secs * 1000)


def env_yield_budget(default: int = DEFAULT_YIELD_BUDGET) -> int:
    """The yield budget: $RAMMER_EMU_YIELD_BUDGET when set (a positive integer), else `default`."""
    raw = os.environ.get(YIELD_BUDGET_ENV, "").strip()
    return check_yield_budget(raw, f"${YIELD_BUDGET_ENV}") if raw else default


def env_stall_timeout(default: float = DEFAULT_STALL_TIMEOUT) -> float:
    """The stall timeout in seconds: $RAMMER_EMU_STALL_TIMEOUT when set (0 = off), else `default`."""
    raw = os.environ.get(STALL_TIMEOUT_ENV, "").strip()
    return check_stall_timeout(raw, f"${STALL_TIMEOUT_ENV}") if raw else default


class EmuError(RuntimeError):
    """A launch failed: deadlock, watchdog, fault in device code, bad launch or bad arguments."""


def sanitizer_set(sanitize: str | Iterable[str] | None) -> tuple[str, ...]:
    """Names of the sanitizers asked for: "memcheck", "racecheck", "synccheck", "all", "none" or a list of them."""
    if sanitize is None or sanitize == "none":
        return ()
    names = [sanitize] if isinstance(sanitize, str) else list(sanitize)
    out: list[str] = []
    for n in names:
        if n == "all":
            out += list(SANITIZERS)
        elif n in SANITIZERS:
            out.append(n)
        elif n != "none":
            raise ValueError(f"unknown sanitizer {n!r} (memcheck, racecheck, synccheck, all, none)")
    return tuple(dict.fromkeys(out))


class EmuCompileError(RuntimeError):
    """g++ could not build the source; the message holds the compiler's first error lines."""


@dataclass(frozen=True)
class LaunchStats:
    """Counters of the last launch, for cost measurements."""
    switches: int      # scheduler -> fiber switches
    yields: int        # emu_yield / __nanosleep / polling atomics
    turns: int         # block turns of the scheduler
    blocks: int
    threads: int
    seconds: float


class _Arg(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("size", ctypes.c_int), ("data", ctypes.c_void_p)]


class _Cfg(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("dyn_smem", ctypes.c_ulonglong),
                ("cooperative", ctypes.c_int), ("yield_budget", ctypes.c_longlong),
                ("stack_size", ctypes.c_ulonglong), ("stall_ms", ctypes.c_longlong),
                ("static_limit", ctypes.c_ulonglong), ("smem_limit", ctypes.c_ulonglong), ("arch", ctypes.c_char_p),
                ("order", ctypes.POINTER(ctypes.c_uint))]


# Shared memory a block may have, per target (CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability": 48 KB of static __shared__ on every architecture; static + dynamic, with the opt-in attribute, up to
# the figure per architecture). A launch past them fails as it would on that GPU (ptxas, or the launch itself).
STATIC_SMEM_LIMIT = 48 * 1024
SMEM_PER_BLOCK = {"sm_70": 96 * 1024, "sm_75": 64 * 1024, "sm_80": 163 * 1024, "sm_86": 99 * 1024,
                  "sm_87": 163 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024}
DEFAULT_ARCH = "sm_90"  # the H100, the project's target
ARCH_ENV = "RAMMER_EMU_ARCH"


def cuda_arch(arch: str) -> int:
    """The value of `__CUDA_ARCH__` for an architecture: sm_90 -> 900 (as nvcc and clang define it)."""
    return int(arch.removeprefix("sm_")) * 10


def target_arch(arch: str | None = None) -> str:
    """The architecture whose limits launches obey: `arch`, else $RAMMER_EMU_ARCH, else sm_90."""
    name = (arch or os.environ.get(ARCH_ENV, "").strip() or DEFAULT_ARCH).lower()
    if name not in SMEM_PER_BLOCK:
        where = f"${ARCH_ENV}={name}" if not arch else f"arch {name!r}"
        raise EmuError(f"bad launch: {where} is not one of {', '.join(SMEM_PER_BLOCK)}")
    return name


def device_arch_define(arch: str | None = None) -> str:
    """The `__CUDA_ARCH__` the emulator compiles a CUDA source's device code under.

    nvcc's device pass defines `__CUDA_ARCH__` as the target's (sm_90: 900), and the converter parses a file as that
    pass does (converter/parse.py: clang --cuda-device-only --cuda-gpu-arch=sm_90), so a kernel under
    `#if __CUDA_ARCH__ >= 120` is what it converts. The emulator runs device code, so the source gets the same value:
    that of the emulated target (`arch`, else $RAMMER_EMU_ARCH, else sm_90, the converter's). It is defined after
    cuda_emu.h: the emulator's own headers and the C++ library they include stay on their host paths. A file's host
    code is not run here (`rtransform run`/`verify` slice it away), so nvcc's host pass, where it is undefined, has
    no counterpart. A -D__CUDA_ARCH__ of the build's own wins."""
    return f"#ifndef __CUDA_ARCH__\n#define __CUDA_ARCH__ {cuda_arch(target_arch(arch))}\n#endif\n"


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in ("switches", "yields", "turns", "blocks", "threads")] + [
        ("seconds", ctypes.c_double)]


# Argument kinds: must match emu::ArgKind in emu_launch.h.
_PTR, _RAW = 0, 13
_KINDS = {np.dtype(t): k for k, t in enumerate(
    (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float16,
     np.float32, np.float64, np.bool_), start=1)}


# ---------------------------------------------------------------------------------------------------------
# __shared__ rewrite (on preprocessed text)
# ---------------------------------------------------------------------------------------------------------
_MARK = "__emu_shared__"
_SCAN_RE = re.compile(r'"(?:\\.|[^"\\\n])*"|(?<![0-9A-Za-z_])\'(?:\\.|[^\'\\\n])*\'|[{};]|\b' + _MARK + r"\b")
_NS_BRACE_RE = re.compile(r'\bnamespace\b[^(){};]*$|\bextern\s*"C(?:\+\+)?"\s*$')
_ATTR_RE = re.compile(r"__attribute__\s*\(\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\)"
                      r"|alignas\s*\((?:[^()]|\([^()]*\))*\)"
                      r"|\[\[.*?\]\]")
_FIRST_DECL_RE = re.compile(r"^(?P<type>.*?[\w>*&)\s])\s*(?P<name>[A-Za-z_]\w*)\s*"
                            r"(?P<dims>(?:\[[^\[\]]*\]\s*)*)$", re.S)
_MORE_DECL_RE = re.compile(r"^(?P<ptr>[*&\s]*)(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\[\]]*\]\s*)*)$", re.S)


@dataclass
class _Mark:
    """One __shared__ occurrence: where its declaration starts and whether it is at namespace scope."""
    pos: int
    start: int
    namespace_scope: bool


def _scan_marks(text: str) -> list[_Mark]:
    """Finds every marker with its declaration start and scope (braces of namespaces/extern "C" only)."""
    marks: list[_Mark] = []
    stack: list[bool] = []      # True: a namespace-like brace
    boundary = 0
    for m in _SCAN_RE.finditer(text):
        tok = m.group()
        if tok == "{":
            stack.append(bool(_NS_BRACE_RE.search(_strip_directives(text[boundary:m.start()]))))
            boundary = m.end()
        elif tok == "}":
            if stack:
                stack.pop()
            boundary = m.end()
        elif tok == ";":
            boundary = m.end()
        elif tok == _MARK:
            marks.append(_Mark(m.start(), _decl_start(text, boundary, m.start()), all(stack)))
    return marks


def _strip_directives(s: str) -> str:
    """Drops preprocessor lines (line markers, pragmas) from a stretch of preprocessed text."""
    return re.sub(r"(?m)^[ \t]*#.*$", "", s)


def _decl_start(text: str, boundary: int, mark: int) -> int:
    """Start of the declaration holding the marker: after directives, labels and whitespace."""
    start = boundary
    for m in re.finditer(r"(?m)^[ \t]*#.*$", text[boundary:mark]):
        start = boundary + m.end()
    colons = list(re.finditer(r"(?<!:):(?!:)", text[start:mark]))
    if colons:
        start += colons[-1].end()
    while start < mark and text[start].isspace():
        start += 1
    return start


def _decl_end(text: str, pos: int) -> int:
    """Index of the ';' ending the declaration that starts at pos, or -1 (braces: not a plain declaration)."""
    depth = 0
    for i in range(pos, min(len(text), pos + 4000)):
        c = text[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c in "{}":
            return -1
        elif c == ";" and depth == 0:
            return i
    return -1


def _declarators(spec: str) -> list[tuple[str, str, str]] | None:
    """(type, name, dims) for each declarator of 'TYPE a[..], *b', or None when the form is not understood."""
    parts = split_top_level(spec)
    first = _FIRST_DECL_RE.match(parts[0]) if parts else None
    if not first or not first.group("type").strip() or "=" in spec:
        return None
    out = [(first.group("type").strip(), first.group("name"), first.group("dims").strip())]
    base = first.group("type").strip().rstrip("*& \t\n")
    for p in parts[1:]:
        m = _MORE_DECL_RE.match(p.strip())
        if not m:
            return None
        out.append(((base + " " + m.group("ptr").strip()).strip(), m.group("name"), m.group("dims").strip()))
    return out


def _replacement(decl: str, namespace_scope: bool) -> str | None:
    """C++ for one __shared__ declaration (without its ';'), or None to fall back to a plain static."""
    prefix, _, suffix = decl.partition(_MARK)
    prefix, suffix = _ATTR_RE.sub(" ", prefix), _ATTR_RE.sub(" ", suffix)
    words = (prefix + " " + suffix).split()
    if "template" in words or "typedef" in words:
        return None
    is_extern = "extern" in words
    spec = " ".join(w for w in re.split(r"(\s+)", prefix + " " + suffix) if w.strip() not in ("extern", "static"))
    decls = _declarators(" ".join(spec.split()))
    if decls is None:
        return None
    if is_extern:
        if len(decls) != 1 or decls[0][2].replace(" ", "") != "[]":
            return None
        t, name, _ = decls[0]
        if namespace_scope:
            return f"static {t} (&{name})[] = *({t}(*)[])::emu::ns_dyn_smem();"
        return f"{t} (&{name})[] = *({t}(*)[])::emu::dyn_smem();"
    if namespace_scope:
        return " ".join(f"static {t} {n}{d}; static ::emu::NsShared {n}__emu_ns(&{n}, sizeof({n}));"
                        for t, n, d in decls)
    return " ".join(f'static ::emu::SharedSlot<{t} {d}> {n}__emu_slot; auto& {n} = {n}__emu_slot.get("{n}");'
                    for t, n, d in decls)


def rewrite_shared(text: str) -> str:
    """Rewrites every __shared__ declaration of preprocessed text to per-block storage, keeping lines."""
    if _MARK not in text:
        return text
    out, last = [], 0
    for mk in _scan_marks(text):
        if mk.pos < last:
            continue
        end = _decl_end(text, mk.pos)
        new = _replacement(text[mk.start:end], mk.namespace_scope) if end > 0 else None
        if new is None:   # unknown form: a plain static (wrong only for cooperative launches)
            out.append(text[last:mk.pos] + "static")
            last = mk.pos + len(_MARK)
            continue
        out.append(text[last:mk.start] + new + "\n" * text.count("\n", mk.start, end + 1))
        last = end + 1
    out.append(text[last:])
    return _capture_shared_in_lambdas("".join(out))


_SLOT_BINDING = re.compile(r'auto& (\w+) = \1__emu_slot\.get\("\1"\);')
_COPY_DEFAULT = re.compile(r"\[\s*=\s*(?=[,\]])")


def _capture_shared_in_lambdas(text: str) -> str:
    """`[=` lambdas in the scope of a block-scope __shared__ variable capture it by reference.

    In CUDA a __shared__ variable has static storage, so a lambda refers to it without capturing it; here it is a
    local reference to the block's storage, which `[=]` would copy (a stale copy, or a const one that cannot be
    written)."""
    edits: list[tuple[int, str]] = []
    for m in _SLOT_BINDING.finditer(text):
        end, depth = m.end(), 0
        while end < len(text) and depth >= 0:
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        for lam in _COPY_DEFAULT.finditer(text, m.end(), end):
            edits.append((lam.end(), f", &{m.group(1)}"))
    for pos, add in sorted(edits, reverse=True):
        text = text[:pos] + add + text[pos:]
    return text


# ---------------------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------------------
def cache_dir() -> Path:
    """Where built libraries live: the toolchain's cache root, sub-folder `emu`."""
    return toolchain_cache_dir("emu")


def _compiler() -> str:
    """The g++ to use ($CXX if set), or a clear error when there is none."""
    cxx = os.environ.get("CXX", "g++")
    path = shutil.which(cxx)
    if not path:
        raise EmuCompileError(f"C++ compiler '{cxx}' not found (set CXX or install g++)")
    return path


_VERSIONS: dict[str, str] = {}


def _compiler_version(cxx: str) -> str:
    """Compiler identity for the cache key."""
    if cxx not in _VERSIONS:
        _VERSIONS[cxx] = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    return _VERSIONS[cxx]


def _first_errors(stderr: str, limit: int = 12) -> str:
    """The compiler's first error and the lines after it."""
    lines = stderr.splitlines()
    first = next((i for i, l in enumerate(lines) if re.search(r"\b(fatal )?error:", l)), 0)
    return "\n".join(lines[first:first + limit])


@functools.cache
def _emu_system_headers() -> frozenset[str]:
    """The system headers the emulator's own headers include (`<unistd.h>`, `<sys/mman.h>`...)."""
    names: set[str] = set()
    for h in INCLUDE_DIR.glob("*.h"):
        names.update(re.findall(r'^[ \t]*#[ \t]*include[ \t]*<([^>]+)>', h.read_text(), re.M))
    return frozenset(names)


def _run_compiler(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    """Runs g++ and turns a failure into EmuCompileError."""
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise EmuCompileError(f"g++ timed out {what}") from None
    if res.returncode != 0:
        ptx = _inline_ptx_error(res.stderr)
        raise EmuCompileError(ptx or f"g++ failed {what}:\n{_first_errors(res.stderr)}")
    return res


_ASM_ERROR = re.compile(r"^(.+?):(\d+): Error: ", re.M)
_ASM_WHAT = re.compile(r"Error: (?:no such instruction: |symbol )`([^'`]+)")


def _inline_ptx_error(stderr: str) -> str | None:
    """One `file:line:col: error:` line when g++ compiled the source but the assembler rejected its inline asm: PTX
    (`asm volatile("cp.async.commit_group;")`), which the host's assembler cannot run."""
    if "Assembler messages" not in stderr:
        return None
    m = _ASM_ERROR.search(stderr)
    if m is None:
        return None
    what = _ASM_WHAT.search(stderr)
    instr = what.group(1).split()[0] if what and what.group(1).split() else ""  # the opcode, not the registers
    return (f"{m.group(1)}:{m.group(2)}:1: error: inline PTX asm{f' ({instr})' if instr else ''} does not run on "
            "the CPU emulator: the instructions it runs are a table (cuda_emu/README.md: cp.async, ldmatrix, mma.sync "
            "m16n8k8 tf32 / m16n8k16 bf16 and f16, mov %laneid / %lanemask_* / %clock, bar.sync 0); call the emu::ptx "
            "model under `#elif defined(RT_CPU_EMULATOR)` beside the asm")


def _stable_file(folder: Path, text: str, suffix: str) -> Path:
    """Writes text to folder/<sha256>.suffix (atomically, once): a path that depends on the text only."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (content_key(text) + suffix)
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path


def _launcher_source(kernels: Sequence[str]) -> str:
    """One extern "C" launcher per kernel expression, one line each (compile errors name the line)."""
    return "".join(
        f'extern "C" __attribute__((visibility("default"))) int emu_launch_{i}(const ::emu::LaunchCfg* c, '
        f"const ::emu::Arg* a, int n, char* e, int cap) {{ return ::emu::launch_kernel({k}, c, a, n, e, cap); }}\n"
        for i, k in enumerate(kernels))


def _check_kernel_expr(k: str) -> None:
    """Kernel expressions are pasted into C++: refuse anything that is not a single expression."""
    if not isinstance(k, str) or not k.strip() or re.search(r"[;{}\n]|//|/\*", k):
        raise EmuError(f"bad kernel expression {k!r}: expected a __global__ function name or template-id")


# ---------------------------------------------------------------------------------------------------------
# module
# ---------------------------------------------------------------------------------------------------------
class CpuModule:
    """A CUDA source built for the CPU emulator; launch() runs one of its kernels on numpy buffers."""

    def __init__(self, source: str, kernels: Sequence[str], include_dirs: Iterable[str] = (),
                 defines: Mapping[str, Any] | None = None, *, name: str = "kernel.cu",
                 opt: str = "-O1", stack_size: int = DEFAULT_STACK_SIZE,
                 yield_budget: int = DEFAULT_YIELD_BUDGET, stall_timeout: float = DEFAULT_STALL_TIMEOUT,
                 sanitize: str | Iterable[str] | None = None, arch: str | None = None,
                 fresh_globals: bool = False) -> None:
        self.kernels = list(dict.fromkeys(kernels))
        # every launch on a private copy of the library, loaded afresh: the source's globals (`__device__`
        # variables) start each launch from their initializers, as in a new process, instead of keeping what the
        # module's earlier launches left there (rtransform verify compares runs that must start alike)
        self.fresh_globals = fresh_globals
        self.arch = arch  # None: $RAMMER_EMU_ARCH or sm_90 at each launch
        for k in self.kernels:
            _check_kernel_expr(k)
        self.name = name  # the source's file name in messages; an existing path also serves quote includes
        self.stack_size = stack_size
        self.yield_budget = yield_budget
        self.stall_timeout = stall_timeout
        self.last_stats: LaunchStats | None = None
        # a caller's folder that holds a header named like one the emulator itself includes (llm.c's Windows shim
        # dev/unistd.h, which includes <direct.h>) is searched for "x.h" only: with -I it would replace <unistd.h>
        users = [Path(d).resolve() for d in include_dirs]
        shadowing = [d for d in users if any((d / h).is_file() for h in _emu_system_headers())]
        self._include_dirs = ([str(INCLUDE_DIR)] + [str(d) for d in stub_dirs()]
                              + [str(d) for d in users if d not in shadowing])
        self._quote_dirs = ([str(Path(name).resolve().parent)] if Path(name).is_file() else []) \
            + [str(d) for d in shadowing]
        self._defines = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in (defines or {}).items()]
        self.sanitize = sanitizer_set(sanitize)
        self._flags = [*COMPILE_FLAGS, opt, *(SANITIZE_FLAGS if self.sanitize else ())]
        self.compiled_with = "cache"  # how the library was built: "cache" (found built), "pch" or "plain"
        self.library_path = self._build(source)
        self._lib = self._load(self.library_path)
        self._launchers = {k: self._bind(i) for i, k in enumerate(self.kernels)}

    # -- build -------------------------------------------------------------------------------------------
    def _wrapper(self, source: str) -> str:
        """The text g++ preprocesses: the emulator header, `__CUDA_ARCH__` (see device_arch_define), the source at its
        own line numbers, launchers."""
        name = self.name.replace("\\", "/").replace('"', "")
        return (f'#include "cuda_emu.h"\n{device_arch_define(self.arch)}#line 1 "{name}"\n{source}\n'
                f'#line 1 "<emu launchers>"\n{_launcher_source(self.kernels)}')

    def _build(self, source: str) -> Path:
        """Preprocesses, rewrites, and compiles unless the cache already holds the same text and flags."""
        cxx = _compiler()
        out_dir = cache_dir()
        out_dir.mkdir(parents=True, exist_ok=True)
        # #include "x.h" also searches the source file's folder, as when nvcc compiles that file
        incs = [f"-iquote{d}" for d in self._quote_dirs] + [f"-I{d}" for d in self._include_dirs]
        wrapper = _stable_file(out_dir / "src", self._wrapper(source), ".cu")  # its path is in line markers
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            defines = self._defines + (["-DEMU_SANITIZE=1"] if self.sanitize else [])
            pre = _run_compiler([cxx, "-std=c++20", "-E", "-x", "c++", *incs, *defines, str(wrapper)],
                                f"to preprocess {self.name}").stdout
            text = rewrite_inline_ptx(rewrite_shared(pre))  # the PTX forms emu_mma.h models become its calls
            # line markers name include paths (often fresh temp folders): they do not change the code
            code = re.sub(r'^# \d+ "[^"\n]*".*$', "", text, flags=re.M)
            # a sanitized build's line tables name the source file in its reports: that name is part of the key
            named = (self.name,) if self.sanitize else ()
            lib = out_dir / f"{content_key(code, *self._flags, cxx, _compiler_version(cxx), *named)}.so"
            with build_lock(lib):  # one process compiles a given module; the others wait and load its result
                if lib.exists() and _loadable(lib):
                    with contextlib.suppress(OSError):
                        os.utime(lib)  # recently used: the cache's size cap evicts the least recently used first
                    return lib
                tmp_lib = Path(tmp) / "out.so"
                self.compiled_with = self._compile(cxx, text, Path(tmp), tmp_lib)
                os.replace(tmp_lib, lib)
        evict("emu", keep=lib)
        return lib

    def _compile(self, cxx: str, text: str, tmp: Path, out: Path) -> str:
        """Compiles the rewritten text into `out`: with the precompiled emulator header when there is one (see pch.py),
        else, or when that fails, plainly; returns which ("pch" or "plain")."""
        def compile_file(name: str, body: str) -> None:
            (tmp / name).write_text(body)
            _run_compiler([cxx, *self._flags, "-x", "c++-cpp-output", str(tmp / name), "-o", str(out)],
                          f"to compile {self.name}")

        parts = pch.split(text) if pch.enabled() else None
        gch = pch.prepare(parts, self._flags, cxx, _compiler_version(cxx)) if parts else None
        if parts and gch:
            with contextlib.suppress(EmuCompileError):
                compile_file("pch.ii", parts.with_pch(gch))
                return "pch"
        try:
            compile_file("src.ii", text)
        except EmuCompileError as e:
            raise EmuCompileError(self._explain(str(e))) from None
        if gch:
            pch.discard(gch)   # the plain compile succeeded where the PCH's failed: the PCH is at fault
        return "plain"

    def _explain(self, msg: str) -> str:
        """Names the kernel expression when the error is in a generated launcher."""
        m = re.search(r"<emu launchers>:(\d+)", msg)
        if m and 0 < int(m.group(1)) <= len(self.kernels):
            k = self.kernels[int(m.group(1)) - 1]
            msg += f"\n(kernel expression {k!r} must name one __global__ function, template arguments included)"
        return msg

    @staticmethod
    def _load(path: Path) -> ctypes.CDLL:
        """Loads a built library once per process."""
        key = str(path)
        if key not in _LIBS:
            _LIBS[key] = _declare(ctypes.CDLL(key))
        return _LIBS[key]

    def _renew(self) -> None:
        """Loads a private copy of the library (its globals at their initial values) and binds its launchers. Earlier
        copies stay loaded: an array from guarded_array() frees its region through the copy that made it."""
        folder = cache_dir() / "fresh"
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
        os.close(fd)
        try:
            shutil.copyfile(self.library_path, tmp)
            self._lib = _declare(ctypes.CDLL(tmp))  # another path: the loader maps it anew
        finally:
            os.unlink(tmp)
        self._launchers = {k: self._bind(i) for i, k in enumerate(self.kernels)}

    def _bind(self, i: int):
        """The ctypes function of launcher i."""
        fn = getattr(self._lib, f"emu_launch_{i}")
        fn.argtypes = [ctypes.POINTER(_Cfg), ctypes.POINTER(_Arg), ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn

    # -- launch ------------------------------------------------------------------------------------------
    def launch(self, kernel: str, grid: int | Sequence[int], block: int | Sequence[int], dyn_smem: int = 0,
               args: Sequence[Any] = (), cooperative: bool = False, yield_budget: int | None = None,
               stall_timeout: float | None = None, names: Sequence[str] | None = None,
               buffers: Mapping[int, tuple[str, np.ndarray]] | None = None,
               order: Sequence[int] | np.ndarray | None = None) -> None:
        """Runs kernel over grid x block threads; raises EmuError with the emulator's message on failure.

        `order`: the linear block ids in the order the blocks run, one after another (default 0, 1, 2...); a
        permutation of the grid's blocks, for a launch that is not cooperative.

        yield_budget bounds the polling of the whole launch; stall_timeout (seconds, 0 = off) bounds how
        long one thread may run without reaching a yield point (a spin loop that never yields).
        With sanitizers, `names[i]` names argument i in reports (default "arg<i>"); `buffers` (address ->
        (name, array)) registers device memory reached otherwise than through arguments (the vDevice's
        tables point into such arrays, which must come from guarded_array()).
        """
        fn = self._launchers.get(kernel)
        if fn is None:
            raise EmuError(f"bad launch: kernel {kernel!r} was not built into this module (built: {self.kernels})")
        # the environment, when set, overrides every default and every computed value (the user's escape hatch)
        budget = env_yield_budget(check_yield_budget(self.yield_budget if yield_budget is None else yield_budget,
                                                     "yield_budget"))
        if not isinstance(dyn_smem, (int, np.integer)) or dyn_smem < 0:
            raise EmuError(f"bad launch: dyn_smem must be a byte count >= 0, got {dyn_smem!r}")
        stall = env_stall_timeout(check_stall_timeout(self.stall_timeout if stall_timeout is None else stall_timeout,
                                                      "stall_timeout"))
        arch = target_arch(self.arch)
        dims = _dim3(grid, "grid")
        blocks = _block_order(order, dims[0] * dims[1] * dims[2], cooperative)
        cfg = _Cfg((ctypes.c_uint * 3)(*dims), (ctypes.c_uint * 3)(*_dim3(block, "block")),
                   int(dyn_smem), int(bool(cooperative)), budget, int(self.stack_size), stall_ms(stall),
                   STATIC_SMEM_LIMIT, SMEM_PER_BLOCK[arch], arch.encode(),
                   blocks.ctypes.data_as(ctypes.POINTER(ctypes.c_uint)) if blocks is not None else None)
        with _LAUNCH_LOCK:
            before = _snapshot(args, buffers) if "synccheck" in self.sanitize else None
            undefined = self._launch_once(kernel, fn, cfg, args, names, buffers)
            if undefined and before is not None:
                self._check_undefined_reads(kernel, fn, cfg, args, names, buffers, before, undefined)

    def _launch_once(self, kernel: str, fn: Any, cfg: Any, args: Sequence[Any], names: Sequence[str] | None,
                     buffers: Mapping[int, tuple[str, np.ndarray]] | None, poison: bool = False) -> str:
        """One run of the launcher; returns synccheck's note of a shuffle that read an exited lane ('' if none).
        `poison`: such a read gets a poisoned value (synccheck's rerun)."""
        if self.fresh_globals:
            self._renew()
            fn = self._launchers[kernel]
        if poison:
            self._lib.emu_san_poison(1)
        try:
            return self._launch_body(kernel, fn, cfg, args, names, buffers)
        finally:
            if poison:
                self._lib.emu_san_poison(0)

    def _launch_body(self, kernel: str, fn: Any, cfg: Any, args: Sequence[Any], names: Sequence[str] | None,
                     buffers: Mapping[int, tuple[str, np.ndarray]] | None) -> str:
        """The launcher's call with the arguments guarded (see _launch_once)."""
        keep: list[Any] = []
        err = ctypes.create_string_buffer(_ERR_CAP)
        note = ctypes.create_string_buffer(_ERR_CAP)
        stats = _Stats()
        with self._guarded_args(args, names, buffers) as launch_args:
            argv = (_Arg * max(1, len(launch_args)))(*[_pack(i, a, keep) for i, a in enumerate(launch_args)])
            rc = fn(ctypes.byref(cfg), argv, len(launch_args), err, _ERR_CAP)
            self._lib.emu_last_stats(ctypes.byref(stats))
            undefined = self._lib.emu_san_undefined(note, _ERR_CAP) if self.sanitize else 0
        self.last_stats = LaunchStats(stats.switches, stats.yields, stats.turns, stats.blocks, stats.threads,
                                      stats.seconds)
        if rc:
            raise EmuError(f"{kernel}: {self.resolve_sites(err.value.decode(errors='replace'))}")
        return note.value.decode(errors="replace") if undefined else ""

    def _check_undefined_reads(self, kernel: str, fn: Any, cfg: Any, args: Sequence[Any],
                               names: Sequence[str] | None, buffers: Mapping[int, tuple[str, np.ndarray]] | None,
                               before: list[np.ndarray], undefined: str) -> None:
        """A shuffle read an exited lane (undefined in the PTX ISA): reruns the launch from the same inputs with
        that value poisoned, and again plainly; reports the read when only the poisoned run's results differ (a
        kernel that drops the value, or that no rerun reproduces, is left alone). The first run's results stay."""
        first = _snapshot(args, buffers)
        poisoned: list[np.ndarray] | None = None
        failure = ""
        try:
            _restore(args, buffers, before)
            try:
                self._launch_once(kernel, fn, cfg, args, names, buffers, poison=True)
                poisoned = _snapshot(args, buffers)
            except EmuError as e:
                failure = str(e).split("\n")[0]
            _restore(args, buffers, before)
            self._launch_once(kernel, fn, cfg, args, names, buffers)
            reproduced = _same(_snapshot(args, buffers), first)
        finally:
            _restore(args, buffers, first)
        if reproduced and (failure or not _same(poisoned or [], first)):
            effect = f"the launch then fails: {failure}" if failure else "the launch's results change with that value"
            raise EmuError(f"{kernel}: synccheck: {self.resolve_sites(undefined)}; {effect}")

    # -- sanitizers ------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _guarded_args(self, args: Sequence[Any], names: Sequence[str] | None,
                      buffers: Mapping[int, tuple[str, np.ndarray]] | None):
        """The launch's arguments as the kernel sees them: without sanitizers the caller's own; with them each
        array is copied into a guarded region (redzones around it) and registered by name, and copied back
        after the launch, so a stray access is reported instead of corrupting the process."""
        flags = sum(SANITIZERS[s] for s in self.sanitize)
        self._lib.emu_san_begin(flags)
        if not flags:
            yield list(args)
            return
        copies: list[tuple[np.ndarray, np.ndarray, int, int]] = []  # (caller's array, guarded copy, address, bytes)
        try:
            out: list[Any] = []
            for i, a in enumerate(args):
                if isinstance(a, np.ndarray) and a.size and a.flags.c_contiguous and not a.dtype.hasobject:
                    g, addr = self._alloc_guarded(a.nbytes)
                    view = np.frombuffer(g, dtype=a.dtype).reshape(a.shape)
                    view[...] = a
                    copies.append((a, view, addr, a.nbytes))
                    name = names[i] if names is not None and i < len(names) else f"arg{i}"
                    self._lib.emu_san_add(addr, a.nbytes, REDZONE, a.itemsize, name.encode()[:63])
                    out.append(view)
                else:
                    out.append(a)
            for addr, (name, arr) in (buffers or {}).items():
                self._lib.emu_san_add(addr, arr.nbytes, REDZONE, arr.itemsize, name.encode()[:63])
            yield out
        finally:
            for a, view, addr, n in copies:
                a[...] = view
                self._lib.emu_san_free(addr, n, REDZONE)
            self._lib.emu_san_begin(0)

    def _alloc_guarded(self, nbytes: int) -> tuple[Any, int]:
        """A ctypes byte array over a fresh guarded region of `nbytes` (freed with emu_san_free)."""
        addr = self._lib.emu_san_alloc(nbytes, REDZONE)
        if not addr:
            raise EmuError(f"bad launch: out of memory for a guarded buffer of {nbytes} bytes")
        return (ctypes.c_char * nbytes).from_address(addr), addr

    def guarded_array(self, shape: Sequence[int], dtype: Any, name: str) -> np.ndarray:
        """A zeroed array in a guarded region that lives as long as the returned array; pass its address and
        name to launch(buffers=...) so a sanitized launch checks accesses to it."""
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        raw, addr = self._alloc_guarded(max(1, n))
        weakref.finalize(raw, self._lib.emu_san_free, addr, max(1, n), REDZONE)  # every view keeps raw alive
        return np.frombuffer(raw, dtype=np.uint8, count=n).view(dtype).reshape(shape)

    def resolve_sites(self, message: str) -> str:
        """Replaces each "@@SITE:+0x..@@" of a report by the file:line (and function) of that code address."""
        offsets = list(dict.fromkeys(_SITE_RE.findall(message)))
        if not offsets:
            return message
        where = _addr2line(self.library_path, offsets)
        return _SITE_RE.sub(lambda m: where.get(m.group(1), f"+0x{m.group(1)}"), message)


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """The argument and result types of a built library's emulator entry points."""
    lib.emu_last_stats.argtypes = [ctypes.POINTER(_Stats)]
    lib.emu_last_stats.restype = None
    lib.emu_san_begin.argtypes = [ctypes.c_uint]
    lib.emu_san_add.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_uint,
                                ctypes.c_char_p]
    lib.emu_san_alloc.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong]
    lib.emu_san_alloc.restype = ctypes.c_void_p
    lib.emu_san_free.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_ulonglong]
    lib.emu_san_undefined.argtypes = [ctypes.c_char_p, ctypes.c_uint]
    lib.emu_san_undefined.restype = ctypes.c_uint
    lib.emu_san_poison.argtypes = [ctypes.c_int]
    return lib


def _loadable(lib: Path) -> bool:
    """Whether a cached library loads; a damaged one (truncated by a crash, a full disk) is removed so the
    caller rebuilds it."""
    try:
        CpuModule._load(lib)  # loaded once here and kept: the module's own _load then finds it in _LIBS
        return True
    except OSError:
        lib.unlink(missing_ok=True)
        return False


def _addr2line(library: Path, offsets: list[str]) -> dict[str, str]:
    """"file:line (function)" of code offsets of a library built with line tables. The offsets are return
    addresses, so the call is the byte before; with inlining addr2line -i lists the innermost frame first."""
    tool = shutil.which("addr2line")
    out: dict[str, str] = {}
    for o in offsets if tool else []:
        try:
            res = subprocess.run([tool, "-f", "-i", "-C", "-e", str(library), hex(int(o, 16) - 1)],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        frames = list(zip(res.stdout.splitlines()[0::2], res.stdout.splitlines()[1::2]))
        # innermost first: skip the emulator's own wrappers (an inlined __syncthreads) for the caller's line
        user = [f for f in frames if not f[1].startswith("??") and not f[1].startswith(str(INCLUDE_DIR))]
        if user:
            func, loc = user[0]
            out[o] = f"{re.sub(r' [(]discriminator [0-9]+[)]$', '', loc)} ({func})"
    return out


def _dim3(v: int | Sequence[int], what: str) -> tuple[int, int, int]:
    """(x, y, z) from an int or a 1..3-tuple of positive ints."""
    dims = [v] if isinstance(v, (int, np.integer)) else list(v)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and 0 < d < 2**32 for d in dims):
        raise EmuError(f"bad launch: {what} must be a positive int or 1-3 positive ints, got {v!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


def _block_order(order: Sequence[int] | np.ndarray | None, blocks: int, cooperative: bool) -> np.ndarray | None:
    """A launch's block order as the uint32 array the launcher reads, or None (0, 1, 2...); EmuError when it is not
    a permutation of the grid's blocks."""
    if order is None:
        return None
    if cooperative:
        raise EmuError("bad launch: a cooperative launch runs its blocks together: it takes no block order")
    arr = np.ascontiguousarray(np.asarray(order), dtype=np.uint32)
    if arr.ndim != 1 or arr.size != blocks or not np.array_equal(np.sort(arr), np.arange(blocks, dtype=np.uint32)):
        raise EmuError(f"bad launch: the block order must list each of the grid's {blocks} blocks once")
    return arr


def _pack(i: int, a: Any, keep: list[Any]) -> _Arg:
    """One launcher slot for argument i (keep holds the buffers the slot points into)."""
    if a is None:
        return _Arg(_PTR, 8, None)
    if isinstance(a, np.ndarray):
        if a.dtype.hasobject:
            raise EmuError(f"bad argument {i}: arrays of Python objects cannot be device buffers")
        if not a.flags.c_contiguous:
            raise EmuError(f"bad argument {i}: arrays must be C-contiguous (use np.ascontiguousarray)")
        return _Arg(_PTR, 8, a.ctypes.data or None)
    if isinstance(a, bool):
        a = np.bool_(a)
    elif isinstance(a, int):
        a = np.int64(a)
    elif isinstance(a, float):
        a = np.float64(a)
    if isinstance(a, (bytes, bytearray)):
        buf = ctypes.create_string_buffer(bytes(a), len(a))
        keep.append(buf)
        return _Arg(_RAW, len(a), ctypes.addressof(buf))
    if isinstance(a, np.generic):
        arr = np.array(a)
        keep.append(arr)
        kind = _KINDS.get(arr.dtype, _RAW if arr.dtype.kind == "V" else None)
        if kind is None:
            raise EmuError(f"bad argument {i}: unsupported scalar dtype {arr.dtype}")
        return _Arg(kind, arr.dtype.itemsize, arr.ctypes.data)
    raise EmuError(f"bad argument {i}: expected a numpy array, numpy scalar, int, float, bool, bytes or None, "
                   f"got {type(a).__name__}")


def _arrays(args: Sequence[Any], buffers: Mapping[int, tuple[str, np.ndarray]] | None) -> list[np.ndarray]:
    """The device memory a launch may change: its array arguments and the registered buffers."""
    return [a for a in args if isinstance(a, np.ndarray)] + [arr for _, arr in (buffers or {}).values()]


def _snapshot(args: Sequence[Any], buffers: Mapping[int, tuple[str, np.ndarray]] | None) -> list[np.ndarray]:
    """Copies of that memory (to rerun a launch from the same inputs)."""
    return [a.copy() for a in _arrays(args, buffers)]


def _restore(args: Sequence[Any], buffers: Mapping[int, tuple[str, np.ndarray]] | None,
             saved: list[np.ndarray]) -> None:
    for a, s in zip(_arrays(args, buffers), saved):
        a[...] = s


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Bit for bit (a NaN equals the same NaN)."""
    return len(a) == len(b) and all(x.tobytes() == y.tobytes() for x, y in zip(a, b))
