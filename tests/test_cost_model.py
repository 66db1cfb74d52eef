"""The persistent interpreter's cost terms (scheduler/dispatch_costs.py) and the simulation that charges them
(scheduler/simulate.py), each against a hand computation from the SASS reading (docs/vdevice-dispatch-sass.md)
and the runtime micro-benchmark measured on an H100 (results/h100-2026-11-27/vdevice_table.md)."""
from __future__ import annotations

import pytest

from scheduler.dispatch_costs import INTERPRETER, LAUNCHES, InterpreterCosts, interpolate
from scheduler.profiler import H100, Profiler
from scheduler.simulate import StepCosts, simulate
from vdevice.program import KernelRef, Op, Program, TaskRef

# the micro-benchmark's rows (µs), written out here as the hand computations' inputs
TINY, CHAIN, HANDOFF = 0.527, 0.780, 1.448
STEP = {1: 1.448, 16: 1.411, 132: 1.310, 264: 1.642, 396: 1.858}  # by vEUs of the step barrier: fan-in vEUs - 1


def ops(n: int, rtasks: int = 1) -> list[Op]:
    """n ops of `rtasks` rTasks each."""
    return [Op(f"op{i}", KernelRef("s.cu", f"k{i}__rtask", grid=(rtasks, 1, 1))) for i in range(n)]


def costs(duration: float = TINY) -> StepCosts:
    """The default profiler's step costs with every rTask's body and dispatch taking `duration`."""
    return Profiler(H100, 132).step_costs(lambda op: duration)


def test_terms_come_from_the_measured_rows() -> None:
    """Dispatch = the tiny rTask; an L2 round trip = chain - tiny; publish one round trip; a satisfied wait one
    round trip and the 0.1 us fence; the hand-off table is the step-barrier rows."""
    it = INTERPRETER
    assert it.dispatch_us == TINY
    assert it.arg_fetch_us == pytest.approx(CHAIN - TINY)
    assert it.publish_us == pytest.approx(CHAIN - TINY)
    assert it.satisfied_wait_us == pytest.approx(CHAIN - TINY + 0.1)
    assert dict(it.handoff_by_fan_in) == {max(1, veus - 1): us for veus, us in STEP.items()}
    for fan_in, us in it.handoff_by_fan_in:
        assert it.wait_visible_us(fan_in) == pytest.approx(us)
        assert it.handoff_us(fan_in) == pytest.approx(us - (CHAIN - TINY))


@pytest.mark.parametrize("x,want", [(0, 1.448), (1, 1.448), (8, 1.448 + (1.411 - 1.448) * 7 / 14),
                                    (200, 1.310 + (1.642 - 1.310) * 69 / 132), (395, 1.858),
                                    (659, 1.858 + (1.858 - 1.642) * 2)])
def test_handoff_by_fan_in_is_linear_between_measured_points(x: int, want: float) -> None:
    assert interpolate(INTERPRETER.handoff_by_fan_in, x) == pytest.approx(want)


@pytest.mark.parametrize("n", [2, 10, 101])
def test_chain_and_ping_pong_reproduce_the_measured_rows(n: int) -> None:
    """The micro-benchmark's programs: n one-rTask ops, each waiting for the previous, on one vEU (the waits are
    covered: no barrier) and alternating between two vEUs. The chain's rTasks change op each time (an argument
    fetch each): 0.780 us per rTask; the ping-pong adds one measured hand-off per op: 2.228 us."""
    one, two = Program(ops(n), 1), Program(ops(n), 2)
    for i in range(n):
        if i:
            one.wait_ops(TaskRef(i, 0), [i - 1])
            two.wait_ops(TaskRef(i, 0), [i - 1])
        one.append(TaskRef(i, 0), 0)
        two.append(TaskRef(i, 0), i % 2)
    assert simulate(one, costs()).span == pytest.approx(n * CHAIN)
    assert simulate(two, costs()).span == pytest.approx(n * CHAIN + (n - 1) * HANDOFF)


@pytest.mark.parametrize("veus", [16, 132, 264, 396])
def test_step_barrier_costs_the_measured_row(veus: int) -> None:
    """Every vEU runs one rTask per round after all vEUs' rTasks of the previous round (fan-in = vEUs): per round
    the rTask (a new op: its argument fetch) and the measured step-barrier cost."""
    rounds = 5
    prog = Program(ops(rounds, veus), veus)
    for r in range(rounds):
        for v in range(veus):
            if r:
                prog.wait_ops(TaskRef(r, v), [r - 1])
            prog.append(TaskRef(r, v), v)
    assert simulate(prog, costs()).span == pytest.approx(rounds * CHAIN + (rounds - 1) * STEP[veus])


def test_satisfied_wait_publish_and_l1_invalidation() -> None:
    """vEU 0: op0 rTasks 0 and 1 (same op: one argument fetch), then op1 rTask 0, which vEU 1 awaits (it publishes:
    0.253 us on vEU 0 before its next rTask, op1 rTask 1). vEU 1: a long op2 rTask, then a wait on op1 rTask 0,
    already visible: the satisfied wait, then op1 rTask 2 fetches its arguments after the L1 invalidation."""
    rt = CHAIN - TINY
    prog = Program(ops(3, 3), 2)
    prog.append(TaskRef(0, 0), 0)
    prog.append(TaskRef(0, 1), 0)
    prog.append(TaskRef(1, 0), 0)
    prog.append(TaskRef(1, 1), 0)
    prog.append(TaskRef(2, 0), 1)
    prog.wait(TaskRef(1, 2), [TaskRef(1, 0)])
    prog.append(TaskRef(1, 2), 1)
    durations = {0: 1.0, 1: 2.0, 2: 20.0}
    tl = simulate(prog, Profiler(H100, 132).step_costs(durations.__getitem__))
    t = [rt + 1.0, rt + 2.0]  # op0: fetch once, then 1 + 1
    t.append(t[-1] + rt + 2.0)  # op1 rTask 0: another op, fetch
    t.append(t[-1] + rt + 2.0)  # op1 rTask 1: after op1 rTask 0's publish, same op: no fetch
    assert tl.ends[0] == pytest.approx(t)
    v1 = rt + 20.0
    assert v1 > t[2] + STEP[1]  # the awaited rTask is visible long before vEU 1 reaches the wait
    assert tl.ends[1] == pytest.approx([v1, v1 + (rt + 0.1) + rt + 2.0])


def test_unsatisfied_wait_starts_one_handoff_after_the_last_awaited_end() -> None:
    """A wait on rTasks of 3 vEUs ending at different times: the waiter goes on the measured hand-off at fan-in 3
    after the latest (publish included), then fetches its arguments."""
    prog = Program(ops(2, 3), 4)
    for v in range(3):
        prog.append(TaskRef(0, v), v)
    prog.wait(TaskRef(1, 0), [TaskRef(0, v) for v in range(3)])
    prog.append(TaskRef(1, 0), 3)
    durations = {0: 5.0, 1: 1.0}
    tl = simulate(prog, Profiler(H100, 132).step_costs(durations.__getitem__))
    rt = CHAIN - TINY
    hand = 1.448 + (1.411 - 1.448) * 2 / 14
    assert tl.ends[3] == pytest.approx([rt + 5.0 + hand + rt + 1.0])


def test_simple_costs_are_the_old_rule() -> None:
    """Without the interpreter's terms a wait ends a barrier after the last awaited end and costs nothing when
    satisfied (the rule of simple test devices)."""
    prog = Program(ops(3, 1), 2)
    prog.append(TaskRef(0, 0), 0)
    prog.append(TaskRef(2, 0), 1)
    prog.wait(TaskRef(1, 0), [TaskRef(0, 0)])
    prog.append(TaskRef(1, 0), 1)
    satisfied = simulate(prog, StepCosts(lambda op: [2.0, 1.0, 5.0][op], 0.7))
    assert satisfied.ends[1] == pytest.approx([5.0, 6.0])
    unsatisfied = simulate(prog, StepCosts(lambda op: [5.0, 1.0, 2.0][op], 0.7))
    assert unsatisfied.ends[1] == pytest.approx([2.0, 6.7])


def test_launch_gaps_against_hand_numbers() -> None:
    """Per op: the measured tiny op less its 0.6 us kernel (eager 6.279, graph node 1.258), PDL an L2 round trip
    and a 0.1 us fence; kernels of 0.1 and 10 us, a graph launched once."""
    prof = Profiler(H100, 132)
    rt = CHAIN - TINY
    assert LAUNCHES.gap_us("eager") == pytest.approx(6.279 - 0.6)
    assert LAUNCHES.gap_us("graph") == pytest.approx(1.258 - 0.6)
    assert LAUNCHES.gap_us("pdl") == pytest.approx(rt + 0.1)
    # eager launches are asynchronous: the host's 6.279 us interval for the tiny kernel, the 10 us kernel and the
    # stream's 1.30 us gap for the long one (results/h100-2026-11-27-0900: op-by-op 8.943 ms against the graph's 7.801)
    assert prof.launched_us([0.1, 10.0], "eager") == pytest.approx(6.279 + 10.0 + 1.30)
    assert prof.launched_us([0.1, 10.0], "graph") == pytest.approx(6.279 + 1.258 + 10.0 + 1.258 - 0.6)
    assert prof.launched_us([0.1, 10.0], "pdl") == pytest.approx(6.279 + 0.6 + rt + 0.1 + 10.0 + rt + 0.1)


def test_measured_handoff_stands_for_every_fan_in() -> None:
    """A measured profile's hand-off replaces the table (it was measured at fan-in 1 only)."""
    it = InterpreterCosts(handoff_by_fan_in=((1, 2.0),))
    assert [it.wait_visible_us(f) for f in (1, 132, 396)] == pytest.approx([2.0, 2.0, 2.0])


def test_baselines_occupancy_from_ptxas_registers() -> None:
    """A legacy kernel of 1024 blocks of 256 threads fits 2 blocks per SM at 128 registers (65536 / (256 x 128))
    and 4 at the 64 assumed when ptxas' figure is unknown: the waves over 132 SMs follow."""
    from kernel_corpus.bindings import In, Launch, Out
    work = Launch("unary", [], (1024, 1, 1), (256, 1, 1), 0, [In(0), Out(0)], 0, int(64e6))
    assumed = Profiler(H100, 132)
    heavy = Profiler(H100, 132, legacy_registers=lambda launch: 128)
    per_block = 64e6 / 1024

    def alone(fit: int) -> float:
        waves = -(-1024 // (132 * fit))
        return waves * per_block / min(3.0e12 / min(1024, 132 * fit), 256 * 16 / 0.6e-6) * 1e6
    assert assumed.legacy_kernel_us(work) == pytest.approx(alone(4))
    assert heavy.legacy_kernel_us(work) == pytest.approx(alone(2))


@pytest.mark.nvcc
def test_legacy_registers_are_ptxas_figures(tmp_path) -> None:
    """The figure for a legacy kernel instantiation is what ptxas reports for it compiled alone (an explicit
    instantiation, another way of asking); an expression ptxas does not report is unknown (None)."""
    from kernel_corpus.bindings import In, Launch, Out, source_digest
    from scheduler.legacy_usage import LegacyRegisters
    from toolchain.nvcc import find_nvcc
    from toolchain.ptxas import parse_ptxas, run_ptxas
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    src = legacy / "k.cu"
    src.write_text("template <int N> __global__ void acc(float* x) {\n  float a[N];\n"
                   "  for (int i = 0; i < N; ++i) a[i] = x[threadIdx.x * N + i] * i;\n  float s = 0;\n"
                   "  for (int i = 0; i < N; ++i) s += a[i] * a[(i * 7) % N];\n  x[threadIdx.x] = s;\n}\n")
    regs = LegacyRegisters(tmp_path / "cache", legacy)
    launches = [Launch("acc", [n], (1, 1, 1), (32, 1, 1), 0, [In(0), Out(0)], 0, 0, source_digest=source_digest(src))
                for n in (2, 24)]
    regs.prefetch(launches)
    for launch, n in zip(launches, (2, 24)):
        ok, log = run_ptxas(f'#include "{src}"\ntemplate __global__ void acc<{n}>(float*);\n', nvcc, [str(legacy)])
        assert ok
        (entry,) = parse_ptxas(log).values()
        assert regs(launch) == entry["registers"]
    other = Launch("acc", [3], (1, 1, 1), (32, 1, 1), 0, [], 0, 0, source_digest="not-a-known-source")
    assert regs(other) is None


def test_eager_launches_overlap_the_host_against_hand_numbers() -> None:
    """lstm-tc's op by op, 2026-11-27 09:00 (results/h100-2026-11-27-0900/results.jsonl): 1000 LSTM cells of ~7 us
    run back to back 1.30 us apart (longer than the host's 6.279 us per launch), 100 tiny copies at the host's pace;
    kernels of 3 us (shorter than the host's interval) cost the host's 6.279 us each."""
    prof = Profiler(H100, 132)
    assert LAUNCHES.eager_stream_gap_us == pytest.approx(1.30)
    assert prof.launched_us([7.0] * 1000 + [0.1] * 100, "eager") == pytest.approx(1000 * 8.30 + 100 * 6.279)
    assert prof.launched_us([3.0] * 10, "eager") == pytest.approx(10 * 6.279)
    # the figure's derivation: (8943 - 7801 - 100 x (6.279 - 1.258)) / 1000 cells more than the graph node's gap
    assert (8943 - 7801 - 100 * (6.279 - 1.258)) / 1000 + (1.258 - 0.6) == pytest.approx(1.30, abs=0.005)


def test_weight_stream_in_flight_from_the_sass_against_hand_numbers() -> None:
    """An L2-resident weight stream: bytes per block over (threads x the kernel's bytes in flight per thread, read
    from its SASS) / the weight stream's L2 latency, 0.42 us (fitted to lstm-tc's two CUDA Graphs, 09:00 run).
    One 256-thread block streaming 64 KiB: lstm_cell_fused (4 x LDG.32 per trip, 16 B) 16 trips, 6.72 us;
    lstm_cell_resident unpinned (2 x LDG.128, 32 B) 8 trips, 3.36 us; lstm_cell_vec4 (4 x LDG.128, 64 B) 4 trips,
    1.68 us; a kernel not read keeps DeviceSpec's 16 B."""
    from kernel_corpus.bindings import In, Launch, Out

    from scheduler.profiler import BYTES_IN_FLIGHT
    assert H100.l2_latency_us == pytest.approx(0.42)
    assert BYTES_IN_FLIGHT == {"lstm_cell_fused": 16, "lstm_cell_resident": 32, "lstm_cell_vec4": 64}
    prof = Profiler(H100, 132)
    prof.resident_bytes = 21 << 20  # the weights fit the 50 MB L2: the L2 latency and bandwidth apply
    for kernel, trips in (("lstm_cell_fused", 16), ("lstm_cell_resident", 8), ("lstm_cell_vec4", 4),
                          ("unary", 16)):
        one = Launch(kernel, [], (1, 1, 1), (256, 1, 1), 0, [In(0), Out(0)], 0, 65536)
        assert prof.legacy_kernel_us(one) == pytest.approx(trips * 0.42), kernel
