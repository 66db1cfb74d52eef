"""Writing converter outputs: atomically (temporary file + rename) and with ordinary file permissions."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


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


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` via a temporary file in the same folder and rename it over `path`, so a failure never leaves
    a half-written output. tempfile creates the file 0600; it gets the mode a plain `open(path, "w")` would give
    (0666 less the umask: 0644 under the usual umask 022) before the rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def metadata_path(out_cu: Path) -> Path:
    """Where the rKernel metadata of a converted file lives: beside it, `NAME.rkernels.json`."""
    return out_cu.with_name(out_cu.stem + ".rkernels.json")
