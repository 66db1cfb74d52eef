"""Bindings of the pointwise ops of legacy/elementwise.cu: binary arithmetic with broadcasting, activations,
BatchNormalization (inference) and the custom LSTMCellPointwise."""
from __future__ import annotations

from kernel_corpus.bindings import Binding, Launch, NodeInfo
from kernel_corpus.ops._common import (IN, OUT, cdiv, contiguous_strides, extra_outputs, f32, i32, linear_launch,
                                       require_present, tensor_bytes)

SOURCE = "elementwise.cu"
BLOCK = 256
MAX_BCAST_RANK = 4
BINARY_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3}
UNARY_OPS = {"Relu": 0, "Sigmoid": 1, "Tanh": 2}
GELU_OPS = {"none": 3, "tanh": 4}
UNARY_FLOPS = {0: 1, 1: 4, 2: 6, 3: 8, 4: 10}


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


def _same_condition(node: NodeInfo) -> bool | str:
    """Both operands and the output have one shape."""
    missing = require_present(node, 2)
    if missing:
        return missing
    shapes = {node.inputs[0].shape, node.inputs[1].shape, node.outputs[0].shape}
    return True if len(shapes) == 1 else f"shapes differ: {[list(s) for s in shapes]}"


def _binary_bindings(op_type: str) -> list[Binding]:
    """binary_same (float4, same shapes) and binary_bcast (any broadcast) for one arithmetic op."""
    op = BINARY_OPS[op_type]

    def traffic(node: NodeInfo) -> int:
        return tensor_bytes(node.inputs[0], node.inputs[1], node.outputs[0])

    def plan_same(node: NodeInfo) -> list[Launch]:
        n = node.outputs[0].numel
        return [linear_launch("binary_same", [op, BLOCK], cdiv(n, 4), BLOCK, [IN(0), IN(1), OUT(0), i32(n)], n,
                              traffic(node))]

    def condition_bcast(node: NodeInfo) -> bool | str:
        view = broadcast_view(node)
        return view if isinstance(view, str) else True

    def plan_bcast(node: NodeInfo) -> list[Launch]:
        dims, sa, sb = broadcast_view(node)
        n = node.outputs[0].numel
        args = [IN(0), IN(1), OUT(0), i32(n)] + [i32(v) for v in dims[1:] + sa + sb]
        return [linear_launch("binary_bcast", [op, BLOCK], n, BLOCK, args, n, traffic(node))]

    return [
        Binding(op_type, "same_shape", SOURCE, "fast", _same_condition, plan_same, ("binary_same",)),
        Binding(op_type, "broadcast", SOURCE, "efficient", condition_bcast, plan_bcast, ("binary_bcast",)),
    ]


def _unary_code(node: NodeInfo) -> int | str:
    """unary_op code of an activation node."""
    if node.op_type == "Gelu":
        approximate = str(node.attr("approximate", "none"))
        return GELU_OPS.get(approximate, f"Gelu approximate='{approximate}' is not supported")
    return UNARY_OPS[node.op_type]


def _unary_condition(node: NodeInfo) -> bool | str:
    """One input, one output of the same shape, a known activation."""
    missing = require_present(node, 1)
    if missing:
        return missing
    if node.inputs[0].shape != node.outputs[0].shape:
        return f"output {list(node.outputs[0].shape)} differs from input {list(node.inputs[0].shape)}"
    code = _unary_code(node)
    return code if isinstance(code, str) else True


def _unary_plan(node: NodeInfo) -> list[Launch]:
    """unary<OP>, one thread per element."""
    n, code = node.outputs[0].numel, _unary_code(node)
    return [linear_launch("unary", [code, BLOCK], n, BLOCK, [IN(0), OUT(0), i32(n)], UNARY_FLOPS[code] * n,
                          tensor_bytes(node.inputs[0], node.outputs[0]))]


def _batchnorm_condition(node: NodeInfo) -> bool | str:
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
    return f"input {bad[0]} {list(node.inputs[bad[0]].shape)} is not [C] = [{x[1]}]" if bad else True


def _batchnorm_plan(node: NodeInfo) -> list[Launch]:
    """batchnorm_infer, one thread per element."""
    x = node.inputs[0].shape
    n, C = node.outputs[0].numel, x[1]
    args = [IN(0), IN(1), IN(2), IN(3), IN(4), OUT(0), i32(n), i32(C), i32(n // (x[0] * C)),
            f32(node.attr("epsilon", 1e-5))]
    return [linear_launch("batchnorm_infer", [BLOCK], n, BLOCK, args, 4 * n,
                          tensor_bytes(*node.inputs, node.outputs[0]))]


def _lstm_condition(node: NodeInfo) -> bool | str:
    """gates [B, 4H], c_prev [B, H] -> h [B, H], c [B, H]."""
    missing = require_present(node, 2)
    if missing:
        return missing
    gates, c_prev = node.inputs[0].shape, node.inputs[1].shape
    if len(gates) != 2 or len(c_prev) != 2 or gates != (c_prev[0], 4 * c_prev[1]):
        return f"needs gates [B, 4H] and c_prev [B, H], got {list(gates)} and {list(c_prev)}"
    outs = [t.shape if t is not None else None for t in node.outputs]
    return True if outs == [c_prev, c_prev] else f"outputs {outs} are not h and c of shape {list(c_prev)}"


def _lstm_plan(node: NodeInfo) -> list[Launch]:
    """lstm_cell_pointwise, one thread per (b, j)."""
    B, H = node.inputs[1].shape
    return [linear_launch("lstm_cell_pointwise", [BLOCK], B * H, BLOCK,
                          [IN(0), IN(1), OUT(0), OUT(1), i32(B), i32(H)], 40 * B * H,
                          tensor_bytes(*node.inputs, *node.outputs))]


BINDINGS = (
    [b for op in BINARY_OPS for b in _binary_bindings(op)]
    + [Binding(op, "direct", SOURCE, "only", _unary_condition, _unary_plan, ("unary",))
       for op in [*UNARY_OPS, "Gelu"]]
    + [Binding("BatchNormalization", "direct", SOURCE, "only", _batchnorm_condition, _batchnorm_plan,
               ("batchnorm_infer",)),
       Binding("LSTMCellPointwise", "direct", SOURCE, "only", _lstm_condition, _lstm_plan, ("lstm_cell_pointwise",),
               note="custom op: gates [B,4H] pre-activations in ONNX order i,o,f,c and c_prev [B,H] -> "
                    "outputs h [B,H], c [B,H]")]
)
