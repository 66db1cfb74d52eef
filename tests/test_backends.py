"""Backends and placement: plans mixing persistent rPrograms and library calls, each backend forced for each op it
covers, the user kernel library of examples/userlib, the placement DP against brute force, and the zoo under both
placements. Every result is checked against onnxruntime on the original model."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_build import assert_close, ort_outputs, rammer_cli
from test_scheduler import MODELS, cnn_model, feeds_for

import rammer
from rammer.build import build_model
from scheduler.graph import SchedulerError
from vdevice.target import BackendName, Target, TargetKind


def cpu_target(veus: int, *backends: str) -> Target:
    """A CPU target of `veus` vEUs with these backends enabled."""
    return Target(TargetKind.CPU, veus, backends=tuple(BackendName(b) for b in backends))

REPO = Path(__file__).resolve().parent.parent
USERLIB = REPO / "examples" / "userlib"


# ---- small models -----------------------------------------------------------------------------------------------
def one_node_model(op_type: str, inputs: dict[str, tuple], weights: dict[str, np.ndarray], seed: int = 0,
                   extra: list | None = None, **attrs) -> onnx.ModelProto:
    """A model of one node (plus `extra` nodes after it) with shapes from ONNX shape inference."""
    names = list(inputs) + list(weights)
    nodes = [helper.make_node(op_type, names, ["y"], name="node", **attrs)] + (extra or [])
    out = nodes[-1].output[0]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                       for n, s in inputs.items()],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v.astype(np.float32), n) for n, v in weights.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    m.graph.output[0].CopyFrom(next(v for v in list(inferred.graph.value_info) + list(inferred.graph.output)
                                    if v.name == out))
    return m


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32) * 0.5


def library_cases() -> list[tuple[str, onnx.ModelProto]]:
    """Every op type the library covers (the fused ones through the passes), at shapes and attributes its author
    did not tune for: batched and broadcast MatMul, transposed Gemm with a bias, grouped / strided / dilated /
    SAME-padded Conv."""
    rng = np.random.default_rng(7)
    relu = [helper.make_node("Relu", ["y"], ["r"], name="relu")]
    return [
        ("MatMul 2-D", one_node_model("MatMul", {"x": (5, 19)}, {"w": rand(rng, 19, 23)})),
        ("MatMul batched", one_node_model("MatMul", {"x": (3, 4, 7)}, {"w": rand(rng, 3, 7, 9)})),
        ("MatMul broadcast B", one_node_model("MatMul", {"x": (2, 3, 6, 5)}, {"w": rand(rng, 5, 11)})),
        ("Gemm transA transB bias", one_node_model("Gemm", {"x": (13, 6)}, {"w": rand(rng, 9, 13),
                                                                           "c": rand(rng, 9)},
                                                   transA=1, transB=1, alpha=0.7, beta=1.3)),
        ("Gemm+Relu (FusedGemm)", one_node_model("Gemm", {"x": (4, 10)}, {"w": rand(rng, 10, 6),
                                                                         "c": rand(rng, 1, 6)}, extra=relu)),
        ("MatMul+Add+Gelu (FusedMatMul)", _fused_matmul(rng)),
        ("Conv grouped strided", one_node_model("Conv", {"x": (2, 6, 9, 8)}, {"w": rand(rng, 9, 2, 3, 3),
                                                                             "b": rand(rng, 9)},
                                                group=3, strides=[2, 1], pads=[1, 0, 1, 2])),
        ("Conv dilated", one_node_model("Conv", {"x": (1, 3, 10, 7)}, {"w": rand(rng, 4, 3, 3, 2)},
                                        dilations=[2, 1], pads=[2, 1, 1, 0])),
        ("Conv SAME_UPPER strided", one_node_model("Conv", {"x": (1, 3, 10, 7)}, {"w": rand(rng, 4, 3, 3, 2)},
                                                   auto_pad="SAME_UPPER", strides=[2, 2])),
        ("Conv+Relu (FusedConv) depthwise", one_node_model("Conv", {"x": (1, 5, 6, 6)},
                                                           {"w": rand(rng, 5, 1, 3, 3)}, extra=relu, group=5,
                                                           pads=[1, 1, 1, 1])),
    ]


def _fused_matmul(rng: np.random.Generator) -> onnx.ModelProto:
    """MatMul, Add of a bias, Gelu: one FusedMatMul with activation Gelu after the passes."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"), helper.make_node("Add", ["y", "c"], ["a"]),
             helper.make_node("Gelu", ["a"], ["r"], name="gelu")]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (6, 12))],
                          [helper.make_tensor_value_info("r", TensorProto.FLOAT, (6, 10))],
                          [numpy_helper.from_array(rand(rng, 12, 10), "w"), numpy_helper.from_array(rand(rng, 10), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    return m


def build_and_check(tmp_path: Path, model: onnx.ModelProto, seed: int = 1, **kw) -> rammer.runtime.Built:
    """Build on the CPU, reload from the folder, run the persistent and op-by-op executors, compare with ORT."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    build_model(path, tmp_path / "out", target="cpu", quiet=True, **kw)
    fn = rammer.load(tmp_path / "out")
    feeds = feeds_for(model, seed)
    want = ort_outputs(model, feeds)
    assert_close(fn(**feeds), want)
    assert_close(fn.run(feeds, kind="op-by-op"), want)
    return fn


# ---- each backend forced for each op it covers --------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["library", "rtask"])
@pytest.mark.parametrize("label,model", library_cases(), ids=[c[0] for c in library_cases()])
def test_each_backend_forced_on_each_library_op(tmp_path: Path, label: str, model: onnx.ModelProto,
                                                backend: str) -> None:
    fn = build_and_check(tmp_path, model, backends=(backend,), veus=3)
    kinds = {s.kind for s in fn.steps}
    if backend == "library":
        assert kinds == {"library"} and fn.manifest.calls and not fn.ops
    else:
        assert kinds == {"program"} and not fn.manifest.calls


def mlp_block(rng: np.random.Generator, m: int, k: int, n: int, scale: float | None) -> onnx.ModelProto:
    """MatMul, Mul by a scalar (when `scale`), Add of a bias, Relu: one FusedMatMul after the passes."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    last = "y"
    if scale is not None:
        nodes.append(helper.make_node("Mul", ["y", "s"], ["ys"]))
        last = "ys"
    nodes += [helper.make_node("Add", [last, "c"], ["a"]), helper.make_node("Relu", ["a"], ["r"])]
    inits = [numpy_helper.from_array(rand(rng, k, n), "w"), numpy_helper.from_array(rand(rng, n), "c")]
    inits += [numpy_helper.from_array(np.array(scale, np.float32), "s")] if scale is not None else []
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (m, k))],
                          [helper.make_tensor_value_info("r", TensorProto.FLOAT, (m, n))], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


USER_CASES = [  # (label, model, the user binding expected): every binding of examples/userlib/bindings.yaml
    ("MatMul small", lambda r: one_node_model("MatMul", {"x": (7, 33)}, {"w": rand(r, 33, 45)}), "sgemm_"),
    ("MatMul 64x64 tiles", lambda r: one_node_model("MatMul", {"x": (70, 20)}, {"w": rand(r, 20, 66)}), "sgemm_"),
    ("Add row bias", lambda r: one_node_model("Add", {"x": (9, 37)}, {"b": rand(r, 37)}), "bias_rows"),
    ("MatMul+Add+Relu", lambda r: mlp_block(r, 3, 17, 29, None), "sgemm_bias_act"),
    ("MatMul*alpha+Add+Relu", lambda r: mlp_block(r, 34, 9, 40, 0.25), "sgemm_bias_act"),
]


@pytest.mark.parametrize("label,make,variant", USER_CASES, ids=[c[0] for c in USER_CASES])
def test_user_backend_forced_on_each_binding(tmp_path: Path, label: str, make, variant: str) -> None:
    model = make(np.random.default_rng(3))
    fn = build_and_check(tmp_path, model, backends=("user",), user_libs=(str(USERLIB),), veus=2)
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert all(c["backend"] == "user" and variant in c["variant"] for c in plan["choices"].values())
    assert (tmp_path / "out" / "rkernels" / "tinyblas.cuh").is_file()  # the build folder compiles on its own
    assert fn.ops and all(op.kernel.source_id == "tinyblas_sgemm.cu" for op in fn.ops)


# ---- mixed plans ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy,veus", [("wavefront", 4), ("ios", 3), ("sequential", 2)])
def test_mixed_plan_round_trips_through_the_build_folder_and_the_api(tmp_path: Path, policy: str,
                                                                      veus: int) -> None:
    model = cnn_model(1, 16, 16, 4)  # convolutions big enough for the library to win by the cost model
    fn = build_and_check(tmp_path, model, backends=("rtask", "library"), placement="dp", policy=policy, veus=veus)
    kinds = [s.kind for s in fn.steps]
    assert "library" in kinds and "program" in kinds, kinds
    out = tmp_path / "out"
    manifest = json.loads((out / "build.json").read_text())
    assert [s["kind"] for s in manifest["steps"]] == kinds and len(manifest["library_calls"]) == kinds.count("library")
    plan = json.loads((out / "plan.json").read_text())
    lib = {c["node"] for c in plan["library_calls"]}
    assert lib and all(plan["choices"][n]["backend"] == "library" and plan["choices"][n]["why"] for n in lib)
    report = (out / "report.md").read_text()
    assert "library call(s)" in report and "| library |" in report and "steps: " in report
    trace = json.loads((out / "timeline.json").read_text())["traceEvents"]
    assert {e["name"] for e in trace if e.get("cat") == "library"} == lib
    assert "library" in (out / "timeline.svg").read_text()
    # the predicted steps are back to back: programs and calls add up to the plan's time
    assert manifest["predicted_us"] == pytest.approx(sum(plan["program_us"]) +
                                                     sum(c["us"] for c in plan["library_calls"]), abs=0.01)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("placement", ["dp", "search"])
def test_test_models_with_rtask_and_library(tmp_path: Path, name: str, placement: str) -> None:
    build_and_check(tmp_path, MODELS[name](), backends=("rtask", "library"), placement=placement, veus=5)


def zoo_names() -> list:
    from rammer.zoo import NAMES
    slow = {"nasnet", "inception-v3"}
    return [pytest.param(n, marks=pytest.mark.slow) if n in slow else n for n in NAMES]


@pytest.mark.parametrize("placement", ["dp", "search"])
@pytest.mark.parametrize("name", zoo_names())
def test_zoo_small_with_rtask_and_library(tmp_path: Path, name: str, placement: str) -> None:
    from rammer.zoo import generate, random_inputs
    model = generate(name, small=True)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out", target="cpu", quiet=True, backends=("rtask", "library"),
                        placement=placement)
    feeds = random_inputs(model, seed=4)
    assert_close(built.run(feeds), ort_outputs(model, feeds))


# ---- placement ----------------------------------------------------------------------------------------------------
def test_placement_dp_is_optimal_on_chains_against_brute_force() -> None:
    """The DP's price equals the least price over every assignment of backends (brute force, same prices: option
    prices, the launch that reopens an rProgram, the graph launch that opens a launch segment, the overlap a cut
    loses)."""
    from scheduler.placement import CLOSED, LAUNCHING, OPEN, Option, dp
    from scheduler.segments import LAUNCH
    from scheduler.workload import OpSpec, Workload
    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(1, 8))
        options = []
        for _ in range(n):
            opts = [Option("rtask", float(rng.uniform(1, 10)))]
            if rng.random() < 0.7:
                opts.append(Option("library", float(rng.uniform(1, 10))))
            if rng.random() < 0.3:
                opts.append(Option("user", float(rng.uniform(1, 10))))
            if rng.random() < 0.5:
                opts.append(Option(LAUNCH, float(rng.uniform(1, 10))))
            options.append(opts)
        open_us, graph_us = float(rng.uniform(0, 8)), float(rng.uniform(0, 8))
        lost = [float(x) for x in rng.uniform(0, 4, n)]  # overlap a cut at each node would lose
        w = Workload([OpSpec(i, f"n{i}", "X", [], [i - 1] if i else []) for i in range(n)])

        def price(assign: tuple) -> float:
            total, state = 0.0, CLOSED
            for i, opt in enumerate(assign):
                nxt = CLOSED if opt.is_call else LAUNCHING if opt.backend == LAUNCH else OPEN
                if nxt == OPEN and state != OPEN:
                    total += open_us
                if nxt == LAUNCHING and state != LAUNCHING:
                    total += graph_us
                if nxt != OPEN and state == OPEN:
                    total += lost[i]
                total += opt.us
                state = nxt
            return total

        best = min(price(a) for a in itertools.product(*options))
        got = dp(w, options, open_us, lost, graph_us)
        chosen = tuple(next(o for o in options[i] if o.backend == got.backend[i]) for i in range(n))
        assert price(chosen) == pytest.approx(best), (trial, options, open_us)


def test_lost_overlap_is_measured_on_the_all_rkernel_plan() -> None:
    """A long node (Softmax over a big input) overlaps a short chain beside it in one rProgram: a cut inside that
    chain separates the long node from the chain's rest, which then cannot start early; a cut at the first or the
    last node loses nothing."""
    from scheduler.pipeline import load_workload, plan_workload
    from scheduler.placement import lost_overlap
    from scheduler.profiler import Profiler
    nodes = [helper.make_node("Softmax", ["x"], ["a"], name="long"),
             helper.make_node("Sigmoid", ["x2"], ["b"], name="b"),
             helper.make_node("Tanh", ["b"], ["c"], name="cut"),
             helper.make_node("Relu", ["b"], ["d"], name="d"),
             helper.make_node("Add", ["d", "c"], ["e"], name="e"),
             helper.make_node("Add", ["a", "a"], ["y"], name="y")]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (512, 1024)),
                                       helper.make_tensor_value_info("x2", TensorProto.FLOAT, (4, 8))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (512, 1024)),
                           helper.make_tensor_value_info("e", TensorProto.FLOAT, (4, 8))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph, workload = load_workload(model)
    plan = plan_workload(graph, workload, "wavefront", Profiler(veus=4), veus=4).plan
    lost = dict(zip([spec.name for spec in workload.ops], lost_overlap(workload, plan, 0.7)))
    # a cut inside the chain (where exactly depends on the plan's order) separates it from the still-running Softmax
    assert max(lost[n] for n in ("cut", "d", "e")) > 0, lost
    assert lost["long"] == 0 and lost["y"] == 0, lost


def test_search_never_loses_to_the_dp_and_both_check(tmp_path: Path) -> None:
    from scheduler.pipeline import load_workload, plan_workload
    from scheduler.profiler import Profiler
    for name in ("cnn", "mlp"):
        graph, workload = load_workload(MODELS[name](), target=cpu_target(6, "rtask", "library"))
        times = {p: plan_workload(graph, workload, "wavefront", Profiler(veus=6), placement=p,
                                  veus=6).plan.predicted_us for p in ("dp", "search", "rtask-only")}
        assert times["search"] <= times["dp"] + 1e-6 and times["search"] <= times["rtask-only"] + 1e-6


def test_a_node_without_rkernel_falls_back_to_a_library_step() -> None:
    """The fallback API: with a corpus lacking MatMul rKernels, a MatMul is not refused but planned as a library
    call between rPrograms (and rtask-only placement refuses it in one line)."""
    import dataclasses

    from kernel_corpus.bindings import Registry, registry
    from scheduler.pipeline import load_workload, plan_workload
    from scheduler.profiler import Profiler
    reg = Registry()
    reg._ops = {d.op_type: (dataclasses.replace(d, bindings=()) if d.op_type in ("MatMul", "FusedMatMul") else d)
                for d in registry.ops()}
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Sigmoid", ["y"], ["s"]),
             helper.make_node("MatMul", ["s", "w2"], ["z"]), helper.make_node("Tanh", ["z"], ["t"])]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 6))],
                          [helper.make_tensor_value_info("t", TensorProto.FLOAT, (4, 3))],
                          [numpy_helper.from_array(rand(rng, 6, 5), "w"), numpy_helper.from_array(rand(rng, 5, 3), "w2")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(SchedulerError, match="MatMul"):
        load_workload(model, reg, cpu_target(2, "rtask"))
    graph, workload = load_workload(model, reg, cpu_target(2, "rtask", "library"))
    plan = plan_workload(graph, workload, "wavefront", Profiler(veus=2), placement="search", veus=2).plan
    assert [s.kind for s in plan.steps] == ["library", "program", "library", "program"]
    assert all(c.op_type == "MatMul" for c in plan.calls)
    with pytest.raises(SchedulerError, match="rtask-only"):
        plan_workload(graph, workload, "wavefront", Profiler(veus=2), placement="rtask-only", veus=2)


# ---- command line and errors ---------------------------------------------------------------------------------------
def test_cli_backends_and_placement(tmp_path: Path) -> None:
    path = tmp_path / "cnn.onnx"
    onnx.save(cnn_model(1, 16, 16, 4), path)
    res = rammer_cli("build", str(path), "-o", str(tmp_path / "out"), "--target", "cpu", "--veus", "3",
                     "--backends", "rtask,library", "--placement", "search")
    assert res.returncode == 0, res.stderr
    assert "library call(s)" in res.stdout
    res = rammer_cli("run", str(tmp_path / "out"), "--check")
    assert res.returncode == 0 and "PASS" in res.stdout, res.stdout + res.stderr
    for args, message in [(["--backends", "rtask,cublas"], "unknown backend 'cublas'"),
                          (["--backends", "user"], "needs a kernel library"),
                          (["--backends", "rtask", "--user-lib", str(USERLIB)], "user backend is not enabled")]:
        res = rammer_cli("build", str(path), "-o", str(tmp_path / "bad"), "--target", "cpu", *args)
        lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("rammer build")]
        assert res.returncode == 1 and len(lines) == 1 and message in lines[0], res.stderr
        assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("edit,message", [
    (lambda s: s.replace("    kernel: tb_bias_act\n", ""), "missing kernel"),
    (lambda s: s.replace("grid: [\"cdiv(N, 32)\", \"cdiv(M, 32)\"]", "grid: [\"cdiv(N, \"]", 1), "grid: cannot evaluate"),
    (lambda s: s.replace("kind: efficient", "kind: quick"), "kind 'quick'"),
    (lambda s: s.replace("source: tinyblas_sgemm.cu", "source: nope.cu", 1), "source 'nope.cu'"),
    (lambda s: s.replace("    let: {M: \"A[0]\", K: \"A[1]\", N: \"B[1]\"}\n", "    lets: {}\n", 1), "unknown field 'lets'"),
])
def test_binding_file_errors_are_one_line_with_file_and_line(tmp_path: Path, edit, message: str) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    for f in USERLIB.iterdir():
        if f.is_file():
            (lib / f.name).write_text(f.read_text())
    (lib / "bindings.yaml").write_text(edit((USERLIB / "bindings.yaml").read_text()))
    path = tmp_path / "m.onnx"
    onnx.save(one_node_model("MatMul", {"x": (3, 5)}, {"w": rand(np.random.default_rng(1), 5, 4)}), path)
    with pytest.raises(SchedulerError) as err:
        build_model(path, tmp_path / "out", target="cpu", quiet=True, backends=("rtask", "user"),
                    user_libs=(str(lib),))
    text = str(err.value)
    assert message in text and "\n" not in text and "bindings.yaml:" in text, text
    assert not (tmp_path / "out").exists()


def test_placement_rtask_only_refuses_a_node_only_the_library_runs(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(one_node_model("Gemm", {"x": (3, 4)}, {"w": rand(np.random.default_rng(2), 4, 5)}), path)
    with pytest.raises(SchedulerError, match="rtask-only"):
        build_model(path, tmp_path / "out", target="cpu", quiet=True, backends=("library",), placement="rtask-only")


# ---- GPU: the same calls through cuBLAS / cuDNN ---------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("label,model", library_cases(), ids=[c[0] for c in library_cases()])
def test_library_calls_on_the_gpu_match_onnxruntime(tmp_path: Path, label: str, model: onnx.ModelProto) -> None:
    from vdevice.gpu import gpu_available
    ok, why = gpu_available()
    if not ok:
        pytest.skip(why)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    try:
        build_model(path, tmp_path / "out", target="gpu", quiet=True, backends=("library", "rtask"), placement="dp")
    except SchedulerError as exc:
        if "asymmetric pads" in str(exc):
            pytest.skip(str(exc))
        raise
    fn = rammer.load(tmp_path / "out")
    feeds = feeds_for(model, 2)
    want = ort_outputs(model, feeds)
    assert_close(fn(**feeds), want)
    assert_close(fn.run(feeds, kind="graph"), want)  # every step captured into one CUDA Graph


# ---- IOS operator merge --------------------------------------------------------------------------------------------
def siblings_model(kind: str, batch: int, seed: int) -> onnx.ModelProto:
    """Three sibling Convs (same kernel, Relu after two) or three MatMuls sharing their input, summed pairwise by
    readers that keep every output alive."""
    rng = np.random.default_rng(seed)
    if kind == "conv":
        x_shape, outs = (batch, 4, 7, 6), [3, 5, 2]
        nodes, inits = [], []
        for k, m in enumerate(outs):
            inits += [numpy_helper.from_array(rand(rng, m, 4, 3, 3), f"w{k}"), numpy_helper.from_array(rand(rng, m), f"b{k}")]
            nodes.append(helper.make_node("Conv", ["x", f"w{k}", f"b{k}"], [f"c{k}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Concat", ["c0", "c1", "c2"], ["y"], axis=1))
        y_shape = (batch, sum(outs), 7, 6)
    else:
        x_shape, outs = (batch, 9), [6, 11, 4]
        nodes, inits = [], []
        for k, n in enumerate(outs):
            inits.append(numpy_helper.from_array(rand(rng, 9, n), f"w{k}"))
            nodes.append(helper.make_node("MatMul", ["x", f"w{k}"], [f"c{k}"]))
        nodes.append(helper.make_node("Concat", ["c0", "c1", "c2"], ["y"], axis=1))
        y_shape = (batch, sum(outs))
    nodes.append(helper.make_node("Relu", ["y"], ["r"]))
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("r", TensorProto.FLOAT, y_shape),
                           helper.make_tensor_value_info("c1", TensorProto.FLOAT, (batch, outs[1]) + y_shape[2:])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("kind,batch,seed", [("conv", 1, 0), ("conv", 2, 1), ("matmul", 1, 2), ("matmul", 3, 3)])
def test_merged_and_unmerged_plans_agree_with_onnxruntime(tmp_path: Path, kind: str, batch: int, seed: int) -> None:
    model = siblings_model(kind, batch, seed)
    op = "Conv" if kind == "conv" else "MatMul"
    for mode in ("off", "always"):
        (tmp_path / mode).mkdir()
        # the merge alone: siblings that concat elimination writes into their Concat slice are not merged
        # (merge.mergeable; tests/test_concat_elim.py)
        build_and_check(tmp_path / mode, model, merge=mode, veus=3, disable_passes=("eliminate_concats",))
        plan = json.loads((tmp_path / mode / "out" / "plan.json").read_text())
        nodes = {o["node"] for o in plan["ops"] if o["op_type"] == op}
        assert len(nodes) == (3 if mode == "off" else 1), nodes
        split = any(o["op_type"] == "Split" for o in plan["ops"])
        contiguous = batch == 1  # pieces along channels / N are contiguous only for one image / row
        assert split == (mode == "always" and not contiguous)
        report = (tmp_path / mode / "out" / "report.md").read_text()
        assert ("IOS merge: 3 sibling" in report) == (mode == "always")


def test_ios_merge_auto_applies_where_the_model_says_it_wins(tmp_path: Path) -> None:
    """On the small Inception-V3 the model prefers merging some sibling 1x1 convolutions: auto merges exactly the
    groups whose merged price is lower, and the merged build still matches onnxruntime."""
    import re

    from rammer.zoo import generate, random_inputs
    from scheduler.pipeline import load_workload
    model = generate("inception-v3", small=True)
    graph, _ = load_workload(model, target=cpu_target(8, "rtask"), merge="auto")
    notes = [n for n in graph.notes if n.startswith("IOS merge")]
    assert any("merged" in n and "forced" not in n for n in notes)
    for n in notes:
        joined, alone = map(float, re.search(r"merged ([\d.]+) us vs concurrent ([\d.]+) us", n).groups())
        assert joined <= alone if " kept " not in n else joined >= alone, n
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out", target="cpu", quiet=True, merge="auto")
    feeds = random_inputs(model, seed=5)
    assert_close(built.run(feeds), ort_outputs(model, feeds))


# ---- profile cache ---------------------------------------------------------------------------------------------------
def test_profile_command_fills_the_cache_and_measured_prices_drive_placement(tmp_path: Path, monkeypatch) -> None:
    from scheduler.backends.costs import BackendCache, BackendCosts, call_key
    from scheduler.pipeline import load_workload, plan_workload
    from scheduler.profiler import H100, Profiler
    monkeypatch.setenv("RAMMER_CACHE", str(tmp_path / "cache"))
    model = cnn_model(1, 16, 16, 4)
    path = tmp_path / "cnn.onnx"
    onnx.save(model, path)
    first = rammer_cli("profile", str(path), "--target", "cpu", "--runs", "3", "--json")
    assert first.returncode == 0, first.stderr
    lib = json.loads(first.stdout)["library"]
    graph, workload = load_workload(model, target=cpu_target(4, "rtask", "library"))
    keys = {call_key(c) for spec in workload.ops for c in spec.calls}
    assert lib["measured"] == len(keys) > 0 and lib["hits"] == 0
    stored = json.loads(Path(lib["cache"]).read_text())["entries"]
    assert set(stored) == keys and all(k.startswith("library|") and v["us"] > 0 for k, v in stored.items())
    again = json.loads(rammer_cli("profile", str(path), "--target", "cpu", "--runs", "3", "--json").stdout)
    assert again["library"] == dict(lib, measured=0, hits=len(keys))
    # prices from the cache (not the model) decide: every call priced dear -> no library step; cheap -> library
    for price, expect in ((1e6, False), (1e-3, True)):
        cache = BackendCache("test device", tmp_path / "p")
        for k in keys:
            cache.put(k, price, 1)
        plan = plan_workload(graph, workload, "wavefront", Profiler(veus=4), placement="search",
                             costs=BackendCosts(H100, cache), veus=4).plan
        assert bool(plan.calls) == expect and cache.hits > 0
        assert all(c.us == price for c in plan.calls)


# ---- the user library verified like the corpus ---------------------------------------------------------------------
def test_user_library_verifies_at_its_declared_shapes_and_catches_a_broken_kernel(tmp_path: Path) -> None:
    from scheduler.backends.user import verify_library
    verdicts = verify_library(USERLIB)
    assert {v.binding.split("/")[1] for v in verdicts} == {"tinyblas.sgemm_32x32", "tinyblas.sgemm_64x64",
                                                          "tinyblas.sgemm_bias_act", "tinyblas.bias_rows"}
    assert all(v.ok(1e-5) for v in verdicts), verdicts
    broken = tmp_path / "lib"
    broken.mkdir()
    for f in USERLIB.iterdir():
        if f.is_file():
            (broken / f.name).write_text(f.read_text())
    src = broken / "tinyblas_sgemm.cu"
    text = src.read_text()
    assert "for (int k = 0; k < BK; ++k)" in text
    src.write_text(text.replace("for (int k = 0; k < BK; ++k)", "for (int k = 1; k < BK; ++k)"))  # drops a tap
    bad = verify_library(broken)
    assert any(not v.ok(1e-3) for v in bad if "sgemm" in v.binding)
    assert all(v.ok(1e-5) for v in bad if "bias_rows" in v.binding)
