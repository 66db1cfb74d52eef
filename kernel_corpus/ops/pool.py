"""Bindings of MaxPool and AveragePool (1-D and 2-D, NCHW) to legacy/pool.cu."""
from __future__ import annotations

from kernel_corpus.bindings import Binding, Launch, NodeInfo
from kernel_corpus.ops._common import (IN, OUT, Window, extra_outputs, i32, linear_launch, require_present,
                                       spatial_hw, tensor_bytes, window_2d)

SOURCE = "pool.cu"
BLOCK = 256
MODE_MAX, MODE_AVG_EXCLUDE_PAD, MODE_AVG_INCLUDE_PAD = 0, 1, 2


def pool_window(node: NodeInfo) -> Window | str:
    """The window of a MaxPool/AveragePool node, or why the kernel cannot do it."""
    missing = require_present(node, 1) or extra_outputs(node, 1)
    if missing:
        return missing
    x, y = node.inputs[0].shape, node.outputs[0].shape
    if len(x) not in (3, 4) or len(y) != len(x) or tuple(y[:2]) != tuple(x[:2]):
        return f"needs X and Y of rank 3 or 4 with the same N, C, got {list(x)} and {list(y)}"
    kernel = node.attr("kernel_shape")
    if kernel is None:
        return "attribute kernel_shape is missing"
    return window_2d(node, x[2:], [int(k) for k in kernel], y[2:], bool(node.attr("ceil_mode", 0)))


def _mode(node: NodeInfo) -> int:
    """Which pool2d MODE the node needs."""
    if node.op_type == "MaxPool":
        return MODE_MAX
    return MODE_AVG_INCLUDE_PAD if int(node.attr("count_include_pad", 0)) else MODE_AVG_EXCLUDE_PAD


def _condition(node: NodeInfo) -> bool | str:
    """Applies whenever the window is supported."""
    win = pool_window(node)
    return win if isinstance(win, str) else True


def _plan(node: NodeInfo) -> list[Launch]:
    """One pool2d launch, a thread per output."""
    win = pool_window(node)
    x, y = node.inputs[0].shape, node.outputs[0].shape
    (H, W), (OH, OW) = spatial_hw(x), spatial_hw(y)
    nc = x[0] * x[1]
    scalars = (nc, H, W, OH, OW, win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.ph_end, win.pw_end, win.dh,
               win.dw)
    outputs = node.outputs[0].numel
    return [linear_launch("pool2d", [_mode(node), BLOCK], outputs, BLOCK, [IN(0), OUT(0)] + [i32(v) for v in scalars],
                          outputs * win.kh * win.kw, tensor_bytes(node.inputs[0], node.outputs[0]))]


BINDINGS = [
    Binding(op, "direct", SOURCE, "only", _condition, _plan, ("pool2d",))
    for op in ("MaxPool", "AveragePool")
]
