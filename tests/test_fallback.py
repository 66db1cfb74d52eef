"""No model refused for one node (issue 17): a node no rKernel implements runs as an onnxruntime library step on
the CPU target, between persistent rPrograms, checked against onnxruntime on the whole model; report.md lists it as
a kernel to write; --strict refuses it in one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from rammer.build import build_model
from rammer.runtime import load

REPO = Path(__file__).resolve().parent.parent
# ops the corpus has no kernel for (if one gets a kernel, pick another: the test asserts the fallback is used)
NO_KERNEL = ("Asinh", "Hardmax")


def model(rows: int, cols: int, opset: int = 17) -> onnx.ModelProto:
    """Relu -> Asinh (fallback) -> MatMul (rKernel) -> Hardmax (fallback, axis 1) -> Add with x's projection."""
    rng = np.random.default_rng(rows * 100 + cols)
    w = helper.make_tensor("w", TensorProto.FLOAT, [cols, cols], rng.standard_normal((cols, cols)).astype(np.float32).ravel())
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Asinh", ["r"], ["a"]),
             helper.make_node("MatMul", ["a", "w"], ["m"]),
             helper.make_node("Hardmax", ["m"], ["h"], axis=1),
             helper.make_node("Add", ["h", "m"], ["y"])]
    g = helper.make_graph(nodes, "fallback", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("rows,cols,veus", [(2, 8, 2), (5, 33, 3), (1, 64, 4)])
def test_nodes_without_rkernel_run_through_onnxruntime(tmp_path: Path, rows: int, cols: int, veus: int) -> None:
    m = model(rows, cols)
    onnx.save(m, tmp_path / "m.onnx")
    built = build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=veus, quiet=True,
                        backends=("rtask", "library"))
    plan = json.loads((tmp_path / "b" / "plan.json").read_text())
    fallback = sorted(c["op_type"] for c in plan["library_calls"] if c["function"] == "onnxruntime")
    assert fallback == sorted(NO_KERNEL)
    assert {op["op_type"] for op in plan["ops"]} >= {"Relu", "Add"}  # the rest stays in rPrograms
    report = (tmp_path / "b" / "report.md").read_text()
    assert "the next kernels to write" in report and all(f"| {op}" in report for op in NO_KERNEL)
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for got in (built.run({"x": x})["y"], load(tmp_path / "b").run({"x": x})["y"]):  # and after a reload
        assert np.allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max())))


def test_strict_refuses_in_one_line(tmp_path: Path) -> None:
    onnx.save(model(2, 8), tmp_path / "m.onnx")
    res = subprocess.run([sys.executable, "-c", "from rammer.cli import main; main()", "build", str(tmp_path / "m.onnx"),
                          "-o", str(tmp_path / "b"), "--target", "cpu", "--strict"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    errors = [ln for ln in res.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "no rKernel" in errors[0] and ("Asinh" in errors[0] or "Hardmax" in errors[0])
    assert not (tmp_path / "b").exists()


def test_fallback_cli_build_and_check(tmp_path: Path) -> None:
    onnx.save(model(3, 16), tmp_path / "m.onnx")
    cli = lambda *a: subprocess.run([sys.executable, "-c", "from rammer.cli import main; main()", *a],  # noqa: E731
                                    cwd=REPO, capture_output=True, text=True, timeout=600)
    assert cli("build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "b"), "--target", "cpu").returncode == 0
    res = cli("run", str(tmp_path / "b"), "--check")
    assert res.returncode == 0 and "check: PASS" in res.stdout, res.stdout + res.stderr


def mask_model(seq: int, heads: int) -> onnx.ModelProto:
    """An attention mask tiled over the heads: a bool mask [1, 1, seq, seq] repeated by a constant [1, heads, 1, 1]
    (Tile of bool: no rKernel, so onnxruntime runs it with the repeats the graph keeps as a constant), cast to float
    and added to x."""
    repeats = onnx.numpy_helper.from_array(np.array([1, heads, 1, 1], np.int64), "repeats")
    nodes = [helper.make_node("Tile", ["mask", "repeats"], ["wide"]),
             helper.make_node("Cast", ["wide"], ["wf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "wf"], ["y"])]
    g = helper.make_graph(nodes, "mask", [helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 1, seq, seq]),
                                          helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, heads, seq, seq])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, heads, seq, seq])], [repeats])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("seq,heads", [(16, 2), (5, 3)])
def test_a_fallback_node_gets_back_the_constant_inputs_the_graph_keeps_as_attributes(tmp_path: Path, seq: int,
                                                                                      heads: int) -> None:
    m = mask_model(seq, heads)
    onnx.save(m, str(tmp_path / "m.onnx"))
    build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", veus=2, quiet=True,
                backends=("rtask", "library"))
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert [c["op_type"] for c in plan["library_calls"] if c["function"] == "onnxruntime"] == ["Tile"]
    built = load(tmp_path / "out")
    rng = np.random.default_rng(seq)
    feeds = {"mask": rng.random((1, 1, seq, seq)) < 0.5,
             "x": rng.standard_normal((1, heads, seq, seq)).astype(np.float32)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(built.run(feeds)["y"], want)
