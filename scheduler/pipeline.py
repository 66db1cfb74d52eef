"""ONNX model -> plan in one call (import, passes, support check, policy, validation) for `rammer build`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import onnx
from vdevice.program import validate_plan

from .graph import Graph, SchedulerError
from .onnx_import import import_model
from .passes import run_passes
from .plan import MakeOp, Plan, default_vdevice_op
from .policies import POLICIES
from .profiler import Profiler
from .workload import Workload, build_workload


@dataclass
class Scheduled:
    """A plan with the passed graph and the workload it was made from."""

    plan: Plan
    graph: Graph
    workload: Workload


def op_dependencies(plan: Plan, workload: Workload) -> list[tuple[int, int]]:
    """Op-level edges derived from the DFG, not from the schedule: each launch after the one before it of the
    same node, the first launch of a node after the last launch of each predecessor node."""
    by_node: dict[str, list[int]] = {}
    for i, op in enumerate(plan.ops):
        by_node.setdefault(op.node, []).append(i)
    edges = []
    for spec in workload.ops:
        ids = sorted(by_node.get(spec.name, []), key=lambda i: plan.ops[i].launch_index)
        if not ids:
            raise SchedulerError(f"node '{spec.name}' is missing from the plan")
        edges += list(zip(ids, ids[1:]))
        for p in spec.preds:
            edges.append((max(by_node[workload.ops[p].name], key=lambda i: plan.ops[i].launch_index), ids[0]))
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
    return plan


def load_workload(model: str | Path | onnx.ModelProto, registry: Any = None, disabled: tuple[str, ...] = (),
                  after: Callable[[str, Graph], None] | None = None) -> tuple[Graph, Workload]:
    """Import and run the passes (less the `disabled` ones; `after(name, graph)` after each), then check support:
    the graph and what the policies schedule. Without a registry: the built-in corpus at the default precision."""
    if registry is None:
        from kernel_corpus.bindings import DEFAULT_PRECISION, registry as full
        registry = full.restricted(DEFAULT_PRECISION)
    graph = run_passes(import_model(model), supports=lambda op_type: bool(registry.for_op(op_type)),
                       disabled=disabled, after=after)
    return graph, build_workload(graph, registry)


def plan_workload(graph: Graph, workload: Workload, policy: str = "wavefront", profiler: Profiler | None = None,
                  make_op: MakeOp = default_vdevice_op, validate: bool = True, **params: Any) -> Scheduled:
    """Schedule and validate; the plan carries the graph's notes and aliases."""
    profiler = profiler or Profiler()
    plan = schedule(workload, policy, profiler, make_op, validate, **params)
    plan.baselines_us = profiler.baselines_us([op.launch for op in plan.ops])
    plan.notes = graph.notes + plan.notes
    if profiler.misses:
        plan.notes.append(f"profiler: {profiler.misses} launch shape(s) not in the measured cache: cost model used")
    plan.aliases = {name: (view.base, view.offset) for name in graph.aliases
                    for view in [graph.buffer_of(name)]}
    return Scheduled(plan, graph, workload)


def plan_model(model: str | Path | onnx.ModelProto, policy: str = "wavefront", profiler: Profiler | None = None,
               registry: Any = None, make_op: MakeOp = default_vdevice_op, validate: bool = True,
               **params: Any) -> Scheduled:
    """Import, run the passes, check support, schedule, validate."""
    graph, workload = load_workload(model, registry)
    return plan_workload(graph, workload, policy, profiler, make_op, validate, **params)
