"""Bindings of MaxPool and AveragePool (1-D, 2-D: pool2d; 3-D: pool3d) to legacy/pool.cu."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from kernel_corpus.bindings import Binding, In, Launch, NodeInfo, OpDef, Out, Shape
from kernel_corpus.ops._common import (Window, condition_of, i32, linear_launch, refuse_extra_outputs,
                                       require_present, spatial_hw, tensor_bytes, window_2d, window_dims)
from kernel_corpus.torch_builders import spatial_pads
from toolchain.refusal import Refused

SOURCE = "pool.cu"
BLOCK = 256
MODE_MAX, MODE_AVG_EXCLUDE_PAD, MODE_AVG_INCLUDE_PAD = 0, 1, 2


def pool_window(node: NodeInfo) -> Window:
    """The window of a MaxPool/AveragePool node (Refused when the kernel cannot do it)."""
    require_present(node, 1)
    refuse_extra_outputs(node, 1)
    x, y = node.inputs[0].shape, node.outputs[0].shape
    if len(x) not in (3, 4) or len(y) != len(x) or tuple(y[:2]) != tuple(x[:2]):
        raise Refused(f"needs X and Y of rank 3 or 4 with the same N, C, got {list(x)} and {list(y)}")
    kernel = node.attr("kernel_shape")
    if kernel is None:
        raise Refused("attribute kernel_shape is missing")
    return window_2d(node, x[2:], [int(k) for k in kernel], y[2:], bool(node.attr("ceil_mode", 0)))


def _mode(node: NodeInfo) -> int:
    """Which pool2d MODE the node needs."""
    if node.op_type == "MaxPool":
        return MODE_MAX
    return MODE_AVG_INCLUDE_PAD if int(node.attr("count_include_pad", 0)) else MODE_AVG_EXCLUDE_PAD


def _plan(node: NodeInfo) -> list[Launch]:
    """One pool2d launch, a thread per output."""
    win = pool_window(node)
    x, y = node.inputs[0].shape, node.outputs[0].shape
    (H, W), (OH, OW) = spatial_hw(x), spatial_hw(y)
    nc = x[0] * x[1]
    scalars = (nc, H, W, OH, OW, win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.ph_end, win.pw_end, win.dh,
               win.dw)
    outputs = node.outputs[0].numel
    return [linear_launch("pool2d", [_mode(node), BLOCK], outputs, BLOCK, [In(0), Out(0)] + [i32(v) for v in scalars],
                          outputs * win.kh * win.kw, tensor_bytes(node.inputs[0], node.outputs[0]))]


def indices_window(node: NodeInfo) -> Window:
    """The window of a 1-D/2-D MaxPool that asks for its int64 Indices output (no ceil-mode overhang)."""
    if node.op_type != "MaxPool" or node.output(1) is None:
        raise Refused("only MaxPool's Indices output takes this kernel")
    if node.outputs[1].dtype != "int64" or node.outputs[1].shape != node.outputs[0].shape:
        raise Refused(f"Indices must be int64 of Y's shape, got {node.outputs[1].dtype} "
                      f"{list(node.outputs[1].shape)}")
    stripped = NodeInfo(node.op_type, node.name, node.inputs, node.outputs[:1], node.attrs, node.opset)
    return pool_window(stripped)


def _plan_indices(node: NodeInfo) -> list[Launch]:
    """One maxpool2d_indices launch, a thread per output."""
    win = indices_window(node)
    x, y = node.inputs[0].shape, node.outputs[0].shape
    (H, W), (OH, OW) = spatial_hw(x), spatial_hw(y)
    scalars = (x[0] * x[1], H, W, OH, OW, win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.dh, win.dw,
               int(node.attr("storage_order", 0)))
    outputs = node.outputs[0].numel
    return [linear_launch("maxpool2d_indices", [BLOCK], outputs, BLOCK,
                          [In(0), Out(0), Out(1)] + [i32(v) for v in scalars], outputs * win.kh * win.kw,
                          tensor_bytes(node.inputs[0], node.outputs[0]) + 8 * outputs)]


def pool_window_3d(node: NodeInfo) -> list[tuple[int, int, int, int, int]]:
    """Per dim (kernel, stride, leading pad, trailing pad, dilation) of a 3-D pool."""
    require_present(node, 1)
    refuse_extra_outputs(node, 1)
    x, y = node.inputs[0].shape, node.outputs[0].shape
    if len(x) != 5 or len(y) != 5 or tuple(y[:2]) != tuple(x[:2]):
        raise Refused(f"needs X and Y of rank 5 with the same N, C, got {list(x)} and {list(y)}")
    kernel = node.attr("kernel_shape")
    if kernel is None:
        raise Refused("attribute kernel_shape is missing")
    return window_dims(node, x[2:], [int(k) for k in kernel], y[2:], bool(node.attr("ceil_mode", 0)))


def _plan_3d(node: NodeInfo) -> list[Launch]:
    """One pool3d launch, a thread per output."""
    dims = pool_window_3d(node)
    x, y = node.inputs[0].shape, node.outputs[0].shape
    k, s, pb, pe, d = zip(*dims)
    scalars = (x[0] * x[1], *x[2:], *y[2:], *k, *s, *pb, *pe, *d)
    outputs = node.outputs[0].numel
    return [linear_launch("pool3d", [_mode(node), BLOCK], outputs, BLOCK, [In(0), Out(0)] + [i32(v) for v in scalars],
                          outputs * k[0] * k[1] * k[2], tensor_bytes(node.inputs[0], node.outputs[0]))]


def _torch_pool(kind: str) -> Callable:
    """MaxPool / AveragePool builder over 1-3 spatial dims."""
    def build(T, a: dict, k: list, nout: int) -> Callable:
        F = T.nn.functional
        if kind == "MaxPool" and nout > 1:
            raise ValueError("MaxPool: the Indices output is not supported by the torch interpreter")
        ks = a["kernel_shape"]
        r = len(ks)
        pad, extra = spatial_pads(a, r, kind)
        strides, ceil = a.get("strides", [1] * r), bool(a.get("ceil_mode", 0))
        include = bool(a.get("count_include_pad", 0))
        if kind == "AveragePool" and extra and not include:
            raise ValueError("AveragePool: asymmetric pads with count_include_pad=0 are not supported")
        if any(d != 1 for d in a.get("dilations", [1] * r)):
            raise ValueError(f"{kind}: dilations are not supported by the torch interpreter")

        def f(x):
            if extra:
                x = F.pad(x, extra, value=-math.inf if kind == "MaxPool" else 0.0)
            if kind == "MaxPool":
                return getattr(F, f"max_pool{r}d")(x, ks, strides, pad, ceil_mode=ceil)
            return getattr(F, f"avg_pool{r}d")(x, ks, strides, pad, ceil_mode=ceil, count_include_pad=include)
        return f
    return build


def _maxpool_reference(node: NodeInfo, inputs: list) -> list:
    """MaxPool by hand (Y only), because onnx's ReferenceEvaluator (1.23) gets the output size of auto_pad=SAME_LOWER
    wrong. Pads are resolved as ONNX says (SAME_*: total = (ceil(n/s) - 1) s + (k - 1) d + 1 - n, the odd pad at the
    end for UPPER, at the start for LOWER); ceil_mode windows may not start in the trailing pad. The Indices output
    (flat over N*C planes, the first maximum of a tie; storage_order 1 counts the first spatial dim fastest) is
    computed here too: onnx 1.23's evaluator numbers it within a plane and ignores storage_order."""
    x = inputs[0]
    kernel = [int(k) for k in node.attr("kernel_shape")]
    nd, sizes = len(kernel), x.shape[2:]
    strides = list(node.attr("strides", [1] * nd))
    dil = list(node.attr("dilations", [1] * nd))
    pads = list(node.attr("pads", [0] * 2 * nd))
    begin, end = pads[:nd], pads[nd:]
    auto = node.attr("auto_pad", "NOTSET")
    if auto == "VALID":
        begin, end = [0] * nd, [0] * nd
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [max(0, (math.ceil(n / s) - 1) * s + d * (k - 1) + 1 - n)
                 for n, s, d, k in zip(sizes, strides, dil, kernel)]
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        end = [t - b for t, b in zip(total, begin)]
    out = []
    for n, k, s, d, b, e in zip(sizes, kernel, strides, dil, begin, end):
        span = n + b + e - d * (k - 1) - 1
        o = (-(-span // s) if node.attr("ceil_mode", 0) else span // s) + 1
        out.append(o - 1 if node.attr("ceil_mode", 0) and (o - 1) * s >= n + b else o)
    reach = [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(out, strides, dil, kernel)]
    after = [max(e, r - n - b) for r, n, b, e in zip(reach, sizes, begin, end)]
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(begin, after)), constant_values=-np.inf)
    y = np.full(x.shape[:2] + tuple(out), -np.inf)
    where = np.zeros(y.shape, dtype=np.int64)
    planes = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2] + (1,) * nd) * int(np.prod(sizes))
    for tap in np.ndindex(*kernel):
        idx = tuple(slice(t * d, t * d + s * (o - 1) + 1, s) for t, d, s, o in zip(tap, dil, strides, out))
        v = xp[(slice(None), slice(None)) + idx]
        coords = np.meshgrid(*[np.arange(o) * s + t * d - b for o, s, t, d, b in zip(out, strides, tap, dil, begin)],
                             indexing="ij")
        order = coords[::-1] if node.attr("storage_order", 0) else coords
        dims = sizes[::-1] if node.attr("storage_order", 0) else sizes
        flat = np.ravel_multi_index(tuple(np.clip(c, 0, n - 1) for c, n in zip(order, dims)), dims)
        better = v > y
        where = np.where(better, planes + flat, where)
        y = np.where(better, v, y)
    return [y, where] if len(node.outputs) > 1 and node.outputs[1] is not None else [y]


COMMON_SHAPES = (  # both pools
    Shape(((1, 3, 9, 9),), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    Shape(((2, 2, 8, 7),), {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
    Shape(((1, 2, 10),), {"kernel_shape": [3], "strides": [2]}),
    Shape(((1, 2, 8, 9),), {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    Shape(((1, 2, 8, 9),), {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    Shape(((1, 16, 32, 32),), {"kernel_shape": [2, 2], "strides": [2, 2]}, test=False),
    Shape(((1, 64, 56, 56),), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, test=False),
)
MAXPOOL_SHAPES = COMMON_SHAPES + (Shape(((1, 2, 9, 8),), {"kernel_shape": [2, 2], "dilations": [2, 2]}),)
AVGPOOL_SHAPES = COMMON_SHAPES + (
    Shape(((1, 2, 7, 6),), {"kernel_shape": [3, 2], "pads": [1, 1, 1, 0], "count_include_pad": 1}),
    Shape(((2, 2, 8, 8),), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    Shape(((1, 2, 8, 9),), {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER",
                            "count_include_pad": 1}),
)

SHAPES_3D = (Shape(((1, 2, 5, 6, 7),), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]}),
             Shape(((2, 1, 6, 5, 4),), {"kernel_shape": [3, 2, 2], "dilations": [2, 1, 1], "ceil_mode": 1,
                                        "strides": [2, 2, 1]}))

INDICES_SHAPES = (Shape(((1, 2, 6, 7),), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}, outputs=2),
                  Shape(((2, 3, 5, 5),), {"kernel_shape": [2, 2], "storage_order": 1}, outputs=2))

OPS = [OpDef(op, (Binding(op, "direct", SOURCE, "only", condition_of(pool_window), _plan, ("pool2d",)),
                  Binding(op, "3d", SOURCE, "only", condition_of(pool_window_3d), _plan_3d, ("pool3d",)))
             + ((Binding(op, "indices", SOURCE, "only", condition_of(indices_window), _plan_indices,
                         ("maxpool2d_indices",), dtypes=("float32", "int64")),) if op == "MaxPool" else ()),
             shapes + SHAPES_3D + (INDICES_SHAPES if op == "MaxPool" else ()), reference=reference,
             torch=_torch_pool(op))
       for op, shapes, reference in (("MaxPool", MAXPOOL_SHAPES, _maxpool_reference),
                                     ("AveragePool", AVGPOOL_SHAPES, None))]
