"""0-d tensors as exported models have them (torch's exact GELU: Div by a 0-d Constant, Erf, Add 1, Mul 0.5; a 0-d
initializer; a 0-d model input and output): built for the CPU target, written to disk, loaded back and checked against
onnxruntime. numpy's ascontiguousarray turns a 0-d array into shape [1], which a build folder must not store."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rammer.build import build_model
from rammer.runtime import load


def scalar(name: str, value: float) -> onnx.NodeProto:
    """A Constant node of a 0-d float tensor, as torch.onnx exports a Python scalar."""
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.float32)))


def gelu_model(shape: tuple[int, ...]) -> onnx.ModelProto:
    """y = gelu(x / t) * w (erf form, 0-d constants, a 0-d input t, a 0-d initializer w); m = ReduceMax(y) as 0-d."""
    nodes = [scalar("sqrt2", 1.4142135), scalar("one", 1.0), scalar("half", 0.5),
             helper.make_node("Div", ["x", "t"], ["xs"]),
             helper.make_node("Div", ["xs", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]),
             helper.make_node("Mul", ["xs", "a"], ["m1"]),
             helper.make_node("Mul", ["m1", "half"], ["g"]),
             helper.make_node("Mul", ["g", "w"], ["y"]),
             helper.make_node("ReduceMax", ["y"], ["m"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape)),
                        helper.make_tensor_value_info("t", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape)),
         helper.make_tensor_value_info("m", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(np.array(1.5, np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape,veus", [((2, 7), 2), ((3, 5, 33), 3)])
def test_zero_d_constants_inputs_and_outputs_survive_the_build_folder(tmp_path: Path, shape: tuple[int, ...],
                                                                       veus: int) -> None:
    model = gelu_model(shape)
    onnx.save(model, str(tmp_path / "m.onnx"))
    build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", veus=veus, quiet=True)
    built = load(tmp_path / "out")  # from disk, as `rammer run` reads it
    rng = np.random.default_rng(sum(shape))
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "t": np.array(0.75, np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = built.run(feeds)
    assert got["m"].shape == () and got["y"].shape == shape
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["m"], want[1], rtol=1e-5, atol=1e-6)
