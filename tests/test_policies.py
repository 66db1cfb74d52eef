"""Scheduling policies (wavefront, IOS, sequential) on the mechanism: every plan is checked by vdevice's validator
against dependencies derived here from the graph, predictions against an independent vEU simulation, and the
wavefront/IOS decisions against profiles built to force each case."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import onnx
import pytest
from test_scheduler import MODELS, Builder, lstm_model

from kernel_corpus.bindings import In, Launch, Out
from scheduler.graph import SchedulerError
from scheduler.mechanism import Mechanism
from scheduler.pipeline import Scheduled, plan_model, schedule
from scheduler.plan import Plan, ProgramOp
from scheduler.policies import ios
from scheduler.profiler import H100, DeviceSpec, Measurement, Profiler
from scheduler.workload import Candidate, OpSpec, Workload
from vdevice.program import Program, ProgramError, Run, TaskRef, Wait, validate_plan

PARAMS = {"wavefront": {}, "ios": {"max_endings": 4000}, "sequential": {}}


def graph_edges(sch: Scheduled) -> list[tuple[int, int]]:
    """Op-level dependencies from tensors: a launch reads elements another node writes; launches of a node in order,
    except an independent launch (Concat's copies: after the node's inputs only, and the node's consumers wait for
    each) and a resident load (reads constants: after nothing; the launch after it also waits for the inputs)."""
    g, ops = sch.graph, sch.plan.ops

    def regions(names: list[str]) -> list[tuple[str, int, int]]:
        """[start, end) element ranges of the buffers the tensors live in (at least their first element): views
        of one buffer (Concat elimination's pieces) overlap only where their elements do."""
        views = [(g.buffer_of(t), max(g.tensors[t].size, 1)) for t in names if t]
        return [(v.base, v.offset, v.offset + n) for v, n in views]

    def overlap(a: list[tuple[str, int, int]], b: list[tuple[str, int, int]]) -> bool:
        return any(x[0] == y[0] and x[1] < y[2] and y[1] < x[2] for x in a for y in b)

    writes = {i: regions(op.outputs) for i, op in enumerate(ops)}
    reads = {i: regions(op.inputs) for i, op in enumerate(ops)}
    load = {i: op.launch.resident is not None and op.launch.resident.load for i, op in enumerate(ops)}
    index = {(op.node, op.launch_index): i for i, op in enumerate(ops)}
    edges = []
    for p, c in itertools.permutations(range(len(ops)), 2):
        same_node = ops[p].node == ops[c].node
        if same_node and ops[p].launch_index + 1 == ops[c].launch_index and not ops[c].launch.independent:
            edges.append((p, c))
        last = ops[p].launch_index == max(o.launch_index for o in ops if o.node == ops[p].node)
        after_load = ops[c].launch_index > 0 and load[index[(ops[c].node, ops[c].launch_index - 1)]]
        first = ops[c].launch_index == 0 or ops[c].launch.independent or after_load
        if (not same_node and (last or ops[p].launch.independent) and first and not load[c]
                and overlap(writes[p], reads[c])):
            edges.append((p, c))
    return edges


def sweep_times(prog: Program, duration, costs) -> list[list[float]]:
    """Each Run's end by the cost rules of scheduler.simulate, computed independently of it: sweep every vEU in
    order with the other vEUs' current end times until nothing changes (the waits form no cycle)."""
    awaited = {t for instrs in prog.veus for i in instrs if isinstance(i, Wait) for t in i.targets}
    ends: list[list[float]] = [[0.0] * sum(isinstance(i, Run) for i in v) for v in prog.veus]
    for _ in range(sum(len(v) for v in prog.veus) + 1):
        changed = False
        for v, instrs in enumerate(prog.veus):
            t, k, last = 0.0, 0, None
            for i in instrs:
                if isinstance(i, Wait):
                    seen = max(ends[u][j] for u, j in i.targets) + costs.visible(len(i.targets))
                    t, last = max(t + costs.satisfied_us, seen), None
                    continue
                end = t + duration(i.task.op) + (costs.arg_fetch_us if i.task.op != last else 0.0)
                changed |= abs(end - ends[v][k]) > 1e-9
                ends[v][k] = end
                t = end + (costs.publish_us if (v, k) in awaited else 0.0)
                k, last = k + 1, i.task.op
        if not changed:
            return ends
    raise AssertionError("the sweep did not settle")


def simulated_us(plan: Plan, profiler: Profiler) -> list[float]:
    """Each rProgram's time from an independent simulation of its vEUs (plus the launch)."""
    times = []
    for prog in plan.programs:
        duration = lambda op: plan.ops[op].rtask_us  # noqa: E731
        ends = sweep_times(prog, duration, profiler.step_costs(duration))
        times.append(max(e[-1] for e in ends if e) + profiler.device.launch_us)
    return times


@pytest.mark.parametrize("policy", list(PARAMS))
@pytest.mark.parametrize("model,veus", [("mlp", 132), ("lstm", 132), ("lstm", 7), ("cnn", 132), ("cnn", 20),
                                        ("transformer", 132), ("transformer", 33)])
def test_policy_produces_valid_plan(policy: str, model: str, veus: int) -> None:
    profiler = Profiler(H100, veus)
    sch = plan_model(MODELS[model](), policy, profiler, veus=veus, **PARAMS[policy])
    plan = sch.plan
    validate_plan(plan.programs, graph_edges(sch))
    assert {op.node for op in plan.ops} == {n.name for n in sch.graph.nodes} == set(plan.choices)
    assert all(p.num_veus == veus for p in plan.programs)
    fresh = Profiler(H100, veus)
    fresh.resident_bytes = profiler.resident_bytes  # the model's weights, as plan_workload told the planner
    assert plan.program_us == pytest.approx(simulated_us(plan, fresh))


def test_wavefront_beats_sequential_on_lstm() -> None:
    model = lstm_model(8, 2, 5, 64, 3)  # one operator per cell: three layers give a diagonal worth running in parallel
    t = {p: plan_model(model, p, Profiler(), **PARAMS[p]).plan.predicted_us for p in ("wavefront", "sequential")}
    # cells of hidden 64 take longer than a hand-off (1.45 us measured): running the diagonal in parallel pays
    assert t["wavefront"] < 0.7 * t["sequential"]


def two_branch_model(width: int = 64) -> onnx.ModelProto:
    """Relu, then two independent MatMuls of the same activation (two outputs)."""
    b = Builder(8)
    h = b.one("Relu", ["x"])
    b.one("MatMul", [h, b.weight((width, width))])
    b.nodes[-1].output[0] = "y1"
    b.one("MatMul", [h, b.weight((width, width))])
    b.nodes[-1].output[0] = "y2"
    return b.model({"x": (1, width)}, {"y1": (1, width), "y2": (1, width)})


def veus_of(plan: Plan, node: str) -> set[int]:
    """vEUs that run some rTask of the node."""
    ids = {i for i, op in enumerate(plan.ops) if op.node == node}
    return {v for p in plan.programs for v in range(p.num_veus) for t in p.runs(v) if t.op in ids}


@pytest.mark.parametrize("policy", ["wavefront", "ios"])
def test_independent_operators_share_a_program_on_disjoint_veus(policy: str) -> None:
    sch = plan_model(two_branch_model(), policy, Profiler(), **PARAMS[policy])
    plan = sch.plan
    a, b = [n.name for n in sch.graph.nodes if n.op_type == "MatMul"]
    assert len(plan.programs) == 1
    assert veus_of(plan, a) and veus_of(plan, b) and not veus_of(plan, a) & veus_of(plan, b)
    # and they overlap: the program is shorter than running them one after the other
    seq = plan_model(two_branch_model(), "sequential", Profiler()).plan
    assert plan.predicted_us < seq.predicted_us
    # the sequential plan orders every op after the one before; the packed plan does not
    chain = [(i - 1, i) for i in range(1, len(seq.ops))]
    validate_plan(seq.programs, chain)
    with pytest.raises(ProgramError, match="dependency not honoured"):
        validate_plan(plan.programs, [(i - 1, i) for i in range(1, len(plan.ops))])


# ---- profiles built to force each wavefront decision ---------------------------------------------------------------
def table_profiler(times: dict[str, float], veus: int, device: DeviceSpec = H100) -> Profiler:
    """Measured mode whose measuring function reads a table by kernel name (no cache file is written)."""
    prof = Profiler(device, veus, mode="measured", measure=lambda l: Measurement(times[l.kernel]))
    prof.cache.save = lambda: None
    prof.cache.entries = {}
    return prof


def fake_launch(kernel: str, rtasks: int) -> Launch:
    """A launch of `rtasks` rTasks (only its geometry matters to a table profile)."""
    return Launch(kernel, [], (rtasks, 1, 1), (128, 1, 1), 0, [In(0), Out(0)], 0, 0)


def wave_workload(n_ops: int, chain: bool = False) -> Workload:
    """n ops, each with a fast variant (8 rTasks x 1 us) and an efficient one (2 rTasks x 2.5 us)."""
    ops = []
    for i in range(n_ops):
        cands = [Candidate("fast", "fast", [fake_launch("fast", 8)]), Candidate("eff", "efficient",
                                                                            [fake_launch("eff", 2)])]
        ops.append(OpSpec(i, f"op{i}", "X", cands, [i - 1] if chain and i else [], [f"t{i - 1}"], [f"t{i}"]))
    return Workload(ops)


def workload_edges(plan: Plan, workload: Workload) -> list[tuple[int, int]]:
    """Op-level edges of a hand-made workload (every candidate here has one launch)."""
    index = {op.node: i for i, op in enumerate(plan.ops)}
    return [(index[workload.ops[p].name], index[op.name]) for op in workload.ops for p in op.preds]


@pytest.mark.parametrize("veus,expect", [(4, "eff"), (16, "fast"), (32, "fast")])
def test_wavefront_chooses_efficient_rkernel_only_when_wave_overfills(veus: int, expect: str) -> None:
    # fastest alone: fast = 2 rounds x 1 us (4 vEUs) < eff = 2.5 us; the wave of two ops has 16 fast rTasks:
    # 4 vEUs -> fast takes 4 us, eff 2.5 us; 16 vEUs -> fast 1 us; 32 vEUs -> the wave cannot fill the device.
    wl = wave_workload(2)
    prof = table_profiler({"fast": 1.0, "eff": 2.5}, veus)
    plan = schedule(wl, "wavefront", prof)
    assert {c.variant for c in plan.choices.values()} == {expect}
    why = plan.choices["op0"].why
    assert why.startswith("wave 0: most efficient") == (expect == "eff")
    assert ("overfills" in why) == (veus < 32)
    assert ("cannot fill" in why) == (veus == 32)
    validate_plan(plan.programs, workload_edges(plan, wl))
    assert plan.program_us == pytest.approx(simulated_us(plan, prof))


@pytest.mark.parametrize("barrier_us,launch_us,programs", [(0.7, 6.2, 1), (8.0, 0.5, 3), (2.0, 1.0, 3),
                                                                (1.0, 1.5, 1)])
def test_wavefront_splits_programs_when_merging_is_slower(barrier_us: float, launch_us: float,
                                                          programs: int) -> None:
    # a chain of 3 single-op waves, 8 rTasks of 1 us on 8 vEUs: merged, each later wave costs a barrier;
    # split, a launch. Merging wins iff barrier <= launch.
    device = dataclasses.replace(H100.named("test GPU", 8), barrier_us=barrier_us, launch_us=launch_us)
    wl = wave_workload(3, chain=True)
    prof = table_profiler({"fast": 1.0, "eff": 9.0}, 8, device)
    plan = schedule(wl, "wavefront", prof)
    assert len(plan.programs) == programs
    assert sum("new rProgram" in n for n in plan.notes) == programs - 1
    validate_plan(plan.programs, workload_edges(plan, wl))
    merged = 3 * 1.0 + 2 * barrier_us + launch_us
    split = 3 * (1.0 + launch_us)
    assert plan.predicted_us == pytest.approx(merged if programs == 1 else split)


def test_wavefront_coarse_barriers_are_valid_and_not_faster() -> None:
    model = lstm_model(6, 2, 4, 5, 2)
    fine = plan_model(model, "wavefront", Profiler(H100, 16), veus=16)
    coarse = plan_model(model, "wavefront", Profiler(H100, 16), veus=16, fine_grained=False)
    validate_plan(coarse.plan.programs, graph_edges(coarse))
    assert fine.plan.predicted_us <= coarse.plan.predicted_us


# ---- the mechanism's primitives --------------------------------------------------------------------------------------
def test_mechanism_append_wait_predicts_hand_times() -> None:
    prof = table_profiler({"a": 2.0, "b": 3.0}, 2)
    mech = Mechanism(prof, 2)
    b = mech.fork()
    spec = OpSpec(0, "A", "X", [Candidate("v", "only", [fake_launch("a", 3)])])
    fetch = prof.interpreter.arg_fetch_us  # the first rTask of an op on a vEU, and any rTask after a wait
    (a,) = b.schedule_node(spec, spec.candidates[0])  # vEU0: 0-2.25 and 2.25-4.25 (rTask 2); vEU1: 0-2.25
    op_b = b.add_op(ProgramOp("B", "X", "v", "", 0, fake_launch("b", 1)))
    b.wait(TaskRef(op_b, 0), [TaskRef(a, 2)])
    # the wait is not satisfied when vEU 1 reaches it (2.25 + 0.35 < 4.25): it ends one hand-off (fan-in 1, the
    # measured 1.448 us, publish included) after vEU 0's rTask, then B fetches its arguments
    want = fetch + 4.0 + 1.448 + fetch + 3.0
    assert prof.barrier_cost_us(1) == pytest.approx(1.448)
    assert b.append(TaskRef(op_b, 0), 1) == pytest.approx(want)
    mech.commit(b)
    plan = mech.finish("hand", {}, [])
    assert plan.programs[0].veus[1][-2].targets == ((0, 1),)  # a barrier-rTask on vEU 0's second rTask
    assert plan.program_us == pytest.approx([want + prof.device.launch_us])
    assert plan.program_us == pytest.approx(simulated_us(plan, prof))


def test_rkernel_that_does_not_fit_a_veu_is_refused() -> None:
    big = Launch("big", [], (4, 1, 1), (256, 1, 1), 300 * 1024, [In(0), Out(0)], 0, 0)
    wl = Workload([OpSpec(0, "A", "X", [Candidate("v", "only", [big])])])
    with pytest.raises(SchedulerError, match="shared memory"):
        schedule(wl, "sequential", table_profiler({"big": 1.0}, 4))


# ---- IOS ---------------------------------------------------------------------------------------------------------------
def diamond_workload() -> Workload:
    """0 -> (1, 2) -> 3 -> 4, plus an independent 5; each op one kernel of its own rTask count."""
    preds = [[], [0], [0], [1, 2], [3], []]
    sizes = [8, 3, 5, 8, 2, 4]
    ops = [OpSpec(i, f"n{i}", "X", [Candidate("v", "only", [fake_launch(f"k{i}", sizes[i])])], preds[i])
           for i in range(len(preds))]
    return Workload(ops)


def brute_force_best(wl: Workload, model: ios.StageModel, r: int, s: int) -> float:
    """Minimum total stage latency over every sequence of stages (each closed under successors, pruned)."""
    succ = wl.successors()
    best: dict[frozenset, float] = {frozenset(): 0.0}

    def solve(rest: frozenset) -> float:
        if rest in best:
            return best[rest]
        options = []
        items = sorted(rest)
        for k in range(1, len(items) + 1):
            for ending in itertools.combinations(items, k):
                e = set(ending)
                if any(j in rest and j not in e for i in e for j in succ[i]):
                    continue
                groups = ios.components(list(e), succ)
                if len(groups) > s or any(len(g) > r for g in groups):
                    continue
                options.append(solve(rest - e) + model.latency(groups))
        best[rest] = min(options)
        return best[rest]

    return solve(frozenset(range(len(wl.ops))))


@pytest.mark.parametrize("r,s,veus", [(3, 8, 8), (1, 8, 8), (2, 2, 4), (3, 1, 6)])
def test_ios_dp_is_optimal_on_a_small_dag(r: int, s: int, veus: int) -> None:
    wl = diamond_workload()
    prof = table_profiler({f"k{i}": 1.0 + 0.5 * i for i in range(6)}, veus)
    picks = {op.index: op.candidates[0] for op in wl.ops}
    model = ios.StageModel(wl, prof, picks, veus)
    stages = ios.solve(wl, r, s, model, 10_000, [])
    got = sum(model.latency(ios.components(st, wl.successors())) for st in stages)
    assert got == pytest.approx(brute_force_best(wl, model, r, s))
    for st in stages:
        groups = ios.components(st, wl.successors())
        assert len(groups) <= s and all(len(g) <= r for g in groups)
    plan = schedule(wl, "ios", prof, r=r, s=s)
    validate_plan(plan.programs, workload_edges(plan, wl))
    # stages are separated by barriers: every op of a stage after every op of the stage before
    index = {op.node: i for i, op in enumerate(plan.ops)}
    stage_of = {name: int(c.why.split("stage ")[1].split(",")[0]) for name, c in plan.choices.items()}
    barriers = [(index[a], index[b]) for a in stage_of for b in stage_of if stage_of[b] == stage_of[a] + 1]
    validate_plan(plan.programs, barriers)
    assert len(set(stage_of.values())) == len(stages)


def test_ios_falls_back_to_windows_with_a_note() -> None:
    model = lstm_model(8, 2, 5, 6, 2)
    sch = plan_model(model, "ios", Profiler(), max_endings=300)
    assert any("optimal within each window only" in n for n in sch.plan.notes)
    validate_plan(sch.plan.programs, graph_edges(sch))


def test_ios_groups_of_a_stage_use_disjoint_veu_ranges() -> None:
    wl = diamond_workload()
    prof = table_profiler({f"k{i}": 1.0 for i in range(6)}, 8)
    plan = schedule(wl, "ios", prof)
    stage_of = {name: int(c.why.split("stage ")[1].split(",")[0]) for name, c in plan.choices.items()}
    assert stage_of["n1"] == stage_of["n2"]  # side by side, as the DP finds that faster
    ranges = {name: c.why.split("on vEUs ")[1] for name, c in plan.choices.items()}
    assert ranges["n1"] != ranges["n2"]
    vs = {name: {v for v in range(8) for t in plan.programs[0].runs(v) if plan.ops[t.op].node == name}
          for name in ("n1", "n2")}
    assert vs["n1"] and vs["n2"] and not vs["n1"] & vs["n2"]
    np.testing.assert_allclose(plan.program_us, simulated_us(plan, prof))


def test_ios_search_cap_bounds_a_nasnet_graph_and_falls_back_to_greedy() -> None:

    from rammer.zoo import generate
    model = generate("nasnet", small=True)
    # max_endings alone would let the DP run for minutes on this graph; max_states bounds the whole search (the
    # note says the cap was hit; pytest-timeout stops a search that would not end)
    sch = plan_model(model, "ios", Profiler(), max_endings=10**9, max_states=20_000)
    plan = sch.plan
    assert any("search cap hit" in n and "max_states=20000" in n for n in plan.notes), plan.notes
    validate_plan(plan.programs, graph_edges(sch))
    assert {op.node for op in plan.ops} == {n.name for n in sch.graph.nodes} == set(plan.choices)
    for name, c in plan.choices.items():  # every op in exactly one stage, stages numbered densely
        assert "stage " in c.why
    stage_of = {name: int(c.why.split("stage ")[1].split(",")[0]) for name, c in plan.choices.items()}
    assert set(stage_of.values()) == set(range(max(stage_of.values()) + 1))


def test_ios_default_cap_plans_nasnet() -> None:
    from rammer.zoo import generate
    sch = plan_model(generate("nasnet", small=True), "ios", Profiler())
    validate_plan(sch.plan.programs, graph_edges(sch))


@pytest.mark.parametrize("max_states", [1, 5, 40, 10_000])
def test_ios_cap_mid_search_gives_a_valid_plan(max_states: int) -> None:
    wl = diamond_workload()
    prof = table_profiler({f"k{i}": 1.0 + 0.5 * i for i in range(6)}, 8)
    notes: list[str] = []
    picks = {op.index: op.candidates[0] for op in wl.ops}
    stages = ios.solve(wl, 2, 2, ios.StageModel(wl, prof, picks, 8), 10_000, notes, max_states)
    assert sorted(i for st in stages for i in st) == list(range(len(wl.ops)))
    done: set[int] = set()
    for st in stages:  # a stage's ops wait only on earlier stages or on ops of their own group
        groups = ios.components(st, wl.successors())
        assert len(groups) <= 2 and all(len(g) <= 2 for g in groups)
        assert all(p in done or p in st for i in st for p in wl.ops[i].preds)
        done |= set(st)
    assert any("search cap hit" in n for n in notes) == (max_states < 100)
    plan = schedule(wl, "ios", prof, r=2, s=2, max_states=max_states)
    validate_plan(plan.programs, workload_edges(plan, wl))


def test_ios_greedy_respects_pruning_and_dependencies() -> None:
    wl = diamond_workload()
    prof = table_profiler({f"k{i}": 1.0 for i in range(6)}, 4)
    picks = {op.index: op.candidates[0] for op in wl.ops}
    for r, s in [(1, 1), (2, 2), (3, 8)]:
        stages = ios.greedy(list(range(6)), wl, r, s, ios.StageModel(wl, prof, picks, 4))
        done: set[int] = set()
        for st in stages:
            groups = ios.components(st, wl.successors())
            assert len(groups) <= s and all(len(g) <= r for g in groups)
            assert all(p in done or p in st for i in st for p in wl.ops[i].preds)
            done |= set(st)
        assert done == set(range(6))


def test_ios_refuses_a_non_positive_cap() -> None:
    with pytest.raises(SchedulerError, match="max_states"):
        schedule(diamond_workload(), "ios", table_profiler({f"k{i}": 1.0 for i in range(6)}, 4), max_states=0)


def test_ios_cap_after_some_windows_keeps_them_and_groups_the_rest_greedily() -> None:
    model = lstm_model(8, 2, 5, 6, 3)  # 27 operators: more than the first windows' search budget covers
    sch = plan_model(model, "ios", Profiler(), max_endings=300, max_states=2000)
    cap = [n for n in sch.plan.notes if "search cap hit" in n]
    assert cap and " after planning 0 of" not in cap[0], sch.plan.notes  # some windows were solved first
    validate_plan(sch.plan.programs, graph_edges(sch))
    assert {op.node for op in sch.plan.ops} == {n.name for n in sch.graph.nodes}
