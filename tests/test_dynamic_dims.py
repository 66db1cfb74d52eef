"""Models exported with dynamic axes (an exporter's "batch" and "seq"): `--dim NAME=N` gives them sizes, the build
and its model.onnx are static, and the build computes what onnxruntime computes on the original dynamic model at
those sizes; without the option, or with a name the model lacks, one line says what to do."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from rammer.build import build_model
from rammer.cli import main
from rammer.runtime import load
from scheduler.onnx_import import ModelError, import_model
from toolchain.exits import Exit


def dynamic_model() -> onnx.ModelProto:
    """y = Relu(x @ W) reshaped to [batch, seq * 6] through the Shape/Gather/Concat chain exporters emit;
    x [batch, seq, 8] with both leading dimensions named."""
    mk = helper.make_node
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.int64), name)  # noqa: E731
    w = np.random.default_rng(3).standard_normal((8, 6)).astype(np.float32)
    nodes = [mk("MatMul", ["x", "w"], ["m"]), mk("Relu", ["m"], ["r"]),
             mk("Shape", ["x"], ["s"]), mk("Gather", ["s", "zero"], ["b"], axis=0),
             mk("Unsqueeze", ["b", "ax0"], ["b1"]), mk("Concat", ["b1", "minus1"], ["shape"], axis=0),
             mk("Reshape", ["r", "shape"], ["y"])]
    graph = helper.make_graph(
        nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])],
        initializer=[numpy_helper.from_array(w, "w"), i64("zero", 0), i64("ax0", [0]), i64("minus1", [-1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("batch,seq,veus", [(2, 5, 2), (1, 9, 3), (3, 1, 4)])
def test_fixed_dimensions_build_and_match_the_dynamic_model(tmp_path: Path, batch: int, seq: int, veus: int) -> None:
    model = dynamic_model()
    onnx.save(model, str(tmp_path / "m.onnx"))
    build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", veus=veus, quiet=True,
                dims=(("batch", batch), ("seq", seq)))
    built = load(tmp_path / "out")
    x = np.random.default_rng(batch * 10 + seq).standard_normal((batch, seq, 8)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(built.run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    saved = onnx.load(str(tmp_path / "out" / "model.onnx"))  # what `rammer run --check` compares against
    assert [d.dim_value for d in saved.graph.input[0].type.tensor_type.shape.dim] == [batch, seq, 8]


def test_a_dynamic_dimension_without_a_size_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"dynamic dimension 'batch'.*--dim batch=N"):
        import_model(dynamic_model())
    with pytest.raises(ModelError, match=r"--dim batsh: .*no dynamic dimension of that name.*batch, seq"):
        import_model(dynamic_model(), {"batsh": 1, "seq": 2})
    with pytest.raises(ModelError, match=r"--dim batch=0: a dimension's size must be at least 1"):
        import_model(dynamic_model(), {"batch": 0, "seq": 2})
    model = dynamic_model()
    import_model(model, {"batch": 2, "seq": 3})  # fixing the sizes leaves the caller's model as it was
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_the_cli_builds_with_dims_and_refuses_a_malformed_one(tmp_path: Path) -> None:
    onnx.save(dynamic_model(), str(tmp_path / "m.onnx"))
    runner = CliRunner()
    res = runner.invoke(main, ["build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out"), "--target", "cpu",
                               "--veus", "2", "--dim", "batch=2", "--dim", "seq=4"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["run", str(tmp_path / "out"), "--check"])
    assert res.exit_code == 0 and "check: PASS" in res.output, res.output
    res = runner.invoke(main, ["build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "bad"), "--target", "cpu",
                               "--dim", "batch"])
    assert res.exit_code == Exit.USAGE and "--dim batch: expected NAME=N" in res.output
    assert not (tmp_path / "bad").exists()
    res = runner.invoke(main, ["build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "bad"), "--target", "cpu"])
    assert res.exit_code == Exit.USAGE and "--dim batch=N" in res.output
    assert not (tmp_path / "bad").exists()
