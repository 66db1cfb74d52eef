"""Parse CUDA sources with libclang, without needing a CUDA toolkit."""
from __future__ import annotations

import ctypes
import os
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import clang.cindex as ci

from toolchain.files import InputError, include_closure, is_utf8, shown, source_text
from toolchain.macros import expansion_bomb

from .flags import CompileFlags
from toolchain.stubs import CLANG_BUILTINS, PARSE_DEFINE, has_stub, stub_dirs

INCLUDE_DIR = Path(__file__).parent / "include"
PRELUDE = INCLUDE_DIR / "cuda_parse_prelude.h"
CLANG_ARGS = [
    "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_90", "-nocudainc", "-nocudalib",
    "-w", "-Wno-everything", "-ferror-limit=0",
]
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)


@dataclass
class ParsedSource:
    """A translation unit plus what the converter needs to map cursors back to text."""
    filename: str
    text: str
    tu: ci.TranslationUnit
    missing_includes: list[str] = field(default_factory=list)
    missing_via: dict[str, str] = field(default_factory=dict)   # a missing header of a local header: its includer
    _line_starts: list[int] = field(default_factory=list)
    _main_file: int | None = None     # the main file's CXFile handle, compared by value in is_main

    def __post_init__(self) -> None:
        try:
            f = self.tu.get_file(self.filename)
            self._main_file = ctypes.cast(f.obj, ctypes.c_void_p).value if f is not None else None
        except Exception:  # noqa: BLE001 - fall back to comparing file names
            self._main_file = None

    def offset(self, line: int, col: int) -> int:
        """Byte offset of a 1-based (line, col) in the source text."""
        return self._line_starts[line - 1] + col - 1

    def location(self, offset: int) -> tuple[int, int]:
        """1-based (line, col) of a byte offset."""
        return line_col(self._line_starts, offset)

    def is_main(self, cursor: ci.Cursor) -> bool:
        """True when the cursor is spelled in the main file (not in the prelude or a header).

        The file of the cursor's expansion location, compared by handle: no File object, no name string (the
        converter asks this of every top-level cursor, most of them from the parse prelude).
        """
        if self._main_file is None:
            f = cursor.location.file
            return f is not None and f.name == self.filename
        handle = ci.c_object_p()
        ci.conf.lib.clang_getInstantiationLocation(cursor.location, ctypes.byref(handle), None, None, None)
        return ctypes.cast(handle, ctypes.c_void_p).value == self._main_file

    def errors(self) -> list[ci.Diagnostic]:
        """Clang errors located in the main file.

        Except clang's "reference to __global__ function 'K' in __global__ function": clang has no CUDA dynamic
        parallelism, so every device-side kernel launch gets it, while nvcc (-rdc) accepts the code; the converter
        refuses such launches itself, at the `<<<`, and that is the one report of the problem.
        """
        return [d for d in self.tu.diagnostics
                if d.severity >= ci.Diagnostic.Error and d.location.file is not None
                and d.location.file.name == self.filename and not _DYN_PARALLEL_RE.match(d.spelling)]


    def header_errors(self) -> list[HeaderError]:
        """Errors outside the main file that can change what the converter sees.

        A fatal error anywhere (a header not found, an #error) stops clang's template instantiation for the whole
        translation unit; any other error in a header counts unless it lies in the body of a host-only function
        (host code is never converted: its errors cannot change the device analysis).
        """
        out: list[HeaderError] = []
        diags = [d for d in self.tu.diagnostics if d.severity >= ci.Diagnostic.Error and d.location.file is not None
                 and (d.location.file.name != self.filename or d.severity >= ci.Diagnostic.Fatal)]
        host = _host_bodies(self.tu, {d.location.file.name for d in diags if d.severity < ci.Diagnostic.Fatal})
        for d in diags:
            name = d.location.file.name
            if d.severity < ci.Diagnostic.Fatal and _inside(host[name], d.location.line, d.location.column):
                continue
            out.append(HeaderError(name, d.location.line, d.location.column, d.spelling,
                                   d.severity >= ci.Diagnostic.Fatal, self._includer(name)))
        return out

    def _includer(self, header: str) -> str:
        """The chain of files that included `header`, outermost first (the main file's own #include line)."""
        by_file = {inc.include.name: inc for inc in self.tu.get_includes() if inc.include is not None}
        chain, seen = [], {header}
        inc = by_file.get(header)
        while inc is not None and inc.source is not None:
            chain.append(f"{inc.source.name}:{inc.location.line}")
            src = inc.source.name
            if src in seen:
                break
            seen.add(src)
            inc = by_file.get(src)
        return " <- ".join(chain)


@dataclass
class HeaderError:
    """A clang error outside the main file that the converter cannot ignore."""
    file: str
    line: int
    col: int
    message: str
    fatal: bool
    included_from: str   # "main.cu:3 <- ..." innermost first; empty for the main file

    def diagnostic(self, kernels: list[str]) -> str:
        """One `file:line:col: error:` line naming the header and the kernels whose analysis it changes."""
        what = "stops clang's analysis (templates are no longer instantiated)" if self.fatal \
            else "leaves a declaration unanalysed"
        via = f" (included from {self.included_from})" if self.included_from else ""
        ks = ", ".join(kernels) or "every kernel"
        return (f"{self.file}:{self.line}:{self.col}: error: {self.message}{via}: this {what}, so kernel(s) {ks} "
                f"cannot be converted reliably; add the include path (-I) or fix the header")


def _host_bodies(tu: ci.TranslationUnit, files: set[str]) -> dict[str, list[tuple[int, int, int, int]]]:
    """Extents ((line, col) start and end) of the bodies of host-only functions defined in `files`."""
    out: dict[str, list[tuple[int, int, int, int]]] = {f: [] for f in files}
    if not files:
        return out

    def visit(parent: ci.Cursor) -> None:
        for c in parent.get_children():
            f = c.location.file
            if f is None or f.name not in files:
                continue
            if c.kind in _SCOPES:
                visit(c)
            elif c.kind in _FUNCTION_KINDS and c.is_definition():
                attrs = {a.kind for a in c.get_children() if a.kind.is_attribute()}
                if attrs & {ci.CursorKind.CUDADEVICE_ATTR, ci.CursorKind.CUDAGLOBAL_ATTR}:
                    continue
                body = next((b for b in c.get_children() if b.kind == ci.CursorKind.COMPOUND_STMT), None)
                if body is not None:
                    e = body.extent
                    out[f.name].append((e.start.line, e.start.column, e.end.line, e.end.column))
    visit(tu.cursor)
    return out


def _inside(spans: list[tuple[int, int, int, int]], line: int, col: int) -> bool:
    return any((l0, c0) <= (line, col) <= (l1, c1) for l0, c0, l1, c1 in spans)


_SCOPES = {ci.CursorKind.NAMESPACE, ci.CursorKind.LINKAGE_SPEC, ci.CursorKind.UNEXPOSED_DECL,
           ci.CursorKind.STRUCT_DECL, ci.CursorKind.CLASS_DECL, ci.CursorKind.CLASS_TEMPLATE}
_FUNCTION_KINDS = {ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE, ci.CursorKind.CXX_METHOD,
                   ci.CursorKind.CONSTRUCTOR, ci.CursorKind.DESTRUCTOR}
_DYN_PARALLEL_RE = re.compile(r"reference to __global__ function '[^']*' in __(global|device)__ function")


def line_col(line_starts: list[int], offset: int) -> tuple[int, int]:
    """1-based (line, col) of a byte offset, given the offsets where the file's lines start."""
    import bisect
    i = bisect.bisect_right(line_starts, offset) - 1
    return i + 1, offset - line_starts[i] + 1


def line_starts(raw: bytes) -> list[int]:
    starts = [0]
    for i, b in enumerate(raw):
        if b == 10:
            starts.append(i + 1)
    return starts


def _resolvable(name: str, angled: bool, base_dir: Path, include_dirs: list[Path]) -> bool:
    if has_stub(name) or (angled and (CLANG_BUILTINS / name).is_file()):  # stubs; the compiler's own (<stdarg.h>)
        return True
    search = ([] if angled else [base_dir]) + include_dirs
    if any((d / name).exists() for d in search):
        return True
    # system C/C++ headers resolve through clang's own search path; names without a known stub that look
    # like standard headers, or that the system include folders hold, are left to clang.
    if angled and any((d / name).is_file() for d in _SYSTEM_DIRS):
        return True
    return angled and ("/" not in name) and (name.endswith(".h") is False or name in _STD_C_HEADERS)


_SYSTEM_DIRS = [Path("/usr/local/include"), Path("/usr/include"),
                Path("/usr/include") / (sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu")]


_STD_C_HEADERS = {"stdio.h", "stdlib.h", "stdint.h", "math.h", "string.h", "float.h", "limits.h",
                  "assert.h", "stddef.h", "stdbool.h", "time.h"}


class SourceInputError(Exception):
    """Text the parser must not be given (an #include of a FIFO, a macro bomb); `diagnostics` holds the one
    `file:line:col: error:` line (the converter and the slicer raise it as their own errors)."""

    def __init__(self, diagnostic: str):
        super().__init__(diagnostic)
        self.diagnostics = [diagnostic]


def check_parse_inputs(text: str, filename: str, include_dirs: list[Path],
                       flags: CompileFlags) -> list[tuple[str, str]]:
    """Before libclang opens anything: every file the text includes is a regular file (a FIFO would block the parse
    forever) and no macro of the text or its headers expands past toolchain.macros' bound; every path is UTF-8
    text (libclang takes no other). Returns the headers whose bytes are not UTF-8, with their text
    (toolchain.files.source_text), for the parse to give libclang in place of the file."""
    for path in [filename, *map(str, include_dirs), *flags.includes]:
        if shown(path) != path:
            raise SourceInputError(f"{shown(path)}:1:1: error: the path is not UTF-8 text (a name from another "
                                   f"locale's encoding?): the parser cannot open it; rename it")
    try:
        headers = include_closure(filename, include_dirs, flags.includes, text.encode("utf-8", "surrogateescape"))
    except InputError as exc:
        raise SourceInputError(str(exc)) from None
    texts = [(filename, text)]
    recoded = []
    for h in headers:
        try:
            raw = h.path.read_bytes()
        except OSError:
            continue
        texts.append((str(h.path), source_text(raw)))
        if not is_utf8(raw):
            recoded.append(texts[-1])
    bomb = expansion_bomb(texts)
    if bomb:
        raise SourceInputError(bomb)
    return recoded


def parse_cuda(text: str, filename: str, include_dirs: list[str] | None = None,
               flags: CompileFlags | None = None) -> ParsedSource:
    """Parse CUDA source text with the file's compile flags; unresolvable includes of the main file become empty
    headers and are reported, not fatal. SourceInputError for text that would hang or exhaust the parser."""
    flags = flags or CompileFlags()
    base_dir = Path(os.path.abspath(filename)).parent
    incs = [Path(p) for p in (include_dirs or [])] + [Path(p) for p in flags.include_dirs]
    unsaved = [(filename, text), *check_parse_inputs(text, filename, incs, flags)]
    stub_dir = "/__rtransform_missing__"
    missing = _missing_includes(text, filename, base_dir, incs)
    for name in dict.fromkeys(name for name, _ in missing):
        unsaved.append((f"{stub_dir}/{name}", "// missing header (rtransform)\n"))
    args = CLANG_ARGS + [f"-D{PARSE_DEFINE}=1", "-include", str(PRELUDE)]
    args += [a for a in flags.clang_args() if not a.startswith("-I")]   # -std, -D, -include (after the prelude)
    args += [f"-I{p}" for p in incs]                                    # the user's folders before the stubs
    args += [f"-I{d}" for d in stub_dirs()]
    args += [f"-I{stub_dir}"]
    args += [f"-iquote{base_dir}", "-isystem", str(CLANG_BUILTINS)]
    index = ci.Index.create()
    tu = index.parse(filename, args=args, unsaved_files=unsaved,
                     options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    return ParsedSource(filename, text, tu, list(dict.fromkeys(n for n, _ in missing)),
                        {n: via for n, via in reversed(missing) if via != filename},
                        _line_starts=line_starts(text.encode()))


def _missing_includes(text: str, filename: str, base_dir: Path, incs: list[Path],
                      depth: int = 8) -> list[tuple[str, str]]:
    """(header, includer) of each #include that resolves nowhere, in the file and, recursively, in the local headers
    it includes: each is parsed as empty (a project's logging or serialization header that only host code needs
    must not stop the parse; device code that needs a declaration from one is refused by its own errors)."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    todo = [(text, filename, base_dir)]
    while todo and depth > 0:
        nxt = []
        for body, path, folder in todo:
            for m in _INCLUDE_RE.finditer(body):
                angled, name = m.group(1) == "<", m.group(2)
                if not _resolvable(name, angled, folder, incs):
                    out.append((name, path))
                    continue
                local = next((d / name for d in ([] if angled else [folder]) + incs if (d / name).is_file()), None)
                if local is None or str(local) in seen:
                    continue
                seen.add(str(local))
                try:
                    nxt.append((source_text(local.read_bytes()), str(local), local.parent))
                except OSError:
                    continue
        todo, depth = nxt, depth - 1
    return out
