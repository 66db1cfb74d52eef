"""Runtime Cast as exported models use it (an attention mask from int64 token ids: int64 -> float -> bool ->
float), built for the CPU target and checked against onnxruntime; a Cast to the tensor's own type is a view; the
float_operands pass routes a runtime integer Pow exponent and a bool ReduceMax through Casts."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from rammer.build import build_model


def mask_model(shape: tuple[int, ...]) -> onnx.ModelProto:
    """y = x * float(bool(float(ids))), with a float -> float Cast in the middle."""
    nodes = [helper.make_node("Cast", ["ids"], ["idsf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["idsf"], ["same"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["same"], ["b"], to=TensorProto.BOOL),
             helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "bf"], ["y"])]
    graph = helper.make_graph(nodes, "mask", [helper.make_tensor_value_info("ids", TensorProto.INT64, list(shape)),
                                              helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape,veus", [((2, 5), 2), ((3, 300), 3)])
def test_mask_casts_build_and_match(tmp_path: Path, shape: tuple[int, ...], veus: int) -> None:
    model = mask_model(shape)
    onnx.save(model, str(tmp_path / "m.onnx"))
    built = build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", veus=veus, quiet=True)
    rng = np.random.default_rng(shape[1])
    feeds = {"ids": rng.integers(-2, 3, shape).astype(np.int64), "x": rng.standard_normal(shape).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(built.run(feeds)["y"], want)
    assert sum(op.kernel.wrapper == "cast_elements" for op in built.ops) == 3  # the float -> float Cast is a view


def test_integer_exponent_and_bool_reduction_run_through_casts(tmp_path: Path) -> None:
    nodes = [helper.make_node("Pow", ["x", "e"], ["p"]),
             helper.make_node("ReduceMax", ["m", "axes"], ["any"], keepdims=0)]
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                                               helper.make_tensor_value_info("e", TensorProto.INT64, [4]),
                                               helper.make_tensor_value_info("m", TensorProto.BOOL, [3, 5])],
                              [helper.make_tensor_value_info("p", TensorProto.FLOAT, [3, 4]),
                               helper.make_tensor_value_info("any", TensorProto.BOOL, [3])],
                              initializer=[onnx.numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])  # bool ReduceMax: opset 20
    onnx.save(model, str(tmp_path / "m.onnx"))
    built = build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", veus=2, quiet=True)
    rng = np.random.default_rng(5)
    feeds = {"x": rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32), "e": np.array([0, 1, 3, -2], np.int64),
             "m": rng.random((3, 5)) < 0.2}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = built.run(feeds)
    np.testing.assert_allclose(got["p"], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got["any"], want[1])
