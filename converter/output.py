"""Converter outputs: files written atomically (temporary file + rename) with ordinary permissions, and the rKernel
metadata (`RKernelMeta`, the `.rkernels.json` format) read and written in this one place."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from toolchain.files import write_atomic  # noqa: F401  (re-exported: the converter's outputs go through it)


def metadata_path(out_cu: Path) -> Path:
    """Where the rKernel metadata of a converted file lives: beside it, `NAME.rkernels.json`."""
    return out_cu.with_name(out_cu.stem + ".rkernels.json")


@dataclass
class RKernelMeta:
    """What the converter knows about one rKernel: read and written only here (`OUT.rkernels.json` holds a list of
    these under "rkernels"; docs/ARCHITECTURE.md §1)."""

    name: str                         # the legacy kernel, namespace-qualified
    rkernel: str                      # the __device__ rTask function: NAME__rtask
    wrapper: str                      # the plain __global__ wrapper with the legacy name
    layout: str | None                # the shared-memory layout struct (with template arguments), None without one
    params: list[dict]                # [{name, type}] in order
    template_params: list[dict]       # [{name, kind: type|value, type}]
    static_smem_bytes: int | None     # sizeof(layout); None when it depends on template arguments
    shared_variables: list[dict]      # [{member, decl, bytes}]
    dynamic_smem: bool                # uses extern __shared__
    barrier_sites: list[dict]         # [{line, col, kind, function}]
    features: list[str]
    launch_bounds: str | None         # the __launch_bounds__ arguments as written
    callees_cloned: list[str]
    warnings: list[str]
    source: dict                      # {file, line}
    ptxas: dict | None = None         # convert-all --resources: {arch, instances: [...]}

    def to_json(self) -> dict:
        """The JSON object of one rKernel (ptxas only when measured)."""
        obj = dataclasses.asdict(self)
        if obj["ptxas"] is None:
            del obj["ptxas"]
        return obj

    @staticmethod
    def from_json(obj: dict) -> "RKernelMeta":
        """Inverse of to_json; unknown keys are an error (a metadata file of another version)."""
        names = {f.name for f in dataclasses.fields(RKernelMeta)}
        extra = sorted(set(obj) - names)
        if extra:
            raise ValueError(f"rKernel metadata has unknown fields {', '.join(extra)}")
        return RKernelMeta(**obj)


def metadata_json(source: str, rkernels: list[RKernelMeta], refused: list[dict]) -> str:
    """The text of a `.rkernels.json` file: the source it came from, its rKernels and the refused kernels."""
    return json.dumps({"source": source, "rkernels": [m.to_json() for m in rkernels], "refused": refused},
                      indent=2) + "\n"


def read_metadata(path: Path) -> tuple[str, list[RKernelMeta], list[dict]]:
    """(source, rKernels, refused) of a `.rkernels.json` file."""
    obj = json.loads(Path(path).read_text())
    return obj["source"], [RKernelMeta.from_json(m) for m in obj["rkernels"]], obj["refused"]
