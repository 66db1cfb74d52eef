"""Parse CUDA sources with libclang, without needing a CUDA toolkit."""
from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import clang.cindex as ci

from toolchain.stubs import PARSE_DEFINE, has_stub, stub_dirs

INCLUDE_DIR = Path(__file__).parent / "include"
PRELUDE = INCLUDE_DIR / "cuda_parse_prelude.h"
CLANG_ARGS = [
    "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_90", "-nocudainc", "-nocudalib",
    "-std=c++17", "-w", "-Wno-everything", "-ferror-limit=0",
]
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)


@dataclass
class ParsedSource:
    """A translation unit plus what the converter needs to map cursors back to text."""
    filename: str
    text: str
    tu: ci.TranslationUnit
    missing_includes: list[str] = field(default_factory=list)
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
        import bisect
        i = bisect.bisect_right(self._line_starts, offset) - 1
        return i + 1, offset - self._line_starts[i] + 1

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


_DYN_PARALLEL_RE = re.compile(r"reference to __global__ function '[^']*' in __(global|device)__ function")


def _line_starts(raw: bytes) -> list[int]:
    starts = [0]
    for i, b in enumerate(raw):
        if b == 10:
            starts.append(i + 1)
    return starts


def _resolvable(name: str, angled: bool, base_dir: Path, include_dirs: list[Path]) -> bool:
    if has_stub(name):
        return True
    search = ([] if angled else [base_dir]) + include_dirs
    if any((d / name).exists() for d in search):
        return True
    # system C/C++ headers resolve through clang's own search path; names without a known stub that look
    # like standard headers are left to clang.
    return angled and ("/" not in name) and (name.endswith(".h") is False or name in _STD_C_HEADERS)


_STD_C_HEADERS = {"stdio.h", "stdlib.h", "stdint.h", "math.h", "string.h", "float.h", "limits.h",
                  "assert.h", "stddef.h", "stdbool.h", "time.h"}


def parse_cuda(text: str, filename: str, include_dirs: list[str] | None = None) -> ParsedSource:
    """Parse CUDA source text; unresolvable includes become empty headers and are reported, not fatal."""
    base_dir = Path(os.path.abspath(filename)).parent
    incs = [Path(p) for p in (include_dirs or [])]
    unsaved = [(filename, text)]
    missing: list[str] = []
    stub_dir = "/__rtransform_missing__"
    for m in _INCLUDE_RE.finditer(text):
        angled, name = m.group(1) == "<", m.group(2)
        if not _resolvable(name, angled, base_dir, incs):
            missing.append(name)
            unsaved.append((f"{stub_dir}/{name}", "// missing header (rtransform)\n"))
    args = CLANG_ARGS + [f"-D{PARSE_DEFINE}=1", "-include", str(PRELUDE)] + [f"-I{d}" for d in stub_dirs()]
    args += [f"-I{stub_dir}"]
    args += [f"-I{p}" for p in incs] + [f"-I{base_dir}"]
    index = ci.Index.create()
    tu = index.parse(filename, args=args, unsaved_files=unsaved,
                     options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    return ParsedSource(filename, text, tu, missing, _line_starts(text.encode()))
