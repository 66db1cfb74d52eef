"""A small numpy evaluator of DFG nodes: constant folding runs it and tests execute passed graphs with it.
Ops the corpus defines use the corpus's references (kernel_corpus.reference: onnx's ReferenceEvaluator); the
shape and constant ops only the front end meets are evaluated here; any other standard ONNX op (Range, Equal,
Where on shapes, ...) by onnx's ReferenceEvaluator on the node itself."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
from kernel_corpus.bindings import registry
from kernel_corpus.reference import run_reference
from onnx import helper

from .graph import Graph, Node, SchedulerError
from .workload import node_info

Arrays = list  # list[np.ndarray | None]: inputs in ONNX order, None for an omitted optional input
OpFn = Callable[[Node, Arrays], list[np.ndarray]]
OPS: dict[str, OpFn] = {}


def op(*names: str) -> Callable[[OpFn], OpFn]:
    """Register an evaluator function under one or more op types."""
    def register(fn: OpFn) -> OpFn:
        for name in names:
            OPS[name] = fn
        return fn
    return register


def can_evaluate(op_type: str) -> bool:
    """True when this evaluator, the corpus reference or onnx's ReferenceEvaluator knows the op."""
    return op_type in OPS or registry.op(op_type) is not None or standard_op(op_type)


def standard_op(op_type: str) -> bool:
    """An op of the default ONNX domain that onnx's ReferenceEvaluator implements (not control flow)."""
    from onnx.defs import has
    return "." not in op_type and op_type not in CONTROL_FLOW and has(op_type)


CONTROL_FLOW = ("If", "Loop", "Scan", "SequenceMap")


def evaluate(g: Graph, node: Node, inputs: Arrays) -> list[np.ndarray]:
    """Outputs of one node on concrete inputs, or SchedulerError when no evaluator has the op."""
    if node.op_type in OPS:
        return OPS[node.op_type](node, inputs)
    if registry.op(node.op_type) is not None:
        return run_reference(node_info(g, node), inputs)
    if standard_op(node.op_type):
        return evaluate_standard(node, inputs, g.opset)
    raise SchedulerError(f"numpy evaluator has no {node.op_type} (node '{node.name}')")


def evaluate_standard(node: Node, inputs: Arrays, opset: int) -> list[np.ndarray]:
    """One standard ONNX node run by onnx's ReferenceEvaluator (its attributes turned back into protos)."""
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    attrs = {k: numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v for k, v in node.attrs.items()}
    outs = [f"y{i}" if o else f"unused{i}" for i, o in enumerate(node.outputs)]
    proto = helper.make_node(node.op_type, names, outs, **attrs)
    try:
        results = ReferenceEvaluator(proto, opsets={"": opset}).run(
            None, {n: x for n, x in zip(names, inputs) if n})
    except Exception as exc:  # the evaluator raises many types for inputs it rejects
        raise SchedulerError(f"cannot evaluate {node.op_type} node '{node.name}': {str(exc).splitlines()[0]}") \
            from None
    return [np.asarray(r) for r in results]


def run_graph(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Execute a DFG node by node (aliases read their base buffer) and return the graph outputs."""
    buffers: dict[str, np.ndarray] = {k: np.asarray(v, order="C") for k, v in graph.weights.items()}
    for name in graph.inputs:
        if name not in feeds:
            raise SchedulerError(f"no value fed for graph input '{name}'")
        buffers[name] = np.asarray(feeds[name], dtype=graph.tensors[name].dtype, order="C")

    def read(name: str) -> np.ndarray | None:
        if not name:
            return None
        view = graph.buffer_of(name)
        return view.read(buffers[view.base].reshape(-1), graph.tensors[name].shape)

    for node in graph.nodes:
        results = evaluate(graph, node, [read(n) for n in node.inputs])
        for out, value in zip(node.outputs, results):
            if out:
                t = graph.tensors[out]
                value = np.asarray(value).astype(t.dtype).reshape(t.shape)
                if out in graph.aliases:  # the node writes into another buffer, through its view
                    view = graph.buffer_of(out)
                    base = graph.tensors[view.base]
                    flat = buffers.setdefault(view.base, np.zeros(base.shape, base.dtype)).reshape(-1)
                    view.read(flat, t.shape, writeable=True)[...] = value
                else:
                    buffers[out] = np.asarray(value, order="C")
    return {name: read(name) for name in graph.outputs}


def attr_axes(node: Node, inputs: Arrays, position: int) -> list[int] | None:
    """Axes given as an attribute (old opsets) or as an optional input (new opsets)."""
    if len(inputs) > position and inputs[position] is not None:
        return [int(a) for a in inputs[position].reshape(-1)]
    axes = node.attrs.get("axes")
    return None if axes is None else [int(a) for a in axes]


@op("Constant")
def _constant(node: Node, x: Arrays) -> list[np.ndarray]:
    """Constant: the value attribute in whichever form the exporter used."""
    a = node.attrs
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in a:
            return [np.array(a[key], dtype=dtype)]
    if "value" in a:
        return [np.asarray(a["value"])]
    raise SchedulerError(f"Constant node '{node.name}' has no supported value attribute")


@op("Identity", "Dropout")
def _identity(node: Node, x: Arrays) -> list[np.ndarray]:
    """Identity, and Dropout at inference: the input unchanged."""
    return [x[0]]


@op("Shape")
def _shape(node: Node, x: Arrays) -> list[np.ndarray]:
    """Shape (with opset-15 start/end) of a static tensor."""
    dims = np.array(x[0].shape, dtype=np.int64)
    return [dims[node.attrs.get("start", 0):node.attrs.get("end", len(dims))]]


@op("Gather")
def _gather(node: Node, x: Arrays) -> list[np.ndarray]:
    """Gather along one axis: index arithmetic on shapes."""
    return [np.take(x[0], x[1].astype(np.int64), axis=node.attrs.get("axis", 0))]


@op("Reshape")
def _reshape(node: Node, x: Arrays) -> list[np.ndarray]:
    """Reshape with ONNX's 0 (copy the dim) and -1 (infer) entries."""
    shape = [int(d) for d in x[1]]
    if not node.attrs.get("allowzero", 0):
        shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x[0].reshape(shape)]


@op("Flatten")
def _flatten(node: Node, x: Arrays) -> list[np.ndarray]:
    """Flatten to 2-D at `axis`."""
    axis = node.attrs.get("axis", 1)
    axis = axis + x[0].ndim if axis < 0 else axis
    return [x[0].reshape(int(np.prod(x[0].shape[:axis], dtype=np.int64)), -1)]


@op("Unsqueeze")
def _unsqueeze(node: Node, x: Arrays) -> list[np.ndarray]:
    """Unsqueeze: axes from the attribute (old opsets) or the input (opset 13+)."""
    axes = attr_axes(node, x, 1) or []
    rank = x[0].ndim + len(axes)
    out = x[0]
    for a in sorted(a % rank for a in axes):
        out = np.expand_dims(out, a)
    return [out]


@op("Squeeze")
def _squeeze(node: Node, x: Arrays) -> list[np.ndarray]:
    """Squeeze the given axes, or every unit axis."""
    axes = attr_axes(node, x, 1)
    return [np.squeeze(x[0], axis=None if axes is None else tuple(a % x[0].ndim for a in axes))]


@op("Cast")
def _cast(node: Node, x: Arrays) -> list[np.ndarray]:
    """Cast to the ONNX element type `to`."""
    return [x[0].astype(helper.tensor_dtype_to_np_dtype(node.attrs["to"]))]


@op("ConstantOfShape")
def _constant_of_shape(node: Node, x: Arrays) -> list[np.ndarray]:
    """ConstantOfShape: a filled tensor of a computed shape."""
    fill = np.asarray(node.attrs.get("value", np.zeros(1, np.float32))).reshape(-1)
    return [np.full([int(d) for d in x[0]], fill[0], dtype=fill.dtype)]


@op("ReduceMean")
def _reduce_mean(node: Node, x: Arrays) -> list[np.ndarray]:
    """ReduceMean over the given axes (all when none)."""
    axes = attr_axes(node, x, 1)
    keep = bool(node.attrs.get("keepdims", 1))
    return [x[0].mean(axis=None if axes is None else tuple(axes), keepdims=keep)]


UNARY = {"Sqrt": np.sqrt, "Exp": np.exp, "Neg": np.negative, "Abs": np.abs,
         "Erf": np.vectorize(math.erf, otypes=[np.float64])}


@op(*UNARY)
def _unary(node: Node, x: Arrays) -> list[np.ndarray]:
    """Elementwise math the corpus has no kernel for (only folded or evaluated in tests)."""
    return [UNARY[node.op_type](x[0])]


@op("Pow")
def _pow(node: Node, x: Arrays) -> list[np.ndarray]:
    """Pow, computed in float64."""
    return [np.power(x[0].astype(np.float64), x[1])]
