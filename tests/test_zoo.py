"""Model zoo (`rammer zoo`) and benchmark harness (`rammer bench`): checked against onnx's checker,
onnxruntime, published model sizes and numpy."""
from __future__ import annotations

import functools
import json
import math
import time

import networkx as nx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference

from rammer import bench
from rammer.zoo import NAMES, generate, nasbench, random_inputs, zoo_command

ALLOWED = {"MatMul", "Gemm", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization", "Add",
           "Mul", "Sub", "Relu", "Sigmoid", "Tanh", "Gelu", "Softmax", "LayerNormalization", "Concat", "Split",
           "Slice", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "LSTM"}
EXPECTED_NAMES = {"lstm-tc", "seq2seq", "deepspeech2", "resnext", "nasnet", "alexnet", "inception-v3",
                  "squeezenet", "transformer", "nasbench"}


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of onnxruntime on the CPU."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def shapes_of(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Every tensor's shape from onnx's own (strict) shape inference, not from the zoo's bookkeeping."""
    inferred = shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in [*g.value_info, *g.input, *g.output]}
    shapes.update({t.name: list(t.dims) for t in g.initializer})
    return shapes


def attr(node: onnx.NodeProto, name: str, default=None):
    """One node attribute value."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def cost(model: onnx.ModelProto) -> tuple[int, int]:
    """(multiply-adds, operators after LSTM unrolling): an LSTM counts 5 operators per step plus 3."""
    shapes = shapes_of(model)
    macs = ops = 0
    for n in model.graph.node:
        out = shapes[n.output[0]]
        if n.op_type == "Conv":
            macs += math.prod(out) * math.prod(shapes[n.input[1]][1:])
        elif n.op_type in ("MatMul", "Gemm"):
            a = shapes[n.input[0]]
            macs += math.prod(out) * (a[0] if attr(n, "transA", 0) else a[-1])
        elif n.op_type == "LSTM":
            t, b, i = shapes[n.input[0]]
            h = attr(n, "hidden_size")
            macs += t * b * 4 * h * (i + h)
            ops += 5 * t + 3
            continue
        ops += 1
    return macs, ops


@functools.lru_cache(maxsize=None)
def full(name: str) -> onnx.ModelProto:
    """A full-size model at batch 1, generated once per test session (the large ones take seconds)."""
    return generate(name)


def params(model: onnx.ModelProto, skip: tuple[str, ...] = ()) -> int:
    """Number of float weights, leaving out initializers whose name starts with one of `skip`."""
    return sum(math.prod(t.dims) for t in model.graph.initializer
               if t.data_type == TensorProto.FLOAT and not t.name.startswith(skip))


# ---- every model at --small ---------------------------------------------------------------------------
def test_names_are_the_ten_models():
    assert set(NAMES) == EXPECTED_NAMES and len(NAMES) == 10


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_small_model_is_valid_runs_and_fits_the_emulator_budget(name):
    m = generate(name, small=True)
    onnx.checker.check_model(m, full_check=True)
    assert {n.op_type for n in m.graph.node} <= ALLOWED
    assert m.opset_import[0].version == (20 if name == "transformer" else 17)
    feeds = random_inputs(m, seed=1)
    outs = ort_run(m, feeds)
    for o in outs:
        assert np.all(np.isfinite(o)) and o.std() > 1e-4, "output is degenerate"
    macs, ops = cost(m)
    assert macs < 2e7, f"{macs} multiply-adds"
    assert ops < 200, f"{ops} operators after LSTM unrolling"


@pytest.mark.parametrize("name,batch", [("resnext", 3), ("transformer", 2), ("nasbench", 2), ("seq2seq", 3),
                                        ("deepspeech2", 2)])
def test_batch_rows_are_independent_samples(name, batch):
    """A batch-B model applied to B stacked inputs equals the batch-1 model applied to each input."""
    mb, m1 = generate(name, batch=batch, small=True), generate(name, batch=1, small=True)
    feeds = random_inputs(mb, seed=3)
    (key,) = feeds
    axis = 1 if name in ("seq2seq", "lstm-tc") else 0
    (yb,) = ort_run(mb, feeds)
    out_axis = 1 if name in ("seq2seq", "deepspeech2") else 0
    for i in range(batch):
        (y1,) = ort_run(m1, {key: np.take(feeds[key], [i], axis=axis)})
        np.testing.assert_allclose(np.take(yb, [i], axis=out_axis), y1, rtol=1e-4, atol=1e-5)


def test_generation_is_deterministic_in_the_seed():
    a, b = generate("resnext", small=True, seed=5), generate("resnext", small=True, seed=5)
    c = generate("resnext", small=True, seed=6)
    assert a.SerializeToString() == b.SerializeToString()
    wa = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
    wc = {t.name: numpy_helper.to_array(t) for t in c.graph.initializer}
    assert wa.keys() == wc.keys() and any(not np.array_equal(wa[k], wc[k]) for k in wa)


# ---- full size: structure against published figures ------------------------------------------------------
@pytest.mark.parametrize("name,out_shape", [("lstm-tc", (100, 1, 256)), ("seq2seq", (30, 1, 128)),
                                            ("deepspeech2", (150, 1, 29)), ("squeezenet", (1, 1000)),
                                            ("nasbench", (1, 10)), ("nasnet", (1, 10))])
def test_full_size_cheap_models_check_and_run(name, out_shape):
    m = full(name)
    onnx.checker.check_model(m, full_check=True)
    assert {n.op_type for n in m.graph.node} <= ALLOWED
    (y,) = ort_run(m, random_inputs(m))
    assert y.shape == out_shape and np.all(np.isfinite(y))


def test_full_rnn_hyperparameters_follow_rammer_table_1():
    def lstms(m):
        shapes = shapes_of(m)
        return [(shapes[n.input[0]][0], shapes[n.input[0]][2], attr(n, "hidden_size"))
                for n in m.graph.node if n.op_type == "LSTM"]
    assert lstms(full("lstm-tc")) == [(100, 256, 256)] * 10
    assert lstms(full("seq2seq")) == [(100, 128, 128)] * 8 + [(30, 128, 128)] * 4
    ds2 = full("deepspeech2")
    assert [d.dim_value for d in ds2.graph.input[0].type.tensor_type.shape.dim] == [1, 1, 300, 161]
    assert [n.op_type for n in ds2.graph.node].count("Conv") == 2
    layers = lstms(ds2)
    assert len(layers) == 7 and all(h == 256 for _, _, h in layers) and all(i == 256 for _, i, _ in layers[1:])
    # ONNX LSTM weights: W [1, 4H, I], R [1, 4H, H], B [1, 8H]
    assert params(full("lstm-tc")) == 10 * (4 * 256 * 256 * 2 + 8 * 256)


def test_seq2seq_decoder_starts_from_the_top_encoder_states():
    m = generate("seq2seq", small=True)
    lstm = [n for n in m.graph.node if n.op_type == "LSTM"]
    enc, dec = lstm[:2], lstm[2:]
    assert [list(n.input[5:7]) for n in dec] == [list(n.output[1:3]) for n in enc]
    assert all(n.input[0] in {t.name for t in m.graph.initializer} for n in dec[:1])


@pytest.mark.parametrize("name,skip,low,high", [
    ("squeezenet", (), 1_235_496, 1_235_496),                      # torchvision squeezenet1_1, exact
    ("alexnet", (), 61_100_840, 61_100_840),                       # torchvision alexnet, exact
    ("resnext", ("bn_m", "bn_v"), 68.0e6, 68.2e6),                 # ResNeXt-29 16x64d: 68.1M (Xie et al.)
    ("nasnet", ("bn_m", "bn_v"), 3.2e6, 3.4e6),                    # NASNet-A 6@768: 3.3M (Zoph et al.)
    ("transformer", ("causal_mask", "scale"), 85_056_000, 85_056_000),  # GPT-2 small blocks + final LN
])
def test_model_sizes_match_published_figures(name, skip, low, high):
    assert low <= params(full(name), skip) <= high


def test_transformer_causal_mask_blocks_the_future():
    mask = next(numpy_helper.to_array(t) for t in generate("transformer", small=True).graph.initializer
                if t.name.startswith("causal_mask"))
    assert np.all(mask[np.triu_indices(mask.shape[0], 1)] < -1e8) and np.all(np.tril(mask) == 0)
    m = generate("transformer", small=True)
    feeds = random_inputs(m, seed=9)
    (y,) = ort_run(m, feeds)
    changed = feeds["input"].copy()
    changed[:, 10:] = np.random.default_rng(1).standard_normal(changed[:, 10:].shape)  # cannot reach 0..9
    (y2,) = ort_run(m, {"input": changed})
    np.testing.assert_allclose(y2[:, :10], y[:, :10], rtol=1e-5, atol=1e-6)
    assert not np.allclose(y2[:, 10:], y[:, 10:], atol=1e-3)


def test_inception_and_resnext_structure():
    inc = full("inception-v3")
    shapes = shapes_of(inc)
    concats = [shapes[n.output[0]][1:] for n in inc.graph.node if n.op_type == "Concat"]
    # Mixed_5b-d, 6a-e, 7a, then per Mixed_7b/c: its two inner 1x3/3x1 concats and the module's own.
    assert [c[0] for c in concats] == [256, 288, 288, 768, 768, 768, 768, 768, 1280, 768, 768, 2048,
                                       768, 768, 2048]
    assert [c[1] for c in concats] == [35] * 3 + [17] * 5 + [8] * 7
    assert 5.6e9 < cost(inc)[0] < 5.8e9  # 5.7 GMACs (Szegedy et al.)
    rx = full("resnext")
    groups = [attr(n, "group", 1) for n in rx.graph.node if n.op_type == "Conv"]
    assert groups.count(16) == 9 and set(groups) == {1, 16}


# ---- NASBench cells --------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(8))
def test_nasbench_cell_is_a_valid_pruned_dag(seed):
    spec = nasbench.random_cell(seed)
    mat = spec.matrix
    g = nx.DiGraph([(int(i), int(j)) for i, j in zip(*np.nonzero(mat))])
    g.add_nodes_from(range(spec.size))
    last = spec.size - 1
    assert nx.is_directed_acyclic_graph(g) and np.all(np.tril(mat) == 0)
    assert 3 <= spec.size <= 7 and 1 <= mat.sum() <= 7 and len(spec.ops) == spec.size - 2
    assert all(nx.has_path(g, 0, v) and nx.has_path(g, v, last) for v in range(spec.size))
    ch = nasbench.vertex_channels(spec, 16, 64)
    assert sum(ch[v] for v in range(1, last) if mat[v, last]) == 64 or not mat[1:last, last].any()
    m = generate("nasbench", small=True, seed=seed)
    onnx.checker.check_model(m, full_check=True)
    (y,) = ort_run(m, random_inputs(m))
    assert y.shape == (1, 10) and np.all(np.isfinite(y))


def test_nasbench_seeds_give_different_cells():
    cells = {(nasbench.random_cell(s).matrix.tobytes(), nasbench.random_cell(s).ops) for s in range(6)}
    assert len(cells) >= 4


def test_nasbench_prune_drops_dead_vertices():
    mat = np.zeros((5, 5), dtype=int)
    mat[0, 1] = mat[1, 4] = mat[0, 2] = mat[3, 4] = 1  # 2 is a dead end, 3 is unreachable
    spec = nasbench.prune(mat, ["conv3x3-bn-relu", "conv1x1-bn-relu", "maxpool3x3"])
    assert spec.size == 3 and spec.ops == ("conv3x3-bn-relu",)
    assert nasbench.prune(np.zeros((4, 4), dtype=int), ["maxpool3x3"] * 2) is None


# ---- CLI ---------------------------------------------------------------------------------------------------
def test_zoo_command_writes_a_loadable_model(tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert zoo_command("squeezenet", str(out), batch=2, small=True, seed=0, list_=False) == 0
    m = onnx.load(str(out))
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim][0] == 2
    assert "squeezenet" in capsys.readouterr().out


def test_zoo_command_lists_every_model(capsys):
    assert zoo_command(None, None, list_=True) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert set(listed) == EXPECTED_NAMES


@pytest.mark.parametrize("args,needle", [(("vgg", "x.onnx"), "unknown model"), (("alexnet", None), "-o"),
                                         (("alexnet", "/nonexistent/dir/x.onnx"), "does not exist")])
def test_zoo_command_bad_input_is_one_error_line(args, needle, capsys):
    assert zoo_command(*args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rammer zoo:") and needle in err[0]


def test_generate_rejects_bad_batch():
    with pytest.raises(ValueError, match="batch"):
        generate("alexnet", batch=0, small=True)


# ---- bench harness (CPU parts) -----------------------------------------------------------------------------
def test_bench_without_gpu_exits_3(capsys):
    if bench.gpu_unavailable() is None:
        pytest.skip("a GPU is present: the no-GPU path cannot be exercised")
    assert bench.bench_command("alexnet", 1, False, repeats=5) == 3  # toolchain.exits: the machine lacks a GPU
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rammer bench: no GPU: ")


def test_measure_times_every_run_after_warmup():
    calls = []

    def run():
        calls.append(1)
        time.sleep(0.003)
    t = bench.measure(run, bench.cpu_timer(), repeats=7, warmup=2)
    assert len(calls) == 9 and len(t.runs) == 7
    assert 3.0 <= t.minimum <= t.median < 100.0
    assert t.median == sorted(t.runs)[3]


def test_relative_error_is_scaled_by_the_reference():
    ref = [np.array([[1.0, -4.0], [2.0, 0.5]])]
    out = [ref[0] + np.array([[0.0, 0.02], [0.0, 0.0]])]
    assert bench.relative_error(out, ref) == pytest.approx(0.02 / 4.0)
    assert bench.relative_error([np.array([np.nan, 1.0])], [np.array([0.0, 1.0])]) == math.inf
    with pytest.raises(ValueError, match="shape"):
        bench.relative_error([np.zeros(3)], [np.zeros(4)])


def test_evaluate_times_only_matching_variants():
    ref = [np.arange(6, dtype=np.float64).reshape(2, 3)]
    runs = []
    good = bench.Variant("good", lambda: runs.append("g"), lambda: [ref[0].astype(np.float32)], bench.cpu_timer())
    bad = bench.Variant("bad", lambda: runs.append("b"), lambda: [ref[0] * 1.1], bench.cpu_timer())
    mg = bench.evaluate(good, ref, repeats=4, warmup=1)
    mb = bench.evaluate(bad, ref, repeats=4, warmup=1)
    assert mg.status == "ok" and mg.max_err == 0.0 and mg.median_ms is not None
    assert mb.status == "mismatch" and mb.median_ms is None and mb.max_err == pytest.approx(0.1)
    assert runs.count("g") == 1 + 1 + 4 and runs.count("b") == 1
    mu = bench.evaluate(bench.Unavailable("x", "no torch"), ref, 4, 1)
    assert mu.status == "unavailable" and mu.note == "no torch"


def _result(ms: dict[str, float | None]) -> bench.BenchResult:
    """A result with the given medians (None = unavailable)."""
    r = bench.BenchResult("m", 1, "dev", "2026-01-01", 100)
    for name, v in ms.items():
        status = "ok" if v is not None else "unavailable"
        r.variants.append(bench.Measurement(name, status, v, v, 0.0 if v else None))
    return r


def test_speedups_and_markdown_table():
    r = _result({"rammer": 0.5, "rammer-ios": 0.4, "op-by-op": 2.0, "cuda-graph": 1.0, "multi-stream-graph": 0.8,
                 "pytorch": 3.0, "torch-compile": None})
    assert r.speedup("op-by-op") == pytest.approx(4.0) and r.speedup("torch-compile") is None
    assert r.strongest == "multi-stream-graph"  # the fastest baseline that ran (rammer's own builds are not)
    table = bench.markdown_table([r, _result({"pytorch": 1.5})]).splitlines()
    assert len(table) == 4 and table[0].count("|") == table[2].count("|")
    cells = dict(zip([c.strip() for c in table[0].strip("|").split("|")],
                     [c.strip() for c in table[2].strip("|").split("|")]))
    assert [cells[k] for k in ("model", "batch", "device")] == ["m", "1", "dev"]
    assert [cells[f"{v} (ms)"] for v in ("rammer", "rammer-ios", "op-by-op", "cuda-graph", "cuda-graph-pdl",
                                         "multi-stream-graph", "pytorch", "torch-compile")] == [
        "0.500", "0.400", "2.000", "1.000", "n/a", "0.800", "3.000", "n/a"]
    assert cells["strongest baseline"] == "multi-stream-graph" and cells["rammer vs strongest"] == "1.60x"
    other = [c.strip() for c in table[3].strip("|").split("|")]
    assert other[-2:] == ["pytorch", "n/a"]  # no rammer time: no ratio
    text = bench.render_text(r)
    assert "op-by-op" in text and "4.00x" in text and "dev" in text
    assert "strongest baseline: multi-stream-graph (0.8000 ms); rammer 1.60x against it" in text


NCU_CSV = """==PROF== Connected to process 4242 (/usr/bin/python3.12)
ran /tmp/b on gpu in 0.120 s (first run, compile included when not cached)
==PROF== Profiling "vd_interpreter": 0%....50%....100% - 9 passes
==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.12","127.0.0.1","vd_interpreter","1","13","(256, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","msecond","1.25"
"0","4242","python3.12","127.0.0.1","vd_interpreter","1","13","(256, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","31.07"
"0","4242","python3.12","127.0.0.1","vd_interpreter","1","13","(256, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","12.5"
"1","4242","python3.12","127.0.0.1","vd_interpreter","1","13","(256, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","99"
"""


def test_ncu_csv_is_parsed_for_the_first_kernel():
    got = bench.parse_ncu_csv(NCU_CSV)
    assert got == {"duration_us": 1250.0, "sm_throughput_pct": 31.07, "achieved_occupancy_pct": 12.5}
    assert bench.parse_ncu_csv(NCU_CSV.replace("msecond", "usecond"))["duration_us"] == pytest.approx(1.25)
    assert bench.parse_ncu_csv("==PROF== ERR_NVGPUCTRPERM\n") == {}


def test_bench_reports_builds_and_utilisation(monkeypatch):
    r = _result({"rammer": 0.5})
    stats = {"build_s": 12.34, "launches": 40, "rtasks": 900, "programs": 1, "barrier_rtasks": 77,
             "predicted_us": 321.0, "predicted_busy_pct": 64.2, "folder": "/x/wavefront"}
    r.builds = {"wavefront": dict(stats, ncu={"achieved_occupancy_pct": 12.5, "sm_throughput_pct": 31.07}),
                "ios": dict(stats, folder=None, ncu={"unavailable": "ncu is not on the PATH"})}
    text = bench.render_text(r)
    assert "build wavefront: 12.3 s, 40 launches, 900 rTasks, 1 rProgram(s), 77 barrier-rTasks" in text
    assert "achieved occupancy 12.5%" in text and "ncu: ncu is not on the PATH" in text
    assert "/x/wavefront/timeline.svg" in text
    # the cost model's prediction beside the measurement (0.5 ms measured against 321 us predicted)
    assert "cost model vs measured: rammer predicted 321.0 us, measured 500.0 us (1.56x)" in text
    r.variants.append(bench.Measurement("cuda-graph", "ok", 2.0, 2.0, 0.0))
    r.builds["wavefront"]["predicted_baselines_us"] = {"cuda-graph": 1600.0, "pytorch": 900.0}  # pytorch not run
    text = bench.render_text(r)
    assert ("rammer predicted 321.0 us, measured 500.0 us (1.56x); cuda-graph predicted 1600.0 us, measured "
            "2000.0 us (1.25x)") in text and "pytorch predicted" not in text
    table = bench.markdown_builds([r]).splitlines()
    assert len(table) == 4
    assert [c.strip() for c in table[2].strip("|").split("|")] == [
        "m", "wavefront", "12.3", "900", "1", "77", "321.0", "64%", "12.5%", "31.1%"]
    assert table[3].rstrip().endswith("| n/a | n/a |")
    monkeypatch.setenv("PATH", "")
    assert bench.ncu_utilisation("/nowhere") == {"unavailable": "ncu is not on the PATH"}


def test_load_bench_model_fixes_symbolic_batch(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])),
              str(path))
    m, label = bench.load_bench_model(str(path), 4)
    assert label == "relu" and m.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 4
    with pytest.raises(ValueError, match="neither"):
        bench.load_bench_model(str(tmp_path / "missing.onnx"), 1)
    (tmp_path / "junk.onnx").write_bytes(b"\xff\x00not onnx")
    with pytest.raises(ValueError, match="cannot read"):
        bench.load_bench_model(str(tmp_path / "junk.onnx"), 1)


# ---- the ONNX -> torch interpreter (variants 5 and 6), on the CPU against onnxruntime --------------------
def _torch_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    module = bench.TorchGraph.build(model, "cpu")
    with torch.inference_mode():
        return [t.numpy() for t in module(*[torch.from_numpy(feeds[n]) for n in module.input_names])]


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_torch_interpreter_matches_onnxruntime_on_the_zoo(name):
    m = generate(name, small=True, batch=2 if name in ("resnext", "transformer", "lstm-tc") else 1, seed=2)
    feeds = random_inputs(m, seed=4)
    for got, want in zip(_torch_outputs(m, feeds), ort_run(m, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _single_node_model(node: onnx.NodeProto, inputs: dict[str, tuple], outputs: list[str],
                       inits: dict[str, np.ndarray], opset: int = 17) -> onnx.ModelProto:
    """A one-node model with float inputs and inferred output types."""
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    g = helper.make_graph([node], "t", vis, outs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check_single(node, inputs, outputs, inits, opset=17, seed=0):
    m = _single_node_model(node, inputs, outputs, inits, opset)
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in inputs.items()}
    for got, want in zip(_torch_outputs(m, feeds), ort_run(m, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("direction,states,steps,hidden", [("forward", True, 5, 3), ("reverse", False, 4, 6),
                                                           ("bidirectional", True, 3, 5)])
def test_torch_lstm_variants(direction, states, steps, hidden):
    rng = np.random.default_rng(steps)
    d = 2 if direction == "bidirectional" else 1
    batch, isize = 2, 4
    inits = {"W": rng.standard_normal((d, 4 * hidden, isize)).astype(np.float32) * 0.5,
             "R": rng.standard_normal((d, 4 * hidden, hidden)).astype(np.float32) * 0.5,
             "B": rng.standard_normal((d, 8 * hidden)).astype(np.float32) * 0.5}
    inputs = {"X": (steps, batch, isize)}
    if states:
        inputs.update({"h0": (d, batch, hidden), "c0": (d, batch, hidden)})
    node = helper.make_node("LSTM", ["X", "W", "R", "B"] + (["", "h0", "c0"] if states else []),
                            ["Y", "Yh", "Yc"], hidden_size=hidden, direction=direction)
    _check_single(node, inputs, ["Y", "Yh", "Yc"], inits, seed=hidden)


@pytest.mark.parametrize("case", range(8))
def test_torch_ops_with_non_default_attributes(case):
    ints = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    rng = np.random.default_rng(case)
    cases = [
        (helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 1, 2, 0], strides=[2, 1], dilations=[1, 2], group=2),
         {"x": (1, 4, 9, 8)}, {"w": rng.standard_normal((6, 2, 3, 2)).astype(np.float32)}),
        (helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, alpha=0.5, beta=2.0),
         {"a": (5, 3), "b": (5, 4), "c": (1, 4)}, {}),
        (helper.make_node("Slice", ["x", "s", "e", "ax", "st"], ["y"]),
         {"x": (6, 7, 5)}, {"s": ints([-5, 1]), "e": ints([9999, -1]), "ax": ints([1, 2]), "st": ints([2, 1])}),
        (helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3), {"x": (2, 8)}, {}),
        (helper.make_node("Unsqueeze", ["x", "ax"], ["y"]), {"x": (3, 4)}, {"ax": ints([-1, 0])}),
        (helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                          count_include_pad=1), {"x": (1, 2, 7, 6)}, {}),
        (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
         {"x": (1, 2, 8, 8)}, {}),
        (helper.make_node("Reshape", ["x", "s"], ["y"]), {"x": (2, 3, 4)}, {"s": ints([0, -1])}),
    ]
    node, inputs, inits = cases[case]
    opset = 18 if node.op_type == "Split" else 17
    _check_single(node, inputs, list(node.output), inits, opset=opset, seed=case)


def test_torch_elementwise_and_shape_ops_in_one_graph():
    """Ops the zoo uses rarely or not at all, with non-default axes, chained in one opset-20 graph."""
    pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Sub", ["t", "s"], ["d"]), helper.make_node("Mul", ["d", "x"], ["m"]),
             helper.make_node("Softmax", ["m"], ["sm"], axis=1),
             helper.make_node("Gelu", ["m"], ["g"], approximate="tanh"),
             helper.make_node("LayerNormalization", ["g", "ls", "lb"], ["ln"], axis=1, epsilon=1e-3),
             helper.make_node("Transpose", ["ln"], ["tr"]),
             helper.make_node("Flatten", ["tr"], ["fl"], axis=2),
             helper.make_node("Concat", ["sm", "x"], ["cat"], axis=-1),
             helper.make_node("Identity", ["cat"], ["id"]),
             helper.make_node("GlobalAveragePool", ["id"], ["gap"]),
             helper.make_node("Squeeze", ["gap"], ["sq"]),
             helper.make_node("BatchNormalization", ["x", "bs", "bb", "bm", "bv"], ["bn"], epsilon=1e-3)]
    inits = {"ls": rng.standard_normal((3, 4, 5)).astype(np.float32),
             "lb": rng.standard_normal((3, 4, 5)).astype(np.float32),
             "bs": rng.standard_normal(3).astype(np.float32), "bb": rng.standard_normal(3).astype(np.float32),
             "bm": rng.standard_normal(3).astype(np.float32), "bv": rng.random(3).astype(np.float32) + 0.5}
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ["sm", "fl", "sq", "bn"]]
    g = helper.make_graph(nodes, "ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 4, 5))],
                          outs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    feeds = {"x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32)}
    for got, want in zip(_torch_outputs(m, feeds), ort_run(m, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_torch_interpreter_refuses_unsupported_ops():
    pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    m = _single_node_model(helper.make_node("Sinh", ["x"], ["y"]), {"x": (2,)}, ["y"], {})
    with pytest.raises(ValueError, match="op Sinh is not supported"):
        bench.TorchGraph.build(m, "cpu")


# ---- GPU (skipped here; the lead runs these on the GPU machine) ------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["squeezenet", "lstm-tc"])
def test_bench_on_gpu_small_models(name, tmp_path):
    reason = bench.gpu_unavailable()
    if reason:
        pytest.skip(f"no GPU: {reason}")
    m = generate(name, small=True)
    r = bench.run_bench(m, name, 1, repeats=5, warmup=2, out_dir=tmp_path, ncu=False)
    assert {v.name for v in r.variants} == set(bench.VARIANTS)
    for v in r.variants:
        assert v.status in ("ok", "unavailable"), f"{v.name}: {v.status} {v.note}"
        if v.status == "ok":
            assert v.max_err <= bench.RTOL and 0 < v.median_ms
            assert v.min_ms is None or v.min_ms <= v.median_ms  # executors time themselves: median only
    for policy in ("wavefront", "ios"):
        assert r.builds[policy]["rtasks"] > 0 and (tmp_path / policy / "timeline.svg").is_file()



def test_launch_baselines_run_on_the_cpu_emulator(tmp_path):
    """The baseline builds `rammer bench` runs (every node launched as its fastest legacy variant; vendor calls
    where the library runs them), on the CPU target: op by op, the PDL copy (its prologue a no-op on the emulator)
    and the multi-stream launch segment match onnxruntime; the graphs are rows with their reasons."""
    m = generate("resnext", small=True)
    feeds = random_inputs(m, seed=0)
    refs = bench.reference_outputs(m, feeds)
    rows = {v.name: bench.evaluate(v, refs, repeats=1, warmup=0)
            for v in bench.launch_variants(m, feeds, tmp_path, target="cpu")}
    assert list(rows) == list(bench.LAUNCH_VARIANTS)
    for name in ("op-by-op", "cuda-graph-pdl", "multi-stream-graph"):
        assert rows[name].status == "ok" and rows[name].max_err <= bench.RTOL, rows[name]
    assert rows["cuda-graph"].status == "unavailable" and "gpu" in rows["cuda-graph"].note
    plan = json.loads((tmp_path / "launches" / "build.json").read_text())
    assert [s["kind"] for s in plan["steps"]] == ["launches"]
