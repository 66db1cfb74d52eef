"""The reduction family of legacy/reduce.cu: Softmax/LogSoftmax (rows, or any axis), LayerNormalization (with its
Mean and InvStdDev outputs), Instance/GroupNormalization, GlobalAveragePool and the Reduce* ops over any axes."""
from __future__ import annotations

from math import prod

import numpy as np
from typing import Callable

from kernel_corpus.bindings import Binding, In, Launch, NodeInfo, OpDef, Out, Shape
from kernel_corpus.ops._common import (cdiv, condition_of, contiguous_strides, f32, i32, linear_launch, merged_view,
                                       norm_axis, refuse_extra_outputs, require_present, temp, tensor_bytes)
from toolchain.refusal import Refused

SOURCE = "reduce.cu"
# (variant, threads per row, rows per rTask, kind): a block per row for long rows, a warp per row for short ones.
SHAPES = (("block256", 256, 1, "fast"), ("warp4", 32, 4, "efficient"))
FLOPS_PER_ELEMENT = {"Softmax": 5, "LogSoftmax": 5, "LayerNormalization": 8, "GlobalAveragePool": 1,
                     "InstanceNormalization": 8, "GroupNormalization": 8}
REDUCE_OPS = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3, "ReduceProd": 4, "ReduceL1": 5,
              "ReduceL2": 6, "ReduceSumSquare": 7, "ReduceLogSumExp": 8, "ReduceLogSum": 9}  # reduce_axes codes
AXES_INPUT_SINCE = {"ReduceSum": 13}  # opset from which axes is an input (18 for the other Reduce* ops)
BLOCK = 256


def _split_at(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    """(rows, cols) of a tensor flattened around an axis."""
    return prod(shape[:axis]), prod(shape[axis:])


def softmax_axis(node: NodeInfo) -> int:
    """The (non-negative) axis of a Softmax/LogSoftmax node (default -1 from opset 13, 1 before)."""
    require_present(node, 1)
    shape = node.inputs[0].shape
    return norm_axis(int(node.attr("axis", -1 if node.opset >= 13 else 1)), len(shape))


def softmax_rows(node: NodeInfo) -> tuple[int, int]:
    """Softmax as [rows, cols]: opset >= 13 over the last axis; older opsets flatten at the axis."""
    axis = softmax_axis(node)
    shape = node.inputs[0].shape
    if node.opset >= 13 and axis != max(len(shape) - 1, 0):
        raise Refused(f"softmax over axis {axis} of rank {len(shape)}: the row kernels take the last axis")
    return _split_at(shape, axis)


def softmax_middle(node: NodeInfo) -> tuple[int, int, int]:
    """[outer, len, inner] of an opset >= 13 softmax over an axis other than the last."""
    axis = softmax_axis(node)
    shape = node.inputs[0].shape
    if node.opset < 13 or axis == max(len(shape) - 1, 0):
        raise Refused("the row kernels take this softmax")
    return prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])


def layernorm_rows(node: NodeInfo) -> tuple[int, int]:
    """LayerNormalization as [rows, cols] (normalised over the axes from `axis` on), scale/bias of cols values."""
    require_present(node, 2)
    refuse_extra_outputs(node, 3)
    if int(node.attr("stash_type", 1)) != 1:
        raise Refused(f"stash_type {node.attr('stash_type')} is not supported (float32 statistics only)")
    shape = node.inputs[0].shape
    axis = norm_axis(int(node.attr("axis", -1)), len(shape))
    rows, cols = _split_at(shape, axis)
    for i in (1, 2):
        t = node.input(i)
        if t is not None and t.numel != cols:
            raise Refused(f"input {i} {list(t.shape)} does not hold the {cols} normalised values")
    return rows, cols


def gap_rows(node: NodeInfo) -> tuple[int, int]:
    """GlobalAveragePool as [N*C, spatial] means."""
    require_present(node, 1)
    shape = node.inputs[0].shape
    if len(shape) < 3:
        raise Refused(f"needs rank >= 3, got {list(shape)}")
    return _split_at(shape, 2)


def groupnorm_rows(node: NodeInfo) -> tuple[int, int]:
    """Instance/GroupNormalization as [N*groups, channels_per_group * spatial] rows, with [C] (or [groups])
    scale and bias."""
    require_present(node, 3)
    refuse_extra_outputs(node, 1)
    shape = node.inputs[0].shape
    if len(shape) < 3:
        raise Refused(f"needs X of rank >= 3, got {list(shape)}")
    C = shape[1]
    groups = C if node.op_type == "InstanceNormalization" else int(node.attr("num_groups", 0))
    if groups < 1 or C % groups:
        raise Refused(f"num_groups {groups} does not divide the {C} channels")
    if int(node.attr("stash_type", 1)) != 1:
        raise Refused(f"stash_type {node.attr('stash_type')} is not supported (float32 statistics only)")
    for i in (1, 2):
        if node.inputs[i].numel not in (C, groups):
            raise Refused(f"input {i} {list(node.inputs[i].shape)} holds neither {C} channels nor {groups} groups")
    return shape[0] * groups, prod(shape[1:]) // groups


def _binding(op_type: str, rows_of: Callable, kernel: str, extra_args: Callable, variant: str, threads: int,
             rows_per_task: int, kind: str, template_of: Callable | None = None) -> Binding:
    """One row-reduction binding: grid ceil(rows / ROWS), block (THREADS, ROWS); `template_of(node)` gives the
    kernel's template arguments after THREADS and ROWS."""

    def plan(node: NodeInfo) -> list[Launch]:
        rows, cols = rows_of(node)
        template = [threads, rows_per_task] + (template_of(node) if template_of else [])
        return [Launch(kernel, template, (cdiv(rows, rows_per_task), 1, 1), (threads, rows_per_task, 1), 0,
                       extra_args(node, rows, cols), FLOPS_PER_ELEMENT[op_type] * rows * cols,
                       tensor_bytes(*node.inputs, node.outputs[0]))]

    return Binding(op_type, variant, SOURCE, kind, condition_of(rows_of), plan, (kernel,))


def _rows_args(node: NodeInfo, rows: int, cols: int) -> list:
    """softmax_rows / mean_rows(X, Y, rows, cols)."""
    return [In(0), Out(0), i32(rows), i32(cols)]


def _layernorm_template(node: NodeInfo) -> list:
    """<BIAS, STATS>: whether the bias is given and whether Mean or InvStdDev is asked for."""
    return [node.input(2) is not None, node.output(1) is not None or node.output(2) is not None]


def _layernorm_args(node: NodeInfo, rows: int, cols: int) -> list:
    """layernorm_rows(X, scale, bias, Y, mean, rstd, rows, cols, eps); X stands in for an absent bias (never read),
    a scratch row vector for an absent statistic."""
    bias = In(2) if node.input(2) is not None else In(0)
    stats = [Out(i) if node.output(i) is not None else temp(f"stat{i}", 4 * rows) for i in (1, 2)]
    return [In(0), In(1), bias, Out(0), *stats, i32(rows), i32(cols), f32(node.attr("epsilon", 1e-5))]


def _groupnorm_args(node: NodeInfo, rows: int, cols: int) -> list:
    """groupnorm_rows(X, scale, bias, Y, rows, cols, groups, spatial, per_group, eps)."""
    shape = node.inputs[0].shape
    groups = rows // shape[0]
    spatial = prod(shape[2:])
    per_group = int(node.inputs[1].numel == groups and groups != shape[1])
    return [In(0), In(1), In(2), Out(0), i32(rows), i32(cols), i32(groups), i32(spatial), i32(per_group),
            f32(node.attr("epsilon", 1e-5))]


# ---- softmax over an inner axis ------------------------------------------------------------------------------
def _softmax_axis_binding(op_type: str) -> Binding:
    """softmax_axis<LOG>: a thread per (outer, inner) pair."""
    def plan(node: NodeInfo) -> list[Launch]:
        outer, length, inner = softmax_middle(node)
        n = outer * inner
        return [linear_launch("softmax_axis", [op_type == "LogSoftmax", BLOCK], n, BLOCK,
                              [In(0), Out(0), i32(outer), i32(length), i32(inner)], 5 * n * length,
                              tensor_bytes(node.inputs[0], node.outputs[0]))]
    return Binding(op_type, "axis", SOURCE, "only", condition_of(softmax_middle), plan,
                   ("softmax_axis",))


def _softmax_bindings(op_type: str) -> tuple[Binding, ...]:
    """The two row variants (last axis, or flattened before opset 13) and the inner-axis kernel."""
    log = op_type == "LogSoftmax"
    return tuple(_binding(op_type, softmax_rows, "softmax_rows", _rows_args, v, th, r, k,
                          template_of=lambda node: [log]) for v, th, r, k in SHAPES) + (_softmax_axis_binding(op_type),)


# ---- Reduce* over any axes -----------------------------------------------------------------------------------
def reduce_axes(node: NodeInfo) -> list[int]:
    """The sorted, non-negative reduced axes of a Reduce* node (every axis when none are given, none for
    noop_with_empty_axes), from the attribute or the constant axes input."""
    require_present(node, 1)
    rank = len(node.inputs[0].shape)
    if node.input(1) is not None and "axes" not in node.attrs:
        raise Refused("axes must be a constant")
    axes = node.attr("axes", None)
    if axes is None or (isinstance(axes, list) and not axes):
        return [] if int(node.attr("noop_with_empty_axes", 0)) else list(range(rank))
    return sorted({norm_axis(int(a), rank) for a in ([axes] if isinstance(axes, int) else axes)})


def reduce_view(node: NodeInfo) -> tuple[list[int], list[int], list[int], list[int]]:
    """Kept and reduced views of the input (sizes and strides each), checked against the output size."""
    axes = reduce_axes(node)
    shape = node.inputs[0].shape
    strides = contiguous_strides(shape)
    kept = merged_view([(d, s) for a, (d, s) in enumerate(zip(shape, strides)) if a not in axes])
    red = merged_view([(d, s) for a, (d, s) in enumerate(zip(shape, strides)) if a in axes])
    if prod(kept[0]) != node.outputs[0].numel:
        raise Refused(f"output {list(node.outputs[0].shape)} does not hold the {prod(kept[0])} reduced values")
    return kept[0], kept[1], red[0], red[1]


def _reduce_plan(node: NodeInfo) -> list[Launch]:
    """reduce_axes<OP, 4>: a warp per output element."""
    kd, ks, rd, rs = reduce_view(node)
    n_out, n_red = prod(kd), prod(rd)
    args = [In(0), Out(0), i32(n_out), i32(n_red)] + [i32(v) for v in kd[1:] + ks + rd[1:] + rs]
    return [Launch("reduce_axes", [REDUCE_OPS[node.op_type], 4], (cdiv(n_out, 4), 1, 1), (32, 4, 1), 0, args,
                   2 * n_out * n_red, tensor_bytes(node.inputs[0], node.outputs[0]))]


def _reduce_def(op_type: str) -> OpDef:
    """One Reduce* op: axes as an attribute, or as a constant input from opset 18 (13 for ReduceSum)."""
    since = AXES_INPUT_SINCE.get(op_type, 18)
    positive = (0,) if op_type in ("ReduceLogSum", "ReduceProd") else ()
    shapes = (Shape(((3, 4, 5),), {"axes": [1], "keepdims": 1}, opset=since, positive=positive),
              Shape(((2, 3, 4, 5),), {"axes": [0, 2], "keepdims": 0}, opset=since, positive=positive),
              Shape(((4, 70),), {}, opset=since, positive=positive),
              Shape(((2, 3, 2, 5, 3),), {"axes": [-1, 1, 3]}, opset=since, positive=positive),
              Shape(((6, 40),), {"axes": [1], "keepdims": 0}, opset=since - 1, positive=positive))  # an attribute
    return OpDef(op_type, (Binding(op_type, "axes", SOURCE, "only", condition_of(reduce_view),
                                   _reduce_plan, ("reduce_axes",), float_inputs=1),),
                 shapes, constant_inputs=("axes",))


def _softmax_reference(node: NodeInfo, inputs: list) -> list:
    """Softmax by hand, because onnx's ReferenceEvaluator (1.23) applies the opset-13 rule (one axis) at every
    opset; before 13 the input is flattened to 2-D at `axis` (default 1) and normalised over the trailing part."""
    x = inputs[0]
    if node.opset >= 13:
        axes = (node.attr("axis", -1) % x.ndim,)
    else:
        axes = tuple(range(node.attr("axis", 1) % x.ndim, x.ndim))
    e = np.exp(x - x.max(axis=axes, keepdims=True))
    return [e / e.sum(axis=axes, keepdims=True)]


def _torch_softmax(T, a: dict, k: list, nout: int) -> Callable:
    """Softmax over one axis (opset >= 13)."""
    return lambda x: T.softmax(x, dim=a.get("axis", -1))


def _torch_layernorm(T, a: dict, k: list, nout: int) -> Callable:
    """LayerNormalization over axis..last."""
    eps, axis = a.get("epsilon", 1e-5), a.get("axis", -1)
    return lambda x, scale, bias=None: T.nn.functional.layer_norm(x, x.shape[axis % x.dim():], scale, bias, eps)


def _torch_gap(T, a: dict, k: list, nout: int) -> Callable:
    """Mean over every spatial axis, kept."""
    return lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


SOFTMAX_SHAPES = (Shape(((3, 70),)), Shape(((2, 3, 300),)), Shape(((2, 3, 4),), {"axis": 1}, opset=11),
                  Shape(((8, 1000),), {"axis": -1}), Shape(((64, 128),), {"axis": -1}),
                  Shape(((3, 7, 5),), {"axis": 1}), Shape(((4, 3, 2),), {"axis": 0}))

OPS = [
    OpDef("Softmax", _softmax_bindings("Softmax"), SOFTMAX_SHAPES, reference=_softmax_reference, torch=_torch_softmax),
    OpDef("LogSoftmax", _softmax_bindings("LogSoftmax"), SOFTMAX_SHAPES,
          reference=lambda node, inputs: [np.log(_softmax_reference(node, inputs)[0])],
          torch=lambda T, a, k, n: (lambda x: T.log_softmax(x, dim=a.get("axis", -1)))),
    OpDef("LayerNormalization",
          tuple(_binding("LayerNormalization", layernorm_rows, "layernorm_rows", _layernorm_args, v, th, r, k,
                         template_of=_layernorm_template) for v, th, r, k in SHAPES),
          (Shape(((3, 70), (70,), (70,)), {"epsilon": 1e-3}), Shape(((2, 4, 33), (33,))),
           Shape(((2, 3, 5), (3, 5), (3, 5)), {"axis": 1}), Shape(((16, 768), (768,), (768,)), {"axis": -1}),
           Shape(((2, 3, 5), (5,), (5,)), outputs=3), Shape(((4, 6, 9), (6, 9)), {"axis": -2}, outputs=2)),
          torch=_torch_layernorm),
    *[OpDef(op, tuple(_binding(op, groupnorm_rows, "groupnorm_rows", _groupnorm_args, v, th, r, k)
                      for v, th, r, k in SHAPES), shapes)
      for op, shapes in (
          ("InstanceNormalization", (Shape(((2, 3, 4, 5), (3,), (3,)), {"epsilon": 1e-3}),
                                     Shape(((1, 4, 50), (4,), (4,))))),
          ("GroupNormalization", (Shape(((2, 6, 4, 5), (6,), (6,)), {"num_groups": 3}, opset=21),
                                  Shape(((1, 8, 30), (8,), (8,)), {"num_groups": 2, "epsilon": 1e-3}, opset=21),
                                  Shape(((2, 6, 3, 3), (3,), (3,)), {"num_groups": 3}, opset=18))))],
    *[_reduce_def(op) for op in REDUCE_OPS],
    OpDef("GlobalAveragePool", tuple(_binding("GlobalAveragePool", gap_rows, "mean_rows", _rows_args, v, th, r, k)
                                     for v, th, r, k in SHAPES),
          (Shape(((2, 3, 5, 7),)), Shape(((1, 4, 20, 20),)), Shape(((3, 5, 6),)), Shape(((1, 512, 7, 7),))),
          torch=_torch_gap),
]
