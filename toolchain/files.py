"""The one write path every command takes: a guard that knows all of a run's inputs and refuses, in one line, an
output over, into or above any of them; input files read only when they are regular files of a bounded size;
deletions only of files the tool wrote, inside its own output; and a failure hook per step for the crash tests.

Mechanism only: which files are a command's inputs and which folder marker proves a folder is the tool's are the
callers' (rtransform/cli.py, rtransform/batch.py, rammer/cli.py, rammer/build_output.py)."""
from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

NAME_MAX = 255          # bytes in one path component (Linux, every common filesystem)
TMP_SUFFIX = ".rammer-tmp"
_TMP_STEM = 96          # bytes of the output's name kept in its temporary file's name (NAME_MAX less the rest)


class OutputError(ValueError):
    """An output the guard refuses; str() is the one line to print."""


class InputError(ValueError):
    """An input that must not be read (not a regular file, too large); str() is the one line to print."""


def shown(path: str | os.PathLike) -> str:
    """A path as a message prints it: bytes that are not UTF-8 (a name from another locale) as escapes, so
    printing or writing the message never fails."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def source_text(data: bytes) -> str:
    """A source file's text: UTF-8, or Latin-1 where it is not (older sources keep accented names in comments;
    nvcc takes such bytes as they are, and every byte is a Latin-1 character, so nothing is refused or lost).
    The converter and libclang then work on its UTF-8 form (parse_cuda gives libclang that text)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def is_utf8(data: bytes) -> bool:
    """Whether bytes are UTF-8 text as they are (libclang reads a file's bytes as UTF-8)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# ---- failure hook: the crash tests stop a run at any step --------------------------------------------------
_hook: Callable[[str], None] | None = None


def set_step_hook(hook: Callable[[str], None] | None) -> None:
    """Call `hook(step)` before every filesystem step of an output (tests: a simulated kill at each step)."""
    global _hook
    _hook = hook


def step(name: str) -> None:
    """One filesystem step is about to happen (a write, rename or deletion of an output)."""
    if _hook is not None:
        _hook(name)


# ---- reading inputs ----------------------------------------------------------------------------------------
def regular_file_error(path: str | os.PathLike, what: str = "input") -> str | None:
    """Why `path` cannot be read as an input (missing, a folder, a FIFO or device that could block or never end);
    None for a regular file. Only stat is used: nothing is opened."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        broken = os.path.islink(path)
        return f"{shown(path)}: error: cannot read the {what}: {'a broken symbolic link' if broken else 'no such file'}"
    except OSError as exc:
        return f"{shown(path)}: error: cannot read the {what}: {exc.strerror or exc}"
    if stat.S_ISDIR(st.st_mode):
        return f"{shown(path)}: error: is a folder, not a file ({what})"
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or \
            stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file"
        return f"{shown(path)}: error: is {kind}, not a regular file; refusing to read it as the {what}"
    return None


def read_input(path: str | os.PathLike, what: str = "input", limit: int | None = None) -> bytes:
    """The bytes of an input file: a regular file (checked on the open descriptor too, so a file swapped for a FIFO
    meanwhile still never blocks) of at most `limit` bytes; InputError otherwise."""
    why = regular_file_error(path, what)
    if why:
        raise InputError(why)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"{shown(path)}: error: cannot read the {what}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{shown(path)}: error: is not a regular file; refusing to read it as the {what}")
        if limit is not None and st.st_size > limit:
            raise InputError(f"{shown(path)}: error: the {what} is {st.st_size / 2**20:.1f} MiB, more than the "
                             f"{limit / 2**20:.0f} MiB this tool reads")
        data = fh.read(limit + 1 if limit is not None else -1)
    if limit is not None and len(data) > limit:
        raise InputError(f"{shown(path)}: error: the {what} grew past {limit / 2**20:.0f} MiB while read")
    return data


MAX_YAML_NODES = 200_000  # nodes of a YAML document with its aliases expanded (a launch spec has a few dozen)


def load_yaml(text: str, where: str, loader: type | None = None, max_nodes: int = MAX_YAML_NODES) -> object:
    """Safe YAML whose aliases cannot multiply it: the composed document is measured with every alias expanded
    (memoised, so the measure is linear) and refused past `max_nodes` before any object is built from it. YAMLError
    for bad syntax; InputError for a document that expands too far (a "billion laughs" alias bomb)."""
    import yaml
    ld = (loader or yaml.SafeLoader)(text)
    try:
        try:
            node = ld.get_single_node()
        except RecursionError:
            raise InputError(f"{where}: error: the YAML nests too deeply; refusing it") from None
        if node is not None and _expanded_nodes(node, {}, max_nodes) > max_nodes:
            raise InputError(f"{where}: error: the YAML expands to more than {max_nodes} values through its "
                             f"aliases (&anchor/*alias); refusing it")
        return ld.construct_document(node) if node is not None else None
    finally:
        ld.dispose()


def _expanded_nodes(node: object, memo: dict[int, int], cap: int) -> int:
    """Nodes under `node` with aliases expanded, stopping early past `cap` (a cycle counts as past it)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = cap + 1  # a node reached again while being measured: a cycle
    total = 1
    value = getattr(node, "value", None)
    if isinstance(value, list):
        for item in value:
            for child in (item if isinstance(item, tuple) else (item,)):
                total += _expanded_nodes(child, memo, cap)
                if total > cap:
                    memo[key] = total
                    return total
    memo[key] = total
    return total


def load_npz(path: str | os.PathLike, what: str, expect: dict | None = None, limit: int | None = None) -> dict:
    """The arrays of an .npz file, every member checked by its declared header before any is loaded: a known name
    (when `expect` maps names to shapes), the expected shape, no object arrays, and at most `limit` bytes in all.
    InputError (one line) otherwise; a zip member that inflates past its declared size fails its own CRC check."""
    import zipfile

    import numpy as np
    why = regular_file_error(path, what)
    if why:
        raise InputError(why)
    total = 0
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with zf.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                        np.lib.format.read_array_header_2_0
                    shape, _, dtype = read(fh)
                if dtype.hasobject:
                    raise InputError(f"{shown(path)}: error: {what}: member {name!r} holds Python objects; refusing it")
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                total += nbytes
                if expect is not None:
                    if name not in expect:
                        raise InputError(f"{shown(path)}: error: {what}: unknown array {name!r} (expected "
                                         f"{', '.join(expect) or 'none'})")
                    if tuple(expect[name]) != tuple(shape):
                        raise InputError(f"{shown(path)}: error: {what}: {name!r} has shape {list(shape)}; expected "
                                         f"{list(expect[name])}")
                if limit is not None and total > limit:
                    raise InputError(f"{shown(path)}: error: {what}: its arrays declare {total / 2**20:.1f} MiB, more "
                                     f"than the {limit / 2**20:.0f} MiB expected; refusing to load it")
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
    except InputError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{shown(path)}: error: cannot read {what} (.npz): {detail}") from None


_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
MAX_INCLUDES = 2000  # files one include closure may reach (a generated header tree is far below this)


@dataclass
class Include:
    """One `#include` that names an existing file: where it is written and what it resolves to."""
    file: str
    line: int
    col: int
    name: str
    path: Path


def include_closure(source: str | os.PathLike, include_dirs: Iterable[str | os.PathLike] = (),
                    forced: Iterable[str | os.PathLike] = (), text: bytes | None = None) -> list[Include]:
    """Every file reached through `#include` from `source` and the -include files, resolved as the compiler does
    ("..." beside the including file, then the -I folders; <...> the -I folders), conditional or not: a superset of
    what a parse opens. InputError (`file:line:col: error:`) for an include that names a FIFO, device or folder,
    which a parse would block on."""
    dirs = [Path(d) for d in include_dirs]
    found: dict[Path, Include] = {}
    todo: list[tuple[Path, bytes | None]] = [(Path(source), text)]
    for f in forced:
        why = regular_file_error(f, "-include file")
        if why:
            raise InputError(why)
        todo.append((Path(f), None))
    while todo and len(found) < MAX_INCLUDES:
        cur, raw = todo.pop()
        if raw is None:
            if regular_file_error(cur):
                continue
            try:
                raw = cur.read_bytes()
            except OSError:
                continue
        for m in _INCLUDE.finditer(raw):
            name = os.fsdecode(m.group(2).strip())
            search = ([cur.parent] if m.group(1) == b'"' else []) + dirs
            for d in search:
                cand = d / name
                if not os.path.lexists(cand):
                    continue
                line = raw.count(b"\n", 0, m.start()) + 1
                if not cand.is_file() or regular_file_error(cand):
                    raise InputError(f"{shown(cur)}:{line}:{m.start(2) - m.start() + 1}: error: #include "
                                     f"{m.group(1).decode()}{name}: {shown(cand)} is not a regular file (a FIFO, "
                                     f"device or folder would block or fail the parse)")
                real = cand.resolve()
                if real not in found:
                    found[real] = Include(str(cur), line, 1, name, real)
                    todo.append((real, None))
                break
    return list(found.values())


# ---- the guard ---------------------------------------------------------------------------------------------
def _real(path: str | os.PathLike) -> Path:
    """The real path (symlinks of existing components followed), absolute."""
    return Path(os.path.realpath(os.path.abspath(path)))


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@dataclass
class Inputs:
    """Everything one run reads. Files are never written over; folders (a build folder, a source tree, a model's
    folder of external data) are never written at or above; a sealed folder is never written into either."""
    files: dict[Path, str] = field(default_factory=dict)      # real path -> as the user named it
    folders: dict[Path, str] = field(default_factory=dict)
    sealed: set[Path] = field(default_factory=set)

    def file(self, path: str | os.PathLike | None, what: str = "") -> "Inputs":
        """Add an input file (its real path; a hard link to it is caught by inode when written)."""
        if path is not None and str(path) not in ("", "-"):
            self.files.setdefault(_real(path), f"{shown(path)}{f' ({what})' if what else ''}")
        return self

    def folder(self, path: str | os.PathLike | None, what: str = "", sealed: bool = False) -> "Inputs":
        """Add an input folder; `sealed`: nothing may be written anywhere inside it."""
        if path is not None and str(path):
            real = _real(path)
            self.folders.setdefault(real, f"{shown(path)}{f' ({what})' if what else ''}")
            if sealed:
                self.sealed.add(real)
        return self

    def source(self, path: str | os.PathLike, include_dirs: Iterable[str | os.PathLike] = (),
               forced: Iterable[str | os.PathLike] = (), compile_db: str | os.PathLike | None = None) -> "Inputs":
        """A CUDA source and everything its compile reads: the headers it includes (all of them, conditional ones
        too), the -include files and the compile database."""
        self.file(path, "the source")
        for f in forced:
            self.file(f, "an -include file")
        for inc in include_closure(path, include_dirs, forced):
            self.file(inc.path, f"included by {shown(inc.file)}:{inc.line}")
        if compile_db is not None:
            db = Path(compile_db)
            self.file(db / "compile_commands.json" if db.is_dir() else db, "the compile database")
        return self

    # -- checks --
    def _clash(self, real: Path, out: Path) -> str | None:
        """Why writing at `real` would damage an input, or None."""
        for f, name in self.files.items():
            if real == f or _same_inode(out, f):
                return f"is {name}, an input of this run"
            if real in f.parents:
                return f"holds {name}, an input of this run"
        for d, name in self.folders.items():
            if _inside(d, real):
                return f"{'is' if d == real else 'holds'} {name}, an input of this run"
        for d in self.sealed:
            if d in real.parents:
                return f"lies inside {self.folders[d]}, an input of this run"
        return None

    def refuse_clash(self, out: str | os.PathLike, option: str = "-o") -> None:
        """Only the input rule of check_file (over, into or above an input): what a command refuses before its work,
        leaving a missing folder to be reported after the input's own errors."""
        why = self._clash(_real(out), Path(out))
        if why:
            raise OutputError(f"{shown(out)}: error: {option} {why}; choose another path")

    def check_file(self, out: str | os.PathLike, option: str = "-o", ours: Callable[[Path], bool] | None = None,
                   force: bool = False, tool: str = "this command") -> Path:
        """Refuse (OutputError) a file output over, into or above an input, at a folder or a special file, in a
        missing or unwritable folder or with a name too long; returns the real path to write (through a symlink
        the user made, which stays). With `ours` (whether an existing file is the command's own earlier output,
        read from its first bytes): an existing file it does not recognise is refused too, unless `force` (the
        user's file is never replaced by a mistyped -o; the command's own output is, so reruns work)."""
        out = Path(out)
        if len(os.fsencode(out.name)) > NAME_MAX:
            raise OutputError(f"{shown(out)[:80]}...: error: {option}: file name of {len(os.fsencode(out.name))} "
                              f"bytes, more than the {NAME_MAX} a file system allows; choose a shorter name")
        real = _real(out)
        why = self._clash(real, out)
        if why:
            raise OutputError(f"{shown(out)}: error: {option} {why}; choose another path")
        if os.path.lexists(real):
            if real.is_dir():
                raise OutputError(f"{shown(out)}: error: {option} is a folder; give a file name")
            if not real.is_file():
                raise OutputError(f"{shown(out)}: error: {option} is not a regular file (a FIFO or device); "
                                  f"refusing to replace it")
            if ours is not None and not force and not _recognised(ours, real):
                raise OutputError(f"{shown(out)}: error: {option}: the file exists and was not written by {tool}; "
                                  f"refusing to replace it (choose another path, or --force to replace it)")
        folder = real.parent
        if not folder.is_dir() and os.path.lexists(folder):  # `-o file.cu/` where file.cu is a file
            raise OutputError(f"{shown(out)}: error: {option}: {shown(out.parent)!r} is a file, not a folder")
        if not folder.is_dir():
            raise OutputError(f"{shown(out)}: error: {option}: folder {shown(out.parent)!r} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise OutputError(f"{shown(out)}: error: {option}: cannot write into folder {shown(out.parent)!r}: it is "
                              f"not writable")
        return real

    def check_folder(self, out: str | os.PathLike, option: str = "-o",
                     ours: Callable[[Path], bool] | None = None, tool: str = "this tool's output folder") -> Path:
        """Refuse a folder output at or above an input, inside a sealed folder, at a file, under an unwritable or
        missing parent, or an existing non-empty folder that `ours` does not recognise (no marker of the tool):
        returns the real path. A folder reached through a symlink stays a symlink."""
        out = Path(out)
        if len(os.fsencode(out.name)) > NAME_MAX:
            raise OutputError(f"{shown(out)[:80]}...: error: {option}: folder name longer than {NAME_MAX} bytes")
        real = _real(out)
        why = self._clash(real, out)
        if why:
            raise OutputError(f"{shown(out)}: error: {option} {why}; choose another output folder")
        if os.path.lexists(real) and not real.is_dir():
            raise OutputError(f"{shown(out)}: error: {option} exists and is not a folder; refusing to replace it")
        if real.is_dir():
            if not os.access(real, os.W_OK | os.X_OK):
                raise OutputError(f"{shown(out)}: error: {option}: the folder is not writable")
            if ours is not None and any(real.iterdir()) and not ours(real):
                raise OutputError(f"{shown(out)}: error: {option} exists, holds files and is not {tool}; refusing "
                                  f"to write into it: choose a new or empty folder")
            return real
        parent = _existing_parent(real)
        if not os.access(parent, os.W_OK | os.X_OK):
            raise OutputError(f"{shown(out)}: error: {option}: cannot create the folder: {shown(parent)} is not "
                              f"writable")
        return real


def _same_inode(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _existing_parent(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def clash(output: str | os.PathLike, *inputs: str | os.PathLike) -> str | None:
    """The first input that `output` would overwrite (the same file, or a folder holding it), else None."""
    real = _real(output)
    for i in inputs:
        if Inputs().file(i)._clash(real, Path(output)):
            return str(i)
    return None


# ---- writing and deleting ----------------------------------------------------------------------------------
def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write a file whole or not at all: a temporary file in the same folder, renamed over `path` once complete,
    so a failure never leaves a half-written output. tempfile creates the file 0600; it gets the mode a plain
    `open(path, "w")` would give (0666 less the umask) before the rename. A symlink at `path` is refused (OSError
    ELOOP): it is the user's, and what it points at was never checked (the guard's check_file gives the real path
    to write through one)."""
    import errno
    import tempfile
    p = Path(path)
    if p.is_symlink():
        raise OSError(errno.ELOOP, "is a symbolic link; not replaced, and not written through", str(p))
    p.parent.mkdir(parents=True, exist_ok=True)
    stem = os.fsdecode(os.fsencode(p.name)[:_TMP_STEM].decode("utf-8", "ignore")) or "out"
    step(f"write {p.name}")
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{stem}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~_umask())
        step(f"rename {p.name}")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def is_temp_file(name: str) -> bool:
    """Whether a file name is one of write_atomic's temporary files (left behind by a killed run)."""
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def _recognised(ours: Callable[[Path], bool], path: Path) -> bool:
    try:
        return bool(ours(path))
    except OSError:
        return False  # unreadable: not provably the command's


def first_bytes(path: str | os.PathLike, n: int = 512) -> bytes:
    """The first `n` bytes of a file (what an `ours` check of check_file reads)."""
    with open(path, "rb") as f:
        return f.read(n)


def own_path(root: str | os.PathLike, rel: str) -> Path | None:
    """`root/rel` when `rel` is a relative path that stays inside `root` with no symlink on the way (a path read
    from a file the tool wrote earlier, which may have been edited); None otherwise."""
    if not isinstance(rel, str) or not rel or os.path.isabs(rel) or "\0" in rel:
        return None
    parts = Path(rel).parts
    if not parts or any(p in ("..", ".") for p in parts):
        return None
    base = Path(root)
    cur = base
    for p in parts:
        cur = cur / p
        try:
            if cur.is_symlink():
                return None
        except OSError:  # a name the file system refuses (longer than NAME_MAX): nothing of ours can be there
            return None
    return cur if _inside(_real(cur), _real(base)) else None


def sha256_file(path: str | os.PathLike) -> str:
    """Hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def remove_own(root: str | os.PathLike, rel: str, digest: str | None = None) -> bool:
    """Delete `root/rel` only when it is a regular file inside `root` (own_path) and, given `digest`, still holds
    the bytes the tool wrote; True when it was deleted. Empty folders left by it up to `root` go too."""
    p = own_path(root, rel)
    if p is None or not p.is_file() or p.is_symlink():
        return False
    if digest is not None:
        try:
            if sha256_file(p) != digest:
                return False
        except OSError:
            return False
    step(f"delete {rel}")
    try:
        p.unlink()
    except FileNotFoundError:
        return False
    prune_empty(root, p.parent)
    return True


def prune_empty(root: str | os.PathLike, folder: Path) -> None:
    """Remove `folder` and its parents below `root` while they are empty (rmdir refuses anything else)."""
    base = Path(root)
    while folder != base and base in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


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
