"""Concat elimination (scheduler/concat_elim.py): producers write straight into their Concat slice. Checked against
onnxruntime on models built here, with the removed Concats counted from the ONNX file itself."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernel_corpus.bindings import registry
from rammer.build import build_model
from rammer.zoo import generate, random_inputs
from scheduler.export import graph_to_onnx
from scheduler.graph import View
from scheduler.pipeline import import_graph
from scheduler.reference import run_graph
from scheduler.workload import build_workload
from test_backends import siblings_model
from test_build import ort_outputs
from test_scheduler import lstm_model

REPO = Path(__file__).resolve().parent.parent


class Net:
    """A small NCHW model written with onnx.helper: convs (+relu) feeding channel concats."""

    def __init__(self, batch: int, channels: int, size: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.batch, self.size = batch, size
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.channels = {"x": channels}
        self.k = 0

    def conv(self, x: str, out_ch: int, relu: bool = True, kernel: int = 1) -> str:
        """A same-size conv with bias, optionally followed by a Relu."""
        self.k += 1
        w, b, y = f"w{self.k}", f"b{self.k}", f"conv{self.k}"
        self.inits += [numpy_helper.from_array(self.rng.standard_normal(
            (out_ch, self.channels[x], kernel, kernel)).astype(np.float32) * 0.3, w),
            numpy_helper.from_array(self.rng.standard_normal(out_ch).astype(np.float32) * 0.1, b)]
        pad = kernel // 2
        self.nodes.append(helper.make_node("Conv", [x, w, b], [y], pads=[pad] * 4))
        self.channels[y] = out_ch
        if not relu:
            return y
        self.nodes.append(helper.make_node("Relu", [y], [f"{y}_relu"]))
        self.channels[f"{y}_relu"] = out_ch
        return f"{y}_relu"

    def concat(self, inputs: list[str], name: str) -> str:
        """A channel concat (axis 1)."""
        self.nodes.append(helper.make_node("Concat", inputs, [name], axis=1))
        self.channels[name] = sum(self.channels[i] for i in inputs)
        return name

    def model(self, outputs: list[str]) -> onnx.ModelProto:
        """The model with input x and the given outputs (shapes left to ONNX inference)."""
        b, s = self.batch, self.size
        graph = helper.make_graph(
            self.nodes, "concat-test",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, self.channels["x"], s, s])],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, [b, self.channels[o], s, s]) for o in outputs],
            initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 9
        return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def cell_model(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """x -> three conv branches; concat(branch, branch, x, branch) (x a graph input: copied); a nested concat of
    that concat with two more convs; a conv reads the outer concat; two outputs."""
    n = Net(batch, 4, 6, seed)
    a, b, c = n.conv("x", 4), n.conv("x", 8, kernel=3), n.conv("x", 4, relu=False)
    inner = n.concat([a, b, "x", c], "inner")
    d, e = n.conv(inner, 4), n.conv(b, 4, kernel=3)  # b is read by a conv as well as by the concat
    outer = n.concat([d, inner, e], "outer")
    f = n.conv(outer, 4, kernel=3)
    return n.model([f, outer])


def concats(model: onnx.ModelProto) -> int:
    """Concat nodes of the ONNX file."""
    return sum(n.op_type == "Concat" for n in model.graph.node)


def assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=name)


def test_batch1_pieces_are_placed_and_inputs_copied() -> None:
    m = cell_model(batch=1)
    g = import_graph(m, registry)
    # inner: a, b, c placed, x (a graph input) copied by one single-piece Concat; outer: d, e placed, inner placed
    # (nested) -> the ONNX file's 2 Concats become 1 copy of x
    left = [n for n in g.nodes if n.op_type == "Concat"]
    assert concats(m) == 2 and len(left) == 1
    assert left[0].inputs == ["x"]
    # x sits after a (4 ch) and b (8 ch) in inner, which sits after d (4 ch) in outer: 16 channels of 6x6 in
    assert g.buffer_of(left[0].outputs[0]) == View("outer", 16 * 36)
    assert g.buffer_of("inner").base == "outer"
    x = random_inputs(m, 3)
    assert_close(run_graph(g, x), ort_outputs(m, x))
    standard = import_graph(m, registry, disabled=("fuse_activations",))  # no custom op: onnxruntime runs it
    assert_close(ort_outputs(graph_to_onnx(standard), x), ort_outputs(m, x))  # the dumped graph computes the same


def test_readers_wait_for_every_writer() -> None:
    """The consumer of a removed Concat depends on each node writing into the part of its buffer it reads."""
    m = cell_model(batch=1)
    g = import_graph(m, registry)
    w = build_workload(g, registry)
    ops = {op.name: op for op in w.ops}
    last = next(n for n in g.nodes if n.outputs[0] == g.outputs[0])
    writers = {node.name for node in g.nodes if node.outputs[0] in g.aliases}
    reader_preds = {w.ops[p].name for p in ops[last.name].preds}
    assert writers and writers <= reader_preds  # it reads all of `outer`: every writer is a predecessor
    # the conv reading b waits for b's producer only, not for the other writers of the same buffer
    b_reader = next(n for n in g.nodes if n.op_type in ("Conv", "FusedConv") and any(
        i != "x" and g.buffer_of(i).base == "outer" and g.tensors[i].shape[1] == 8 for i in n.inputs))
    assert len(ops[b_reader.name].preds) == 1


def test_batch2_slices_are_not_contiguous_and_stay_copies() -> None:
    m = cell_model(batch=2, seed=1)
    g = import_graph(m, registry)
    assert sum(n.op_type == "Concat" for n in g.nodes) == concats(m)
    x = random_inputs(m, 4)
    assert_close(run_graph(g, x), ort_outputs(m, x))


def test_disabled_pass_keeps_every_concat() -> None:
    m = cell_model()
    g = import_graph(m, registry, disabled=("eliminate_concats",))
    assert sum(n.op_type == "Concat" for n in g.nodes) == concats(m)


def test_unaligned_piece_and_doubly_concatenated_tensor_are_copied() -> None:
    """A piece at a byte offset that is not a multiple of 16 stays a copy, and a tensor two Concats read is placed
    in neither."""
    n = Net(1, 3, 3, 2)  # 3x3 maps: a 1-channel piece is 9 floats, so the piece after it is misaligned
    a, b, c = n.conv("x", 1), n.conv("x", 4), n.conv("x", 4)
    first = n.concat([a, b], "first")
    second = n.concat([c, b], "second")
    m = n.model([first, second])
    g = import_graph(m, registry)
    assert g.buffer_of(a) == View("first", 0)
    assert b not in g.aliases  # read by two Concats
    assert g.buffer_of(c) == View("second", 0)
    assert sum(n.op_type == "Concat" for n in g.nodes) == 2  # each reduced to the copy of b
    x = random_inputs(m, 5)
    assert_close(run_graph(g, x), ort_outputs(m, x))


def test_nested_concat_read_only_by_the_outer_one(tmp_path: Path) -> None:
    """An inner Concat that only the outer one reads: its producers write into the outer buffer through it, and
    dead-node removal keeps the hop."""
    n = Net(1, 3, 4, 6)
    a, b, c = n.conv("x", 4), n.conv("x", 8, kernel=3), n.conv("x", 4)
    outer = n.concat([c, n.concat([a, b], "inner")], "outer")
    m = n.model([n.conv(outer, 4, kernel=3)])
    g = import_graph(m, registry)
    assert not [n for n in g.nodes if n.op_type == "Concat"] and concats(m) == 2
    assert g.buffer_of(a) == View("outer", 4 * 16) and g.buffer_of(b) == View("outer", 8 * 16)
    x = random_inputs(m, 2)
    assert_close(run_graph(g, x), ort_outputs(m, x))
    onnx.save(m, tmp_path / "m.onnx")
    assert_close(build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=2, quiet=True)(**x),
                 ort_outputs(m, x))


@pytest.mark.parametrize("steps,batch,hidden", [(5, 1, 4), (3, 2, 8)])
def test_lstm_steps_write_into_y(tmp_path: Path, steps: int, batch: int, hidden: int) -> None:
    """The unrolled LSTM's Y Concat (of [1,1,B,H] reshape views of each step's h) disappears: each cell writes h
    into its step of Y, and the next step and layer read it there."""
    m = lstm_model(steps, batch, 3, hidden, 2)
    assert sum(n.op_type == "LSTM" for n in m.graph.node) == 2
    g = import_graph(m, registry)
    assert not [n for n in g.nodes if n.op_type == "Concat"]
    cells = [n for n in g.nodes if n.op_type == "LSTMCell"]
    top = [c for c in cells if g.buffer_of(c.outputs[0]).base == g.buffer_of("y").base]
    assert [g.buffer_of(c.outputs[0]).offset for c in top] == [t * batch * hidden for t in range(steps)]
    x = random_inputs(m, steps)
    assert_close(run_graph(g, x), ort_outputs(m, x))
    onnx.save(m, tmp_path / "m.onnx")
    assert_close(build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=3, quiet=True)(**x),
                 {"y": ort_outputs(m, x)["y"]})


@pytest.mark.parametrize("kind,batch,nodes", [("conv", 1, 3), ("matmul", 1, 2), ("conv", 2, 1)])
def test_placed_siblings_are_not_merged(tmp_path: Path, kind: str, batch: int, nodes: int) -> None:
    """--merge always with three siblings c0, c1 (a graph output), c2 concatenated. Conv at batch 1: c0 and c2 write
    into the Concat and stay apart (a merge would make them Split pieces), c1 is copied: 3 nodes. MatMul at batch 1:
    c2 sits 17 floats in (not 16-byte aligned), so only c0 is placed and c1, c2 merge: 2. Batch 2: no piece is
    contiguous, nothing is placed, the three merge: 1."""
    m = siblings_model(kind, batch, 5)
    onnx.save(m, tmp_path / "m.onnx")
    built = build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=3, merge="always", quiet=True)
    x = random_inputs(m, 6)
    assert_close(built(**x), ort_outputs(m, x))
    op = "Conv" if kind == "conv" else "MatMul"
    plan = json.loads((tmp_path / "b" / "plan.json").read_text())
    assert len({o["node"] for o in plan["ops"] if o["op_type"] == op}) == nodes


@pytest.mark.parametrize("placement,veus", [(None, 3), ("rtask-only", 4), ("launch-only", 2)])
def test_built_cell_matches_onnxruntime(tmp_path: Path, placement: str | None, veus: int) -> None:
    check_built(tmp_path, cell_model(batch=1, seed=veus), placement, veus)


def check_built(tmp_path: Path, m: onnx.ModelProto, placement: str | None, veus: int) -> None:
    """`m` built for the CPU target (`placement`, `veus`) gives onnxruntime's outputs on random inputs."""
    onnx.save(m, tmp_path / "m.onnx")
    built = build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=veus, placement=placement,
                        quiet=True)
    x = random_inputs(m, veus)
    assert_close(built(**x), ort_outputs(m, x))


def test_cli_run_check_passes(tmp_path: Path) -> None:
    m = cell_model(batch=1, seed=7)
    onnx.save(m, tmp_path / "m.onnx")
    cli = [sys.executable, "-c", "from rammer.cli import main; main()"]
    ok = subprocess.run(cli + ["build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "b"), "--target", "cpu",
                               "--veus", "4", "--placement", "rtask-only"], cwd=REPO, capture_output=True,
                        text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr
    run = subprocess.run(cli + ["run", str(tmp_path / "b"), "--check"], cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0 and "check: PASS" in run.stdout, run.stdout + run.stderr


def zoo_check(tmp_path: Path, name: str, placement: str | None) -> None:
    """A zoo --small model built on the CPU target matches onnxruntime, and its Concats (batch-1 channel concats of
    node outputs, as the ONNX file says) are gone: one operator fewer each."""
    m = generate(name, small=True)
    assert all(helper.get_attribute_value(a) == 1 for n in m.graph.node if n.op_type == "Concat" for a in n.attribute
               if a.name == "axis") and concats(m) > 0
    onnx.save(m, tmp_path / "m.onnx")
    g = import_graph(m, registry)
    kept = import_graph(m, registry, disabled=("eliminate_concats",))
    assert not [n for n in g.nodes if n.op_type == "Concat"]
    assert len(kept.nodes) - len(g.nodes) == concats(m)
    built = build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=4, placement=placement, quiet=True)
    x = random_inputs(m, 1)
    assert_close(built(**x), ort_outputs(m, x))


@pytest.mark.parametrize("name,placement", [("squeezenet", "rtask-only"), ("squeezenet", "launch-only")])
def test_zoo_small_models_with_concats(tmp_path: Path, name: str, placement: str) -> None:
    zoo_check(tmp_path, name, placement)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["inception-v3", "nasnet"])
def test_zoo_small_large_models_with_concats(tmp_path: Path, name: str) -> None:
    zoo_check(tmp_path, name, "rtask-only")
