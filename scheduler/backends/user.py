"""The `user` backend: a kernel library the user brings, as a folder of legacy `.cu` files plus a declarative
binding file (`bindings.yaml`). Each entry binds one ONNX op type to one `__global__` kernel: template arguments,
grid/block as expressions of the node's shapes, the argument list and the conditions under which it applies. The
kernels are converted by the converter like the corpus's and run as rTasks; a binding becomes a corpus `Binding`
with backend "user", so the policies choose among user and corpus variants alike. The format is documented, with
a complete example, in examples/userlib/README.md.

Expressions are evaluated by `simpleeval` (no attribute access, no imports): names are the node's tensors (their
shapes as tuples, by the names `inputs:`/`outputs:` give them; an absent optional input is None), the `let:`
values, and the functions cdiv, prod, len, min, max, int, float, attr(name, default)."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import yaml
from simpleeval import EvalWithCompoundTypes, InvalidExpression

from kernel_corpus.bindings import (KINDS, Arg, Binding, In, Launch, NodeInfo, OpDef, Out, Registry, Scalar, Temp,
                                    check_bindings)

from vdevice.target import BackendName
from toolchain.files import InputError, load_yaml, read_input

from ..graph import SchedulerError
from .base import Backend, binding_candidates

NAME = BackendName.USER
BINDING_FILE = "bindings.yaml"
REQUIRED = ("op", "variant", "source", "kernel", "grid", "block", "args")
OPTIONAL = ("kind", "inputs", "outputs", "let", "when", "template_args", "dynamic_smem", "flops", "bytes", "note",
            "shapes")
ARG = re.compile(r"^\s*(in|out|temp|int32|int64|float32|uint32)\s+(.+?)\s*$")


class UserLibraryError(SchedulerError):
    """A binding file that cannot be used: `file:line: error: ...` in one line."""


def cdiv(a: int, b: int) -> int:
    """Ceiling division, the grid sizes' usual helper."""
    return -(-int(a) // int(b))


@dataclass(frozen=True)
class Entry:
    """One entry of a binding file, kept as written (expressions as text) with where it came from."""

    fields: dict
    where: str  # "file:line"

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


class Expressions:
    """Evaluates one entry's expressions for one node (names: tensors' shapes, `let:` values, helpers)."""

    def __init__(self, entry: Entry, node: NodeInfo) -> None:
        self.entry = entry
        names: dict[str, Any] = {}
        for i, n in enumerate(entry.get("inputs", [])):
            t = node.input(i)
            names[n] = tuple(t.shape) if t is not None else None
        for i, n in enumerate(entry.get("outputs", [])):
            t = node.output(i)
            names[n] = tuple(t.shape) if t is not None else None
        funcs = {"cdiv": cdiv, "prod": lambda s: prod(s), "len": len, "min": min, "max": max, "int": int,
                 "float": float, "attr": lambda k, d=None: node.attr(k, d)}
        self.ev = EvalWithCompoundTypes(names=names, functions=funcs)
        for key, text in (entry.get("let") or {}).items():
            names[key] = self(text, f"let {key}")

    def __call__(self, text: Any, what: str) -> Any:
        """Evaluate one expression (numbers pass through); an error names the file, line and the expression."""
        if isinstance(text, (int, float, bool)):
            return text
        try:
            return self.ev.eval(str(text))
        except (InvalidExpression, SyntaxError, TypeError, ValueError, IndexError, KeyError, ZeroDivisionError,
                AttributeError) as exc:
            raise UserLibraryError(f"{self.entry.where}: error: {what}: cannot evaluate {text!r}: "
                                   f"{type(exc).__name__}: {exc}") from None


def parse_arg(text: str, ex: Expressions) -> Arg:
    """'in 0' | 'out 1' | 'temp NAME NBYTES' | 'int32 EXPR' | 'float32 EXPR' (also int64, uint32)."""
    m = ARG.match(str(text))
    if m is None:
        raise UserLibraryError(f"{ex.entry.where}: error: argument {text!r} is not 'in N', 'out N', "
                               f"'temp NAME BYTES' or 'TYPE EXPR' (TYPE: int32, int64, uint32, float32)")
    kind, rest = m.groups()
    if kind == "in":
        return In(int(ex(rest, f"argument {text!r}")))
    if kind == "out":
        return Out(int(ex(rest, f"argument {text!r}")))
    if kind == "temp":
        name, _, nbytes = rest.partition(" ")
        return Temp(name, int(ex(nbytes, f"argument {text!r}")))
    value = ex(rest, f"argument {text!r}")
    return Scalar(kind, float(value) if kind == "float32" else int(value))


def dims(value: Any, ex: Expressions, what: str) -> tuple[int, int, int]:
    """A grid or block: a list of 1-3 expressions."""
    items = value if isinstance(value, list) else [value]
    out = [int(ex(v, what)) for v in items] + [1, 1, 1]
    if not 1 <= len(items) <= 3 or any(d < 1 for d in out[:3]):
        raise UserLibraryError(f"{ex.entry.where}: error: {what} {items} must be 1 to 3 positive sizes")
    return out[0], out[1], out[2]


def make_binding(entry: Entry, folder: Path, library: str) -> Binding:
    """A corpus Binding (backend "user") from one entry: condition and launch evaluate its expressions."""

    def condition(node: NodeInfo) -> str | None:
        ex = Expressions(entry, node)
        for cond in entry.get("when") or []:
            if not ex(cond, "when"):
                return f"{library}: condition `{cond}` does not hold"
        return None

    def plan(node: NodeInfo) -> list[Launch]:
        ex = Expressions(entry, node)
        targs = [ex(t, "template_args") if not isinstance(t, str) or not t.startswith("cxx:") else t[4:]
                 for t in entry.get("template_args") or []]
        args = [parse_arg(a, ex) for a in entry.get("args")]
        tensor_bytes = sum(4 * t.numel for t in node.inputs + node.outputs if t is not None)
        return [Launch(entry.get("kernel"), targs, dims(entry.get("grid"), ex, "grid"),
                       dims(entry.get("block"), ex, "block"), int(ex(entry.get("dynamic_smem", 0), "dynamic_smem")),
                       args, int(ex(entry.get("flops", 0), "flops")),
                       int(ex(entry.get("bytes", tensor_bytes), "bytes")))]

    kind = entry.get("kind", "only")
    if kind not in KINDS:
        raise UserLibraryError(f"{entry.where}: error: kind '{kind}' is not one of {', '.join(KINDS)}")
    if not (folder / entry.get("source")).is_file():
        raise UserLibraryError(f"{entry.where}: error: source '{entry.get('source')}' is not in {folder}")
    return Binding(entry.get("op"), f"{library}.{entry.get('variant')}", entry.get("source"), kind, condition, plan,
                   (entry.get("kernel"),), note=str(entry.get("note", "")), legacy_dir=folder, backend=NAME)


class _LineLoader(yaml.SafeLoader):
    """Safe YAML that remembers the line of each mapping, for one-line errors."""


def _mapping_with_line(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    out = loader.construct_mapping(node, deep=True)
    out["__line__"] = node.start_mark.line + 1
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_with_line)


def read_entries(path: Path) -> tuple[str, list[Entry]]:
    """The library name and the entries of a binding file, every field checked; one-line errors."""
    try:
        doc = load_yaml(read_input(path, "binding file", 4 * 2**20).decode("utf-8", "replace"), str(path), _LineLoader)
    except InputError as exc:
        raise UserLibraryError(str(exc)) from None
    except (OSError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise UserLibraryError(f"{where}: error: not a readable binding file: "
                               f"{str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("ops"), list):
        raise UserLibraryError(f"{path}:1: error: a binding file is a mapping with `library:` and a list `ops:`")
    library = str(doc.get("library") or path.parent.name)
    entries = []
    for item in doc["ops"]:
        where = f"{path}:{item.get('__line__', 1) if isinstance(item, dict) else 1}"
        if not isinstance(item, dict):
            raise UserLibraryError(f"{where}: error: each entry of `ops:` is a mapping")
        fields = {k: v for k, v in item.items() if k != "__line__"}
        missing = [k for k in REQUIRED if k not in fields]
        unknown = [k for k in fields if k not in REQUIRED + OPTIONAL]
        if missing or unknown:
            raise UserLibraryError(f"{where}: error: " + (f"missing {', '.join(missing)}" if missing else
                                                          f"unknown field {unknown[0]!r} (known: "
                                                          f"{', '.join(REQUIRED + OPTIONAL)})"))
        entries.append(Entry(fields, where))
    return library, entries


def load_library(folder: str | Path) -> list[Binding]:
    """The bindings of one user library folder (FOLDER/bindings.yaml beside its .cu files)."""
    root = Path(folder).resolve()
    path = root / BINDING_FILE
    if not path.is_file():
        raise UserLibraryError(f"{root}: error: a user kernel library holds {BINDING_FILE} beside its .cu files")
    library, entries = read_entries(path)
    bindings = [make_binding(e, root, library) for e in entries]
    try:
        check_bindings(bindings)
    except ValueError as exc:
        raise UserLibraryError(f"{path}: error: {exc}") from None
    return bindings


def with_user_libraries(base: Registry, folders: list[str | Path]) -> Registry:
    """A registry holding the base's op definitions plus the user libraries' bindings (appended per op type)."""
    if not folders:
        return base
    extra: dict[str, list[Binding]] = {}
    for folder in folders:
        for b in load_library(folder):
            extra.setdefault(b.op_type, []).append(b)
    ops = {d.op_type: d for d in base.ops()}
    taken = {b.source for b in base.all()}
    for bindings in extra.values():
        for b in bindings:
            if b.source in taken:
                raise UserLibraryError(f"{b.source_path}: error: the corpus has a source of the same name; rename "
                                       f"the user library's file")
    for op_type, bindings in extra.items():
        d = ops.get(op_type) or OpDef(op_type, ())
        ops[op_type] = dataclasses.replace(d, bindings=d.bindings + tuple(bindings))
    reg = Registry(package=f"{base._package}+user")
    reg._ops = ops
    return reg


# ---- verification, as the corpus is verified: every binding at its declared shapes against the reference --------
@dataclass(frozen=True)
class Verdict:
    """One binding at one shape: its largest error |got - want| / (1 + |want|) against the reference."""

    binding: str
    shape: str
    error: float

    def ok(self, tol: float) -> bool:
        return self.error <= tol


def verify_library(folder: str | Path, registry: Registry | None = None, seed: int = 0) -> list[Verdict]:
    """Convert each source, run every binding's converted kernels (their plain wrappers) on the CPU emulator at the
    entry's `shapes:` (input shapes and attributes) and compare with the reference of the op (onnx's
    ReferenceEvaluator; the standard graph of a custom op). An entry without `shapes:` is not verified."""
    import numpy as np

    from cuda_emu import CpuModule
    from kernel_corpus.bindings import Shape
    from kernel_corpus.bindings import registry as corpus
    from kernel_corpus.cpu_run import run_launches
    from kernel_corpus.reference import run_reference, shape_node
    from vdevice.codegen import INCLUDE_DIR
    root = Path(folder).resolve()
    library, entries = read_entries(root / BINDING_FILE)
    registry = registry or corpus
    rng = np.random.default_rng(seed)
    out = []
    for entry in entries:
        binding = make_binding(entry, root, library)
        d = registry.op(binding.op_type)
        if not entry.get("shapes"):
            continue
        if d is None:
            raise UserLibraryError(f"{entry.where}: error: no reference for {binding.op_type}: shapes can be "
                                   f"verified only for op types the corpus defines")
        for k, spec in enumerate(entry.get("shapes")):
            node = shape_node(d, Shape(tuple(tuple(x) if x is not None else None for x in spec["inputs"]),
                                       dict(spec.get("attrs") or {})), f"{binding.name}#{k}")
            refused = binding.refusal(node)
            if refused is not None:
                raise UserLibraryError(f"{entry.where}: error: shapes[{k}] does not apply: {refused.reason}")
            launches = binding.launch(node)
            module = CpuModule(converted_source(binding, [la.kernel for la in launches]),
                               kernels=sorted({la.expr for la in launches}),
                               include_dirs=[str(root), str(INCLUDE_DIR)], name=str(binding.source_path))
            inputs = [None if t is None else rng.standard_normal(t.shape).astype(np.float32) for t in node.inputs]
            got = run_launches(module, launches, node, inputs)
            want = run_reference(node, inputs, registry)
            err = max(float(np.max(np.abs(g - w) / (1 + np.abs(w)))) for g, w in zip(got, want))
            out.append(Verdict(binding.name, str([list(x) if x else x for x in spec["inputs"]]), err))
    return out


def converted_source(binding: Binding, kernels: list[str]) -> str:
    """The binding's source with host code sliced away, converted (the wrappers keep the legacy names)."""
    from converter import convert_source
    from converter.slice import slice_source
    path = binding.source_path
    text = slice_source(path.read_text(), str(path), kernels, [str(path.parent)]).text
    return convert_source(text, str(path), kernels=kernels, include_dirs=[str(path.parent)]).output


# User kernels are rKernels: they run wherever the corpus's do, once a library folder is given.
BACKEND = Backend(NAME, "a user's legacy kernel library (.cu + bindings.yaml), converted to rKernels",
                  candidates=binding_candidates(NAME), in_default=True, libraries=with_user_libraries,
                  takes="a kernel library: --user-lib FOLDER (a bindings.yaml beside .cu files)")
