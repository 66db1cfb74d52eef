"""The pointwise ops of legacy/elementwise.cu: binary arithmetic with broadcasting, unary activations,
BatchNormalization (inference) and the custom LSTMCellPointwise.

A unary op is one row of UNARY (its code in elementwise.cu's `unary_op`, FLOPs per element, its PyTorch baseline)
plus one line in that kernel; its truth is onnx's ReferenceEvaluator and its test shapes are UNARY_SHAPES."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from onnx import helper

from kernel_corpus.bindings import Binding, In, Launch, NodeInfo, OpDef, Out, Shape
from kernel_corpus.ops._common import (cdiv, contiguous_strides, extra_outputs, f32, i32, linear_launch, reason,
                                       require_present, tensor_bytes)
from kernel_corpus.torch_builders import torch_function

SOURCE = "elementwise.cu"
BLOCK = 256
MAX_BCAST_RANK = 4
BINARY_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3}


@dataclass(frozen=True)
class Unary:
    """One unary activation: its `unary_op` code, FLOPs per element, the float attribute the kernel takes as its
    `alpha` argument (with ONNX's default), and its PyTorch baseline."""

    code: int
    flops: int
    torch: Callable
    alpha: tuple[str, float] | None = None


def _torch_gelu(T, a: dict, k: list, nout: int) -> Callable:
    """Gelu with its approximate attribute."""
    return lambda x: T.nn.functional.gelu(x, approximate=a.get("approximate", "none"))


UNARY = {  # op type -> Unary; Gelu's tanh form is code 4, chosen by its `approximate` attribute
    "Relu": Unary(0, 1, torch_function("relu")),
    "Sigmoid": Unary(1, 4, torch_function("sigmoid")),
    "Tanh": Unary(2, 6, torch_function("tanh")),
    "Gelu": Unary(3, 8, _torch_gelu),
    "LeakyRelu": Unary(5, 2, lambda T, a, k, n: (lambda x: T.nn.functional.leaky_relu(x, a.get("alpha", 0.01))),
                       alpha=("alpha", 0.01)),
    "Erf": Unary(6, 10, torch_function("erf")),
}
GELU_TANH = Unary(4, 10, _torch_gelu)
UNARY_SHAPES = (Shape(((3, 70),)), Shape(((2, 3, 4, 5),)), Shape(((4, 1000),)), Shape(((1, 64, 28, 28),)))


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | str:
    """numpy multidirectional broadcasting of two shapes."""
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            return f"shapes {list(a)} and {list(b)} do not broadcast"
        out.append(max(x, y))
    return tuple(out)


def _operand_strides(shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    """Element strides of an operand along each output dim (0 where it is broadcast)."""
    padded = (1,) * (len(out) - len(shape)) + shape
    return [s if d == o else 0 for d, o, s in zip(padded, out, contiguous_strides(padded))]


def merge_dims(out: tuple[int, ...], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and fuse neighbours that every operand walks contiguously: the smallest equivalent view."""
    dims: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for i, d in enumerate(out):
        if d == 1:
            continue
        if dims and all(m[-1] == s[i] * d for m, s in zip(merged, strides)):
            dims[-1] *= d
            for m, s in zip(merged, strides):
                m[-1] = s[i]
            continue
        dims.append(d)
        for m, s in zip(merged, strides):
            m.append(s[i])
    return dims, merged


def broadcast_view(node: NodeInfo) -> tuple[list[int], list[int], list[int]] | str:
    """Output dims and A/B strides of a binary node, at most 4 dims (left-padded with 1s), or why not."""
    missing = require_present(node, 2)
    if missing:
        return missing
    a, b = node.inputs[0].shape, node.inputs[1].shape
    out = _broadcast_shape(a, b)
    if isinstance(out, str):
        return out
    if out != node.outputs[0].shape:
        return f"output {list(node.outputs[0].shape)} is not the broadcast shape {list(out)}"
    dims, (sa, sb) = merge_dims(out, [_operand_strides(a, out), _operand_strides(b, out)])
    if len(dims) > MAX_BCAST_RANK:
        return f"the broadcast needs {len(dims)} dims after merging, the kernel takes {MAX_BCAST_RANK}"
    pad = MAX_BCAST_RANK - len(dims)
    return [1] * pad + dims, [0] * pad + sa, [0] * pad + sb


def _same_condition(node: NodeInfo) -> str | None:
    """Both operands and the output have one shape."""
    missing = require_present(node, 2)
    if missing:
        return missing
    shapes = {node.inputs[0].shape, node.inputs[1].shape, node.outputs[0].shape}
    return None if len(shapes) == 1 else f"shapes differ: {[list(s) for s in shapes]}"


def _binary_bindings(op_type: str) -> list[Binding]:
    """binary_same (float4, same shapes) and binary_bcast (any broadcast) for one arithmetic op."""
    op = BINARY_OPS[op_type]

    def traffic(node: NodeInfo) -> int:
        return tensor_bytes(node.inputs[0], node.inputs[1], node.outputs[0])

    def plan_same(node: NodeInfo) -> list[Launch]:
        n = node.outputs[0].numel
        return [linear_launch("binary_same", [op, BLOCK], cdiv(n, 4), BLOCK, [In(0), In(1), Out(0), i32(n)], n,
                              traffic(node))]

    def plan_bcast(node: NodeInfo) -> list[Launch]:
        dims, sa, sb = broadcast_view(node)
        n = node.outputs[0].numel
        args = [In(0), In(1), Out(0), i32(n)] + [i32(v) for v in dims[1:] + sa + sb]
        return [linear_launch("binary_bcast", [op, BLOCK], n, BLOCK, args, n, traffic(node))]

    return [
        Binding(op_type, "same_shape", SOURCE, "fast", _same_condition, plan_same, ("binary_same",)),
        Binding(op_type, "broadcast", SOURCE, "efficient", lambda node: reason(broadcast_view(node)), plan_bcast,
                ("binary_bcast",)),
    ]


BINARY_SHAPES = tuple(Shape((a, b), positive=(1,)) for a, b in [
    ((3, 50), (3, 50)), ((4, 8, 3), (4, 8, 3)), ((2, 3, 4, 5), ()), ((2, 3, 4, 5), (1, 3, 1, 1)), ((6, 10), (10,)),
    ((1, 5), (4, 1)), ((2, 1, 3, 2, 2, 3), (1, 1, 3, 1, 2, 3)), ((4, 256), (4, 256)), ((2, 64, 8, 8), (64, 1, 1))])


def _unary_of(node: NodeInfo) -> Unary | str:
    """The activation of a unary node (Gelu's form from its approximate attribute)."""
    if node.op_type == "Gelu":
        approximate = str(node.attr("approximate", "none"))
        if approximate not in ("none", "tanh"):
            return f"Gelu approximate='{approximate}' is not supported"
        return GELU_TANH if approximate == "tanh" else UNARY["Gelu"]
    return UNARY[node.op_type]


def _unary_condition(node: NodeInfo) -> str | None:
    """One input, one output of the same shape, a known activation."""
    missing = require_present(node, 1)
    if missing:
        return missing
    if node.inputs[0].shape != node.outputs[0].shape:
        return f"output {list(node.outputs[0].shape)} differs from input {list(node.inputs[0].shape)}"
    return reason(_unary_of(node))


def _unary_plan(node: NodeInfo) -> list[Launch]:
    """unary<OP>, one thread per element; the op's float attribute (if any) is the kernel's alpha."""
    n, u = node.outputs[0].numel, _unary_of(node)
    alpha = float(node.attr(*u.alpha)) if u.alpha else 0.0
    return [linear_launch("unary", [u.code, BLOCK], n, BLOCK, [In(0), Out(0), i32(n), f32(alpha)], u.flops * n,
                          tensor_bytes(node.inputs[0], node.outputs[0]))]


def _unary_def(op_type: str, u: Unary) -> OpDef:
    """The OpDef of one unary activation."""
    shapes = UNARY_SHAPES + ((Shape(((5, 13),), {"approximate": "tanh"}),) if op_type == "Gelu" else ())
    shapes += (Shape(((5, 13),), {u.alpha[0]: 0.3}),) if u.alpha else ()
    return OpDef(op_type, (Binding(op_type, "direct", SOURCE, "only", _unary_condition, _unary_plan, ("unary",)),),
                 shapes, torch=u.torch)


def _batchnorm_condition(node: NodeInfo) -> str | None:
    """Inference form: X [N, C, ...], four [C] parameter vectors, one output."""
    missing = require_present(node, 5) or extra_outputs(node, 1)
    if missing:
        return missing
    if int(node.attr("training_mode", 0)):
        return "training_mode=1 is not supported (inference only)"
    x = node.inputs[0].shape
    if len(x) < 2 or node.outputs[0].shape != x:
        return f"needs X of rank >= 2 and Y of its shape, got {list(x)} and {list(node.outputs[0].shape)}"
    bad = [i for i in range(1, 5) if node.inputs[i].shape != (x[1],)]
    return f"input {bad[0]} {list(node.inputs[bad[0]].shape)} is not [C] = [{x[1]}]" if bad else None


def _batchnorm_plan(node: NodeInfo) -> list[Launch]:
    """batchnorm_infer, one thread per element."""
    x = node.inputs[0].shape
    n, C = node.outputs[0].numel, x[1]
    args = [In(0), In(1), In(2), In(3), In(4), Out(0), i32(n), i32(C), i32(n // (x[0] * C)),
            f32(node.attr("epsilon", 1e-5))]
    return [linear_launch("batchnorm_infer", [BLOCK], n, BLOCK, args, 4 * n,
                          tensor_bytes(*node.inputs, node.outputs[0]))]


def _torch_batchnorm(T, a: dict, k: list, nout: int) -> Callable:
    """Inference BatchNormalization."""
    eps = a.get("epsilon", 1e-5)
    return lambda x, s, b, m, v: T.nn.functional.batch_norm(x, m, v, s, b, False, 0.0, eps)


def _bn_shape(x: tuple, **attrs) -> Shape:
    """A BatchNormalization node over X with [C] parameters (the variance drawn positive)."""
    c = (x[1],)
    return Shape((x, c, c, c, c), attrs, positive=(4,))


def _lstm_condition(node: NodeInfo) -> str | None:
    """gates [B, 4H], c_prev [B, H] -> h [B, H], c [B, H]."""
    missing = require_present(node, 2)
    if missing:
        return missing
    gates, c_prev = node.inputs[0].shape, node.inputs[1].shape
    if len(gates) != 2 or len(c_prev) != 2 or gates != (c_prev[0], 4 * c_prev[1]):
        return f"needs gates [B, 4H] and c_prev [B, H], got {list(gates)} and {list(c_prev)}"
    outs = [t.shape if t is not None else None for t in node.outputs]
    return None if outs == [c_prev, c_prev] else f"outputs {outs} are not h and c of shape {list(c_prev)}"


def _lstm_plan(node: NodeInfo) -> list[Launch]:
    """lstm_cell_pointwise, one thread per (b, j)."""
    B, H = node.inputs[1].shape
    return [linear_launch("lstm_cell_pointwise", [BLOCK], B * H, BLOCK,
                          [In(0), In(1), Out(0), Out(1), i32(B), i32(H)], 40 * B * H,
                          tensor_bytes(*node.inputs, *node.outputs))]


def lstm_pointwise_nodes(gates: str, c_prev: str, h: str, c: str, stem: str) -> list:
    """Standard ONNX nodes of the LSTM cell after its matrix products: gates in ONNX order i, o, f, c."""
    n = lambda s: f"{stem}_{s}"  # noqa: E731
    mk = helper.make_node
    return [mk("Split", [gates], [n("i"), n("o"), n("f"), n("g")], axis=1, num_outputs=4),
            mk("Sigmoid", [n("i")], [n("si")]), mk("Sigmoid", [n("o")], [n("so")]),
            mk("Sigmoid", [n("f")], [n("sf")]), mk("Tanh", [n("g")], [n("tg")]),
            mk("Mul", [n("sf"), c_prev], [n("fc")]), mk("Mul", [n("si"), n("tg")], [n("ig")]),
            mk("Add", [n("fc"), n("ig")], [c]), mk("Tanh", [c], [n("tc")]), mk("Mul", [n("so"), n("tc")], [h])]


def _lstm_pointwise_equivalent(node: NodeInfo, ins: list[str], outs: list[str], dtype) -> tuple[list, list]:
    """LSTMCellPointwise as standard ONNX ops."""
    return lstm_pointwise_nodes(ins[0], ins[1], outs[0], outs[1], "cell"), []


OPS = (
    [OpDef(op, tuple(_binary_bindings(op)), BINARY_SHAPES, torch=torch_function(op.lower()))
     for op in BINARY_OPS]
    + [_unary_def(op, u) for op, u in UNARY.items()]
    + [OpDef("BatchNormalization",
             (Binding("BatchNormalization", "direct", SOURCE, "only", _batchnorm_condition, _batchnorm_plan,
                      ("batchnorm_infer",)),),
             (_bn_shape((2, 3, 4, 5), epsilon=1e-3), _bn_shape((4, 6)), _bn_shape((1, 5, 3, 3, 2)),
              _bn_shape((1, 64, 28, 28))),
             torch=_torch_batchnorm),
       OpDef("LSTMCellPointwise",
             (Binding("LSTMCellPointwise", "direct", SOURCE, "only", _lstm_condition, _lstm_plan,
                      ("lstm_cell_pointwise",),
                      note="custom op: gates [B,4H] pre-activations in ONNX order i,o,f,c and c_prev [B,H] -> "
                           "outputs h [B,H], c [B,H]"),),
             (Shape(((1, 148), (1, 37)), outputs=2), Shape(((3, 80), (3, 20)), outputs=2),
              Shape(((1, 1024), (1, 256)), outputs=2), Shape(((8, 512), (8, 128)), outputs=2)),
             equivalent=_lstm_pointwise_equivalent, custom=True)]
)
