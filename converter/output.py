"""Converter outputs: files written atomically (temporary file + rename) with ordinary permissions, and the rKernel
metadata (`RKernelMeta`, the `.rkernels.json` format) read and written in this one place."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal

from toolchain.files import write_atomic  # noqa: F401  (re-exported: the converter's outputs go through it)


def metadata_path(out_cu: Path) -> Path:
    """Where the rKernel metadata of a converted file lives: beside it, `NAME.rkernels.json`."""
    return out_cu.with_name(out_cu.stem + ".rkernels.json")


TemplateKind = Literal["type", "value"]  # `typename T` / `int N`


@dataclass(frozen=True)
class Param:
    """One kernel parameter, in order: its name and C type."""

    name: str
    type: str


@dataclass(frozen=True)
class TemplateParam:
    """One template parameter: a type (`typename T`, type None) or a value of a C type (`int N`)."""

    name: str
    kind: TemplateKind
    type: str | None


@dataclass(frozen=True)
class SharedVariable:
    """One member of the shared-memory layout struct: its name there, its declaration, its size (None: it depends on
    template arguments)."""

    member: str
    decl: str
    bytes: int | None


@dataclass(frozen=True)
class BarrierSite:
    """Where a block barrier is in the legacy source (line, column), which one (`__syncthreads`, `cg::sync`, ...)
    and in which function (the kernel or a callee it reaches)."""

    line: int
    col: int
    kind: str
    function: str


@dataclass(frozen=True)
class SourceLocation:
    """The legacy kernel's file and line."""

    file: str
    line: int


@dataclass
class PtxasFigures:
    """convert-all --resources: ptxas' figures (toolchain.ptxas.parse_ptxas entries with their template arguments)
    per instantiation a spec names, for one architecture; `note` says why there are none."""

    arch: str
    instances: list[dict]
    note: str | None = None


@dataclass
class RKernelMeta:
    """What the converter knows about one rKernel: read and written only here (`OUT.rkernels.json` holds a list of
    these under "rkernels", each part as a JSON object of the same field names; docs/ARCHITECTURE.md §1)."""

    name: str                         # the legacy kernel, namespace-qualified
    rkernel: str                      # the __device__ rTask function: NAME__rtask
    wrapper: str                      # the plain __global__ wrapper with the legacy name
    layout: str | None                # the shared-memory layout struct (with template arguments), None without one
    params: list[Param]
    template_params: list[TemplateParam]
    static_smem_bytes: int | None     # sizeof(layout); None when it depends on template arguments
    shared_variables: list[SharedVariable]
    dynamic_smem: bool                # uses extern __shared__
    barrier_sites: list[BarrierSite]
    features: list[str]
    launch_bounds: str | None         # the __launch_bounds__ arguments as written
    callees_cloned: list[str]
    warnings: list[str]
    source: SourceLocation
    ptxas: PtxasFigures | None = None  # convert-all --resources

    def to_json(self) -> dict:
        """The JSON object of one rKernel (ptxas only when measured, its note only when given)."""
        obj = dataclasses.asdict(self)
        if self.ptxas is None:
            del obj["ptxas"]
        elif self.ptxas.note is None:
            del obj["ptxas"]["note"]
        return obj

    @staticmethod
    def from_json(obj: dict) -> "RKernelMeta":
        """Inverse of to_json; unknown keys are an error (a metadata file of another version)."""
        names = {f.name for f in dataclasses.fields(RKernelMeta)}
        extra = sorted(set(obj) - names)
        if extra:
            raise ValueError(f"rKernel metadata has unknown fields {', '.join(extra)}")
        parts = {"params": [Param(**p) for p in obj["params"]],
                 "template_params": [TemplateParam(**t) for t in obj["template_params"]],
                 "shared_variables": [SharedVariable(**v) for v in obj["shared_variables"]],
                 "barrier_sites": [BarrierSite(**b) for b in obj["barrier_sites"]],
                 "source": SourceLocation(**obj["source"]),
                 "ptxas": PtxasFigures(**obj["ptxas"]) if obj.get("ptxas") is not None else None}
        return RKernelMeta(**{**obj, **parts})


def as_json(parts: Iterable[Any]) -> list[dict]:
    """JSON objects of metadata parts (Param, TemplateParam, BarrierSite, ...), the field names as keys."""
    return [dataclasses.asdict(p) for p in parts]


def metadata_json(source: str, rkernels: list[RKernelMeta], refused: list[dict]) -> str:
    """The text of a `.rkernels.json` file: the source it came from, its rKernels and the refused kernels."""
    return json.dumps({"source": source, "rkernels": [m.to_json() for m in rkernels], "refused": refused},
                      indent=2) + "\n"
