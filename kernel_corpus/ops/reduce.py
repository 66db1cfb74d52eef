"""Bindings of the row reductions of legacy/reduce.cu: Softmax, LayerNormalization, GlobalAveragePool."""
from __future__ import annotations

from math import prod

import numpy as np
from typing import Callable

from kernel_corpus.bindings import Binding, In, Launch, NodeInfo, OpDef, Out, Shape
from kernel_corpus.ops._common import (cdiv, extra_outputs, f32, i32, norm_axis, reason,
                                       require_present, tensor_bytes)

SOURCE = "reduce.cu"
# (variant, threads per row, rows per rTask, kind): a block per row for long rows, a warp per row for short ones.
SHAPES = (("block256", 256, 1, "fast"), ("warp4", 32, 4, "efficient"))
FLOPS_PER_ELEMENT = {"Softmax": 5, "LayerNormalization": 8, "GlobalAveragePool": 1}


def _split_at(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    """(rows, cols) of a tensor flattened around an axis."""
    return prod(shape[:axis]), prod(shape[axis:])


def softmax_rows(node: NodeInfo) -> tuple[int, int] | str:
    """Softmax as [rows, cols]: opset >= 13 needs the last axis; older opsets flatten at the axis."""
    missing = require_present(node, 1)
    if missing:
        return missing
    shape = node.inputs[0].shape
    axis = norm_axis(int(node.attr("axis", -1 if node.opset >= 13 else 1)), len(shape))
    if isinstance(axis, str):
        return axis
    if node.opset >= 13 and axis != max(len(shape) - 1, 0):
        return f"softmax over axis {axis} of rank {len(shape)}: only the last axis is supported"
    return _split_at(shape, axis)


def layernorm_rows(node: NodeInfo) -> tuple[int, int] | str:
    """LayerNormalization as [rows, cols] (normalised over the axes from `axis` on), scale/bias of cols values."""
    missing = require_present(node, 2) or extra_outputs(node, 1)
    if missing:
        return missing
    shape = node.inputs[0].shape
    axis = norm_axis(int(node.attr("axis", -1)), len(shape))
    if isinstance(axis, str):
        return axis
    rows, cols = _split_at(shape, axis)
    for i in (1, 2):
        t = node.input(i)
        if t is not None and t.numel != cols:
            return f"input {i} {list(t.shape)} does not hold the {cols} normalised values"
    return rows, cols


def gap_rows(node: NodeInfo) -> tuple[int, int] | str:
    """GlobalAveragePool as [N*C, spatial] means."""
    missing = require_present(node, 1)
    if missing:
        return missing
    shape = node.inputs[0].shape
    if len(shape) < 3:
        return f"needs rank >= 3, got {list(shape)}"
    return _split_at(shape, 2)


def _binding(op_type: str, rows_of: Callable, kernel: str, extra_args: Callable, variant: str, threads: int,
             rows_per_task: int, kind: str, bias_template: bool = False) -> Binding:
    """One row-reduction binding: grid ceil(rows / ROWS), block (THREADS, ROWS)."""

    def condition(node: NodeInfo) -> str | None:
        return reason(rows_of(node))

    def plan(node: NodeInfo) -> list[Launch]:
        rows, cols = rows_of(node)
        template = [threads, rows_per_task] + ([bool(node.input(2) is not None)] if bias_template else [])
        return [Launch(kernel, template, (cdiv(rows, rows_per_task), 1, 1), (threads, rows_per_task, 1), 0,
                       extra_args(node, rows, cols), FLOPS_PER_ELEMENT[op_type] * rows * cols,
                       tensor_bytes(*node.inputs, node.outputs[0]))]

    return Binding(op_type, variant, SOURCE, kind, condition, plan, (kernel,))


def _rows_args(node: NodeInfo, rows: int, cols: int) -> list:
    """softmax_rows / mean_rows(X, Y, rows, cols)."""
    return [In(0), Out(0), i32(rows), i32(cols)]


def _layernorm_args(node: NodeInfo, rows: int, cols: int) -> list:
    """layernorm_rows(X, scale, bias, Y, rows, cols, eps); X stands in for an absent bias (never read)."""
    bias = In(2) if node.input(2) is not None else In(0)
    return [In(0), In(1), bias, Out(0), i32(rows), i32(cols), f32(node.attr("epsilon", 1e-5))]


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


OPS = [
    OpDef("Softmax", tuple(_binding("Softmax", softmax_rows, "softmax_rows", _rows_args, v, th, r, k)
                           for v, th, r, k in SHAPES),
          (Shape(((3, 70),)), Shape(((2, 3, 300),)), Shape(((2, 3, 4),), {"axis": 1}, opset=11),
           Shape(((8, 1000),), {"axis": -1}), Shape(((64, 128),), {"axis": -1})),
          reference=_softmax_reference, torch=_torch_softmax),
    OpDef("LayerNormalization",
          tuple(_binding("LayerNormalization", layernorm_rows, "layernorm_rows", _layernorm_args, v, th, r, k,
                         bias_template=True) for v, th, r, k in SHAPES),
          (Shape(((3, 70), (70,), (70,)), {"epsilon": 1e-3}), Shape(((2, 4, 33), (33,))),
           Shape(((2, 3, 5), (3, 5), (3, 5)), {"axis": 1}), Shape(((16, 768), (768,), (768,)), {"axis": -1})),
          torch=_torch_layernorm),
    OpDef("GlobalAveragePool", tuple(_binding("GlobalAveragePool", gap_rows, "mean_rows", _rows_args, v, th, r, k)
                                     for v, th, r, k in SHAPES),
          (Shape(((2, 3, 5, 7),)), Shape(((1, 4, 20, 20),)), Shape(((3, 5, 6),)), Shape(((1, 512, 7, 7),))),
          torch=_torch_gap),
]
