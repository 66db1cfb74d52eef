"""One cache root and one key scheme for everything the toolchain keeps between runs (emulator builds, NVRTC
stubs, measured profiles): `$RAMMER_CACHE`, else `$XDG_CACHE_HOME/rammer`, else `~/.cache/rammer`; keys are
SHA-256 digests of the inputs."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import os
import shutil
from pathlib import Path
from typing import Iterator

from .files import write_atomic

ENV = "RAMMER_CACHE"
MAX_ENV = "RAMMER_CACHE_MAX_MB"
DEFAULT_MAX_MB = 4096  # emulator builds are 1-10 MB each: a few hundred kernels' worth before the oldest go


def cache_root() -> Path:
    """The cache folder: $RAMMER_CACHE, else $XDG_CACHE_HOME/rammer (the XDG base-directory spec: honoured only
    when absolute), else ~/.cache/rammer; created on first use by whoever writes there."""
    root = os.environ.get(ENV)
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "rammer"


# every kind of entry the toolchain keeps (pch: the emulator's precompiled headers, cuda_emu/pch.py)
PARTS = ("emu", "nvrtc", "pch", "profiles", "registers", "sliced")
TAG = "CACHEDIR.TAG"  # the Cache Directory Tagging convention (bford.info/cachedir): backup tools skip the folder
TAG_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
            "# The rammer toolchain's cache: `rammer cache info`, `rammer cache clear`. Only its parts\n"
            f"# ({', '.join(PARTS)}) are ever deleted.\n")
_claimed: set[Path] = set()


class CacheError(ValueError):
    """A cache root or part the toolchain will not use or delete; str() is the one line to print."""


def is_marked(root: Path) -> bool:
    """Whether `root` carries the cache's own tag (written by claim_root), as a regular file: its first two lines
    (the convention's signature and the cache's name), so a cache tagged by a version with other PARTS stays ours."""
    tag = root / TAG
    try:
        if not tag.is_file() or tag.is_symlink():
            return False
        with tag.open(errors="replace") as f:
            head = f.readline() + f.readline()
    except OSError:
        return False
    return head == "".join(TAG_TEXT.splitlines(keepends=True)[:2])


def _only_parts(root: Path) -> bool:
    """A folder holding nothing but the cache's parts (real folders): a cache written before the tag existed."""
    try:
        return all(e.name in PARTS and e.is_dir() and not e.is_symlink() for e in root.iterdir())
    except OSError:
        return False


def claim_root(root: Path | None = None) -> Path:
    """The cache root, tagged as the toolchain's: a new or empty folder, or one holding only the cache's parts,
    gets the tag; any other folder (a home folder named in $RAMMER_CACHE, say) is refused with CacheError."""
    root = cache_root() if root is None else root
    if root in _claimed:
        return root
    max_bytes()  # a bad $RAMMER_CACHE_MAX_MB is one line at the cache's first use, not a surprise at eviction
    if is_marked(root):
        try:
            if (root / TAG).read_text(errors="replace") != TAG_TEXT:  # tagged by a version with other PARTS
                write_atomic(root / TAG, TAG_TEXT)
        except OSError:
            pass  # a read-only cache is still usable for reading; the old tag still marks it
    else:
        if os.path.lexists(root) and not root.is_dir():
            raise CacheError(f"${ENV}={root}: error: not a folder; point ${ENV} at a new or empty folder")
        if root.is_dir() and not _only_parts(root):
            raise CacheError(f"${ENV}={root}: error: the folder holds files that are not the rammer cache's (no "
                             f"{TAG}); point ${ENV} at a new or empty folder")
        try:
            root.mkdir(parents=True, exist_ok=True)
            write_atomic(root / TAG, TAG_TEXT)
        except OSError as exc:
            raise CacheError(f"{root}: error: cannot create the cache: {exc.strerror or exc}") from None
    _claimed.add(root)
    return root


def cache_dir(kind: str) -> Path:
    """The sub-folder of one kind of entry (PARTS), under a root claimed as the cache's."""
    if kind not in PARTS:
        raise ValueError(f"cache part {kind!r} is not one of {PARTS} (add it to toolchain.cache.PARTS)")
    return claim_root() / kind


def content_key(*parts: str | bytes, length: int = 32) -> str:
    """Hex digest of the given parts, each length-prefixed so that ('ab', 'c') and ('a', 'bc') differ."""
    h = hashlib.sha256()
    for p in parts:
        data = p.encode() if isinstance(p, str) else p
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:length]


@contextlib.contextmanager
def build_lock(entry: Path) -> Iterator[None]:
    """An exclusive lock per cache entry (`NAME.lock` beside it), so that processes building the same entry at once
    (pytest-xdist workers, parallel builds) build it once: the others wait, then find it built. The OS releases the
    lock of a process that dies, so a waiter never waits on a dead builder."""
    with open(entry.with_name(entry.name + ".lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def usage() -> dict[str, tuple[int, int]]:
    """Per part of the cache: (files, bytes) — what `rammer cache info` prints (nothing else under the root is
    walked)."""
    root = cache_root()
    out: dict[str, tuple[int, int]] = {}
    for name in PARTS:
        sub = root / name
        if sub.is_dir() and not sub.is_symlink():
            files = [f for f in sub.rglob("*") if f.is_file() and not f.is_symlink()]
            out[name] = (len(files), sum(f.stat().st_size for f in files))
    return out


def clear(kind: str | None = None) -> int:
    """Remove one part of the cache (or every part, the tag, and the root when nothing else is left in it);
    returns the bytes freed. CacheError for a part the cache does not have, or a root that is not the cache's."""
    if kind is not None and kind not in PARTS:
        raise CacheError(f"{kind!r} is not a part of the cache (its parts: {', '.join(PARTS)}); nothing deleted")
    root = cache_root()
    if not root.is_dir():
        return 0
    if not is_marked(root) and not _only_parts(root):
        raise CacheError(f"${ENV}={root}: error: not the rammer cache (no {TAG} written by rammer, and it holds "
                         f"other files); nothing deleted")
    freed = 0
    for name in ([kind] if kind else list(PARTS)):
        part = root / name
        if part.is_dir() and not part.is_symlink():
            freed += sum(f.stat().st_size for f in part.rglob("*") if f.is_file() and not f.is_symlink())
            shutil.rmtree(part, ignore_errors=True)
    if kind is None:
        (root / TAG).unlink(missing_ok=True)
        _claimed.discard(root)
        try:
            root.rmdir()  # only when nothing of anyone else's is left in it
        except OSError:
            pass
    return freed


def max_bytes() -> int:
    """The cache's size cap: $RAMMER_CACHE_MAX_MB (0 = no cap), else DEFAULT_MAX_MB; CacheError (one line) for a
    value that is not a finite number >= 0."""
    raw = os.environ.get(MAX_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_MB * 2**20
    try:
        mb = float(raw)
    except ValueError:
        mb = float("nan")
    if not math.isfinite(mb) or mb < 0:
        raise CacheError(f"${MAX_ENV}={raw!r}: error: not a size in MB (a finite number >= 0; 0 = no cap)")
    return int(mb * 2**20)


def evict(kind: str, keep: Path | None = None, cap: int | None = None) -> int:
    """Keep one sub-folder under its share of the cap by removing its least recently used files (by access,
    else modification time), never `keep`; returns the bytes freed. Called after each new entry is written."""
    cap = max_bytes() if cap is None else cap
    folder = cache_dir(kind)
    if cap <= 0 or not folder.is_dir():
        return 0
    entries = []
    for root, dirs, files in os.walk(folder, onerror=lambda err: None):  # tolerant: others build and evict too
        dirs[:] = [d for d in dirs if not d.startswith("tmp")]  # builds in progress (other processes' temp folders)
        for name in files:
            f = Path(root) / name
            try:
                st = f.stat()
            except OSError:
                continue  # removed meanwhile by another process
            entries.append((max(st.st_atime, st.st_mtime), st.st_size, f))
    total = sum(size for _, size, _ in entries)
    freed = 0
    for _, size, f in sorted(entries, key=lambda e: e[0]):
        if total - freed <= cap:
            break
        if keep is not None and f == keep:
            continue
        try:
            f.unlink()
            freed += size
        except OSError:
            continue
    return freed
