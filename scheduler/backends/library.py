"""The `library` backend: vendor library calls as their own plan steps. On the GPU through CuPy (`cupy.matmul`,
which calls cuBLAS's SGEMM / strided-batched SGEMM, and `cupy.cudnn.convolution_forward`, CuPy's own cuDNN
binding: CuPy is already the project's GPU binding, so no second one is needed); on the CPU target the same calls
through numpy, so every plan shape runs and is checked in CI.

Each implementation is one row of IMPLEMENTATIONS: the op types it covers, a condition (None: the node applies,
else one line saying why not), its work (FLOPs, bytes) for the cost model, and how it runs on an array module
(`xp` = numpy or cupy) over named arrays."""
from __future__ import annotations

import math
from dataclasses import dataclass
from math import prod
from typing import Any, Callable

import numpy as np

from kernel_corpus.bindings import NodeInfo, TensorInfo
from toolchain.refusal import Refusal

from vdevice.target import BackendName, Target, TargetKind

from ..plan import LibraryCall
from .base import Backend

NAME = BackendName.LIBRARY

ACTIVATIONS = ("Relu", "Gelu")
# The cost model's floor of one vendor kernel inside a CUDA Graph beyond the graph node itself (prologue, epilogue,
# one wave of the smallest tile): a model constant, not a measurement; measured prices replace it (profile cache).
CALL_FLOOR_US = 2.0


# ---- conditions and work -------------------------------------------------------------------------------------
def _float32(node: NodeInfo) -> str | None:
    """Every present tensor is float32 and non-empty."""
    for role, ts in (("input", node.inputs), ("output", node.outputs)):
        for i, t in enumerate(ts):
            if t is not None and (t.dtype != "float32" or t.numel == 0):
                return f"{role} {i} is {t.dtype}{list(t.shape)}: float32, non-empty only"
    return None


def _activation(node: NodeInfo) -> str | None:
    """A fused activation the calls apply after the product."""
    act = node.attr("activation", None)
    return None if not act or act in ACTIVATIONS else f"activation {act!r} is not one of {', '.join(ACTIVATIONS)}"


def matmul_condition(node: NodeInfo) -> str | None:
    """numpy.matmul semantics (batch dims broadcast), rank >= 2 operands."""
    a, b = node.input(0), node.input(1)
    if a is None or b is None:
        return "needs both operands"
    if len(a.shape) < 2 or len(b.shape) < 2:
        return "rank-1 operands are left to the rKernels"
    if a.shape[-1] != b.shape[-2]:
        return f"inner dimensions differ: {list(a.shape)} @ {list(b.shape)}"
    c = node.input(2)
    if c is not None and any(d != 1 for d in c.shape[:-2]):
        return f"C {list(c.shape)} broadcasts over batch dims"
    return _float32(node) or _activation(node)


def gemm_condition(node: NodeInfo) -> str | None:
    """2-D A and B (transposed by attribute), C broadcast to [M, N]."""
    a, b = node.input(0), node.input(1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return "needs 2-D A and B"
    return _float32(node) or _activation(node)


def conv_condition(node: NodeInfo) -> str | None:
    """2-D convolution (NCHW), any group, pads, strides, dilations; FusedConvAdd's residual Z of the output's
    shape."""
    x, w, z, y = node.input(0), node.input(1), node.input(3), node.output(0)
    if x is None or w is None or len(x.shape) != 4 or len(w.shape) != 4:
        return "2-D convolutions (4-D X and W) only"
    if z is not None and (y is None or z.shape != y.shape):
        return f"residual {list(z.shape)} is not the output's shape"
    group = int(node.attr("group", 1))
    if x.shape[1] % group or w.shape[0] % group or w.shape[1] != x.shape[1] // group:
        return f"group {group} does not fit X {list(x.shape)} and W {list(w.shape)}"
    return _float32(node) or _activation(node)


def _tensor_bytes(node: NodeInfo) -> int:
    """Compulsory traffic: every input once, every output once."""
    return sum(4 * t.numel for t in node.inputs + node.outputs if t is not None)


def shape_of(t: TensorInfo | None) -> tuple[int, ...]:
    """The shape of a tensor the condition already required to be present."""
    assert t is not None
    return t.shape


def matmul_flops(node: NodeInfo) -> int:
    """2 M N K per output matrix."""
    return 2 * prod(shape_of(node.output(0))) * shape_of(node.input(0))[-1]


def gemm_flops(node: NodeInfo) -> int:
    """2 M N K."""
    a = shape_of(node.input(0))
    k = a[0] if node.attr("transA", 0) else a[1]
    return 2 * prod(shape_of(node.output(0))) * k


def conv_flops(node: NodeInfo) -> int:
    """2 taps per output element, taps = C/group x kh x kw."""
    return 2 * prod(shape_of(node.output(0))) * prod(shape_of(node.input(1))[1:])


# ---- execution on an array module -----------------------------------------------------------------------------
def activate(xp: Any, y: Any, attrs: dict) -> None:
    """Apply the fused activation in place (on the GPU without temporaries, so a CUDA Graph can capture it)."""
    act = attrs.get("activation")
    if act == "Relu":
        xp.maximum(y, 0, out=y)
    elif act == "Gelu":
        tanh = attrs.get("approximate", "none") == "tanh"
        if xp is np:
            y[...] = gelu_numpy(y, tanh)
        else:
            gelu_kernel(tanh)(y, y)


def gelu_numpy(x: np.ndarray, tanh: bool) -> np.ndarray:
    """Gelu on the CPU: the tanh approximation, or the exact form through math.erf element by element."""
    if tanh:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return (0.5 * x * (1 + np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2)))).astype(x.dtype)


GELU_BODY = {False: "y = 0.5f * x * (1.0f + erff(x * 0.70710678f))",
             True: "y = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)))"}
_GELU_KERNELS: dict[bool, Any] = {}


def gelu_kernel(tanh: bool) -> Any:
    """A CuPy elementwise kernel computing Gelu in place (one per form, compiled once)."""
    if tanh not in _GELU_KERNELS:
        import cupy
        _GELU_KERNELS[tanh] = cupy.ElementwiseKernel("float32 x", "float32 y", GELU_BODY[tanh],
                                                     f"rammer_gelu_{'tanh' if tanh else 'erf'}")
    return _GELU_KERNELS[tanh]


def run_matmul(xp: Any, ins: list, outs: list, attrs: dict) -> None:
    """Y = alpha * (A @ B) + C, then the activation (MatMul and FusedMatMul)."""
    y = outs[0]
    xp.matmul(ins[0], ins[1], out=y)
    alpha = float(attrs.get("alpha", 1.0))
    if alpha != 1.0:
        y *= alpha
    if len(ins) > 2 and ins[2] is not None:
        y += ins[2]
    activate(xp, y, attrs)


def run_gemm(xp: Any, ins: list, outs: list, attrs: dict) -> None:
    """Y = alpha * op(A) @ op(B) + beta * C, then the activation (Gemm and FusedGemm)."""
    a = ins[0].T if attrs.get("transA", 0) else ins[0]
    b = ins[1].T if attrs.get("transB", 0) else ins[1]
    y = outs[0]
    xp.matmul(a, b, out=y)
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        y *= alpha
    if len(ins) > 2 and ins[2] is not None and beta != 0.0:
        if beta != 1.0:  # y + beta C without a temporary: beta (y / beta + C)
            y /= beta
        y += ins[2]
        if beta != 1.0:
            y *= beta
    activate(xp, y, attrs)


@dataclass(frozen=True)
class ConvWindow:
    """Pads (top, left, bottom, right), strides and dilations of a 2-D convolution."""

    pads: tuple[int, int, int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    group: int


def conv_window(attrs: dict, x: tuple, w: tuple) -> ConvWindow:
    """ONNX Conv attributes with their defaults; auto_pad SAME_UPPER / SAME_LOWER / VALID resolved."""
    strides = tuple(int(s) for s in attrs.get("strides", (1, 1)))
    dil = tuple(int(d) for d in attrs.get("dilations", (1, 1)))
    auto = attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    pads = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads_b, pads_e = [], []
        for size, k, s, d in zip(x[2:], w[2:], strides, dil):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            pads_b.append(small if auto == "SAME_UPPER" else big)
            pads_e.append(big if auto == "SAME_UPPER" else small)
        pads = (pads_b[0], pads_b[1], pads_e[0], pads_e[1])
    elif auto == "VALID":
        pads = (0, 0, 0, 0)
    return ConvWindow((pads[0], pads[1], pads[2], pads[3]), (strides[0], strides[1]), (dil[0], dil[1]),
                      int(attrs.get("group", 1)))


def conv_numpy(x: np.ndarray, w: np.ndarray, win: ConvWindow, out_hw: tuple[int, int]) -> np.ndarray:
    """Direct convolution as one tensor contraction per group over strided windows of the padded input."""
    from numpy.lib.stride_tricks import sliding_window_view
    t, l, b, r = win.pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    kh, kw = w.shape[2:]
    (dh, dw), (sh, sw) = win.dilations, win.strides
    windows = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    windows = windows[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :out_hw[0], :out_hw[1]]
    g, cg, mg = win.group, x.shape[1] // win.group, w.shape[0] // win.group
    parts = [np.tensordot(windows[:, k * cg:(k + 1) * cg], w[k * mg:(k + 1) * mg], axes=([1, 4, 5], [1, 2, 3]))
             for k in range(g)]  # [N, OH, OW, M/g] each
    return np.concatenate(parts, axis=3).transpose(0, 3, 1, 2)


def run_conv(xp: Any, ins: list, outs: list, attrs: dict) -> None:
    """Y = conv(X, W) + B (+ Z, FusedConvAdd's residual, added in place after the call), then the activation (Conv,
    FusedConv, FusedConvAdd): numpy on the CPU, cuDNN on the GPU (CuPy's binding has no z term)."""
    x, w, y = ins[0], ins[1], outs[0]
    win = conv_window(attrs, x.shape, w.shape)
    if xp is np:
        y[...] = conv_numpy(x, w, win, y.shape[2:])
        if len(ins) > 2 and ins[2] is not None:
            y += ins[2].reshape(1, -1, 1, 1)
    else:
        conv_cudnn(x, w, ins[2] if len(ins) > 2 else None, y, win)
    if len(ins) > 3 and ins[3] is not None:
        y += ins[3]
    activate(xp, y, attrs)


def conv_cudnn(x: Any, w: Any, bias: Any, y: Any, win: ConvWindow) -> None:
    """cuDNN's forward convolution through CuPy's binding (symmetric pads only: cuDNN takes one pad per axis). While
    a stream is being captured into a CUDA Graph the call gets no workspace (an algorithm that needs none), since a
    workspace freed after the call would be reused by others while the graph still writes it."""
    import cupy
    from cupy import cudnn
    t, l, b, r = win.pads
    capturing = bool(getattr(cupy.cuda.get_current_stream(), "is_capturing", lambda: False)())
    limit = cudnn.get_max_workspace_size() if capturing else None
    if capturing:
        cudnn.set_max_workspace_size(0)
    try:
        cudnn.convolution_forward(x, w, bias, y, (t, l), win.strides, win.dilations, win.group,
                                  auto_tune=False, tensor_core="never")
    finally:
        if limit is not None:
            cudnn.set_max_workspace_size(limit)


def conv_gpu_condition(node: NodeInfo) -> str | None:
    """cuDNN takes one pad per spatial axis: asymmetric pads (SAME with odd totals) run on the CPU only."""
    win = conv_window(node.attrs, shape_of(node.input(0)), shape_of(node.input(1)))
    t, l, b, r = win.pads
    return None if (t, l) == (b, r) else f"asymmetric pads {list(win.pads)}: cuDNN needs one pad per axis"


# ---- the table ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Implementation:
    """One library call: the op types it covers, when it applies, its work, how it runs."""

    function: str
    op_types: tuple[str, ...]
    condition: Callable[[NodeInfo], str | None]
    flops: Callable[[NodeInfo], int]
    run: Callable[[Any, list, list, dict], None]
    gpu_condition: Callable[[NodeInfo], str | None] = lambda node: None
    efficiency: float = 0.75  # share of the FP32 peak the vendor call reaches on a full-device problem


IMPLEMENTATIONS: tuple[Implementation, ...] = (
    Implementation("matmul", ("MatMul", "FusedMatMul"), matmul_condition, matmul_flops, run_matmul),
    Implementation("gemm", ("Gemm", "FusedGemm"), gemm_condition, gemm_flops, run_gemm),
    Implementation("conv2d", ("Conv", "FusedConv", "FusedConvAdd"), conv_condition, conv_flops, run_conv,
                   conv_gpu_condition, efficiency=0.6),
)
BY_FUNCTION = {impl.function: impl for impl in IMPLEMENTATIONS}


def op_types() -> list[str]:
    """Op types some library call covers."""
    return sorted({t for impl in IMPLEMENTATIONS for t in impl.op_types})


def implementation(op_type: str) -> Implementation | None:
    """The implementation covering an op type, if any."""
    return next((i for i in IMPLEMENTATIONS if op_type in i.op_types), None)


def refusal(node: NodeInfo, target: str = "cpu") -> str | None:
    """None when a library call can run this node on `target`, else one line saying why not."""
    impl = implementation(node.op_type)
    if impl is None:
        return f"no library call for {node.op_type} (covers {', '.join(op_types())})"
    return impl.condition(node) or (impl.gpu_condition(node) if target == "gpu" else None)


def library_call(node: NodeInfo, inputs: list[str], outputs: list[str],
                 target: str = "cpu") -> LibraryCall | Refusal:
    """The plan step that runs `node` through the library, or why it cannot (one line)."""
    why = refusal(node, target)
    if why is not None:
        return Refusal(why, by=NAME)
    impl = implementation(node.op_type)
    assert impl is not None
    attrs = {k: v for k, v in node.attrs.items() if isinstance(v, (int, float, str, list, tuple))}
    return LibraryCall(node.name, node.op_type, NAME, impl.function, list(inputs), list(outputs),
                       [list(t.shape) if t is not None else None for t in node.inputs],
                       [list(t.shape) for t in node.outputs if t is not None], attrs, "float32",
                       impl.flops(node), _tensor_bytes(node), strides=view_strides(node, inputs, outputs))


def view_strides(node: NodeInfo, inputs: list[str], outputs: list[str]) -> dict[str, list[int]]:
    """The element strides of the call's tensors that are strided views (the runtime shapes its arrays with them)."""
    return {n: list(t.strides) for n, t in zip(list(inputs) + list(outputs), list(node.inputs) + list(node.outputs))
            if n and t is not None and t.strides is not None}


def run_call(call: LibraryCall, arrays: dict[str, Any], xp: Any = np) -> None:
    """Execute one call on named arrays (shaped as the call says; absent inputs are None; strided views read in
    place, written through a C-ordered staging array)."""
    ins = [arrays[n] if n else None for n in call.inputs]
    outs = [arrays[n] for n in call.outputs if n]
    staged = [o if o.flags.c_contiguous else xp.empty(o.shape, o.dtype) for o in outs]
    if call.function == FALLBACK:
        run_fallback(call, ins, staged)
    else:
        BY_FUNCTION[call.function].run(xp, ins, staged, dict(call.attrs))
    for out, stage in zip(outs, staged):
        if stage is not out:
            out[...] = stage


# ---- the fallback: any standard ONNX node through onnxruntime ---------------------------------------------------
FALLBACK = "onnxruntime"
FALLBACK_DTYPES = ("float32", "int64", "int32", "bool")
# The cost model's price of the fallback beyond its traffic: an onnxruntime session run on the host (measured on
# this CPU at 10-40 us per small node, 2026-11-25) plus, on a GPU, the copies each way; a model constant that
# makes the policy prefer any rKernel, never a measurement of the call itself.
FALLBACK_FLOOR_US = 50.0


def fallback_refusal(node: NodeInfo, target: str) -> str | None:
    """None when onnxruntime can stand in for a node with no rKernel: a standard ONNX op, tensors of the kinds the
    build keeps, on the CPU target (on a GPU the call would need a host round trip inside the captured graph)."""
    import onnx
    if target != "cpu":
        return "the onnxruntime fallback runs on the CPU target only"
    if not onnx.defs.has(node.op_type):
        return f"{node.op_type} is not a standard ONNX op"
    for role, ts in (("input", node.inputs), ("output", node.outputs)):
        for i, t in enumerate(ts):
            if t is not None and t.dtype not in FALLBACK_DTYPES:
                return f"{role} {i} is {t.dtype}"
    return None


def fallback_call(node: NodeInfo, inputs: list[str], outputs: list[str],
                  target: str = "cpu") -> LibraryCall | Refusal:
    """A node no rKernel implements, as one onnxruntime call between rPrograms (or why it cannot be)."""
    why = fallback_refusal(node, target)
    if why is not None:
        return Refusal(f"no onnxruntime fallback: {why}", by=FALLBACK)
    from kernel_corpus.bindings import registry
    from kernel_corpus.reference import constants_as_inputs
    attrs = {k: v for k, v in node.attrs.items() if isinstance(v, (int, float, str, list, tuple))}
    d = registry.op(node.op_type)
    if d is not None:  # the constant operands node_info copied into attributes are the node's inputs at its opset
        for key in constants_as_inputs(d, node.opset):
            attrs.pop(key, None)
    dtypes = {name: t.dtype for name, t in zip(list(inputs) + list(outputs), list(node.inputs) + list(node.outputs))
              if name and t is not None and t.dtype != "float32"}
    return LibraryCall(node.name, node.op_type, NAME, FALLBACK, list(inputs), list(outputs),
                       [list(t.shape) if t is not None else None for t in node.inputs],
                       [list(t.shape) for t in node.outputs if t is not None], attrs, "float32",
                       0, _tensor_bytes(node), dtypes=dtypes, opset=node.opset,
                       strides=view_strides(node, inputs, outputs))


_SESSIONS: dict[str, Any] = {}


def fallback_session(call: LibraryCall) -> Any:
    """An onnxruntime session of the call's one node (built once per process and call)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper
    key = repr((call.op_type, call.inputs, call.outputs, call.input_shapes, call.output_shapes,
                sorted(call.attrs.items()), sorted(call.dtypes.items()), call.opset))
    if key not in _SESSIONS:
        elem = lambda name: helper.np_dtype_to_tensor_dtype(np.dtype(call.dtypes.get(name, call.dtype)))  # noqa: E731
        ins = [f"i{k}" if n else "" for k, n in enumerate(call.inputs)]
        outs = [f"o{k}" for k, n in enumerate(call.outputs) if n]
        node = helper.make_node(call.op_type, ins, outs, **call.attrs)
        graph = helper.make_graph(
            [node], "fallback",
            [helper.make_tensor_value_info(i, elem(n), s) for i, n, s in zip(ins, call.inputs, call.input_shapes) if i],
            [helper.make_tensor_value_info(o, elem(n), s)
             for o, n, s in zip(outs, [n for n in call.outputs if n], call.output_shapes)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", call.opset)])
        model.ir_version = min(model.ir_version, onnx.IR_VERSION)
        _SESSIONS[key] = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return _SESSIONS[key]


def run_fallback(call: LibraryCall, ins: list, outs: list) -> None:
    """Run the node in onnxruntime on the CPU arrays and write its outputs in place."""
    sess = fallback_session(call)
    feeds = {f"i{k}": np.asarray(a, order="C") for k, a in enumerate(ins) if a is not None}
    for out, got in zip(outs, sess.run(None, feeds)):
        out[...] = np.asarray(got).reshape(out.shape)


def modelled_us(call: LibraryCall, device: Any) -> float:
    """The cost model of a vendor call inside the plan's captured CUDA Graph: one graph node's gap, then the call's
    kernel (call_kernel_us)."""
    from ..dispatch_costs import LAUNCHES
    return LAUNCHES.gap_us("graph") + call_kernel_us(call, device)


def view_copies_us(call: LibraryCall, device: Any) -> float:
    """What strided views cost a call (an estimate, not measured): each is copied once, C-ordered, as one more
    kernel of the graph (CuPy makes a non-contiguous operand contiguous before cuBLAS; run_call stages a strided
    output and copies it out): a launched op's floor plus its read and write at the calls' bandwidth share."""
    from ..dispatch_costs import LAUNCHES
    shapes = dict(zip(call.inputs, call.input_shapes)) | dict(zip(call.outputs, call.output_shapes))
    return sum(LAUNCHES.floor_us("graph") + 2 * 4 * prod(shapes[n] or [0]) / (device.mem_bw * 0.8) * 1e6
               for n in call.strides)


def residual_add_us(call: LibraryCall, device: Any) -> float:
    """What FusedConvAdd's residual costs a conv2d call (an estimate, not measured): CuPy's cuDNN call has no z term,
    so Y += Z runs as one more kernel of the graph: a launched op's floor plus reading Y and Z and writing Y at the
    calls' bandwidth share. 0 for every other call."""
    from ..dispatch_costs import LAUNCHES
    if call.function != "conv2d" or len(call.inputs) < 4 or not call.inputs[3]:
        return 0.0
    return LAUNCHES.floor_us("graph") + 3 * 4 * prod(call.output_shapes[0] or [0]) / (device.mem_bw * 0.8) * 1e6


def call_kernel_us(call: LibraryCall, device: Any) -> float:
    """A vendor call's kernel time: the roofline at the call's efficiency scaled by how many 128x128 output tiles
    fill the SMs (small problems leave SMs idle), never below a floor; plus its strided views' copies and a
    residual's add."""
    if call.function == FALLBACK:
        return FALLBACK_FLOOR_US + call.bytes / (device.mem_bw * 0.1) * 1e6
    return vendor_kernel_us(call, device) + view_copies_us(call, device) + residual_add_us(call, device)


def vendor_kernel_us(call: LibraryCall, device: Any) -> float:
    """The vendor kernel of a call on C-ordered operands (call_kernel_us without the views' copies)."""
    impl = BY_FUNCTION[call.function]
    out = call.output_shapes[0]
    rows = prod(out[:-1]) if call.function != "conv2d" else out[0] * prod(out[2:])
    cols = out[-1] if call.function != "conv2d" else out[1]
    tiles = -(-rows // 128) * -(-cols // 128)
    fill = min(1.0, tiles / device.sms)
    compute_s = call.flops / (device.peak_flops * impl.efficiency * fill)
    memory_s = call.bytes / (device.mem_bw * 0.8)
    return max(CALL_FLOOR_US, max(compute_s, memory_s) * 1e6)


# ---- the registration -----------------------------------------------------------------------------------------
def available(kind: TargetKind) -> str | None:
    """numpy on the CPU target; on the GPU CuPy (cuBLAS, cuDNN) must import."""
    if kind != TargetKind.GPU:
        return None
    try:
        import cupy  # noqa: F401
    except ImportError as exc:
        return f"CuPy is not installed ({exc}); pip install -e '.[gpu]'"
    return None


def calls(node: NodeInfo, inputs: list[str], outputs: list[str], target: Target) -> tuple[list[LibraryCall], list[str]]:
    """The library step that can run a node (a list of at most one), or why none can."""
    call = library_call(node, inputs, outputs, target.kind)
    return ([], [f"library: {call.reason}"]) if isinstance(call, Refusal) else ([call], [])


def fallback(node: NodeInfo, inputs: list[str], outputs: list[str], target: Target) -> tuple[list[LibraryCall],
                                                                                           list[str]]:
    """The onnxruntime step for a node nothing else implements (a list of at most one), or why there is none."""
    call = fallback_call(node, inputs, outputs, target.kind)
    return ([], [call.reason]) if isinstance(call, Refusal) else ([call], [])


BACKEND = Backend(NAME, "vendor calls as plan steps: cuBLAS/cuDNN through CuPy on the GPU, numpy on the CPU",
                  available=available, calls=calls, fallback=fallback, cost=modelled_us, run=run_call)
