"""Where `rammer build` writes: the output folder's checks (an earlier build's, or new or empty; never at or above
an input), the build's own file names, and the crash-safe swap of a rebuild (toolchain/outdir.py): the user's files
in the folder are never moved, the new build's files are staged beside them and swapped in with a journal."""
from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Iterable

from toolchain.files import Inputs, OutputError, shown
from toolchain.outdir import JOURNAL, STAGING, Replacement

from .runtime import MANIFEST, BuildError, read_manifest

# The names a build writes (the manifest's `files` of a build of this version): only these are ever deleted or
# replaced, whatever an edited build.json lists.
BUILD_NAMES = ("build.json", "program.cu", "programs.json", "plan.json", "weights.npz", "model.onnx", "model.onnx.data",
               "timeline.svg", "timeline.json", "report.md", "after-*.onnx", "rkernels/*")


def is_build_name(rel: str) -> bool:
    """Whether a relative path is one a build writes (so it may be replaced or deleted as the build's own)."""
    return any(fnmatch.fnmatchcase(rel, pat) for pat in BUILD_NAMES) and ".." not in Path(rel).parts


def is_build_folder(folder: Path) -> bool:
    """The output folder's marker: a build.json written by `rammer build`, or an interrupted rebuild's journal."""
    return read_manifest(folder) is not None or (folder / JOURNAL).is_file() or \
        ((folder / STAGING).is_dir() and set(p.name for p in folder.iterdir()) == {STAGING})


class OutputRefused(BuildError):
    """An output folder the guard refuses (a usage error: choose another -o)."""


def check_output_folder(out: Path, model_path: str | Path, inputs: Inputs | None = None) -> Path:
    """Refuse, before any work, a destination that is not ours to write: at or above an input (the model, its
    external data, a corpus or user library), a file, or an existing non-empty folder without a manifest that
    proves it is an earlier build. Returns the real folder to write (a symlinked -o stays a symlink)."""
    guard = inputs or Inputs()
    guard.file(model_path, "the model being built")
    try:
        return guard.check_folder(out, "-o", ours=is_build_folder,
                                  tool="a rammer build folder (no build.json written by `rammer build`)")
    except OutputError as exc:
        raise OutputRefused(str(exc)) from None


def old_build_files(out: Path) -> list[str]:
    """The files the earlier build in `out` wrote (by its manifest), limited to names a build writes."""
    manifest = read_manifest(out)
    return [f for f in (manifest.files if manifest else []) if is_build_name(f)]


def foreign_files(out: Path) -> list[Path]:
    """Files in an earlier build folder that the build did not write (the user's): they are kept."""
    ours = set(old_build_files(out))
    return sorted(p for p in out.rglob("*") if (p.is_file() or p.is_symlink())
                  and p.relative_to(out).as_posix() not in ours and STAGING not in p.relative_to(out).parts)


def commit_build(rep: Replacement, files: Iterable[str]) -> None:
    """Swap the staged build in: refuse when a file of the user's (or a symlink or folder) holds a name the new
    build writes, then the journal, the moves (build.json last) and the deletion of the old build's other files."""
    new = sorted(f for f in files if f != MANIFEST) + [MANIFEST]
    old = set(old_build_files(rep.out))
    clash = rep.clashes(new, lambda rel: rel in old or rel == MANIFEST and read_manifest(rep.out) is not None)
    if clash:
        one = len(clash) == 1
        raise BuildError(f"{shown(rep.out)}: error: {', '.join(clash[:3])} {'is' if one else 'are'} not the earlier "
                         f"build's but the new build writes {'it' if one else 'them'}; move "
                         f"{'it' if one else 'them'} away first")
    rep.commit(new, old)
