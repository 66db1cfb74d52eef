"""The pointwise family of legacy/elementwise.cu: binary ops with numpy broadcasting (Add, Sub, Mul, Div, Pow,
PRelu), the n-ary Sum/Mean/Max/Min, Where, Expand (a broadcast copy), the unary ops, BatchNormalization
(inference) and the custom LSTMCellPointwise.

A unary op is one row of UNARY (its code in elementwise.cu's `unary_op`, FLOPs per element, its float attributes,
its PyTorch baseline) plus one line in that kernel; its truth is onnx's ReferenceEvaluator and its test shapes are
UNARY_SHAPES."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from onnx import helper

from kernel_corpus.bindings import Binding, In, Launch, NodeInfo, OpDef, Out, Shape
from kernel_corpus.ops._common import (ELEMENT_TYPES, activated, cdiv, condition_of, contiguous_strides, f32, i32,
                                       linear_launch, refuse_extra_outputs, require_present, tensor_bytes)
from kernel_corpus.torch_builders import torch_function
from toolchain.refusal import Refused

SOURCE = "elementwise.cu"
BLOCK = 256
MAX_BCAST_RANK = 4
BINARY_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4, "PRelu": 5}
NARY_OPS = {"Sum": 0, "Mean": 0, "Max": 6, "Min": 7}  # the binary_op each folds its operands with
FIRST = 8  # binary_op code returning its first operand: a broadcast copy
INF = float("inf")


@dataclass(frozen=True)
class Unary:
    """One unary op: its `unary_op` code, FLOPs per element, its PyTorch baseline, and the float attributes the
    kernel takes as its `alpha` and `beta` arguments (with ONNX's defaults)."""

    code: int
    flops: int
    torch: Callable
    alpha: tuple[str, float] | None = None
    beta: tuple[str, float] | None = None


def _torch_clip(T, a: dict, k: list) -> Callable:
    """Clip with constant bounds: inputs 1 and 2 (opset >= 11) or the min/max attributes; none: the identity."""
    bound = lambda i, key: float(np.asarray(k[i]).reshape(-1)[0]) if i < len(k) and k[i] is not None \
        else a.get(key)  # noqa: E731
    lo, hi = bound(1, "min"), bound(2, "max")
    return lambda x, *rest: x if lo is None and hi is None else x.clamp(lo, hi)


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
    "Sqrt": Unary(7, 1, torch_function("sqrt")),
    "Exp": Unary(8, 4, torch_function("exp")),
    "Neg": Unary(9, 1, torch_function("neg")),
    "Abs": Unary(10, 1, torch_function("abs")),
    "Reciprocal": Unary(11, 1, torch_function("reciprocal")),
    "Log": Unary(12, 4, torch_function("log")),
    "Sin": Unary(13, 4, torch_function("sin")),
    "Cos": Unary(14, 4, torch_function("cos")),
    "HardSigmoid": Unary(15, 3, lambda T, a, k, n: (lambda x: (a.get("alpha", 0.2) * x + a.get("beta", 0.5))
                                                    .clamp(0.0, 1.0)), alpha=("alpha", 0.2), beta=("beta", 0.5)),
    "HardSwish": Unary(16, 4, torch_function("nn.functional.hardswish")),
    "Softplus": Unary(17, 4, torch_function("nn.functional.softplus")),
    "Elu": Unary(18, 4, lambda T, a, k, n: (lambda x: T.nn.functional.elu(x, a.get("alpha", 1.0))),
                 alpha=("alpha", 1.0)),
    "Clip": Unary(19, 2, lambda T, a, k, n: _torch_clip(T, a, k), alpha=("min", -INF), beta=("max", INF)),
}
POSITIVE_ONLY = ("Sqrt", "Log")  # ops whose test inputs are drawn positive
GELU_TANH = Unary(4, 10, _torch_gelu)
UNARY_SHAPES = (Shape(((3, 70),)), Shape(((2, 3, 4, 5),)), Shape(((4, 1000),)), Shape(((1, 64, 28, 28),)))
CLIP_SHAPES = (Shape(((3, 70),), {"min": -0.5, "max": 0.7}), Shape(((2, 3, 4, 5),), {"max": 0.1}),
               Shape(((4, 9),), {"min": 0.0}))


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy multidirectional broadcasting of two shapes."""
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise Refused(f"shapes {list(a)} and {list(b)} do not broadcast")
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


def _broadcasts_to(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """Whether `shape` broadcasts (one way) to `out`: no more dims, each one 1 or out's."""
    return len(shape) <= len(out) and all(d in (1, o) for d, o in zip(shape[::-1], out[::-1]))


def operand_view(out: tuple[int, ...], shapes: list[tuple[int, ...]]) -> tuple[list[int], list[list[int]]]:
    """Output dims (at most 4, left-padded with 1s) and each operand's strides along them, when every operand
    broadcasts to `out` (Refused when not)."""
    for shape in shapes:
        if not _broadcasts_to(shape, out):
            raise Refused(f"operand {list(shape)} does not broadcast to the output {list(out)}")
    dims, strides = merge_dims(out, [_operand_strides(shape, out) for shape in shapes])
    if len(dims) > MAX_BCAST_RANK:
        raise Refused(f"the broadcast needs {len(dims)} dims after merging, the kernel takes {MAX_BCAST_RANK}")
    pad = MAX_BCAST_RANK - len(dims)
    return [1] * pad + dims, [[0] * pad + s for s in strides]


def nary_view(node: NodeInfo, count: int | None = None) -> tuple[list[int], list[list[int]]]:
    """The view of the first `count` inputs (all by default) of a node whose output is their broadcast."""
    count = len(node.inputs) if count is None else count
    require_present(node, count)
    shapes = [node.inputs[i].shape for i in range(count)]
    out: tuple[int, ...] = ()
    for shape in shapes:
        out = _broadcast_shape(out, shape)
    if out != node.outputs[0].shape:
        raise Refused(f"output {list(node.outputs[0].shape)} is not the broadcast shape {list(out)}")
    return operand_view(out, shapes)


def broadcast_view(node: NodeInfo) -> tuple[list[int], list[int], list[int]]:
    """Output dims and A/B strides of a binary node, at most 4 dims (left-padded with 1s)."""
    dims, (sa, sb) = nary_view(node, 2)
    return dims, sa, sb


def bcast_launch(op: int, node: NodeInfo, a: int, b: int, dims: list[int], sa: list[int], sb: list[int],
                 act: Unary | None = None) -> Launch:
    """binary_bcast<op>(In(a), In(b)) -> Out(0) over the output view (binary_bcast_act<op, code> with `act`)."""
    kernel, codes = ("binary_bcast", [op]) if act is None else ("binary_bcast_act", [op, act.code])
    return operands_launch(kernel, codes, node, a, b, dims, sa, sb, 1 + (act.flops if act else 0))


def operands_launch(kernel: str, template_args: list, node: NodeInfo, a: int, b: int, dims: list[int],
                    sa: list[int], sb: list[int], flops: int = 1) -> Launch:
    """kernel<template_args..., BLOCK>(In(a), In(b), Out(0), n, d1..d3, A's and B's strides): the launch of every
    broadcasting two-operand kernel, one thread per output element, `flops` per element."""
    n = node.outputs[0].numel
    args = [In(a), In(b), Out(0), i32(n)] + [i32(v) for v in dims[1:] + sa + sb]
    return linear_launch(kernel, template_args + [BLOCK], n, BLOCK, args, n * flops,
                         tensor_bytes(node.inputs[a], node.inputs[b], node.outputs[0]))


def accumulate_launch(op: int, node: NodeInfo, b: int, dims: list[int], sb: list[int], scale: float) -> Launch:
    """binary_accumulate<op>: Out(0) = op(Out(0), In(b)) * scale."""
    n = node.outputs[0].numel
    args = [Out(0), In(b), i32(n)] + [i32(v) for v in dims[1:] + sb] + [f32(scale)]
    return linear_launch("binary_accumulate", [op, BLOCK], n, BLOCK, args, n,
                         tensor_bytes(node.inputs[b], node.outputs[0], node.outputs[0]))


def _same_condition(node: NodeInfo) -> str | None:
    """Both operands and the output have one shape."""
    require_present(node, 2)
    shapes = {node.inputs[0].shape, node.inputs[1].shape, node.outputs[0].shape}
    return None if len(shapes) == 1 else f"shapes differ: {[list(s) for s in shapes]}"


def _binary_bindings(op_type: str) -> list[Binding]:
    """binary_same (float4, same shapes) and binary_bcast (any broadcast) for one arithmetic op, or for FusedBinary
    (its `op` then its `activation`: binary_same_act and binary_bcast_act)."""
    fused = op_type == FUSED_BINARY
    suffix = "_act" if fused else ""

    def parts(node: NodeInfo) -> tuple[int, Unary | None]:
        return _fused_parts(node) if fused else (BINARY_OPS[op_type], None)

    def traffic(node: NodeInfo) -> int:
        return tensor_bytes(node.inputs[0], node.inputs[1], node.outputs[0])

    def plan_same(node: NodeInfo) -> list[Launch]:
        n, (op, act) = node.outputs[0].numel, parts(node)
        codes = [op] if act is None else [op, act.code]
        return [linear_launch("binary_same" + suffix, codes + [BLOCK], cdiv(n, 4), BLOCK,
                              [In(0), In(1), Out(0), i32(n)], n * (1 + (act.flops if act else 0)), traffic(node))]

    def plan_bcast(node: NodeInfo) -> list[Launch]:
        dims, sa, sb = broadcast_view(node)
        op, act = parts(node)
        return [bcast_launch(op, node, 0, 1, dims, sa, sb, act)]

    def same(node: NodeInfo) -> str | None:
        parts(node)
        return _same_condition(node)

    def bcast(node: NodeInfo) -> None:
        parts(node)
        broadcast_view(node)

    return [
        Binding(op_type, "same_shape", SOURCE, "fast", same, plan_same, ("binary_same" + suffix,)),
        Binding(op_type, "broadcast", SOURCE, "efficient", bcast, plan_bcast, ("binary_bcast" + suffix,)),
    ] + ([Binding(op_type, "int_broadcast", SOURCE, "only", condition_of(broadcast_view), _int_plan, ("int_bcast",),
                  dtypes=INT_TYPES)] if op_type in INT_BINARY_OPS else [])


# ---- integer arithmetic and comparisons (position ids from token ids, masks) ----------------------------------
INT_TYPES = ("int64", "int32")
INT_BINARY_OPS = ("Add", "Sub", "Mul")  # int_bcast's OP codes are binary_op's
COMPARE_OPS = {"Equal": 0, "Less": 1, "LessOrEqual": 2, "Greater": 3, "GreaterOrEqual": 4}  # compare_bcast's codes


def _int_plan(node: NodeInfo) -> list[Launch]:
    """int_bcast<T, OP>, one thread per output element."""
    return [_typed_bcast_launch("int_bcast", BINARY_OPS[node.op_type], node)]


def _typed_bcast_launch(kernel: str, code: int, node: NodeInfo) -> Launch:
    """kernel<T, code> over the broadcast view of inputs 0 and 1, T their element type."""
    dims, sa, sb = broadcast_view(node)
    return operands_launch(kernel, [ELEMENT_TYPES[node.inputs[0].dtype], code], node, 0, 1, dims, sa, sb)


def _compare_condition(node: NodeInfo) -> str | None:
    """Two operands of one element type (bool for Equal only) broadcast to a bool output."""
    require_present(node, 2)
    a, b = node.inputs[0].dtype, node.inputs[1].dtype
    allowed = ("float32", *INT_TYPES) + (("bool",) if node.op_type == "Equal" else ())
    if a != b or a not in allowed:
        return f"needs two operands of one type of {', '.join(allowed)}, got {a} and {b}"
    broadcast_view(node)
    return None


def _compare_plan(node: NodeInfo) -> list[Launch]:
    """compare_bcast<T, OP>, one thread per output element."""
    return [_typed_bcast_launch("compare_bcast", COMPARE_OPS[node.op_type], node)]


INT_SHAPES = (Shape(((1, 16), (1, 16)), dtypes={0: "int32", 1: "int32"}, ranges={0: (-99, 99), 1: (-99, 99)}),
              Shape(((1, 16), ()), dtypes={0: "int64", 1: "int64"}, ranges={0: (-99, 99), 1: (-99, 99)}),
              Shape(((3, 1, 4), (5, 1)), dtypes={0: "int64", 1: "int64"}, ranges={0: (-9, 9), 1: (-9, 9)}))
COMPARE_SHAPES = (Shape(((3, 5), (3, 5))), Shape(((4, 1), (3,))), *INT_SHAPES,
                  Shape(((2, 6), (6,)), dtypes={0: "int32", 1: "int32"}, ranges={0: (0, 3), 1: (0, 3)}))
COMPARE_DEFS = [OpDef(op, (Binding(op, "broadcast", SOURCE, "only", _compare_condition, _compare_plan,
                                   ("compare_bcast",), dtypes=("float32", *INT_TYPES, "bool")),),
                      COMPARE_SHAPES + ((Shape(((2, 7), (2, 7)), dtypes={0: "bool", 1: "bool"}),) if op == "Equal"
                                        else ()),
                      torch=torch_function({"Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt",
                                            "GreaterOrEqual": "ge"}[op]))
                for op in COMPARE_OPS]


# ---- FusedBinary: a binary op and the activation after it in one launch (scheduler/fuse_elementwise.py) ---------
FUSED_BINARY = "FusedBinary"
FUSED_BINARY_OPS = ("Add", "Sub", "Mul", "Div")
FUSED_BINARY_ACTIVATIONS = ("Relu", "Sigmoid", "Tanh")  # unary ops without attributes


def _fused_parts(node: NodeInfo) -> tuple[int, Unary]:
    """binary_op and unary_op codes of a FusedBinary's `op` and `activation` (Refused for others)."""
    op, act = str(node.attr("op", "")), str(node.attr("activation", ""))
    if op not in FUSED_BINARY_OPS:
        raise Refused(f"FusedBinary op '{op}': one of {', '.join(FUSED_BINARY_OPS)} only")
    if act not in FUSED_BINARY_ACTIVATIONS:
        raise Refused(f"FusedBinary activation '{act}': one of {', '.join(FUSED_BINARY_ACTIVATIONS)} only")
    return BINARY_OPS[op], UNARY[act]


def _fused_binary_equivalent(node: NodeInfo, ins: list[str], outs: list[str], dtype) -> tuple[list, list]:
    """FusedBinary as its op, then its activation."""
    return activated(node, [helper.make_node(str(node.attr("op", "")), ins[:2], ["binary"])], "binary", outs[0]), []


def _torch_fused_binary(T, a: dict, k: list, nout: int) -> Callable:
    """The op's torch function, then the activation's."""
    op = torch_function(str(a["op"]).lower())(T, a, k, nout)
    act = UNARY[str(a["activation"])].torch(T, a, k, nout)
    return lambda x, y: act(op(x, y))




BINARY_SHAPES = tuple(Shape((a, b), positive=(1,)) for a, b in [
    ((3, 50), (3, 50)), ((4, 8, 3), (4, 8, 3)), ((2, 3, 4, 5), ()), ((2, 3, 4, 5), (1, 3, 1, 1)), ((6, 10), (10,)),
    ((1, 5), (4, 1)), ((2, 1, 3, 2, 2, 3), (1, 1, 3, 1, 2, 3)), ((4, 256), (4, 256)), ((2, 64, 8, 8), (64, 1, 1))])
FUSED_BINARY_SHAPES = tuple(Shape(s.inputs, {"op": op, "activation": act}, positive=s.positive)
                            for s, (op, act) in zip(BINARY_SHAPES, [
                                ("Add", "Relu"), ("Add", "Relu"), ("Mul", "Relu"), ("Add", "Relu"), ("Sub", "Relu"),
                                ("Add", "Sigmoid"), ("Div", "Tanh"), ("Add", "Relu"), ("Add", "Relu")]))


def _unary_of(node: NodeInfo) -> Unary:
    """The activation of a unary node (Gelu's form from its approximate attribute)."""
    if node.op_type == "Gelu":
        approximate = str(node.attr("approximate", "none"))
        if approximate not in ("none", "tanh"):
            raise Refused(f"Gelu approximate='{approximate}' is not supported")
        return GELU_TANH if approximate == "tanh" else UNARY["Gelu"]
    return UNARY[node.op_type]


def _unary_condition(node: NodeInfo) -> str | None:
    """One input, one output of the same shape, a known activation."""
    require_present(node, 1)
    if node.inputs[0].shape != node.outputs[0].shape:
        return f"output {list(node.outputs[0].shape)} differs from input {list(node.inputs[0].shape)}"
    _unary_of(node)
    return None


def _unary_plan(node: NodeInfo) -> list[Launch]:
    """unary<OP>, one thread per element; the op's float attributes (if any) are the kernel's alpha and beta."""
    n, u = node.outputs[0].numel, _unary_of(node)
    alpha = float(node.attr(*u.alpha)) if u.alpha else 0.0
    beta = float(node.attr(*u.beta)) if u.beta else 0.0
    return [linear_launch("unary", [u.code, BLOCK], n, BLOCK, [In(0), Out(0), i32(n), f32(alpha), f32(beta)],
                          u.flops * n, tensor_bytes(node.inputs[0], node.outputs[0]))]


def _clip_condition(node: NodeInfo) -> str | None:
    """Clip's bounds are constants: attributes (opset < 11) or constant scalar inputs (given as attrs)."""
    for i, key in ((1, "min"), (2, "max")):
        if node.input(i) is not None and key not in node.attrs:
            return f"Clip's {key} (input {i}) must be a constant"
    return _unary_condition(node)


def _unary_def(op_type: str, u: Unary) -> OpDef:
    """The OpDef of one unary op (Clip: bounds as constant inputs min, max)."""
    if op_type == "Clip":
        return OpDef(op_type, (Binding(op_type, "direct", SOURCE, "only", _clip_condition, _unary_plan, ("unary",)),),
                     CLIP_SHAPES, constant_inputs=("min", "max"), torch=u.torch)
    positive = (0,) if op_type in POSITIVE_ONLY else ()
    shapes = tuple(Shape(s.inputs, s.attrs, positive=positive) for s in UNARY_SHAPES)
    shapes += (Shape(((5, 13),), {"approximate": "tanh"}),) if op_type == "Gelu" else ()
    shapes += (Shape(((5, 13),), {u.alpha[0]: 0.3} | ({u.beta[0]: 0.4} if u.beta else {})),) if u.alpha else ()
    return OpDef(op_type, (Binding(op_type, "direct", SOURCE, "only", _unary_condition, _unary_plan, ("unary",)),),
                 shapes, torch=u.torch)


# ---- n-ary Sum/Mean/Max/Min, Where, Expand -------------------------------------------------------------------
def _nary_plan(node: NodeInfo) -> list[Launch]:
    """The first two operands through binary_bcast (a copy of the first for one operand, or for Mean, whose last
    accumulation divides by the count), each further one accumulated in place."""
    op, count = NARY_OPS[node.op_type], len(node.inputs)
    dims, strides = nary_view(node)
    mean = node.op_type == "Mean"
    if count == 1 or mean:
        launches, rest = [bcast_launch(FIRST, node, 0, 0, dims, strides[0], strides[0])], range(1, count)
    else:
        launches, rest = [bcast_launch(op, node, 0, 1, dims, strides[0], strides[1])], range(2, count)
    for k in rest:
        launches.append(accumulate_launch(op, node, k, dims, strides[k], 1.0 / count if mean and k == count - 1
                                          else 1.0))
    return launches


def _nary_def(op_type: str) -> OpDef:
    """Sum/Mean/Max/Min of one or more broadcasting operands."""
    torch_fold = {"Sum": "add", "Mean": "add", "Max": "maximum", "Min": "minimum"}[op_type]

    def build(T, a: dict, k: list, nout: int) -> Callable:
        fn = getattr(T, torch_fold)

        def f(*xs):
            y = xs[0]
            for x in xs[1:]:
                y = fn(y, x)
            return y / len(xs) if op_type == "Mean" else y
        return f

    return OpDef(op_type, (Binding(op_type, "broadcast", SOURCE, "only", condition_of(nary_view), _nary_plan,
                                   ("binary_bcast", "binary_accumulate"),
                                   note="one launch per operand after the first two, in order"),),
                 (Shape(((3, 5), (3, 5), (3, 5))), Shape(((2, 3, 4), (4,))), Shape(((7, 6),)),
                  Shape(((2, 3, 4), (1, 4), (3, 1), (4,))))
                 # onnx 1.23's reference Mean cannot broadcast its first operand up
                 + ((Shape(((1, 4), (3, 1), (2, 3, 4), (4,))),) if op_type != "Mean" else ()),
                 torch=build)


def _where_condition(node: NodeInfo) -> str | None:
    """A bool condition and two operands of one element type broadcast to the output."""
    require_present(node, 3)
    types = [t.dtype for t in node.inputs]
    if types[0] != "bool" or types[1] != types[2] or types[1] not in ELEMENT_TYPES:
        return f"needs a bool condition and operands of one type of {', '.join(ELEMENT_TYPES)}, got {types}"
    nary_view(node)
    return None


def _where_plan(node: NodeInfo) -> list[Launch]:
    """where_bcast, one thread per output element."""
    dims, (sc, sa, sb) = nary_view(node)
    n = node.outputs[0].numel
    args = [In(0), In(1), In(2), Out(0), i32(n)] + [i32(v) for v in dims[1:] + sc + sa + sb]
    return [linear_launch("where_bcast", [ELEMENT_TYPES[node.inputs[1].dtype], BLOCK], n, BLOCK, args, n,
                          tensor_bytes(*node.inputs, node.outputs[0]))]




def _cast_condition(node: NodeInfo) -> str | None:
    """Input and output of the same shape, both of a type the kernel converts."""
    require_present(node, 1)
    x, y = node.inputs[0], node.outputs[0]
    if x.shape != y.shape:
        return f"output {list(y.shape)} differs from input {list(x.shape)}"
    return None if x.dtype in ELEMENT_TYPES and y.dtype in ELEMENT_TYPES else \
        f"cast {x.dtype} -> {y.dtype}: the kernel converts {', '.join(ELEMENT_TYPES)} only"


def _cast_plan(node: NodeInfo) -> list[Launch]:
    """cast_elements<TIn, TOut>, one thread per element."""
    x, y = node.inputs[0], node.outputs[0]
    n = y.numel
    item = lambda t: np.dtype(t.dtype).itemsize  # noqa: E731
    return [linear_launch("cast_elements", [ELEMENT_TYPES[x.dtype], ELEMENT_TYPES[y.dtype], BLOCK], n, BLOCK,
                          [In(0), Out(0), i32(n)], n, n * (item(x) + item(y)))]


def _expand_view(node: NodeInfo) -> tuple[list[int], list[list[int]]]:
    """Expand: the data input broadcast to the output (whose shape inference applied the shape input)."""
    require_present(node, 1)
    return operand_view(node.outputs[0].shape, [node.inputs[0].shape])


def _expand_plan(node: NodeInfo) -> list[Launch]:
    """binary_bcast<FIRST>(X, X): a broadcast copy."""
    dims, (sx,) = _expand_view(node)
    return [bcast_launch(FIRST, node, 0, 0, dims, sx, sx)]


def _expand_copy_plan(node: NodeInfo) -> list[Launch]:
    """bcast_copy<T>: the broadcast copy of a bool or integer tensor."""
    dims, (sx,) = _expand_view(node)
    x, n = node.inputs[0], node.outputs[0].numel
    return [linear_launch("bcast_copy", [ELEMENT_TYPES[x.dtype], BLOCK], n, BLOCK,
                          [In(0), Out(0), i32(n)] + [i32(v) for v in dims[1:] + sx], 0,
                          tensor_bytes(x, node.outputs[0]))]


# ---- logic on bool tensors, float classification --------------------------------------------------------------
LOGIC_OPS = {"And": 0, "Or": 1, "Xor": 2}  # logic_bcast's OP codes (legacy/elementwise.cu)
FLOAT_CLASS = {"IsNaN": 0, "IsInf": 1}     # float_class's OP codes


def _logic_plan(node: NodeInfo) -> list[Launch]:
    """logic_bcast<OP>, one thread per output element."""
    dims, sa, sb = broadcast_view(node)
    return [operands_launch("logic_bcast", [LOGIC_OPS[node.op_type]], node, 0, 1, dims, sa, sb)]


def _not_plan(node: NodeInfo) -> list[Launch]:
    """logic_not, one thread per element."""
    n = node.outputs[0].numel
    return [linear_launch("logic_not", [BLOCK], n, BLOCK, [In(0), Out(0), i32(n)], n, 2 * n)]


def _same_shape(node: NodeInfo) -> str | None:
    """One input and one output of its shape."""
    require_present(node, 1)
    x, y = node.inputs[0], node.outputs[0]
    return None if x.shape == y.shape else f"output {list(y.shape)} differs from input {list(x.shape)}"


def _float_class_condition(node: NodeInfo) -> str | None:
    """A float32 input, a bool output of its shape."""
    if node.inputs[0] is not None and node.inputs[0].dtype != "float32":
        return f"input 0 is {node.inputs[0].dtype}: the kernel classifies float32"
    return _same_shape(node)


def _float_class_plan(node: NodeInfo) -> list[Launch]:
    """float_class<OP>, one thread per element (IsInf's detect_positive / detect_negative as arguments)."""
    n = node.outputs[0].numel
    pos, neg = int(node.attr("detect_positive", 1)), int(node.attr("detect_negative", 1))
    return [linear_launch("float_class", [FLOAT_CLASS[node.op_type], BLOCK], n, BLOCK,
                          [In(0), Out(0), i32(n), i32(pos), i32(neg)], n, 5 * n)]


def _torch_is_inf(T, a: dict, k: list, nout: int) -> Callable:
    """IsInf with its detect flags."""
    pos, neg = a.get("detect_positive", 1), a.get("detect_negative", 1)
    return lambda x: (T.isposinf(x) & bool(pos)) | (T.isneginf(x) & bool(neg))


BOOL_SHAPES = (((3, 5), (3, 5)), ((4, 1), (3,)), ((1, 1, 16, 1), (1, 1, 1, 16)), ((2, 3, 4), ()))
LOGIC_DEFS = [OpDef(op, (Binding(op, "broadcast", SOURCE, "only", condition_of(nary_view), _logic_plan,
                                 ("logic_bcast",), dtypes=("bool",)),),
                    tuple(Shape(ins, dtypes={0: "bool", 1: "bool"}) for ins in BOOL_SHAPES),
                    torch=torch_function(f"logical_{op.lower()}"))
              for op in LOGIC_OPS]
LOGIC_DEFS += [
    OpDef("Not", (Binding("Not", "direct", SOURCE, "only", _same_shape, _not_plan, ("logic_not",), dtypes=("bool",)),),
          (Shape(((3, 5),), dtypes={0: "bool"}), Shape(((7,),), dtypes={0: "bool"})),
          torch=torch_function("logical_not")),
    OpDef("IsNaN", (Binding("IsNaN", "direct", SOURCE, "only", _float_class_condition, _float_class_plan,
                            ("float_class",), dtypes=("float32", "bool")),),
          (Shape(((3, 5),)), Shape(((2, 4, 6),))), torch=torch_function("isnan")),
    OpDef("IsInf", (Binding("IsInf", "direct", SOURCE, "only", _float_class_condition, _float_class_plan,
                            ("float_class",), dtypes=("float32", "bool")),),
          (Shape(((3, 5),)), Shape(((2, 4, 6),), {"detect_negative": 0}), Shape(((9,),), {"detect_positive": 0})),
          torch=_torch_is_inf)]


def _batchnorm_condition(node: NodeInfo) -> str | None:
    """Inference form: X [N, C, ...], four [C] parameter vectors, one output."""
    require_present(node, 5)
    refuse_extra_outputs(node, 1)
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
    require_present(node, 2)
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


PRELU_SHAPES = tuple(Shape((x, slope)) for x, slope in [
    ((3, 50), (3, 50)), ((2, 3, 4, 5), (1,)), ((2, 3, 4, 5), (3, 1, 1)), ((6, 10), (10,)), ((1, 64, 8, 8), (64, 1, 1)),
    ((4, 7, 3), (4, 7, 3))])
TORCH_BINARY = {"PRelu": lambda T, a, k, n: (lambda x, slope: T.where(x < 0, x * slope, x))}  # slope broadcasts
SHAPES_OF = {"Pow": tuple(Shape(s.inputs, positive=(0,)) for s in BINARY_SHAPES), "PRelu": PRELU_SHAPES}
SHAPES_OF |= {op: BINARY_SHAPES + INT_SHAPES for op in INT_BINARY_OPS}

OPS = (
    [OpDef(op, tuple(_binary_bindings(op)), SHAPES_OF.get(op, BINARY_SHAPES),
           torch=TORCH_BINARY.get(op, torch_function(op.lower())))
     for op in BINARY_OPS]
    + [OpDef(FUSED_BINARY, tuple(_binary_bindings(FUSED_BINARY)), FUSED_BINARY_SHAPES, torch=_torch_fused_binary,
             equivalent=_fused_binary_equivalent, custom=True)]
    + [_unary_def(op, u) for op, u in UNARY.items()]
    + [_nary_def(op) for op in NARY_OPS]
    + [OpDef("Where", (Binding("Where", "broadcast", SOURCE, "only", _where_condition, _where_plan, ("where_bcast",),
                               dtypes=tuple(ELEMENT_TYPES)),),
             tuple(Shape(ins, dtypes={0: "bool"}) for ins in (((3, 5), (3, 5), (3, 5)), ((4, 1), (3,), (2, 4, 3)),
                                                              ((1, 1, 6), (2, 1, 6), ())))
             + (Shape(((2, 3), (3,), (2, 1)), dtypes={0: "bool", 1: "int64", 2: "int64"},
                      ranges={1: (-99, 99), 2: (-99, 99)}),),
             torch=lambda T, a, k, n: T.where),
       OpDef("Cast", (Binding("Cast", "direct", SOURCE, "only", _cast_condition, _cast_plan, ("cast_elements",),
                              dtypes=tuple(ELEMENT_TYPES)),),
             (Shape(((3, 7),), {"to": 7}), Shape(((2, 5),), {"to": 1}, dtypes={0: "int64"}, ranges={0: (-9, 9)}),
              Shape(((4, 3),), {"to": 9}), Shape(((6,),), {"to": 1}, dtypes={0: "bool"}),
              Shape(((2, 2, 3),), {"to": 6}, dtypes={0: "int64"}, ranges={0: (-50, 50)})),
             torch=lambda T, a, k, n: (lambda x: x.to({1: T.float32, 6: T.int32, 7: T.int64, 9: T.bool}[a["to"]]))),
       OpDef("Expand", (Binding("Expand", "broadcast", SOURCE, "only", condition_of(_expand_view),
                                _expand_plan, ("binary_bcast",), float_inputs=1),
                        Binding("Expand", "copy", SOURCE, "only", condition_of(_expand_view), _expand_copy_plan,
                                ("bcast_copy",), float_inputs=1, dtypes=("bool", "int64", "int32"))),
             (Shape(((3, 1),), {"shape": [2, 3, 4]}), Shape(((1, 5),), {"shape": [4, 1]}),
              Shape(((2, 1, 3),), {"shape": [2, 4, 3]}),
              Shape(((1, 1, 16, 16),), {"shape": [1, 2, 16, 16]}, dtypes={0: "bool"}),
              Shape(((3, 1),), {"shape": [2, 3, 5]}, dtypes={0: "int64"}, ranges={0: (-99, 99)})),
             constant_inputs=("shape",), torch=lambda T, a, k, n: (lambda x, *s: x.expand(*[
                 max(d, e) for d, e in zip((1,) * (len(k[1]) - x.dim()) + tuple(x.shape), k[1])])))]
    + LOGIC_DEFS
    + COMPARE_DEFS
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
