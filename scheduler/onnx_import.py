"""ONNX -> DFG of rOperators with static shapes: the scheduler's front door, which refuses what it cannot plan."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from .graph import Graph, Node, SchedulerError, Tensor, present
from .onnx_files import InitializerValues, fix_dimensions, load_structure, load_weights_into, model_folder


class ModelError(SchedulerError):
    """The ONNX file cannot be read, is malformed, or has shapes that are not static."""


def load_model(source: str | Path | onnx.ModelProto, dims: Mapping[str, int] | None = None) -> onnx.ModelProto:
    """Read and check a model, turning any decode/validation failure into one ModelError line; `dims` gives named
    dynamic dimensions their sizes (fix_dimensions)."""
    base_dir = ""
    if isinstance(source, onnx.ModelProto):
        model = _copy(source) if dims else source  # fixing its dimensions must not change the caller's proto
        where = "model"
    else:
        where = str(source)
        if not Path(where).is_file():
            raise ModelError(f"cannot read ONNX model {where}: no such file")
        try:  # external data stays on disk until the end: shape inference and the checker see a small proto
            model, base_dir = load_structure(where), model_folder(where)
        except Exception as exc:  # protobuf raises several unrelated types for a corrupt file
            raise ModelError(f"cannot read ONNX model {where}: {first_line(exc)}") from None
    if dims:
        try:
            fix_dimensions(model, dims)
        except ValueError as exc:
            raise ModelError(f"{where}: {exc}") from None
    try:  # on the skeleton: small whatever the weights (no protobuf size limit), external data checked when read
        onnx.checker.check_model(shape_skeleton(model))
        check_weight_sizes(model)
    except Exception as exc:
        raise ModelError(f"malformed ONNX model {where}: {first_line(exc)}") from None
    try:
        model = fold_onnx_constants(model, base_dir)
        inferred = shape_inference.infer_shapes(shape_skeleton(model), check_type=True, strict_mode=True,
                                                data_prop=True)
    except Exception as exc:
        raise ModelError(f"shape inference failed for {where}: {first_line(exc)}") from None
    del model.graph.value_info[:], model.graph.output[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    model.graph.output.extend(inferred.graph.output)
    try:
        return load_weights_into(model, base_dir) if base_dir else model
    except Exception as exc:
        raise ModelError(f"cannot read the external data of ONNX model {where}: {first_line(exc)}") from None


# Initializers above this many bytes of floating-point data reach the checker and shape inference as typed graph
# inputs instead (their values never decide a shape; serialising them into each inference round was most of a
# large model's import: 85 M parameters, 13 of 21 s).
SKELETON_BYTES = 4096
FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE)


def large_weights(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """The initializers the skeleton leaves out: floating-point ones above SKELETON_BYTES, and those whose data is
    external (read only at the end: neither the checker nor shape inference could read it from a proto)."""
    def nbytes(init: onnx.TensorProto) -> int:
        return int(np.prod(init.dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
    return [init for init in model.graph.initializer if init.data_location == onnx.TensorProto.EXTERNAL
            or (init.data_type in FLOAT_TYPES and nbytes(init) > SKELETON_BYTES)]


def shape_skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model for the checker and shape inference: its nodes, inputs, outputs and small initializers, with
    each large floating-point initializer as a graph input of its type and shape."""
    big = {init.name: init for init in large_weights(model)}
    g = model.graph
    skeleton = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                               functions=model.functions)
    sg = skeleton.graph
    sg.name = g.name
    for name in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(sg, name).extend(getattr(g, name))
    sg.initializer.extend(init for init in g.initializer if init.name not in big)
    listed = {vi.name for vi in g.input}
    sg.input.extend(helper.make_tensor_value_info(name, init.data_type, list(init.dims))
                    for name, init in big.items() if name not in listed)
    return skeleton


def check_weight_sizes(model: onnx.ModelProto) -> None:
    """What the checker would have said of the data the skeleton leaves out: each holds as many values as its
    dims."""
    for init in large_weights(model):
        want = int(np.prod(init.dims, dtype=np.int64))
        item = helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
        have = len(init.raw_data) // item if init.HasField("raw_data") else \
            len(init.float_data) + len(init.double_data) + len(init.int32_data)
        if init.data_location != onnx.TensorProto.EXTERNAL and have != want:
            raise ModelError(f"initializer '{init.name}' holds {have} values; its dims {list(init.dims)} need "
                             f"{want}")


MAX_FOLD_ROUNDS = 16  # each round infers shapes once; shape chains of exported models settle in two or three


def fold_onnx_constants(model: onnx.ModelProto, base_dir: str = "") -> onnx.ModelProto:
    """Shape arithmetic before import: nodes whose inputs are initializers, or Shape/Size of a tensor whose shape
    inference already knows, become initializers, round after round, so that shapes computed by such chains
    (Range, ConstantOfShape, Reshape targets) become static; the passes' fold_constants does the rest. External
    data is read relative to `base_dir` (the model's folder)."""
    from .passes import RANDOM_OPS, SHAPE_ONLY_OPS
    from .reference import evaluate_standard, standard_op
    model_copy = onnx.ModelProto()
    model_copy.CopyFrom(model)
    g = model_copy.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    for _ in range(MAX_FOLD_ROUNDS):
        shapes = static_shapes(shape_inference.infer_shapes(shape_skeleton(model_copy), data_prop=True))
        known = InitializerValues(g.initializer, base_dir)  # read on first use
        kept, folded = [], 0
        for proto, name in zip(g.node, unique_node_names(g.node)):
            node = node_from_proto(proto, name)
            values = None
            if node.op_type in SHAPE_ONLY_OPS and node.inputs[0] in shapes:
                dims = np.array(shapes[node.inputs[0]], dtype=np.int64)
                values = [np.array(dims.prod(), dtype=np.int64)] if node.op_type == "Size" else \
                    [dims[node.attrs.get("start", 0):node.attrs.get("end", len(dims))]]
            elif (node.op_type not in RANDOM_OPS and standard_op(node.op_type)
                  and all(n in known for n in present(node.inputs))
                  and not any(isinstance(v, str) and v.startswith("<subgraph") for v in node.attrs.values())):
                try:
                    values = evaluate_standard(node, [known[n] if n else None for n in node.inputs], opset)
                except SchedulerError:
                    values = None
            if values is None:
                kept.append(proto)
                continue
            for out, value in zip(node.outputs, values):
                if out:
                    known[out] = np.asarray(value)
                    g.initializer.append(numpy_helper.from_array(np.asarray(value), out))
            folded += 1
        if not folded:
            break
        del g.node[:]
        g.node.extend(kept)
        outputs = {o.name for o in g.output}
        kept_info = [vi for vi in g.value_info if vi.name not in known or vi.name in outputs]
        del g.value_info[:]
        g.value_info.extend(kept_info)
    return model_copy


def static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every value whose shape inference found a fully static shape."""
    out = {}
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        t = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and t.HasField("shape") and all(d.HasField("dim_value")
                                                                             for d in t.shape.dim):
            out[vi.name] = tuple(int(d.dim_value) for d in t.shape.dim)
    return out


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a proto."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def import_model(source: str | Path | onnx.ModelProto, dims: Mapping[str, int] | None = None) -> Graph:
    """Build the DFG of a model whose every tensor has a fixed shape (after `dims`, see load_model)."""
    model = load_model(source, dims)
    g = model.graph
    weights = {init.name: numpy_helper.to_array(init) for init in g.initializer}
    tensors: dict[str, Tensor] = {}
    for name, value in weights.items():
        tensors[name] = Tensor(name, tuple(int(d) for d in value.shape), value.dtype.name, "weight")
    infos = {vi.name: vi for vi in [*g.input, *g.value_info, *g.output]}
    inputs = [vi.name for vi in g.input if vi.name not in weights]
    for name in inputs:
        tensors[name] = tensor_from_info(infos[name], "input")
    nodes = [node_from_proto(n, name) for n, name in zip(g.node, unique_node_names(g.node))]
    for node in nodes:
        for out in present(node.outputs):
            if out not in infos:
                raise ModelError(f"tensor '{out}' (output of {node.op_type} node '{node.name}') has no inferred "
                                 "shape: the scheduler needs static shapes (give the model's dynamic dimensions "
                                 "sizes: --dim NAME=N)")
            tensors[out] = tensor_from_info(infos[out], "intermediate", node)
    outputs = [vi.name for vi in g.output]
    for name in outputs:
        if name not in tensors:
            raise ModelError(f"graph output '{name}' is produced by no node")
        if tensors[name].kind == "intermediate":
            tensors[name].kind = "output"
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    return Graph(nodes=nodes, tensors=tensors, inputs=inputs, outputs=outputs, weights=weights, opset=opset)


def tensor_from_info(info: onnx.ValueInfoProto, kind: str, node: Node | None = None) -> Tensor:
    """Static shape and dtype of one value, or a ModelError naming the dynamic dimension."""
    where = f"tensor '{info.name}'" + (f" (output of {node.op_type} node '{node.name}')" if node else "")
    ttype = info.type.tensor_type
    if not info.type.HasField("tensor_type") or ttype.elem_type == 0:
        raise ModelError(f"{where} is not a tensor of known element type")
    if not ttype.HasField("shape"):
        raise ModelError(f"{where} has unknown rank: the scheduler needs static shapes (give the model's dynamic "
                         "dimensions sizes: --dim NAME=N)")
    dims = []
    for d in ttype.shape.dim:
        if d.HasField("dim_value") and d.dim_value < 0:
            shown = [str(x.dim_value) if x.HasField("dim_value") else "?" for x in ttype.shape.dim]
            raise ModelError(f"{where} has a negative dimension {d.dim_value} in shape [{','.join(shown)}]: not a "
                             "valid ONNX shape (fix the model's input or value_info)")
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            label = d.dim_param or "?"
            shown = ["?" if not x.HasField("dim_value") else str(x.dim_value) for x in ttype.shape.dim]
            fix = f"give it a size: --dim {label}=N" if d.dim_param else "fix the model's input shapes"
            raise ModelError(f"{where} has a dynamic dimension '{label}' in shape [{','.join(shown)}]: "
                             f"the scheduler needs static shapes ({fix})")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(ttype.elem_type)).name
    return Tensor(info.name, tuple(dims), dtype, kind)


def unique_node_names(protos) -> list[str]:
    """Node names as in the file, with a generated one for unnamed nodes and a suffix for repeats."""
    names: list[str] = []
    seen: set[str] = set()
    for i, proto in enumerate(protos):
        name = proto.name or f"{proto.op_type}_{i}"
        if name in seen:
            name = f"{name}#{i}"
        seen.add(name)
        names.append(name)
    return names


def node_from_proto(proto: onnx.NodeProto, name: str) -> Node:
    """One ONNX node as a plain Node with python-valued attributes (a foreign domain prefixes the op type)."""
    domain = proto.domain if proto.domain not in ("", "ai.onnx") else ""
    op_type = f"{domain}.{proto.op_type}" if domain else proto.op_type
    attrs = {a.name: attr_value(a) for a in proto.attribute}
    return Node(name=name, op_type=op_type, inputs=list(proto.input), outputs=list(proto.output), attrs=attrs)


def attr_value(attr: onnx.AttributeProto) -> Any:
    """An attribute as a python value: str, int, float, list, or numpy array for tensors."""
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return f"<subgraph {attr.name}>"  # control flow: refused by the support check, named there
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message, for one-line errors."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__
