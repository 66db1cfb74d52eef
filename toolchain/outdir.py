"""Crash-safe replacement of a tool's files in an output folder that may also hold the user's.

The user's files are never moved. A run writes its own files into a staging subfolder of the output (`.rammer-
staging`, marked as ours), then, holding the folder's lock, writes a journal (the new files, the old files to
delete) and moves each staged file into place, the manifest last, and deletes the previous run's files that the new
one does not write. A kill at any instant leaves either no journal (the next run deletes the staging folder: the
old output stands) or a complete journal (the next run, or the next reader, finishes the moves: the new output
stands). Symlinks and empty folders of the user's are never touched; nothing is written through a symlink.

Mechanism only: which files are the tool's is the caller's (rammer/build_output.py)."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .files import TMP_SUFFIX, OutputError, own_path, remove_own, shown, step, write_atomic

STAGING = ".rammer-staging"
STAGING_MARK = ".rammer-staging-owner"
JOURNAL = ".rammer-journal.json"
MARK_TEXT = "rammer output staging\n"
JOURNAL_MARKER = "rammer output journal"


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on a folder (flock on the folder itself: no lock file is left behind); concurrent
    runs writing the same output take turns."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def is_staging(path: Path) -> bool:
    """Whether `path` is a staging folder this module made (a real folder holding its mark)."""
    mark = path / STAGING_MARK
    try:
        return path.is_dir() and not path.is_symlink() and mark.is_file() and not mark.is_symlink() and \
            mark.read_text() == MARK_TEXT
    except OSError:
        return False


def recover(out: Path) -> str | None:
    """Finish or undo an interrupted replacement in `out` (the caller holds the lock): a journal is played forward,
    a staging folder without one is deleted. Returns what was done, None when nothing was pending."""
    journal = out / JOURNAL
    staging = out / STAGING
    for tmp in out.glob(f".{JOURNAL}.*{TMP_SUFFIX}"):  # a journal whose write was cut short: never committed
        step("delete journal temp")
        tmp.unlink(missing_ok=True)
    if journal.is_file() and not journal.is_symlink():
        plan = _read_journal(journal)
        _play(out, plan["new"], plan["delete"])
        return "finished an interrupted replacement"
    if os.path.lexists(staging):
        if not is_staging(staging):
            raise OutputError(f"{shown(staging)}: error: is not this tool's staging folder; move it away")
        _remove_staging(staging)
        return "removed the staging folder of an interrupted run"
    return None


def finish_pending(out: Path) -> None:
    """A reader's part: finish a replacement that was killed while swapping its files in (or drop its staging),
    holding the lock; OutputError when that cannot be done (a read-only folder, a damaged journal)."""
    if not ((out / JOURNAL).is_file() or os.path.lexists(out / STAGING)):
        return
    try:
        with locked(out):
            recover(out)
    except OSError as exc:
        raise OutputError(f"{shown(out)}: error: an interrupted run's files cannot be swapped in: "
                          f"{exc.strerror or exc}; run the command that wrote the folder again") from None


def _read_journal(journal: Path) -> dict:
    try:
        plan = json.loads(journal.read_text())
        assert plan["marker"] == JOURNAL_MARKER
        assert all(isinstance(x, str) for x in plan["new"] + plan["delete"])
        return plan
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        raise OutputError(f"{shown(journal)}: error: the journal of an interrupted replacement is damaged; the "
                          f"folder holds a mix of two runs: delete it and run again") from None


def _play(out: Path, new: list[str], delete: list[str]) -> None:
    """Move every staged file still in staging into place (in journal order), delete the old files listed, then
    the staging folder and the journal. Every step is idempotent, so a kill here is finished by the next run."""
    staging = out / STAGING
    for rel in new:
        src, dest = own_path(staging, rel), own_path(out, rel)
        if src is None or dest is None:
            raise OutputError(f"{shown(out / JOURNAL)}: error: journal names {rel!r}, a path outside the folder")
        if not src.is_file():
            continue  # moved before the kill
        if not dest.parent.is_dir():
            step(f"mkdir {dest.parent.name}")
            dest.parent.mkdir(parents=True, exist_ok=True)
        step(f"move {rel}")
        os.replace(src, dest)
    for rel in delete:
        remove_own(out, rel)
    if os.path.lexists(staging):
        _remove_staging(staging)
    step("delete journal")
    (out / JOURNAL).unlink(missing_ok=True)


def _remove_staging(staging: Path) -> None:
    """Delete a staging folder of ours (its contents are ours; rmtree never follows a symlink out of it)."""
    step("delete staging")
    shutil.rmtree(staging)


class Replacement:
    """One run's replacement of its files in `out`: stage into `staging`, then `commit`. Use as a context manager
    (holds the lock; a failure before the commit deletes the staging folder and a folder it created)."""

    def __init__(self, out: Path):
        self.out = out
        self.staging = out / STAGING
        self.created = False
        self.committing = False
        self._lock: Any = None

    def __enter__(self) -> "Replacement":
        if not self.out.exists():
            step("mkdir output")
            self.out.mkdir(parents=True)
            self.created = True
        self._lock = locked(self.out)
        self._lock.__enter__()
        try:
            recover(self.out)
            step("mkdir staging")
            self.staging.mkdir()
            (self.staging / STAGING_MARK).write_text(MARK_TEXT)
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, kind, value, tb) -> None:
        try:
            if kind is not None and not self.committing:  # after the journal, only the next run may finish
                if is_staging(self.staging):
                    shutil.rmtree(self.staging, ignore_errors=True)
                if self.created:
                    try:
                        self.out.rmdir()
                    except OSError:
                        pass
        finally:
            assert self._lock is not None
            self._lock.__exit__(None, None, None)

    def clashes(self, new: Iterable[str], ours: Callable[[str], bool]) -> list[str]:
        """The new files whose place in `out` holds something not ours (a user's file, folder or symlink, or a
        symlinked folder on the way), which the commit would otherwise replace."""
        bad = []
        for rel in new:
            dest = own_path(self.out, rel)
            if dest is None:
                bad.append(rel)
            elif os.path.lexists(dest) and (dest.is_symlink() or not dest.is_file() or not ours(rel)):
                bad.append(rel)
        return bad

    def commit(self, new: list[str], delete: Iterable[str]) -> None:
        """Swap the staged files in: the journal first, then the moves (in `new`'s order: put the manifest last)
        and the deletions of the old files in `delete` that `new` does not hold."""
        gone = sorted(set(delete) - set(new))
        plan = {"marker": JOURNAL_MARKER, "new": list(new), "delete": gone}
        write_atomic(self.out / JOURNAL, json.dumps(plan, indent=1))
        self.committing = True
        _play(self.out, list(new), gone)


