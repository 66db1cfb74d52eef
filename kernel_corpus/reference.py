"""The truth the kernels are checked against: onnx's ReferenceEvaluator (the ONNX project's own numpy
implementation of the operator specs), run in float64.

A standard op is evaluated as a one-node ONNX model; one of our custom ops (FusedMatMul, LSTMCell, ...) as the
graph of standard ops its `OpDef.equivalent` writes, so no kernel geometry and no hand-written arithmetic of ours
sits between a kernel and its truth. An `OpDef.reference` overrides this where the evaluator falls short
(GatherElements past 64 positions: kernel_corpus/ops/layout.py). The tests cross-check these references against
onnxruntime.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from kernel_corpus.bindings import CUSTOM_DOMAIN, OPSET, NodeInfo, OpDef, Shape, TensorInfo, registry



def run_reference(node: NodeInfo, inputs: list[np.ndarray | None], corpus: Any = None,
                  override: bool = True) -> list[np.ndarray]:
    """Outputs of the node for these inputs (absent inputs are None), in float64 (`override=False`: onnx's
    evaluator even where the op definition has its own reference)."""
    d = (corpus or registry).op(node.op_type)
    if d is None:
        raise KeyError(f"no reference for op type {node.op_type}: the corpus does not define it")
    as64 = [None if x is None else _widened(np.asarray(x)) for x in inputs]
    if d.reference is not None and override:
        return d.reference(node, as64)
    model = node_model(node, d, np.float64, [None if x is None else x.shape for x in as64])
    names = {i.name for i in model.graph.input}
    feeds = {f"x{i}": x for i, x in enumerate(as64) if f"x{i}" in names}
    return [np.asarray(o) for o in _evaluator(model.SerializeToString()).run(None, feeds)]


def _widened(x: np.ndarray) -> np.ndarray:
    """Floating inputs in float64 (the truth is computed wider than the kernels); others as they are."""
    return x.astype(np.float64) if x.dtype.kind == "f" else x


@lru_cache(maxsize=256)
def _evaluator(model_bytes: bytes):
    """One ReferenceEvaluator per distinct model (tests evaluate the same node many times)."""
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(onnx.load_from_string(model_bytes))


def constant_array(value: Any, float_dtype: Any = np.float32) -> np.ndarray:
    """A constant input carried as an attribute: int64 (shapes, axes, sizes), or floats (Clip's bounds, Resize's
    scales) in the model's float type."""
    if np.asarray(value).dtype.kind == "f":
        return np.array(value, dtype=float_dtype)
    return np.array(value, dtype=np.int64)


def constants_as_inputs(d: OpDef, opset: int) -> tuple[str, ...]:
    """The op's constant inputs that are inputs at this opset (ReduceSum's axes became one at 13, the other
    Reduce*'s at 18: before, they are attributes of the same name)."""
    if d.custom:
        return d.constant_inputs
    try:
        formal = {i.name for i in onnx.defs.get_schema(d.op_type, opset).inputs}
    except Exception:  # an op unknown to this onnx: keep the definition's view
        return d.constant_inputs
    return tuple(k for k in d.constant_inputs if k in formal)


def input_names(node: NodeInfo, d: OpDef, float_dtype: Any = np.float32) -> tuple[list[str], list[onnx.TensorProto]]:
    """ONNX input names of the node ('' for absent) and initializers for the constant inputs it carries as
    attributes (d.constant_inputs: inputs 1, 2, ...)."""
    names = [f"x{i}" if t is not None else "" for i, t in enumerate(node.inputs)]
    inits = []
    as_inputs = constants_as_inputs(d, node.opset)
    for pos, key in enumerate(d.constant_inputs, start=1):
        if key not in node.attrs or key not in as_inputs:
            continue
        while len(names) <= pos:
            names.append("")
        names[pos] = key
        inits.append(numpy_helper.from_array(constant_array(node.attrs[key], float_dtype), key))
    while names and not names[-1]:
        names.pop()
    return names, inits


def node_model(node: NodeInfo, d: OpDef, dtype: Any = np.float32, shapes: list[tuple | None] | None = None,
               output_shapes: bool = True) -> onnx.ModelProto:
    """A model computing one node with standard ONNX ops: the node itself, or its custom op's equivalent graph.
    Data inputs are x0, x1, ... of `dtype` (shapes from the node unless given); outputs y0, y1, ... with the node's
    output shapes and types (both left to inference without `output_shapes`); constant inputs become
    initializers."""
    names, inits = input_names(node, d, dtype)
    outs = [f"y{i}" if t is not None else "" for i, t in enumerate(node.outputs)] or ["y0"]
    as_inputs = constants_as_inputs(d, node.opset)
    attrs = {k: v for k, v in node.attrs.items() if k not in as_inputs}
    if d.custom:
        nodes, extra = d.equivalent(node, names, outs, dtype)
        inits += extra
    else:
        nodes = [helper.make_node(node.op_type, names, outs, **attrs)]
    shapes = shapes if shapes is not None else [None if t is None else t.shape for t in node.inputs]

    def elem(t: TensorInfo | None) -> int:
        """ONNX element type of a tensor: floats in `dtype`, others as they are."""
        kind = np.dtype(t.dtype if t is not None else "float32")
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype) if kind.kind == "f" else kind)

    graph = helper.make_graph(
        nodes, f"{node.op_type}-reference",
        [helper.make_tensor_value_info(f"x{i}", elem(node.inputs[i]), list(s)) for i, s in enumerate(shapes)
         if s is not None and i < len(names) and names[i] == f"x{i}"],
        [helper.make_tensor_value_info(o, elem(node.output(i)) if output_shapes else onnx.TensorProto.UNDEFINED,
                                       list(node.outputs[i].shape) if output_shapes else None)
         for i, o in enumerate(outs) if o],
        initializer=inits)
    # a custom op's equivalent graph is ours: written at the opset its helpers use, whatever the model's
    opset = max(node.opset, OPSET) if d.custom else node.opset
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def output_types(node: NodeInfo, d: OpDef) -> list[str]:
    """The node's output element types by ONNX type inference (float32 where it says float)."""
    inferred = onnx.shape_inference.infer_shapes(node_model(node, d, output_shapes=False), strict_mode=True)
    types = [o.type.tensor_type.elem_type for o in inferred.graph.output]
    return [np.dtype(helper.tensor_dtype_to_np_dtype(t)).name if t else "float32" for t in types]


def output_shapes(node: NodeInfo, d: OpDef) -> list[tuple[int, ...]]:
    """The node's output shapes by ONNX shape inference (strict) of its model; where inference leaves a shape
    unknown (GroupNormalization has no inference function), by evaluating the reference on zeros."""
    inferred = onnx.shape_inference.infer_shapes(node_model(node, d, output_shapes=False), strict_mode=True)
    outs = inferred.graph.output
    if all(o.type.tensor_type.HasField("shape") for o in outs):
        return [tuple(dim.dim_value for dim in o.type.tensor_type.shape.dim) for o in outs]
    zeros = [None if t is None else np.zeros(t.shape, dtype=t.dtype) for t in node.inputs]
    for pos, key in enumerate(d.constant_inputs, start=1):
        if key in node.attrs and pos < len(zeros):
            zeros[pos] = None
    return [tuple(np.shape(y)) for y in run_reference(node, zeros)]


def shape_node(d: OpDef, s: Shape, name: str | None = None) -> NodeInfo:
    """The NodeInfo of one reference shape of an op: float32 inputs (unless the shape names another type), constant
    inputs as int64 tensors (floats: float32) at their positions, output shapes by ONNX shape inference of
    the node (or of a custom op's equivalent graph)."""
    inputs = [None if sh is None else TensorInfo(tuple(sh), s.dtypes.get(i, "float32"))
              for i, sh in enumerate(s.inputs)]
    for pos, key in enumerate(d.constant_inputs, start=1):
        if key in s.attrs and key in constants_as_inputs(d, s.opset):
            while len(inputs) <= pos:
                inputs.append(None)
            value = constant_array(s.attrs[key])
            inputs[pos] = TensorInfo(value.shape, value.dtype.name)
    probe = NodeInfo(d.op_type, name or s.label or s.key(d.op_type), inputs,
                     [TensorInfo((1,))] * s.outputs, dict(s.attrs), s.opset)
    outs = output_shapes(probe, d)
    types = output_types(probe, d) if not d.custom else ["float32"] * len(outs)
    return NodeInfo(d.op_type, probe.name, inputs, [TensorInfo(o, t) for o, t in zip(outs, types)], dict(s.attrs),
                    s.opset)


__all__ = ["CUSTOM_DOMAIN", "input_names", "node_model", "output_shapes", "run_reference", "shape_node"]
