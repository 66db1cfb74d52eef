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

from kernel_corpus.bindings import registry
from kernel_corpus.torch_builders import const_ints, need_const


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


def _reshape(T, a: dict, k: list) -> Callable:
    """Reshape with ONNX's 0 (copy the dim, unless allowzero) and -1."""
    shape = need_const(k, 1, "Reshape")
    allowzero = a.get("allowzero", 0)
    return lambda x, s=None: x.reshape([x.shape[i] if d == 0 and not allowzero else d
                                        for i, d in enumerate(shape)])


def _squeeze(T, a: dict, k: list) -> Callable:
    """Squeeze given axes (input since opset 13), or every size-1 axis."""
    axes = const_ints(k, 1, a.get("axes"))
    if axes is None:
        return lambda x: x.squeeze()
    return lambda x, s=None: x.squeeze(tuple(axes))


def _unsqueeze(T, a: dict, k: list) -> Callable:
    """Unsqueeze: axes refer to the output rank, inserted in ascending order."""
    axes = const_ints(k, 1, a.get("axes"))

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
                getattr(lstm, f"{name}_l0{suffix}").copy_(T.from_numpy(np.asarray(value, order="C")))

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


# Ops the passes turn into views or unroll: they are graph-level, not corpus ops, so their builders live here.
# Every corpus op's builder comes with its definition (kernel_corpus: OpDef.torch).
_GRAPH_OPS: dict[str, Callable] = {
    "Identity": lambda T, a, k, n: (lambda x: x), "Reshape": lambda T, a, k, n: _reshape(T, a, k),
    "Squeeze": lambda T, a, k, n: _squeeze(T, a, k), "Unsqueeze": lambda T, a, k, n: _unsqueeze(T, a, k),
    "Flatten": lambda T, a, k, n: _flatten(T, a, k),
}


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
    op = registry.op(node.op_type)
    if node.op_type == "LSTM":
        fn = _lstm(T, a, k, nout, device)
    elif node.op_type in _GRAPH_OPS:
        fn = _GRAPH_OPS[node.op_type](T, a, k, nout)
    elif op is not None and op.torch is not None:
        fn = op.torch(T, a, k, nout)
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
