#!/usr/bin/env python3
"""vDevice on a GPU: the DAG tests, the interpreter's per-rTask overhead (1 and all vEUs), hand-off latency,
barrier cost by fan-in (1, 16, 132, 264, 396 vEUs), bandwidth with 1-4 vEUs per SM, small rTasks side by side
against one at a time, and a chain of tiny ops three ways. One run fits one 10-minute device call (tests/gpu/session.sh vdevice).

Run on a GPU machine:  python tests/vdevice_gpu_bench.py [--quick] [--table FILE]
--table writes the measurement table as Markdown (for BENCHMARKS.md). Skips cleanly (exit 0, one line) without
CuPy or a GPU. Exit 1 when a correctness check fails.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _gpu_or_skip() -> str:
    """The device name, or exit 0 with the reason."""
    try:
        import cupy  # noqa: F401
    except ImportError as exc:
        print(f"SKIP: CuPy is not importable ({exc})")
        raise SystemExit(0)
    from vdevice.gpu import gpu_available

    ok, why = gpu_available()
    if not ok:
        print(f"SKIP: {why}")
        raise SystemExit(0)
    return why


DEVICE = _gpu_or_skip()

import cupy  # noqa: E402

from test_vdevice import (CATALOG, SOURCES, _producer_consumer, affine_kernel, fresh,  # noqa: E402
                          make_dag, schedule)
from vdevice.executors import (GraphExecutor, OpByOpExecutor, PersistentExecutor, VDevice,  # noqa: E402
                               VDeviceError)
from vdevice.program import ArgRef, KernelRef, Op, Program, Run, TaskRef, Wait, validate  # noqa: E402

FAILURES: list[str] = []
ROWS: list[tuple[str, str, str, str]] = []


def check(ok: bool, what: str) -> None:
    """Record and print one correctness check."""
    print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    if not ok:
        FAILURES.append(what)


def row(name: str, total_ms: float, count: int, unit: str, note: str = "") -> None:
    """One line of the timing table: total, and per item in µs."""
    ROWS.append((name, f"{total_ms:.3f}", f"{1000.0 * total_ms / count:.3f} µs/{unit}", note))


# ---- 1. the DAG tests on the GPU ----------------------------------------------------------------------------


def dag_tests(cases) -> None:
    """Persistent (GPU) bit-exact with op-by-op (GPU), both close to numpy."""
    print("DAG tests (persistent vs op-by-op on the GPU, numpy truth):")
    for kind, num_ops, veus, n, seed in cases:
        dag = make_dag(kind, num_ops, n, seed)
        program = schedule(dag, veus, seed)
        program.side_by_side = seed % 2 == 1  # every other one with small rTasks side by side (gangs)
        validate(program, dag.deps)
        bufs = dag.inputs(seed)
        vd = VDevice(dag.ops, SOURCES, bufs, "gpu", catalog=CATALOG)
        by_op, persistent = fresh(bufs), fresh(bufs)
        OpByOpExecutor(dag.ops, SOURCES, by_op, deps=dag.deps, vdevice=vd).run(by_op)
        PersistentExecutor(dag.ops, [program], SOURCES, persistent, vdevice=vd).run(persistent)
        want = dag.reference(bufs)
        outs = [op.args[0].buffer for op in dag.ops]
        exact = all(np.array_equal(persistent[o], by_op[o], equal_nan=True) for o in outs)
        err = max(float(np.max(np.abs(by_op[o] - want[o]) / (1 + np.abs(want[o])))) for o in outs)
        check(exact and err < 1e-5, f"{kind}-{num_ops} on {veus} vEUs, n={n}: bit-exact={exact}, "
                                    f"max rel err vs numpy {err:.1e}")


def race_and_watchdog() -> None:
    """A removed wait (informational on the GPU), repeated runs (epochs), the watchdog and recovery."""
    print("Barriers, epochs, watchdog:")
    dag, program = _producer_consumer(4)
    bufs = dag.inputs(1)
    vd = VDevice(dag.ops, SOURCES, bufs, "gpu", catalog=CATALOG)
    exe = PersistentExecutor(dag.ops, [program], SOURCES, bufs, vdevice=vd, watchdog=50_000_000)
    ok = True
    for seed in range(2, 7):
        run_bufs = dag.inputs(seed)
        got = fresh(run_bufs)
        exe.run(got)
        ok = ok and np.allclose(got["t1"], dag.reference(run_bufs)["t1"], rtol=1e-5, atol=1e-5)
    check(ok, "slow producer -> gather consumer, 5 runs with fresh inputs (epochs, no memset)")
    without = Program(dag.ops, 4, [[i for i in x if not isinstance(i, Wait)] for x in program.veus])
    got = fresh(bufs)
    PersistentExecutor(dag.ops, [without], SOURCES, got, vdevice=vd).run(got)
    raced = not np.allclose(got["t1"], dag.reference(bufs)["t1"], rtol=1e-5, atol=1e-5)
    print(f"  [info] same program with its barrier-rTask removed: result {'WRONG (race shows)' if raced else 'right (race hidden)'}")
    stuck = Program(dag.ops, 4, [[Run(TaskRef(0, 0))], [Wait(((0, 7),)), Run(TaskRef(0, 1))], [Run(TaskRef(0, 2))],
                                 [Wait(((1, 0),)), *[Run(TaskRef(1, r)) for r in range(dag.ops[1].kernel.rtasks)]]])
    try:
        PersistentExecutor(dag.ops, [stuck], SOURCES, bufs, vdevice=vd, watchdog=20_000_000).run(fresh(bufs))
        check(False, "watchdog: an unsatisfiable wait must raise")
    except VDeviceError as exc:
        check("vEU 1 stuck" in str(exc) or "vEU 3 stuck" in str(exc), f"watchdog raised: {exc}")
    got = fresh(bufs)
    exe.run(got)
    check(np.allclose(got["t1"], dag.reference(bufs)["t1"], rtol=1e-5, atol=1e-5), "a correct run after the abort")


# ---- 2. barrier costs ---------------------------------------------------------------------------------------


def tiny_chain(count: int, n: int = 32) -> tuple[list[Op], dict[str, np.ndarray], list[tuple[int, int]]]:
    """count one-rTask affine ops, each adding 1 to its predecessor's output (two buffers, alternating)."""
    bufs = {"src": np.zeros(n, np.float32), "a": np.zeros(n, np.float32), "b": np.zeros(n, np.float32)}
    ops = []
    for i in range(count):
        src = "src" if i == 0 else ("a" if i % 2 else "b")
        dst = "b" if i % 2 else "a"
        ops.append(Op(f"add{i}", affine_kernel(n, 32), (ArgRef.buf(dst), ArgRef.buf(src), ArgRef.scalar("float32", 1.0),
                                                        ArgRef.scalar("float32", 1.0), ArgRef.scalar("int32", n))))
    return ops, bufs, [(i - 1, i) for i in range(1, count)]


def chain_program(ops: list[Op], num_veus: int, place) -> Program:
    """Op i on vEU place(i), waiting for op i-1."""
    program = Program(ops, num_veus)
    for i in range(len(ops)):
        if i:
            program.wait_ops(TaskRef(i, 0), [i - 1])
        program.append(TaskRef(i, 0), place(i))
    return program


def handoff(count: int, reps: int) -> None:
    """Ping-pong of one-rTask ops between two vEUs (a hand-off per op) against the same chain on one vEU."""
    print(f"Ping-pong: {count} one-rTask ops alternating between 2 vEUs:")
    ops, bufs, deps = tiny_chain(count)
    pingpong, single = chain_program(ops, 2, lambda i: i % 2), chain_program(ops, 2, lambda i: 0)
    validate(pingpong, deps)
    t0 = time.perf_counter()
    vd = VDevice(ops, SOURCES, bufs, "gpu", catalog=CATALOG)
    print(f"  module build (NVRTC, {len(vd.gen.instantiations)} instantiations): {time.perf_counter() - t0:.2f} s")
    exe = PersistentExecutor(ops, [pingpong, single], SOURCES, bufs, vdevice=vd)
    got = fresh(bufs)
    exe.run(got)
    check(float(got["a" if count % 2 else "b"][0]) == float(count), f"ping-pong result = {count}")
    t_pp = PersistentExecutor(ops, [pingpong], SOURCES, bufs, vdevice=vd).time(reps)
    t_one = PersistentExecutor(ops, [single], SOURCES, bufs, vdevice=vd).time(reps)
    row("ping-pong, 2 vEUs", t_pp, count, "hand-off", "time / N")
    row("same chain on 1 vEU", t_one, count, "rTask", "no barriers")
    row("hand-off cost", t_pp - t_one, count, "hand-off", "(ping-pong - 1 vEU) / N")


def persistent_or_none(ops: list[Op], program: Program, bufs: dict[str, np.ndarray], what: str,
                       veus_per_sm: int = 1) -> PersistentExecutor | None:
    """The program loaded on a fresh vDevice, or None (said) when the GPU cannot keep its vEUs co-resident and it
    cannot be folded onto fewer (launch what fits); a fold is said too, and such a measurement is skipped."""
    try:
        vd = VDevice(ops, SOURCES, bufs, "gpu", catalog=CATALOG, veus_per_sm=veus_per_sm)
        exe = PersistentExecutor(ops, [program], SOURCES, bufs, vdevice=vd)
    except VDeviceError as exc:
        print(f"  [info] {what} refused: {exc}")
        return None
    if exe.notes:
        print(f"  [info] {what}: {exe.notes[0]} (not measured: not the program asked for)")
        return None
    return exe


def step_barrier(num_veus: int, rounds: int, reps: int, validate_it: bool) -> None:
    """Each round every vEU runs one rTask after all vEUs' rTasks of the previous round."""
    n = 32 * num_veus
    bufs = {"src": np.zeros(n, np.float32), "a": np.zeros(n, np.float32), "b": np.zeros(n, np.float32)}
    ops = []
    for r in range(rounds):
        src, dst = ("src" if r == 0 else ("a" if r % 2 else "b")), ("b" if r % 2 else "a")
        ops.append(Op(f"round{r}", affine_kernel(n, 32), (ArgRef.buf(dst), ArgRef.buf(src), ArgRef.scalar("float32", 1.0),
                                                          ArgRef.scalar("float32", 1.0), ArgRef.scalar("int32", n))))
    barrier, free = Program(ops, num_veus), Program(ops, num_veus)
    for r in range(rounds):
        for v in range(num_veus):
            if r:
                barrier.wait_ops(TaskRef(r, v), [r - 1])
            barrier.append(TaskRef(r, v), v)
            free.append(TaskRef(r, v), v)  # same work, vEU order only (each vEU reads its own slice)
    if validate_it:
        validate(barrier, [(r - 1, r) for r in range(1, rounds)])
    exe = persistent_or_none(ops, barrier, bufs, f"{num_veus} vEUs")
    if exe is None:
        return
    vd = exe.vd
    got = fresh(bufs)
    exe.run(got)
    check(bool(np.all(got["a" if rounds % 2 else "b"] == rounds)), f"step barrier over {num_veus} vEUs x {rounds} rounds")
    t_bar = exe.time(reps)
    t_free = PersistentExecutor(ops, [free], SOURCES, bufs, vdevice=vd).time(reps)
    row(f"step barrier, {num_veus} vEUs", t_bar, rounds, "round", "all vEUs wait for all")
    row(f"same rounds, no barrier, {num_veus} vEUs", t_free, rounds, "round", "")
    row(f"step-barrier cost, {num_veus} vEUs", t_bar - t_free, rounds, "barrier", "difference / rounds")


def bump_kernel(n: int, threads: int) -> KernelRef:
    """The smallest rTask: y = x + 1 over `threads` elements, whole warps, no barrier (the fast path)."""
    return KernelRef("elementwise.cu", "bump__rtask", None, (), (-(-n // threads),), (threads,))


def bump_op(name: str, n: int, threads: int, src: str, dst: str) -> Op:
    """One bump launch over n elements."""
    return Op(name, bump_kernel(n, threads), (ArgRef.buf(dst), ArgRef.buf(src), ArgRef.scalar("int32", n)))


def rtask_overhead(num_veus: int, per_veu: int, reps: int, veus_per_sm: int = 1) -> float:
    """Per-rTask time of tiny independent rTasks (32 threads, one element each), `per_veu` on each vEU, no
    barrier: (program - empty program) / per_veu. Returns µs per rTask."""
    n = 32 * num_veus * per_veu
    bufs = {"x": np.zeros(n, np.float32), "y": np.zeros(n, np.float32)}
    ops = [bump_op("bump", n, 32, "x", "y"), bump_op("nothing", 32, 32, "x", "y")]
    program, empty = Program(ops, num_veus), Program(ops, num_veus)
    for r in range(num_veus * per_veu):
        program.append(TaskRef(0, r), r % num_veus)
    program.append(TaskRef(1, 0), 0)
    empty.append(TaskRef(1, 0), 0)
    vd = VDevice(ops, SOURCES, bufs, "gpu", catalog=CATALOG, veus_per_sm=veus_per_sm)
    exe = PersistentExecutor(ops, [program], SOURCES, bufs, vdevice=vd)
    got = fresh(bufs)
    exe.run(got)
    check(bool(np.all(got["y"] == 1.0)), f"{num_veus} vEUs x {per_veu} tiny rTasks computed y = x + 1")
    t_full = exe.time(reps)
    t_empty = PersistentExecutor(ops, [empty], SOURCES, bufs, vdevice=vd).time(reps)
    row(f"per tiny rTask, {num_veus} vEU(s) x {per_veu}", t_full - t_empty, per_veu, "rTask",
        "(program - empty program) / rTasks per vEU; target <= 0.2 µs")
    return 1000.0 * (t_full - t_empty) / per_veu


def barrier_by_fan_in(fan_ins: list[int], reps: int) -> None:
    """Step barrier over F vEUs (every vEU waits for all F of the previous round: fan-in F on one counter) minus
    the same rounds without barriers, for each F; F = 1 is the ping-pong hand-off."""
    print("Barrier by fan-in:")
    for f in fan_ins:
        if f == 1:
            continue
        step_barrier(f, max(20, 4000 // f), reps, validate_it=False)


def veus_per_sm_bandwidth(sms: int, reps: int, n: int = 1 << 24, threads: int = 256) -> None:
    """One memory-bound op (y = x + 1 over n floats, 256-thread rTasks) on k vEUs per SM for k = 1..4 (the
    interpreter compiled with __launch_bounds__(256, k)): time and effective bandwidth (8 bytes per element)."""
    print("vEUs per SM:")
    bufs = {"x": np.zeros(n, np.float32), "y": np.zeros(n, np.float32)}
    ops = [bump_op("bump", n, threads, "x", "y")]
    for k in range(1, 5):
        num_veus = k * sms
        program = Program(ops, num_veus)
        for r in range(ops[0].kernel.rtasks):
            program.append(TaskRef(0, r), r % num_veus)
        exe = persistent_or_none(ops, program, bufs, f"{k} vEUs per SM", veus_per_sm=k)
        if exe is None:
            continue
        got = fresh(bufs)
        exe.run(got)
        check(bool(np.all(got["y"] == 1.0)), f"{k} vEU(s) per SM: y = x + 1")
        ms = exe.time(reps)
        row(f"y = x + 1 over {4 * n >> 20} MB, {k} vEU(s) per SM ({num_veus} vEUs)", ms, 1, "op",
            f"{8 * n / (ms * 1e-3) / 1e9:.0f} GB/s")


def side_by_side(num_veus: int, per_veu: int, reps: int) -> None:
    """Tiny 32-thread rTasks on 256-thread vEUs (a 256-thread op in the program sizes them), one after another
    against eight side by side (Program.side_by_side): per-rTask time of each, and the same results."""
    print("Small rTasks side by side:")
    n = 32 * num_veus * per_veu
    bufs = {"x": np.zeros(n, np.float32), "y": np.zeros(n, np.float32), "z": np.zeros(256, np.float32)}
    ops = [bump_op("bump", n, 32, "x", "y"), bump_op("wide", 256, 256, "x", "z")]
    vd = VDevice(ops, SOURCES, bufs, "gpu", catalog=CATALOG)
    times = {}
    for together in (False, True):
        program = Program(ops, num_veus, side_by_side=together)
        for r in range(num_veus * per_veu):
            program.append(TaskRef(0, r), r // per_veu)  # consecutive rTasks of the op on each vEU
        program.append(TaskRef(1, 0), 0)
        exe = PersistentExecutor(ops, [program], SOURCES, bufs, vdevice=vd)
        got = fresh(bufs)
        exe.run(got)
        check(bool(np.all(got["y"] == 1.0)), f"{num_veus} vEUs x {per_veu} rTasks, side by side={together}")
        times[together] = exe.time(reps)
        row(f"{per_veu} 32-thread rTasks per 256-thread vEU, {'8 side by side' if together else 'one at a time'}",
            times[together], per_veu, "rTask", f"{num_veus} vEUs")


# ---- 3. a chain of tiny ops three ways ----------------------------------------------------------------------


def chain_three_ways(count: int, reps: int) -> None:
    """Persistent (1 vEU; and 2 vEUs with barriers), op-by-op launches, the same launches in a CUDA Graph."""
    print(f"Chain of {count} tiny ops:")
    ops, bufs, deps = tiny_chain(count)
    vd = VDevice(ops, SOURCES, bufs, "gpu", catalog=CATALOG)
    one = PersistentExecutor(ops, [chain_program(ops, 1, lambda i: 0)], SOURCES, bufs, vdevice=vd)
    two = PersistentExecutor(ops, [chain_program(ops, 2, lambda i: i % 2)], SOURCES, bufs, vdevice=vd)
    by_op = OpByOpExecutor(ops, SOURCES, bufs, deps=deps, vdevice=vd)
    graph = GraphExecutor(ops, SOURCES, bufs, deps=deps, vdevice=vd)
    results = {}
    for name, exe in [("persistent-1vEU", one), ("persistent-2vEU", two), ("op-by-op", by_op), ("cuda-graph", graph)]:
        got = fresh(bufs)
        exe.run(got)
        results[name] = float(got["a" if count % 2 else "b"][0])
    check(all(v == float(count) for v in results.values()), f"all four executors compute {count}: {results}")
    row("persistent, 1 vEU", one.time(reps), count, "op", "one launch")
    row("persistent, 2 vEUs ping-pong", two.time(reps), count, "op", "one launch, a barrier per op")
    row("op-by-op launches", by_op.time(reps), count, "op", "RammerBase")
    row("CUDA Graph of those launches", graph.time(reps), count, "op", "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer hand-offs, rounds and repetitions")
    parser.add_argument("--table", type=Path, help="write the measurement table (Markdown) to this file")
    args = parser.parse_args()
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    print(f"device: {DEVICE}, {sms} SMs, CuPy {cupy.__version__}")
    reps = 5 if args.quick else 20
    dag_tests([("chain", 1, 2, 37, 10), ("chain", 12, 3, 100, 11), ("diamond", 13, 4, 64, 12),
               ("fan", 20, 8, 45, 13), ("random", 30, 5, 129, 14), ("random", 50, 8, 33, 15),
               ("random", 50, 64, 4099, 16), ("fan", 40, sms, 2048, 17)])
    race_and_watchdog()
    print("Per-rTask overhead:")
    rtask_overhead(1, 2000 if args.quick else 10_000, reps)
    rtask_overhead(sms, 200 if args.quick else 1000, reps)
    rtask_overhead(2 * sms, 100 if args.quick else 500, reps, veus_per_sm=2)
    handoff(1000 if args.quick else 10_000, reps)
    step_barrier(sms, 20 if args.quick else 100, reps, validate_it=not args.quick)
    barrier_by_fan_in([1, 16, 2 * sms, 3 * sms], reps)
    veus_per_sm_bandwidth(sms, reps)
    side_by_side(sms, 200 if args.quick else 1000, reps)
    chain_three_ways(1000, reps)
    table = "| measurement | ms per launch (median) | per item | note |\n|---|---|---|---|\n"
    table += "".join(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |\n" for r in ROWS)
    print("\n" + table)
    if args.table:
        args.table.write_text(f"device: {DEVICE}, {sms} SMs; `python tests/vdevice_gpu_bench.py`\n\n{table}")
    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) FAILED:\n  " + "\n  ".join(FAILURES))
        return 1
    print("\nall checks passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
