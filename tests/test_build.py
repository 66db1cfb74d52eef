"""`rammer build` / `rammer run` / `rammer.load` end to end on the CPU emulator, checked against onnxruntime on
the original model; error handling (unsupported op, malformed file, wrong input shapes) leaves no half build."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from test_scheduler import (MODELS, Builder, cnn_model, feeds_for, lstm_model, mlp_model, transformer_model,
                            unsupported_model)

import rammer
from kernel_corpus.bindings import source_digest
from rammer.build import build_model
from toolchain.cxx import kernel_expr, template_arg_text
from rammer.runtime import BuildError, load
from vdevice.program import Run, Wait, validate_plan

REPO = Path(__file__).resolve().parent.parent


def ort_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime on the original (unpassed) model: the independent truth."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    """Every output within 1e-4 of the reference's magnitude."""
    assert set(got) == set(want)
    for name, ref in want.items():
        scale = max(float(np.abs(ref).max()), 1e-6)
        err = float(np.abs(got[name].astype(np.float64) - ref).max()) / scale
        assert err <= 1e-4, f"{name}: max relative error {err:.3g}"


def rammer_cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """The installed command line, as a user runs it."""
    return subprocess.run([sys.executable, "-c", "from rammer.cli import main; main()", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


def dependency_edges_honoured(built) -> None:
    """Re-check the plan with vdevice's validator from the saved op-level dependencies (not the scheduler)."""
    validate_plan(built.programs, built.manifest.deps, built.outside)


# ---- the four models of the issue, every policy, several vEU counts -------------------------------------------
@pytest.mark.parametrize("name,policy,veus", [
    ("mlp", "wavefront", 4), ("mlp", "ios", 3), ("mlp", "sequential", 1),
    ("lstm", "wavefront", 8), ("lstm", "ios", 5), ("lstm", "sequential", 2),
    ("cnn", "wavefront", 6), ("cnn", "ios", 8), ("cnn", "sequential", 3),
    ("transformer", "wavefront", 7), ("transformer", "ios", 4), ("transformer", "sequential", 8),
])
def test_built_model_matches_onnxruntime(tmp_path: Path, name: str, policy: str, veus: int) -> None:
    model = MODELS[name]()
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out", policy=policy, target="cpu", veus=veus, quiet=True)
    assert built.manifest.veus == veus and all(p.num_veus == veus for p in built.programs)
    dependency_edges_honoured(built)
    feeds = feeds_for(model, seed=veus)
    assert_close(built.run(feeds), ort_outputs(model, feeds))
    # the op-by-op baseline runs the same rKernels' plain wrappers: same answer
    assert_close(built.run(feeds, kind="op-by-op"), ort_outputs(model, feeds))


@pytest.mark.parametrize("steps,hidden,batch", [(8, 6, 1), (5, 17, 3)])
def test_two_layer_lstm_unrolled_builds_runs_and_reloads(tmp_path: Path, steps: int, hidden: int, batch: int) -> None:
    model = lstm_model(steps=steps, batch=batch, hidden=hidden, layers=2)
    path = tmp_path / "lstm.onnx"
    onnx.save(model, path)
    build_model(path, tmp_path / "out", target="cpu", veus=5, quiet=True)
    fn = rammer.load(tmp_path / "out")  # a fresh load from the folder: nothing carried over in memory
    runs = sum(isinstance(i, Run) for p in fn.programs for v in p.veus for i in v)
    assert runs == sum(op.kernel.rtasks for op in fn.ops)
    waits = sum(isinstance(i, Wait) for p in fn.programs for v in p.veus for i in v)
    assert waits > 0  # the steps depend on each other: barrier-rTasks, not kernel boundaries
    for seed in (1, 2):  # the same loaded build runs repeatedly on new inputs
        feeds = feeds_for(model, seed)
        assert_close(fn(**feeds), ort_outputs(model, feeds))


def test_build_folder_contents(tmp_path: Path) -> None:
    path = tmp_path / "cnn.onnx"
    onnx.save(cnn_model(1), path)
    # a GPU build (the report quotes the cost model's predictions only for the GPU target); no nvcc check here
    # rPrograms only (a model this small is predicted faster as launch segments: tests/test_segments.py)
    build_model(path, tmp_path / "out", target="gpu", veus=4, quiet=True, compile_check=False, launches=False)
    out = tmp_path / "out"
    for f in ("program.cu", "plan.json", "programs.json", "weights.npz", "timeline.svg", "report.md", "build.json"):
        assert (out / f).is_file(), f
    plan = json.loads((out / "plan.json").read_text())
    assert plan["policy"] == "wavefront" and plan["ops"] and plan["choices"]
    assert all("why" in c for c in plan["choices"].values())
    svg = (out / "timeline.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<rect") >= sum(o["rtasks"] for o in plan["ops"]) // 2
    report = (out / "report.md").read_text()
    for word in ("operators", "rTasks", "rProgram", "barrier-rTasks", "predicted", "build time", "mode=model",
                 "baseline op-by-op", "baseline cuda-graph-pdl", "baseline multi-stream-graph", "the strongest"):
        assert word in report
    stats = json.loads((out / "build.json").read_text())["stats"]
    assert stats["strongest_baseline"] in stats["predicted_baselines_us"]
    assert stats["vs_strongest"] == pytest.approx(
        min(stats["predicted_baselines_us"].values()) / stats["predicted_us"], rel=1e-3)
    busy = sum(o["rtasks"] * o["rtask_us"] for o in plan["ops"]) / (4 * plan["predicted_us"])
    assert 0 < stats["predicted_busy_pct"] <= 100 and stats["predicted_busy_pct"] == pytest.approx(100 * busy, abs=0.1)
    weights = np.load(out / "weights.npz")
    assert len(weights.files) > 0


def test_cli_build_and_run_check(tmp_path: Path) -> None:
    path = tmp_path / "t.onnx"
    onnx.save(transformer_model(seq=4, d=8, heads=2), path)
    res = rammer_cli("build", str(path), "-o", str(tmp_path / "b"), "--target", "cpu", "--veus", "3")
    assert res.returncode == 0, res.stderr
    assert "rTasks" in res.stdout and "predicted" not in res.stdout  # a CPU build quotes no GPU prediction
    assert "no time prediction" in (tmp_path / "b" / "report.md").read_text()
    feeds = feeds_for(transformer_model(seq=4, d=8, heads=2), seed=5)
    np.savez(tmp_path / "in.npz", **feeds)
    res = rammer_cli("run", str(tmp_path / "b"), "--inputs", str(tmp_path / "in.npz"), "--check",
                     "--save", str(tmp_path / "o.npz"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "check: PASS" in res.stdout and "worst" in res.stdout
    saved = dict(np.load(tmp_path / "o.npz"))
    assert_close(saved, ort_outputs(transformer_model(seq=4, d=8, heads=2), feeds))


# ---- errors: one line, non-zero exit, no half-written OUT_DIR ----------------------------------------------------
def one_error_line(res: subprocess.CompletedProcess) -> str:
    """The single stderr line after the build banner."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith(("rammer build", "  "))]
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_unsupported_op_is_one_error_and_no_output(tmp_path: Path) -> None:
    path = tmp_path / "u.onnx"
    onnx.save(unsupported_model(), path)
    # --backends rtask: no library step (vendor call or onnxruntime fallback) may stand in for the missing kernels
    res = rammer_cli("build", str(path), "-o", str(tmp_path / "out"), "--target", "cpu", "--backends", "rtask")
    assert res.returncode == 1
    line = one_error_line(res)
    assert "Sinh" in line and "Cosh" in line and "unsupported" in line
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_malformed_onnx_is_one_error_and_no_output(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not a protobuf\xff\xff")
    res = rammer_cli("build", str(bad), "-o", str(tmp_path / "out"), "--target", "cpu")
    assert res.returncode == 2  # bad input (toolchain.exits)
    assert str(bad) in one_error_line(res)
    assert not (tmp_path / "out").exists()


def test_failed_rebuild_keeps_the_previous_build(tmp_path: Path) -> None:
    good = tmp_path / "m.onnx"
    onnx.save(mlp_model(2), good)
    build_model(good, tmp_path / "out", target="cpu", veus=2, quiet=True)
    before = (tmp_path / "out" / "build.json").read_text()
    bad = tmp_path / "u.onnx"
    onnx.save(unsupported_model(), bad)
    with pytest.raises(BuildError.__mro__[1]):  # SchedulerError
        build_model(bad, tmp_path / "out", target="cpu", quiet=True)
    assert (tmp_path / "out" / "build.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out", "u.onnx"]


def test_refuses_to_replace_a_folder_that_is_not_a_build(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(mlp_model(2), path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious.txt").write_text("keep me")
    with pytest.raises(BuildError, match="not a rammer build folder"):
        build_model(path, tmp_path / "out", target="cpu", quiet=True)
    assert (tmp_path / "out" / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize("shape", [(3, 17), (2,), (4, 16)])
def test_mismatched_input_shape_at_run_time(tmp_path: Path, shape: tuple[int, ...]) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(mlp_model(3), path)  # built for x [3, 16]
    build_model(path, tmp_path / "out", target="cpu", veus=2, quiet=True)
    np.savez(tmp_path / "in.npz", x=np.zeros(shape, np.float32))
    res = rammer_cli("run", str(tmp_path / "out"), "--inputs", str(tmp_path / "in.npz"))
    assert res.returncode == 2  # bad input (toolchain.exits)
    assert res.stderr.count("\n") == 1 and "'x'" in res.stderr and "[3, 16]" in res.stderr
    with pytest.raises(BuildError, match="shape"):
        load(tmp_path / "out")(x=np.zeros(shape, np.float32))


def test_missing_and_unknown_inputs_and_missing_build(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(mlp_model(1), path)
    built = build_model(path, tmp_path / "out", target="cpu", veus=2, quiet=True)
    with pytest.raises(BuildError, match="missing"):
        built.run({})
    with pytest.raises(BuildError, match="unknown input"):
        built.run({"x": np.zeros((1, 16), np.float32), "z": np.zeros(1)})
    res = rammer_cli("run", str(tmp_path / "nothing-here"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "rammer build" in res.stderr  # bad input


def test_custom_corpus_folder(tmp_path: Path) -> None:
    """--corpus DIR: bindings from DIR/ops, sources from DIR/legacy (here: the elementwise part of ours)."""
    import shutil
    corpus = tmp_path / "corpus"
    (corpus / "ops").mkdir(parents=True)
    shutil.copytree(REPO / "kernel_corpus" / "legacy", corpus / "legacy")
    shutil.copy(REPO / "kernel_corpus" / "ops" / "elementwise.py", corpus / "ops" / "elementwise.py")
    b = Builder(11)
    b.one("Tanh", [b.one("Relu", ["x"])])
    b.nodes[-1].output[0] = "y"
    model = b.model({"x": (3, 50)}, {"y": (3, 50)})
    path = tmp_path / "e.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out", corpus=corpus, target="cpu", veus=2, quiet=True)
    feeds = feeds_for(model)
    assert_close(built.run(feeds), ort_outputs(model, feeds))
    onnx.save(mlp_model(1), path)  # MatMul is not in this corpus
    with pytest.raises(BuildError.__mro__[1], match="MatMul"):
        build_model(path, tmp_path / "out2", corpus=corpus, target="cpu", quiet=True)
    # with MatMul but without FusedMatMul the passes leave MatMul + Add apart instead of fusing them
    (corpus / "ops" / "mm.py").write_text("from kernel_corpus.ops import gemm\n"
                                          "# the older form of an ops module: a flat BINDINGS list\n"
                                          "BINDINGS = [b for d in gemm.OPS if d.op_type == 'MatMul' for b in d.bindings]\n")
    b = Builder(12)
    b.one("Tanh", [b.one("Add", [b.one("MatMul", ["x", b.weight((8, 5))]), b.weight((5,))])])
    b.nodes[-1].output[0] = "y"
    model = b.model({"x": (3, 8)}, {"y": (3, 5)})
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out3", corpus=corpus, target="cpu", veus=2, quiet=True)
    plan = json.loads((tmp_path / "out3" / "plan.json").read_text())
    # (the Add and the Tanh after it are one FusedBinary: this corpus has elementwise.py's)
    assert sorted(op["op_type"] for op in plan["ops"]) == ["FusedBinary", "MatMul"]
    assert_close(built.run(feeds_for(model)), ort_outputs(model, feeds_for(model)))


def _activation_flag(op) -> str:
    """The fused activation of a GEMM / convolution op: gemm.cu's ACT code and conv.cu's RELU flag are its last
    template argument; tc.cu takes them as run-time arguments (gemm_tc: act before the split factor and the output
    strides ysz, ysm; conv_tc: relu before the split factor and the residual's Z, res)."""
    if op.kernel.wrapper_name == "gemm_tc":
        return str(int(op.args[-4].value))
    if op.kernel.wrapper_name == "conv_tc":
        return "true" if op.args[-4].value else "false"
    return template_arg_text(op.kernel.template_args[-1])


@pytest.mark.parametrize("name,policy,veus,activation_flags", [
    ("relu", "wavefront", 4, ["1", "1", "false", "false", "true"]),  # FusedMatMul, FusedGemm, 2 Conv, FusedConv
    ("relu", "sequential", 2, ["1", "1", "false", "false", "true"]),
    ("epilogue", "wavefront", 3, ["0"] * 7 + ["1"]),                # 6 MatMul + 2 FusedMatMul, one with Relu
    ("epilogue", "ios", 5, ["0"] * 7 + ["1"]),
    ("transformer", "wavefront", 4, ["0"] * 7 + ["2"]),             # the MLP's Gelu (erf) fused
])
def test_fused_epilogues_build_and_match(tmp_path: Path, name: str, policy: str, veus: int,
                                         activation_flags: list[str]) -> None:
    import test_scheduler
    model = getattr(test_scheduler, f"{name}_model")()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out", policy=policy, target="cpu", veus=veus, quiet=True)
    flags = [_activation_flag(op) for op in built.ops if op.kernel.wrapper_name.startswith(("conv", "gemm"))]
    assert sorted(flags) == activation_flags
    feeds = feeds_for(model, seed=veus)
    assert_close(built.run(feeds), ort_outputs(model, feeds))


# ---- the profiler's measured mode: taken on the target, cached per device and vEU count, reused ------------------
def test_measured_profile_is_taken_cached_and_drives_the_plan(tmp_path: Path, monkeypatch) -> None:
    from scheduler.pipeline import load_workload
    from scheduler.profiler import launch_key
    monkeypatch.setenv("RAMMER_CACHE", str(tmp_path / "cache"))
    model = mlp_model(3, dims=(20, 40, 12, 5))
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "a", target="cpu", veus=3, quiet=True, profile="measured")
    assert "mode=measured" in built.manifest.stats["profiler"]
    cache = tmp_path / "cache" / "profiles" / "cpu-emulator-3-veus.json"
    entries = json.loads(cache.read_text())["entries"]
    # every launch shape of every candidate of every node was timed, not only the chosen ones (of the kernels the
    # default precision allows)
    from kernel_corpus.bindings import DEFAULT_PRECISION, registry
    _, workload = load_workload(path, registry.restricted(DEFAULT_PRECISION))
    keys = {launch_key(ln) for op in workload.ops for c in op.candidates for ln in c.launches}
    assert set(entries) == keys and all(e["rtask_us"] > 0 for e in entries.values())
    runtime = json.loads(cache.read_text())["runtime"]  # the persistent runtime's own costs, measured once
    assert runtime["launch_us"] > 0 and runtime["barrier_us"] >= 0
    feeds = feeds_for(model, seed=4)
    assert_close(built.run(feeds), ort_outputs(model, feeds))
    # a second build reuses the file: give every shape a recognisable time and see the plan use exactly it
    fake = {k: {"rtask_us": 1000.0 + i, "registers": None} for i, k in enumerate(sorted(entries))}
    cache.write_text(json.dumps({"device": "CPU emulator 3 vEUs", "entries": fake,
                                 "runtime": {"barrier_us": 500.0, "launch_us": 7000.0}}))
    before = cache.read_text()
    again = build_model(path, tmp_path / "b", target="cpu", veus=3, quiet=True, profile="measured")
    assert cache.read_text() == before  # nothing re-measured, nothing rewritten
    assert "barrier=500us launch=7e+03us" in again.manifest.stats["profiler"]
    plan = json.loads((tmp_path / "b" / "plan.json").read_text())
    times = [o["rtask_us"] for o in plan["ops"]]
    busiest = max(sum(times[i.task.op] for i in v if isinstance(i, Run)) for p in again.programs for v in p.veus)
    assert plan["predicted_us"] >= 7000.0 + busiest - 1e-6  # the measured launch cost is in the prediction

    by_key = {k: v["rtask_us"] for k, v in fake.items()}
    for op in plan["ops"]:
        ln = op["launch"]
        args = [a for a in ln["args"] if a["kind"] == "scalar"]
        key = (f"{kernel_expr(ln['kernel'], ln['template_args'])} grid={tuple(ln['grid'])} "
               f"block={tuple(ln['block'])} smem={ln['dynamic_smem']} scalars=({','.join(str(a['value']) for a in args)})"
               f" src={ln['source_digest']}")
        assert ln["source_digest"] == source_digest(REPO / "kernel_corpus" / "legacy" / op["source"])
        assert op["rtask_us"] == pytest.approx(by_key[key], abs=1e-3)
    # another vEU count is another file: measured afresh
    build_model(path, tmp_path / "c", target="cpu", veus=2, quiet=True, profile="measured")
    assert (tmp_path / "cache" / "profiles" / "cpu-emulator-2-veus.json").is_file()


def test_profile_choice_without_a_gpu(tmp_path: Path) -> None:
    from rammer.build import make_profiler
    from vdevice.gpu import gpu_available
    if gpu_available()[0]:
        pytest.skip("a GPU is visible: auto measures there (covered by the GPU test)")
    assert make_profiler("auto", "gpu", 132).mode == "model"
    assert make_profiler("auto", "cpu", 4).mode == "model"
    with pytest.raises(BuildError, match="needs a GPU"):
        make_profiler("measured", "gpu", 132)
    path = tmp_path / "m.onnx"
    onnx.save(mlp_model(1), path)
    res = rammer_cli("build", str(path), "-o", str(tmp_path / "out"), "--target", "gpu", "--profile", "measured")
    assert res.returncode == 3 and "needs one" in res.stderr and not (tmp_path / "out").exists()  # no GPU: 3


@pytest.mark.gpu
def test_measured_profile_on_the_gpu(tmp_path: Path, monkeypatch) -> None:
    from vdevice.gpu import gpu_available
    ok, why = gpu_available()
    if not ok:
        pytest.skip(why)
    monkeypatch.setenv("RAMMER_CACHE", str(tmp_path / "cache"))
    model = mlp_model(1, dims=(64, 256, 128, 10))
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out", target="gpu", veus=16, quiet=True)  # auto: measured on a GPU
    assert "mode=measured" in built.manifest.stats["profiler"]
    (cache,) = (tmp_path / "cache" / "profiles").glob("*-16-veus.json")
    entries = json.loads(cache.read_text())["entries"].values()
    assert entries and all(e["rtask_us"] > 0 and (e["registers"] or 0) > 0 for e in entries)
    feeds = feeds_for(model, seed=2)
    assert_close(built.run(feeds), ort_outputs(model, feeds))


# ---- the benchmark zoo at --small: every model builds and matches onnxruntime on the emulator -----------------
def zoo_names() -> list[str]:
    from rammer.zoo import NAMES
    return list(NAMES)


@pytest.mark.parametrize("name", zoo_names())
def test_zoo_small_model_builds_and_checks(tmp_path: Path, name: str) -> None:
    from rammer.zoo import generate, random_inputs
    model = generate(name, small=True)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out", target="cpu", quiet=True)
    dependency_edges_honoured(built)
    feeds = random_inputs(model, seed=3)
    assert_close(built.run(feeds), ort_outputs(model, feeds))


# ---- every standard op of the corpus, end to end ----------------------------------------------------------------
def _standard_op_models() -> list[tuple[str, onnx.ModelProto, object]]:
    """One one-node model per standard ONNX op the corpus defines, at the op's first test shape, and that shape
    (which inputs are drawn positive, which are bool or integers in a range)."""
    from kernel_corpus.bindings import registry
    from kernel_corpus.reference import node_model, shape_node
    out = []
    for d in registry.ops():
        shape = next((s for s in d.shapes if s.test), None)
        if not d.custom and shape is not None:
            out.append((d.op_type, node_model(shape_node(d, shape), d), shape))
    return out


@pytest.mark.parametrize("op_type,model,shape", _standard_op_models(),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_standard_corpus_op_builds_and_checks(tmp_path: Path, op_type: str, model: onnx.ModelProto,
                                                    shape) -> None:
    """A model holding one node of each standard op the corpus defines goes through `rammer build --target cpu`
    and runs as a persistent program; its outputs match onnxruntime. A new op's definition is all it takes."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out", target="cpu", veus=3, quiet=True)
    feeds = feeds_for(model, seed=len(op_type))
    for i in shape.positive:
        feeds[f"x{i}"] = np.abs(feeds[f"x{i}"]) + 0.5
    for i, dtype in shape.dtypes.items():  # bool masks, integer indices in their range
        x = feeds[f"x{i}"]
        feeds[f"x{i}"] = (x > 0) if dtype == "bool" else \
            np.random.default_rng(i).integers(*shape.ranges.get(i, (-9, 9)), x.shape).astype(dtype)
    assert_close(built.run(feeds), ort_outputs(model, feeds))


# ---- named passes, dumps, the trace, --json ------------------------------------------------------------------
def test_disabling_a_pass_changes_the_build_and_it_still_checks(tmp_path: Path) -> None:
    import test_scheduler
    model = test_scheduler.relu_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    fused = build_model(path, tmp_path / "a", target="cpu", veus=3, quiet=True)
    plain = build_model(path, tmp_path / "b", target="cpu", veus=3, quiet=True, disable_passes=["fuse_activations"])
    kinds = lambda b: sorted(op.kernel.wrapper_name for op in b.ops)  # noqa: E731
    unfused = len(plain.ops) - len(fused.ops)
    assert unfused >= 1 and kinds(plain).count("unary") - kinds(fused).count("unary") == unfused  # one Relu each
    log = {r["name"]: r for r in json.loads((tmp_path / "b" / "build.json").read_text())["stats"]["passes"]}
    assert log["fuse_activations"]["skipped"] == "disabled" and log["fold_constants"]["seconds"] >= 0
    assert [r["name"] for r in fused.manifest.stats["passes"]] == list(log)
    assert fused.manifest.stats["passes"][[*log].index("fuse_activations")]["changes"] >= 1
    feeds = feeds_for(model, seed=3)
    want = ort_outputs(model, feeds)
    assert_close(plain.run(feeds), want)
    assert_close(fused.run(feeds), want)


def test_dump_after_writes_a_checkable_onnx_graph(tmp_path: Path) -> None:
    """After alias_views the graph is standard ONNX with its views as Reshape/Slice: onnxruntime runs it and
    agrees with the original; after a fusion it holds our custom ops in their own domain and still passes the
    checker."""
    model = transformer_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    build_model(path, tmp_path / "b", target="cpu", veus=2, quiet=True, compile_check=False,
                dump_after=["alias_views", "fuse_activations"])
    early = onnx.load(str(tmp_path / "b" / "after-alias_views.onnx"))
    onnx.checker.check_model(early, full_check=True)
    assert not {n.op_type for n in early.graph.node} & {"Shape", "Gather", "Unsqueeze"}  # folded away
    feeds = feeds_for(model, seed=4)
    got = dict(zip([o.name for o in early.graph.output],
                   ort.InferenceSession(early.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)))
    assert_close(got, ort_outputs(model, feeds))
    late = onnx.load(str(tmp_path / "b" / "after-fuse_activations.onnx"))
    onnx.checker.check_model(late)
    custom = {n.op_type for n in late.graph.node if n.domain == "ai.rammer"}
    assert "FusedMatMul" in custom and all(n.domain == "" for n in late.graph.node if n.op_type not in custom)


@pytest.mark.parametrize("args,message,code", [(["--disable-pass", "nope"], "unknown pass 'nope'", 2),
                                               (["--dump-after", "x"], "unknown pass 'x'", 2),
                                               (["--disable-pass", "remove_dead", "--dump-after", "remove_dead"],
                                                "is disabled", 1)])
def test_pass_options_fail_in_one_line(tmp_path: Path, args: list[str], message: str, code: int) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(mlp_model(1), path)
    res = rammer_cli("build", str(path), "-o", str(tmp_path / "b"), "--target", "cpu", *args)
    assert res.returncode == code and message in res.stderr
    assert res.stderr.strip().count("\n") == (0 if code == 2 else 1)  # a usage error comes before the build line
    assert not (tmp_path / "b").exists()


def test_timeline_json_is_a_trace_with_one_slice_per_rtask(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    # hidden 64: cells worth spreading over the vEUs (with hidden 4 a cell costs less than a barrier-rTask and
    # the cost model rightly runs the whole model on one vEU, with nothing to wait for)
    onnx.save(lstm_model(5, 2, 3, 64, 2), path)
    built = build_model(path, tmp_path / "b", target="cpu", veus=3, quiet=True)
    trace = json.loads((tmp_path / "b" / "timeline.json").read_text())
    events = trace["traceEvents"]
    assert all(e["ph"] in ("X", "M") and {"pid", "tid", "name"} <= set(e) for e in events)
    slices = [e for e in events if e["ph"] == "X" and e["cat"] == "rtask"]
    programs = json.loads((tmp_path / "b" / "programs.json").read_text())["programs"]
    runs = sum(1 for p in programs for veu in p["veus"] for i in veu if i[0] == "r")  # counted from the file
    assert runs == built.manifest.stats["rtasks"] == len(slices)
    nodes = {op.name.split("#")[0] for op in built.ops}
    assert {e["name"] for e in slices} <= nodes and all(e["dur"] > 0 for e in slices)
    assert {tuple(sorted(e["args"])) for e in slices} == {("launch", "op", "rtask", "source", "variant")}
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}
    assert "rProgram 0 (planned order)" in names and "vEU 0" in names  # a CPU build: the cost model's order
    waits = [e for e in events if e["ph"] == "X" and e["cat"] == "wait"]
    assert waits and all(e["args"]["awaits"] for e in waits)
    svg = (tmp_path / "b" / "timeline.svg").read_text()
    op_types = {o["op_type"] for o in json.loads((tmp_path / "b" / "plan.json").read_text())["ops"]}
    assert op_types and all(f">{op}</text>" in svg for op in op_types)  # the colour legend


def test_json_output_of_build_run_and_plan(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(mlp_model(2), path)
    b = rammer_cli("build", str(path), "-o", str(tmp_path / "b"), "--target", "cpu", "--veus", "2", "--json")
    assert b.returncode == 0, b.stderr
    built = json.loads(b.stdout)
    assert built["rtasks"] >= 1 and built["passes"] and built["folder"].endswith("b")
    r = rammer_cli("run", str(tmp_path / "b"), "--check", "--json")
    ran = json.loads(r.stdout)
    assert r.returncode == 0 and ran["check"]["pass"] is True and ran["outputs"][0]["check"]["worst_ratio"] <= 1
    p = rammer_cli("plan", str(path), "--json", "--veus", "4")
    planned = json.loads(p.stdout)
    assert p.returncode == 0 and planned["predicted_us"] > 0 and planned["launches"] >= 1


def test_cache_command_reports_and_clears_one_root(tmp_path: Path) -> None:
    """`rammer cache info|clear` over $RAMMER_CACHE: the emulator's builds land there, info counts them, clear
    removes one part or all, and refuses a path outside the cache."""
    import os
    env_root = tmp_path / "cache"
    (env_root / "profiles").mkdir(parents=True)
    (env_root / "profiles" / "dev.json").write_text("{}")
    env = dict(os.environ, RAMMER_CACHE=str(env_root))
    run = lambda *a: subprocess.run([sys.executable, "-c", "from rammer.cli import main; main()", "cache", *a],  # noqa: E731
                                    capture_output=True, text=True, env=env, timeout=120)
    code = ("from cuda_emu import CpuModule\n"
            "CpuModule('__global__ void k(int* p) { p[0] = 1; }', ['k'])\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)
    info = run("info")
    assert info.returncode == 0 and str(env_root) in info.stdout and "emu" in info.stdout and "profiles" in info.stdout
    assert any(p.suffix == ".so" for p in (env_root / "emu").iterdir())
    assert run("clear", "profiles").returncode == 0 and not (env_root / "profiles").exists()
    assert (env_root / "emu").exists()
    bad = run("clear", "../elsewhere")
    assert bad.returncode == 2 and "not a part of the cache" in bad.stderr
    assert run("clear").returncode == 0 and not env_root.exists()


@pytest.mark.nvcc
@pytest.mark.slow
def test_gpu_build_picks_veus_per_sm_from_ptxas(tmp_path: Path) -> None:
    """`rammer build --target gpu` without --veus (no GPU needed, nvcc compiles): the vEU count is the SM count
    times the vEUs per SM chosen from ptxas, the program carries that __launch_bounds__, and ptxas' registers at
    those bounds keep that many vEUs co-resident without spills (checked here by the occupancy arithmetic)."""
    from toolchain.nvcc import find_nvcc
    if find_nvcc() is None:
        pytest.skip("nvcc is not installed")
    from vdevice.occupancy import blocks_per_sm, interpreter_usage
    from vdevice.codegen import INCLUDE_DIR
    path = tmp_path / "m.onnx"
    onnx.save(lstm_model(4, 2, 3, 32, 2), path)
    built = build_model(path, tmp_path / "b", target="gpu", quiet=True, profile="model", launches=False)
    k = built.manifest.stats["veus_per_sm"]
    assert k >= 2 and built.manifest.veus == 132 * k and "per SM" in built.manifest.stats["occupancy"]
    source = (tmp_path / "b" / "program.cu").read_text()
    assert f", {k})\nvd_interpreter(" in source
    usage = interpreter_usage(source, [str(INCLUDE_DIR)])
    plan = json.loads((tmp_path / "b" / "plan.json").read_text())
    threads = max(p["veu_threads"] for p in plan["programs"])
    smem = max(p["veu_smem_bytes"] for p in plan["programs"]) + 128
    assert usage.spill_bytes == 0 and blocks_per_sm(-(-threads // 32) * 32, usage.registers, smem).blocks >= k
