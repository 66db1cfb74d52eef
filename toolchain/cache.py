"""One cache root and one key scheme for everything the toolchain keeps between runs (emulator builds, NVRTC
stubs, measured profiles): `$RAMMER_CACHE`, else `$XDG_CACHE_HOME/rammer`, else `~/.cache/rammer`; keys are
SHA-256 digests of the inputs."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

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


def cache_dir(kind: str) -> Path:
    """The sub-folder of one kind of entry (`emu`, `profiles`, `nvrtc_stubs`)."""
    return cache_root() / kind


def content_key(*parts: str | bytes, length: int = 32) -> str:
    """Hex digest of the given parts, each length-prefixed so that ('ab', 'c') and ('a', 'bc') differ."""
    h = hashlib.sha256()
    for p in parts:
        data = p.encode() if isinstance(p, str) else p
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:length]


def usage() -> dict[str, tuple[int, int]]:
    """Per sub-folder: (files, bytes) — what `rammer cache info` prints."""
    root = cache_root()
    out: dict[str, tuple[int, int]] = {}
    if not root.is_dir():
        return out
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        files = [f for f in sub.rglob("*") if f.is_file()]
        out[sub.name] = (len(files), sum(f.stat().st_size for f in files))
    return out


def clear(kind: str | None = None) -> int:
    """Remove one sub-folder (or the whole cache); returns the bytes freed."""
    target = cache_dir(kind) if kind else cache_root()
    if not target.is_dir():
        return 0
    freed = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    shutil.rmtree(target, ignore_errors=True)
    return freed


def max_bytes() -> int:
    """The cache's size cap: $RAMMER_CACHE_MAX_MB (0 = no cap), else DEFAULT_MAX_MB."""
    raw = os.environ.get(MAX_ENV, "")
    try:
        mb = float(raw) if raw.strip() else DEFAULT_MAX_MB
    except ValueError:
        mb = DEFAULT_MAX_MB
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
