"""Helpers the ops modules share: scalar arguments, grid arithmetic, axes, strides and 2-D window geometry."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from onnx import helper, numpy_helper

from kernel_corpus.bindings import INT32_MAX, Condition, Launch, NodeInfo, Scalar, Temp, TensorInfo
from toolchain.refusal import Refused

MAX_GRID_YZ = 65535
MAX_VIEW_RANK = 4  # dims the view kernels (reductions, strided copies, pads) index
# element types the copy, select and cast kernels take (numpy name -> the kernels' C++ type)
ELEMENT_TYPES = {"float32": "float", "int64": "long long", "int32": "int", "bool": "bool"}


def cdiv(a: int, b: int) -> int:
    """Ceiling division for launch geometry."""
    return -(-a // b)


def i32(value: int) -> Scalar:
    """Argument: an int32 scalar (the kernels index with int)."""
    value = int(value)
    if not -INT32_MAX - 1 <= value <= INT32_MAX:
        raise ValueError(f"scalar {value} does not fit int32")
    return Scalar("int32", value)


def f32(value: float) -> Scalar:
    """Argument: a float32 scalar."""
    return Scalar("float32", float(value))


def temp(name: str, nbytes: int, dtype: str = "float32") -> Temp:
    """Argument: a scratch buffer shared by the launches of one node (contents undefined on entry)."""
    return Temp(name, int(nbytes), dtype)


SPLIT_MIN_K = 64  # split-K: k per split at least, so a split's fixed costs (prologue, epilogue) stay a small part
SPLIT_REDUCE_BLOCK = 256  # threads per rTask of the split-K fixups


def require_split(K: int, splits: int, step: int) -> None:
    """Refused when K, in the kernel's k steps of `step`, is too short for `splits` splits of at least SPLIT_MIN_K
    each (the kernels share the ceil(K / step) steps out as evenly as whole steps allow)."""
    if splits > 1 and cdiv(K, step) // splits * step < SPLIT_MIN_K:
        raise Refused(f"K = {K} is too short for {splits} splits of at least {SPLIT_MIN_K}")


def condition_of(view: Callable[[NodeInfo], object]) -> Condition:
    """The condition of a binding whose plan needs `view(node)`: the node applies when the view can be built (the
    view raises Refused, which Binding.refusal reports, when it cannot)."""
    def condition(node: NodeInfo) -> None:
        view(node)
    return condition


def linear_launch(kernel: str, template_args: list, n: int, block: int, args: list, flops: int,
                  nbytes: int) -> Launch:
    """A 1-D launch of ceil(n / block) blocks of `block` threads."""
    return Launch(kernel, template_args, (cdiv(n, block), 1, 1), (block, 1, 1), 0, args, flops, nbytes)


def fused_activation(node: NodeInfo, codes: dict[str, int]) -> int:
    """The kernel epilogue's code for a fused node's `activation` attribute (0 without one); `codes` are what the
    kernels implement, by name ("Gelu" with attribute approximate="tanh" is looked up as "GeluTanh"); Refused for
    anything else."""
    act = node.attr("activation", None)
    if not act:
        return 0
    name = "GeluTanh" if act == "Gelu" and node.attr("approximate", "none") == "tanh" else act
    if name not in codes:
        raise Refused(f"activation {act!r} is not fused by these kernels ({', '.join(codes)} only)")
    return codes[name]


def tensor_bytes(*tensors: TensorInfo | None) -> int:
    """Bytes of the given float32 tensors (absent ones count nothing)."""
    return sum(t.nbytes for t in tensors if t is not None)


def norm_axis(axis: int, rank: int) -> int:
    """A non-negative axis (Refused when it is out of range)."""
    if not -rank <= axis < max(rank, 1):
        raise Refused(f"axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def contiguous_strides(shape: tuple[int, ...] | list[int]) -> list[int]:
    """Element strides of a row-major tensor."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return strides


def merged_view(dims: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """(sizes, strides) of a list of (size, stride) dims, unit dims dropped and contiguous neighbours fused,
    padded in front to 4 dims; Refused when more remain (strides may be negative)."""
    sizes: list[int] = []
    strides: list[int] = []
    for size, stride in dims:
        if size == 1:
            continue
        if sizes and strides[-1] == stride * size:
            sizes[-1] *= size
            strides[-1] = stride
        else:
            sizes.append(size)
            strides.append(stride)
    if len(sizes) > MAX_VIEW_RANK:
        raise Refused(f"needs {len(sizes)} dims after merging, the kernel takes {MAX_VIEW_RANK}")
    pad = MAX_VIEW_RANK - len(sizes)
    return [1] * pad + sizes, [0] * pad + strides


def require_present(node: NodeInfo, count: int) -> None:
    """Refused when the node lacks one of its first `count` inputs or its first output."""
    for i in range(count):
        if node.input(i) is None:
            raise Refused(f"input {i} is missing")
    if node.output(0) is None:
        raise Refused("output 0 is missing")


def refuse_extra_outputs(node: NodeInfo, allowed: int) -> None:
    """Refused when the node asks for outputs past the first `allowed`."""
    extra = [i for i, t in enumerate(node.outputs) if t is not None and i >= allowed]
    if extra:
        raise Refused(f"optional output {extra[0]} is not produced by this kernel")


@dataclass(frozen=True)
class Window:
    """A 2-D sliding window: kernel, strides, leading and trailing pads, dilations."""

    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    ph_end: int
    pw_end: int
    dh: int
    dw: int


def _spatial_list(node: NodeInfo, key: str, rank: int, default: int) -> list[int]:
    """An int-list attribute of one entry per spatial dim (or two for pads)."""
    want = 2 * rank if key == "pads" else rank
    value = [int(v) for v in node.attr(key, [default] * want)]
    if len(value) != want:
        raise Refused(f"attribute {key} has {len(value)} entries, expected {want}")
    return value


def _pads_for(auto_pad: str, size: int, k: int, s: int, d: int, given: tuple[int, int]) -> tuple[int, int]:
    """(begin, end) pads of one spatial dim under auto_pad."""
    if auto_pad in ("NOTSET", ""):
        return given
    if auto_pad == "VALID":
        return 0, 0
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        total = max(0, (cdiv(size, s) - 1) * s + (k - 1) * d + 1 - size)
        small = total // 2
        return (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
    raise Refused(f"auto_pad {auto_pad} is not supported")


def _out_size_ok(size: int, k: int, s: int, d: int, pads: tuple[int, int], out: int, ceil_mode: bool) -> bool:
    """Whether `out` is the floor (or, in ceil_mode, up to the ceil) output size of one dim."""
    span = size + pads[0] + pads[1] - (k - 1) * d - 1
    if span < 0:
        return False
    floor_out = span // s + 1
    return floor_out <= out <= (cdiv(span, s) + 1 if ceil_mode else floor_out)


def window_dims(node: NodeInfo, in_sizes: tuple[int, ...], kernel: list[int], out_sizes: tuple[int, ...],
                ceil_mode: bool = False) -> list[tuple[int, int, int, int, int]]:
    """Per spatial dim (kernel, stride, leading pad, trailing pad, dilation) of a Conv/pool node of any rank,
    checked against the output sizes."""
    rank = len(kernel)
    if len(in_sizes) != rank or len(out_sizes) != rank:
        raise Refused(f"kernel_shape has {rank} dims, the input {len(in_sizes)} spatial dims")
    strides = _spatial_list(node, "strides", rank, 1)
    dilations = _spatial_list(node, "dilations", rank, 1)
    pads = _spatial_list(node, "pads", rank, 0)
    if min(strides + dilations + kernel) < 1 or min(pads) < 0:
        raise Refused("kernel, strides and dilations must be positive and pads non-negative")
    auto_pad = str(node.attr("auto_pad", "NOTSET"))
    dims = []
    for i in range(rank):
        pad = _pads_for(auto_pad, in_sizes[i], kernel[i], strides[i], dilations[i], (pads[i], pads[i + rank]))
        if not _out_size_ok(in_sizes[i], kernel[i], strides[i], dilations[i], pad, out_sizes[i], ceil_mode):
            raise Refused(f"output size {out_sizes[i]} of spatial dim {i} does not follow from the window "
                          f"attributes")
        dims.append((kernel[i], strides[i], pad[0], pad[1], dilations[i]))
    return dims


def window_2d(node: NodeInfo, in_sizes: tuple[int, ...], kernel: list[int], out_sizes: tuple[int, ...],
              ceil_mode: bool = False) -> Window:
    """The window of a 1-D or 2-D Conv/pool node (1-D becomes H = 1), checked against the output sizes."""
    if len(kernel) not in (1, 2) or len(in_sizes) != len(kernel) or len(out_sizes) != len(kernel):
        raise Refused(f"only 1-D and 2-D windows are supported, got {len(in_sizes)} spatial dims")
    dims = window_dims(node, in_sizes, kernel, out_sizes, ceil_mode)
    if len(kernel) == 1:
        dims.insert(0, (1, 1, 0, 0, 1))
    (kh, sh, ph, ph_end, dh), (kw, sw, pw, pw_end, dw) = dims
    return Window(kh, kw, sh, sw, ph, pw, ph_end, pw_end, dh, dw)


def spatial_hw(shape: tuple[int, ...]) -> tuple[int, int]:
    """(H, W) of an NC... tensor with one or two spatial dims (H = 1 for one)."""
    return (1, shape[2]) if len(shape) == 3 else (shape[2], shape[3])


# ---- equivalent standard graphs of our fused ops (their truth: onnx's ReferenceEvaluator runs these) -----------
def activated(node: NodeInfo, base: list, src: str, dst: str) -> list:
    """`base` nodes writing `src`, then the node's `activation` attribute (Relu, or Gelu with its `approximate`)
    from `src` to `dst`; an Identity when there is none."""
    act = node.attr("activation", None)
    attrs = {"approximate": node.attr("approximate", "none")} if act == "Gelu" else {}
    return base + [helper.make_node(act or "Identity", [src], [dst], **attrs)]


def scalar_initializer(name: str, value: float, dtype) -> object:
    """A 0-d initializer of the graph's element type."""
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)
