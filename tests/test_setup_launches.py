"""Setup launches (Launch.setup): tables that depend on a node's shape alone (conv_tc's im2col offsets) run once when
a build loads, in no step, and nothing prices them per inference."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_build import ort_outputs
from test_concat_elim import assert_close

from kernel_corpus.bindings import In, NotApplicable, registry
from rammer.build import build_model
from rammer.runtime import load
from rammer.zoo import random_inputs
from scheduler.baselines import node_kernels
from scheduler.pipeline import import_graph
from scheduler.profiler import H100, Profiler
from scheduler.workload import build_workload, node_info


def conv_model(c: int, m: int, hw: int, k: int, stride: int = 1, group: int = 1, dilation: int = 1,
               seed: int = 0) -> onnx.ModelProto:
    """Conv(+bias) -> Relu -> Conv 1x1: a gathered convolution (its offsets a setup launch) before one that reads X
    directly."""
    rng = np.random.default_rng(seed)
    pad = dilation * (k - 1) // 2
    w1 = rng.standard_normal((m, c // group, k, k)).astype(np.float32) * 0.2
    w2 = rng.standard_normal((4, m, 1, 1)).astype(np.float32) * 0.2
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["y1"], kernel_shape=[k, k], pads=[pad] * 4,
                              strides=[stride] * 2, group=group, dilations=[dilation] * 2, name="gathered"),
             helper.make_node("Relu", ["y1"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], kernel_shape=[1, 1], name="direct")]
    oh = (hw + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    g = helper.make_graph(nodes, "setup", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, oh, oh])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                           numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def tc_candidates(m: onnx.ModelProto, node: str) -> list:
    """The tensor-core candidates of one node of the passed graph."""
    w = build_workload(import_graph(m, registry), registry)
    spec = next(s for s in w.ops if s.name == node)
    return [c for c in spec.candidates if c.variant.startswith("tc")]


def test_gathered_conv_offsets_are_setup_and_a_direct_conv_has_none() -> None:
    m = conv_model(8, 16, 8, 3)
    gathered = tc_candidates(m, "gathered")
    assert gathered
    for cand in gathered:  # the table is the setup; every launch left runs each inference
        assert [ln.kernel for ln in cand.setup] == ["conv_tc_offsets"], cand.variant
        assert "conv_tc_offsets" not in [ln.kernel for ln in cand.launches] and cand.launches[0].kernel == "conv_tc"
    for cand in tc_candidates(m, "direct"):
        assert cand.setup == [] and cand.launches[0].kernel == "conv_tc"


def test_baselines_price_no_setup_launch() -> None:
    """A baseline launches a node's kernels once per inference: the offsets table is not among them."""
    m = conv_model(8, 16, 8, 3)
    w = build_workload(import_graph(m, registry), registry)
    spec = next(s for s in w.ops if s.name == "gathered")
    nk = next(n for n in node_kernels(w, Profiler(H100, 132)) if n.name == "gathered")
    best = next(c for c in spec.candidates if c.variant == nk.variant)
    assert len(nk.kernels_us) == len(best.launches)
    assert all(ln.kernel != "conv_tc_offsets" for ln in best.launches)


def test_a_setup_launch_reading_a_tensor_is_refused() -> None:
    """A setup launch runs before any tensor holds data: one reading an input is a binding error."""
    m = conv_model(8, 16, 8, 3)
    g = import_graph(m, registry)
    node = next(n for n in g.nodes if n.name == "gathered")
    info = node_info(g, node, registry)
    binding = next(b for b in registry.for_op(node.op_type) if b.variant.startswith("tc") and b.applies(info))
    bad = dataclasses.replace(binding, plan=lambda n: [dataclasses.replace(ln, args=[In(0)] + ln.args[1:])
                                                       if ln.setup else ln for ln in binding.plan(n)])
    with pytest.raises(NotApplicable, match="setup launch conv_tc_offsets may take only temps and scalars"):
        bad.launch(info)


# (channels in, out, spatial, kernel, stride, group, dilation), forced kind, vEUs
CASES = [((8, 16, 8, 3, 1, 1, 1), "launch", 4), ((8, 16, 9, 3, 2, 1, 1), "rtask", 3),
         ((32, 32, 8, 3, 1, 2, 1), "rtask", 5), ((16, 32, 10, 3, 1, 1, 2), "launch", 2)]


@pytest.mark.parametrize("shape,kind,veus", CASES)
def test_setup_runs_once_at_load_and_the_build_matches_onnxruntime(tmp_path: Path, shape: tuple, kind: str,
                                                                    veus: int) -> None:
    c, m_, hw, k, stride, group, dilation = shape
    m = conv_model(c, m_, hw, k, stride, group, dilation, seed=sum(shape))
    onnx.save(m, tmp_path / "m.onnx")
    built = build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=veus, quiet=True,
                        backends=("rtask",), force=(f"*={kind}",), precision="3xtf32")
    manifest = built.manifest
    setup = [built.ops[i].kernel.wrapper for i in manifest.setup]
    # the gathered conv's table (the 1x1 conv reads X directly), and a split conv's arrival counters zeroed
    assert setup[0] == "conv_tc_offsets" and set(setup[1:]) <= {"tc_arrivals_zero"}, setup
    per_inference = [op.kernel.wrapper for i, op in enumerate(built.ops) if i not in manifest.setup]
    assert "conv_tc_offsets" not in per_inference and "conv_tc" in per_inference
    x = random_inputs(m, sum(shape))
    want = ort_outputs(m, x)
    reloaded = load(tmp_path / "b")
    for _ in range(2):  # every inference reads the table the load computed
        assert_close(reloaded(**x), want)
    # the same build with its setup never run reads a zeroed table: its output is not onnxruntime's
    skipped = load(tmp_path / "b")
    skipped.manifest.setup = []
    got = skipped(**x)
    assert any(not np.allclose(got[k], want[k], rtol=1e-3, atol=1e-3) for k in want)


def test_an_inference_stopped_part_way_reruns_the_setup_before_the_next(tmp_path: Path) -> None:
    """An inference that raises part-way may leave what the setup ops own half-written (a split launch's arrival
    counters armed): the next inference on that build runs the setup ops again first, and matches onnxruntime."""
    m = conv_model(8, 16, 8, 3, seed=7)
    onnx.save(m, tmp_path / "m.onnx")
    build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=3, quiet=True, backends=("rtask",),
                force=("*=launch",), precision="3xtf32")
    x = random_inputs(m, 7)
    want = ort_outputs(m, x)
    built = load(tmp_path / "b")
    assert_close(built(**x), want)
    ex = built.executor("persistent")
    tables = [n for n in ex.vd.buffers if "taps" in n]
    assert tables, list(ex.vd.buffers)

    def stopped(host: dict) -> None:  # the inference dies after scribbling over the setup ops' table
        for n in tables:
            ex.vd.buffers[n][...] = 0
        raise KeyboardInterrupt

    run = ex.run
    ex.run = stopped
    with pytest.raises(KeyboardInterrupt):
        built(**x)
    ex.run = run
    assert_close(built(**x), want)
