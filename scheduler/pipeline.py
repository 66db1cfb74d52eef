"""ONNX model -> plan in one call (import, passes, support check, policy, validation) for `rammer build`."""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import onnx
from kernel_corpus.bindings import reads_constants_only
from vdevice.program import Program, validate_plan
from vdevice.target import Target, TargetKind

from .backends import BACKENDS, default_backends
from .baselines import BASELINE_DISABLED, Baselines, price
from .graph import Graph, Node, SchedulerError, present
from .merge import Price, run_merge
from .onnx_import import import_model
from .passes import run_passes, run_target_passes
from .plan import MakeOp, Plan, ProgramOp, default_vdevice_op
from .policies import POLICIES
from .profiler import H100, DeviceSpec, Profiler
from .workload import UnsupportedOpError, Workload, build_workload


@dataclass
class Scheduled:
    """A plan with the passed graph and the workload it was made from."""

    plan: Plan
    graph: Graph
    workload: Workload


def op_dependencies(plan: Plan, workload: Workload) -> list[tuple[int, int]]:
    """Op-level edges derived from the DFG, not from the schedule: each launch after the one before it of the same
    node, the first launch of a node after each predecessor node's end (its last launch and its independent ones);
    an independent launch after the predecessors only, a resident load after nothing (the launch after it then
    after the predecessors too): the mechanism's rule (Mechanism.schedule_node)."""
    by_node: dict[str, list[int]] = {}
    for i, op in enumerate(plan.ops):
        by_node.setdefault(op.node, []).append(i)
    for ids in by_node.values():
        ids.sort(key=lambda i: plan.ops[i].launch_index)
    # library steps and launch segments: ordered by the plan's steps, not by op edges
    calls = {c.node for c in plan.calls} | {plan.ops[i].node for i in plan.outside}

    def ends(node: str) -> list[int]:
        ids = by_node[node]
        return [i for i in ids[:-1] if plan.ops[i].launch.independent] + [ids[-1]]

    edges = []
    for spec in workload.ops:
        if spec.name in calls:
            continue
        ids = by_node.get(spec.name, [])
        if not ids:
            raise SchedulerError(f"node '{spec.name}' is missing from the plan")
        inputs = [e for p in spec.preds if workload.ops[p].name not in calls for e in ends(workload.ops[p].name)]
        chain = list(inputs)
        for i in ids:
            launch = plan.ops[i].launch
            if reads_constants_only(launch):
                chain = [i] + inputs
                continue
            edges += [(j, i) for j in (inputs if launch.independent else chain)]
            if not launch.independent:
                chain = [i]
    return edges


def check_plan(plan: Plan, workload: Workload) -> None:
    """vdevice's validator by simulation: every rTask once, every dependency honoured, no deadlock."""
    if not plan.ops:
        return  # every output is a constant or an input view: nothing runs
    validate_plan(plan.programs, op_dependencies(plan, workload))


def schedule(workload: Workload, policy: str = "wavefront", profiler: Profiler | None = None,
             make_op: MakeOp = default_vdevice_op, validate: bool = True, **params: Any) -> Plan:
    """Run one policy on a workload and (unless told not to, for very large plans) validate its output."""
    if policy not in POLICIES:
        raise SchedulerError(f"unknown policy '{policy}' (choose from {', '.join(POLICIES)})")
    plan = POLICIES[policy](workload, profiler or Profiler(), make_op=make_op, **params)
    if validate:
        check_plan(plan, workload)
    name_backends(plan, workload)
    return plan


def name_backends(plan: Plan, workload: Workload) -> None:
    """Each choice says the backend of the variant the policy chose (a user library's, or the corpus's)."""
    for spec in workload.ops:
        choice = plan.choices.get(spec.name)
        if choice is not None:
            choice.backend = next((c.backend for c in spec.candidates if c.variant == choice.variant), choice.backend)


def import_graph(model: str | Path | onnx.ModelProto, registry: Any, disabled: tuple[str, ...] | list[str] = (),
                 after: Callable[[str, Graph], None] | None = None, dims: Mapping[str, int] | None = None) -> Graph:
    """ONNX import (named dynamic dimensions fixed by `dims`) and the graph passes (less the `disabled` ones;
    `after(name, graph)` after each): the part of loading that no target changes, run once per build whatever
    targets the build then tries."""
    return run_passes(import_model(model, dims), supports=corpus_supports(registry), disabled=disabled, after=after)


def corpus_supports(registry: Any) -> Callable[[str], bool]:
    """Whether the corpus implements an op type (a pass that would introduce one it lacks is skipped)."""
    def supports(op_type: str) -> bool:
        return bool(registry.for_op(op_type))
    return supports


def specialise(graph: Graph, target: Target, registry: Any, disabled: tuple[str, ...] | list[str] = (),
               after: Callable[[str, Graph], None] | None = None, merge: str = "off",
               profiler: Profiler | None = None, policy: str = "wavefront") -> Graph:
    """A passed graph made for one target: the target passes on a copy (scheduler.passes.TARGET_PASSES: slices
    sized for its vEUs per SM, packed while its vEUs last) and the IOS sibling merge (`merge`: off, auto: priced with
    `policy` on `profiler`, always; scheduler.merge). build_workload then checks support with its backends."""
    supports = corpus_supports(registry)
    g = run_target_passes(graph, target, disabled, after)
    price = subgraph_price(registry, profiler or Profiler(veus=target.veus), policy, target)
    return run_merge(g, merge, price, lambda op_type: supports(op_type) and supports("Split"))


def subgraph_price(registry: Any, profiler: Profiler, policy: str, target: Target) -> Price:
    """Price nodes as one rProgram of their own, planned by the policy on the profiler (rKernels only): what the
    IOS merge compares (scheduler.merge.merge_siblings)."""
    rkernels = dataclasses.replace(target, backends=tuple(n for n in target.backends if not BACKENDS[n].is_call))

    def price(g: Graph, nodes: list[Node]) -> float:
        sub = copy.copy(g)
        sub.nodes = nodes
        used = {n for node in nodes for n in present(node.inputs + node.outputs)}
        sub.outputs = [o for o in present(nodes[-1].outputs + [o for n in nodes for o in n.outputs]) if o in used]
        workload = build_workload(sub, registry, rkernels)
        return schedule(workload, policy, profiler, validate=False, veus=target.veus).predicted_us
    return price


def default_target(veus: int | None = None) -> Target:
    """The target of a plan made without one: the H100's SMs (or `veus`) vEUs, one per SM, the default backends
    (corpus and user rKernels)."""
    return Target(TargetKind.GPU, veus or H100.sms, backends=default_backends(with_libraries=True))


def default_registry(registry: Any = None) -> Any:
    """The given registry, else the built-in corpus at the default precision."""
    if registry is not None:
        return registry
    from kernel_corpus.bindings import DEFAULT_PRECISION
    from kernel_corpus.bindings import registry as full
    return full.restricted(DEFAULT_PRECISION)


def load_workload(model: str | Path | onnx.ModelProto, registry: Any = None, target: Target | None = None,
                  disabled: tuple[str, ...] = (), after: Callable[[str, Graph], None] | None = None,
                  merge: str = "off", profiler: Profiler | None = None,
                  policy: str = "wavefront", dims: Mapping[str, int] | None = None) -> tuple[Graph, Workload]:
    """import_graph, specialise for one target (default_target) and build_workload: the graph and what the
    policies schedule."""
    registry = default_registry(registry)
    target = target or default_target(profiler.veus if profiler else None)
    g = specialise(import_graph(model, registry, disabled, after, dims), target, registry, disabled, after, merge,
                   profiler, policy)
    return g, build_workload(g, registry, target)


def plan_workload(graph: Graph, workload: Workload, policy: str = "wavefront", profiler: Profiler | None = None,
                  make_op: MakeOp = default_vdevice_op, validate: bool = True, placement: str | None = None,
                  costs: Any = None, launches: bool = False, force: dict[str, str] | None = None,
                  fork_launches: bool | None = None, **params: Any) -> Scheduled:
    """Place (when some node has more than one backend, or `launches` lets nodes run as launch segments, or `force`
    pins node kinds; see scheduler.placement), schedule and validate; the plan carries the graph's notes and
    aliases."""
    profiler = profiler or Profiler()
    if profiler.resident_bytes is None:  # the L2 term: whether the weights can stay in L2 between inferences
        profiler.resident_bytes = sum(int(w.nbytes) for w in graph.weights.values())
    if placement is None and not needs_placement(workload) and not launches and not force:
        plan = schedule(workload, policy, profiler, make_op, validate, **params)
    else:
        plan = place_and_schedule(workload, policy, profiler, placement or "search", make_op, validate, costs,
                                  launches or placement in ("launch-only", "library-launch") or any(
                                      k == "launch" for k in (force or {}).values()), force or {},
                                  fork_launches=fork_launches, **params)
    plan.notes = graph.notes + plan.notes
    if profiler.misses:
        plan.notes.append(f"profiler: {profiler.misses} launch shape(s) not in the measured cache: cost model used")
    plan.aliases = {name: graph.buffer_of(name) for name in graph.aliases}
    plan.setup = setup_ops(plan, workload)
    return Scheduled(plan, graph, workload)


def setup_ops(plan: Plan, workload: Workload) -> list[ProgramOp]:
    """The setup launches (Candidate.setup) of the candidate each planned node runs, as ops a build runs once when
    it loads; numbered -1, -2, ... so their names differ from the node's per-inference launches."""
    specs = {spec.name: spec for spec in workload.ops}
    out: list[ProgramOp] = []
    done: set[str] = set()
    for op in plan.ops:
        if op.node in done or op.node not in specs:
            continue
        done.add(op.node)
        spec = specs[op.node]
        cand = next((c for c in spec.candidates if c.variant == op.variant and c.source == op.source), None)
        out += [ProgramOp(spec.name, spec.op_type, op.variant, op.source, -1 - k, launch, list(spec.inputs),
                          list(spec.outputs)) for k, launch in enumerate(cand.setup if cand else [])]
    return out


def validate_scheduled(sch: Scheduled, programs: list[Program] | None = None) -> None:
    """vdevice's validator (by simulation) on a finished plan, or on `programs`, the same instructions over its ops
    bound to rKernels: a build plans with validate=False and checks only the plan it keeps, once."""
    from .segments import check_steps
    plan = sch.plan if programs is None else dataclasses.replace(sch.plan, programs=programs)
    if plan.steps:
        check_steps(plan, sch.workload, op_dependencies(plan, sch.workload))
    else:
        check_plan(plan, sch.workload)


def needs_placement(workload: Workload) -> bool:
    """Whether some node can run on more than one backend, or only as a library call."""
    return any(len(spec.backends()) > 1 or not spec.candidates for spec in workload.ops)


def place_and_schedule(workload: Workload, policy: str, profiler: Profiler, placement: str,
                       make_op: MakeOp = default_vdevice_op, validate: bool = True, costs: Any = None,
                       launches: bool = False, force: dict[str, str] | None = None,
                       fork_launches: bool | None = None, **params: Any) -> Plan:
    """Choose each node's backend (dp, search, rtask-only, launch-only; `launches`: LAUNCH is an option, `force`:
    node-name patterns -> the kind they must run as), then plan the runs of rKernel nodes with the policy, the runs
    of launched nodes as launch segments and the library nodes as call steps (scheduler.segments)."""
    from .backends.costs import BackendCosts
    from .placement import PLACEMENTS, cheapest_of, dp, fixed, forced, lost_overlap, node_options, search
    from .segments import check_steps, plan_steps
    if placement not in PLACEMENTS:
        raise SchedulerError(f"unknown placement '{placement}' (choose from {', '.join(PLACEMENTS)})")
    costs = costs or BackendCosts(profiler.device)
    veus = params.get("veus") or profiler.veus
    prefetch = getattr(profiler.legacy_registers, "prefetch", None)
    if launches and prefetch is not None:  # ptxas once per legacy source for every candidate launch
        from kernel_corpus.bindings import as_unpinned
        prefetch(as_unpinned(launch) for spec in workload.ops for c in spec.candidates
                           for launch in c.launches)
    options = [node_options(spec, profiler, veus, costs.call_us, launches) for spec in workload.ops]
    options = forced(options, workload, force or {})
    if placement == "rtask-only":
        only_calls = [spec.name for spec, opts in zip(workload.ops, options) if all(o.is_call for o in opts)]
        if only_calls:
            raise SchedulerError(f"--placement rtask-only: {len(only_calls)} node(s) have no rKernel, only a "
                                 f"library call (first: '{only_calls[0]}'); enable placement dp or search")

    runs: dict[tuple, Plan] = {}  # a run of rKernel nodes is planned once per (nodes, backends): moves re-plan
                                  # only the runs they change

    def plan_run(w: Workload) -> Plan:
        key = tuple((spec.name, spec.candidates[0].backend) for spec in w.ops)
        if key not in runs:
            runs[key] = schedule(w, policy, profiler, make_op, validate, **params)
        return runs[key]

    def evaluate(p: Any) -> Plan:
        plan = plan_steps(workload, p, plan_run, costs.call_us, policy, profiler, make_op, fork_launches)
        if validate:
            check_steps(plan, workload, op_dependencies(plan, workload))
        return plan

    kernels_only = fixed(workload, options, "rkernel", "rtask-only")
    if placement in ("rtask-only", "launch-only", "library-launch"):
        plan = evaluate({"rtask-only": kernels_only,
                         "launch-only": fixed(workload, options, "launch", "launch-only"),
                         "library-launch": cheapest_of(options, ("call", "launch"), "library-launch")}[placement])
    else:
        # the all-rKernel plan (when every node has an rKernel) tells the DP what overlap each cut would lose
        has_kernels = all(any(o.kind == "rkernel" for o in opts) for opts in options)
        base = evaluate(kernels_only) if has_kernels else None
        first = dp(workload, options, profiler.device.launch_us,
                   lost_overlap(workload, base, profiler.barrier_cost_us(profiler.veus)), profiler.launches.eager_us)
        if placement == "dp":
            plan = evaluate(first)
        else:
            starts = [first, kernels_only, fixed(workload, options, "call", "start library wherever possible")]
            if launches:
                starts.append(fixed(workload, options, "launch", "start launch wherever possible"))
            plan = search(workload, options, starts, evaluate)[1]
    if any(spec.calls for spec in workload.ops):
        plan.notes.append(costs.describe())
    return plan


def plan_model(model: str | Path | onnx.ModelProto, policy: str = "wavefront", profiler: Profiler | None = None,
               registry: Any = None, make_op: MakeOp = default_vdevice_op, validate: bool = True,
               **params: Any) -> Scheduled:
    """Import, run the passes, check support, schedule, validate (for the plan's vEUs: `veus`, else the
    profiler's)."""
    veus = params.get("veus") or (profiler.veus if profiler else None)
    graph, workload = load_workload(model, registry, default_target(veus))
    return plan_workload(graph, workload, policy, profiler, make_op, validate, **params)


# ---- the baselines of a model (scheduler/baselines.py prices them; here they are planned from a graph) ----


def graph_baselines(graph: Graph, registry: Any = None, device: DeviceSpec = H100,
                    legacy_registers: Any = "ptxas") -> Baselines:
    """The baselines of a passed graph (import and graph passes done, scheduler.pipeline.import_graph) on
    `device`: without the weight-stationary target pass, every corpus variant and library call a candidate, legacy
    kernels at ptxas' registers ("ptxas": LegacyRegisters, None: DeviceSpec.legacy_registers assumed). No vEU
    count, no plan: the same for every build of the model."""
    from vdevice.target import BackendName

    from .legacy_usage import LegacyRegisters
    target = Target(TargetKind.GPU, device.sms, backends=(BackendName.RTASK, BackendName.LIBRARY))
    registry = default_registry(registry)
    g = specialise(graph, target, registry, disabled=BASELINE_DISABLED)
    try:
        workload = build_workload(g, registry, target)
    except UnsupportedOpError as exc:
        return Baselines({}, unavailable=f"no baseline on the GPU: {str(exc).splitlines()[0]}")
    regs = LegacyRegisters() if legacy_registers == "ptxas" else legacy_registers
    profiler = Profiler(device, device.sms, legacy_registers=regs)
    profiler.resident_bytes = sum(int(w.nbytes) for w in g.weights.values())  # the L2 term, as plans have it
    return price(workload, profiler)


def model_baselines(model: str | Path | onnx.ModelProto, registry: Any = None, device: DeviceSpec = H100,
                    legacy_registers: Any = "ptxas", dims: Mapping[str, int] | None = None) -> Baselines:
    """graph_baselines of an ONNX model (imported, its `dims` fixed, and passed here)."""
    registry = default_registry(registry)
    return graph_baselines(import_graph(model, registry, dims=dims), registry, device, legacy_registers)
