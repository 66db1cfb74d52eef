"""Graph builder for the model zoo: ONNX nodes with shape tracking and seeded random weights."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

Shape = tuple[int, ...]
PRODUCER = "rammer-zoo"  # the models' producer_name: `rammer zoo -o` recognises its own earlier output by it


def conv_out(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int) -> int:
    """Output length of a convolution or pooling window along one axis (floor mode), as ONNX defines it."""
    return (size + pad_begin + pad_end - kernel) // stride + 1


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    """Accept a scalar or an (h, w) pair, so callers write k=3 or k=(1, 7)."""
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


@dataclass
class GraphBuilder:
    """Accumulates nodes, initializers and known shapes; every tensor name it returns has a tracked shape."""

    name: str
    seed: int = 0
    opset: int = 17
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    outputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    shapes: dict[str, Shape] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    # ---- names, constants, weights -------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        """Unique tensor/node name so repeated blocks never collide."""
        n = self.counts.get(prefix, 0)
        self.counts[prefix] = n + 1
        return f"{prefix}_{n}"

    def const(self, value: np.ndarray, prefix: str = "c") -> str:
        """Add an initializer (weights, shapes, axes) and return its name."""
        name = self.fresh(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value, order="C"), name))
        self.shapes[name] = tuple(value.shape)
        return name

    def ints(self, values: list[int], prefix: str = "i") -> str:
        """An int64 1-D constant, the form ONNX wants for shapes, axes and split sizes."""
        return self.const(np.asarray(values, dtype=np.int64), prefix)

    def normal(self, shape: Shape, std: float, prefix: str) -> str:
        """Seeded Gaussian float32 weights."""
        return self.const(self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std), prefix)

    def uniform(self, shape: Shape, low: float, high: float, prefix: str) -> str:
        """Seeded uniform float32 weights."""
        u = self.rng.random(shape, dtype=np.float32)
        return self.const(u * np.float32(high - low) + np.float32(low), prefix)

    def he(self, shape: Shape, fan_in: int, prefix: str) -> str:
        """He-scaled weights keep activations of deep ReLU stacks near unit scale."""
        return self.normal(shape, math.sqrt(2.0 / max(fan_in, 1)), prefix)

    # ---- graph interface -----------------------------------------------------------------------------
    def input(self, name: str, shape: Shape) -> str:
        """Declare a float32 graph input of static shape."""
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.shapes[name] = tuple(shape)
        return name

    def output(self, x: str, name: str) -> str:
        """Expose x as a graph output called name (through an Identity so the name is stable)."""
        y = self.op("Identity", [x], self.shapes[x], out=name)
        self.outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, list(self.shapes[y])))
        return y

    def op(self, op_type: str, inputs: list[str], shape: Shape, out: str | None = None, **attrs) -> str:
        """Append a single-output node whose output shape the caller computed."""
        return self.multi(op_type, inputs, [shape], outs=[out] if out else None, **attrs)[0]

    def multi(self, op_type: str, inputs: list[str], shapes: list[Shape], outs: list[str] | None = None,
              **attrs) -> list[str]:
        """Append a node with several outputs (Split, LSTM)."""
        base = op_type.lower()
        outs = outs or [self.fresh(base) for _ in shapes]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.fresh(f"n_{base}"), **attrs))
        for o, s in zip(outs, shapes):
            self.shapes[o] = tuple(int(d) for d in s)
        return outs

    def model(self) -> onnx.ModelProto:
        """Assemble the ModelProto at this builder's opset."""
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                              producer_name=PRODUCER)
        m.ir_version = 8 if self.opset <= 17 else 9
        return m

    # ---- elementwise and shape ops -------------------------------------------------------------------
    def unary(self, op_type: str, x: str, **attrs) -> str:
        """Relu, Sigmoid, Tanh, Gelu, Softmax, Identity: output shape = input shape."""
        return self.op(op_type, [x], self.shapes[x], **attrs)

    def relu(self, x: str) -> str:
        """The most common activation, spelled short."""
        return self.unary("Relu", x)

    def binary(self, op_type: str, a: str, b: str) -> str:
        """Add/Mul/Sub with numpy broadcasting of the tracked shapes."""
        shape = np.broadcast_shapes(self.shapes[a], self.shapes[b])
        return self.op(op_type, [a, b], shape)

    def add(self, a: str, b: str) -> str:
        """Residual and gate sums."""
        return self.binary("Add", a, b)

    def add_all(self, xs: list[str]) -> str:
        """Sum of several tensors as a chain of Adds."""
        acc = xs[0]
        for x in xs[1:]:
            acc = self.add(acc, x)
        return acc

    def concat(self, xs: list[str], axis: int = 1) -> str:
        """Concatenate along axis (channels by default); a single tensor is returned unchanged."""
        if len(xs) == 1:
            return xs[0]
        shape = list(self.shapes[xs[0]])
        shape[axis] = sum(self.shapes[x][axis] for x in xs)
        return self.op("Concat", xs, tuple(shape), axis=axis)

    def split(self, x: str, sizes: list[int], axis: int) -> list[str]:
        """Split x into pieces of the given sizes along axis."""
        shapes = []
        for s in sizes:
            shape = list(self.shapes[x])
            shape[axis] = s
            shapes.append(tuple(shape))
        return self.multi("Split", [x, self.ints(sizes, "split")], shapes, axis=axis)

    def slice(self, x: str, starts: list[int], ends: list[int], axes: list[int]) -> str:
        """Static Slice with unit steps."""
        shape = list(self.shapes[x])
        for s, e, a in zip(starts, ends, axes):
            e = min(e, shape[a])
            shape[a] = max(0, e - s)
        ins = [x, self.ints(starts, "starts"), self.ints(ends, "ends"), self.ints(axes, "axes")]
        return self.op("Slice", ins, tuple(shape))

    def reshape(self, x: str, shape: Shape) -> str:
        """Reshape to a fully static shape."""
        if math.prod(shape) != math.prod(self.shapes[x]):
            raise ValueError(f"reshape {self.shapes[x]} -> {shape}: element counts differ")
        return self.op("Reshape", [x, self.ints(list(shape), "shape")], shape)

    def transpose(self, x: str, perm: list[int]) -> str:
        """Permute axes."""
        shape = tuple(self.shapes[x][p] for p in perm)
        return self.op("Transpose", [x], shape, perm=perm)

    def flatten(self, x: str) -> str:
        """Flatten to [N, rest] before a classifier."""
        s = self.shapes[x]
        return self.op("Flatten", [x], (s[0], math.prod(s[1:])), axis=1)

    def squeeze(self, x: str, axis: int) -> str:
        """Drop one size-1 axis (e.g. LSTM's direction axis)."""
        shape = list(self.shapes[x])
        if shape[axis] != 1:
            raise ValueError(f"squeeze axis {axis} of {tuple(shape)}")
        del shape[axis]
        return self.op("Squeeze", [x, self.ints([axis], "axes")], tuple(shape))

    def unsqueeze(self, x: str, axis: int) -> str:
        """Insert one size-1 axis."""
        shape = list(self.shapes[x])
        shape.insert(axis, 1)
        return self.op("Unsqueeze", [x, self.ints([axis], "axes")], tuple(shape))

    # ---- layers --------------------------------------------------------------------------------------
    def conv(self, x: str, cout: int, k: int | tuple[int, int] = 1, stride: int | tuple[int, int] = 1,
             pad: int | tuple[int, int] = 0, group: int = 1, bias: bool = True) -> str:
        """2-D convolution (group = cin gives depthwise) with He weights."""
        n, cin, h, w = self.shapes[x]
        (kh, kw), (sh, sw), (ph, pw) = _pair(k), _pair(stride), _pair(pad)
        if cin % group or cout % group:
            raise ValueError(f"conv channels {cin}->{cout} not divisible by group {group}")
        wt = self.he((cout, cin // group, kh, kw), cin // group * kh * kw, "w")
        ins = [x, wt] + ([self.normal((cout,), 0.01, "b")] if bias else [])
        shape = (n, cout, conv_out(h, kh, sh, ph, ph), conv_out(w, kw, sw, pw, pw))
        return self.op("Conv", ins, shape, kernel_shape=[kh, kw], strides=[sh, sw], pads=[ph, pw, ph, pw],
                       group=group)

    def bn(self, x: str) -> str:
        """Inference BatchNormalization with random but well-conditioned statistics."""
        c = self.shapes[x][1]
        scale = self.uniform((c,), 0.5, 1.0, "bn_s")
        bias = self.normal((c,), 0.05, "bn_b")
        mean = self.normal((c,), 0.05, "bn_m")
        var = self.uniform((c,), 0.8, 1.2, "bn_v")
        return self.op("BatchNormalization", [x, scale, bias, mean, var], self.shapes[x], epsilon=1e-5)

    def conv_bn(self, x: str, cout: int, k=1, stride=1, pad=0, group: int = 1) -> str:
        """Conv (no bias) + BN, the unit of every modern CNN here."""
        return self.bn(self.conv(x, cout, k, stride, pad, group, bias=False))

    def conv_bn_relu(self, x: str, cout: int, k=1, stride=1, pad=0, group: int = 1) -> str:
        """Conv + BN + ReLU."""
        return self.relu(self.conv_bn(x, cout, k, stride, pad, group))

    def pool(self, op_type: str, x: str, k: int, stride: int, pad: int = 0) -> str:
        """MaxPool / AveragePool with a square window and symmetric padding (count_include_pad = 0)."""
        n, c, h, w = self.shapes[x]
        shape = (n, c, conv_out(h, k, stride, pad, pad), conv_out(w, k, stride, pad, pad))
        return self.op(op_type, [x], shape, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)

    def global_pool(self, x: str) -> str:
        """GlobalAveragePool to [N, C, 1, 1]."""
        n, c = self.shapes[x][:2]
        return self.op("GlobalAveragePool", [x], (n, c, 1, 1))

    def gemm(self, x: str, nout: int) -> str:
        """Fully connected layer y = x W^T + b on [N, K] (the transB form frameworks export)."""
        n, k = self.shapes[x]
        w = self.he((nout, k), k, "fc_w")
        b = self.normal((nout,), 0.01, "fc_b")
        return self.op("Gemm", [x, w, b], (n, nout), transB=1)

    def classifier(self, x: str, classes: int) -> str:
        """Global average pool, flatten, fully connected: the head of the CNNs."""
        return self.gemm(self.flatten(self.global_pool(x)), classes)

    def matmul(self, x: str, nout: int, std: float | None = None) -> str:
        """x @ W on the last axis with a constant W of shape [K, nout]."""
        k = self.shapes[x][-1]
        w = self.normal((k, nout), std if std is not None else 1.0 / math.sqrt(k), "mm_w")
        return self.op("MatMul", [x, w], self.shapes[x][:-1] + (nout,))

    def linear(self, x: str, nout: int, std: float | None = None) -> str:
        """MatMul + bias Add on the last axis (transformer projections)."""
        return self.add(self.matmul(x, nout, std), self.normal((nout,), 0.01, "lin_b"))

    def layer_norm(self, x: str) -> str:
        """LayerNormalization over the last axis."""
        d = self.shapes[x][-1]
        scale = self.uniform((d,), 0.8, 1.2, "ln_s")
        bias = self.normal((d,), 0.02, "ln_b")
        return self.op("LayerNormalization", [x, scale, bias], self.shapes[x], axis=-1, epsilon=1e-5)

    def lstm(self, x: str, hidden: int, init: tuple[str, str] | None = None,
             states: bool = False) -> tuple[str, str | None, str | None]:
        """One forward ONNX LSTM layer over [T, N, I]; returns (Y as [T, N, H], Y_h, Y_c) where asked."""
        t, n, i = self.shapes[x]
        bound = 1.0 / math.sqrt(hidden)
        w = self.uniform((1, 4 * hidden, i), -bound, bound, "lstm_w")
        r = self.uniform((1, 4 * hidden, hidden), -bound, bound, "lstm_r")
        b = self.uniform((1, 8 * hidden), -bound, bound, "lstm_b")
        ins = [x, w, r, b] + (["", init[0], init[1]] if init else [])
        shapes = [(t, 1, n, hidden)] + ([(1, n, hidden)] * 2 if states else [])
        outs = self.multi("LSTM", ins, shapes, hidden_size=hidden)
        y = self.squeeze(outs[0], 1)
        return (y, outs[1], outs[2]) if states else (y, None, None)
