"""The plan-independent baselines (scheduler/baselines.py): each against a hand computation from the legacy kernels'
modelled times and the launch gaps, and a baseline's price unchanged by the vEU count and the plan's variant
choices."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from test_scheduler import cnn_model, launch

from scheduler import baselines
from scheduler.dispatch_costs import LAUNCHES
from scheduler.plan import LibraryCall
from scheduler.profiler import H100, Profiler
from scheduler.workload import Candidate, OpSpec, Workload

REPO = Path(__file__).resolve().parent.parent


def call(us_flops: float) -> LibraryCall:
    """A matmul call whose modelled kernel time the test reads back from the library's model."""
    return LibraryCall("n", "MatMul", "library", "matmul", ["a", "b"], ["y"], [[256, 256], [256, 256]], [[256, 256]],
                       flops=int(us_flops))


def diamond(prof: Profiler) -> tuple[Workload, dict[str, float]]:
    """a -> (b, c) -> d; b has two variants (the second faster alone), c also a library call. Returns the
    workload and each launch's modelled time alone."""
    la, lb1, lb2, lc, ld = (launch("unary", 300, 128, 0, 2e6), launch("unary", 600, 128, 0, 8e6),
                            launch("unary", 1200, 256, 0, 8e6), launch("gemm_tiled", 64, 256, 4e9, 1e6),
                            launch("unary", 10, 128, 0, 1e4))
    alone = {k: prof.legacy_kernel_us(v) for k, v in dict(a=la, b1=lb1, b2=lb2, c=lc, d=ld).items()}
    ops = [OpSpec(0, "a", "X", [Candidate("only", "only", [la])]),
           OpSpec(1, "b", "X", [Candidate("slow", "fast", [lb1]), Candidate("quick", "fast", [lb2])], [0]),
           OpSpec(2, "c", "MatMul", [Candidate("tiled", "fast", [lc])], [0], calls=[call(1e9)]),
           OpSpec(3, "d", "X", [Candidate("only", "only", [ld])], [1, 2])]
    return Workload(ops), alone


def test_baselines_against_hand_numbers() -> None:
    """Serial graphs: every fastest kernel plus a gap (graph 1.258 - 0.6, PDL 0.353), never below the launched tiny
    op, a graph launched once; eager: the host's 6.279 us or the kernel and the stream's 1.30 us gap; the library graph
    uses the call for c where it is faster; the multi-stream graph runs b and c side by side, c on a second stream
    (its wait on a, and d's on c, cost the cross-stream edge)."""
    prof = Profiler(H100, 132)
    wl, alone = diamond(prof)
    from scheduler.backends.library import call_kernel_us
    lib = call_kernel_us(call(1e9), H100)
    b = min(alone["b1"], alone["b2"])
    assert alone["b2"] < alone["b1"]
    kernels = [alone["a"], b, alone["c"], alone["d"]]
    got = baselines.price(wl, prof)

    def serial(ks: list[float], how: str) -> float:
        gap, floor = LAUNCHES.gap_us(how), LAUNCHES.floor_us(how)
        return sum(max(floor, k + gap) for k in ks) + (6.279 if how in ("graph", "pdl") else 0.0)

    assert got.us["op-by-op"] == pytest.approx(sum(max(6.279, k + 1.30) for k in kernels))
    assert got.us["cuda-graph"] == pytest.approx(serial(kernels, "graph"))
    assert got.us["cuda-graph-pdl"] == pytest.approx(serial(kernels, "pdl"))
    with_lib = [alone["a"], b, min(lib, alone["c"]), alone["d"]]
    assert got.us["library-graph"] == pytest.approx(serial(with_lib, "graph"))
    node = lambda k: max(LAUNCHES.floor_us("graph"), k + LAUNCHES.gap_us("graph"))  # noqa: E731
    # a, b and d on stream 0, c on stream 1: c waits for a and d for c across streams (6.95 us each, the 09:00 fit)
    path = node(alone["a"]) + max(node(b), 6.95 + node(alone["c"])) + 6.95 + node(alone["d"])
    # 300, 1200, 64 and 10 blocks, 8 per SM by registers (64 assumed; 256-thread ones 4): shares of 132 SMs
    shares = [300 / (132 * 8), 1200 / (132 * 4), 64 / (132 * 4), 10 / (132 * 8)]
    area = sum(k * min(1.0, s) for k, s in zip(kernels, shares))
    assert got.us["multi-stream-graph"] == pytest.approx(max(path, area) + 6.279)
    assert got.variants["b"] == "quick" and got.strongest == min(got.us, key=got.us.get)


def test_multi_stream_is_bounded_by_the_device_time_of_wide_kernels() -> None:
    """Two independent kernels that each fill the device cannot overlap: the area bound (their sum) binds."""
    prof = Profiler(H100, 132)
    wide = launch("unary", 132 * 64, 256, 0, 64e6)
    k = prof.legacy_kernel_us(wide)
    wl = Workload([OpSpec(0, "a", "X", [Candidate("v", "only", [wide])]),
                   OpSpec(1, "b", "X", [Candidate("v", "only", [wide])])])
    assert baselines.launch_share(prof, wide) == 1.0
    assert baselines.price(wl, prof).us["multi-stream-graph"] == pytest.approx(2 * k + 6.279)


def plan_json(path: Path, *args: str) -> dict:
    """`rammer plan PATH --json ARGS` from this checkout."""
    proc = subprocess.run([sys.executable, "-c", "from rammer.cli import main; main()", "plan", str(path), "--json",
                           "--profile", "model", *args], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_baselines_do_not_change_with_veus_or_the_plans_choices(tmp_path: Path) -> None:
    """`rammer plan` at 4, 132 and 396 vEUs and with three policies (other rProgram shapes and variant choices):
    the same baselines, the strongest named, the ratio against it."""
    path = tmp_path / "cnn.onnx"
    onnx.save(cnn_model(2), path)
    runs = [plan_json(path, "--veus", v, "--policy", p) for v, p in (("4", "wavefront"), ("132", "wavefront"),
                                                                     ("396", "sequential"), ("132", "ios"))]
    first = runs[0]["predicted_baselines_us"]
    assert set(first) == set(baselines.NAMES)
    assert len({r["predicted_us"] for r in runs}) > 1  # the plans differ
    for r in runs:
        assert r["predicted_baselines_us"] == first
        assert r["strongest_baseline"] == min(first, key=first.get)
        assert r["vs_strongest"] == pytest.approx(first[r["strongest_baseline"]] / r["predicted_us"], rel=1e-3)


def test_multi_stream_over_the_executors_eight_streams_against_hand_numbers() -> None:
    """Nine independent chains of T kernels: the executor's 8 streams (vdevice.executors.stream_of_each) put chains
    0-7 on streams 0-7 and chain 8 behind chain 0 on stream 0, so the graph takes 2T nodes, not T (with 16 streams:
    T). A node joining a chain on another stream pays the cross-stream edge (6.95 us, fitted to lstm-tc's 3.035 ms
    multi-stream graph, 09:00 run) even when that chain ended long before: a tail node after chains 0 and 8's ends
    (stream 0) and chain 1's (stream 1) starts at 2T nodes + the edge."""
    from scheduler.dispatch_costs import LAUNCHES
    prof = Profiler(H100, 132)
    T, k = 20, 5.0
    nodes = []
    for chain in range(9):
        for t in range(T):
            nodes.append(baselines.NodeKernels(f"c{chain}_{t}", [chain * T + t - 1] if t else [], "v", [k], [0.01]))
    lanes = baselines.node_streams(nodes)
    assert [lanes[c * T] for c in range(9)] == [0, 1, 2, 3, 4, 5, 6, 7, 0]
    cell = k + LAUNCHES.gap_us("graph")
    assert baselines.multi_stream_us(nodes, prof) == pytest.approx(2 * T * cell + 6.279)
    assert baselines.multi_stream_us(nodes, prof, streams=16) == pytest.approx(T * cell + 6.279)
    assert LAUNCHES.cross_stream_us == pytest.approx(6.95)
    tail = nodes + [baselines.NodeKernels("tail", [9 * T - 1, 2 * T - 1], "v", [k], [0.01])]
    assert baselines.node_streams(tail)[-1] == 0
    assert baselines.multi_stream_us(tail, prof) == pytest.approx(2 * T * cell + 6.95 + cell + 6.279)
