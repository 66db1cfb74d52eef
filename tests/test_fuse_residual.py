"""Residual epilogue fusion (scheduler/fuse_residual.py): Conv(+bias) -> Add(other) [-> Relu] as one FusedConvAdd
node. The fused Adds are counted from the ONNX file itself (shape inference, readers), the built models checked
against onnxruntime on the CPU target with every backend the fused node can run on."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_build import assert_close, ort_outputs

from kernel_corpus.bindings import registry
from rammer.build import build_model
from rammer.zoo import generate, random_inputs
from scheduler.pipeline import import_graph
from scheduler.workload import build_workload
from vdevice.target import BackendName, Target, TargetKind


def block_model(batch: int, c: int, size: int, seed: int) -> onnx.ModelProto:
    """x [batch, c, s, s]:
    a = Relu(Conv1(x) + b1 + x)            fused, with the Relu; the residual a graph input
    s = Conv2(a) + a                       fused, no bias, no Relu
    t = Relu(Conv3(s) + Conv4(s))          fused into Conv4 (the later producer); Conv3's output the residual
    c5 = Conv5(t); u = c5 + t; v = c5 * t  not fused: c5 has two readers
    p = Conv6(u) + k                       not fused: k [c, 1, 1] broadcasts
    q = Conv7(p) + p; r = Relu(q), q also a graph output: fused without the Relu (q's other reader)
    outputs: v, q, r."""
    rng = np.random.default_rng(seed)

    def weight(name: str, shape: tuple[int, ...], scale: float = 0.3) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [weight("W1", (c, c, 3, 3)), weight("b1", (c,)), weight("W2", (c, c, 1, 1)),
             weight("W3", (c, c, 3, 3)), weight("b3", (c,)), weight("W4", (c, c, 1, 1)), weight("b4", (c,)),
             weight("W5", (c, c // 2, 3, 3)), weight("W6", (c, c, 1, 1)), weight("b6", (c,)), weight("k", (c, 1, 1)),
             weight("W7", (c, 1, 3, 3)), weight("b7", (c,))]
    mk = helper.make_node
    pads = {"pads": [1, 1, 1, 1]}
    nodes = [mk("Conv", ["x", "W1", "b1"], ["c1"], **pads), mk("Add", ["c1", "x"], ["a0"]), mk("Relu", ["a0"], ["a"]),
             mk("Conv", ["a", "W2"], ["c2"]), mk("Add", ["a", "c2"], ["s"]),
             mk("Conv", ["s", "W3", "b3"], ["c3"], **pads), mk("Conv", ["s", "W4", "b4"], ["c4"]),
             mk("Add", ["c3", "c4"], ["t0"]), mk("Relu", ["t0"], ["t"]),
             mk("Conv", ["t", "W5"], ["c5"], group=2, **pads), mk("Add", ["c5", "t"], ["u"]),
             mk("Mul", ["c5", "t"], ["v"]), mk("Conv", ["u", "W6", "b6"], ["c6"]), mk("Add", ["c6", "k"], ["p"]),
             mk("Conv", ["p", "W7", "b7"], ["c7"], group=c, **pads), mk("Add", ["c7", "p"], ["q"]),
             mk("Relu", ["q"], ["r"])]
    full = [batch, c, size, size]
    graph = helper.make_graph(nodes, "residual-test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, full)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, full) for o in ("v", "q", "r")],
                              initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.checker.check_model(m, full_check=True)
    return m


FUSED_IN_BLOCK = 4  # a, s, t, q: counted by hand from block_model's docstring
WITH_RELU_IN_BLOCK = 2  # a, t


def residual_adds(model: onnx.ModelProto) -> tuple[int, int]:
    """(Adds a convolution can take, those of them whose Relu joins) counted on the protos, independently of the
    scheduler's graph: an Add of two same-shape operands one of which a Conv writes, read only by that Add and no
    graph output (the graph carries no BatchNormalization here: a Conv's bias is its own); the Relu when it alone
    reads the Add's output, which is no graph output."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    shapes |= {t.name: list(t.dims) for t in model.graph.initializer}
    readers = Counter(i for n in model.graph.node for i in n.input)
    outputs = {o.name for o in model.graph.output}
    producer = {o: n for n in model.graph.node for o in n.output}
    adds = relus = 0
    for n in model.graph.node:
        if n.op_type != "Add" or shapes[n.input[0]] != shapes[n.input[1]]:
            continue
        if any(producer.get(i) is not None and producer[i].op_type == "Conv" and readers[i] == 1 and i not in outputs
               for i in n.input):
            adds += 1
            sole = [r for r in model.graph.node if n.output[0] in r.input]
            relus += readers[n.output[0]] == 1 and n.output[0] not in outputs and sole[0].op_type == "Relu"
    return adds, relus


def fused_nodes(g) -> list:
    return [n for n in g.nodes if n.op_type == "FusedConvAdd"]


def test_fused_adds_counted_from_the_onnx_file() -> None:
    m = block_model(1, 4, 5, 0)
    assert residual_adds(m) == (FUSED_IN_BLOCK, WITH_RELU_IN_BLOCK)
    g = import_graph(m, registry)
    fused = fused_nodes(g)
    assert len(fused) == FUSED_IN_BLOCK
    assert sum(n.attrs.get("activation") == "Relu" for n in fused) == WITH_RELU_IN_BLOCK
    by_out = {n.outputs[0]: n for n in fused}
    assert by_out["t"].inputs[:2] == ["s", "W4"] and by_out["t"].inputs[3] == "c3"  # the later Conv took the Add
    assert by_out["s"].inputs[2] == ""  # no bias: absent, the residual still input 3
    plain = import_graph(m, registry, disabled=("fuse_residuals",))
    # one node fewer per fusion: the Add, or the FusedBinary fuse_elementwise makes of an Add and its Relu
    assert len(plain.nodes) - len(g.nodes) == FUSED_IN_BLOCK
    assert Counter(n.op_type for n in plain.nodes)["FusedBinary"] == WITH_RELU_IN_BLOCK


def test_the_fused_node_follows_the_residual_producer() -> None:
    """Graph order stays topological: each fused node after the producer of its residual."""
    g = import_graph(block_model(1, 4, 5, 1), registry)
    position = {o: i for i, n in enumerate(g.nodes) for o in n.outputs}
    for n in fused_nodes(g):
        if n.inputs[3] in position:
            assert position[n.inputs[3]] < position[n.outputs[0]]
    build_workload(g, registry)  # raises on a node that reads a tensor produced later


def test_every_fused_node_keeps_every_conv_candidate() -> None:
    """The fused node is offered every conv kernel the Conv was (the residual is in every conv epilogue), and the
    library call (the CPU target's: numpy)."""
    m = block_model(1, 8, 6, 2)
    target = Target(TargetKind.CPU, 4, backends=(BackendName.RTASK, BackendName.LIBRARY))
    fused = {op.name: op for op in build_workload(import_graph(m, registry), registry, target).ops
             if op.op_type == "FusedConvAdd"}
    before = {op.name: op for op in build_workload(import_graph(m, registry, disabled=("fuse_residuals",)),
                                                   registry, target).ops}
    assert len(fused) == FUSED_IN_BLOCK and all(before[name].op_type == "Conv" for name in fused)
    for name, op in fused.items():
        assert {c.variant for c in op.candidates} == {c.variant for c in before[name].candidates}
        assert len(op.calls) == len(before[name].calls) == 1


@pytest.mark.parametrize("placement,batch,veus,c,size", [
    (None, 1, 3, 4, 5), ("rtask-only", 2, 4, 8, 6), ("launch-only", 1, 2, 6, 7), ("launch-only", 2, 3, 4, 4),
    ("rtask-only", 1, 5, 32, 8)])
def test_built_blocks_match_onnxruntime(tmp_path: Path, placement: str | None, batch: int, veus: int, c: int,
                                        size: int) -> None:
    """Batch 1 and 2, the default placement (library calls where they win on the CPU), every node an rKernel, every
    node a launch; 32 channels take the tensor-core tiles."""
    m = block_model(batch, c, size, veus)
    onnx.save(m, tmp_path / "m.onnx")
    built = build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=veus, placement=placement,
                        quiet=True)
    x = random_inputs(m, veus)
    assert_close(built(**x), ort_outputs(m, x))


def test_library_call_adds_the_residual() -> None:
    """The library backend's conv2d call on the CPU target (numpy) adds input 3 after the bias, before the Relu."""
    from scheduler.backends.library import run_conv
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 3, 5, 5)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b, z = rng.standard_normal(4).astype(np.float32), rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    y = np.empty((2, 4, 5, 5), np.float32)
    run_conv(np, [x, w, b, z], [y], {"pads": [1, 1, 1, 1], "activation": "Relu"})
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([conv, helper.make_node("Add", ["c", "z"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                              "ref", [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                                      for n, a in (("x", x), ("w", w), ("b", b), ("z", z))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    want = ort_outputs(model, {"x": x, "w": w, "b": b, "z": z})["y"]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,adds,relus", [("resnext", 3, 3), ("nasnet", 10, 0), ("inception-v3", 0, 0),
                                             ("squeezenet", 0, 0), ("transformer", 0, 0)])
def test_zoo_small_models_fuse_their_residual_adds(name: str, adds: int, relus: int) -> None:
    """ResNeXt's three blocks (the expanding 1x1 Conv takes the Add and the Relu, the projection shortcut Conv's
    output its residual: both are Convs, the later one hosts), NASNet's cells' Conv + Add (no Relu after: the
    cells' Adds feed several readers); the others have no Conv -> Add."""
    g = import_graph(generate(name, small=True), registry)
    assert len(fused_nodes(g)) == adds
    assert sum(n.attrs.get("activation") == "Relu" for n in fused_nodes(g)) == relus


@pytest.mark.slow
@pytest.mark.parametrize("name,placement", [("resnext", "rtask-only"), ("resnext", "launch-only"),
                                            ("nasnet", "rtask-only"), ("nasnet", "launch-only")])
def test_zoo_small_builds_with_fused_residuals_check(tmp_path: Path, name: str, placement: str) -> None:
    """The zoo --small models whose graphs the pass changes, built for the CPU with every node an rKernel or every
    node a launch (the kernels the planner picks: tensor-core tiles and fp32 ones), match onnxruntime."""
    m = generate(name, small=True)
    onnx.save(m, tmp_path / "m.onnx")
    built = build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=8, placement=placement, quiet=True)
    plan = json.loads((built.folder / "plan.json").read_text())
    assert any(op["op_type"] == "FusedConvAdd" for op in plan["ops"])
    x = random_inputs(m, 1)
    assert_close(built(**x), ort_outputs(m, x))
