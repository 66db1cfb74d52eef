"""What the converter's outputs are called, one rule for `convert` and `convert-all`: inside an output folder a
converted file keeps its source's name (convert-all mirrors the tree, so the converted files' includes of each
other and of copied headers still resolve; `convert x.cu -o DIR/` does the same), and beside its source it gets
the `.rtask` tag (`x.cu` -> `x.rtask.cu`, `x.cuh` -> `x.rtask.cuh`) so that it never replaces the source. The
rKernel metadata lies beside the converted file."""
from __future__ import annotations

from pathlib import Path

from converter.output import metadata_path

CONVERTED_TAG = ".rtask"


def converted_path(source: Path, output: str | None) -> Path:
    """Where `rtransform convert` writes: -o FILE as given; -o DIR/ (an existing folder, or a trailing slash) as
    DIR/<source's name>; no -o beside the source with the tag (`softmax.cu` -> `softmax.rtask.cu`)."""
    if output is None:
        return source.with_name(f"{source.stem}{CONVERTED_TAG}{source.suffix}")
    if output.endswith(("/", "\\")) or Path(output).is_dir():
        return Path(output) / source.name
    return Path(output)


def metadata_for(converted: Path) -> Path:
    """The rKernel metadata beside a converted file (`x.cu` -> `x.rkernels.json`); a header keeps its suffix in
    the name (`x.cuh.rkernels.json`) so that the .cu and .cuh of one name never collide (as convert-all names
    them)."""
    return metadata_path(converted if converted.suffix == ".cu" else converted.with_name(converted.name + ".cu"))


CONVERTED_FIRST_LINE = b'#include "rtask_runtime.cuh"'  # what every converted file starts with (converter.convert)


def foreign_file(path: Path) -> bool:
    """Whether `path` exists and is not a converted file (its first line is not the runtime include): a file of the
    user's at the place `convert` would write beside the source, which it must not replace."""
    try:
        with open(path, "rb") as f:
            return f.readline().rstrip(b"\r\n") != CONVERTED_FIRST_LINE
    except FileNotFoundError:
        return False
    except OSError:
        return True  # unreadable: not provably ours
