"""Launch specs (YAML): what to launch, with which inputs, and which outputs to compare.

Public API:
    load_spec(path) -> LaunchSpec                 # parse + validate the format; raises SpecError
    check_params(spec, params)                    # arg count / pointer-vs-scalar / dtype vs the kernel's C types
    make_inputs(spec) -> dict[str, np.ndarray | np.generic]   # deterministic from spec.seed
    LaunchSpec.kernel_expr()                      # "K" or "K<16, float>"

Format (docs/ARCHITECTURE.md §3):
    kernel: K            template_args: [16]     grid: [3, 2, 1]     block: [16, 16, 1]
    dynamic_smem: 0      seed: 0                 tolerance: 0        outputs: [C]
    args: - {name: A, kind: buffer, dtype: float32, size: 1200, init: random, low: -1, high: 1}
          - {name: M, kind: scalar, dtype: int32, value: 30}
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from converter.slice import KernelParam
from cuda_emu.module import available_memory
from toolchain.files import InputError, load_yaml, read_input
from toolchain.cxx import kernel_expr, template_arg_text  # noqa: F401  (re-exported: spec users spell args with it)

DTYPES = ("float32", "float64", "float16", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool")
KINDS = ("buffer", "scalar")
INITS = ("random", "zeros", "ones", "arange")
MAX_BLOCK_THREADS = 1024
MAX_SPEC_BYTES = 4 * 2**20  # a launch spec is a few hundred bytes; anything this large is not one
_TOP_FIELDS = {"kernel", "template_args", "grid", "block", "dynamic_smem", "seed", "args", "outputs", "tolerance"}
_ARG_FIELDS = {"buffer": {"name", "kind", "dtype", "size", "init", "low", "high"},
               "scalar": {"name", "kind", "dtype", "value"}}

# C scalar types (canonical spellings) -> the numpy dtype an argument of that type must have.
C_TYPE_DTYPES = {
    "float": "float32", "double": "float64", "__half": "float16", "half": "float16",
    "bool": "bool", "signed char": "int8", "char": "int8", "int8_t": "int8", "unsigned char": "uint8",
    "uint8_t": "uint8", "short": "int16", "int16_t": "int16", "unsigned short": "uint16", "uint16_t": "uint16",
    "int": "int32", "int32_t": "int32", "unsigned int": "uint32", "unsigned": "uint32", "uint32_t": "uint32",
    "long": "int64", "long long": "int64", "int64_t": "int64", "unsigned long": "uint64",
    "unsigned long long": "uint64", "uint64_t": "uint64", "size_t": "uint64",
    "float2": "float32", "float3": "float32", "float4": "float32", "double2": "float64",
    "int2": "int32", "int4": "int32", "uint2": "uint32", "uint4": "uint32", "__half2": "float16",
    "char4": "int8", "uchar4": "uint8",
}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|struct)\b")


class SpecError(ValueError):
    """A launch spec that cannot be run; the message names the spec file and the field."""


@dataclass
class ArgSpec:
    """One kernel argument: a device buffer or a by-value scalar."""
    name: str
    kind: str
    dtype: str
    size: int = 0
    init: str = "random"
    low: float | None = None
    high: float | None = None
    value: Any = None


@dataclass
class LaunchSpec:
    """A validated launch spec; grid and block always have three entries."""
    path: str
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: list[ArgSpec]
    outputs: list[str]
    template_args: list[Any] = field(default_factory=list)
    dynamic_smem: int = 0
    seed: int = 0
    tolerance: float = 0.0

    def kernel_expr(self) -> str:
        """The kernel name with its template arguments, as a C++ expression."""
        return kernel_expr(self.kernel, self.template_args)

    def block_threads(self) -> int:
        """Threads per legacy block."""
        return self.block[0] * self.block[1] * self.block[2]

    def num_blocks(self) -> int:
        """Legacy blocks (= rTasks)."""
        return self.grid[0] * self.grid[1] * self.grid[2]

    def arg(self, name: str) -> ArgSpec:
        """The argument called name."""
        return next(a for a in self.args if a.name == name)


def load_spec(path: str | Path) -> LaunchSpec:
    """Read and validate a launch spec file."""
    p = str(path)
    if not os.path.lexists(path):
        raise SpecError(f"{p}: error: no such file")
    try:
        raw = load_yaml(read_input(path, "launch spec", MAX_SPEC_BYTES).decode("utf-8"), p)
    except InputError as e:
        raise SpecError(str(e)) from None
    except UnicodeDecodeError:
        raise SpecError(f"{p}: error: the launch spec is not UTF-8 text") from None
    except yaml.YAMLError as e:
        raise SpecError(yaml_error_line(p, e)) from None
    return parse_spec(raw, p)


GUESS_MARK = "# guessed: "  # written by `rtransform spec` (rtransform.skeleton), one line per guessed value
# a launch's `<<<` / `>>>` as written, or as Visual Studio's formatter spaces them (`K << <grid, block >> > (args)`,
# which nvcc accepts)
LAUNCH_OPEN = r"<<\s*<"
LAUNCH_CLOSE = r">>\s*>"


def guessed_values(path: str | Path) -> list[str]:
    """The values a spec skeleton guessed and nobody has confirmed yet (its `# guessed: ...` lines; delete a line
    once the value is checked); [] for a spec written by hand or an unreadable file."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line[len(GUESS_MARK):].strip() for line in lines if line.startswith(GUESS_MARK)]


def guessed_note(path: str | Path) -> str | None:
    """For a failed run or verify: one line saying the spec's guessed values may be at fault, or None."""
    guesses = guessed_values(path)
    if not guesses:
        return None
    return (f"{path}: note: this spec has {len(guesses)} value(s) `rtransform spec` guessed ({'; '.join(guesses)}): "
            f"a difference or a sanitizer report may come from them, not from the kernel; check them against the "
            f"kernel's indexing and delete each `# guessed:` line once confirmed")


def yaml_error_line(path: str, err: yaml.YAMLError) -> str:
    """`spec.yaml:LINE:COL: error: what` from PyYAML's marks (0-based there): the place of the problem, else of
    its context."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else path
    what = " ".join(str(x) for x in (getattr(err, "context", None), getattr(err, "problem", None)) if x) or \
        str(err).splitlines()[0]
    return f"{where}: error: invalid YAML: {what}"


def parse_spec(raw: Any, path: str = "<spec>") -> LaunchSpec:
    """Validate a spec already loaded from YAML (a mapping)."""
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: the spec must be a mapping of fields")
    unknown = sorted(set(raw) - _TOP_FIELDS)
    if unknown:
        raise SpecError(f"{path}: {unknown[0]}: unknown field (expected one of {', '.join(sorted(_TOP_FIELDS))})")
    for key in ("kernel", "grid", "block", "args", "outputs"):
        if key not in raw:
            raise SpecError(f"{path}: {key}: missing field")
    kernel = raw["kernel"]
    if not isinstance(kernel, str) or not kernel.strip():
        raise SpecError(f"{path}: kernel: must be a kernel name")
    targs = raw.get("template_args", []) or []
    if not isinstance(targs, list):
        raise SpecError(f"{path}: template_args: must be a list")
    grid = _dims(raw["grid"], path, "grid")
    block = _dims(raw["block"], path, "block")
    threads = block[0] * block[1] * block[2]
    if threads > MAX_BLOCK_THREADS:
        raise SpecError(f"{path}: block: {threads} threads per block (at most {MAX_BLOCK_THREADS})")
    args = _args(raw["args"], path)
    _check_total_bytes(args, path)
    outputs = _outputs(raw["outputs"], args, path)
    return LaunchSpec(path=path, kernel=kernel.strip(), grid=grid, block=block, args=args, outputs=outputs,
                      template_args=targs,
                      dynamic_smem=_int(raw.get("dynamic_smem", 0), path, "dynamic_smem", 0),
                      seed=_int(raw.get("seed", 0), path, "seed", 0),
                      tolerance=_number(raw.get("tolerance", 0), path, "tolerance", 0.0))


def _int(v: Any, path: str, where: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"{path}: {where}: must be an integer, got {v!r}")
    if v < minimum:
        raise SpecError(f"{path}: {where}: must be >= {minimum}, got {v}")
    return v


# YAML 1.1 (PyYAML) reads `1e30` and `-2E-3` (an exponent, no dot) as strings; YAML 1.2 and every user read numbers
_EXPONENT_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _yaml_number(v: Any) -> Any:
    """A string YAML 1.1 left unread that is a number with an exponent, as that float; anything else as it is."""
    return float(v) if isinstance(v, str) and _EXPONENT_NUMBER.fullmatch(v.strip()) else v


def _number(v: Any, path: str, where: str, minimum: float) -> float:
    v = _yaml_number(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"{path}: {where}: must be a number, got {v!r}")
    if not math.isfinite(v):
        raise SpecError(f"{path}: {where}: must be a finite number, got {v!r}")
    if v < minimum:
        raise SpecError(f"{path}: {where}: must be >= {minimum}, got {v}")
    return float(v)


# A run holds each buffer about three times (the inputs, the launch's copy, a guarded copy under memcheck).
COPIES_PER_BUFFER = 3


def _check_total_bytes(args: list[ArgSpec], path: str) -> None:
    """Refuse up front a spec whose buffers cannot fit in memory (rather than a MemoryError mid-run)."""
    total = sum(a.size * np.dtype(a.dtype).itemsize for a in args if a.kind == "buffer")
    need, have = total * COPIES_PER_BUFFER, available_memory()
    if need > have:
        big = max((a for a in args if a.kind == "buffer"), key=lambda a: a.size * np.dtype(a.dtype).itemsize)
        raise SpecError(f"{path}: args: the buffers total {total / 2**30:.2f} GiB ({big.name} alone "
                        f"{big.size * np.dtype(big.dtype).itemsize / 2**30:.2f} GiB); a run needs about "
                        f"{need / 2**30:.1f} GiB and {have / 2**30:.1f} GiB is available")


def _dims(v: Any, path: str, where: str) -> tuple[int, int, int]:
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list) or not 1 <= len(v) <= 3:
        raise SpecError(f"{path}: {where}: must be a list of 1 to 3 positive integers, got {v!r}")
    dims = [_int(x, path, f"{where}[{i}]", 0) for i, x in enumerate(v)]
    if 0 in dims:
        raise SpecError(f"{path}: {where}: has a zero dimension {dims}")
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


def _args(v: Any, path: str) -> list[ArgSpec]:
    if not isinstance(v, list):
        raise SpecError(f"{path}: args: must be a list")
    out: list[ArgSpec] = []
    for i, a in enumerate(v):
        arg = _arg(a, path, f"args[{i}]")
        if any(o.name == arg.name for o in out):
            raise SpecError(f"{path}: args[{i}].name: duplicate argument name '{arg.name}'")
        out.append(arg)
    return out


def _arg(a: Any, path: str, where: str) -> ArgSpec:
    if not isinstance(a, dict):
        raise SpecError(f"{path}: {where}: must be a mapping")
    for key in ("name", "kind", "dtype"):
        if key not in a:
            raise SpecError(f"{path}: {where}.{key}: missing field")
    name, kind, dtype = a["name"], a["kind"], a["dtype"]
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise SpecError(f"{path}: {where}.name: not an identifier: {name!r}")
    where = f"{where} ({name})"
    if kind not in KINDS:
        raise SpecError(f"{path}: {where}.kind: unknown kind {kind!r} (expected buffer or scalar)")
    if dtype not in DTYPES:
        raise SpecError(f"{path}: {where}.dtype: unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
    unknown = sorted(set(a) - _ARG_FIELDS[kind])
    if unknown:
        raise SpecError(f"{path}: {where}.{unknown[0]}: unknown field for a {kind}")
    if kind == "scalar":
        if "value" not in a:
            raise SpecError(f"{path}: {where}.value: missing field")
        return ArgSpec(name, kind, dtype, value=_scalar_value(a["value"], dtype, path, f"{where}.value"))
    if "size" not in a:
        raise SpecError(f"{path}: {where}.size: missing field")
    init = a.get("init", "random")
    if init not in INITS:
        raise SpecError(f"{path}: {where}.init: unknown init {init!r} (expected one of {', '.join(INITS)})")
    low = _number(a["low"], path, f"{where}.low", float("-inf")) if "low" in a else None
    high = _number(a["high"], path, f"{where}.high", float("-inf")) if "high" in a else None
    arg = ArgSpec(name, kind, dtype, size=_int(a["size"], path, f"{where}.size", 1), init=init, low=low, high=high)
    lo, hi = random_range(arg)
    if not lo < hi:
        raise SpecError(f"{path}: {where}: empty random range [{lo}, {hi})")
    _check_representable(arg, path, where)
    return arg


def _check_representable(arg: ArgSpec, path: str, where: str) -> None:
    """Every value the init would give must fit the dtype: an int32 range past 2^31, a uint8 range below 0 or an
    arange longer than int8 holds would wrap silently, and a float16 range past 65504 would give infinities."""
    dt = np.dtype(arg.dtype)
    lo, hi = random_range(arg)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        for field_name, v in (("low", arg.low), ("high", arg.high)):
            if v is not None and v != int(v):
                raise SpecError(f"{path}: {where}.{field_name}: {v!r} is not a whole number ({arg.dtype})")
        top = min(info.max, np.iinfo(np.int64).max)  # random integers are drawn as int64
        if arg.init == "random" and not (info.min <= lo and hi - 1 <= top):
            raise SpecError(f"{path}: {where}: random range [{lo:g}, {hi:g}) does not fit {arg.dtype} "
                            f"([{info.min}, {top}]); values would wrap")
        if arg.init == "arange" and arg.size - 1 > info.max:
            raise SpecError(f"{path}: {where}: arange up to {arg.size - 1} does not fit {arg.dtype} (at most "
                            f"{info.max}); values would wrap")
    elif dt.kind == "f":
        big = float(np.finfo(dt).max)
        if arg.init == "random" and not (-big <= lo and hi <= big):
            raise SpecError(f"{path}: {where}: random range [{lo:g}, {hi:g}) exceeds {arg.dtype}'s largest value "
                            f"{big:g}; values would be infinite")
        if arg.init == "arange" and arg.size - 1 > big:
            raise SpecError(f"{path}: {where}: arange up to {arg.size - 1} exceeds {arg.dtype}'s largest value {big:g}")
    elif dt.kind == "b" and arg.init == "random" and not (0 <= lo and hi <= 2):
        raise SpecError(f"{path}: {where}: random range [{lo:g}, {hi:g}) of a bool buffer must lie in [0, 2)")


def _scalar_value(v: Any, dtype: str, path: str, where: str) -> Any:
    v = _yaml_number(v)
    if dtype == "bool":
        if not isinstance(v, (bool, int)):
            raise SpecError(f"{path}: {where}: must be true/false for bool, got {v!r}")
        return bool(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"{path}: {where}: must be a number, got {v!r}")
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        if not isinstance(v, int) or not info.min <= v <= info.max:
            raise SpecError(f"{path}: {where}: {v!r} is not a {dtype} value")
    return v


def _outputs(v: Any, args: list[ArgSpec], path: str) -> list[str]:
    if not isinstance(v, list) or not v:
        raise SpecError(f"{path}: outputs: must be a non-empty list of buffer names")
    kinds = {a.name: a.kind for a in args}
    for i, name in enumerate(v):
        if name not in kinds:
            raise SpecError(f"{path}: outputs[{i}]: '{name}' is not an argument")
        if kinds[name] != "buffer":
            raise SpecError(f"{path}: outputs[{i}]: '{name}' is a {kinds[name]}, not a buffer")
    return list(v)


def random_range(arg: ArgSpec) -> tuple[float, float]:
    """[low, high) for random init: the spec's bounds or the dtype's defaults."""
    dt = np.dtype(arg.dtype)
    if dt.kind == "f":
        lo, hi = -1.0, 1.0
    elif dt.kind == "b":
        lo, hi = 0, 2
    elif dt.kind == "u":
        lo, hi = 0, min(1000, int(np.iinfo(dt).max) + 1)
    else:
        lo, hi = max(-1000, int(np.iinfo(dt).min)), min(1000, int(np.iinfo(dt).max) + 1)
    return (arg.low if arg.low is not None else lo), (arg.high if arg.high is not None else hi)


def make_inputs(spec: LaunchSpec) -> dict[str, np.ndarray | np.generic]:
    """Argument values before the launch, in spec order; the same seed gives the same values."""
    rng = np.random.default_rng(spec.seed)
    values: dict[str, np.ndarray | np.generic] = {}
    for a in spec.args:
        if a.kind == "scalar":
            values[a.name] = np.dtype(a.dtype).type(a.value)
        else:
            values[a.name] = _buffer(a, rng)
    return values


def _buffer(a: ArgSpec, rng: np.random.Generator) -> np.ndarray:
    dt = np.dtype(a.dtype)
    if a.init == "zeros":
        return np.zeros(a.size, dt)
    if a.init == "ones":
        return np.ones(a.size, dt)
    if a.init == "arange":
        return np.arange(a.size).astype(dt)
    lo, hi = random_range(a)
    if dt.kind == "f":
        return rng.uniform(lo, hi, a.size).astype(dt)
    return rng.integers(int(np.ceil(lo)), int(np.ceil(hi)), a.size, dtype=np.int64).astype(dt)


def record_layout(p: KernelParam) -> tuple[str, int, bool] | None:
    """How a spec holds one struct a parameter points to (`struct S* p`): (dtype, elements per struct, mixed).
    A struct of one scalar type (`{float a, b;}`, `{int v[4];}`) is that dtype, sizeof(S) / its size elements
    each; any other (mixed fields, padding, pointers) is sizeof(S) bytes of uint8 (mixed: True, filled with zeros,
    which every field reads as 0). None for a parameter that is no struct (or one of the CUDA vector types)."""
    rec = p.record
    if rec is None or (p.elem or "") in C_TYPE_DTYPES:
        return None
    kinds = {C_TYPE_DTYPES.get(leaf) for leaf in rec.leaves}
    if len(kinds) == 1 and None not in kinds:
        dt = kinds.pop()
        item = np.dtype(dt).itemsize  # type: ignore[arg-type]
        if rec.size == item * len(rec.leaves):
            return dt, rec.size // item, False  # type: ignore[return-value]
    return "uint8", rec.size, True


def param_from_type(name: str, type_text: str) -> KernelParam:
    """Classify a parameter from its C type text (converter metadata has no canonical types)."""
    t = " ".join(_QUALIFIERS.sub(" ", type_text).split())
    if t.endswith("*") or t.endswith("[]"):
        base = t.rstrip("*[] ").strip()
        return KernelParam(name, type_text, True, base if base in C_TYPE_DTYPES else None)
    return KernelParam(name, type_text, False, t if t in C_TYPE_DTYPES else None)


def check_params(spec: LaunchSpec, params: list[KernelParam]) -> None:
    """Raise SpecError unless the spec's args match the kernel's parameters one by one."""
    if len(spec.args) != len(params):
        names = ", ".join(f"{p.type} {p.name}".strip() for p in params)
        raise SpecError(f"{spec.path}: args: {len(spec.args)} given, kernel '{spec.kernel}' takes "
                        f"{len(params)} ({names})")
    for i, (a, p) in enumerate(zip(spec.args, params)):
        where = f"{spec.path}: args[{i}] ({a.name})"
        if p.pointer and a.kind != "buffer":
            raise SpecError(f"{where}.kind: parameter '{p.name}' is a pointer ({p.type}), so it must be a buffer")
        if not p.pointer and a.kind != "scalar":
            raise SpecError(f"{where}.kind: parameter '{p.name}' is a scalar ({p.type}), so it must be a scalar")
        want = C_TYPE_DTYPES.get(p.elem or "")
        if want is not None and want != a.dtype:
            raise SpecError(f"{where}.dtype: parameter '{p.name}' has type {p.type}, which needs {want}, "
                            f"not {a.dtype}")
