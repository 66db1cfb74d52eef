"""Plans of more than one kind of step on the CPU target: rPrograms, launch segments (nodes run as their fastest
legacy kernels outside the rPrograms; the emulator launches them; on one stream a PDL chain) and library calls, each
kind forced for three zoo --small models and mixed, every output checked against onnxruntime; the segment price
against a hand computation (the all-launch plan's equal to the cuda-graph-pdl baseline's); the launch option's DP and
the stream assignment of a captured segment."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from rammer.build import build_model
from rammer.check import reference_outputs, relative_error
from rammer.zoo import generate, random_inputs
from vdevice.executors import LaunchStep, stream_of_each

from scheduler.profiler import H100, Profiler

TOL = 1e-4
# per model: the forced mix (first matching pattern wins): some nodes launched, one library call, the rest in
# rPrograms; patterns over the node names after the graph passes
MIXED = {
    "lstm-tc": ("n_lstm_0/xw=library", "n_lstm_1/*=launch", "*=rtask"),
    # n_conv_4 and n_conv_8: FusedConvAdd (the blocks' residual Add and Relu in the convolution's epilogue)
    "resnext": ("n_conv_1*=launch", "n_conv_4=launch", "n_conv_3=library", "n_conv_8=library", "*=rtask"),
    "transformer": ("n_layernormalization_0=launch", "n_matmul_1=library", "n_softmax_0=launch", "*=rtask"),
}
# the nodes each model may run as library calls (Conv/MatMul/Gemm the library implements)
LIBRARY = {"lstm-tc": "n_lstm_0/xw", "resnext": "n_conv_*", "transformer": "n_matmul_*"}


def build_and_check(tmp_path: Path, name: str, **options) -> dict:
    """Build the --small zoo model on the CPU target with `options`, run it, compare with onnxruntime; returns
    build.json's steps by kind."""
    model = generate(name, small=True)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    built = build_model(path, tmp_path / "out", target="cpu", veus=8, quiet=True, backends=("rtask", "library"),
                        **options)
    feeds = random_inputs(model, seed=3)
    got = built.run(feeds)
    err = relative_error([got[n] for n in built.output_names], reference_outputs(model, feeds))
    assert err <= TOL, f"{name} {options}: relative error {err:.3g}"
    kinds: dict[str, int] = {}
    for step in built.manifest.steps:
        kinds[step.kind] = kinds.get(step.kind, 0) + 1
    # one-stream segments are PDL chains: the emulator ran their wrappers from the copy with the prologue
    from vdevice.pdl import has_prologue
    vd = built.executor("persistent").vd
    chained = {i for g in built.manifest.launches if g.chain for i in g.ops}
    assert vd.pdl_chained == chained and vd.pdl_note == ""
    for i in chained:
        assert has_prologue(vd.gen.source, built.ops[i].kernel.wrapper_name.rsplit("::", 1)[-1]), built.ops[i].name
    kinds["chains"] = sum(g.chain for g in built.manifest.launches)
    return kinds


@pytest.mark.parametrize("name", list(MIXED))
def test_mixed_plan_runs_and_matches_onnxruntime(tmp_path: Path, name: str) -> None:
    """An rProgram, a launch segment on one stream (a PDL chain: the emulator runs its prologued wrappers, the
    prologue a no-op) and a library call, to onnxruntime's outputs."""
    kinds = build_and_check(tmp_path, name, force=MIXED[name])
    assert kinds.get("program", 0) >= 1 and kinds.get("launches", 0) >= 1 and kinds.get("library", 0) >= 1, kinds
    assert kinds["chains"] >= 1, kinds


@pytest.mark.parametrize("name", list(MIXED))
@pytest.mark.parametrize("kind", ["rtask", "launch", "library"])
def test_each_segment_kind_forced(tmp_path: Path, name: str, kind: str) -> None:
    """Every node in rPrograms; every node launched; every node the library can run as a library call (the rest in
    rPrograms)."""
    force = {"rtask": ("*=rtask",), "launch": ("*=launch",), "library": (f"{LIBRARY[name]}=library", "*=rtask")}[kind]
    kinds = build_and_check(tmp_path, name, force=force)
    kinds.pop("chains")
    if kind == "rtask":
        assert set(kinds) == {"program"}, kinds
    elif kind == "launch":
        assert set(kinds) == {"launches"} and kinds["launches"] == 1, kinds
    else:
        assert kinds.get("library", 0) >= 1 and "launches" not in kinds, kinds


def test_force_refuses_a_kind_a_node_cannot_run_as(tmp_path: Path) -> None:
    from scheduler.graph import SchedulerError
    model = generate("transformer", small=True)
    path = tmp_path / "t.onnx"
    onnx.save(model, str(path))
    with pytest.raises(SchedulerError, match="cannot run as call"):
        build_model(path, tmp_path / "out", target="cpu", veus=8, quiet=True, backends=("rtask", "library"),
                    force=("n_softmax_0=library",))


def test_launch_segment_price_against_hand_numbers() -> None:
    """A diamond a -> (b, c) -> d launched as one segment: forked, the longer of its critical path (each kernel and
    its graph node's gap) and the device time its kernels fill, plus one graph launch; on one stream a PDL chain
    (the H100 has PDL), each kernel and the PDL gap; the launch option of a node is its fastest variant's kernels,
    each a PDL chain's node."""
    from test_baselines import diamond

    from scheduler.dispatch_costs import LAUNCHES
    from scheduler.placement import launch_option_us
    from scheduler.profiler import H100, Profiler
    from scheduler.segments import launch_part
    prof = Profiler(H100, 132)
    wl, alone = diamond(prof)
    part = launch_part(wl, [0, 1, 2, 3], prof)
    node = lambda k: max(LAUNCHES.floor_us("graph"), k + LAUNCHES.gap_us("graph"))  # noqa: E731
    b = min(alone["b1"], alone["b2"])
    # c on a second stream: its wait on a, and d's on c, each cost the cross-stream edge (6.95 us)
    path = node(alone["a"]) + max(node(b), 6.95 + node(alone["c"])) + 6.95 + node(alone["d"])
    shares = [300 / (132 * 8), 1200 / (132 * 4), 64 / (132 * 4), 10 / (132 * 8)]
    area = sum(k * s for k, s in zip([alone["a"], b, alone["c"], alone["d"]], shares))
    forked = max(path, area) + 6.279
    # PDL: an L2 round trip (0.780 - 0.527 us) and a 0.1 us fence = 0.353 us per kernel, at least a tiny kernel's
    # 0.6 us and that gap
    pdl = lambda k: max(0.6 + 0.353, k + 0.353)  # noqa: E731
    serial = sum(pdl(k) for k in (alone["a"], b, alone["c"], alone["d"])) + 6.279
    # here the two edges cost more than running c beside b saves: one stream, each op after the one before
    assert serial < forked
    assert part.us == pytest.approx(serial) and part.chain
    assert [op.variant for op in part.ops] == ["only", "quick", "tiled", "only"]
    assert sorted(part.deps) == [(0, 1), (1, 2), (2, 3)]
    assert stream_of_each(LaunchStep((0, 1, 2, 3), tuple(part.deps))) == [0, 0, 0, 0]
    assert launch_option_us(wl.ops[1], prof) == pytest.approx(pdl(b))
    # the multi-stream baseline (rammer bench builds with fork_launches=True) keeps the diamond's branches forked,
    # priced as the forked graph, though one stream is cheaper: that row must time a forked graph
    kept = launch_part(wl, [0, 1, 2, 3], prof, fork=True)
    assert kept.us == pytest.approx(forked) and sorted(kept.deps) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    assert not kept.chain  # forked: a plain graph (programmatic edges are same-stream)
    assert stream_of_each(LaunchStep((0, 1, 2, 3), tuple(kept.deps))) == [0, 0, 1, 0]


def test_all_launch_plan_is_priced_as_the_pdl_baseline() -> None:
    """The all-launch plan of the diamond (placement launch-only: what the build's fallback makes) is one PDL chain
    priced exactly as the cuda-graph-pdl baseline, both equal to the hand sum: each kernel (a 1.953, b's faster
    variant 3.52, c 5472.64, d 0.293 us alone on the H100 model) plus the PDL gap of 0.353 us (an L2 round trip
    0.780 - 0.527 and a 0.1 us fence), d at the 0.953 us floor (a 0.6 us tiny kernel and the gap), and one graph
    launch of 6.279 us. On a device without PDL (sm_80) the chain is a plain graph: 0.658 us gaps (1.258 - 0.6),
    the 1.258 us floor, and no PDL baseline."""
    import dataclasses

    from test_baselines import diamond

    from scheduler import baselines
    from scheduler.pipeline import place_and_schedule
    from vdevice.target import H100 as H100_HW
    prof = Profiler(H100, 132)
    wl, alone = diamond(prof)
    assert [round(alone[k], 3) for k in ("a", "b2", "c", "d")] == [1.953, 3.52, 5472.637, 0.293]
    hand = (alone["a"] + 0.353) + (alone["b2"] + 0.353) + (alone["c"] + 0.353) + 0.953 + 6.279
    plan = place_and_schedule(wl, "wavefront", prof, "launch-only", launches=True)
    assert [s.kind for s in plan.steps] == ["launches"] and plan.launches[0].chain
    assert plan.predicted_us == pytest.approx(hand, abs=1e-9)
    assert baselines.price(wl, prof).us["cuda-graph-pdl"] == pytest.approx(hand, abs=1e-9)
    ampere = Profiler(dataclasses.replace(H100, hw=dataclasses.replace(H100_HW, arch="sm_80")), 132)
    assert not ampere.device.pdl and "cuda-graph-pdl" not in baselines.price(wl, ampere).us
    plain = (alone["a"] + 0.658) + (alone["b2"] + 0.658) + (alone["c"] + 0.658) + 1.258 + 6.279
    assert place_and_schedule(wl, "wavefront", ampere, "launch-only", launches=True).predicted_us == \
        pytest.approx(plain, abs=1e-9)
    # an H100 whose Python has no cuda.bindings (scheduler.measure.device_spec says why): its executor runs plain
    # graphs, and the price follows
    unbound = Profiler(dataclasses.replace(H100, pdl_refused="cuda.bindings is not importable"), 132)
    assert not unbound.device.pdl and "cuda-graph-pdl" not in baselines.price(wl, unbound).us
    assert place_and_schedule(wl, "wavefront", unbound, "launch-only", launches=True).predicted_us == \
        pytest.approx(plain, abs=1e-9)


def test_a_chain_after_a_library_call_pays_a_graph_node_first() -> None:
    """a and b launched, c a library call, d launched: two one-stream segments in one graph. The first starts the
    plan: PDL gaps throughout, as the baseline's chain. The second follows the call, whose kernel never triggers:
    its first (only) kernel pays an ordinary graph node, max(1.258, 0.293 + 0.658) = 1.258 us, and no second graph
    launch (the run is captured as one graph)."""
    from test_baselines import diamond

    from scheduler.backends.library import call_kernel_us
    from scheduler.segments import Placement, launch_part, plan_steps
    prof = Profiler(H100, 132)
    wl, alone = diamond(prof)
    after = launch_part(wl, [0, 1, 2, 3], prof, after_step=True)
    assert after.chain and after.us == pytest.approx(
        max(1.258, alone["a"] + 0.658) + (alone["b2"] + 0.353) + (alone["c"] + 0.353) + 0.953 + 6.279)
    placement = Placement({0: "launch", 1: "launch", 2: "library", 3: "launch"})

    def no_programs(w: object) -> None:
        raise AssertionError("no rKernel nodes here")

    plan = plan_steps(wl, placement, no_programs, lambda c: call_kernel_us(c, H100), "wavefront", prof)
    assert [s.kind for s in plan.steps] == ["launches", "library", "launches"]
    first, second = plan.launches
    assert first.chain and second.chain
    assert first.us == pytest.approx((alone["a"] + 0.353) + (alone["b2"] + 0.353) + 6.279)
    assert second.us == pytest.approx(1.258)


def test_launch_segment_forks_where_the_overlap_pays() -> None:
    """Two independent chains of three 40 us kernels that each fill a tenth of the device: forked, the second
    chain runs beside the first on its own stream (no cross-stream edge: its first node has no predecessor), so
    the segment takes one chain, not two; the segment keeps its own edges."""
    from test_scheduler import launch

    from scheduler.dispatch_costs import LAUNCHES
    from scheduler.segments import launch_part
    from scheduler.workload import Candidate, OpSpec, Workload
    prof = Profiler(H100, 132)
    big = launch("unary", 53, 256, 0, 40e6)  # 53 blocks of 256 threads: 53 / (132 x 4) of the device
    k = prof.legacy_kernel_us(big)
    ops = [OpSpec(i, f"n{i}", "X", [Candidate("v", "only", [big])], [i - 1] if i % 3 else []) for i in range(6)]
    part = launch_part(Workload(ops), list(range(6)), prof)
    cell = max(LAUNCHES.floor_us("graph"), k + LAUNCHES.gap_us("graph"))
    assert part.us == pytest.approx(max(3 * cell, 6 * k * 53 / (132 * 4)) + 6.279)
    assert sorted(part.deps) == [(0, 1), (1, 2), (3, 4), (4, 5)]


@pytest.mark.parametrize("deps,want", [
    (((0, 1), (1, 2)), [0, 0, 0]),                       # a chain stays on one stream
    (((0, 1), (0, 2), (1, 3), (2, 3)), [0, 0, 1, 0]),    # a diamond forks one branch
    ((), [0, 1, 2]),                                     # independent ops on their own streams
])
def test_stream_assignment_of_a_captured_segment(deps: tuple, want: list[int]) -> None:
    ops = tuple(range(len(want)))
    assert stream_of_each(LaunchStep(ops, deps)) == want


def test_streams_are_reused_beyond_the_limit() -> None:
    lanes = stream_of_each(LaunchStep(tuple(range(10)), ()), streams=3)
    assert lanes == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    assert np.max(lanes) < 3


@pytest.mark.parametrize("name", list(MIXED))
def test_gpu_build_is_never_predicted_slower_than_the_launch_baselines(tmp_path: Path, name: str) -> None:
    """A GPU build with launch segments (the default) falls back to launching every node where that is predicted
    faster: its prediction is at most the op-by-op, CUDA Graph, CUDA Graph + PDL and multi-stream graph baselines'
    (the ones the runtime can run as a launch segment: one-stream segments are PDL chains), priced independently of
    the plan."""
    model = generate(name, small=True)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    built = build_model(path, tmp_path / "out", target="gpu", quiet=True, compile_check=False, profile="model")
    stats = built.manifest.stats
    base = stats["predicted_baselines_us"]
    assert stats["predicted_us"] <= min(base["op-by-op"], base["cuda-graph"], base["cuda-graph-pdl"],
                                        base["multi-stream-graph"]) + 1e-3


@pytest.mark.parametrize("name", ["squeezenet", "resnext"])
def test_gpu_build_with_the_library_is_never_predicted_slower_than_the_library_graph(tmp_path: Path, name: str
                                                                                      ) -> None:
    """With vendor calls enabled, the build's fallback takes a library call only where it is faster than the node's
    launch, as the library-graph baseline does (scheduler.baselines.kernels_of): squeezenet's fallback used to call
    the library for every node it could and was predicted 100.5 us against the baseline's 87.5 us."""
    model = generate(name, small=True)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    built = build_model(path, tmp_path / "out", target="gpu", quiet=True, compile_check=False, profile="model",
                        backends=("rtask", "library"))
    stats = built.manifest.stats
    assert stats["predicted_us"] <= stats["predicted_baselines_us"]["library-graph"] + 1e-3


def test_a_run_of_segments_and_calls_pays_one_graph_launch() -> None:
    """Between two rPrograms the executor captures the segments and calls as one graph: the second segment of the
    run does not pay a graph launch again; after an rProgram the next one does."""
    from scheduler.plan import LibraryCall, Plan
    from scheduler.profiler import H100, Profiler
    from scheduler.segments import LaunchPart, join
    prof = Profiler(H100, 8)
    part = lambda us: LaunchPart([], [], us, {})  # noqa: E731
    call = LibraryCall("m", "MatMul", "library", "matmul", [], [], [], [], us=3.0)
    program = Plan("wavefront", "d", "p", 8, [], [], [], {})
    plan = join([part(20.0), call, part(30.0), program, part(40.0)], "wavefront", prof)
    assert [s.kind for s in plan.steps] == ["launches", "library", "launches", "launches"]
    assert [g.us for g in plan.launches] == pytest.approx([20.0, 30.0 - 6.279, 40.0])


def test_steps_between_programs_run_as_one_graph() -> None:
    from vdevice.executors import CallStep, step_runs
    a, b, c = LaunchStep((0,)), CallStep("m", lambda vd: None), LaunchStep((1, 2), ((1, 2),))
    assert step_runs([a, b, 0, c, 1, 2]) == [(a, b), 0, (c,), 1, 2]


def test_cli_force_and_launch_only(tmp_path: Path) -> None:
    """`rammer build --force` with a malformed item is one line and exit 1; `--placement launch-only` on the CPU
    target builds one launch segment that `rammer run --check` passes."""
    import subprocess
    import sys
    path = tmp_path / "m.onnx"
    onnx.save(generate("squeezenet", small=True), str(path))
    cli = [sys.executable, "-c", "from rammer.cli import main; main()"]
    repo = Path(__file__).resolve().parent.parent
    bad = subprocess.run(cli + ["build", str(path), "-o", str(tmp_path / "bad"), "--target", "cpu", "--force",
                                "n_conv_*=gpu"], cwd=repo, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 1 and "--force n_conv_*=gpu: expected PATTERN=KIND" in bad.stderr
    assert not (tmp_path / "bad").exists()
    ok = subprocess.run(cli + ["build", str(path), "-o", str(tmp_path / "b"), "--target", "cpu", "--veus", "4",
                               "--placement", "launch-only"], cwd=repo, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr
    assert "0 rProgram(s), 1 launch segment(s)" in ok.stdout
    run = subprocess.run(cli + ["run", str(tmp_path / "b"), "--check"], cwd=repo, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0 and "check: PASS" in run.stdout, run.stdout + run.stderr
