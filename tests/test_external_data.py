"""ONNX models with external data (as PyTorch's exporter writes them): built from another working folder, the
build folder standing on its own, `rammer run --check` against onnxruntime, the in-memory reference with its base
folder; the numbers are checked against numpy and onnxruntime, never against our own output."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rammer.check import reference_outputs


def mlp(rng: np.random.Generator, rows: int, k: int, n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Relu(x @ W + b) with random weights: W and b are what external data holds."""
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"W": w, "b": b}


def save_external(model: onnx.ModelProto, path: Path, location: str) -> None:
    """Save with every initializer in the external file `location` (relative to the model's folder)."""
    (path.parent / location).parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)


def numpy_mlp(x: np.ndarray, weights: dict[str, np.ndarray]) -> np.ndarray:
    """The truth: the same function in numpy."""
    return np.maximum(x.astype(np.float64) @ weights["W"] + weights["b"], 0.0)


@pytest.mark.parametrize("rows,k,n,location", [(2, 16, 32, "mlp.onnx.data"), (3, 24, 40, "weights/all.bin")])
def test_model_with_external_data_builds_from_another_folder_and_checks(tmp_path: Path, monkeypatch, capsys,
                                                                        rows: int, k: int, n: int,
                                                                        location: str) -> None:
    from rammer.build import build_model
    from rammer.cli import run_command
    model, weights = mlp(np.random.default_rng(rows * k + n), rows, k, n)
    src = tmp_path / "models" / "mlp.onnx"
    save_external(model, src, location)
    assert (src.parent / location).is_file() and src.stat().st_size < 1024  # the weights are really outside
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    built = build_model(os.path.relpath(src, elsewhere), "out", target="cpu", quiet=True, profile="model")
    assert built.manifest.stats["model_weight_bytes"] == sum(w.nbytes for w in weights.values())
    # the build folder needs nothing outside itself: the source model may go away
    shutil.rmtree(tmp_path / "models")
    x = np.random.default_rng(1).standard_normal((rows, k)).astype(np.float32)
    got = built.run({"x": x})["y"]
    np.testing.assert_allclose(got, numpy_mlp(x, weights), rtol=1e-4, atol=1e-4)
    assert run_command("out", check=True) == 0
    assert "check: PASS" in capsys.readouterr().out


def test_build_folder_keeps_external_data_beside_model_when_over_the_limit(tmp_path: Path, monkeypatch) -> None:
    from scheduler.onnx_files import save_standalone
    model, weights = mlp(np.random.default_rng(5), 2, 8, 16)
    src = tmp_path / "in" / "m.onnx"
    save_external(model, src, "deep/m.weights")
    dest_dir = tmp_path / "build"
    dest_dir.mkdir()
    small_limit = 256  # stands for protobuf's 2 GiB: these weights (576 bytes) are "too large" to embed
    written = save_standalone(src, dest_dir / "model.onnx", limit=small_limit)
    assert [p.name for p in written] == ["model.onnx", "model.onnx.data"]
    shutil.rmtree(tmp_path / "in")
    monkeypatch.chdir(tmp_path)  # onnxruntime must find the data beside the model, not in the working folder
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
    (ref,) = reference_outputs(dest_dir / "model.onnx", {"x": x})
    np.testing.assert_allclose(ref, numpy_mlp(x, weights), rtol=1e-5, atol=1e-5)


def test_small_model_with_external_data_is_embedded_in_the_build_folder(tmp_path: Path) -> None:
    from scheduler.onnx_files import save_standalone, uses_external_data
    model, _ = mlp(np.random.default_rng(6), 2, 8, 16)
    src = tmp_path / "m.onnx"
    save_external(model, src, "m.onnx.data")
    written = save_standalone(src, tmp_path / "copy.onnx")
    assert written == [tmp_path / "copy.onnx"]
    assert not uses_external_data(onnx.load(str(written[0]), load_external_data=False))


def test_in_memory_reference_reads_external_data_from_its_base_folder(tmp_path: Path, monkeypatch) -> None:
    model, weights = mlp(np.random.default_rng(7), 4, 8, 8)
    save_external(model, tmp_path / "m.onnx", "m.onnx.data")
    monkeypatch.chdir(tmp_path.parent)
    unloaded = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="external data"):
        reference_outputs(unloaded, {"x": x})
    (ref,) = reference_outputs(unloaded, {"x": x}, base_dir=tmp_path)
    np.testing.assert_allclose(ref, numpy_mlp(x, weights), rtol=1e-5, atol=1e-5)
    assert onnx.external_data_helper.uses_external_data(unloaded.graph.initializer[0])  # the caller's model kept


def test_import_reads_external_weights_relative_to_the_model(tmp_path: Path, monkeypatch) -> None:
    from scheduler.onnx_import import import_model, load_model
    model, weights = mlp(np.random.default_rng(8), 2, 12, 20)
    save_external(model, tmp_path / "a" / "m.onnx", "w/m.bin")
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")
    graph = import_model("../a/m.onnx")
    np.testing.assert_array_equal(graph.weights["W"], weights["W"])
    np.testing.assert_array_equal(graph.weights["b"], weights["b"])
    os.remove(tmp_path / "a" / "w" / "m.bin")
    from scheduler.onnx_import import ModelError
    with pytest.raises(ModelError, match="m.bin"):
        load_model("../a/m.onnx")


@pytest.mark.slow
def test_model_over_two_gib_loads_and_keeps_its_data_beside_the_copy(tmp_path: Path) -> None:
    """A real model over protobuf's 2 GiB limit (one 2.1 GB initializer): the importer's checker and shape
    inference take it, and its build-folder copy keeps the data in model.onnx.data."""
    from scheduler.onnx_files import save_standalone
    from scheduler.onnx_import import load_model
    rows = (2**31 + 2**26) // (4 * 64)  # 2.1 GB of float32, zeros but for the last row (a sparse file)
    with open(tmp_path / "big.bin", "wb") as f:
        f.seek((rows - 1) * 64 * 4)
        f.write(np.arange(64, dtype=np.float32).tobytes())
    tensor = TensorProto(name="T", data_type=TensorProto.FLOAT, dims=[rows, 64])
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="big.bin")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["T", "i"], ["y"])], "big",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(tmp_path / "big.onnx"))
    loaded = load_model(tmp_path / "big.onnx")
    assert loaded.graph.initializer[0].dims == [rows, 64]
    del loaded
    (tmp_path / "build").mkdir()
    written = save_standalone(tmp_path / "big.onnx", tmp_path / "build" / "model.onnx")
    assert [p.name for p in written] == ["model.onnx", "model.onnx.data"]
    (y,) = reference_outputs(written[0], {"i": np.array([rows - 1], dtype=np.int64)})
    np.testing.assert_array_equal(y[0], np.arange(64))
