"""Bindings of Conv (1-D and 2-D, NCHW, groups), our FusedConv (Conv + Relu, attribute activation) and our
FusedConvAdd (Conv + a residual Z of the output's shape, then the optional Relu: scheduler/fuse_residual.py) to the
kernels of legacy/conv.cu and legacy/tc.cu."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from typing import Callable

from onnx import helper

from kernel_corpus.bindings import INT32_MAX, Binding, In, Launch, NodeInfo, OpDef, Out, Shape
from kernel_corpus.ops._common import (MAX_GRID_YZ, SPLIT_REDUCE_BLOCK, Window, activated, cdiv, fused_activation, i32,
                                       linear_launch, require_present, require_split, spatial_hw, temp, tensor_bytes,
                                       window_2d)
from kernel_corpus.ops import _tensor_core as tc
from kernel_corpus.torch_builders import spatial_pads
from toolchain.refusal import Refused

SOURCE = "conv.cu"
MAX_STATIC_SMEM = 48 * 1024
TAP_BLOCK = 256  # threads per rTask of conv_tc_offsets
TC_TAP_MAX = 15  # tc.cu's TC_TAP_MAX: the most filter taps a side its padding bits hold (wider: VEC bit 2)


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
    residual: bool = False  # FusedConvAdd: input 3 (Z, the output's shape) added after the bias, before the Relu

    @property
    def epilogue_ops(self) -> int:
        """Operations per output after the sum: bias add, residual add, Relu."""
        return int(self.bias) + int(self.residual) + int(self.relu)

    @property
    def flops(self) -> int:
        """Two ops per multiply-add of every output, plus the epilogue's."""
        taps = (self.C // self.group) * self.win.kh * self.win.kw
        return self.N * self.M * self.OH * self.OW * (2 * taps + self.epilogue_ops)


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
    z = node.input(3)
    if z is not None and z.shape != tuple(y):
        raise Refused(f"residual {list(z.shape)} is not the output's shape {list(y)}")
    return ConvGeom(N, C, *spatial_hw(x), M, *spatial_hw(y), win, group, bias is not None, relu == 1, z is not None)


def _flags(g: ConvGeom) -> list[str]:
    """The kernels' trailing template arguments: BIAS, RELU."""
    return [bool(g.bias), bool(g.relu)]


def _conv_args(g: ConvGeom) -> list:
    """X, W, bias (X stands in when absent: never read), Y, sizes and window, in parameter order."""
    w = g.win
    return [In(0), In(1), In(2) if g.bias else In(0), Out(0)] + [
        i32(v) for v in (g.N, g.C, g.H, g.W, g.M, g.OH, g.OW, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.dh, w.dw)]


def _residual_args(g: ConvGeom) -> list:
    """Every conv kernel's trailing arguments: Z (X stands in when absent: never read) and the flag res."""
    return [In(3) if g.residual else In(0), i32(int(g.residual))]


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
                              _conv_args(g) + [i32(g.group)] + _residual_args(g), g.flops, _traffic(node))]

    return Binding(op_type, f"direct{block}", SOURCE, kind, _geometry_condition(), plan, ("conv_direct",))


FP32_SPLITS = (4, 16)  # split-K factors of conv_implicit_gemm<16>
SPLIT_NOTE = ("launches in order: the GEMM's partial sums of the K splits into a temp, then their sum in split order "
              "with bias (residual) and Relu; the second waits for every rTask of the first")


def _split_condition(tile_m: int, splits: int, step: int):
    """The grid limits of a convolution split `splits` ways over R = C/group*KH*KW in steps of `step`."""

    def limits(g: ConvGeom) -> str | None:
        require_split(g.C // g.group * g.win.kh * g.win.kw, splits, step)
        if g.group * splits > MAX_GRID_YZ or cdiv(g.M // g.group, tile_m) > MAX_GRID_YZ:
            return f"group x splits {g.group * splits} or M/group {g.M // g.group} exceeds the grid limits"
        return None

    return limits


def _partial(g: ConvGeom, splits: int):
    """The partial sums' buffer of a split convolution ([splits][M][N*OH*OW]); unsplit, X stands in (never written)."""
    return temp("partial", 4 * splits * g.M * g.N * g.OH * g.OW) if splits > 1 else In(0)


def _with_fixup(node: NodeInfo, g: ConvGeom, main: Launch, splits: int, reduce: str, targs: list,
                tail: list) -> list[Launch]:
    """A convolution's GEMM launch and, when split, its fixup `reduce` (template arguments SPLIT_REDUCE_BLOCK + targs,
    trailing arguments `tail`, then the residual's): the GEMM then writes partial sums (no bias, residual or Relu),
    the fixup adds them in split order and applies bias, residual (once, after the sum) and Relu."""
    if splits == 1:
        return [main]
    total = g.M * g.N * g.OH * g.OW
    epilogue = total * g.epilogue_ops
    main.flops -= epilogue
    main.bytes += 4 * splits * total - tensor_bytes(node.input(3), node.outputs[0])
    return [main, linear_launch(reduce, [SPLIT_REDUCE_BLOCK, *targs], total, SPLIT_REDUCE_BLOCK,
                                [_partial(g, splits), In(2) if g.bias else In(0), Out(0)]
                                + [i32(v) for v in (g.N, g.M, g.OH * g.OW, splits)] + tail + _residual_args(g),
                                total * (splits - 1) + epilogue,
                                4 * splits * total + tensor_bytes(node.input(2), node.input(3), node.outputs[0]))]


def _implicit_gemm_binding(op_type: str, tile: int, kind: str, splits: int = 1) -> Binding:
    """conv_implicit_gemm: per group a GEMM of TILE x TILE output tiles over (channel, pixel); split-K when
    splits > 1 (conv_splitk_reduce adds the splits)."""

    def plan(node: NodeInfo) -> list[Launch]:
        g = conv_geometry(node)
        grid = (cdiv(g.N * g.OH * g.OW, tile), cdiv(g.M // g.group, tile), g.group * splits)
        main = Launch("conv_implicit_gemm", [tile, *_flags(g)], grid, (tile, tile, 1), 0,
                      _conv_args(g) + [i32(g.group), _partial(g, splits), i32(splits)] + _residual_args(g), g.flops,
                      _traffic(node))
        return _with_fixup(node, g, main, splits, "conv_splitk_reduce", _flags(g), [])

    name = f"implicit_gemm{tile}" + (f"k{splits}" if splits > 1 else "")
    kernels = ("conv_implicit_gemm", "conv_splitk_reduce") if splits > 1 else ("conv_implicit_gemm",)
    return Binding(op_type, name, SOURCE, kind, _geometry_condition(_split_condition(tile, splits, tile)), plan,
                   kernels, note=SPLIT_NOTE if splits > 1 else "")


def _tc_vec(g: ConvGeom) -> int:
    """tc.cu's VEC bits for a convolution: filter rows copied 16 bytes at a time when R = C/group*KH*KW is a multiple
    of 4; input rows when the convolution is 1x1, stride 1, unpadded (im2col is X itself) and OH*OW a multiple of 4;
    the padding tested by shifts, not tap bits, for a window wider than TC_TAP_MAX a side."""
    w = g.win
    R = g.C // g.group * w.kh * w.kw
    direct = (w.kh, w.kw, w.sh, w.sw, w.ph, w.pw) == (1, 1, 1, 1, 0, 0) and (g.OH * g.OW) % 4 == 0
    window = max(w.kh, w.kw) > TC_TAP_MAX
    return (tc.VEC_A if R % 4 == 0 else 0) | (tc.VEC_B if direct else 0) | (tc.VEC_WINDOW if window else 0)


def _tap_offsets_fit(g: ConvGeom) -> str | None:
    """conv_tc_offsets' byte offsets (int) of the last im2col row must fit int32 (the 1x1 direct path has none)."""
    w = g.win
    last = 4 * (((g.C // g.group - 1) * g.H + (w.kh - 1) * w.dh) * g.W + (w.kw - 1) * w.dw)
    if _tc_vec(g) & tc.VEC_B or last <= INT32_MAX:
        return None
    return f"the im2col table's byte offsets reach {last} (> int32)"


def _tensor_core_binding(op_type: str, bm: int, bn: int, precision: str, kind: str, splits: int = 1) -> Binding:
    """conv_tc (tc.cu): per group the GEMM W_g [M/group, R] x im2col(X) [R, N*OH*OW] on the tensor cores, BM x BN
    outputs per rTask; a setup launch (run once when a build loads) tabulates the im2col offsets of the
    R = C/group*KH*KW rows (none for a 1x1 stride-1 unpadded convolution, which reads X directly). With splits > 1
    (split-K) each tile's R is spread over `splits` rTasks writing partial sums, and the tile's last rTask to arrive
    (a counter per tile, zeroed by a second setup launch) adds them in split order and applies bias, residual and
    Relu: one launch per inference, as gemm_tc's split."""

    def plan(node: NodeInfo) -> list[Launch]:
        g = conv_geometry(node)
        w = g.win
        R, P, mg = g.C // g.group * w.kh * w.kw, g.N * g.OH * g.OW, g.M // g.group
        vec = _tc_vec(g)
        r_pad = cdiv(R, tc.BK) * tc.BK  # the table covers whole stages
        taps = temp("taps", 16 * r_pad)
        table = [] if vec & tc.VEC_B else [dataclasses.replace(
            linear_launch("conv_tc_offsets", [TAP_BLOCK], r_pad, TAP_BLOCK,
                          [taps] + [i32(v) for v in (R, r_pad, g.H, g.W, w.kh, w.kw, w.dh, w.dw)], 8 * R, 16 * r_pad),
            setup=True)]  # a function of the shape alone: computed once when the build loads
        grid = (cdiv(P, bn), cdiv(mg, bm), g.group * splits)
        counters, zero = tc.arrivals(grid[0] * grid[1] * g.group, splits)
        work = tc.tensor_core_flops(g.group, mg, P, R, bm, bn, precision) + g.flops - 2 * g.M * P * R
        args = _conv_args(g)[:4] + [_partial(g, splits), counters, taps] + [
            i32(v) for v in (g.N, g.C, g.H, g.W, g.M, g.OH, g.OW, w.sh, w.sw, w.ph, w.pw, w.kh, w.kw, w.dh, w.dw, R,
                             g.group, int(g.bias), int(g.relu), splits)] + _residual_args(g)
        targs = [bm, bn, tc.PREC_CODE[precision], vec, int(splits > 1)]  # SPLIT: with the in-place fixup
        main = Launch("conv_tc", targs, grid, (tc.threads(bm, bn), 1, 1), 0, args, work,
                      _traffic(node) + (0 if vec & tc.VEC_B else 16 * r_pad) + tc.split_bytes(splits, g.M * P),
                      flop_rate=tc.TF32_RATE)
        return table + zero + [main]

    kernels = ("conv_tc_offsets", "conv_tc") + (("tc_arrivals_zero",) if splits > 1 else ())
    note = ("launches in order: the im2col offset table into a temp (a setup launch; none for a 1x1, stride-1, "
            "unpadded convolution)" + (", the split's arrival counters zeroed (a setup launch)" if splits > 1 else "")
            + ", the GEMM" + (" (split-K: each tile's last rTask adds the splits in order)" if splits > 1 else ""))
    limits = _split_condition(bm, splits, tc.BK)
    return Binding(op_type, tc.variant(bm, bn, precision, splits), tc.SOURCE, kind,
                   _geometry_condition(lambda g: limits(g) or _tap_offsets_fit(g)), plan, kernels,
                   precision=precision, note=note)


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
                       depthwise_smem(g, tile), _conv_args(g) + _residual_args(g), g.flops, _traffic(node))]

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

    def f(x, w, b=None, z=None):
        y = conv(F.pad(x, extra) if extra else x, w, b, strides, pad, dilations, group)
        y = y if z is None else y + z
        return T.relu(y) if relu else y
    return f


def _fused_conv_equivalent(node: NodeInfo, ins: list[str], outs: list[str], dtype) -> tuple[list, list]:
    """FusedConv as Conv, then the activation; FusedConvAdd as Conv, Add of input 3, then the activation."""
    attrs = {k: v for k, v in node.attrs.items() if k not in ("activation", "approximate")}
    conv_ins = [n for n in ins[:3] if n]  # an absent bias is the Conv's last input: leave it out
    nodes = [helper.make_node("Conv", conv_ins, ["conv"], **attrs)]
    if len(ins) > 3 and ins[3]:
        nodes.append(helper.make_node("Add", ["conv", ins[3]], ["sum"]))
    return activated(node, nodes, nodes[-1].output[0], outs[0]), []


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
    Shape(((2, 8, 4, 6), (12, 8, 1, 1), (12,))),  # 1x1, stride 1, unpadded: tc.cu reads X 16 bytes at a time
    # long reductions (R >= 1024): every split-K factor applies
    Shape(((1, 128, 4, 4), (8, 128, 3, 3), (8,)), {"pads": [1, 1, 1, 1]}, positive=(0, 1), tol=1e-4),
    Shape(((2, 1040, 2, 2), (12, 1040, 1, 1)), positive=(0, 1), tol=1e-4),
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
    Shape(((1, 256, 3, 3), (8, 128, 3, 3), (8,)), {"group": 2, "pads": [1, 1, 1, 1], "activation": "Relu"},
          positive=(0, 1), tol=1e-4),
    Shape(((1, 1024, 4, 4), (16, 1024, 1, 1), (16,)), {"activation": "Relu"}, positive=(0, 1), tol=1e-4),
)

FUSED_CONV_ADD_SHAPES = (  # X, W, bias (- absent), Z [N, M, OH, OW]; with and without the Relu
    Shape(((1, 3, 9, 11), (5, 3, 3, 3), (5,), (1, 5, 9, 11)), {"pads": [1, 1, 1, 1], "activation": "Relu"}),
    Shape(((2, 4, 10, 7), (6, 2, 3, 2), None, (2, 6, 6, 7)), {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1]}),
    Shape(((1, 4, 9, 9), (4, 1, 3, 3), (4,), (1, 4, 5, 5)), {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2],
                                                            "activation": "Relu"}),
    Shape(((1, 3, 20, 18), (3, 1, 3, 3), (3,), (1, 3, 20, 18)), {"group": 3, "dilations": [2, 2],
                                                                 "pads": [2, 2, 2, 2]}),
    Shape(((2, 3, 12), (4, 3, 3), None, (2, 4, 6)), {"strides": [2], "pads": [1, 1], "activation": "Relu"}),
    Shape(((2, 8, 4, 6), (12, 8, 1, 1), (12,), (2, 12, 4, 6)), {"activation": "Relu"}),  # tc.cu's 16-byte X copies
    Shape(((1, 64, 16, 16), (256, 64, 1, 1), (256,), (1, 256, 16, 16)), {"activation": "Relu"}, test=False),
    # long reductions (R >= 1024): every split-K factor applies, the residual added once after the splits' sum
    Shape(((1, 128, 4, 4), (8, 128, 3, 3), (8,), (1, 8, 4, 4)), {"pads": [1, 1, 1, 1], "activation": "Relu"},
          positive=(0, 1), tol=1e-4),
    Shape(((2, 1040, 2, 2), (12, 1040, 1, 1), None, (2, 12, 2, 2)), positive=(0, 1), tol=1e-4),
)


def _conv_bindings(op_type: str) -> tuple[Binding, ...]:
    """The Conv kernels of conv.cu for Conv or FusedConv."""
    return (_implicit_gemm_binding(op_type, 16, "fast"), _implicit_gemm_binding(op_type, 8, "efficient"),
            _direct_binding(op_type, 128, "efficient"), _depthwise_binding(op_type, 16, "fast")) + tuple(
        _implicit_gemm_binding(op_type, 16, "efficient", s) for s in FP32_SPLITS) + tuple(
        _tensor_core_binding(op_type, bm, bn, precision, kind, splits) for precision in tc.PREC_CODE
        for bm, bn, kind, splits in tc.tile_variants())


OPS = [
    OpDef("Conv", _conv_bindings("Conv"), CONV_SHAPES, torch=_torch_conv),
    OpDef("FusedConv", _conv_bindings("FusedConv"), FUSED_CONV_SHAPES, torch=_torch_conv,
          equivalent=_fused_conv_equivalent, custom=True),
    OpDef("FusedConvAdd", _conv_bindings("FusedConvAdd"), FUSED_CONV_ADD_SHAPES, torch=_torch_conv,
          equivalent=_fused_conv_equivalent, custom=True),
]
