"""The corpus registry: one `OpDef` per ONNX op type bundles everything the toolchain knows about the op.

An `OpDef` holds the op's `Binding`s (which legacy kernels implement it, when they apply, how to launch them),
its reference (None: onnx's ReferenceEvaluator, the truth for standard ops), the ONNX inputs its kernels need as
numbers (`constant_inputs`), its reference shapes (the index evaluates and the tests run every binding at them)
and its PyTorch baseline builder. Op modules under `kernel_corpus/ops/` export `OPS`; adding an op is one kernel
in a `legacy/*.cu` file plus one `OpDef` in an ops module.

The scheduler describes an ONNX node as a `NodeInfo` (static shapes, python-valued attributes) and asks
`registry.for_op(op_type)` for the bindings of that op type. `binding.refusal(node)` is None or a `Refusal`
with a one-line reason; `binding.applies(node)` is the bool; `binding.launch(node)` gives the concrete launches
of legacy kernels, in order, each with typed arguments (`In`, `Out`, `Temp`, `Scalar`).

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
  `approximate` for FusedGemm), applied last; FusedMatMul takes `activation` too;
- `FusedConvAdd` (custom op, a Conv with a residual Add in its epilogue): inputs X, W, optional B, Z (the output's
  shape); Y = activation(Conv(X, W, B) + Z), attribute `activation` optional ("Relu").
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import pkgutil
import re
import sys
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any, Callable, Literal, Union, get_args

from toolchain.cache import content_key
from toolchain.cxx import kernel_expr
from toolchain.refusal import Refusal, Refused
from vdevice.target import BackendName

LEGACY_DIR = Path(__file__).parent / "legacy"
BindingKind = Literal["fast", "efficient", "only"]  # a hint for the policy: the faster variant, the leaner, the one
KINDS: tuple[str, ...] = get_args(BindingKind)
INT32_MAX = 2**31 - 1
FLOAT32 = "float32"
OPSET = 20  # reference shapes are ONNX nodes of this opset (Gelu needs 20)
CUSTOM_DOMAIN = "ai.rammer"  # our fused ops (FusedMatMul, LSTMCell, ...) when written as ONNX
# Arithmetic of a binding's products, most accurate first: fp32 (CUDA cores), 3xtf32 (tensor cores, float32
# accuracy), tf32 (10-bit mantissas), bf16 (7-bit). A build allows one and every more accurate one.
Precision = Literal["fp32", "3xtf32", "tf32", "bf16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
DEFAULT_PRECISION: Precision = "3xtf32"  # builds: the least accurate that keeps float32 accuracy (models within 1e-4)
# Tolerance a binding of each precision is held to at least (max |got - want| / (1 + |want|)) at the test shapes
# (K <= 300, operands in [-2, 2]): an absolute error near sqrt(K) * 2^-11 * |a| |b| for tf32, 2^-8 for bf16.
PRECISION_TOL = {"fp32": 0.0, "3xtf32": 0.0, "tf32": 3e-2, "bf16": 2e-1}


@dataclass(frozen=True)
class TensorInfo:
    """Static shape and dtype of one node input or output; `strides` (elements per dimension) when the scheduler
    passes a strided view of a buffer (scheduler.graph.View: a Transpose or an inner-axis Split read in place),
    None for a C-ordered tensor. Only a binding that lists the input in `Binding.strided` accepts strides."""

    shape: tuple[int, ...]
    dtype: str = FLOAT32
    strides: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.strides is not None:
            object.__setattr__(self, "strides", tuple(int(d) for d in self.strides))
            if len(self.strides) != len(self.shape):
                raise ValueError(f"strides {list(self.strides)} do not match shape {list(self.shape)}")

    @property
    def layout(self) -> tuple[int, ...]:
        """Element strides per dimension: the given ones, or C order's."""
        return self.strides if self.strides is not None else contiguous_strides(self.shape)

    @property
    def numel(self) -> int:
        """Element count (1 for a scalar)."""
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of a float32 tensor, for the cost model."""
        return 4 * self.numel


def strided_inputs(node: "NodeInfo") -> list[int]:
    """Positions of the node's inputs that are strided views (TensorInfo.strides given)."""
    return [i for i, t in enumerate(node.inputs) if t is not None and t.strides is not None]


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-ordered array of `shape`."""
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(out))


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


@dataclass(frozen=True)
class In:
    """Launch argument: the node's input `index` (a device pointer)."""

    index: int


@dataclass(frozen=True)
class Out:
    """Launch argument: the node's output `index` (a device pointer)."""

    index: int


@dataclass(frozen=True)
class Temp:
    """Launch argument: a scratch buffer of `nbytes` shared by the launches of one node (undefined on entry), of
    elements `dtype` (the kernel parameter's: float32, or int32 for counters)."""

    name: str
    nbytes: int
    dtype: str = "float32"


@dataclass(frozen=True)
class Scalar:
    """Launch argument: a value passed by value (`dtype` is a numpy dtype name: int32, float32)."""

    dtype: str
    value: int | float


Arg = Union[In, Out, Temp, Scalar]


def arg_to_json(arg: Arg) -> dict:
    """The JSON form of a launch argument (plan.json, the index): {"kind": ..., fields}."""
    return {"kind": type(arg).__name__.lower(), **dataclasses.asdict(arg)}


def arg_from_json(obj: dict) -> Arg:
    """Inverse of arg_to_json (tests/calibration.py reads the launches of stored plans back)."""
    kinds = {"in": In, "out": Out, "temp": Temp, "scalar": Scalar}
    return kinds[obj["kind"]](**{k: v for k, v in obj.items() if k != "kind"})


@dataclass(frozen=True)
class ResidentUse:
    """How a launch uses resident operands (docs/ARCHITECTURE.md §7): its rTask r reads slice r of the node inputs
    `inputs` (the same bytes on every node of `family`, the graph passes' mark) from the resident region of the vEU
    it is pinned to; the family's `load` launch fills that region. When the scheduler cannot pin the family the
    launch runs as written: readers read the inputs from global memory and the load does nothing."""

    family: str
    inputs: tuple[int, ...]
    slice_bytes: int
    load: bool = False


@dataclass
class Launch:
    """One concrete launch of a legacy kernel for one node (args in the kernel's parameter order)."""

    kernel: str                 # legacy __global__ name in the binding's source file
    template_args: list         # C++ template arguments (ints, bools, or C++ text such as a type name)
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    args: list[Arg]
    flops: int                  # work of this launch, for the roofline cost model
    bytes: int                  # compulsory global-memory traffic of this launch
    flop_rate: float = 1.0      # its arithmetic's peak as a multiple of the fp32 CUDA-core peak (tensor cores: more)
    source_digest: str = ""     # content digest of the legacy source (set by Binding.launch): keys measured times
    resident: ResidentUse | None = None  # reads (or loads) resident operand slices when pinned; bytes exclude them
    # reads none of its node's earlier launches' outputs and writes a region of its own (Concat's copies): it may
    # run beside them, after the node's inputs only; the node's consumers wait for every such launch
    independent: bool = False
    # computes from its scalars alone (reads no tensor, writes only its node's temps: conv_tc's im2col offsets, the
    # split gemm_tc's zeroed arrival counters): a build runs it once when it loads, not every inference
    # (scheduler.backends.base.Candidate.setup)
    setup: bool = False

    @property
    def expr(self) -> str:
        """The kernel expression to instantiate and launch, e.g. 'gemm_tiled<16, true>'."""
        return kernel_expr(self.kernel, self.template_args)

    @property
    def rtasks(self) -> int:
        """rTasks of this launch: one per legacy thread block."""
        return prod(self.grid)

    @property
    def threads(self) -> int:
        """Threads of one rTask (legacy block size)."""
        return prod(self.block)


def reads_constants_only(launch: Launch) -> bool:
    """Whether a launch reads only constant operands (a resident family's load): it waits for nothing."""
    return launch.resident is not None and launch.resident.load


def as_unpinned(launch: Launch) -> Launch:
    """The launch as it runs without a resident region (op-by-op executors, a family the scheduler could not pin):
    a reader reads its slices from global memory, a load does nothing. For pricing."""
    use = launch.resident
    if use is None:
        return launch
    if use.load:
        return dataclasses.replace(launch, flops=0, bytes=0)
    return dataclasses.replace(launch, bytes=launch.bytes + use.slice_bytes * launch.rtasks)


class NotApplicable(ValueError):
    """A binding was asked to launch a node it does not apply to."""


# None: the node applies; else one line saying why not (or it raises Refused, from a shared view helper)
Condition = Callable[[NodeInfo], "str | None"]


def source_digest(path: Path) -> str:
    """Content digest of a legacy source file (cached per path and modification time): an edited kernel is a new
    key for the measured-profile cache, never a stale timing."""
    try:
        st = path.stat()
    except OSError:
        return ""
    return _digest(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=512)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    return content_key(Path(path).read_bytes(), length=16)


@dataclass(frozen=True)
class Binding:
    """One implementation (variant) of an ONNX op type by kernels of one legacy source file."""

    op_type: str
    variant: str
    source: str                                     # file name under kernel_corpus/legacy/
    kind: BindingKind                               # a hint for the policy
    condition: Condition                            # op-specific shape/attribute conditions
    plan: Callable[[NodeInfo], list[Launch]]        # the launches, once the node applies
    kernels: tuple[str, ...]                        # legacy __global__ names the launches may use
    float_inputs: int | None = None                 # how many leading inputs must be float32 (None: all)
    note: str = ""                                  # what the scheduler should know (e.g. two launches)
    legacy_dir: Path = LEGACY_DIR                   # where `source` lives (another corpus folder's legacy/)
    backend: BackendName = BackendName.RTASK        # how the launches execute (vdevice.target.BackendName)
    devices: tuple[str, ...] = ("gpu", "cpu")       # targets the binding runs on
    dtypes: tuple[str, ...] = (FLOAT32,)            # element types of its data inputs and outputs
    precision: Precision = "fp32"                   # the arithmetic of its products
    resident: tuple[int, ...] = ()                  # inputs whose rTask slices may stay resident on pinned vEUs
    strided: tuple[int, ...] = ()                   # inputs the kernels read through TensorInfo.strides (views)
    strided_out: tuple[int, ...] = ()               # outputs the kernels write through TensorInfo.strides

    @property
    def name(self) -> str:
        """'OpType/variant', unique in the registry."""
        return f"{self.op_type}/{self.variant}"

    @property
    def source_path(self) -> Path:
        """Absolute path of the legacy source file."""
        return self.legacy_dir / self.source

    def refusal(self, node: NodeInfo) -> Refusal | None:
        """None when this binding can implement the node, else why not (a condition's Refused is caught here)."""
        try:
            reason = self._common_reason(node) or self.condition(node)
        except Refused as exc:
            reason = exc.reason
        return None if reason is None else Refusal(str(reason) or "not applicable", by=self.name)

    def applies(self, node: NodeInfo) -> bool:
        """Whether this binding can implement the node (refusal() says why not)."""
        return self.refusal(node) is None

    def launch(self, node: NodeInfo) -> list[Launch]:
        """The launches for the node, in order; NotApplicable (one line) when it does not apply."""
        refused = self.refusal(node)
        if refused is not None:
            raise NotApplicable(f"{self.name} cannot run node '{node.name}': {refused.reason}")
        digest = source_digest(self.source_path)
        launches = [dataclasses.replace(ln, source_digest=digest) for ln in self.plan(node)]
        for ln in launches:
            if ln.setup and not all(isinstance(a, (Temp, Scalar)) for a in ln.args):
                raise NotApplicable(f"{self.name}: setup launch {ln.kernel} may take only temps and scalars (it runs "
                                    f"once at load, before any tensor holds data)")
            if ln.resident is not None and not set(ln.resident.inputs) <= set(self.resident):
                raise NotApplicable(f"{self.name}: launch {ln.kernel} keeps inputs {list(ln.resident.inputs)} "
                                    f"resident; the binding declares {list(self.resident)}")
        return launches

    def _common_reason(self, node: NodeInfo) -> str | None:
        """Checks every binding shares: op type, element types, non-empty tensors of int32-indexable size."""
        if node.op_type != self.op_type:
            return f"op type {node.op_type} is not {self.op_type}"
        data_inputs = node.inputs if self.float_inputs is None else node.inputs[: self.float_inputs]
        for role, tensors in (("input", data_inputs), ("output", node.outputs)):
            for i, t in enumerate(tensors):
                if t is None:
                    continue
                if t.dtype not in self.dtypes:
                    return f"{role} {i} is {t.dtype}, the kernels are {', '.join(self.dtypes)} only"
                if t.numel == 0:
                    return f"{role} {i} is empty (shape {list(t.shape)})"
                if t.numel > INT32_MAX:
                    return f"{role} {i} has {t.numel} elements, more than int32 indexing allows"
        for i in strided_inputs(node):
            if i not in self.strided:
                return f"input {i} is a strided view; the kernels read it C-ordered"
        for i, t in enumerate(node.outputs):
            if t is not None and t.strides is not None and i not in self.strided_out:
                return f"output {i} is a strided view; the kernels write it C-ordered"
        return None


@dataclass(frozen=True)
class Shape:
    """One reference node of an op: input shapes (None: an absent optional input) and attributes (constant
    inputs included, by their ONNX input names). The index evaluates every binding at these shapes and the corpus
    tests run them against the reference. Outputs come from ONNX shape inference for standard ops and from the
    reference itself for our custom ops."""

    inputs: tuple
    attrs: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    opset: int = OPSET
    tol: float = 1e-5                 # max |got - want| / (1 + |want|) of a kernel against the reference
    positive: tuple[int, ...] = ()    # inputs drawn in [0.5, 1.5] (variances, divisors)
    outputs: int = 1                  # how many outputs the node has
    test: bool = True                 # run on the emulator by the tests; False: a model-sized shape the index
                                      # evaluates (launch geometry) but nothing runs
    dtypes: dict[int, str] = field(default_factory=dict)  # inputs that are not float32 (bool, int64) by position
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)  # integer inputs drawn in [low, high)

    def key(self, op_type: str) -> str:
        """Readable shape key, unique per op: `Conv(1x16x32x32, 32x16x3x3; pads=1,1,1,1)`."""
        shapes = ", ".join("-" if s is None else "x".join(map(str, s)) if s else "scalar" for s in self.inputs)
        attrs = "; ".join(f"{k}={_attr_text(v)}" for k, v in sorted(self.attrs.items()))
        return f"{op_type}({shapes}{'; ' + attrs if attrs else ''})"


def _attr_text(v: Any) -> str:
    """An attribute value in a shape key."""
    return ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


Reference = Callable[[NodeInfo, list], list]  # (node, float64 inputs, None for absent) -> outputs


@dataclass(frozen=True)
class OpDef:
    """Everything about one op type, in one place: bindings, truth, constant inputs, shapes, PyTorch baseline."""

    op_type: str
    bindings: tuple[Binding, ...]
    shapes: tuple[Shape, ...] = ()
    reference: Reference | None = None       # None: a standard ONNX op, evaluated by onnx's ReferenceEvaluator
    constant_inputs: tuple[str, ...] = ()    # ONNX inputs 1, 2, ... the kernels read as numbers (as attributes)
    torch: Callable | None = None            # (torch, attrs, constant inputs) -> callable of the runtime inputs
    equivalent: Callable | None = None       # custom ops: (node, input names, output names, dtype) -> (standard
                                             # ONNX nodes, initializers) computing the same outputs
    custom: bool = False                     # ours, not in the ONNX standard (domain CUSTOM_DOMAIN when written)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bindings", tuple(self.bindings))
        object.__setattr__(self, "shapes", tuple(self.shapes))
        wrong = [b.name for b in self.bindings if b.op_type != self.op_type]
        if wrong:
            raise ValueError(f"OpDef {self.op_type}: bindings of another op type: {', '.join(wrong)}")
        if self.custom and self.reference is None and self.equivalent is None:
            raise ValueError(f"OpDef {self.op_type}: a custom op needs its equivalent standard graph (or a "
                             f"reference)")


_KERNEL_DEF = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(")


class Registry:
    """All op definitions, loaded lazily from the modules of a package (or a folder), queried by op type."""

    def __init__(self, package: str = "kernel_corpus.ops") -> None:
        self._package = package
        self._ops: dict[str, OpDef] | None = None

    @staticmethod
    def from_dir(root: Path) -> "Registry":
        """A corpus outside the package: ROOT/ops/*.py export OPS (or BINDINGS) whose sources live in
        ROOT/legacy/."""
        reg = Registry(package=f"<{root}>")
        legacy = Path(root, "legacy").resolve()
        found: list[OpDef] = []
        for path in sorted(Path(root, "ops").glob("*.py")):
            if path.name.startswith("_"):
                continue
            name = f"_rammer_corpus_{abs(hash(str(root)))}_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ValueError(f"{path}: cannot be imported as a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # dataclasses (and pickling) look a class's module up by name
            spec.loader.exec_module(module)
            found += [dataclasses.replace(d, bindings=tuple(dataclasses.replace(b, legacy_dir=legacy)
                                                            for b in d.bindings))
                      for d in module_ops(module, str(path))]
        reg._ops = merge_ops(found)
        return reg

    def ops(self) -> list[OpDef]:
        """Every op definition, sorted by op type."""
        if self._ops is None:
            self._ops = self._load()
        return [self._ops[k] for k in sorted(self._ops)]

    def op(self, op_type: str) -> OpDef | None:
        """The definition of one op type, or None when the corpus has none."""
        if self._ops is None:
            self._ops = self._load()
        return self._ops.get(op_type)

    def all(self) -> list[Binding]:
        """Every binding, op types sorted, variants in their module's order."""
        return [b for d in self.ops() for b in d.bindings]

    def for_op(self, op_type: str) -> list[Binding]:
        """The bindings of one op type (empty when the corpus has none)."""
        d = self.op(op_type)
        return list(d.bindings) if d else []

    def op_types(self) -> list[str]:
        """Op types the corpus implements, sorted."""
        return [d.op_type for d in self.ops() if d.bindings]

    def constant_inputs(self, op_type: str) -> tuple[str, ...]:
        """Names of the ONNX inputs 1, 2, ... that the op's kernels take as numbers (attributes of those names)."""
        d = self.op(op_type)
        return d.constant_inputs if d else ()

    def get(self, op_type: str, variant: str) -> Binding:
        """One binding by op type and variant name."""
        for b in self.for_op(op_type):
            if b.variant == variant:
                return b
        known = ", ".join(b.variant for b in self.for_op(op_type)) or "none"
        raise KeyError(f"no binding {op_type}/{variant} (variants: {known})")

    def restricted(self, precision: str) -> "Registry":
        """The same ops with only the bindings at least as accurate as `precision` (PRECISIONS)."""
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r} (choose from {', '.join(PRECISIONS)})")
        allowed = PRECISIONS[: PRECISIONS.index(precision) + 1]
        view = Registry(self._package)
        view._ops = {d.op_type: dataclasses.replace(d, bindings=tuple(b for b in d.bindings
                                                                      if b.precision in allowed))
                     for d in self.ops()}
        return view

    def applicable(self, node: NodeInfo) -> list[Binding]:
        """The bindings that can implement this node."""
        return [b for b in self.for_op(node.op_type) if b.applies(node)]

    def _load(self) -> dict[str, OpDef]:
        """Import every public module of the package and collect its OPS, checking each one."""
        package = importlib.import_module(self._package)
        found: list[OpDef] = []
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if not info.name.startswith("_"):
                module = importlib.import_module(f"{self._package}.{info.name}")
                found += module_ops(module, module.__name__)
        return merge_ops(found)


def module_ops(module: Any, where: str) -> list[OpDef]:
    """The OpDefs of one ops module: its OPS, or (older user corpora) its BINDINGS grouped by op type."""
    if hasattr(module, "OPS"):
        return list(module.OPS)
    if hasattr(module, "BINDINGS"):
        by_op: dict[str, list[Binding]] = {}
        for b in module.BINDINGS:
            by_op.setdefault(b.op_type, []).append(b)
        return [OpDef(op, tuple(bs)) for op, bs in by_op.items()]
    raise ValueError(f"{where}: an ops module exports OPS (a list of OpDef)")


def merge_ops(defs: list[OpDef]) -> dict[str, OpDef]:
    """One OpDef per op type (an op defined twice is an error), bindings checked."""
    out: dict[str, OpDef] = {}
    for d in defs:
        if d.op_type in out:
            raise ValueError(f"op {d.op_type} is defined twice")
        out[d.op_type] = d
    check_bindings([b for d in out.values() for b in d.bindings])
    return out


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
        if b.backend not in set(BackendName):
            raise ValueError(f"binding {b.name}: backend '{b.backend}' is not one of {', '.join(BackendName)}")
        if b.source not in defined:
            if not b.source_path.is_file():
                raise ValueError(f"binding {b.name}: source {b.source_path} does not exist")
            defined[b.source] = set(_KERNEL_DEF.findall(b.source_path.read_text()))
        missing = [k for k in b.kernels if k not in defined[b.source]]
        if missing:
            raise ValueError(f"binding {b.name}: {b.source} defines no __global__ {', '.join(missing)}")


registry = Registry()
