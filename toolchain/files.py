"""Guards every command applies before it writes: never overwrite an input with an output."""
from __future__ import annotations

import os
from pathlib import Path


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name the same file (real paths compared; hard links and symlinks included)."""
    pa, pb = Path(a), Path(b)
    try:
        if pa.exists() and pb.exists():
            return os.path.samefile(pa, pb)
    except OSError:
        pass
    return pa.resolve() == pb.resolve()


def clash(output: str | os.PathLike, *inputs: str | os.PathLike) -> str | None:
    """The first input that `output` would overwrite (the same file, or a folder holding it), else None."""
    out = Path(output).resolve()
    for i in inputs:
        src = Path(i).resolve()
        if same_file(out, src) or out in src.parents:
            return str(i)
    return None



def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write a file whole or not at all: a temporary file in the same folder, renamed over `path` once complete,
    so a failure never leaves a half-written output. tempfile creates the file 0600; it gets the mode a plain
    `open(path, "w")` would give (0666 less the umask) before the rename."""
    import tempfile
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process umask, read without changing it where /proc allows (os.umask can only be read by setting it,
    which would briefly affect files other threads create)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old
