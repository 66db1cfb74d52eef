"""Bindings of Conv (1-D and 2-D, NCHW, groups) and our FusedConv (Conv + Relu, attribute activation) to the
kernels of legacy/conv.cu."""
from __future__ import annotations

from dataclasses import dataclass

from typing import Callable

from onnx import helper

from kernel_corpus.bindings import Binding, In, Launch, NodeInfo, OpDef, Out, Shape
from kernel_corpus.ops._common import (MAX_GRID_YZ, Window, activated, cdiv, fused_activation, i32, linear_launch,
                                       require_present, spatial_hw, temp, tensor_bytes, window_2d)
from kernel_corpus.ops import _tensor_core as tc
from kernel_corpus.torch_builders import spatial_pads
from toolchain.refusal import Refused

SOURCE = "conv.cu"
MAX_STATIC_SMEM = 48 * 1024
TAP_BLOCK = 256  # threads per rTask of conv_tc_offsets


@dataclass(frozen=True)
class ConvGeom:
    """Everything the conv kernels take: sizes, window, group, whether a bias is added."""

    N: int
    C: int
    H: int
    W: int
    M: int
    OH: int
    OW: int
    win: Window
    group: int
    bias: bool
    relu: bool = False  # FusedConv: a Relu after the bias

    @property
    def flops(self) -> int:
        """Two ops per multiply-add of every output, plus the bias add."""
        taps = (self.C // self.group) * self.win.kh * self.win.kw
        return self.N * self.M * self.OH * self.OW * (2 * taps + (1 if self.bias else 0) + (1 if self.relu else 0))


def conv_geometry(node: NodeInfo) -> ConvGeom:
    """The convolution a Conv node computes (Refused when the kernels cannot do it)."""
    require_present(node, 2)
    x, w, y = node.inputs[0].shape, node.inputs[1].shape, node.outputs[0].shape
    if len(x) not in (3, 4) or len(w) != len(x) or len(y) != len(x):
        raise Refused(f"needs X, W, Y of rank 3 or 4 alike, got {list(x)}, {list(w)}, {list(y)}")
    group = int(node.attr("group", 1))
    N, C, M = x[0], x[1], w[0]
    if group < 1 or C % group or M % group:
        raise Refused(f"group {group} does not divide C = {C} and M = {M}")
    if w[1] != C // group:
        raise Refused(f"W {list(w)} does not have C/group = {C // group} input channels")
    kernel = [int(k) for k in node.attr("kernel_shape", w[2:])]
    if kernel != list(w[2:]):
        raise Refused(f"kernel_shape {kernel} differs from W {list(w)}")
    if tuple(y[:2]) != (N, M):
        raise Refused(f"output {list(y)} does not start with [N, M] = [{N}, {M}]")
    win = window_2d(node, x[2:], kernel, y[2:])
    bias = node.input(2)
    if bias is not None and bias.shape != (M,):
        raise Refused(f"bias {list(bias.shape)} is not [{M}]")
    relu = fused_activation(node, {"Relu": 1})
    return ConvGeom(N, C, *spatial_hw(x), M, *spatial_hw(y), win, group, bias is not None, relu == 1)


def _flags(g: ConvGeom) -> list[str]:
    """The kernels' trailing template arguments: BIAS, RELU."""
    return [bool(g.bias), bool(g.relu)]


def _conv_args(g: ConvGeom) -> list:
    """X, W, bias (X stands in when absent: never read), Y, sizes and window, in parameter order."""
    w = g.win
    return [In(0), In(1), In(2) if g.bias else In(0), Out(0)] + [
        i32(v) for v in (g.N, g.C, g.H, g.W, g.M, g.OH, g.OW, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.dh, w.dw)]


def _traffic(node: NodeInfo) -> int:
    """Compulsory bytes: inputs read once, output written once."""
    return tensor_bytes(*node.inputs, node.outputs[0])


def _geometry_condition(extra=None):
    """A condition: the node is a supported Conv, and `extra(geom)` (a reason or None) agrees."""

    def condition(node: NodeInfo) -> str | None:
        g = conv_geometry(node)
        return extra(g) if extra else None

    return condition


def _direct_binding(op_type: str, block: int, kind: str) -> Binding:
    """conv_direct: one thread per output, BLOCK outputs per rTask."""

    def plan(node: NodeInfo) -> list[Launch]:
        g = conv_geometry(node)
        return [linear_launch("conv_direct", [block, *_flags(g)], g.N * g.M * g.OH * g.OW, block,
                              _conv_args(g) + [i32(g.group)], g.flops, _traffic(node))]

    return Binding(op_type, f"direct{block}", SOURCE, kind, _geometry_condition(), plan, ("conv_direct",))


def _grid_limits(tile_m: int):
    """Limits of a grid (pixel tiles, channel tiles of tile_m, groups): grid.y and grid.z are bounded."""

    def limits(g: ConvGeom) -> str | None:
        if g.group > MAX_GRID_YZ or cdiv(g.M // g.group, tile_m) > MAX_GRID_YZ:
            return f"group {g.group} or M/group {g.M // g.group} exceeds the grid limits"
        return None

    return limits


def _implicit_gemm_binding(op_type: str, tile: int, kind: str) -> Binding:
    """conv_implicit_gemm: per group a GEMM of TILE x TILE output tiles over (channel, pixel)."""

    def plan(node: NodeInfo) -> list[Launch]:
        g = conv_geometry(node)
        grid = (cdiv(g.N * g.OH * g.OW, tile), cdiv(g.M // g.group, tile), g.group)
        return [Launch("conv_implicit_gemm", [tile, *_flags(g)], grid, (tile, tile, 1), 0,
                       _conv_args(g) + [i32(g.group)], g.flops, _traffic(node))]

    return Binding(op_type, f"implicit_gemm{tile}", SOURCE, kind, _geometry_condition(_grid_limits(tile)), plan,
                   ("conv_implicit_gemm",))


def _tensor_core_binding(op_type: str, bm: int, bn: int, precision: str, kind: str) -> Binding:
    """conv_tc (tc.cu): per group the GEMM W_g [M/group, R] x im2col(X) [R, N*OH*OW] on the tensor cores, BM x BN
    outputs per rTask; a first launch tabulates the im2col offsets of the R = C/group*KH*KW rows."""

    def plan(node: NodeInfo) -> list[Launch]:
        g = conv_geometry(node)
        w = g.win
        R, P, mg = g.C // g.group * w.kh * w.kw, g.N * g.OH * g.OW, g.M // g.group
        taps = temp("taps", 16 * R)
        offsets = linear_launch("conv_tc_offsets", [TAP_BLOCK], R, TAP_BLOCK,
                                [taps] + [i32(v) for v in (R, g.H, g.W, w.kh, w.kw, w.dh, w.dw)], 8 * R, 16 * R)
        work = tc.tensor_core_flops(g.group, mg, P, R, bm, bn, precision) + g.flops - 2 * g.M * P * R
        args = _conv_args(g)[:4] + [taps] + [i32(v) for v in (g.N, g.C, g.H, g.W, g.M, g.OH, g.OW, w.sh, w.sw, w.ph,
                                                              w.pw, R, g.group, int(g.bias), int(g.relu))]
        conv = Launch("conv_tc", [bm, bn, tc.PREC_CODE[precision]], (cdiv(P, bn), cdiv(mg, bm), g.group),
                      (tc.threads(bm, bn), 1, 1), 0, args, work, _traffic(node) + 16 * R, flop_rate=tc.TF32_RATE)
        return [offsets, conv]

    return Binding(op_type, f"tc{bm}x{bn}_{precision}", tc.SOURCE, kind, _geometry_condition(_grid_limits(bm)), plan,
                   ("conv_tc_offsets", "conv_tc"), precision=precision,
                   note="two launches (the im2col offset table into a temp, then the GEMM); the second waits for "
                        "the first")


def depthwise_smem(g: ConvGeom, tile: int) -> int:
    """Dynamic shared bytes of conv_depthwise_tiled: the input patch with halo plus the filter."""
    w = g.win
    ph = (tile - 1) * w.sh + (w.kh - 1) * w.dh + 1
    pw = (tile - 1) * w.sw + (w.kw - 1) * w.dw + 1
    return 4 * (ph * pw + w.kh * w.kw)


def _depthwise_binding(op_type: str, tile: int, kind: str) -> Binding:
    """conv_depthwise_tiled: one TILE x TILE output tile of one (n, m) plane per rTask, staged in shared memory."""

    def depthwise_only(g: ConvGeom) -> str | None:
        if g.group != g.C:
            return f"not depthwise: group {g.group} != C {g.C}"
        if cdiv(g.OH, tile) > MAX_GRID_YZ or g.N * g.M > MAX_GRID_YZ:
            return f"N*M = {g.N * g.M} or OH = {g.OH} exceeds the grid limits"
        if depthwise_smem(g, tile) > MAX_STATIC_SMEM:
            return f"the input patch needs {depthwise_smem(g, tile)} bytes of shared memory (> 48 KiB)"
        return None

    def plan(node: NodeInfo) -> list[Launch]:
        g = conv_geometry(node)
        grid = (cdiv(g.OW, tile), cdiv(g.OH, tile), g.N * g.M)
        return [Launch("conv_depthwise_tiled", [tile, *_flags(g)], grid, (tile, tile, 1),
                       depthwise_smem(g, tile), _conv_args(g), g.flops, _traffic(node))]

    return Binding(op_type, f"depthwise{tile}", SOURCE, kind, _geometry_condition(depthwise_only), plan,
                   ("conv_depthwise_tiled",))


def _torch_conv(T, a: dict, k: list, nout: int) -> Callable:
    """Conv (1-3 spatial dims, groups, dilations, asymmetric pads), then FusedConv's Relu."""
    F = T.nn.functional
    if "kernel_shape" in a:
        r = len(a["kernel_shape"])
    elif len(k) > 1 and k[1] is not None:
        r = k[1].ndim - 2
    else:
        raise ValueError("Conv: needs kernel_shape or constant weights for the torch interpreter")
    pad, extra = spatial_pads(a, r, "Conv")
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[r]
    strides, dilations, group = a.get("strides", [1] * r), a.get("dilations", [1] * r), a.get("group", 1)
    relu = a.get("activation") == "Relu"

    def f(x, w, b=None):
        y = conv(F.pad(x, extra) if extra else x, w, b, strides, pad, dilations, group)
        return T.relu(y) if relu else y
    return f


def _fused_conv_equivalent(node: NodeInfo, ins: list[str], outs: list[str], dtype) -> tuple[list, list]:
    """FusedConv as Conv, then the activation."""
    attrs = {k: v for k, v in node.attrs.items() if k not in ("activation", "approximate")}
    return activated(node, [helper.make_node("Conv", ins, ["conv"], **attrs)], "conv", outs[0]), []


CONV_SHAPES = (
    Shape(((1, 3, 9, 11), (5, 3, 3, 3), (5,)), {"pads": [1, 1, 1, 1]}),
    Shape(((2, 4, 10, 7), (6, 2, 3, 2)), {"group": 2, "strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1]}),
    Shape(((1, 4, 9, 9), (4, 1, 3, 3), (4,)), {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    Shape(((1, 2, 7, 8), (4, 1, 3, 3)), {"group": 2, "auto_pad": "SAME_UPPER"}),
    Shape(((1, 3, 20, 18), (3, 1, 3, 3), (3,)), {"group": 3, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    Shape(((2, 3, 12), (4, 3, 3)), {"strides": [2], "pads": [1, 1]}),
    Shape(((1, 8, 5, 5), (16, 8, 1, 1), (16,))),
    Shape(((1, 3, 10, 9), (4, 3, 3, 2)), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),   # odd total pads
    Shape(((1, 3, 10, 9), (4, 3, 3, 2)), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    Shape(((1, 16, 32, 32), (32, 16, 3, 3)), {"pads": [1, 1, 1, 1]}, test=False),
    Shape(((1, 32, 16, 16), (32, 1, 3, 3), (32,)), {"group": 32, "pads": [1, 1, 1, 1]}, test=False),
    Shape(((1, 3, 64, 64), (16, 3, 7, 7)), {"strides": [2, 2], "pads": [3, 3, 3, 3]}, test=False),
)
FUSED_CONV_SHAPES = (
    Shape(((1, 3, 9, 11), (5, 3, 3, 3), (5,)), {"pads": [1, 1, 1, 1], "activation": "Relu"}),
    Shape(((2, 4, 10, 7), (6, 2, 3, 2)), {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1], "activation": "Relu"}),
    Shape(((1, 4, 9, 9), (4, 1, 3, 3), (4,)), {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2],
                                               "activation": "Relu"}),
    Shape(((1, 3, 20, 18), (3, 1, 3, 3), (3,)), {"group": 3, "dilations": [2, 2], "pads": [2, 2, 2, 2],
                                                 "activation": "Relu"}),
    Shape(((1, 8, 5, 5), (16, 8, 1, 1), (16,)), {"activation": "Relu"}),
    Shape(((1, 64, 32, 32), (64, 64, 3, 3), (64,)), {"pads": [1, 1, 1, 1], "activation": "Relu"}, test=False),
)


def _conv_bindings(op_type: str) -> tuple[Binding, ...]:
    """The Conv kernels of conv.cu for Conv or FusedConv."""
    return (_implicit_gemm_binding(op_type, 16, "fast"), _implicit_gemm_binding(op_type, 8, "efficient"),
            _direct_binding(op_type, 128, "efficient"), _depthwise_binding(op_type, 16, "fast")) + tuple(
        _tensor_core_binding(op_type, bm, bn, precision, kind) for precision in tc.PREC_CODE
        for bm, bn, kind in tc.TILES)


OPS = [
    OpDef("Conv", _conv_bindings("Conv"), CONV_SHAPES, torch=_torch_conv),
    OpDef("FusedConv", _conv_bindings("FusedConv"), FUSED_CONV_SHAPES, torch=_torch_conv,
          equivalent=_fused_conv_equivalent, custom=True),
]
