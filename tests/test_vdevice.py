"""vDevice: rPrograms (Append/Wait), the validator, the interpreter codegen and the executors on the CPU emulator.

Truths: numpy for every op, hand-derived wait lists and layout sizes, and the op-by-op executor (itself checked
against numpy) for bit-exact comparison with the persistent interpreter."""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import re

import numpy as np
import pytest

from vdevice.codegen import generate
from vdevice.executors import (GraphExecutor, OpByOpExecutor, PersistentExecutor, VDevice, VDeviceError,
                               topological_order)
from vdevice.program import (ArgRef, KernelRef, Op, Program, ProgramError, Run, TaskRef, Wait, plan_from_json,
                             plan_to_json, validate, validate_plan)

KERNELS = Path(__file__).parent / "vdevice_kernels"
SOURCES = {p.name: p.read_text() for p in sorted(KERNELS.glob("*.cu"))}
HAS_EMULATOR = importlib.util.find_spec("cuda_emu") is not None
needs_emulator = pytest.mark.skipif(not HAS_EMULATOR, reason="cuda_emu (the CPU emulator) is not available")

F32 = np.float32


def _ceil(a: int, b: int) -> int:
    return (a + b - 1) // b


# ---- the test rKernels and their numpy truths ---------------------------------------------------------------


def affine_kernel(n: int, b: int) -> KernelRef:
    return KernelRef("elementwise.cu", "affine__rtask", "affine__rt_shared", (b,), (_ceil(n, b),), (b,))


def add2_kernel(n: int, block: tuple[int, int]) -> KernelRef:
    threads = block[0] * block[1]
    return KernelRef("elementwise.cu", "add2__rtask", None, (), (_ceil(n, threads),), block, threads * 4)


def gather_kernel(n: int, b: int, taps: int) -> KernelRef:
    return KernelRef("gather.cu", "gather__rtask", "gather__rt_shared", (b, taps), (_ceil(n, b),), (b,))


def count_kernel(n: int, b: int) -> KernelRef:
    return KernelRef("count.cu", "count_pos__rtask", None, (b,), (_ceil(n, b),), (b,))


def slow_kernel(n: int) -> KernelRef:
    return KernelRef("elementwise.cu", "slow_copy__rtask", "slow_copy__rt_shared", (32,), (_ceil(n, 32),), (32,))


# Every instantiation the tests use: one generated module, one compile, for all programs below.
CATALOG = [affine_kernel(32, 32), affine_kernel(64, 64), add2_kernel(64, (16, 4)), gather_kernel(32, 32, 5),
           gather_kernel(64, 64, 3), slow_kernel(32), count_kernel(64, 32), count_kernel(64, 64)]


def ref_affine(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return x * F32(alpha) + F32(beta)


def ref_add2(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a * F32(0.5) + b


def ref_count(x: np.ndarray, b: int) -> np.ndarray:
    """count_pos: per block of b elements (padded with zeros), the positives and whether all |x| < 3."""
    pad = np.zeros(_ceil(x.size, b) * b, dtype=F32)
    pad[: x.size] = x
    blocks = pad.reshape(-1, b)
    positives = (blocks > 0).sum(axis=1).astype(F32) * F32(0.125)
    small = np.where(np.all(np.abs(blocks) < 3.0, axis=1), F32(1.0), F32(0.0))
    return ((blocks + positives[:, None]) + small[:, None]).reshape(-1)[: x.size]


def ref_gather(x: np.ndarray, taps: int, stride: int) -> np.ndarray:
    n = x.size
    i = np.arange(n, dtype=np.int64)
    acc = np.zeros(n, dtype=F32)
    for k in range(taps):
        acc = acc + x[(i * 7 + k * stride) % n]
    return x + acc


@dataclass
class Dag:
    """Ops writing fresh buffers (no buffer is written twice), their op-level edges and numpy truths."""

    n: int
    ops: list[Op] = field(default_factory=list)
    deps: list[tuple[int, int]] = field(default_factory=list)
    refs: list[Callable[[dict], np.ndarray]] = field(default_factory=list)
    producer: dict[str, int] = field(default_factory=dict)

    def add(self, op: Op, inputs: list[str], ref: Callable[[dict], np.ndarray]) -> str:
        out = op.args[0].buffer
        index = len(self.ops)
        self.ops.append(op)
        self.refs.append(ref)
        self.deps.extend((self.producer[b], index) for b in dict.fromkeys(inputs) if b in self.producer)
        self.producer[out] = index
        return out

    def unary(self, x: str, rng: np.random.Generator, slow_rounds: int = 3) -> str:
        n, out = self.n, f"t{len(self.ops)}"
        kind = rng.integers(4)
        if kind == 3:
            b = int(rng.choice([32, 64]))
            op = Op(out, count_kernel(n, b), (ArgRef.buf(out), ArgRef.buf(x), ArgRef.scalar("int32", n)))
            return self.add(op, [x], lambda bufs: ref_count(bufs[x], b))
        if kind == 0:
            b = int(rng.choice([32, 64]))
            alpha, beta = float(rng.uniform(-2, 2)), float(rng.uniform(-1, 1))
            op = Op(out, affine_kernel(n, b), (ArgRef.buf(out), ArgRef.buf(x), ArgRef.scalar("float32", alpha),
                                               ArgRef.scalar("float32", beta), ArgRef.scalar("int32", n)))
            return self.add(op, [x], lambda bufs: ref_affine(bufs[x], alpha, beta))
        if kind == 1:
            b, taps = [(32, 5), (64, 3)][int(rng.integers(2))]
            stride = int(rng.integers(1, 97))
            op = Op(out, gather_kernel(n, b, taps), (ArgRef.buf(out), ArgRef.buf(x), ArgRef.scalar("int32", n),
                                                    ArgRef.scalar("int32", stride)))
            return self.add(op, [x], lambda bufs: ref_gather(bufs[x], taps, stride))
        return self.slow(x, slow_rounds)

    def slow(self, x: str, rounds: int) -> str:
        n, out = self.n, f"t{len(self.ops)}"
        op = Op(out, slow_kernel(n), (ArgRef.buf(out), ArgRef.buf(x), ArgRef.scalar("int32", n),
                                      ArgRef.scalar("int32", rounds)))
        return self.add(op, [x], lambda bufs: bufs[x].copy())

    def binary(self, a: str, b: str, rng: np.random.Generator) -> str:
        n, out = self.n, f"t{len(self.ops)}"
        block = [(16, 4), (8, 8), (32, 3), (16, 2)][int(rng.integers(4))]
        op = Op(out, add2_kernel(n, block), (ArgRef.buf(out), ArgRef.buf(a), ArgRef.buf(b),
                                             ArgRef.scalar("int32", n)))
        return self.add(op, [a, b], lambda bufs: ref_add2(bufs[a], bufs[b]))

    def inputs(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        bufs = {"in0": rng.standard_normal(self.n).astype(F32), "in1": rng.standard_normal(self.n).astype(F32)}
        bufs.update({op.args[0].buffer: np.full(self.n, np.nan, dtype=F32) for op in self.ops})
        return bufs

    def reference(self, bufs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {k: v.copy() for k, v in bufs.items()}
        for index in topological_order(len(self.ops), self.deps):
            out[self.ops[index].args[0].buffer] = self.refs[index](out)
        return out


def make_dag(kind: str, num_ops: int, n: int, seed: int) -> Dag:
    """chain | diamond | fan (fan-out then a fan-in tree) | random, with exactly num_ops ops."""
    rng = np.random.default_rng(seed)
    dag = Dag(n)
    prev = "in0"
    if kind == "fan":
        root = dag.unary("in0", rng)
        level = [dag.unary(root, rng) for _ in range(min(max(1, (num_ops - 1) // 2), num_ops - 1))]
        while len(dag.ops) < num_ops:
            pair = len(level) >= 2
            level = level[2:] + [dag.binary(level[0], level[1], rng)] if pair else [dag.unary(level[0], rng)]
        return dag
    while len(dag.ops) < num_ops:
        left = num_ops - len(dag.ops)
        if kind == "chain":
            prev = dag.binary(prev, "in1", rng) if rng.random() < 0.2 else dag.unary(prev, rng)
        elif kind == "diamond" and left >= 4:
            top = dag.unary(prev, rng)
            prev = dag.binary(dag.unary(top, rng), dag.unary(top, rng), rng)
        elif kind == "diamond":
            prev = dag.unary(prev, rng)
        else:
            pool = ["in0", "in1", *dag.producer]
            a, b = (pool[int(i)] for i in rng.integers(len(pool), size=2))
            prev = dag.binary(a, b, rng) if rng.random() < 0.4 else dag.unary(a, rng)
    return dag


def schedule(dag: Dag, num_veus: int, seed: int, ops_subset: list[int] | None = None) -> Program:
    """The test scheduler: random vEU per rTask, each rTask waits for all rTasks of its op's producers."""
    rng = np.random.default_rng(seed)
    program = Program(dag.ops, num_veus)
    preds: dict[int, list[int]] = {}
    for p, c in dag.deps:
        preds.setdefault(c, []).append(p)
    chosen = set(ops_subset) if ops_subset is not None else None
    for index in topological_order(len(dag.ops), dag.deps):
        if chosen is not None and index not in chosen:
            continue
        for r in range(dag.ops[index].kernel.rtasks):
            task = TaskRef(index, r)
            program.wait(task, [TaskRef(p, q) for p in preds.get(index, []) if chosen is None or p in chosen
                                for q in range(dag.ops[p].kernel.rtasks)])
            program.append(task, int(rng.integers(num_veus)))
    return program


def assert_outputs(dag: Dag, got: dict[str, np.ndarray], want: dict[str, np.ndarray], exact: bool) -> None:
    for op in dag.ops:
        name = op.args[0].buffer
        if exact:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"buffer {name}")
        else:
            np.testing.assert_allclose(got[name], want[name], rtol=2e-6, atol=2e-6, err_msg=f"buffer {name}")


def fresh(bufs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in bufs.items()}


# ---- Program: Append / Wait ---------------------------------------------------------------------------------


def _ops(*grids: int) -> list[Op]:
    return [Op(f"op{i}", affine_kernel(32 * g, 32), (ArgRef.buf(f"b{i}"),)) for i, g in enumerate(grids)]


def test_wait_keeps_latest_per_veu_and_drops_ordered_ones():
    p = Program(_ops(4, 3), 3)
    for r, v in enumerate([0, 0, 1, 0]):
        p.append(TaskRef(0, r), v)
    p.wait(TaskRef(1, 0), [TaskRef(0, r) for r in range(4)])
    p.append(TaskRef(1, 0), 2)
    # vEU 0 ran rTasks 0, 1, 3 at orders 0, 1, 2; vEU 1 ran rTask 2 at order 0: latest per vEU only
    assert p.veus[2] == [Wait(((0, 2), (1, 0))), Run(TaskRef(1, 0))]
    p.wait(TaskRef(1, 1), [TaskRef(0, r) for r in range(4)])
    p.append(TaskRef(1, 1), 0)
    # on vEU 0 its own rTasks are ordered already; only vEU 1 is awaited
    assert p.veus[0][-2:] == [Wait(((1, 0),)), Run(TaskRef(1, 1))]
    p.wait(TaskRef(1, 2), [TaskRef(0, 0), TaskRef(0, 2)])
    p.append(TaskRef(1, 2), 2)
    # an earlier barrier on vEU 2 already covered these: no new barrier-rTask
    assert p.veus[2][-1] == Run(TaskRef(1, 2)) and len(p.veus[2]) == 3
    validate(p, [(0, 1)])
    # wait_ops(op) is wait(all rTasks of op)
    q = Program(_ops(4, 3), 3)
    for r, v in enumerate([0, 0, 1, 0]):
        q.append(TaskRef(0, r), v)
    q.wait_ops(TaskRef(1, 0), [0])
    q.append(TaskRef(1, 0), 2)
    assert q.veus[2] == [Wait(((0, 2), (1, 0))), Run(TaskRef(1, 0))]
    q.wait_ops(TaskRef(1, 1), [1])
    with pytest.raises(ProgramError, match="not all appended"):
        q.append(TaskRef(1, 1), 0)


@pytest.mark.parametrize("bad", ["unappended", "twice", "veu", "rtask", "late_wait"])
def test_append_wait_reject_bad_calls(bad):
    p = Program(_ops(2, 2), 2)
    p.append(TaskRef(0, 0), 0)
    with pytest.raises(ProgramError):
        if bad == "unappended":
            p.wait(TaskRef(1, 0), [TaskRef(0, 1)])
            p.append(TaskRef(1, 0), 1)
        elif bad == "twice":
            p.append(TaskRef(0, 0), 1)
        elif bad == "veu":
            p.append(TaskRef(0, 1), 2)
        elif bad == "rtask":
            p.append(TaskRef(0, 2), 0)
        else:
            p.wait(TaskRef(0, 0), [TaskRef(0, 1)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_json_round_trip(seed):
    dag = make_dag("random", 12, 77, seed)
    program = schedule(dag, 2 + seed, seed)
    again = Program.from_json(json.loads(json.dumps(program.to_json())))
    assert again.veus == program.veus and again.ops == program.ops and again.num_veus == program.num_veus
    half = len(dag.ops) // 2
    order = topological_order(len(dag.ops), dag.deps)
    plan = [schedule(dag, 3, seed, order[:half]), schedule(dag, 2, seed, order[half:])]
    back = plan_from_json(plan_to_json(plan))
    assert [p.veus for p in back] == [p.veus for p in plan] and back[0].ops == dag.ops


# ---- the validator ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,num_ops,veus,seed", [("chain", 9, 3, 0), ("diamond", 13, 4, 1), ("fan", 20, 8, 2),
                                                     ("random", 40, 5, 3)])
def test_validator_accepts_scheduled_programs(kind, num_ops, veus, seed):
    dag = make_dag(kind, num_ops, 100, seed)
    validate(schedule(dag, veus, seed), dag.deps)


def test_validator_follows_transitive_order():
    # A on vEU 0; B on vEU 1 waits for A; C on vEU 2 waits only for B: A -> C holds through B
    p = Program(_ops(1, 1, 1), 3)
    p.append(TaskRef(0, 0), 0)
    p.wait(TaskRef(1, 0), [TaskRef(0, 0)])
    p.append(TaskRef(1, 0), 1)
    p.wait(TaskRef(2, 0), [TaskRef(1, 0)])
    p.append(TaskRef(2, 0), 2)
    validate(p, [(0, 1), (1, 2), (0, 2)])


def _drop_needed_wait(program: Program, deps) -> Program:
    """Remove the first barrier-rTask whose removal breaks a dependency."""
    for v, instrs in enumerate(program.veus):
        for pc, instr in enumerate(instrs):
            if isinstance(instr, Wait):
                veus = [list(x) for x in program.veus]
                del veus[v][pc]
                candidate = Program(program.ops, program.num_veus, veus)
                try:
                    validate(candidate, deps)
                except ProgramError:
                    return candidate
    raise AssertionError("no barrier-rTask was needed")


def test_validator_rejects_missing_wait():
    dag = make_dag("chain", 6, 100, 4)
    program = schedule(dag, 3, 4)
    broken = _drop_needed_wait(program, dag.deps)
    with pytest.raises(ProgramError, match="dependency not honoured"):
        validate(broken, dag.deps)


def test_validator_rejects_task_run_twice_and_missing_task():
    dag = make_dag("chain", 3, 64, 5)
    program = schedule(dag, 2, 5)
    twice = [list(x) for x in program.veus]
    twice[1].append(Run(TaskRef(0, 0)))
    with pytest.raises(ProgramError, match="runs twice"):
        validate(Program(dag.ops, 2, twice), dag.deps)
    missing = [[i for i in x if i != Run(TaskRef(2, 0))] for x in program.veus]
    with pytest.raises(ProgramError, match="never run"):
        validate(Program(dag.ops, 2, missing), dag.deps)


def test_validator_rejects_wait_cycle_and_unreachable_wait():
    ops = _ops(1, 1)
    cycle = Program(ops, 2, [[Wait(((1, 0),)), Run(TaskRef(0, 0))], [Wait(((0, 0),)), Run(TaskRef(1, 0))]])
    with pytest.raises(ProgramError, match="wait cycle vEU 0 -> vEU 1 -> vEU 0"):
        validate(cycle, [])
    beyond = Program(ops, 2, [[Run(TaskRef(0, 0))], [Wait(((0, 3),)), Run(TaskRef(1, 0))]])
    with pytest.raises(ProgramError, match="never"):
        validate(beyond, [])


def test_validator_checks_plans():
    dag = make_dag("chain", 4, 64, 6)
    order = topological_order(4, dag.deps)
    first, second = schedule(dag, 2, 6, order[:2]), schedule(dag, 3, 6, order[2:])
    validate_plan([first, second], dag.deps)
    with pytest.raises(ProgramError, match="later program"):
        validate_plan([second, first], dag.deps)


# ---- codegen: code size follows distinct rKernels, not rTasks -----------------------------------------------


def test_codegen_text_independent_of_rtask_count_and_instantiations_once():
    small = [Op(f"a{i}", affine_kernel(100 * 32, 32), ()) for i in range(3)]
    large = [Op(f"a{i}", affine_kernel(100_000 * 32 // 3, 32), ()) for i in range(3)]
    gen_small, gen_large = generate(small, SOURCES), generate(large, SOURCES)
    assert gen_small.source == gen_large.source
    assert gen_small.source.count("vd::invoke<") == 1 and len(gen_small.instantiations) == 1
    mixed = generate([*small, Op("g", gather_kernel(64, 64, 3), ()), Op("h", affine_kernel(64, 64), ())], SOURCES)
    assert mixed.source.count("vd::invoke<") == 3 and mixed.op_kernel[0] == mixed.op_kernel[2]
    # a layout left out follows the converter's naming when the source defines it; add2 has none
    unnamed = KernelRef("elementwise.cu", "affine__rtask", None, (64,), (1,), (64,))
    plain = generate([Op("a", unnamed, ()), Op("b", add2_kernel(64, (8, 8)), ())], SOURCES)
    assert "vd::layout_bytes<vd_s0::affine__rt_shared<64>>()" in plain.source
    assert plain.source.count("vd::layout_bytes<") == 1


def test_codegen_rejects_missing_source_and_bad_arguments():
    with pytest.raises(ProgramError, match="not given"):
        generate([Op("a", KernelRef("nope.cu", "k__rtask"), ())], SOURCES)
    with pytest.raises(ProgramError):
        KernelRef("elementwise.cu", "affine__rtask", block=(32, 32, 2))
    with pytest.raises(ProgramError):
        ArgRef.scalar("complex128", 1.0)


# ---- executors on the CPU emulator --------------------------------------------------------------------------


def _vdevice(dag: Dag, bufs: dict[str, np.ndarray], veus_per_sm: int = 1) -> VDevice:
    return VDevice(dag.ops, SOURCES, bufs, "cpu", catalog=CATALOG, veus_per_sm=veus_per_sm)


@needs_emulator
@pytest.mark.parametrize("kind,num_ops,veus,n,seed,per_sm", [
    ("chain", 1, 2, 37, 10, 1), ("chain", 12, 3, 100, 11, 2), ("diamond", 13, 4, 64, 12, 3), ("fan", 20, 8, 45, 13, 4),
    ("random", 30, 5, 129, 14, 1), ("random", 50, 8, 33, 15, 2), ("random", 24, 1, 50, 16, 1),
])
def test_persistent_matches_op_by_op_and_numpy(kind, num_ops, veus, n, seed, per_sm):
    """Random DAGs on 1-8 vEUs, the interpreter built for 1-4 vEUs per SM (__launch_bounds__), every other one with
    small rTasks side by side: bit-exact against op by op, which matches numpy."""
    dag = make_dag(kind, num_ops, n, seed)
    program = schedule(dag, veus, seed)
    program.side_by_side = seed % 2 == 1
    validate(program, dag.deps)
    bufs = dag.inputs(seed)
    vd = _vdevice(dag, bufs, per_sm)
    assert re.search(rf"__launch_bounds__\(\d+, {per_sm}\)", vd.gen.source)
    by_op = fresh(bufs)
    OpByOpExecutor(dag.ops, SOURCES, by_op, deps=dag.deps, vdevice=vd).run(by_op)
    assert_outputs(dag, by_op, dag.reference(bufs), exact=False)
    persistent = fresh(bufs)
    PersistentExecutor(dag.ops, [program], SOURCES, persistent, vdevice=vd).run(persistent)
    assert_outputs(dag, persistent, by_op, exact=True)


@needs_emulator
def test_plan_of_two_programs():
    dag = make_dag("random", 16, 70, 20)
    order = topological_order(len(dag.ops), dag.deps)
    plan = [schedule(dag, 3, 20, order[:7]), schedule(dag, 6, 21, order[7:])]
    validate_plan(plan, dag.deps)
    bufs = dag.inputs(20)
    got = fresh(bufs)
    PersistentExecutor(dag.ops, plan, SOURCES, got, vdevice=_vdevice(dag, bufs)).run(got)
    assert_outputs(dag, got, dag.reference(bufs), exact=False)


def _producer_consumer(num_veus: int, n: int = 96) -> tuple[Dag, Program]:
    """A slow producer spread over vEUs 0..V-2, a gather consumer (reads across rTasks) on the last vEU."""
    dag = Dag(n)
    t0 = dag.slow("in0", rounds=200)
    dag.add(Op("t1", gather_kernel(n, 32, 5), (ArgRef.buf("t1"), ArgRef.buf(t0), ArgRef.scalar("int32", n),
                                                ArgRef.scalar("int32", 29))), [t0],
            lambda bufs: ref_gather(bufs[t0], 5, 29))
    program = Program(dag.ops, num_veus)
    for r in range(dag.ops[0].kernel.rtasks):
        program.append(TaskRef(0, r), r % (num_veus - 1))
    for r in range(dag.ops[1].kernel.rtasks):
        program.wait(TaskRef(1, r), [TaskRef(0, q) for q in range(dag.ops[0].kernel.rtasks)])
        program.append(TaskRef(1, r), num_veus - 1)
    return dag, program


@needs_emulator
@pytest.mark.parametrize("veus", [2, 4])
def test_removed_wait_breaks_the_result(veus):
    dag, program = _producer_consumer(veus)
    validate(program, dag.deps)
    bufs = dag.inputs(30)
    vd = _vdevice(dag, bufs)
    want = dag.reference(bufs)
    good = fresh(bufs)
    PersistentExecutor(dag.ops, [program], SOURCES, good, vdevice=vd).run(good)
    assert_outputs(dag, good, want, exact=False)
    without = Program(dag.ops, veus, [[i for i in x if not isinstance(i, Wait)] for x in program.veus])
    with pytest.raises(ProgramError, match="dependency not honoured"):
        validate(without, dag.deps)
    bad = fresh(bufs)
    try:
        PersistentExecutor(dag.ops, [without], SOURCES, bad, vdevice=vd).run(bad)
    except VDeviceError:
        return
    assert not np.array_equal(bad["t1"], want["t1"]), "the race did not show: the barrier did no work"


@needs_emulator
def test_repeated_runs_use_epochs_and_survive_counter_wrap():
    dag, program = _producer_consumer(3)
    bufs = dag.inputs(40)
    exe = PersistentExecutor(dag.ops, [program], SOURCES, bufs, vdevice=_vdevice(dag, bufs))
    for seed in (41, 42, 43):
        run_bufs = dag.inputs(seed)
        got = fresh(run_bufs)
        exe.run(got)  # steps from the previous run already satisfy a non-epoch target: stale waits would race
        assert_outputs(dag, got, dag.reference(run_bufs), exact=False)
    loaded = exe.loaded[0]
    loaded.runs = (2**32 - 1) // loaded.tables.max_count - 1  # next epoch would overflow 32 bits
    got = fresh(bufs)
    exe.run(got)
    assert loaded.runs == 1
    assert_outputs(dag, got, dag.reference(bufs), exact=False)


@needs_emulator
def test_watchdog_names_the_stuck_wait():
    dag = Dag(64)
    dag.add(Op("t0", affine_kernel(64, 32), (ArgRef.buf("t0"), ArgRef.buf("in0"), ArgRef.scalar("float32", 1.0),
                                             ArgRef.scalar("float32", 0.0), ArgRef.scalar("int32", 64))),
            ["in0"], lambda bufs: bufs["in0"].copy())  # two rTasks
    program = Program(dag.ops, 2, [[Run(TaskRef(0, 0))], [Wait(((0, 4),)), Run(TaskRef(0, 1))]])
    with pytest.raises(ProgramError):
        validate(program, dag.deps)
    bufs = dag.inputs(50)
    exe = PersistentExecutor(dag.ops, [program], SOURCES, bufs, watchdog=300, vdevice=_vdevice(dag, bufs))
    with pytest.raises(VDeviceError) as info:
        exe.run(fresh(bufs))
    msg = str(info.value)
    assert "vEU 1 stuck at instruction 0" in msg and "rTask 1 of op 't0'" in msg
    assert "waiting for vEU 0" in msg and "step 5" in msg and "it had finished 1" in msg
    cycle = Program(dag.ops, 2, [[Wait(((1, 0),)), Run(TaskRef(0, 0))], [Wait(((0, 0),)), Run(TaskRef(0, 1))]])
    with pytest.raises(VDeviceError, match="vDevice watchdog: vEU [01] stuck"):
        PersistentExecutor(dag.ops, [cycle], SOURCES, bufs, watchdog=300, vdevice=exe.vd).run(fresh(bufs))


@needs_emulator
def test_layout_sizes_and_shared_memory_per_veu():
    dag = Dag(64)
    dag.unary("in0", np.random.default_rng(1))
    bufs = dag.inputs(1)
    vd = _vdevice(dag, bufs)
    sizes = {inst.rtask_expr.split("::")[1]: int(vd.layout_sizes[k + 1]) for k, inst in enumerate(vd.gen.instantiations)}
    # float[B] rounded to 16; gather: float[B] + int = 4B + 4 -> 16; add2 and count_pos have no static shared memory
    assert sizes == {"affine__rtask<32>": 128, "affine__rtask<64>": 256, "add2__rtask": 0,
                     "gather__rtask<32, 5>": 144, "gather__rtask<64, 3>": 272, "slow_copy__rtask<32>": 128,
                     "count_pos__rtask<32>": 0, "count_pos__rtask<64>": 0}
    ops = [Op("a", add2_kernel(64, (16, 4)), ()), Op("g", gather_kernel(64, 64, 3), ())]
    program = Program(ops, 1)
    program.append(TaskRef(0, 0), 0)
    program.append(TaskRef(1, 0), 0)
    exe = PersistentExecutor(ops, [program], SOURCES, {}, vdevice=VDevice(ops, SOURCES, {}, catalog=CATALOG))
    # add2 with 64 threads: 256 dynamic bytes, no layout; gather<64,3>: layout 272 -> control block at 272
    assert exe.loaded[0].ctl_offset == 272 and exe.loaded[0].tables.threads == 64


@needs_emulator
def test_executors_reject_bad_input():
    dag = make_dag("chain", 2, 32, 60)
    bufs = dag.inputs(60)
    vd = _vdevice(dag, bufs)
    with pytest.raises(VDeviceError, match="buffers not given"):
        VDevice(dag.ops, SOURCES, {"in0": bufs["in0"]}, catalog=CATALOG)
    with pytest.raises(VDeviceError, match="gpu backend"):
        GraphExecutor(dag.ops, SOURCES, bufs, vdevice=vd)
    with pytest.raises(VDeviceError, match="unknown backend"):
        VDevice(dag.ops, SOURCES, bufs, "tpu")
    with pytest.raises(VDeviceError, match="C-contiguous"):
        strided = fresh(bufs)
        strided["in0"] = np.zeros(2 * dag.n, dtype=F32)[::2]
        OpByOpExecutor(dag.ops, SOURCES, bufs, vdevice=vd).run(strided)


# ---- converted corpus kernels (converter output, not hand-written) ------------------------------------------

CORPUS = Path(__file__).resolve().parent.parent / "kernel_corpus" / "legacy"


def _corpus_dag(rows: int, cols: int) -> tuple[list[Op], list[tuple[int, int]], list[tuple[str, tuple, tuple, tuple, list]]]:
    """relu -> block-row softmax -> add x -> warp-row softmax, as vdevice ops and as legacy launches."""
    n = rows * cols
    launches = [  # (file, kernel, template args, grid, block, args)
        ("elementwise.cu", "unary", (0, 128), (_ceil(n, 128),), (128,), ["x", "t0", ("int32", n), ("float32", 0.0),
                                                                          ("float32", 0.0)]),
        ("reduce.cu", "softmax_rows", (128, 1, 0), (rows,), (128,), ["t0", "t1", ("int32", rows), ("int32", cols)]),
        ("elementwise.cu", "binary_same", (0, 128), (_ceil(_ceil(n, 4), 128),), (128,), ["t1", "x", "t2", ("int32", n)]),
        ("reduce.cu", "softmax_rows", (32, 4, 0), (_ceil(rows, 4),), (32, 4), ["t2", "t3", ("int32", rows), ("int32", cols)]),
    ]
    ops = [Op(f"op{i}", KernelRef(f, f"{k}__rtask", None, t, g, b),
              tuple(ArgRef.scalar(*a) if isinstance(a, tuple) else ArgRef.buf(a) for a in args))
           for i, (f, k, t, g, b, args) in enumerate(launches)]
    return ops, [(0, 1), (1, 2), (2, 3)], launches


def _np_softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@needs_emulator
@pytest.mark.parametrize("rows,cols,veus,seed", [(5, 100, 3, 70), (9, 33, 4, 71)])
def test_converted_corpus_kernels_match_legacy(rows, cols, veus, seed):
    convert = pytest.importorskip("converter.convert")
    from cuda_emu import CpuModule

    legacy = {f: (CORPUS / f).read_text() for f in ("elementwise.cu", "reduce.cu")}
    converted = {f: convert.convert_source(text, f).output for f, text in legacy.items()}
    ops, deps, launches = _corpus_dag(rows, cols)
    rng = np.random.default_rng(seed)
    bufs = {"x": rng.standard_normal(rows * cols).astype(F32), **{f"t{i}": np.zeros(rows * cols, F32) for i in range(4)}}
    # truth 1: the legacy kernels themselves, one launch each
    want = fresh(bufs)
    for f, k, t, g, b, args in launches:
        expr = f"{k}<{', '.join(map(str, t))}>"
        module = CpuModule(legacy[f], [expr], name=f)
        module.launch(expr, g, b, 0, [want[a] if isinstance(a, str) else np.dtype(a[0]).type(a[1]) for a in args])
    # truth 2: numpy
    x = bufs["x"].reshape(rows, cols)
    ref = _np_softmax(_np_softmax(np.maximum(x, 0)) + x)
    np.testing.assert_allclose(want["t3"].reshape(rows, cols), ref, rtol=1e-5, atol=1e-6)
    program = Program(ops, veus)
    order_rng = np.random.default_rng(seed)
    for i, op in enumerate(ops):
        for r in range(op.kernel.rtasks):
            if i:
                program.wait_ops(TaskRef(i, r), [i - 1])
            program.append(TaskRef(i, r), int(order_rng.integers(veus)))
    validate(program, deps)
    vd = VDevice(ops, converted, bufs)
    by_op, persistent = fresh(bufs), fresh(bufs)
    OpByOpExecutor(ops, converted, by_op, deps=deps, vdevice=vd).run(by_op)
    PersistentExecutor(ops, [program], converted, persistent, vdevice=vd).run(persistent)
    for name in ("t0", "t1", "t2", "t3"):
        np.testing.assert_array_equal(by_op[name], want[name], err_msg=f"op-by-op {name}")
        np.testing.assert_array_equal(persistent[name], want[name], err_msg=f"persistent {name}")


def test_table_records_are_described_once():
    """The packed rows follow the record's field order, a missing or unknown field is an error, and the generated
    C struct declares the same fields in the same order, 16-byte aligned in one 32-byte row (two 128-bit loads)."""
    from vdevice.tables import INSTR, VD_NAMED, c_declarations, pack_block, pack_grid_yz
    row = {"code": 3 | VD_NAMED, "a": 7, "b": 2, "publish": 0, "grid_x": 100_000, "grid_yz": pack_grid_yz(3, 65535),
           "block": pack_block(1024, 1, 64), "layout_offset": 48}
    table = INSTR.pack([row, dict(row, code=5)])
    assert table.dtype == np.uint32 and table.shape == (2, len(INSTR.fields)) and table.nbytes == 64
    assert [int(table[0, INSTR.column(k)]) for k in row] == list(row.values())
    assert int(table[1, INSTR.column("code")]) == 5 and INSTR.pack([]).shape == (1, len(INSTR.fields))
    grid_yz, block = int(table[0, INSTR.column("grid_yz")]), int(table[0, INSTR.column("block")])
    assert (grid_yz & 0xFFFF, grid_yz >> 16) == (3, 65535)
    assert (block & 2047, (block >> 11) & 2047, block >> 22) == (1024, 1, 64)
    with pytest.raises(ValueError):
        pack_block(32, 32, 65)
    with pytest.raises(ValueError):
        pack_grid_yz(65536, 1)
    with pytest.raises(KeyError):
        INSTR.pack([{k: v for k, v in row.items() if k != "grid_x"}])
    with pytest.raises(KeyError, match="no field"):
        INSTR.pack([dict(row, bogus=1)])
    decl = c_declarations()
    start = decl.index("struct alignas(16) Instr")
    fields = re.findall(r"unsigned (\w+);", decl[start:decl.index("};", start)])
    assert fields == list(INSTR.names) and "sizeof(Instr) == 32" in decl


# ---- barriers: counters per awaited group, publish only what is awaited -----------------------------------------


def _implied_after(program: Program, v: int, pc: int) -> np.ndarray:
    """Finished-count per vEU that a wait at (v, pc) implies, by the vector clocks of the validator's simulation
    (an independent derivation: transitive knowledge, not only the wait's own targets)."""
    from vdevice.program import simulate
    clocks = simulate(program)
    order = sum(isinstance(i, Run) for i in program.veus[v][:pc])
    return clocks.before(v, order)


@pytest.mark.parametrize("kind,num_ops,veus,seed", [("chain", 9, 3, 0), ("diamond", 13, 4, 1), ("fan", 20, 8, 2),
                                                     ("random", 40, 5, 3), ("random", 30, 7, 8)])
def test_counters_serve_each_wait_exactly(kind, num_ops, veus, seed):
    """Every wait's counters cover its targets, every member of a polled counter is implied by the wait (so no
    dependency is added, no deadlock), each awaited rTask publishes to exactly one counter and no other rTask
    publishes at all."""
    from vdevice.counters import group_waits
    dag = make_dag(kind, num_ops, 100, seed)
    program = schedule(dag, veus, seed)
    counters = group_waits(program)
    waits = [(v, pc, i) for v, instrs in enumerate(program.veus) for pc, i in enumerate(instrs) if isinstance(i, Wait)]
    awaited = {t for _, _, w in waits for t in w.targets}
    assert set(counters.of_step) == awaited
    assert sorted(s for m in counters.members for s in m) == sorted(awaited)
    for (v, pc, w), polled in zip(waits, counters.waits):
        implied = _implied_after(program, v, pc)
        for u, k in w.targets:
            assert counters.of_step[(u, k)] in polled
        for c in polled:
            assert all(k < implied[u] for u, k in counters.members[c]), f"wait at vEU {v} pc {pc} gains a dependency"
    # the test scheduler waits for every rTask of each producer: one counter per awaited op, whatever the fan-in
    ops_awaited = {program.runs(u)[k].op for u, k in awaited}
    assert len(counters.members) >= len(ops_awaited)


def test_counters_fan_in_independent_and_split_for_partial_waits():
    """A consumer on every vEU waiting for an op spread over all vEUs polls one counter (not one per vEU); a wait
    for only part of an op gets a counter of its own part."""
    from vdevice.counters import group_waits
    veus = 16
    ops = _ops(veus, veus, 1)
    p = Program(ops, veus)
    for r in range(veus):
        p.append(TaskRef(0, r), r)
    for r in range(veus):
        p.wait_ops(TaskRef(1, r), [0])
        p.append(TaskRef(1, r), r)
    p.wait(TaskRef(2, 0), [TaskRef(1, 0), TaskRef(1, 1)])  # two of op 1's sixteen rTasks
    p.append(TaskRef(2, 0), 5)
    c = group_waits(p)
    waits = [(v, i) for v in range(veus) for i in p.veus[v] if isinstance(i, Wait)]
    partial_at = waits.index((5, p.veus[5][-2]))
    full = [k for k in range(len(waits)) if k != partial_at]
    assert len(waits) == veus + 1 and all(len(waits[k][1].targets) == veus - 1 for k in full)
    assert {c.waits[k] for k in full} == {(c.of_step[(0, 0)],)}  # one counter, polled by all sixteen
    assert len(c.members[c.of_step[(0, 0)]]) == veus  # all of op 0: each consumer's own vEU is implied
    partial = c.waits[partial_at]
    assert len(partial) == 1 and sorted(c.members[partial[0]]) == [(0, 1), (1, 1)]
    validate(p, [(0, 1)])  # op 2 waits for part of op 1 only: no op-level edge


@needs_emulator
@pytest.mark.parametrize("veus", [2, 3])
def test_removed_publish_is_caught(veus):
    """The producer's rTasks publish; with one awaited rTask's publish removed from the tables the consumer never
    passes its barrier and the watchdog names that rTask."""
    from vdevice.tables import INSTR
    dag, program = _producer_consumer(veus)
    bufs = dag.inputs(31)
    exe = PersistentExecutor(dag.ops, [program], SOURCES, bufs, vdevice=_vdevice(dag, bufs))
    ld = exe.loaded[0]
    publish = ld.device["instr"][:, INSTR.column("publish")]
    published = np.flatnonzero(publish)
    runs_total = sum(program.steps(v) for v in range(veus))
    # only the last producer rTask of each producer vEU is awaited (the consumer's barrier covers the rest)
    assert len(published) == veus - 1 < runs_total
    good = fresh(bufs)
    exe.run(good)
    np.testing.assert_allclose(good["t1"], dag.reference(bufs)["t1"], rtol=2e-6, atol=2e-6)
    victim = int(published[-1])
    u = int(np.searchsorted(ld.tables.veu_begin, victim, side="right")) - 1
    publish[victim] = 0
    exe.watchdog = 20_000  # polls: ample for the slow producer, short for a wait that can never pass
    with pytest.raises(VDeviceError) as info:
        exe.run(fresh(bufs))
    last = program.runs(u)[-1]
    assert f"rTask {last.rtask} of op 't0' on vEU {u}" in str(info.value)
    assert "a publish is missing" in str(info.value)


# ---- occupancy: vEUs per SM from ptxas' figures ------------------------------------------------------------------


def test_blocks_per_sm_matches_the_documented_occupancy():
    """The CUDA C++ Best Practices Guide's worked example (compute capability 7.0: 37 registers per thread give
    twelve 128-thread blocks but only four 320-thread blocks per SM) and H100 figures from DESIGN.md (the interpreter
    at 79-80 registers, 256 threads: 3 per SM)."""
    import dataclasses

    from vdevice.occupancy import blocks_per_sm
    from vdevice.target import H100 as SM90
    sm70 = dataclasses.replace(SM90, name="sm_70", arch="sm_70", sms=80, smem_per_sm=96 * 1024,
                               smem_per_block=96 * 1024, smem_reserved_per_block=0, smem_alloc_unit=256)
    assert blocks_per_sm(128, 37, 0, sm70).blocks == 12
    assert blocks_per_sm(320, 37, 0, sm70).blocks == 4
    assert blocks_per_sm(256, 80, 4096, SM90).blocks == 3 and blocks_per_sm(256, 80, 0).limit == "registers"
    assert blocks_per_sm(256, 95, 0).blocks == 2
    assert blocks_per_sm(32, 16, 0).blocks == 32 and blocks_per_sm(32, 16, 0).limit == "blocks"
    assert blocks_per_sm(1024, 32, 0).blocks == 2 and blocks_per_sm(1024, 32, 0).limit == "threads"
    big = blocks_per_sm(128, 32, 100 * 1024)  # 100 KB + 1 KB reserved per block in 228 KB
    assert big.blocks == 2 and big.limit == "shared memory"
    assert blocks_per_sm(128, 32, 228 * 1024).blocks == 0 and blocks_per_sm(1024, 128, 0).blocks == 0


@pytest.mark.skipif(not importlib.util.find_spec("toolchain.nvcc") or
                    not __import__("toolchain.nvcc").nvcc.find_nvcc(), reason="nvcc is not installed")
def test_launch_bounds_choice_from_ptxas():
    """The generated interpreter compiled by nvcc under __launch_bounds__(threads, k) for k = 1..4: the chosen k
    spills nothing, and ptxas' registers at that k let k vEUs share an SM by the occupancy arithmetic."""
    from vdevice.occupancy import blocks_per_sm, choose_veus_per_sm, interpreter_usage
    ops = [Op("g", gather_kernel(256, 64, 3), ()), Op("a", add2_kernel(256, (32, 8)), ())]
    seen = {}

    def usage(k: int):
        gen = generate(ops, SOURCES, veus_per_sm=k)
        assert f"__launch_bounds__(256, {k})" in gen.source
        seen[k] = interpreter_usage(gen.source, gen.include_dirs)
        return seen[k]
    choice = choose_veus_per_sm(usage, 256, 4096)
    chosen = seen[choice.veus_per_sm]
    assert chosen.spill_bytes == 0 and blocks_per_sm(256, chosen.registers, 4096).blocks >= choice.veus_per_sm
    assert all(seen[k].spill_bytes or blocks_per_sm(256, seen[k].registers, 4096).blocks < k
               for k in seen if k > choice.veus_per_sm)
    assert choice.veus_per_sm >= 2  # a small interpreter: at least two 256-thread vEUs per SM


# ---- SASS: converted inner loops against the legacy ones (sm_90) -------------------------------------------------


def _nvrtc_missing() -> str | None:
    """Why NVRTC or cuobjdump cannot run here, or None."""
    from vdevice.nvrtc import available
    from toolchain.sass import find_cuobjdump
    ok, why = available()
    if not ok:
        return f"{why} (pip install .[nvrtc])"
    if find_cuobjdump() is None:
        return "cuobjdump is not installed (pip install .[sass])"
    return None


def _runtime_sass(source: str, include_dirs, names=()) -> tuple[dict, str]:
    """A generated module compiled as the GPU runtime compiles it (NVRTC, runtime_options, plus -Xptxas -v for the
    figures) and disassembled: (functions, ptxas log). The interpreter's SASS is what runs, so it is read from here;
    the header gives nvcc a different (weaker) pointer promise, vdevice_runtime.cuh's arg()."""
    from toolchain.sass import disassemble
    from vdevice.gpu import runtime_options
    from vdevice.nvrtc import compile_cubin
    out = compile_cubin(source, [*runtime_options("sm_90", include_dirs), "-Xptxas", "-v"], names)
    return disassemble(out.cubin), out.log


SASS_CASES = [  # legacy file, kernel, template arguments, grid, block: the launches the full-size zoo builds use
    ("rnn.cu", "lstm_cell_fused", (8, 4, 256), (32,), (256,)),
    ("gemm.cu", "gemm_tiled", (16, True, 0), (64, 7), (16, 16)),
    ("conv.cu", "conv_implicit_gemm", (16, True, False), (64, 16), (16, 16)),
]


@pytest.mark.slow
@pytest.mark.skipif(_nvrtc_missing() is not None, reason=str(_nvrtc_missing()))
@pytest.mark.parametrize("source,kernel,targs,grid,block", SASS_CASES, ids=[c[1] for c in SASS_CASES])
def test_converted_inner_loop_matches_legacy_sass(source, kernel, targs, grid, block):
    """The legacy kernel, its converted rKernel run alone (the plain wrapper) and inside the interpreter, compiled for
    sm_90: the hottest inner loop keeps the legacy count of 128-bit shared loads and of global (not generic) loads
    per FFMA, issues at most 10% more instructions per FFMA, and nothing spills."""
    from converter.convert import convert_source
    from toolchain.cxx import template_arg_text
    from toolchain.ptxas import parse_ptxas
    from vdevice import RUNTIME_INCLUDE
    from toolchain.sass import find_function, hottest_loop

    legacy = (CORPUS / source).read_text()
    take = [f"{kernel}<{', '.join(template_arg_text(a) for a in targs)}>"]  # NVRTC instantiates it by name
    converted = convert_source(legacy, source).output
    variants = {"legacy": (legacy, [str(CORPUS)], kernel, take),
                "alone": (converted, [str(RUNTIME_INCLUDE), str(CORPUS)], kernel, take)}
    gen = generate([Op("x", KernelRef(source, f"{kernel}__rtask", None, targs, grid, block), ())], {source: converted})
    variants["interpreter"] = (gen.source, [*gen.include_dirs, str(CORPUS)], "vd_interpreter", [])
    loops = {}
    for name, (text, dirs, fn, names) in variants.items():
        functions, log = _runtime_sass(text, dirs, names)
        loops[name] = hottest_loop(find_function(functions, fn))
        spills = {k: e["spill_stores"] + e["spill_loads"] for k, e in parse_ptxas(log).items() if fn in k}
        assert spills and not any(spills.values()), f"{name}: spills {spills}"
    want = loops["legacy"]
    assert want is not None and want.ffma > 0
    for name in ("alone", "interpreter"):
        got = loops[name]
        assert got is not None, f"{name}: no loop"
        ratio = got.ffma / want.ffma  # the same loop, possibly unrolled differently
        assert got.lds128 == pytest.approx(want.lds128 * ratio), f"{name}: {got} vs legacy {want}"
        assert got.global_loads == pytest.approx(want.global_loads * ratio), f"{name}: {got} vs legacy {want}"
        assert got.generic_loads <= want.generic_loads * ratio, f"{name}: generic loads {got} vs legacy {want}"
        assert got.per_ffma <= 1.10 * want.per_ffma, f"{name}: {got.per_ffma:.2f} instructions per FFMA vs " \
                                                      f"legacy {want.per_ffma:.2f}"


# ---- whole programs under the emulator's sanitizers -----------------------------------------------------------
@needs_emulator
def test_sanitized_program_runs_clean_and_catches_an_out_of_bounds_rtask():
    """A persistent program under memcheck/racecheck/synccheck: a correct one gives the numpy result with no report;
    an op whose element count exceeds its buffers (n = 64 over 40-element buffers) is reported by name."""
    from cuda_emu import EmuError
    args = lambda n: (ArgRef.buf("y"), ArgRef.buf("x"), ArgRef.scalar("float32", 2.0),  # noqa: E731
                      ArgRef.scalar("float32", 1.0), ArgRef.scalar("int32", n))
    sanitize = ("memcheck", "racecheck", "synccheck")
    for n, size in ((64, 64), (64, 40)):
        ops = [Op("t0", affine_kernel(64, 32), args(n))]
        program = Program(ops, 2, [[Run(TaskRef(0, 0))], [Run(TaskRef(0, 1))]])
        x = np.arange(size, dtype=F32)
        bufs = {"x": x, "y": np.zeros(size, F32)}
        vd = VDevice(ops, SOURCES, bufs, "cpu", catalog=CATALOG, sanitize=sanitize)
        exe = PersistentExecutor(ops, [program], SOURCES, {}, vdevice=vd)
        out = {"x": x.copy(), "y": np.zeros(size, F32)}
        if size == n:
            exe.run(out)
            assert np.array_equal(out["y"], ref_affine(x, 2.0, 1.0))
        else:
            with pytest.raises(VDeviceError) as info:
                exe.run(out)
            assert isinstance(info.value.__cause__, EmuError)
            assert re.search(r"memcheck: .*out-of-bounds read of 4 bytes at x\[\+(4\d|5\d|6[0-3])\] "
                             r"\(global buffer 'x', 40 elements\) at \S*elementwise.cu:\d+", str(info.value))



@needs_emulator
@pytest.mark.parametrize("veus,seed", [(2, 5), (3, 6)])
def test_converted_wide_tile_kernels_in_the_interpreter(veus, seed):
    """rTasks with tiles of 64 and of 128 threads interleaved on the same vEUs of the persistent interpreter (the
    tiles' barrier words are cleared once when a vEU starts and left clear by every sync) match the legacy kernels
    run one launch each on the emulator, bit for bit."""
    convert = pytest.importorskip("converter.convert")
    from cuda_emu import CpuModule

    path = Path(__file__).parent / "real_code_kernels" / "wide_tiles" / "tile_stats.cu"
    legacy = path.read_text()
    converted = {"tile_stats.cu": convert.convert_source(legacy, str(path)).output}
    rng = np.random.default_rng(seed)
    n = 768
    bufs = {"in": rng.uniform(-1, 1, n).astype(F32), "keys": rng.integers(0, 100, n).astype(np.int32)}
    outs = [("sums", F32), ("maxes", np.int32), ("scans", np.int32), ("flags", np.int32), ("rev", F32)]
    shapes = [((256, 64), 3, 256), ((128, 128), 6, 128)]  # (template args, grid, block)
    for k, ((_, tile), _, _) in enumerate(shapes):
        sizes = {"sums": n // tile, "maxes": n // tile, "scans": 2 * n, "flags": n, "rev": n}
        bufs.update({f"{name}{k}": np.zeros(sizes[name], dt) for name, dt in outs})
    ops = [Op(f"op{k}", KernelRef("tile_stats.cu", "tile_stats__rtask", None, t, (g,), (b,)),
              (ArgRef.buf("in"), ArgRef.buf("keys"), *(ArgRef.buf(f"{name}{k}") for name, _ in outs)))
           for k, (t, g, b) in enumerate(shapes)]
    want = fresh(bufs)
    for k, (t, g, b) in enumerate(shapes):
        expr = f"tile_stats<{t[0]}, {t[1]}>"
        CpuModule(legacy, [expr], name="tile_stats.cu").launch(
            expr, g, b, 0, [want["in"], want["keys"], *(want[f"{name}{k}"] for name, _ in outs)])
    program = Program(ops, veus)
    for r in range(6):  # interleaved: both tile sizes on every vEU
        for i, op in enumerate(ops):
            if r < op.kernel.rtasks:
                program.append(TaskRef(i, r), int(rng.integers(veus)))
    validate(program, [])
    got = fresh(bufs)
    PersistentExecutor(ops, [program], converted, got, vdevice=VDevice(ops, converted, bufs)).run(got)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


# ---- issue 28: the vEUs per SM from the module the GPU runtime loads (NVRTC, the runtime's options) -----------------


def _resource_usage(cubin: bytes, tmp_path: Path) -> dict[str, dict[str, int]]:
    """cuobjdump --dump-resource-usage of a CUBIN: mangled function -> {REG, STACK, SHARED, LOCAL, ...}."""
    import subprocess
    from toolchain.sass import find_cuobjdump
    path = tmp_path / "m.cubin"
    path.write_bytes(cubin)
    text = subprocess.run([str(find_cuobjdump()), "--dump-resource-usage", str(path)], capture_output=True,
                          text=True, check=True, timeout=120).stdout
    out: dict[str, dict[str, int]] = {}
    for name, body in re.findall(r"Function (\S+):\s*\n\s*(.*)", text):
        out[name] = {k: int(v) for k, v in re.findall(r"(\w+)(?:\[\d+\])?:(\d+)", body)}
    return out


@pytest.mark.skipif(_nvrtc_missing() is not None, reason=str(_nvrtc_missing()))
@pytest.mark.parametrize("per_sm", [1, 3])
def test_build_figures_are_those_of_the_runtimes_module(per_sm, tmp_path):
    """The interpreter compiled as the GPU runtime compiles it (vdevice.nvrtc with runtime_options, no extra flag):
    cuobjdump's registers and stack of that CUBIN are what the build's sizing reports (nvrtc_usage, which adds
    -Xptxas -v to read them), and every kernel name the executors launch resolves to a function of the CUBIN."""
    from vdevice.gpu import runtime_options
    from vdevice.nvrtc import compile_cubin
    from vdevice.occupancy import interpreter_usage, nvrtc_usage
    ops = [Op("g", gather_kernel(256, 64, 3), ()), Op("a", add2_kernel(256, (32, 8)), ()),
           Op("c", count_kernel(128, 64), ())]
    gen = generate(ops, SOURCES, veus_per_sm=per_sm)
    runtime = compile_cubin(gen.source, runtime_options("sm_90", gen.include_dirs), gen.kernel_names)
    usage = _resource_usage(runtime.cubin, tmp_path)
    assert set(runtime.lowered.values()) <= set(usage)
    interp = usage[runtime.lowered["vd_interpreter"]]
    figures = nvrtc_usage(gen.source, gen.include_dirs)
    assert figures.registers == interp["REG"] and figures.compiler.startswith("NVRTC")
    assert figures.spill_bytes == 0 and interp["STACK"] == 0 and interp["LOCAL"] == 0
    assert interpreter_usage(gen.source, gen.include_dirs) == figures  # the build's path takes NVRTC when present


@pytest.mark.skipif(_nvrtc_missing() is not None, reason=str(_nvrtc_missing()))
def test_runtime_module_compiles_through_the_cache(tmp_path, monkeypatch):
    """vdevice.gpu.compile_module, the path every GPU build loads its interpreter by (no GPU needed: NVRTC and the
    toolchain cache): the CUBIN holds every kernel the executors launch, and a second compile is the cached file.
    On the H100 of 2026-11-27 every build failed here first (its cache part was not registered): no CPU test had
    gone through it."""
    from vdevice.gpu import compile_module
    monkeypatch.setenv("RAMMER_CACHE", str(tmp_path / "cache"))
    gen = generate([Op("a", add2_kernel(256, (32, 8)), ())], SOURCES)
    cubin, lowered = compile_module(gen.source, gen.kernel_names, gen.include_dirs, "sm_90")
    assert set(gen.kernel_names) <= set(lowered)
    usage = _resource_usage(cubin.read_bytes(), tmp_path)
    assert set(lowered.values()) <= set(usage)
    again, lowered_again = compile_module(gen.source, gen.kernel_names, gen.include_dirs, "sm_90")
    assert again == cubin and lowered_again == lowered and cubin.stat().st_mtime_ns == again.stat().st_mtime_ns


FULL_SIZE_GPU_BUILDS = ["lstm-tc", "resnext", "transformer"]


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.timeout(3600)  # a full-size build with its occupancy search: minutes each, more on a shared machine
@pytest.mark.skipif(_nvrtc_missing() is not None or not importlib.util.find_spec("toolchain.nvcc")
                    or not __import__("toolchain.nvcc").nvcc.find_nvcc(),
                    reason=str(_nvrtc_missing() or "nvcc is not installed"))
@pytest.mark.parametrize("model", FULL_SIZE_GPU_BUILDS)
def test_default_full_size_gpu_build_fits_by_the_runtimes_compiler(model, tmp_path):
    """Issue 28: the zoo model at full size, batch 1, built for the GPU with no --veus (the default that did not
    launch on the H100), then its program.cu compiled with the runtime's compiler and options (NVRTC,
    runtime_options, sm_90; no GPU): by those registers, the executor's shared memory per vEU and the occupancy
    arithmetic, the build's vEUs per SM are co-resident, so all its vEUs launch on 132 SMs, with no spills, and
    (issue 25) at least 2 per SM. A default build the placement made all launches has nothing persistent to fit:
    then the persistent build (--placement rtask-only) is the one checked."""
    import subprocess
    import sys

    from rammer.build import build_model
    onnx_path = tmp_path / f"{model}.onnx"
    subprocess.run([sys.executable, "-c", "from rammer.cli import main; main()", "zoo", model, "-o", str(onnx_path)],
                   check=True, capture_output=True, timeout=600)
    built = build_model(onnx_path, tmp_path / "b", target="gpu", quiet=True)
    if not built.programs:
        built = build_model(onnx_path, tmp_path / "p", target="gpu", quiet=True, placement="rtask-only")
    assert built.programs, f"{model}: the persistent build has no rProgram"
    per_sm = _fits_by_the_runtimes_compiler(built, model, tmp_path)
    assert per_sm >= 2, f"{model}: the build keeps only {per_sm} vEU per SM"


def _fits_by_the_runtimes_compiler(built, model: str, tmp_path) -> int:
    """Compile the build's program.cu as the runtime does and check every rProgram's vEUs are co-resident; returns
    the build's vEUs per SM."""
    from vdevice.codegen import generate as gen_module, program_regions, veu_smem_bytes
    from vdevice.gpu import runtime_options
    from vdevice.nvrtc import compile_cubin
    from vdevice.occupancy import blocks_per_sm, device_layout_sizes
    from vdevice.target import H100 as SM90
    from vdevice.program import resident_bytes, used_ops
    folder = built.folder
    per_sm = int(built.manifest.stats["veus_per_sm"])
    runtime_gen = gen_module(built.ops, built.sources, [str(folder / "rkernels")], veus_per_sm=per_sm)
    assert runtime_gen.source == (folder / "program.cu").read_text()  # what the runtime compiles (VDevice)
    runtime = compile_cubin(runtime_gen.source, runtime_options("sm_90", runtime_gen.include_dirs), ["vd_interpreter"])
    interp = _resource_usage(runtime.cubin, tmp_path)[runtime.lowered["vd_interpreter"]]
    gen, sizes = gen_module(built.ops, built.sources), device_layout_sizes(built.ops, built.sources)
    for program in built.programs:
        threads = max(built.ops[i].kernel.threads for i in used_ops(program))
        threads = -(-threads // 32) * 32
        smem = veu_smem_bytes(program_regions(program, gen), sizes, resident_bytes(program))[0]
        fit = blocks_per_sm(threads, interp["REG"], smem + interp["SHARED"], SM90)
        assert fit.blocks >= per_sm, f"{model}: {interp['REG']} registers, {threads} threads, {smem} B: {fit}"
        assert program.num_veus <= fit.blocks * SM90.sms
    assert interp["STACK"] == 0 and interp["LOCAL"] == 0
    return per_sm


@pytest.mark.parametrize("kind,num_ops,veus,fits,seed", [("chain", 9, 3, 1, 0), ("diamond", 13, 6, 4, 1),
                                                          ("fan", 20, 8, 3, 2), ("random", 40, 7, 2, 3)])
def test_fold_keeps_dependencies_and_never_deadlocks(kind, num_ops, veus, fits, seed):
    """A program folded onto fewer vEUs runs every rTask once, honours every op dependency and cannot deadlock
    (the validator's simulation, an independent check), and keeps each original vEU's order on its new vEU."""
    from vdevice.program import fold
    dag = make_dag(kind, num_ops, 48, seed)
    program = schedule(dag, veus, seed)
    folded = fold(program, fits)
    validate(folded, dag.deps)
    assert folded.num_veus == fits
    for v in range(veus):
        mine = set(program.runs(v))
        assert [t for t in folded.runs(v % fits) if t in mine] == program.runs(v)


@needs_emulator
@pytest.mark.parametrize("kind,num_ops,veus,fits,seed", [("random", 30, 6, 2, 21), ("diamond", 13, 5, 3, 22),
                                                          ("random", 24, 4, 1, 23)])
def test_launch_what_fits_folds_the_program_with_a_note(kind, num_ops, veus, fits, seed, monkeypatch, capsys):
    """A GPU that keeps fewer vEUs co-resident than the program has (the backend's occupancy answer, here set):
    the executor launches what fits, says so, and the results stay bit-exact against op by op (numpy-checked)."""
    dag = make_dag(kind, num_ops, 64, seed)
    program = schedule(dag, veus, seed)
    bufs = dag.inputs(seed)
    vd = _vdevice(dag, bufs)
    monkeypatch.setattr(vd.backend, "max_coresident", lambda expr, threads, smem: fits)
    by_op = fresh(bufs)
    OpByOpExecutor(dag.ops, SOURCES, by_op, deps=dag.deps, vdevice=vd).run(by_op)
    assert_outputs(dag, by_op, dag.reference(bufs), exact=False)
    exe = PersistentExecutor(dag.ops, [program], SOURCES, bufs, vdevice=vd)
    assert exe.loaded[0].tables.num_veus == fits and len(exe.notes) == 1
    assert f"only {fits} of the program's {veus} vEUs" in capsys.readouterr().err
    persistent = fresh(bufs)
    exe.run(persistent)
    assert_outputs(dag, persistent, by_op, exact=True)


# ---- the hand-off in sm_90 SASS (docs/vdevice-dispatch-sass.md) ---------------------------------------------------


def _interpreter_sass(per_sm: int = 2):
    """The generated interpreter of a small module compiled for sm_90 with nvcc, disassembled."""
    from toolchain.sass import find_function as function
    ops = [Op("g", gather_kernel(256, 64, 3), ()), Op("a", add2_kernel(256, (32, 8)), ()),
           Op("c", count_kernel(128, 64), ())]
    gen = generate(ops, SOURCES, veus_per_sm=per_sm)
    functions, _ = _runtime_sass(gen.source, list(gen.include_dirs))
    return function(functions, "vd_interpreter")


def _poll_loop(code):
    """The backward-branch loop that holds the barrier-rTask's NANOSLEEP, rotated to start at it."""
    from toolchain.sass import loops
    spans = [body for body in loops(code) if any(i.base == "NANOSLEEP" for i in body)]
    assert spans, "no polling loop (NANOSLEEP) in the interpreter"
    body = min(spans, key=len)
    k = next(n for n, i in enumerate(body) if i.base == "NANOSLEEP")
    return body[k:] + body[:k]


def _global_load(i) -> bool:
    return i.base in ("LDG", "LD") and "CONSTANT" not in i.opcode


@pytest.mark.skipif(_nvrtc_missing() is not None, reason=str(_nvrtc_missing()))
def test_failed_poll_is_one_global_load():
    """A failed poll (the polling loop from its back-off to the watchdog clock read) loads only the counter: the
    abort flag is read on the clock path alone, after the clock read."""
    loop = _poll_loop(_interpreter_sass())
    clock = next(n for n, i in enumerate(loop) if i.base == "CS2R" and "CLOCK" in i.operands)
    before = [i for i in loop[:clock] if _global_load(i)]
    assert len(before) == 1 and before[0].opcode.startswith("LDG.E.STRONG"), before
    assert sum(_global_load(i) for i in loop) == 2  # the counter, and the abort flag on the clock path


def _block_of(code, index):
    """The straight-line run of instructions that ends at code[index]: back to the previous branch, convergence
    point or branch target."""
    targets = {int(m, 16) for i in code if i.base == "BRA" for m in re.findall(r"0x([0-9a-f]+)", i.operands)}
    start = index
    while start > 0 and code[start].addr not in targets and code[start - 1].base not in ("BRA", "BSYNC", "EXIT"):
        start -= 1
    return code[start:index + 1]


@pytest.mark.skipif(_nvrtc_missing() is not None, reason=str(_nvrtc_missing()))
def test_satisfied_wait_takes_no_membar_and_one_l1_invalidate():
    """After the polling loop, the path into the vEU barrier takes the acquire alone: no MEMBAR (fence.acq_rel's
    release half is gone) and one CCTL.IVALL, which every gpu-scope acquire compiles to on sm_90 (the memory
    model's price of weak loads after it; docs/vdevice-dispatch-sass.md). The publish is one release reduction."""
    code = _interpreter_sass()
    loop_end = max(i.addr for i in _poll_loop(code))
    bar = next(n for n, i in enumerate(code) if i.addr > loop_end and i.opcode.startswith("BAR.SYNC")
               and i.operands.strip() == "0x0")
    satisfied = _block_of(code, bar)
    assert not [i for i in satisfied if i.base == "MEMBAR"], satisfied
    assert sum(i.opcode == "CCTL.IVALL" for i in satisfied) == 1, satisfied
    red = next(n for n, i in enumerate(code) if i.base == "REDG")
    publish = _block_of(code, red)
    assert sum(i.opcode == "MEMBAR.ALL.GPU" for i in publish) == 1 and not any(i.base == "CCTL" for i in publish)


# ---- several small rTasks per vEU (gangs) ----------------------------------------------------------------------


def _gang_program(n: int, veus: int) -> tuple[Dag, Program]:
    """A 256-thread op (so the vEU is 256 threads) feeding 32- and 64-thread ops of three kinds (named barrier,
    mbarrier with early exits, block reductions), each op's rTasks appended back to back on vEU r % veus after a
    wait for its producer: small rTasks of one op stand next to each other, the case gangs are for."""
    dag = Dag(n)
    a = dag.add(Op("t0", add2_kernel(n, (32, 8)), (ArgRef.buf("t0"), ArgRef.buf("in0"), ArgRef.buf("in1"),
                                                 ArgRef.scalar("int32", n))), ["in0", "in1"],
                lambda b: ref_add2(b["in0"], b["in1"]))
    g = dag.add(Op("t1", gather_kernel(n, 32, 5), (ArgRef.buf("t1"), ArgRef.buf(a), ArgRef.scalar("int32", n),
                                                  ArgRef.scalar("int32", 7))), [a], lambda b: ref_gather(b[a], 5, 7))
    f = dag.add(Op("t2", affine_kernel(n, 64), (ArgRef.buf("t2"), ArgRef.buf(g), ArgRef.scalar("float32", 1.5),
                                               ArgRef.scalar("float32", -0.25), ArgRef.scalar("int32", n))), [g],
                lambda b: ref_affine(b[g], 1.5, -0.25))
    dag.add(Op("t3", count_kernel(n, 32), (ArgRef.buf("t3"), ArgRef.buf(f), ArgRef.scalar("int32", n))), [f],
            lambda b: ref_count(b[f], 32))
    program = Program(dag.ops, veus, side_by_side=True)
    for index, op in enumerate(dag.ops):
        for r in range(op.kernel.rtasks):
            if index:
                program.wait_ops(TaskRef(index, r), [index - 1])
            program.append(TaskRef(index, r), r % veus)
    return dag, program


@needs_emulator
@pytest.mark.parametrize("n,veus,sanitize", [(1000, 2, ()), (700, 3, ()), (300, 1, ("memcheck", "racecheck", "synccheck"))])
def test_small_rtasks_run_side_by_side_bit_exact(n, veus, sanitize):
    """rTasks of 32 and 64 threads on 256-thread vEUs run 8 and 4 at a time (gang bits in their records), each with
    its own barrier and shared region, and the results are bit-exact against op by op (numpy-checked), also under
    the emulator's sanitizers."""
    from vdevice.codegen import gang_sizes
    from vdevice.tables import INSTR, VD_GANG_SHIFT, VD_WAIT
    dag, program = _gang_program(n, veus)
    validate(program, dag.deps)
    sizes = sorted(set(gang_sizes(program).values()))
    assert sizes and max(sizes) == 8 and 4 in sizes
    assert Program.from_json(program.to_json()).side_by_side and not gang_sizes(Program(dag.ops, veus, program.veus))
    bufs = dag.inputs(n)
    vd = VDevice(dag.ops, SOURCES, bufs, "cpu", catalog=CATALOG, sanitize=sanitize)
    by_op = fresh(bufs)
    OpByOpExecutor(dag.ops, SOURCES, by_op, deps=dag.deps, vdevice=vd).run(by_op)
    assert_outputs(dag, by_op, dag.reference(bufs), exact=False)
    exe = PersistentExecutor(dag.ops, [program], SOURCES, bufs, vdevice=vd)
    code = exe.loaded[0].tables.instr[:, INSTR.column("code")]
    runs = code[code != VD_WAIT]
    assert sorted(set(int(c >> VD_GANG_SHIFT & 15) + 1 for c in runs) - {1}) == sizes
    assert exe.loaded[0].gang_span > 0
    persistent = fresh(bufs)
    exe.run(persistent)
    assert_outputs(dag, persistent, by_op, exact=True)


@needs_emulator
@pytest.mark.parametrize("veus,blocks,fits,seed", [(8, 8, 3, 4), (5, 4, 2, 3), (6, 6, 1, 7)])
def test_launch_what_fits_keeps_each_hosted_veus_resident_region(veus, blocks, fits, seed, monkeypatch):
    """A weight-stationary program (a family's load, an rTask that overwrites the weights and fills its own 2 KB
    layout, then two readers of the resident slices) folded onto fewer vEUs: each vEU keeps one resident region per
    vEU it hosts, so the readers still see the loaded values (numpy)."""
    from test_resident import F32 as RF32, N, SOURCES as RSOURCES, _resident_ops, _resident_program
    from vdevice.program import check_resident, fold, resident_homes
    rng = np.random.default_rng(seed)
    ops = _resident_ops(blocks)
    pins = [int(v) for v in rng.permutation(veus)[:blocks]]
    program = _resident_program(ops, veus, pins)
    folded = fold(program, fits)
    check_resident(folded)
    assert resident_homes(folded) == max(pins) // fits + 1  # regions for the hosted vEUs that hold slices
    src = rng.standard_normal(blocks * N).astype(RF32)
    bufs = {"src": src.copy(), "y0": np.zeros_like(src), "y1": np.zeros_like(src)}
    vd = VDevice(ops, RSOURCES, bufs, "cpu")
    monkeypatch.setattr(vd.backend, "max_coresident", lambda expr, threads, smem: fits)
    exe = PersistentExecutor(ops, [program], RSOURCES, bufs, vdevice=vd)
    assert exe.loaded[0].tables.num_veus == fits and exe.loaded[0].tables.home_bytes == 4 * N
    assert exe.loaded[0].tables.resident_bytes == 4 * N * resident_homes(exe.loaded[0].program)
    exe.run(bufs)
    np.testing.assert_array_equal(bufs["src"], np.full_like(src, -7.0))
    np.testing.assert_array_equal(bufs["y0"], src * RF32(1.5))
    np.testing.assert_array_equal(bufs["y1"], src * RF32(-1.5))
