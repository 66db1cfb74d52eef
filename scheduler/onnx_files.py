"""ONNX models on disk as exporters write them: weights kept in external data files beside the model (PyTorch's
exporter does so for any size; a model over 2 GB must), read relative to the model's own folder, never the current
one, and copied into a build folder so that it stands on its own."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import onnx
from onnx import external_data_helper, helper, numpy_helper

PROTOBUF_LIMIT = 2**31 - 1  # a serialized protobuf message cannot exceed 2 GiB (protobuf's own limit)
DATA_SUFFIX = ".data"       # a build folder's model.onnx keeps its weights in model.onnx.data when over the limit


def dynamic_dimensions(model: onnx.ModelProto) -> list[str]:
    """The named dynamic dimensions of the graph's inputs and outputs, in order of first use."""
    names = [d.dim_param for vi in [*model.graph.input, *model.graph.output]
             for d in vi.type.tensor_type.shape.dim if d.dim_param and not d.HasField("dim_value")]
    return list(dict.fromkeys(names))


def fix_dimensions(model: onnx.ModelProto, dims: Mapping[str, int]) -> onnx.ModelProto:
    """Give named dynamic dimensions (an exporter's "batch", "seq") fixed sizes, in place, on the graph's inputs
    and outputs; the intermediate shapes are inferred again from them (value_info is cleared). A size below 1, or
    a name the model does not use (the error lists the ones it does), is a ValueError."""
    small = [f"{name}={size}" for name, size in dims.items() if size < 1]
    if small:
        raise ValueError(f"--dim {small[0]}: a dimension's size must be at least 1")
    known = dynamic_dimensions(model)
    unknown = [name for name in dims if name not in known]
    if unknown:
        raise ValueError(f"--dim {unknown[0]}: the model has no dynamic dimension of that name (its dynamic "
                         f"dimensions: {', '.join(known) if known else 'none'})")
    for vi in [*model.graph.input, *model.graph.output]:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in dims and not d.HasField("dim_value"):
                d.dim_value = int(dims[d.dim_param])  # setting the value clears the name (a oneof)
    del model.graph.value_info[:]
    return model


def model_folder(path: str | Path) -> str:
    """The folder external data locations are relative to (the ONNX spec: the model file's folder)."""
    return str(Path(path).resolve().parent)


def load_structure(path: str | Path) -> onnx.ModelProto:
    """The model without the contents of its external data files (their tensors keep name, type and dims): small
    whatever the model's size, so shape inference and the checker never meet protobuf's 2 GiB limit."""
    return onnx.load(str(path), load_external_data=False)


def load_weights_into(model: onnx.ModelProto, folder: str | Path) -> onnx.ModelProto:
    """Read the external data of `model` in place, relative to `folder` (the folder its file was loaded from)."""
    if uses_external_data(model):
        external_data_helper.load_external_data_for_model(model, str(folder))
    return model


def uses_external_data(model: onnx.ModelProto) -> bool:
    """Whether any initializer keeps its bytes outside the model file."""
    return any(external_data_helper.uses_external_data(t) for t in model.graph.initializer)


def external_files(path: str | Path) -> list[Path]:
    """The external data files a model names, resolved against its folder (each once, in order of first use)."""
    model = load_structure(path)
    folder = Path(model_folder(path))
    seen: dict[Path, None] = {}
    for t in model.graph.initializer:
        if external_data_helper.uses_external_data(t):
            info = external_data_helper.ExternalDataInfo(t)
            seen.setdefault(folder / info.location, None)
    return list(seen)


def initializer_bytes(model: onnx.ModelProto) -> int:
    """The weights' size from each initializer's type and dims: no data is read, wherever it is stored."""
    total = 0
    for t in model.graph.initializer:
        itemsize = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        total += itemsize * math.prod(int(d) for d in t.dims)
    return total


def save_standalone(source: str | Path, dest: Path, limit: int = PROTOBUF_LIMIT,
                    dims: Mapping[str, int] | None = None) -> list[Path]:
    """Write the model at `source` to `dest` so that it needs no file outside dest's folder: one self-contained file
    while the weights stay under `limit`, else `dest` plus `dest.data` beside it (all external tensors in one
    file, whatever layout the source used); `dims` fixed (fix_dimensions). Returns the files written."""
    structure = load_structure(source)
    if dims:
        fix_dimensions(structure, dims)
    if not uses_external_data(structure):
        if dims:
            onnx.save_model(structure, str(dest))
        else:
            dest.write_bytes(Path(source).read_bytes())
        return [dest]
    size = initializer_bytes(structure) + structure.ByteSize()
    model = load_weights_into(structure, model_folder(source))
    if size < limit:
        onnx.save_model(model, str(dest))
        return [dest]
    data = dest.with_name(dest.name + DATA_SUFFIX)
    onnx.save_model(model, str(dest), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name)
    return [dest, data]


def tensor_values(tensor: onnx.TensorProto, base_dir: str) -> np.ndarray:
    """An initializer's values, its external data read from `base_dir` into a copy (numpy_helper would load the
    bytes into the model's own proto, which then grows past what shape inference can serialize)."""
    if not external_data_helper.uses_external_data(tensor):
        return numpy_helper.to_array(tensor)
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    return numpy_helper.to_array(copy, base_dir)


class InitializerValues:
    """Initializer values by name, each read on first use (constant folding needs only the few that feed foldable
    nodes); values set later (folded results) are kept beside them."""

    def __init__(self, tensors: Iterable[onnx.TensorProto], base_dir: str) -> None:
        self.protos = {t.name: t for t in tensors}
        self.base_dir = base_dir
        self.values: dict[str, np.ndarray] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.values or name in self.protos

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.values:
            self.values[name] = tensor_values(self.protos[name], self.base_dir)
        return self.values[name]

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self.values[name] = value
