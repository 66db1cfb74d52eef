"""The data-movement family of legacy/layout.cu: Concat, Split, Slice, Transpose, Gather, GatherElements, Tile and
CumSum."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from math import prod

import numpy as np

from typing import Callable

from kernel_corpus.bindings import Binding, In, Launch, NodeInfo, OpDef, Out, Scalar, Shape, TensorInfo
from kernel_corpus.ops._common import (ELEMENT_TYPES, MAX_GRID_YZ, MAX_VIEW_RANK, cdiv, contiguous_strides, f32, i32,
                                       linear_launch, merged_view, norm_axis, condition_of, require_present)
from kernel_corpus.torch_builders import const_ints, need_const
from toolchain.refusal import Refused

SOURCE = "layout.cu"
BLOCK = 256
TILE, TILE_ROWS = 32, 8
MAX_TRANSPOSE_RANK = 4


def _copy_bytes(count: int, dtype: str = "float32") -> int:
    """Bytes to read and write `count` elements of `dtype`."""
    return 2 * count * np.dtype(dtype).itemsize


# ---- Concat ------------------------------------------------------------------------------------------------
def concat_axis(node: NodeInfo) -> int:
    """The (non-negative) Concat axis once every input matches the output outside it."""
    if not node.inputs or any(t is None for t in node.inputs) or node.output(0) is None:
        raise Refused("needs present inputs and an output")
    out = node.outputs[0].shape
    axis = norm_axis(int(node.attr("axis", 0)), len(out))
    total = 0
    for i, t in enumerate(node.inputs):
        if len(t.shape) != len(out) or any(d != o for k, (d, o) in enumerate(zip(t.shape, out)) if k != axis):
            raise Refused(f"input {i} {list(t.shape)} does not fit output {list(out)} outside axis {axis}")
        total += t.shape[axis]
    if total != out[axis]:
        raise Refused(f"inputs add up to {total} along axis {axis}, output has {out[axis]}")
    return axis


def _concat_plan(node: NodeInfo) -> list[Launch]:
    """One concat_copy per input, each writing its own slab of the output (independent launches)."""
    out = node.outputs[0].shape
    axis = concat_axis(node)
    outer, inner = prod(out[:axis]), prod(out[axis + 1:])
    launches, offset = [], 0
    for i, t in enumerate(node.inputs):
        src_inner = t.shape[axis] * inner
        copy = linear_launch("concat_copy", [BLOCK], t.numel, BLOCK,
                             [In(i), Out(0), i32(outer), i32(src_inner), i32(out[axis] * inner), i32(offset)], 0,
                             _copy_bytes(t.numel))
        launches.append(dataclasses.replace(copy, independent=True))
        offset += src_inner
    return launches


# ---- Split and Slice: strided copies of one axis ----------------------------------------------------------
@dataclass(frozen=True)
class AxisSlice:
    """dst[o, j, i] = src[o, start + j*step, i] for src [outer, len_in, inner], dst [outer, len_out, inner]."""

    outer: int
    len_in: int
    len_out: int
    inner: int
    start: int
    step: int


def _axis_slice_launch(s: AxisSlice, out_index: int) -> Launch:
    """slice_axis into output `out_index`."""
    n = s.outer * s.len_out * s.inner
    args = [In(0), Out(out_index)] + [i32(v) for v in (s.outer, s.len_in, s.len_out, s.inner, s.start, s.step)]
    return linear_launch("slice_axis", [BLOCK], n, BLOCK, args, 0, _copy_bytes(n))


def split_slices(node: NodeInfo) -> list[AxisSlice]:
    """One slice per Split output; the sizes are read from the output shapes."""
    if node.input(0) is None or not node.outputs or any(t is None for t in node.outputs):
        raise Refused("needs input 0 and present outputs")
    x = node.inputs[0].shape
    axis = norm_axis(int(node.attr("axis", 0)), len(x))
    outer, inner = prod(x[:axis]), prod(x[axis + 1:])
    slices, start = [], 0
    for i, t in enumerate(node.outputs):
        y = t.shape
        if len(y) != len(x) or any(d != o for k, (d, o) in enumerate(zip(y, x)) if k != axis):
            raise Refused(f"output {i} {list(y)} does not match input {list(x)} outside axis {axis}")
        slices.append(AxisSlice(outer, x[axis], y[axis], inner, start, 1))
        start += y[axis]
    if start != x[axis]:
        raise Refused(f"outputs add up to {start} along axis {axis}, input has {x[axis]}")
    return slices


def _split_plan(node: NodeInfo) -> list[Launch]:
    """One slice_axis per output (independent launches)."""
    return [_axis_slice_launch(s, i) for i, s in enumerate(split_slices(node))]


def onnx_slice_range(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """(first index, count) of an ONNX Slice on one axis, with its clamping rules."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        return start, max(0, cdiv(end - start, step))
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return start, max(0, cdiv(start - end, -step))


def slice_args(node: NodeInfo) -> tuple[tuple[int, ...], list[int], list[int], list[int], list[int]]:
    """(input shape, starts, ends, axes, steps) of a Slice node with constant attributes."""
    require_present(node, 1)
    starts, ends = node.attr("starts"), node.attr("ends")
    if starts is None or ends is None:
        raise Refused("starts and ends must be given as constant attributes")
    starts, ends = [int(v) for v in starts], [int(v) for v in ends]
    axes = [int(v) for v in node.attr("axes", range(len(starts)))]
    steps = [int(v) for v in node.attr("steps", [1] * len(starts))]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise Refused("starts, ends, axes and steps differ in length")
    return node.inputs[0].shape, starts, ends, axes, steps


def slice_plan(node: NodeInfo) -> AxisSlice:
    """The single strided axis of a Slice node (attrs starts/ends/axes/steps)."""
    x, starts, ends, axes, steps = slice_args(node)
    moved = []
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = norm_axis(axis, len(x))
        if step == 0:
            raise Refused("step 0 is not allowed")
        first, count = onnx_slice_range(x[axis], start, end, step)
        if (first, count, step) != (0, x[axis], 1):
            moved.append((axis, first, count, step))
    if len(moved) > 1:
        raise Refused(f"slices {len(moved)} axes; the kernel slices one")
    axis, first, count, step = moved[0] if moved else (0, 0, x[0] if x else 1, 1)
    expect = tuple(count if k == axis else d for k, d in enumerate(x))
    if node.outputs[0].shape != expect:
        raise Refused(f"output {list(node.outputs[0].shape)} is not the sliced shape {list(expect)}")
    return AxisSlice(prod(x[:axis]), x[axis] if x else 1, count, prod(x[axis + 1:]), first, step)


def strided_view(node: NodeInfo) -> tuple[int, list[int], list[int]]:
    """(base offset, output dims, signed input strides) of a Slice over any axes, merged to at most 4 dims."""
    x, starts, ends, axes, steps = slice_args(node)
    lens, stride = list(x), contiguous_strides(x)
    eff, base = list(stride), 0
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = norm_axis(axis, len(x))
        if step == 0:
            raise Refused("step 0 is not allowed")
        first, lens[axis] = onnx_slice_range(x[axis], start, end, step)
        base += first * stride[axis]
        eff[axis] = stride[axis] * step
    if node.outputs[0].shape != tuple(lens):
        raise Refused(f"output {list(node.outputs[0].shape)} is not the sliced shape {lens}")
    dims, strides = merged_view(list(zip(lens, eff)))
    return base, dims, strides


def _strided_plan(node: NodeInfo) -> list[Launch]:
    """strided_copy, one thread per output element."""
    base, dims, strides = strided_view(node)
    n = node.outputs[0].numel
    return [linear_launch("strided_copy", [BLOCK], n, BLOCK,
                          [In(0), Out(0), i32(n), Scalar("int64", base)] + [i32(v) for v in dims[1:] + strides], 0,
                          _copy_bytes(n))]


# ---- Pad -------------------------------------------------------------------------------------------------------
PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}


def pad_view(node: NodeInfo) -> tuple[list[int], list[int], list[int], list[int]]:
    """Output dims, input dims, input strides and leading pads, each padded in front to 4 dims."""
    require_present(node, 1)
    if str(node.attr("mode", "constant")) not in PAD_MODES:
        raise Refused(f"mode {node.attr('mode')} is not one of {', '.join(PAD_MODES)}")
    x = node.inputs[0].shape
    pads = node.attr("pads")
    if pads is None:
        raise Refused("pads must be a constant")
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    axes = [int(a) % max(len(x), 1) for a in node.attr("axes", range(len(x)))]
    if len(pads) != 2 * len(axes):
        raise Refused(f"{len(pads)} pads for {len(axes)} axes")
    begin = [0] * len(x)
    for k, a in enumerate(axes):
        begin[a] = pads[k]
    if len(x) > MAX_VIEW_RANK:
        raise Refused(f"rank {len(x)} is more than the kernel's {MAX_VIEW_RANK}")
    if str(node.attr("mode", "constant")) != "constant" and min(x) == 0:
        raise Refused("an empty axis cannot be padded by reflection, edge or wrap")
    fill = MAX_VIEW_RANK - len(x)
    return ([1] * fill + list(node.outputs[0].shape), [1] * fill + list(x), [0] * fill + contiguous_strides(x),
            [0] * fill + begin)


def _pad_plan(node: NodeInfo) -> list[Launch]:
    """pad_nd<MODE>, one thread per output element; the constant value (default 0) as an argument."""
    out, ins, strides, begin = pad_view(node)
    n = node.outputs[0].numel
    value = float(np.asarray(node.attr("constant_value", 0.0)).reshape(-1)[0]) if node.attr("constant_value") \
        is not None else 0.0
    return [linear_launch("pad_nd", [PAD_MODES[str(node.attr("mode", "constant"))], BLOCK], n, BLOCK,
                          [In(0), Out(0), i32(n)] + [i32(v) for v in out[1:] + ins + strides + begin] + [f32(value)],
                          0, _copy_bytes(n))]


# ---- Transpose --------------------------------------------------------------------------------------------
def transpose_view(node: NodeInfo) -> tuple[list[int], list[int]]:
    """The transpose reduced to its smallest form: merged input dims and their permutation."""
    require_present(node, 1)
    x = node.inputs[0].shape
    perm = [int(p) for p in node.attr("perm", range(len(x) - 1, -1, -1))]
    if sorted(perm) != list(range(len(x))):
        raise Refused(f"perm {perm} is not a permutation of {len(x)} axes")
    if node.outputs[0].shape != tuple(x[p] for p in perm):
        raise Refused(f"output {list(node.outputs[0].shape)} is not the input permuted by {perm}")
    kept = [p for p in perm if x[p] != 1]
    groups: list[list[int]] = []
    for p in kept:
        if groups and p == groups[-1][-1] + 1:
            groups[-1].append(p)
        else:
            groups.append([p])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])  # merged input dims in input order
    dims = [prod(x[p] for p in groups[g]) for g in order]
    rank_of = {g: r for r, g in enumerate(order)}
    return dims, [rank_of[g] for g in range(len(groups))]


def _transpose_nd_condition(node: NodeInfo) -> str | None:
    """Any permutation that merges down to 4 dims or fewer."""
    view = transpose_view(node)
    return None if len(view[0]) <= MAX_TRANSPOSE_RANK else f"needs {len(view[0])} dims after merging (> 4)"


def _transpose_nd_plan(node: NodeInfo) -> list[Launch]:
    """transpose_nd over the merged view, padded to 4 output dims."""
    dims, perm = transpose_view(node)
    strides = contiguous_strides(dims)
    out_dims = [dims[p] for p in perm]
    out_strides = [strides[p] for p in perm]
    pad = MAX_TRANSPOSE_RANK - len(out_dims)
    out_dims, out_strides = [1] * pad + out_dims, [0] * pad + out_strides
    n = node.outputs[0].numel
    return [linear_launch("transpose_nd", [BLOCK], n, BLOCK,
                          [In(0), Out(0), i32(n)] + [i32(v) for v in out_dims[1:] + out_strides], 0,
                          _copy_bytes(n))]


def tiled_view(node: NodeInfo) -> tuple[int, int, int]:
    """(batch, rows, cols) when the transpose only swaps the two innermost (merged) dims."""
    dims, perm = transpose_view(node)
    if perm == [1, 0]:
        batch, rows, cols = 1, dims[0], dims[1]
    elif perm == [0, 2, 1]:
        batch, rows, cols = dims
    else:
        raise Refused(f"not a swap of the last two dims (merged perm {perm})")
    if batch > MAX_GRID_YZ or cdiv(rows, TILE) > MAX_GRID_YZ:
        raise Refused("grid too large")
    return batch, rows, cols


def _tiled_plan(node: NodeInfo) -> list[Launch]:
    """transpose_tiled: a 32 x 32 tile per rTask through shared memory."""
    batch, rows, cols = tiled_view(node)
    return [Launch("transpose_tiled", [TILE, TILE_ROWS], (cdiv(cols, TILE), cdiv(rows, TILE), batch),
                   (TILE, TILE_ROWS, 1), 0, [In(0), Out(0), i32(rows), i32(cols)], 0,
                   _copy_bytes(node.outputs[0].numel))]


def _torch_concat(T, a: dict, k: list, nout: int) -> Callable:
    """Concatenation along the axis."""
    return lambda *xs: T.cat(xs, dim=a["axis"])


def _torch_split(T, a: dict, k: list, nout: int) -> Callable:
    """Split by constant sizes, num_outputs (opset 18) or evenly by the number of outputs."""
    axis, sizes = a.get("axis", 0), const_ints(k, 1)

    def f(x, *rest):
        n = x.shape[axis]
        if sizes is not None:
            parts = sizes
        else:
            step = -(-n // a.get("num_outputs", nout))
            parts = [min(step, n - i) for i in range(0, n, step)]
        return tuple(T.split(x, parts, dim=axis))
    return f


def _torch_slice(T, a: dict, k: list, nout: int) -> Callable:
    """Slice with constant starts/ends/axes/steps (positive steps)."""
    starts, ends = need_const(k, 1, "Slice"), need_const(k, 2, "Slice")
    axes = const_ints(k, 3, list(range(len(starts))))
    steps = const_ints(k, 4, [1] * len(starts))
    if any(s <= 0 for s in steps):
        raise ValueError("Slice: only positive steps are supported by the torch interpreter")

    def f(x, *rest):
        index = [slice(None)] * x.dim()
        for s, e, ax, st in zip(starts, ends, axes, steps):
            index[ax] = slice(s, e, st)
        return x[tuple(index)]
    return f


def _torch_transpose(T, a: dict, k: list, nout: int) -> Callable:
    """Permutation of the axes (reversed by default)."""
    return lambda x: x.permute(a.get("perm", list(range(x.dim()))[::-1]))


# ---- Gather, GatherElements, Tile, CumSum ---------------------------------------------------------------------
def _require_int64_indices(node: NodeInfo) -> None:
    """Float data and int64 indices, both present (Refused otherwise)."""
    require_present(node, 2)
    if node.inputs[1].dtype != "int64":
        raise Refused(f"indices are {node.inputs[1].dtype}, the kernel reads int64")


def gather_view(node: NodeInfo) -> tuple[int, int, int, int]:
    """(outer, len, n_idx, inner) of a Gather node."""
    _require_int64_indices(node)
    x, ind = node.inputs[0].shape, node.inputs[1].shape
    axis = norm_axis(int(node.attr("axis", 0)), len(x))
    if node.outputs[0].shape != x[:axis] + ind + x[axis + 1:]:
        raise Refused(f"output {list(node.outputs[0].shape)} is not data[:axis] + indices + data[axis+1:]")
    return prod(x[:axis]), x[axis], prod(ind), prod(x[axis + 1:])


def _gather_plan(node: NodeInfo) -> list[Launch]:
    """gather_axis, one thread per output element."""
    outer, length, n_idx, inner = gather_view(node)
    n = outer * n_idx * inner
    x = node.inputs[0]
    return [linear_launch("gather_axis", [BLOCK] + _element_arg(x), n, BLOCK,
                          [In(0), In(1), Out(0), i32(outer), i32(length), i32(n_idx), i32(inner)], 0,
                          _copy_bytes(n, x.dtype) + 8 * n_idx)]


def padded4(values: list[int], fill: int) -> list[int]:
    """A rank <= 4 list padded in front to 4 entries."""
    if len(values) > MAX_TRANSPOSE_RANK:
        raise Refused(f"rank {len(values)} is more than the kernel's {MAX_TRANSPOSE_RANK}")
    return [fill] * (MAX_TRANSPOSE_RANK - len(values)) + list(values)


def gather_elements_view(node: NodeInfo) -> tuple[list[int], list[int], int, int]:
    """Index dims and data strides (padded to 4), the padded axis and its length."""
    _require_int64_indices(node)
    x, ind = node.inputs[0].shape, node.inputs[1].shape
    axis = norm_axis(int(node.attr("axis", 0)), len(x))
    if len(ind) != len(x) or node.outputs[0].shape != ind:
        raise Refused(f"indices {list(ind)} and output must have the data's rank {len(x)}")
    dims, strides = padded4(list(ind), 1), padded4(contiguous_strides(x), 0)
    return dims, strides, axis + MAX_TRANSPOSE_RANK - len(x), x[axis]


def _gather_elements_reference(node: NodeInfo, inputs: list) -> list[np.ndarray]:
    """GatherElements in numpy (take_along_axis, negative indices counted from the end): onnx's evaluator
    (1.23) picks with np.choose, which takes at most 64 choices, and its fallback returns wrong shapes past that, so
    an exported model's GatherElements over 512 positions (BERT's token types) had no truth and no folding."""
    data, index = inputs[0], np.asarray(inputs[1]).astype(np.int64)
    axis = norm_axis(int(node.attrs.get("axis", 0)), data.ndim)
    return [np.take_along_axis(data, np.where(index < 0, index + data.shape[axis], index), axis)]


def _gather_elements_plan(node: NodeInfo) -> list[Launch]:
    """gather_elements, one thread per index."""
    dims, strides, axis, length = gather_elements_view(node)
    n, x = node.outputs[0].numel, node.inputs[0]
    return [linear_launch("gather_elements", [BLOCK] + _element_arg(x), n, BLOCK,
                          [In(0), In(1), Out(0), i32(n)] + [i32(v) for v in dims[1:] + strides] + [i32(axis),
                                                                                                  i32(length)],
                          0, _copy_bytes(n, x.dtype) + 8 * n)]


def tile_view(node: NodeInfo) -> tuple[list[int], list[int], list[int]]:
    """Output dims, input dims and input strides (each padded to 4) of a Tile node."""
    require_present(node, 1)
    x, y = node.inputs[0].shape, node.outputs[0].shape
    if len(x) != len(y) or any(b % a for a, b in zip(x, y)):
        raise Refused(f"output {list(y)} is not a tiling of {list(x)}")
    return padded4(list(y), 1), padded4(list(x), 1), padded4(contiguous_strides(x), 0)


def _tile_plan(node: NodeInfo) -> list[Launch]:
    """tile_nd, one thread per output element."""
    dims, ins, strides = tile_view(node)
    n = node.outputs[0].numel
    return [linear_launch("tile_nd", [BLOCK], n, BLOCK,
                          [In(0), Out(0), i32(n)] + [i32(v) for v in dims[1:] + ins + strides], 0, _copy_bytes(n))]


def cumsum_view(node: NodeInfo) -> tuple[int, int, int]:
    """[outer, len, inner] around CumSum's constant axis."""
    require_present(node, 1)
    if "axis" not in node.attrs:
        raise Refused("the axis input must be a constant")
    x = node.inputs[0].shape
    axis = norm_axis(int(np.asarray(node.attrs["axis"]).reshape(-1)[0]), len(x))
    return prod(x[:axis]), x[axis], prod(x[axis + 1:])


def _cumsum_plan(node: NodeInfo) -> list[Launch]:
    """cumsum_axis, a thread per (outer, inner) pair."""
    outer, length, inner = cumsum_view(node)
    x = node.inputs[0]
    return [linear_launch("cumsum_axis", [BLOCK] + _element_arg(x), outer * inner, BLOCK,
                          [In(0), Out(0), i32(outer), i32(length), i32(inner), i32(node.attr("exclusive", 0)),
                           i32(node.attr("reverse", 0))], outer * length * inner,
                          _copy_bytes(outer * length * inner, x.dtype))]


def _element_arg(x: TensorInfo) -> list[str]:
    """The element-type template argument of a copy kernel (spelled even for float: an instantiation is found in
    ptxas' output by its full argument list)."""
    return [ELEMENT_TYPES[x.dtype]]


def _torch_gather(T, a: dict, k: list, nout: int) -> Callable:
    """Gather along one axis, negative indices counted from the end."""
    def f(x, i):
        axis = a.get("axis", 0) % x.dim()
        idx = i % x.shape[axis]
        return T.index_select(x, axis, idx.reshape(-1)).reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])
    return f


# ---- Resize ------------------------------------------------------------------------------------------------------
RESIZE_MODES = {"nearest": 0, "linear": 1, "cubic": 2}
RESIZE_COORDS = {"half_pixel": 0, "asymmetric": 1, "align_corners": 2, "pytorch_half_pixel": 3,
                 "tf_crop_and_resize": 4, "half_pixel_symmetric": 5}
NEAREST_MODES = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}


@dataclass(frozen=True)
class ResizeView:
    """A Resize as resize_2d runs it: [outer, ih, iw] -> [outer, oh, ow], per-axis scales and roi, modes."""

    outer: int
    ih: int
    iw: int
    oh: int
    ow: int
    scale: tuple[float, float]
    roi: tuple[float, float, float, float]   # h start, h end, w start, w end
    template: tuple[int, int, int]             # MODE, COORD, NEAREST


MAX_RESIZE_TAPS = 16  # RESIZE_MAX_TAPS of layout.cu


def resize_taps(mode: str, scale: float) -> int:
    """Taps per axis of an antialiased linear/cubic filter at this scale (as layout.cu's resize_taps counts)."""
    s = min(scale, 1.0)
    start = math.floor(-(1.0 if mode == "linear" else 2.0) / s) + 1
    return 2 - 2 * start


def _const_floats(node: NodeInfo, key: str) -> list[float]:
    """A constant float input given as an attribute ([] when absent or empty)."""
    value = node.attr(key)
    return [] if value is None else [float(v) for v in np.asarray(value, dtype=np.float64).reshape(-1)]


def _resize_scales(node: NodeInfo, shape: tuple[int, ...], axes: list[int]) -> list[float]:
    """The scale of every axis: from scales, or from sizes (keep_aspect_ratio_policy applied)."""
    scales = [1.0] * len(shape)
    given, sizes = _const_floats(node, "scales"), _const_floats(node, "sizes")
    if given:
        if len(given) != len(axes):
            raise Refused(f"{len(given)} scales for {len(axes)} axes")
        for a, v in zip(axes, given):
            scales[a] = v
        return scales
    if len(sizes) != len(axes):
        raise Refused("scales or sizes must be constants with one entry per axis")
    ratios = [v / shape[a] for a, v in zip(axes, sizes)]
    policy = str(node.attr("keep_aspect_ratio_policy", "stretch"))
    if policy != "stretch":
        ratios = [min(ratios) if policy == "not_larger" else max(ratios)] * len(axes)
    for a, v in zip(axes, ratios):
        scales[a] = v
    return scales


def resize_view(node: NodeInfo) -> ResizeView:
    """The resize_2d view of a Resize node (opset >= 11)."""
    require_present(node, 1)
    if node.opset < 11:
        raise Refused("Resize before opset 11 is not supported")
    mode = str(node.attr("mode", "nearest"))
    coord = str(node.attr("coordinate_transformation_mode", "half_pixel"))
    nearest = str(node.attr("nearest_mode", "round_prefer_floor"))
    for value, table in ((mode, RESIZE_MODES), (coord, RESIZE_COORDS), (nearest, NEAREST_MODES)):
        if value not in table:
            raise Refused(f"{value} is not one of {', '.join(table)}")
    x, y = node.inputs[0].shape, node.outputs[0].shape
    axes = [int(a) % len(x) for a in node.attr("axes", range(len(x)))]
    scales = _resize_scales(node, x, axes)
    antialias = int(node.attr("antialias", 0)) and mode != "nearest"
    if antialias and min(resize_taps(mode, s) for s in scales) > MAX_RESIZE_TAPS:
        raise Refused(f"antialiased downsampling by {min(scales):g} needs more than {MAX_RESIZE_TAPS} taps per axis")
    roi_in = _const_floats(node, "roi") if coord == "tf_crop_and_resize" else []
    roi = [(0.0, 1.0)] * len(x)
    for k, a in enumerate(axes if roi_in else []):
        roi[a] = (roi_in[k], roi_in[k + len(axes)])
    lead = max(len(x) - 2, 0)
    if any(x[a] != y[a] or scales[a] != 1.0 or roi[a] != (0.0, 1.0) for a in range(lead)):
        raise Refused("only the last two axes may be resized")
    (ih, oh, sh, rh), (iw, ow, sw, rw) = [(1, 1, 1.0, (0.0, 1.0))] * (2 - min(len(x), 2)) + \
        [(x[a], y[a], scales[a], roi[a]) for a in range(lead, len(x))]
    return ResizeView(prod(x[:lead]), ih, iw, oh, ow, (sh, sw), (*rh, *rw),
                      (RESIZE_MODES[mode], RESIZE_COORDS[coord], NEAREST_MODES[nearest]))


def _resize_plan(node: NodeInfo) -> list[Launch]:
    """resize_2d<MODE, COORD, NEAREST>, one thread per output element."""
    v = resize_view(node)
    n = v.outer * v.oh * v.ow
    args = [In(0), Out(0)] + [i32(d) for d in (v.outer, v.ih, v.iw, v.oh, v.ow)] + \
        [Scalar("float64", x) for x in (*v.scale, *v.roi)] + \
        [f32(node.attr("cubic_coeff_a", -0.75)), i32(node.attr("exclude_outside", 0)),
         i32(node.attr("antialias", 0)), f32(node.attr("extrapolation_value", 0.0))]
    taps = (1, 4, 16)[v.template[0]]
    return [linear_launch("resize_2d", [*v.template, BLOCK], n, BLOCK, args, 2 * taps * n,
                          4 * (node.inputs[0].numel + n))]


OPS = [
    OpDef("Resize", (Binding("Resize", "2d", SOURCE, "only", condition_of(resize_view), _resize_plan,
                             ("resize_2d",), float_inputs=1),),
          (Shape(((1, 2, 4, 5),), {"scales": [1.0, 1.0, 2.0, 1.5]}, opset=19),
           Shape(((2, 3, 6, 8),), {"sizes": [2, 3, 4, 5], "mode": "linear"}, opset=19),
           Shape(((1, 1, 5, 4),), {"scales": [1.0, 1.0, 0.6, 1.75], "mode": "cubic",
                                   "coordinate_transformation_mode": "align_corners"}, opset=19),
           Shape(((3, 7, 6),), {"sizes": [3, 9, 4], "mode": "linear",
                                "coordinate_transformation_mode": "pytorch_half_pixel"}, opset=19),
           Shape(((1, 1, 4, 4),), {"roi": [0.0, 0.0, 0.4, 0.3, 1.0, 1.0, 1.3, 0.8], "sizes": [1, 1, 3, 5],
                                   "mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
                                   "extrapolation_value": 2.0}, opset=19),
           Shape(((1, 3, 4, 6),), {"scales": [2.0, 3.0], "axes": [2, 3], "nearest_mode": "ceil",
                                   "coordinate_transformation_mode": "asymmetric"}, opset=19),
           Shape(((1, 2, 9, 8),), {"sizes": [1, 2, 4, 3], "mode": "linear", "antialias": 1}, opset=19),
           Shape(((1, 1, 8, 7),), {"scales": [1.0, 1.0, 0.5, 0.8], "mode": "cubic", "antialias": 1,
                                   "exclude_outside": 1}, opset=19)),
          constant_inputs=("roi", "scales", "sizes")),
    OpDef("Gather", (Binding("Gather", "axis", SOURCE, "only", condition_of(gather_view), _gather_plan,
                             ("gather_axis",), float_inputs=1, dtypes=tuple(ELEMENT_TYPES)),),
          (Shape(((5, 4), (2, 3)), {"axis": 0}, dtypes={1: "int64"}, ranges={1: (-5, 5)}),
           Shape(((3, 6, 2), (4,)), {"axis": 1}, dtypes={1: "int64"}, ranges={1: (0, 6)}),
           Shape(((3, 7), ()), {"axis": -1}, dtypes={1: "int64"}, ranges={1: (-7, 7)}),
           # an attention mask's Gather (bool), and integer data
           Shape(((16, 1), (1, 1, 1, 16)), {"axis": 0}, dtypes={0: "bool", 1: "int64"}, ranges={1: (0, 16)}),
           Shape(((4, 9), (5,)), {"axis": 1}, dtypes={0: "int64", 1: "int64"}, ranges={0: (-99, 99), 1: (-9, 9)}),
           Shape(((6, 3), (2,)), {"axis": 0}, dtypes={0: "int32", 1: "int64"}, ranges={0: (-99, 99), 1: (0, 6)})),
          torch=_torch_gather),
    OpDef("GatherElements", (Binding("GatherElements", "direct", SOURCE, "only",
                                     condition_of(gather_elements_view), _gather_elements_plan,
                                     ("gather_elements",), float_inputs=1, dtypes=tuple(ELEMENT_TYPES)),),
          (Shape(((3, 4), (3, 2)), {"axis": 1}, dtypes={1: "int64"}, ranges={1: (-4, 4)}),
           Shape(((4, 3, 2), (2, 3, 2)), {"axis": 0}, dtypes={1: "int64"}, ranges={1: (0, 4)}),
           Shape(((1, 100), (1, 40)), {"axis": -1}, dtypes={1: "int64"}, ranges={1: (-100, 100)}),
           Shape(((1, 512), (1, 16)), {"axis": 1}, dtypes={0: "int64", 1: "int64"},
                 ranges={0: (0, 2), 1: (0, 512)})),
          reference=_gather_elements_reference,
          torch=lambda T, a, k, n: (lambda x, i: T.gather(x, a.get("axis", 0), i % x.shape[a.get("axis", 0)]))),
    OpDef("Tile", (Binding("Tile", "nd", SOURCE, "only", condition_of(tile_view), _tile_plan, ("tile_nd",),
                           float_inputs=1),),
          (Shape(((2, 3),), {"repeats": [2, 3]}), Shape(((2, 1, 3),), {"repeats": [1, 4, 2]}),
           Shape(((5,),), {"repeats": [3]})),
          constant_inputs=("repeats",), torch=lambda T, a, k, n: (lambda x, *r: x.repeat(*k[1]))),
    OpDef("CumSum", (Binding("CumSum", "axis", SOURCE, "only", condition_of(cumsum_view), _cumsum_plan,
                             ("cumsum_axis",), float_inputs=1, dtypes=("float32", "int64", "int32")),),
          (Shape(((4, 6),), {"axis": 1}), Shape(((3, 5, 2),), {"axis": 1, "exclusive": 1, "reverse": 1}),
           Shape(((7,),), {"axis": 0, "reverse": 1}),
           Shape(((1, 16),), {"axis": 1}, dtypes={0: "int32"}, ranges={0: (0, 2)}),
           Shape(((3, 5),), {"axis": 0, "exclusive": 1}, dtypes={0: "int64"}, ranges={0: (-99, 99)})),
          constant_inputs=("axis",)),
    OpDef("Concat", (Binding("Concat", "copy", SOURCE, "only", condition_of(concat_axis), _concat_plan,
                             ("concat_copy",),
                             note="one launch per input; the launches write disjoint parts of the output and may "
                                  "run concurrently"),),
          (Shape(((2, 3, 4), (2, 5, 4)), {"axis": 1}), Shape(((2, 3), (2, 1), (2, 4)), {"axis": -1}),
           Shape(((1, 6), (3, 6)), {"axis": 0}), Shape(((1, 32, 8, 8), (1, 16, 8, 8)), {"axis": 1})),
          torch=_torch_concat),
    OpDef("Split", (Binding("Split", "copy", SOURCE, "only", condition_of(split_slices), _split_plan, ("slice_axis",),
                            float_inputs=1, note="one launch per output, independent; split sizes come from the "
                                                 "output shapes"),),
          (Shape(((6, 10),), {"axis": 0, "split": [2, 4]}, outputs=2), Shape(((2, 9, 3),), {"axis": 1}, outputs=3,
                                                                             opset=17),
           Shape(((1, 48, 8, 8),), {"axis": 1, "split": [16, 32]}, outputs=2)),
          constant_inputs=("split",), torch=_torch_split),
    OpDef("Slice", (Binding("Slice", "copy", SOURCE, "fast", condition_of(slice_plan),
                            lambda node: [_axis_slice_launch(slice_plan(node), 0)], ("slice_axis",), float_inputs=1,
                            note="starts/ends/axes/steps are read from attrs of those names"),
                    Binding("Slice", "strided", SOURCE, "efficient", condition_of(strided_view),
                            _strided_plan, ("strided_copy",), float_inputs=1)),
          (Shape(((10, 8),), {"starts": [1], "ends": [9], "axes": [0], "steps": [2]}),
           Shape(((4, 9),), {"starts": [-1], "ends": [-100], "axes": [1], "steps": [-2]}),
           Shape(((3, 10, 4),), {"starts": [0, 2], "ends": [3, 1000], "axes": [0, 1]}),
           Shape(((4, 64),), {"starts": [0], "ends": [32], "axes": [1]}),
           Shape(((6, 5, 4),), {"starts": [5, 0, -1], "ends": [0, 5, -5], "axes": [0, 1, 2], "steps": [-2, 2, -1]}),
           Shape(((3, 4, 5, 2, 3),), {"starts": [1, 1], "ends": [3, 4], "axes": [1, 3]})),
          constant_inputs=("starts", "ends", "axes", "steps"), torch=_torch_slice),
    OpDef("Pad", (Binding("Pad", "nd", SOURCE, "only", condition_of(pad_view), _pad_plan, ("pad_nd",),
                          float_inputs=1),),
          (Shape(((2, 3),), {"pads": [1, 0, 2, 3]}), Shape(((1, 2, 4, 5),), {"pads": [0, 0, 2, 1, 0, 0, 1, 3],
                                                                              "constant_value": 1.5}),
           Shape(((3, 4, 5),), {"pads": [1, 3, 2, 0, 2, 4], "mode": "reflect"}),
           Shape(((2, 4, 3),), {"pads": [0, 2, 5, 1, 1, 0], "mode": "edge"}),
           Shape(((2, 3, 4),), {"pads": [1, 4, 2, 0, 5, 1], "mode": "wrap"}, opset=19),
           Shape(((4, 6),), {"pads": [0, 1, 3, 2], "mode": "reflect"})),
          constant_inputs=("pads", "constant_value", "axes")),
    OpDef("Transpose", (Binding("Transpose", "nd", SOURCE, "efficient", _transpose_nd_condition, _transpose_nd_plan,
                                ("transpose_nd",)),
                        Binding("Transpose", "tiled", SOURCE, "fast", condition_of(tiled_view), _tiled_plan,
                                ("transpose_tiled",))),
          (Shape(((3, 5),), {"perm": [1, 0]}), Shape(((2, 33, 40),), {"perm": [0, 2, 1]}),
           Shape(((2, 3, 4, 5),), {"perm": [0, 2, 3, 1]}), Shape(((2, 3, 4, 5),), {"perm": [3, 1, 0, 2]}),
           Shape(((2, 3, 1, 4, 5),), {"perm": [4, 2, 0, 3, 1]}), Shape(((128, 256),), {"perm": [1, 0]})),
          torch=_torch_transpose),
]
