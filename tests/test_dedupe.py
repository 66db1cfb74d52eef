"""Repeated-node elimination (scheduler/dedupe.py): a node with the op, inputs and attributes of an earlier one is
dropped and its readers read the earlier one's outputs. Checked against onnxruntime; repeats counted on the ONNX
protos themselves."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_build import ort_outputs
from test_concat_elim import assert_close, check_built

from kernel_corpus.bindings import registry
from rammer.zoo import generate, random_inputs
from scheduler.pipeline import import_graph
from scheduler.reference import run_graph


def repeats_model(c: int, size: int, seed: int) -> onnx.ModelProto:
    """x -> two Relus of x (a repeat) each feeding its own conv; two 3x3 AveragePools of x with the same attributes
    (a repeat) and one with other pads (not); a Relu of the conv output twice (a repeat: the survivor is then the
    conv's only reader and folds into it); the repeated pool's output is a graph output (kept as a view)."""
    rng = np.random.default_rng(seed)
    w = lambda k: numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.5, f"w{k}")  # noqa: E731
    mk = helper.make_node
    nodes = [mk("Relu", ["x"], ["r1"]), mk("Relu", ["x"], ["r2"]),
             mk("Conv", ["r1", "w1"], ["c1"]), mk("Conv", ["r2", "w2"], ["c2"]),
             mk("AveragePool", ["x"], ["p1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             mk("AveragePool", ["x"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             mk("AveragePool", ["x"], ["p3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
             mk("Relu", ["c1"], ["a1"]), mk("Relu", ["c1"], ["a2"]),
             mk("Sum", ["a1", "a2", "c2", "p1", "p3"], ["y"])]
    full = [1, c, size, size]
    graph = helper.make_graph(nodes, "repeats", [helper.make_tensor_value_info("x", TensorProto.FLOAT, full)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, full) for o in ("y", "p2")],
                              initializer=[w(1), w(2)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.checker.check_model(m, full_check=True)
    return m


def proto_repeats(model: onnx.ModelProto) -> int:
    """Nodes of the ONNX file that repeat an earlier node (op, inputs after renaming repeats, attributes)."""
    seen: dict[tuple, list[str]] = {}
    rename: dict[str, str] = {}
    count = 0
    for n in model.graph.node:
        ins = tuple(rename.get(i, i) for i in n.input)
        key = (n.op_type, ins, tuple(sorted(a.SerializeToString() for a in n.attribute)))
        if key in seen:
            count += 1
            rename.update(zip(n.output, seen[key]))
        else:
            seen[key] = list(n.output)
    return count


def test_repeats_dropped_and_the_survivor_fuses() -> None:
    m = repeats_model(4, 5, 0)
    assert proto_repeats(m) == 3  # r2, p2, a2: by hand from the docstring
    g = import_graph(m, registry)
    log = {r.name: r.changes for r in g.pass_log}
    assert log["dedupe_nodes"] == 3
    kinds = [n.op_type for n in g.nodes]
    # c1's Relu folded (FusedConv) once its repeat was gone; x's Relu stays one node; two pools remain
    assert kinds.count("FusedConv") == 1 and kinds.count("Relu") == 1 and kinds.count("AveragePool") == 2
    assert g.buffer_of("p2").base == g.buffer_of("p1").base  # the graph output p2 is a view of p1
    x = random_inputs(m, 1)
    assert_close(run_graph(g, x), ort_outputs(m, x))


def test_disabled_keeps_every_node() -> None:
    m = repeats_model(3, 4, 1)
    g = import_graph(m, registry, disabled=("dedupe_nodes",))
    assert [n.op_type for n in g.nodes].count("AveragePool") == 3


def test_random_generators_are_not_merged() -> None:
    mk = helper.make_node
    graph = helper.make_graph([mk("RandomUniformLike", ["x"], ["u1"], seed=1.0),
                               mk("RandomUniformLike", ["x"], ["u2"], seed=1.0), mk("Add", ["u1", "u2"], ["y"])],
                              "rand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g = import_graph(m, registry)
    assert [n.op_type for n in g.nodes].count("RandomUniformLike") == 2


@pytest.mark.parametrize("placement,veus,c,size", [(None, 3, 4, 5), ("launch-only", 2, 8, 6)])
def test_built_repeats_match_onnxruntime(tmp_path: Path, placement: str | None, veus: int, c: int, size: int) -> None:
    check_built(tmp_path, repeats_model(c, size, veus), placement, veus)


def test_nasnet_small_repeats(tmp_path: Path) -> None:
    """NASNet's cells repeat Relus and pools per branch: the pass drops exactly the repeats the protos have."""
    m = generate("nasnet", small=True)
    g = import_graph(m, registry)
    assert {r.name: r.changes for r in g.pass_log}["dedupe_nodes"] == proto_repeats(m) > 0
