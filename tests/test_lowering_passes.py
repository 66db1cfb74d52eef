"""Lowering passes. lower_einsum: Einsum equations become ReduceSum/Transpose/Reshape/MatMul, checked against
numpy.einsum on the same inputs; diagonals stay Einsum (and are refused by the support check, naming the node).
expand_matmul_batches: partially broadcast MatMul batches build and match numpy.matmul."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from pathlib import Path

import onnx
from onnx import numpy_helper

from rammer.build import build_model
from scheduler.onnx_import import import_model
from scheduler.passes import run_passes
from scheduler.reference import run_graph
from scheduler.workload import UnsupportedOpError, build_workload


def einsum_model(equation: str, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], opset: int = 17):
    """One Einsum node over float32 inputs x0, x1."""
    names = [f"x{i}" for i in range(len(shapes))]
    graph = helper.make_graph([helper.make_node("Einsum", names, ["y"], equation=equation)], "einsum",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in zip(names, shapes)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


CASES = [
    ("bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 2, 4), (2, 3, 4, 3)]),
    ("ij->", [(3, 4)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bi,bi->b", [(5, 6), (5, 6)]),
    ("abc,cd->dba", [(2, 3, 4), (4, 5)]),
    ("ijk,k->i", [(3, 4, 5), (5,)]),
]


@pytest.mark.parametrize("opset", [12, 17])
@pytest.mark.parametrize("equation,shapes", CASES)
def test_lowered_einsum_matches_numpy(equation: str, shapes: list, opset: int) -> None:
    rng = np.random.default_rng(len(equation) + opset)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want = np.einsum(equation, *xs)
    g = run_passes(import_model(einsum_model(equation, shapes, want.shape, opset)))
    assert "Einsum" not in {n.op_type for n in g.nodes}
    got = run_graph(g, {f"x{i}": x for i, x in enumerate(xs)})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_diagonal_einsum_is_refused_by_name() -> None:
    g = run_passes(import_model(einsum_model("...ii->...i", [(3, 4, 4)], (3, 4))))
    with pytest.raises(UnsupportedOpError, match="Einsum"):
        build_workload(g)


@pytest.mark.parametrize("a,b,constant_b", [((3, 1, 3, 4), (1, 2, 4, 2), False), ((2, 1, 5, 3), (4, 3, 6), True),
                                            ((5, 2, 3), (1, 3, 4), False)])
def test_partially_broadcast_matmul_builds_and_matches(tmp_path: Path, a: tuple, b: tuple, constant_b: bool) -> None:
    rng = np.random.default_rng(len(a) + len(b))
    xa, xb = rng.standard_normal(a).astype(np.float32), rng.standard_normal(b).astype(np.float32)
    want = np.matmul(xa, xb)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a))]
    inits = [numpy_helper.from_array(xb, "b")] if constant_b else []
    if not constant_b:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b)))
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(want.shape))],
                              initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    built = build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", veus=3, quiet=True)
    feeds = {"a": xa} | ({} if constant_b else {"b": xb})
    np.testing.assert_allclose(built.run(feeds)["y"], want, rtol=1e-5, atol=1e-5)
