"""ConvTranspose (1-3 spatial dims, groups, dilations, explicit or automatic pads, output_padding, output_shape) on
legacy/convtranspose.cu: one thread per output element gathering the taps that land on it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kernel_corpus.bindings import Binding, In, Launch, NodeInfo, OpDef, Out, Shape
from kernel_corpus.ops._common import condition_of, i32, linear_launch, require_present, tensor_bytes
from toolchain.refusal import Refused

SOURCE = "convtranspose.cu"
BLOCK = 256
MAX_SPATIAL = 3


@dataclass(frozen=True)
class Transposed:
    """Sizes of a ConvTranspose padded to 3 spatial dims, and its leading pads."""

    N: int
    C: int
    M: int
    group: int
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]


def _leading_pads(node: NodeInfo, ins: tuple[int, ...], kernel: list[int], strides: list[int],
                  dilations: list[int]) -> list[int]:
    """Leading pads: the pads attribute, or SAME_UPPER/SAME_LOWER's split of the total padding (as ONNX's
    reference computes it), else none."""
    r = len(ins)
    pads = node.attr("pads")
    auto_pad = str(node.attr("auto_pad", "NOTSET"))
    if pads is not None:
        return [int(p) for p in pads[:r]]
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return [0] * r
    out_pad = [int(p) for p in node.attr("output_padding", [0] * r)]
    target = [int(s) for s in node.attr("output_shape", [ins[i] * strides[i] for i in range(r)])]
    total = [strides[i] * (ins[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 - target[i]
             for i in range(r)]
    return [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]


def transposed(node: NodeInfo) -> Transposed:
    """The problem of a ConvTranspose node (Refused when the kernel cannot run it)."""
    require_present(node, 2)
    x, w, y = node.inputs[0].shape, node.inputs[1].shape, node.outputs[0].shape
    r = len(x) - 2
    if not 1 <= r <= MAX_SPATIAL or len(w) != len(x) or len(y) != len(x):
        raise Refused(f"needs X, W, Y of rank 3 to 5 alike, got {list(x)}, {list(w)}, {list(y)}")
    group = int(node.attr("group", 1))
    N, C, M = x[0], x[1], y[1]
    if group < 1 or C % group or w[0] != C or w[1] * group != M:
        raise Refused(f"W {list(w)} does not map {C} channels in {group} group(s) to {M}")
    bias = node.input(2)
    if bias is not None and bias.shape != (M,):
        raise Refused(f"bias {list(bias.shape)} is not [{M}]")
    kernel = [int(k) for k in node.attr("kernel_shape", w[2:])]
    strides = [int(s) for s in node.attr("strides", [1] * r)]
    dilations = [int(d) for d in node.attr("dilations", [1] * r)]
    if list(w[2:]) != kernel or min(strides + dilations) < 1:
        raise Refused(f"kernel_shape {kernel} differs from W {list(w)} or a stride/dilation is not positive")
    pads = _leading_pads(node, x[2:], kernel, strides, dilations)
    fill = MAX_SPATIAL - r
    one = lambda v: tuple([1] * fill + list(v))  # noqa: E731
    return Transposed(N, C, M, group, one(x[2:]), one(y[2:]), one(kernel), one(strides),
                      tuple([0] * fill + list(pads)), one(dilations))


def _plan(node: NodeInfo) -> list[Launch]:
    """convtranspose_nd<HAS_BIAS>, one thread per output element."""
    t = transposed(node)
    n = node.outputs[0].numel
    has_bias = node.input(2) is not None
    args = [In(0), In(1), In(2) if has_bias else In(1), Out(0)] + [
        i32(v) for v in (t.N, t.C, t.M, t.group, *t.ins, *t.outs, *t.kernel, *t.strides, *t.pads, *t.dilations)]
    taps = node.inputs[1].numel // max(t.M // t.group, 1)
    return [linear_launch("convtranspose_nd", [has_bias, BLOCK], n, BLOCK, args, 2 * n * taps,
                          tensor_bytes(*node.inputs, node.outputs[0]))]


def _torch(T, a: dict, k: list, nout: int) -> Callable:
    """torch's conv_transpose with explicit symmetric pads (output_padding for the rest)."""
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "") or "output_shape" in a:
        raise ValueError("ConvTranspose: auto_pad and output_shape are not supported by the torch interpreter")

    def f(x, w, b=None):
        r = x.dim() - 2
        fn = getattr(T.nn.functional, f"conv_transpose{r}d")
        pads = a.get("pads", [0] * 2 * r)
        if pads[:r] != pads[r:]:
            raise ValueError("ConvTranspose: asymmetric pads are not supported by the torch interpreter")
        return fn(x, w, b, a.get("strides", 1), pads[:r], a.get("output_padding", 0), a.get("group", 1),
                  a.get("dilations", 1))
    return f


OPS = [OpDef("ConvTranspose",
             (Binding("ConvTranspose", "gather", SOURCE, "only", condition_of(transposed), _plan,
                      ("convtranspose_nd",)),),
             (Shape(((1, 2, 4, 5), (2, 3, 3, 3), (3,)), {"strides": [2, 2], "pads": [1, 0, 1, 1]}),
              Shape(((3, 2, 3, 3), (2, 1, 2, 3)), {"group": 2, "dilations": [2, 1], "strides": [2, 1]}),
              Shape(((1, 2, 3, 4), (2, 3, 3, 2)), {"output_padding": [1, 0], "strides": [2, 1]}),
              Shape(((1, 3, 7), (3, 2, 4)), {"strides": [3], "auto_pad": "SAME_UPPER"}),
              Shape(((1, 1, 3, 2, 4), (1, 2, 2, 3, 2), (2,)), {"strides": [1, 2, 2]})),
             torch=_torch)]
