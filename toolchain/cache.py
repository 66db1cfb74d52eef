"""One cache root and one key scheme for everything the toolchain keeps between runs (emulator builds, NVRTC
stubs, measured profiles): `$RAMMER_CACHE`, else `~/.cache/rammer`; keys are SHA-256 digests of the inputs."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

ENV = "RAMMER_CACHE"


def cache_root() -> Path:
    """The cache folder: $RAMMER_CACHE, or ~/.cache/rammer (created on first use by whoever writes there)."""
    root = os.environ.get(ENV)
    return Path(root) if root else Path.home() / ".cache" / "rammer"


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
