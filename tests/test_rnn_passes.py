"""LSTM/GRU in every direction and layout: split_rnn_directions and the unroll passes, checked against onnxruntime
(onnx's ReferenceEvaluator for layout=1) on the original node (numpy evaluation of the passed graph, and one build on the CPU emulator per op)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from scheduler.onnx_import import import_model
from scheduler.passes import run_passes
from scheduler.reference import run_graph


def rnn_model(op: str, steps: int, batch: int, isize: int, hidden: int, direction: str, layout: int,
              lbr: int = 0, initial: bool = True, seed: int = 0, peepholes: bool = False) -> tuple[onnx.ModelProto,
                                                                                                   dict]:
    """One LSTM/GRU node with constant random weights; feeds for X (and the initial states)."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    w = lambda *s: numpy_helper.from_array((rng.standard_normal(s) * 0.4).astype(np.float32))  # noqa: E731
    inits = [w(dirs, gates * hidden, isize), w(dirs, gates * hidden, hidden), w(dirs, 2 * gates * hidden)]
    if peepholes:
        inits.append(w(dirs, 3 * hidden))
    for t, name in zip(inits, "WRBP"):
        t.name = name
    x_shape = [batch, steps, isize] if layout else [steps, batch, isize]
    state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    names = ["x", "W", "R", "B", "", "h0" if initial else ""] + (["c0" if initial else ""] if op == "LSTM" else [])
    names += ["P"] if peepholes else []
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    attrs = {"hidden_size": hidden, "direction": direction, "layout": layout}
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    node = helper.make_node(op, names, outs, **attrs)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    for s in [n for n in names[5:7] if n]:
        inputs.append(helper.make_tensor_value_info(s, TensorProto.FLOAT, state))
        feeds[s] = rng.standard_normal(state).astype(np.float32)
    y_shape = [batch, steps, dirs, hidden] if layout else [steps, dirs, batch, hidden]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)] + \
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, state) for o in outs[1:]]
    model = helper.make_model(helper.make_graph([node], op, inputs, outputs, initializer=inits),
                              opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model, feeds


def ort_run(model: onnx.ModelProto, feeds: dict) -> dict:
    """onnxruntime on the original node: the truth (onnx's ReferenceEvaluator for layout=1, which onnxruntime's
    CPU provider does not implement)."""
    if model.graph.node[0].attribute and any(a.name == "layout" and a.i for a in model.graph.node[0].attribute):
        from onnx.reference import ReferenceEvaluator
        return dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


CASES = [(op, d, layout, lbr, initial) for op in ("LSTM", "GRU") for d in ("forward", "reverse", "bidirectional")
         for layout in (0, 1) for lbr in ((0, 1) if op == "GRU" else (0,)) for initial in (True, False)]


@pytest.mark.parametrize("op,direction,layout,lbr,initial", CASES)
def test_passed_rnn_matches_onnxruntime(op: str, direction: str, layout: int, lbr: int, initial: bool) -> None:
    steps, batch, isize, hidden = 3 + layout, 2 + lbr, 5, 4 + (direction == "reverse")
    model, feeds = rnn_model(op, steps, batch, isize, hidden, direction, layout, lbr, initial)
    g = run_passes(import_model(model))
    assert not {"LSTM", "GRU"} & {n.op_type for n in g.nodes}
    got, want = run_graph(g, feeds), ort_run(model, feeds)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_bidirectional_batch_major_rnn_builds_and_runs_on_the_emulator(tmp_path: Path, op: str) -> None:
    from rammer.build import build_model
    model, feeds = rnn_model(op, 4, 3, 6, 5, "bidirectional", 1, lbr=1, seed=7)
    onnx.save(model, str(tmp_path / "m.onnx"))
    built = build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", veus=3, quiet=True)
    got, want = built.run(feeds), ort_run(model, feeds)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("direction,layout,initial", [("forward", 0, True), ("bidirectional", 1, False),
                                                      ("reverse", 0, False)])
def test_lstm_with_peepholes_matches(direction: str, layout: int, initial: bool) -> None:
    from onnx.reference import ReferenceEvaluator
    model, feeds = rnn_model("LSTM", 4, 2, 3, 5, direction, layout, initial=initial, seed=3, peepholes=True)
    g = run_passes(import_model(model))
    assert "LSTMCell" not in {n.op_type for n in g.nodes}  # the fused cell has no peepholes: standard operators
    got = run_graph(g, feeds)
    want = dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)))
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5, err_msg=name)
