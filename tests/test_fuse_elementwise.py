"""Elementwise activation fusion (scheduler/fuse_elementwise.py): Add/Sub/Mul/Div/Sum then Relu/Sigmoid/Tanh as
one FusedBinary launch. Checked against onnxruntime on models built here and on the zoo's --small ResNeXt and
NASNet; the fused pairs are counted from the ONNX file itself."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_build import ort_outputs
from test_concat_elim import assert_close, check_built

from kernel_corpus.bindings import registry
from rammer.build import build_model
from rammer.zoo import NAMES, generate, random_inputs
from scheduler.pipeline import import_graph
from scheduler.reference import run_graph
from scheduler.workload import build_workload


def chain_model(c: int, size: int, seed: int) -> onnx.ModelProto:
    """x [1,c,s,s] and s_in [1,c,1,1]:
    a = Relu(Conv(x) + x)              fused (a residual)
    b = Relu(a * s_in)                 fused, broadcast operand
    d = Sigmoid(Sum(b, a))             fused, Sum of two
    e = Tanh(b - d)                    fused
    u = a + d; r = Relu(u); v = u * b  not fused: u has two readers
    w = Relu(e / bias)                 fused, constant broadcast [c,1,1]
    t = r + e                          graph output `t`, then Relu(t): not fused (t is a graph output)
    outputs: w, v, t, Relu(t)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2, "W"),
             numpy_helper.from_array((rng.random((c, 1, 1)) + 0.5).astype(np.float32), "bias")]
    mk = helper.make_node
    nodes = [mk("Conv", ["x", "W"], ["conv"], pads=[1, 1, 1, 1]), mk("Add", ["conv", "x"], ["a0"]),
             mk("Relu", ["a0"], ["a"]), mk("Mul", ["a", "s_in"], ["b0"]), mk("Relu", ["b0"], ["b"]),
             mk("Sum", ["b", "a"], ["d0"]), mk("Sigmoid", ["d0"], ["d"]), mk("Sub", ["b", "d"], ["e0"]),
             mk("Tanh", ["e0"], ["e"]), mk("Add", ["a", "d"], ["u"]), mk("Relu", ["u"], ["r"]),
             mk("Mul", ["u", "b"], ["v"]), mk("Div", ["e", "bias"], ["w0"]), mk("Relu", ["w0"], ["w"]),
             mk("Add", ["r", "e"], ["t"]), mk("Relu", ["t"], ["tr"])]
    full = [1, c, size, size]
    graph = helper.make_graph(
        nodes, "fuse-test",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, full),
         helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [1, c, 1, 1])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, full) for o in ("w", "v", "t", "tr")],
        initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.checker.check_model(m, full_check=True)
    return m


FUSED_IN_CHAIN = 5  # a, b, d, e, w: counted by hand from chain_model's docstring
# fuse_residuals (tests/test_fuse_residual.py) takes a Conv -> Add -> Relu before this pass sees it (chain_model's
# `a`, ResNeXt's blocks): the counts here are this pass's alone, so it is left out where they are taken
ALONE = ("fuse_residuals",)


def fusable_pairs(model: onnx.ModelProto) -> int:
    """Binary node -> activation pairs of an ONNX file where the activation is the binary output's only reader and
    that output is no graph output: counted on the protos, independently of the scheduler's graph."""
    readers = Counter(i for n in model.graph.node for i in n.input)
    outputs = {o.name for o in model.graph.output}
    producer = {o: n for n in model.graph.node for o in n.output}
    count = 0
    for n in model.graph.node:
        if n.op_type not in ("Relu", "Sigmoid", "Tanh"):
            continue
        p = producer.get(n.input[0])
        binary = p is not None and (p.op_type in ("Add", "Sub", "Mul", "Div") or p.op_type == "Sum" and len(p.input) == 2)
        if binary and readers[n.input[0]] == 1 and n.input[0] not in outputs:
            count += 1
    return count


def test_fused_pairs_counted_from_the_onnx_file() -> None:
    m = chain_model(4, 5, 0)
    assert fusable_pairs(m) == FUSED_IN_CHAIN
    g = import_graph(m, registry, disabled=ALONE)
    fused = [n for n in g.nodes if n.op_type == "FusedBinary"]
    assert len(fused) == FUSED_IN_CHAIN
    assert sorted((n.attrs["op"], n.attrs["activation"]) for n in fused) == sorted(
        [("Add", "Relu"), ("Mul", "Relu"), ("Add", "Sigmoid"), ("Sub", "Tanh"), ("Div", "Relu")])
    plain = import_graph(m, registry, disabled=("fuse_elementwise",) + ALONE)
    assert len(plain.nodes) - len(g.nodes) == FUSED_IN_CHAIN  # one node (one launch) fewer per pair
    x = random_inputs(m, 1)
    assert_close(run_graph(g, x), ort_outputs(m, x))


def test_each_fused_node_has_one_launch() -> None:
    """Every FusedBinary binding plans one launch, where the plain graph has two for the pair."""
    m = chain_model(8, 4, 2)
    g = import_graph(m, registry)
    for op in build_workload(g, registry).ops:
        if op.op_type == "FusedBinary":
            assert op.candidates and all(len(c.launches) == 1 for c in op.candidates)


@pytest.mark.parametrize("placement,veus,c,size", [(None, 3, 4, 5), ("rtask-only", 4, 8, 6), ("launch-only", 2, 3, 7)])
def test_built_chain_matches_onnxruntime(tmp_path: Path, placement: str | None, veus: int, c: int, size: int) -> None:
    check_built(tmp_path, chain_model(c, size, veus), placement, veus)


def zoo_fused(tmp_path: Path, name: str) -> None:
    """A zoo --small model: every pair the ONNX file has is fused, and the build matches onnxruntime."""
    m = generate(name, small=True)
    g = import_graph(m, registry, disabled=ALONE)
    pairs = fusable_pairs(m)
    assert pairs > 0 and sum(n.op_type == "FusedBinary" for n in g.nodes) == pairs
    onnx.save(m, tmp_path / "m.onnx")
    built = build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=4, placement="rtask-only", quiet=True,
                        disable_passes=ALONE)
    x = random_inputs(m, 3)
    assert_close(built(**x), ort_outputs(m, x))


def test_resnext_small_residual_add_relu(tmp_path: Path) -> None:
    zoo_fused(tmp_path, "resnext")


@pytest.mark.parametrize("name", NAMES)
def test_every_zoo_model_fuses_exactly_its_pairs(name: str) -> None:
    """On every zoo --small model the pass fuses as many pairs as the ONNX file has (resnext 3, the others none:
    nasnet's Relus read tensors other nodes read too)."""
    m = generate(name, small=True)
    g = import_graph(m, registry, disabled=ALONE)
    assert sum(n.op_type == "FusedBinary" for n in g.nodes) == fusable_pairs(m)
