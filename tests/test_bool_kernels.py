"""An attention-mask prologue as transformers exports it (bool Cast, Gather, And, Not, Expand, IsNaN, IsInf, Where)
built with rKernels only (no onnxruntime fallback, so it builds for the GPU as well) and run on the emulator against
onnxruntime, NaN and infinities among the scores."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rammer.build import build_model
from rammer.runtime import load

BOOL_OPS = {"Gather", "And", "Not", "Or", "Expand", "IsNaN", "IsInf", "Where"}


def mask_model(seq: int, heads: int) -> onnx.ModelProto:
    """keep = (mask[perm] as rows AND mask as columns), expanded over the heads, AND NOT (isnan(x) OR isinf(x) at
    -inf); y = keep ? x : -1e4."""
    mk = helper.make_node
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.int64), name)  # noqa: E731
    nodes = [mk("Cast", ["mask"], ["mb"], to=TensorProto.BOOL),
             mk("Reshape", ["mb", "flat"], ["m1"]),
             mk("Gather", ["m1", "perm"], ["mp"], axis=0),
             mk("Reshape", ["mp", "rows"], ["mr"]),
             mk("Reshape", ["m1", "cols"], ["mc"]),
             mk("And", ["mr", "mc"], ["both"]),
             mk("Expand", ["both", "wide"], ["mw"]),
             mk("IsNaN", ["x"], ["nan"]),
             mk("IsInf", ["x"], ["neg"], detect_positive=0),
             mk("Or", ["nan", "neg"], ["bad"]),
             mk("Not", ["bad"], ["good"]),
             mk("And", ["mw", "good"], ["keep"]),
             mk("Where", ["keep", "x", "floor"], ["y"])]
    perm = np.random.default_rng(seq).permutation(seq)
    graph = helper.make_graph(
        nodes, "mask", [helper.make_tensor_value_info("mask", TensorProto.INT64, [1, seq]),
                        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, heads, seq, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, heads, seq, seq])],
        initializer=[i64("flat", [seq]), i64("perm", perm), i64("rows", [1, 1, seq, 1]), i64("cols", [1, 1, 1, seq]),
                     i64("wide", [1, heads, seq, seq]), numpy_helper.from_array(np.array(-1e4, np.float32), "floor")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("seq,heads,veus", [(16, 2, 2), (7, 3, 3), (33, 1, 4)])
def test_mask_prologue_runs_on_rkernels_and_matches_onnxruntime(tmp_path: Path, seq: int, heads: int,
                                                                 veus: int) -> None:
    model = mask_model(seq, heads)
    onnx.save(model, str(tmp_path / "m.onnx"))
    build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", veus=veus, quiet=True, backends=("rtask",))
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert not plan["library_calls"] and BOOL_OPS <= {op["op_type"] for op in plan["ops"]}
    rng = np.random.default_rng(seq * heads)
    x = rng.standard_normal((1, heads, seq, seq)).astype(np.float32)
    x.reshape(-1)[rng.permutation(x.size)[:3 * seq]] = np.resize([np.nan, np.inf, -np.inf], 3 * seq)
    feeds = {"mask": (rng.random((1, seq)) < 0.7).astype(np.int64), "x": x}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(load(tmp_path / "out").run(feeds)["y"], want)


def position_model(seq: int, pad: int, width: int) -> onnx.ModelProto:
    """RoBERTa's position ids from its token ids, as transformers exports them: mask = int32(ids != pad),
    pos = cumsum(mask) * mask + pad (int64), then the position embedding rows (Gather) and a Less test of the ids."""
    mk = helper.make_node
    table = np.random.default_rng(width).standard_normal((seq + pad + 1, width)).astype(np.float32)
    nodes = [mk("Equal", ["ids", "pad"], ["is_pad"]), mk("Not", ["is_pad"], ["real"]),
             mk("Cast", ["real"], ["m32"], to=TensorProto.INT32),
             mk("CumSum", ["m32", "axis"], ["run"]), mk("Mul", ["run", "m32"], ["kept"]),
             mk("Cast", ["kept"], ["k64"], to=TensorProto.INT64), mk("Add", ["k64", "pad"], ["pos"]),
             mk("Gather", ["table", "pos"], ["y"], axis=0),
             mk("Less", ["ids", "pos"], ["before"])]
    graph = helper.make_graph(
        nodes, "positions", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, width]),
         helper.make_tensor_value_info("before", TensorProto.BOOL, [1, seq])],
        initializer=[numpy_helper.from_array(np.array(pad, np.int64), "pad"),
                     numpy_helper.from_array(np.array(1, np.int32), "axis"), numpy_helper.from_array(table, "table")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("seq,pad,width", [(16, 1, 8), (9, 0, 5)])
def test_position_ids_from_token_ids_run_on_rkernels(tmp_path: Path, seq: int, pad: int, width: int) -> None:
    model = position_model(seq, pad, width)
    onnx.save(model, str(tmp_path / "m.onnx"))
    build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", veus=2, quiet=True, backends=("rtask",))
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert not plan["library_calls"]
    assert {"Equal", "Not", "CumSum", "Mul", "Add", "Gather", "Less"} <= {op["op_type"] for op in plan["ops"]}
    ids = np.random.default_rng(seq).integers(0, 6, (1, seq)).astype(np.int64)
    ids[0, -3:] = pad  # padding at the end, as a batch pads
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})
    got = load(tmp_path / "out").run({"ids": ids})
    np.testing.assert_array_equal(got["y"], want[0])
    np.testing.assert_array_equal(got["before"], want[1])
