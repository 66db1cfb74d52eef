"""Constant folding at build time: the shape subgraphs exported models carry (Shape, Gather, Unsqueeze, Concat,
Cast, Range, ConstantOfShape, Equal/Where on shapes) disappear before scheduling, and the passed graph still
computes what onnxruntime computes on the original model."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from scheduler.onnx_import import import_model
from scheduler.passes import run_passes
from scheduler.reference import run_graph

SHAPE_OPS = {"Shape", "Gather", "Unsqueeze", "Concat", "Cast", "Range", "ConstantOfShape", "Equal", "Where",
             "Squeeze", "Constant"}


def exported_reshape_model(batch: int, seq: int, heads: int, dim: int) -> onnx.ModelProto:
    """x [B, S, H*D] -> reshape to [B, S, H, D] through the Shape/Gather/Unsqueeze/Concat chain PyTorch emits, plus
    a position row built by Range and a ConstantOfShape mask, added to the data."""
    mk = helper.make_node
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.int64), name)  # noqa: E731
    nodes = [
        mk("Shape", ["x"], ["s"]),
        mk("Gather", ["s", "zero"], ["b"], axis=0), mk("Gather", ["s", "one"], ["t"], axis=0),
        mk("Unsqueeze", ["b", "ax0"], ["b1"]), mk("Unsqueeze", ["t", "ax0"], ["t1"]),
        mk("Concat", ["b1", "t1", "hd"], ["newshape"], axis=0),
        mk("Reshape", ["x", "newshape"], ["x4"]),
        mk("Range", ["zero", "t", "one"], ["pos"]),
        mk("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
        mk("Unsqueeze", ["posf", "ax_last"], ["posf2"]), mk("Unsqueeze", ["posf2", "ax_last"], ["posf3"]),
        mk("ConstantOfShape", ["s"], ["ones"], value=numpy_helper.from_array(np.array([1.0], np.float32))),
        mk("Equal", ["hd", "hd"], ["same"]),
        mk("Where", ["same", "hd", "hd"], ["hd2"]),
        mk("Reshape", ["ones", "newshape2"], ["ones4"]),
        mk("Add", ["x4", "posf3"], ["y0"]),
        mk("Mul", ["y0", "ones4"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "exported", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, heads * dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, heads, dim])],
        initializer=[i64("zero", 0), i64("one", 1), i64("ax0", [0]), i64("ax_last", [-1]), i64("hd", [heads, dim]),
                     i64("newshape2", [batch, seq, heads, dim])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("batch,seq,heads,dim", [(1, 5, 2, 3), (2, 7, 4, 8), (3, 1, 1, 16)])
def test_shape_subgraph_folds_away_and_the_graph_still_matches(batch: int, seq: int, heads: int, dim: int) -> None:
    model = exported_reshape_model(batch, seq, heads, dim)
    g = run_passes(import_model(model))
    left = sorted({n.op_type for n in g.nodes})
    assert not SHAPE_OPS & set(left), f"shape ops left after folding: {left}"
    assert left == ["Add", "Mul"]  # the data path: x4 + positions, times the folded ones
    x = np.random.default_rng(batch * 100 + seq).standard_normal((batch, seq, heads * dim)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_graph(g, {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_random_generators_are_never_folded() -> None:
    nodes = [helper.make_node("RandomNormal", [], ["r"], shape=[2, 3], seed=1.0),
             helper.make_node("Add", ["x", "r"], ["y"])]
    graph = helper.make_graph(nodes, "rnd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g = run_passes(import_model(model))
    assert "RandomNormal" in {n.op_type for n in g.nodes}


def test_reduction_of_an_empty_tensor_is_folded() -> None:
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)]
    graph = helper.make_graph(nodes, "empty", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 0, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 4])],
                              initializer=[numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    g = run_passes(import_model(model))
    assert not g.nodes
    np.testing.assert_array_equal(run_graph(g, {"x": np.zeros((2, 0, 4), np.float32)})["y"], np.zeros((2, 1, 4)))


def token_type_model(positions: int, seq: int) -> onnx.ModelProto:
    """BERT's embedding prologue as transformers exports it: a constant row of `positions` token types, expanded to
    the batch and gathered at positions 0..seq-1 (GatherElements over `positions`), added to x."""
    mk = helper.make_node
    types = np.arange(positions, dtype=np.int64)[None] % 3
    nodes = [mk("Expand", ["types", "shape"], ["expanded"]),
             mk("GatherElements", ["expanded", "idx"], ["picked"], axis=1),
             mk("Cast", ["picked"], ["pf"], to=TensorProto.FLOAT),
             mk("Add", ["x", "pf"], ["y"])]
    graph = helper.make_graph(
        nodes, "types", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq])],
        initializer=[numpy_helper.from_array(types, "types"),
                     numpy_helper.from_array(np.array([1, positions], np.int64), "shape"),
                     numpy_helper.from_array(np.arange(seq, dtype=np.int64)[None] * 7 % positions, "idx")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("positions,seq", [(512, 32), (70, 9), (20, 20)])
def test_gather_elements_over_many_positions_folds(positions: int, seq: int) -> None:
    """onnx's evaluator cannot gather over more than 64 positions (np.choose); the corpus' own numpy reference
    folds it, and the folded graph computes what onnxruntime computes on the original model."""
    model = token_type_model(positions, seq)
    g = run_passes(import_model(model))
    assert {n.op_type for n in g.nodes} == {"Add"}
    x = np.random.default_rng(positions).standard_normal((1, seq)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_graph(g, {"x": x})["y"], want, rtol=1e-6)


def test_an_evaluator_failure_leaves_the_node_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node the evaluator fails on (a bug of the evaluator, not of the model) is not folded: it stays in the graph
    with a note, and the build goes on."""
    import scheduler.passes as passes

    def failing(g, node, inputs):  # noqa: ANN001, ANN202
        raise ValueError("cannot reshape array of size 1 into shape (1,32)")

    monkeypatch.setattr(passes, "evaluate", failing)
    g = run_passes(import_model(token_type_model(512, 32)))
    assert "GatherElements" in {n.op_type for n in g.nodes}
    assert any("left to run: the evaluator failed (ValueError" in note for note in g.notes)
