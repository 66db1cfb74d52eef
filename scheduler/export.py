"""The scheduler's graph written back as ONNX (`rammer build --dump-after PASS`): for reading in Netron, and for
running in onnxruntime while it holds standard ops only.

Our fused ops (FusedMatMul, LSTMCell, ...) go in the custom domain kernel_corpus.bindings.CUSTOM_DOMAIN. A view
(a tensor the passes made an alias of another buffer) becomes standard ops reading its base: a Reshape when it
covers the whole base, else Reshape to 1-D, Slice [offset, offset + size), Reshape to its shape; a strided view a
GatherND of its elements' flat positions. A base that nodes write piece by piece in C-ordered ranges (concat
elimination) becomes the Concat of its flattened pieces, and a view overlapping pieces reads only those (a later
piece's writer may read it); a base written through a strided view (a GEMM writing a Transpose's layout) a
ScatterND of each written view into zeros."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from kernel_corpus.bindings import CUSTOM_DOMAIN
from kernel_corpus.bindings import registry as default_registry

from .graph import Graph


def graph_to_onnx(g: Graph, registry=None, name: str = "rammer") -> onnx.ModelProto:
    """An ONNX model of the graph as it stands: its nodes, its weights, its views."""
    registry = registry or default_registry
    custom = {n.op_type for n in g.nodes if (d := registry.op(n.op_type)) is not None and d.custom}
    nodes = [helper.make_node(n.op_type, n.inputs, n.outputs, name=n.name,
                              domain=CUSTOM_DOMAIN if n.op_type in custom else "", **n.attrs) for n in g.nodes]
    read = {i for n in g.nodes for i in n.inputs if i} | set(g.outputs)
    read |= {g.buffer_of(a).base for a in g.aliases if a in read}
    inits = [numpy_helper.from_array(np.asarray(v, order="C"), k) for k, v in g.weights.items() if k in read]
    written = {o for n in g.nodes for o in n.outputs if o in g.aliases}  # nodes writing into another buffer
    pieces: dict[str, list[tuple[int, str]]] = {}  # bases written in C-ordered ranges
    scattered: dict[str, list[str]] = {}  # bases written through a strided view (whole, by ScatterND)
    for name in sorted(written):
        view = g.buffer_of(name)
        if view.strides is None:
            pieces.setdefault(view.base, []).append((view.offset, name))
        else:
            scattered.setdefault(view.base, []).append(name)
    for base in scattered:
        scattered[base] += [p for _, p in pieces.pop(base, [])]
    for base, parts in pieces.items():
        parts.sort()
        nodes += _joined(base, [p for _, p in parts], g.tensors[base].shape)
    for base, writes in scattered.items():
        extra_nodes, extra_inits = _written_buffer(g, base, writes)
        nodes += extra_nodes
        inits += extra_inits
    for alias in g.aliases:
        if alias not in written:
            extra_nodes, extra_inits = _view_nodes(g, alias, pieces)
            nodes += extra_nodes
            inits += extra_inits
    graph = helper.make_graph(_topological(nodes, set(g.inputs) | {i.name for i in inits}), name,
                              [_value_info(g, t) for t in g.inputs], [_value_info(g, t) for t in g.outputs],
                              initializer=inits)
    imports = [helper.make_opsetid("", g.opset)] + ([helper.make_opsetid(CUSTOM_DOMAIN, 1)] if custom else [])
    model = helper.make_model(graph, opset_imports=imports, producer_name="rammer")
    model.ir_version = 9
    return model


def _value_info(g: Graph, name: str) -> onnx.ValueInfoProto:
    """A graph input or output with its static shape and element type."""
    t = g.tensors[name]
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), list(t.shape))


def _view_nodes(g: Graph, name: str, pieces: dict[str, list[tuple[int, str]]]) -> tuple[list[onnx.NodeProto],
                                                                                      list[onnx.TensorProto]]:
    """Standard ops computing a view tensor from the buffer that holds it; in a buffer that nodes write piece by
    piece, from the pieces it overlaps (the whole buffer may be read only after the view's readers wrote theirs)."""
    view, t = g.buffer_of(name), g.tensors[name]
    if view.strides is not None:  # a strided view: GatherND of its elements' flat positions
        flat_shape = numpy_helper.from_array(np.array([-1], np.int64), f"{name}__view_flat")
        index = np.arange(g.tensors[view.base].size, dtype=np.int64)
        positions = numpy_helper.from_array(np.asarray(view.read(index, t.shape)[..., None], order="C"),
                                            f"{name}__view_index")
        flat = f"{name}__flat"
        return [helper.make_node("Reshape", [view.base, flat_shape.name], [flat], name=f"{name}__flatten"),
                helper.make_node("GatherND", [flat, positions.name], [name], name=f"{name}__view")], \
            [flat_shape, positions]
    src, offset, total, nodes = view.base, view.offset, g.tensors[view.base].size, []
    end = view.offset + t.size
    over = [(o, p) for o, p in pieces.get(view.base, []) if o < end and view.offset < o + g.tensors[p].size]
    if over:
        src, offset, total = f"{name}__joined", view.offset - over[0][0], sum(g.tensors[p].size for _, p in over)
        nodes = _joined(src, [p for _, p in over], (total,))
    shape = numpy_helper.from_array(np.array(t.shape, np.int64), f"{name}__view_shape")
    if offset == 0 and t.size == total:
        return nodes + [helper.make_node("Reshape", [src, shape.name], [name], name=f"{name}__view")], [shape]
    consts = [shape] + [numpy_helper.from_array(np.array(v, np.int64), f"{name}__view_{k}")
                        for k, v in (("flat", [-1]), ("start", [offset]), ("end", [offset + t.size]))]
    flat, piece = f"{name}__flat", f"{name}__piece"
    return nodes + [helper.make_node("Reshape", [src, f"{name}__view_flat"], [flat], name=f"{name}__flatten"),
                    helper.make_node("Slice", [flat, f"{name}__view_start", f"{name}__view_end"], [piece],
                                     name=f"{name}__slice"),
                    helper.make_node("Reshape", [piece, shape.name], [name], name=f"{name}__view")], consts


def _joined(out: str, parts: list[str], shape: tuple[int, ...]) -> list[onnx.NodeProto]:
    """`out` of `shape` as the Concat of the flattened `parts` (pieces a buffer's writers wrote, in offset order)."""
    flat = helper.make_tensor(f"{out}__flat_shape", onnx.TensorProto.INT64, [1], [-1])
    dims = helper.make_tensor(f"{out}__shape", onnx.TensorProto.INT64, [len(shape)], list(shape))
    return [helper.make_node("Constant", [], [f"{out}__flat_shape"], value=flat),
            helper.make_node("Constant", [], [f"{out}__shape"], value=dims)] + [
        helper.make_node("Reshape", [p, f"{out}__flat_shape"], [f"{out}__{k}_flat"], name=f"{out}__flatten{k}")
        for k, p in enumerate(parts)] + [
        helper.make_node("Concat", [f"{out}__{k}_flat" for k in range(len(parts))], [f"{out}__all"], axis=0,
                         name=f"{out}__pieces"),
        helper.make_node("Reshape", [f"{out}__all", f"{out}__shape"], [out], name=f"{out}__built")]


def _written_buffer(g: Graph, base: str, writes: list[str]) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Standard ops assembling a buffer that nodes write through views (a GEMM writing a Transpose's layout): zeros,
    each written view scattered to its elements' flat positions (ScatterND), reshaped to the buffer's shape."""
    t = g.tensors[base]
    zeros = numpy_helper.from_array(np.zeros(t.size, np.dtype(t.dtype)), f"{base}__zeros")
    shape = numpy_helper.from_array(np.array(t.shape, np.int64), f"{base}__shape")
    nodes, inits, flat = [], [zeros, shape], zeros.name
    for k, name in enumerate(writes):
        positions = g.buffer_of(name).read(np.arange(t.size, dtype=np.int64), g.tensors[name].shape)
        index = numpy_helper.from_array(np.asarray(positions[..., None], order="C"), f"{base}__write{k}_index")
        nodes.append(helper.make_node("ScatterND", [flat, index.name, name], [f"{base}__write{k}"],
                                      name=f"{base}__write{k}"))
        inits.append(index)
        flat = f"{base}__write{k}"
    nodes.append(helper.make_node("Reshape", [flat, shape.name], [base], name=f"{base}__written"))
    return nodes, inits


def _topological(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """The nodes ordered so each reads only what is already computed (views were appended at the end)."""
    done, pending = set(available), list(nodes)
    ordered: list[onnx.NodeProto] = []
    while pending:
        ready = [n for n in pending if all(i in done for i in n.input if i)]
        if not ready:  # a cycle or a dangling input: keep the rest in order and let onnx.checker say which
            return ordered + pending
        for n in ready:
            ordered.append(n)
            done.update(o for o in n.output if o)
        pending = [n for n in pending if all(n is not r for r in ready)]
    return ordered
