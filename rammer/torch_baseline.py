"""PyTorch baselines of `rammer bench`: an ONNX graph evaluated node by node with one torch op per node
(eager), which torch.compile can also take. torch is imported lazily: only the bench needs it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper


# Each builder gets (torch, attrs, constant input values) and returns the callable applied to the node's
# runtime inputs. Shape-like inputs (Reshape shape, Slice bounds, axes, split sizes) are read once here,
# so the callables hold plain Python ints: no device-to-host reads per run, static for torch.compile.
def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """Node attributes as Python values (strings decoded)."""
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _ints(k: list, i: int, default: list[int] | None = None) -> list[int] | None:
    """Constant int input i as a list (None/absent gives the default)."""
    if i < len(k) and k[i] is not None:
        return [int(v) for v in np.asarray(k[i]).reshape(-1)]
    return default


def _need_const(k: list, i: int, op: str) -> list[int]:
    """A shape-like input that must be a constant for the interpreter."""
    v = _ints(k, i)
    if v is None:
        raise ValueError(f"{op}: input {i} must be a constant (initializer) for the torch interpreter")
    return v


def _spatial_pads(a: dict, rank: int, op: str) -> tuple[list[int], list[int] | None]:
    """ONNX pads [b1.., e1..] as torch's symmetric padding, or F.pad's list when asymmetric."""
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        raise ValueError(f"{op}: auto_pad={a['auto_pad']} is not supported by the torch interpreter")
    pads = a.get("pads", [0] * 2 * rank)
    begin, end = pads[:rank], pads[rank:]
    if begin == end:
        return begin, None
    torch_pad = []
    for b, e in zip(reversed(begin), reversed(end)):
        torch_pad += [b, e]
    return [0] * rank, torch_pad


def _conv(T, a: dict, k: list) -> Callable:
    """Conv (1-3 spatial dims, groups, dilations, asymmetric pads)."""
    F = T.nn.functional
    if "kernel_shape" in a:
        r = len(a["kernel_shape"])
    elif len(k) > 1 and k[1] is not None:
        r = k[1].ndim - 2
    else:
        raise ValueError("Conv: needs kernel_shape or constant weights for the torch interpreter")
    pad, extra = _spatial_pads(a, r, "Conv")
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[r]
    strides, dilations, group = a.get("strides", [1] * r), a.get("dilations", [1] * r), a.get("group", 1)

    def f(x, w, b=None):
        return conv(F.pad(x, extra) if extra else x, w, b, strides, pad, dilations, group)
    return f


def _pool(kind: str) -> Callable:
    """MaxPool / AveragePool builder over 1-3 spatial dims."""
    def build(T, a: dict, k: list) -> Callable:
        F = T.nn.functional
        ks = a["kernel_shape"]
        r = len(ks)
        pad, extra = _spatial_pads(a, r, kind)
        strides, ceil = a.get("strides", [1] * r), bool(a.get("ceil_mode", 0))
        include = bool(a.get("count_include_pad", 0))
        if kind == "AveragePool" and extra and not include:
            raise ValueError("AveragePool: asymmetric pads with count_include_pad=0 are not supported")
        if kind == "MaxPool" and any(d != 1 for d in a.get("dilations", [1] * r)):
            raise ValueError("MaxPool: dilations are not supported by the torch interpreter")

        def f(x):
            if extra:
                x = F.pad(x, extra, value=-math.inf if kind == "MaxPool" else 0.0)
            if kind == "MaxPool":
                return getattr(F, f"max_pool{r}d")(x, ks, strides, pad, ceil_mode=ceil)
            return getattr(F, f"avg_pool{r}d")(x, ks, strides, pad, ceil_mode=ceil, count_include_pad=include)
        return f
    return build


def _gemm(T, a: dict, k: list) -> Callable:
    """alpha * A' B' + beta * C."""
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)

    def f(x, w, c=None):
        x = x.t() if a.get("transA", 0) else x
        w = w.t() if a.get("transB", 0) else w
        y = T.matmul(x, w) * alpha if alpha != 1.0 else T.matmul(x, w)
        return y if c is None else y + (c * beta if beta != 1.0 else c)
    return f


def _reshape(T, a: dict, k: list) -> Callable:
    """Reshape with ONNX's 0 (copy the dim, unless allowzero) and -1."""
    shape = _need_const(k, 1, "Reshape")
    allowzero = a.get("allowzero", 0)
    return lambda x, s=None: x.reshape([x.shape[i] if d == 0 and not allowzero else d
                                        for i, d in enumerate(shape)])


def _slice(T, a: dict, k: list) -> Callable:
    """Slice with constant starts/ends/axes/steps (positive steps)."""
    starts, ends = _need_const(k, 1, "Slice"), _need_const(k, 2, "Slice")
    axes = _ints(k, 3, list(range(len(starts))))
    steps = _ints(k, 4, [1] * len(starts))
    if any(s <= 0 for s in steps):
        raise ValueError("Slice: only positive steps are supported by the torch interpreter")

    def f(x, *rest):
        index = [slice(None)] * x.dim()
        for s, e, ax, st in zip(starts, ends, axes, steps):
            index[ax] = slice(s, e, st)
        return x[tuple(index)]
    return f


def _split(T, a: dict, k: list, nout: int) -> Callable:
    """Split by constant sizes, num_outputs (opset 18) or evenly by the number of outputs."""
    axis, sizes = a.get("axis", 0), _ints(k, 1)

    def f(x, *rest):
        n = x.shape[axis]
        if sizes is not None:
            parts = sizes
        else:
            step = -(-n // a.get("num_outputs", nout))
            parts = [min(step, n - i) for i in range(0, n, step)]
        return tuple(T.split(x, parts, dim=axis))
    return f


def _squeeze(T, a: dict, k: list) -> Callable:
    """Squeeze given axes (input since opset 13), or every size-1 axis."""
    axes = _ints(k, 1, a.get("axes"))
    if axes is None:
        return lambda x: x.squeeze()
    return lambda x, s=None: x.squeeze(tuple(axes))


def _unsqueeze(T, a: dict, k: list) -> Callable:
    """Unsqueeze: axes refer to the output rank, inserted in ascending order."""
    axes = _ints(k, 1, a.get("axes"))

    def f(x, s=None):
        rank = x.dim() + len(axes)
        for ax in sorted(v % rank for v in axes):
            x = x.unsqueeze(ax)
        return x
    return f


def _flatten(T, a: dict, k: list) -> Callable:
    """Flatten to 2-D around axis."""
    def f(x):
        axis = a.get("axis", 1) % (x.dim() + 1) if x.dim() else 0
        return x.reshape(math.prod(x.shape[:axis]), -1)
    return f


def _layer_norm(T, a: dict, k: list) -> Callable:
    """LayerNormalization over axis..last."""
    eps, axis = a.get("epsilon", 1e-5), a.get("axis", -1)

    def f(x, scale, bias=None):
        return T.nn.functional.layer_norm(x, x.shape[axis % x.dim():], scale, bias, eps)
    return f


def _batch_norm(T, a: dict, k: list) -> Callable:
    """Inference BatchNormalization."""
    eps = a.get("epsilon", 1e-5)
    return lambda x, s, b, m, v: T.nn.functional.batch_norm(x, m, v, s, b, False, 0.0, eps)


def _lstm(T, a: dict, k: list, nout: int, device: str) -> Callable:
    """ONNX LSTM (forward, reverse or bidirectional; default activations) as a cuDNN-backed nn.LSTM."""
    if a.get("layout", 0) or a.get("clip") is not None or a.get("input_forget", 0):
        raise ValueError("LSTM: layout=1, clip and input_forget are not supported by the torch interpreter")
    if a.get("activations", ["Sigmoid", "Tanh", "Tanh"] * 2)[:3] != ["Sigmoid", "Tanh", "Tanh"]:
        raise ValueError("LSTM: only the default activations are supported by the torch interpreter")
    if len(k) > 4 and k[4] is not None or len(k) > 7 and k[7] is not None:
        raise ValueError("LSTM: sequence_lens and peepholes are not supported by the torch interpreter")
    w, r = k[1], k[2]
    if w is None or r is None:
        raise ValueError("LSTM: W and R must be constants for the torch interpreter")
    direction = a.get("direction", "forward")
    hidden = r.shape[-1]
    b = k[3] if len(k) > 3 and k[3] is not None else np.zeros((w.shape[0], 8 * hidden), np.float32)
    lstm = T.nn.LSTM(w.shape[2], hidden, bidirectional=direction == "bidirectional").to(device)
    order = np.concatenate([np.arange(hidden) + g * hidden for g in (0, 2, 3, 1)])  # iofc -> ifco (i f g o)
    with T.no_grad():
        for d, suffix in enumerate(["", "_reverse"][: w.shape[0]]):
            for name, value in [("weight_ih", w[d][order]), ("weight_hh", r[d][order]),
                                ("bias_ih", b[d][:4 * hidden][order]), ("bias_hh", b[d][4 * hidden:][order])]:
                getattr(lstm, f"{name}_l0{suffix}").copy_(T.from_numpy(np.ascontiguousarray(value)))

    def f(x, *rest):
        rest = list(rest) + [None] * (6 - len(rest))
        h0, c0 = rest[4], rest[5]
        if direction == "reverse":
            x = x.flip(0)
        state = None
        if h0 is not None or c0 is not None:
            zeros = x.new_zeros((w.shape[0], x.shape[1], hidden))
            state = (h0 if h0 is not None else zeros, c0 if c0 is not None else zeros)
        y, (hn, cn) = lstm(x, state)
        if direction == "reverse":
            y = y.flip(0)
        y = y.reshape(y.shape[0], y.shape[1], w.shape[0], hidden).permute(0, 2, 1, 3)
        return (y, hn, cn)[:nout]
    f.module = lstm
    return f


def _simple(fn_name: str) -> Callable:
    """Ops that map to one torch function of their runtime inputs."""
    return lambda T, a, k: getattr(T, fn_name)


_BUILDERS: dict[str, Callable] = {
    "Add": _simple("add"), "Sub": _simple("sub"), "Mul": _simple("mul"), "MatMul": _simple("matmul"),
    "Relu": _simple("relu"), "Sigmoid": _simple("sigmoid"), "Tanh": _simple("tanh"),
    "Identity": lambda T, a, k: (lambda x: x),
    "Gelu": lambda T, a, k: (lambda x: T.nn.functional.gelu(x, approximate=a.get("approximate", "none"))),
    "Softmax": lambda T, a, k: (lambda x: T.softmax(x, dim=a.get("axis", -1))),
    "Concat": lambda T, a, k: (lambda *xs: T.cat(xs, dim=a["axis"])),
    "Transpose": lambda T, a, k: (lambda x: x.permute(a.get("perm", list(range(x.dim()))[::-1]))),
    "GlobalAveragePool": lambda T, a, k: (lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True)),
    "Conv": _conv, "MaxPool": _pool("MaxPool"), "AveragePool": _pool("AveragePool"), "Gemm": _gemm,
    "Reshape": _reshape, "Slice": _slice, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze, "Flatten": _flatten,
    "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
}
_MULTI_OUTPUT = {"Split": _split}


@dataclass
class TorchNode:
    """One ONNX node bound to a torch callable."""

    inputs: list[str]
    outputs: list[str]
    fn: Callable


def bind_node(T, node: onnx.NodeProto, consts: dict[str, np.ndarray], device: str) -> TorchNode:
    """Choose and configure the torch callable for one node (clear error for anything unsupported)."""
    a = _attrs(node)
    ins = list(node.input)
    while ins and not ins[-1]:
        ins.pop()
    k = [consts.get(n) if n else None for n in ins]
    nout = len(node.output)
    if node.domain not in ("", "ai.onnx"):
        raise ValueError(f"node {node.name!r}: domain {node.domain!r} is not supported by the torch interpreter")
    if node.op_type == "LSTM":
        fn = _lstm(T, a, k, nout, device)
    elif node.op_type in _MULTI_OUTPUT:
        fn = _MULTI_OUTPUT[node.op_type](T, a, k, nout)
    elif node.op_type in _BUILDERS:
        if node.op_type == "MaxPool" and nout > 1:
            raise ValueError(f"node {node.name!r}: MaxPool Indices output is not supported")
        fn = _BUILDERS[node.op_type](T, a, k)
    else:
        raise ValueError(f"node {node.name!r}: op {node.op_type} is not supported by the torch interpreter")
    return TorchNode(ins, list(node.output), fn)


class TorchGraph:
    """Factory of the interpreter module (a torch.nn.Module subclass made when torch is first needed)."""

    @staticmethod
    def build(model: onnx.ModelProto, device: str = "cpu"):
        """nn.Module whose forward(*graph inputs) evaluates the ONNX graph node by node on `device`."""
        import torch
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if opset < 13:
            raise ValueError(f"ONNX opset {opset} < 13 is not supported by the torch interpreter")
        return _module_class(torch)(model, device)


def _module_class(T):
    """The nn.Module subclass (defined here because torch is imported lazily)."""

    class OnnxModule(T.nn.Module):
        """Evaluates an ONNX graph with one torch op per node; weights are buffers, LSTMs submodules."""

        def __init__(self, model: onnx.ModelProto, device: str) -> None:
            super().__init__()
            g = model.graph
            consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
            self.input_names = [v.name for v in g.input if v.name not in consts]
            self.output_names = [v.name for v in g.output]
            self.buffer_names: dict[str, str] = {}
            for i, (name, value) in enumerate(consts.items()):
                self.register_buffer(f"c{i}", T.from_numpy(np.array(value)).to(device), persistent=False)
                self.buffer_names[name] = f"c{i}"
            self.nodes = [bind_node(T, n, consts, device) for n in g.node]
            self.lstms = T.nn.ModuleList([n.fn.module for n in self.nodes if hasattr(n.fn, "module")])

        def forward(self, *inputs):
            env = {name: getattr(self, buf) for name, buf in self.buffer_names.items()}
            env.update(zip(self.input_names, inputs))
            for node in self.nodes:
                out = node.fn(*[env[n] if n else None for n in node.inputs])
                outs = out if isinstance(out, tuple) else (out,)
                for name, value in zip(node.outputs, outs):
                    if name:
                        env[name] = value
            return tuple(env[n] for n in self.output_names)

    return OnnxModule
