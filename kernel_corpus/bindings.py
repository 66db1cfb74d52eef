"""The corpus registry: which legacy kernels implement an ONNX op type, when they apply and how to launch them.

The scheduler describes an ONNX node as a `NodeInfo` (static shapes, python-valued attributes) and asks
`registry.for_op(op_type)` for the `Binding`s of that op type. `binding.applies(node)` is `True` or a one-line
reason why not (a str, which is truthy: test with `is True`); `binding.launch(node)` gives the concrete launches
of legacy kernels, in order. Bindings live in the modules of `kernel_corpus/ops/` (each exports `BINDINGS`);
adding a kernel = a `legacy/*.cu` file plus a binding there.

Conventions for nodes:
- an absent optional input (ONNX name '') is `None` in `NodeInfo.inputs`; trailing ones may be left out;
- constant operands the kernels need as numbers (Slice starts/ends/axes/steps) are given as attributes of
  those names; Split sizes are taken from the output shapes;
- `LSTMCellPointwise` (custom op): inputs gates [B, 4H] (pre-activations incl. biases, ONNX LSTM gate
  order i, o, f, c) and c_prev [B, H]; outputs h [B, H] and c [B, H];
- `LSTMCell` (custom op, one whole LSTM step): inputs x [B, I], Wt [I, 4H], h_prev [B, H], Rt [H, 4H], pre ([4H]
  bias or [B, 4H] precomputed x·W + bias), c_prev [B, H]; x/Wt and h_prev/Rt are absent in pairs, pre may be
  absent; gates = pre + x·Wt + h_prev·Rt; outputs h [B, H] and c [B, H];
- `FusedMatMul` (custom op, a MatMul with its epilogue): inputs A, B (numpy.matmul semantics) and optional C
  broadcast to the trailing [M, N] (leading dims of C all 1); attribute alpha; Y = alpha * (A @ B) + C;
- `FusedGemm`, `FusedConv` (custom ops): Gemm / Conv with attribute `activation` ("Relu"; "Gelu" with Gelu's
  `approximate` for FusedGemm), applied last; FusedMatMul takes `activation` too.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
import re
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any, Callable

LEGACY_DIR = Path(__file__).parent / "legacy"
KINDS = ("fast", "efficient", "only")
INT32_MAX = 2**31 - 1
FLOAT32 = "float32"


@dataclass(frozen=True)
class TensorInfo:
    """Static shape and dtype of one node input or output."""

    shape: tuple[int, ...]
    dtype: str = FLOAT32

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def numel(self) -> int:
        """Element count (1 for a scalar)."""
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of a float32 tensor, for the cost model."""
        return 4 * self.numel


@dataclass
class NodeInfo:
    """One ONNX node as the corpus sees it: op type, tensors with static shapes, attributes, opset."""

    op_type: str
    name: str
    inputs: list[TensorInfo | None]
    outputs: list[TensorInfo | None]
    attrs: dict[str, Any] = field(default_factory=dict)
    opset: int = 17

    def input(self, i: int) -> TensorInfo | None:
        """Input i, or None when it is absent (optional and not given)."""
        return self.inputs[i] if i < len(self.inputs) else None

    def output(self, i: int) -> TensorInfo | None:
        """Output i, or None when it is absent."""
        return self.outputs[i] if i < len(self.outputs) else None

    def attr(self, key: str, default: Any = None) -> Any:
        """Attribute value with its ONNX default."""
        return self.attrs.get(key, default)


@dataclass
class Launch:
    """One concrete launch of a legacy kernel for one node (args in the kernel's parameter order)."""

    kernel: str                 # legacy __global__ name in the binding's source file
    template_args: list         # C++ template arguments (ints, or strings such as "true")
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    args: list                  # ("in", i) | ("out", i) | ("temp", name, nbytes) | ("scalar", dtype, value)
    flops: int                  # work of this launch, for the roofline cost model
    bytes: int                  # compulsory global-memory traffic of this launch

    @property
    def expr(self) -> str:
        """The kernel expression to instantiate and launch, e.g. 'gemm_tiled<16, true>'."""
        if not self.template_args:
            return self.kernel
        return f"{self.kernel}<{', '.join(str(a) for a in self.template_args)}>"

    @property
    def rtasks(self) -> int:
        """rTasks of this launch: one per legacy thread block."""
        return prod(self.grid)

    @property
    def threads(self) -> int:
        """Threads of one rTask (legacy block size)."""
        return prod(self.block)


class NotApplicable(ValueError):
    """A binding was asked to launch a node it does not apply to."""


@dataclass(frozen=True)
class Binding:
    """One implementation (variant) of an ONNX op type by kernels of one legacy source file."""

    op_type: str
    variant: str
    source: str                                     # file name under kernel_corpus/legacy/
    kind: str                                       # "fast" | "efficient" | "only" (a hint for the policy)
    condition: Callable[[NodeInfo], bool | str]     # op-specific shape/attribute conditions
    plan: Callable[[NodeInfo], list[Launch]]        # the launches, once the node applies
    kernels: tuple[str, ...]                        # legacy __global__ names the launches may use
    float_inputs: int | None = None                 # how many leading inputs must be float32 (None: all)
    note: str = ""                                  # what the scheduler should know (e.g. two launches)
    legacy_dir: Path = LEGACY_DIR                   # where `source` lives (another corpus folder's legacy/)

    @property
    def name(self) -> str:
        """'OpType/variant', unique in the registry."""
        return f"{self.op_type}/{self.variant}"

    @property
    def source_path(self) -> Path:
        """Absolute path of the legacy source file."""
        return self.legacy_dir / self.source

    def applies(self, node: NodeInfo) -> bool | str:
        """True, or one line saying why this binding cannot implement the node."""
        reason = self._common_reason(node)
        if reason:
            return reason
        verdict = self.condition(node)
        return True if verdict is True else str(verdict or "not applicable")

    def launch(self, node: NodeInfo) -> list[Launch]:
        """The launches for the node, in order; NotApplicable (one line) when it does not apply."""
        verdict = self.applies(node)
        if verdict is not True:
            raise NotApplicable(f"{self.name} cannot run node '{node.name}': {verdict}")
        return self.plan(node)

    def _common_reason(self, node: NodeInfo) -> str | None:
        """Checks every binding shares: op type, float32 data, non-empty tensors of int32-indexable size."""
        if node.op_type != self.op_type:
            return f"op type {node.op_type} is not {self.op_type}"
        data_inputs = node.inputs if self.float_inputs is None else node.inputs[: self.float_inputs]
        for role, tensors in (("input", data_inputs), ("output", node.outputs)):
            for i, t in enumerate(tensors):
                if t is None:
                    continue
                if t.dtype != FLOAT32:
                    return f"{role} {i} is {t.dtype}, the kernels are float32 only"
                if t.numel == 0:
                    return f"{role} {i} is empty (shape {list(t.shape)})"
                if t.numel > INT32_MAX:
                    return f"{role} {i} has {t.numel} elements, more than int32 indexing allows"
        return None


_KERNEL_DEF = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(")


class Registry:
    """All bindings, loaded lazily from the modules of a package, queried by op type."""

    def __init__(self, package: str = "kernel_corpus.ops") -> None:
        self._package = package
        self._bindings: list[Binding] | None = None

    @staticmethod
    def from_dir(root: Path) -> "Registry":
        """A corpus outside the package: ROOT/ops/*.py export BINDINGS whose sources live in ROOT/legacy/."""
        reg = Registry(package=f"<{root}>")
        found: list[Binding] = []
        for path in sorted(Path(root, "ops").glob("*.py")):
            if path.name.startswith("_"):
                continue
            spec = importlib.util.spec_from_file_location(f"_rammer_corpus_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            legacy = Path(root, "legacy").resolve()
            found.extend(dataclasses.replace(b, legacy_dir=legacy) for b in module.BINDINGS)
        check_bindings(found)
        reg._bindings = found
        return reg

    def all(self) -> list[Binding]:
        """Every binding, in module order."""
        if self._bindings is None:
            self._bindings = self._load()
        return list(self._bindings)

    def for_op(self, op_type: str) -> list[Binding]:
        """The bindings of one op type (empty when the corpus has none)."""
        return [b for b in self.all() if b.op_type == op_type]

    def op_types(self) -> list[str]:
        """Op types the corpus implements, sorted."""
        return sorted({b.op_type for b in self.all()})

    def get(self, op_type: str, variant: str) -> Binding:
        """One binding by op type and variant name."""
        for b in self.for_op(op_type):
            if b.variant == variant:
                return b
        known = ", ".join(b.variant for b in self.for_op(op_type)) or "none"
        raise KeyError(f"no binding {op_type}/{variant} (variants: {known})")

    def applicable(self, node: NodeInfo) -> list[Binding]:
        """The bindings that can implement this node."""
        return [b for b in self.for_op(node.op_type) if b.applies(node) is True]

    def _load(self) -> list[Binding]:
        """Import every public module of the package and collect its BINDINGS, checking each one."""
        package = importlib.import_module(self._package)
        found: list[Binding] = []
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if not info.name.startswith("_"):
                found.extend(importlib.import_module(f"{self._package}.{info.name}").BINDINGS)
        check_bindings(found)
        return found


def check_bindings(bindings: list[Binding]) -> None:
    """Reject duplicate names, unknown kinds, missing sources and kernels their source does not define."""
    seen: set[str] = set()
    defined: dict[str, set[str]] = {}
    for b in bindings:
        if b.name in seen:
            raise ValueError(f"binding {b.name} is registered twice")
        seen.add(b.name)
        if b.kind not in KINDS:
            raise ValueError(f"binding {b.name}: kind '{b.kind}' is not one of {', '.join(KINDS)}")
        if b.source not in defined:
            if not b.source_path.is_file():
                raise ValueError(f"binding {b.name}: source {b.source_path} does not exist")
            defined[b.source] = set(_KERNEL_DEF.findall(b.source_path.read_text()))
        missing = [k for k in b.kernels if k not in defined[b.source]]
        if missing:
            raise ValueError(f"binding {b.name}: {b.source} defines no __global__ {', '.join(missing)}")


registry = Registry()
