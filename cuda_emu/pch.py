"""The emulator's precompiled header: most of a module's compile time is g++ parsing cuda_emu.h and the C and C++
library headers it includes; this parses them once per distinct header text and compiler flags.

The plain build (module.py) preprocesses the wrapper (`#include "cuda_emu.h"`, the source, launchers) and compiles
the rewritten text. The text up to where the preprocessor returns from cuda_emu.h to the wrapper is the header's
part: it does not depend on the source (only on the defines and the emulator's headers). Here that part, exactly as
the plain build would compile it, is compiled once into a PCH (`g++ -fpreprocessed -x c++-header`) under the cache's
`pch` part, keyed by its text, the flags, the compiler and its version; a module's compile then reads the PCH
(`#pragma GCC pch_preprocess`, the form `g++ -E -fpch-preprocess` writes) in place of that part. The library comes
out the same, byte for byte (tests/test_emu_build.py), so both paths share the library cache.

Safety: the PCH is written atomically with a SHA-256 digest beside it, checked before a process first uses it (a
damaged file is rebuilt); a key's PCH is built the second time the key is met (a header text seen once, such as a
module whose defines change the headers, is not worth a PCH); any failure of the PCH path falls back to the plain
compile (module.py), and when the plain compile then succeeds the PCH is discarded, to be rebuilt. $RAMMER_EMU_PCH=0
turns the PCH off.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from toolchain.cache import build_lock, cache_dir, content_key, evict

from .env import PCH_ENV

HEADER = "cuda_emu.h"
_MAIN = "<emu pch>"   # the main file's name in the PCH's source (a module's own wrapper name varies)
_OFF = ("0", "off", "no", "false")
_verified: dict[tuple[str, int, int, int], bool] = {}   # (path, inode, size, mtime) -> digest checked and equal
_failed: set[str] = set()   # keys whose PCH g++ could not build in this process: not retried


def enabled() -> bool:
    """Whether builds use the precompiled header ($RAMMER_EMU_PCH=0 turns it off)."""
    return os.environ.get(PCH_ENV, "").strip().lower() not in _OFF


@dataclass(frozen=True)
class Split:
    """A module's preprocessed text in three parts: the prologue (the main file's and built-in line markers), the
    header's part (cuda_emu.h and all it includes), and the rest (from the return to the wrapper: the source)."""
    main: str       # the wrapper's name as the line markers spell it
    prologue: str
    header: str
    rest: str

    def pch_source(self) -> str:
        """What the PCH is compiled from: the prologue and the header's part, the wrapper's name made constant."""
        return (self.prologue + self.header).replace(f'"{self.main}"', f'"{_MAIN}"')

    def with_pch(self, gch: Path) -> str:
        """The module's text that reads `gch` in place of the header's part (the return marker's flag dropped: no
        include is open there any more)."""
        first, _, rest = self.rest.partition("\n")
        return f'{self.prologue}#pragma GCC pch_preprocess "{gch}"\n{first[:-2]}\n{rest}'


def split(text: str) -> Split | None:
    """The parts of a preprocessed wrapper, or None when the text is not laid out as expected (no PCH then)."""
    m = re.match(r'# 0 "((?:[^"\\\n]|\\.)*)"\n', text)
    if not m:
        return None
    main = m.group(1)
    push = re.compile(r'^# 1 "' + re.escape(main) + r'"\n# 1 "(?:[^"\\\n]|\\.)*/' + re.escape(HEADER) + r'" 1\n',
                      re.M).search(text)
    if not push:
        return None
    start = push.start() + len(f'# 1 "{main}"\n')
    back = re.compile(r'^# \d+ "' + re.escape(main) + r'" 2$', re.M).search(text, start)
    if not back:
        return None
    return Split(main, text[:start], text[start:back.start()], text[back.start():])


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _sidecar(gch: Path) -> Path:
    return gch.with_name(gch.name + ".sha256")


def intact(gch: Path) -> bool:
    """Whether `gch` exists and matches the digest written beside it when it was built (checked once per process
    per file version)."""
    try:
        st = gch.stat()
        want = _sidecar(gch).read_text().strip()
    except OSError:
        return False
    memo = (str(gch), st.st_ino, st.st_size, st.st_mtime_ns)
    if memo not in _verified:
        try:
            _verified[memo] = _digest(gch) == want
        except OSError:
            return False
    return _verified[memo]


def discard(gch: Path) -> None:
    """Removes a PCH (and its digest) that g++ would not use, so that the next build of its key rebuilds it."""
    with build_lock(gch):
        for p in (gch, _sidecar(gch)):
            p.unlink(missing_ok=True)


def prepare(parts: Split, flags: Sequence[str], cxx: str, version: str) -> Path | None:
    """The PCH for this header text and flags, built now if the key was met before; None: compile plainly."""
    source = parts.pch_source()
    key = content_key(source, *flags, cxx, version)
    folder = cache_dir("pch")
    if key in _failed or any(c in str(folder) for c in '"\\\n'):   # the pragma names it in a plain string
        return None
    folder.mkdir(parents=True, exist_ok=True)
    gch = folder / f"{key}.gch"
    if intact(gch):
        with contextlib.suppress(OSError):
            os.utime(gch)   # recently used (the size cap evicts the least recently used first)
        return gch
    seen = folder / f"{key}.seen"
    if not seen.exists() and not gch.exists():
        seen.touch()        # first time: the plain compile; the second build of this key makes the PCH
        return None
    with build_lock(gch):
        if intact(gch):
            return gch
        if not _build(source, flags, cxx, gch):
            _failed.add(key)
            return None
    evict("pch", keep=gch)
    return gch


def _build(source: str, flags: Sequence[str], cxx: str, gch: Path) -> bool:
    """Compiles the header's part into `gch` (atomically, its digest beside it); False when g++ fails."""
    with tempfile.TemporaryDirectory(dir=gch.parent) as tmp:
        src, out = Path(tmp) / "pch.ii", Path(tmp) / "out.gch"
        src.write_text(source)
        cmd = [cxx, *(f for f in flags if f != "-shared"), "-fpreprocessed", "-x", "c++-header", str(src),
               "-o", str(out)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError):
            return False
        if res.returncode != 0 or not out.is_file():
            return False
        sidecar = _sidecar(gch)
        tmp_sidecar = Path(tmp) / "out.sha256"
        tmp_sidecar.write_text(_digest(out) + "\n")
        os.replace(tmp_sidecar, sidecar)   # the digest first: a reader that meets the old file with it rechecks
        os.replace(out, gch)               # under the lock, which this builder holds
    return True
