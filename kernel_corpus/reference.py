"""numpy references of the ONNX operators the corpus implements, computed in float64.

They follow the ONNX operator specs directly (no kernel geometry is shared with the bindings), so the kernel
tests compare the legacy kernels against an independent truth; a few are cross-checked with onnxruntime.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from kernel_corpus.bindings import NodeInfo

Arrays = list


def run_reference(node: NodeInfo, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    """Outputs of the node for these inputs (absent inputs are None)."""
    if node.op_type not in REFERENCES:
        raise KeyError(f"no numpy reference for op type {node.op_type}")
    as64 = [None if x is None else np.asarray(x, dtype=np.float64) for x in inputs]
    return REFERENCES[node.op_type](node, as64)


def _opt(inputs: Arrays, i: int) -> np.ndarray | None:
    """Optional input i."""
    return inputs[i] if i < len(inputs) else None


# ---- linear algebra ------------------------------------------------------------------------------------------
def matmul(node: NodeInfo, inputs: Arrays) -> Arrays:
    """numpy.matmul semantics."""
    return [np.matmul(inputs[0], inputs[1])]


def fused_matmul(node: NodeInfo, inputs: Arrays) -> Arrays:
    """alpha * (A @ B) + C (ours: a MatMul with the Mul/Div-by-scalar and Add that followed it)."""
    y = node.attr("alpha", 1.0) * np.matmul(inputs[0], inputs[1])
    c = _opt(inputs, 2)
    return [y if c is None else y + c]


def gemm(node: NodeInfo, inputs: Arrays) -> Arrays:
    """alpha * A' B' + beta * C."""
    a = inputs[0].T if node.attr("transA", 0) else inputs[0]
    b = inputs[1].T if node.attr("transB", 0) else inputs[1]
    y = node.attr("alpha", 1.0) * (a @ b)
    c = _opt(inputs, 2)
    return [y if c is None else y + node.attr("beta", 1.0) * c]


# ---- windows ---------------------------------------------------------------------------------------------------
def _window_attrs(node: NodeInfo, x: np.ndarray, kernel: list[int]) -> dict:
    """strides, dilations and explicit (begin, end) pads per spatial dim, auto_pad resolved."""
    nd = len(kernel)
    strides = list(node.attr("strides", [1] * nd))
    dil = list(node.attr("dilations", [1] * nd))
    pads = list(node.attr("pads", [0] * 2 * nd))
    auto = node.attr("auto_pad", "NOTSET")
    begin, end = pads[:nd], pads[nd:]
    if auto == "VALID":
        begin, end = [0] * nd, [0] * nd
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        sizes = x.shape[2:]
        need = [max(0, (math.ceil(sizes[i] / strides[i]) - 1) * strides[i] + dil[i] * (kernel[i] - 1) + 1 - sizes[i])
                for i in range(nd)]
        lo = [n // 2 if auto == "SAME_UPPER" else n - n // 2 for n in need]
        begin, end = lo, [n - b for n, b in zip(need, lo)]
    return {"strides": strides, "dil": dil, "begin": begin, "end": end}


def _out_len(size: int, k: int, s: int, d: int, b: int, e: int, ceil_mode: bool) -> int:
    """Output length of one spatial dim; in ceil_mode a window may not start inside the trailing pad."""
    span = size + b + e - d * (k - 1) - 1
    n = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (n - 1) * s >= size + b:
        n -= 1
    return n


def _taps(xp: np.ndarray, kernel: list[int], w: dict, out: list[int]):
    """Yield (tap index, strided view [N, C, *out]) for every kernel tap of a padded input."""
    for tap in np.ndindex(*kernel):
        idx = tuple(slice(t * d, t * d + s * (o - 1) + 1, s) for t, d, s, o in zip(tap, w["dil"], w["strides"], out))
        yield tap, xp[(slice(None), slice(None)) + idx]


def conv(node: NodeInfo, inputs: Arrays) -> Arrays:
    """ONNX Conv (any spatial rank) by summing one einsum per kernel tap and group."""
    x, wt, b = inputs[0], inputs[1], _opt(inputs, 2)
    kernel = list(wt.shape[2:])
    w = _window_attrs(node, x, kernel)
    group = node.attr("group", 1)
    out = [_out_len(x.shape[2 + i], kernel[i], w["strides"][i], w["dil"][i], w["begin"][i], w["end"][i], False)
           for i in range(len(kernel))]
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(w["begin"], w["end"])))
    cg, mg = x.shape[1] // group, wt.shape[0] // group
    y = np.zeros((x.shape[0], wt.shape[0], *out))
    for tap, view in _taps(xp, kernel, w, out):
        for g in range(group):
            filt = wt[(slice(g * mg, (g + 1) * mg), slice(None)) + tuple(tap)]
            y[:, g * mg:(g + 1) * mg] += np.einsum("nc...,mc->nm...", view[:, g * cg:(g + 1) * cg], filt)
    if b is not None:
        y += b.reshape((1, -1) + (1,) * len(kernel))
    return [y]


def _pool(node: NodeInfo, x: np.ndarray, average: bool) -> np.ndarray:
    """MaxPool / AveragePool over explicitly padded copies of the input and of its validity masks."""
    kernel = list(node.attr("kernel_shape"))
    w = _window_attrs(node, x, kernel)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    sizes = x.shape[2:]
    out = [_out_len(sizes[i], kernel[i], w["strides"][i], w["dil"][i], w["begin"][i], w["end"][i], ceil_mode)
           for i in range(len(kernel))]
    reach = [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(out, w["strides"], w["dil"], kernel)]
    extra = [max(0, r - (n + b + e)) for r, n, b, e in zip(reach, sizes, w["begin"], w["end"])]
    spatial_pad = [(b, e + x_) for b, e, x_ in zip(w["begin"], w["end"], extra)]
    pad = [(0, 0), (0, 0)] + spatial_pad
    fill = 0.0 if average else -np.inf
    xp = np.pad(x, pad, constant_values=fill)
    inside = np.pad(np.ones((1, 1) + sizes), pad)
    padded_area = np.pad(np.ones((1, 1) + tuple(n + b + e for n, b, e in zip(sizes, w["begin"], w["end"]))),
                         [(0, 0), (0, 0)] + [(0, x_) for x_ in extra])
    counts = padded_area if node.attr("count_include_pad", 0) else inside
    acc = np.zeros(x.shape[:2] + tuple(out)) if average else np.full(x.shape[:2] + tuple(out), -np.inf)
    n = np.zeros((1, 1) + tuple(out))
    taps_x, taps_n = _taps(xp, kernel, w, out), _taps(counts, kernel, w, out)
    for (_, view), (_, count) in zip(taps_x, taps_n):
        acc = acc + view if average else np.maximum(acc, view)
        n = n + count
    return acc / n if average else acc


def maxpool(node: NodeInfo, inputs: Arrays) -> Arrays:
    """ONNX MaxPool (Y only)."""
    return [_pool(node, inputs[0], average=False)]


def averagepool(node: NodeInfo, inputs: Arrays) -> Arrays:
    """ONNX AveragePool."""
    return [_pool(node, inputs[0], average=True)]


def global_average_pool(node: NodeInfo, inputs: Arrays) -> Arrays:
    """Mean over every spatial axis, kept as size 1."""
    x = inputs[0]
    return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)]


# ---- pointwise -------------------------------------------------------------------------------------------------
def _channel(v: np.ndarray, rank: int) -> np.ndarray:
    """A [C] vector shaped to broadcast over [N, C, ...]."""
    return v.reshape((1, -1) + (1,) * (rank - 2))


def batchnorm(node: NodeInfo, inputs: Arrays) -> Arrays:
    """Inference BatchNormalization."""
    x, scale, bias, mean, var = inputs[:5]
    r = x.ndim
    eps = node.attr("epsilon", 1e-5)
    return [(x - _channel(mean, r)) / np.sqrt(_channel(var, r) + eps) * _channel(scale, r) + _channel(bias, r)]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function."""
    return 1.0 / (1.0 + np.exp(-x))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(node: NodeInfo, inputs: Arrays) -> Arrays:
    """Gelu (opset 20): erf form, or the tanh approximation."""
    x = inputs[0]
    if node.attr("approximate", "none") == "tanh":
        return [0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))]
    return [0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))]


def lstm_cell_pointwise(node: NodeInfo, inputs: Arrays) -> Arrays:
    """gates [B, 4H] in ONNX order i, o, f, c; returns h, c."""
    i, o, f, g = np.split(inputs[0], 4, axis=1)
    c = _sigmoid(f) * inputs[1] + _sigmoid(i) * np.tanh(g)
    return [_sigmoid(o) * np.tanh(c), c]


def lstm_cell(node: NodeInfo, inputs: Arrays) -> Arrays:
    """One ONNX LSTM step: gates = pre + x Wt + h_prev Rt (absent terms are zero), then the pointwise cell."""
    x, wt, h_prev, rt, pre, c_prev = (_opt(inputs, i) for i in range(6))
    gates = np.zeros((c_prev.shape[0], 4 * c_prev.shape[1]))
    for term in (None if x is None else x @ wt, None if h_prev is None else h_prev @ rt, pre):
        if term is not None:
            gates = gates + term
    return lstm_cell_pointwise(node, [gates, c_prev])


def _binary(fn: Callable) -> Callable:
    """A reference for a broadcasting binary op."""
    return lambda node, inputs: [fn(inputs[0], inputs[1])]


def _unary(fn: Callable) -> Callable:
    """A reference for an activation."""
    return lambda node, inputs: [fn(inputs[0])]


# ---- reductions ------------------------------------------------------------------------------------------------
def softmax(node: NodeInfo, inputs: Arrays) -> Arrays:
    """Softmax: over one axis (opset >= 13) or over the flattened trailing axes (older opsets)."""
    x = inputs[0]
    if node.opset >= 13:
        axes = (node.attr("axis", -1) % x.ndim,)
    else:
        axes = tuple(range(node.attr("axis", 1) % x.ndim, x.ndim))
    e = np.exp(x - x.max(axis=axes, keepdims=True))
    return [e / e.sum(axis=axes, keepdims=True)]


def layernorm(node: NodeInfo, inputs: Arrays) -> Arrays:
    """LayerNormalization over the axes from `axis` on (Y only)."""
    x, scale, bias = inputs[0], inputs[1], _opt(inputs, 2)
    axes = tuple(range(node.attr("axis", -1) % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + node.attr("epsilon", 1e-5)) * scale
    return [y if bias is None else y + bias]


# ---- data movement ---------------------------------------------------------------------------------------------
def concat(node: NodeInfo, inputs: Arrays) -> Arrays:
    """Concatenation along `axis`."""
    return [np.concatenate(inputs, axis=node.attr("axis", 0))]


def split(node: NodeInfo, inputs: Arrays) -> Arrays:
    """Split by the `split` sizes, or into equal parts (one per output)."""
    x, axis = inputs[0], node.attr("axis", 0)
    sizes = node.attr("split")
    if sizes is None:
        return list(np.array_split(x, len(node.outputs), axis=axis))
    return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def slice_(node: NodeInfo, inputs: Arrays) -> Arrays:
    """ONNX Slice as python slicing after ONNX's clamping of starts and ends."""
    x = inputs[0]
    starts, ends = list(node.attr("starts")), list(node.attr("ends"))
    axes = list(node.attr("axes", range(len(starts))))
    steps = list(node.attr("steps", [1] * len(starts)))
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        dim = x.shape[axis]
        start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
        if step > 0:
            start, end = np.clip(start, 0, dim), np.clip(end, 0, dim)
        else:
            start, end = np.clip(start, 0, dim - 1), np.clip(end, -1, dim - 1)
        index[axis] = slice(int(start), None if end < 0 else int(end), step)
    return [x[tuple(index)]]


def transpose(node: NodeInfo, inputs: Arrays) -> Arrays:
    """Permutation of the axes (reversed by default)."""
    return [np.transpose(inputs[0], node.attr("perm"))]


def _activated(fn: Callable[[NodeInfo, Arrays], Arrays]) -> Callable[[NodeInfo, Arrays], Arrays]:
    """A fused op (ours): `fn`, then the node's `activation` attribute (Relu or Gelu, with Gelu's `approximate`)."""
    def ref(node: NodeInfo, inputs: Arrays) -> Arrays:
        act = node.attr("activation", None)
        out = fn(node, inputs)
        if not act:
            return out
        if act not in ("Relu", "Gelu"):
            raise ValueError(f"{node.op_type}: activation {act!r} has no reference")
        return [REFERENCES[act](node, [y])[0] for y in out]
    return ref


REFERENCES: dict[str, Callable[[NodeInfo, Arrays], Arrays]] = {
    "MatMul": matmul,
    "Gemm": gemm,
    "FusedMatMul": _activated(fused_matmul),
    "FusedGemm": _activated(gemm),
    "Conv": conv,
    "FusedConv": _activated(conv),
    "MaxPool": maxpool,
    "AveragePool": averagepool,
    "GlobalAveragePool": global_average_pool,
    "BatchNormalization": batchnorm,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(np.divide),
    "Relu": _unary(lambda x: np.maximum(x, 0.0)),
    "Sigmoid": _unary(_sigmoid),
    "Tanh": _unary(np.tanh),
    "Gelu": gelu,
    "LSTMCellPointwise": lstm_cell_pointwise,
    "LSTMCell": lstm_cell,
    "Softmax": softmax,
    "LayerNormalization": layernorm,
    "Concat": concat,
    "Split": split,
    "Slice": slice_,
    "Transpose": transpose,
}
