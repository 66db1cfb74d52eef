"""What the policies schedule: each node of the passed DFG with its applicable rKernels (corpus bindings) and
its predecessors; also the support check that refuses a model before anything is compiled."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernel_corpus.bindings import NodeInfo, TensorInfo
from kernel_corpus.bindings import registry as default_registry
from vdevice.target import Target, TargetKind

from .backends import BACKENDS, Candidate, default_backends
from .graph import Graph, Node, SchedulerError, present

__all__ = ["Candidate", "OpSpec", "UnsupportedOpError", "Workload", "build_workload", "node_choices", "node_info"]


class UnsupportedOpError(SchedulerError):
    """Some operators have no applicable rKernel in the corpus."""


@dataclass
class OpSpec:
    """A node to schedule: its candidates and the indices of the nodes whose outputs it reads."""

    index: int
    name: str
    op_type: str
    candidates: list[Candidate]
    preds: list[int] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)  # tensor names ('' absent), for the launch's In(i)
    outputs: list[str] = field(default_factory=list)
    calls: list[Any] = field(default_factory=list)  # scheduler.plan.LibraryCall: library steps that can run it

    def backends(self) -> list[str]:
        """The backends that can run this node: its candidates' and, when it has a call, the library."""
        found = list(dict.fromkeys(c.backend for c in self.candidates))
        return found + list(dict.fromkeys(c.backend for c in self.calls))


@dataclass
class Workload:
    """Nodes in topological order with their candidates; the graph they came from (None when built by hand)."""

    ops: list[OpSpec]
    graph: Graph | None = None

    def successors(self) -> list[list[int]]:
        """Inverse of preds."""
        succ: list[list[int]] = [[] for _ in self.ops]
        for op in self.ops:
            for p in op.preds:
                succ[p].append(op.index)
        return succ


def node_info(g: Graph, node: Node, registry: Any = None) -> NodeInfo:
    """Describe a node to the corpus: static tensors ('' -> None; a strided view with its strides) and the constant
    operands its op definition asks for (`OpDef.constant_inputs`) as attributes of those names."""
    def info(name: str) -> TensorInfo | None:
        return TensorInfo(g.tensors[name].shape, g.tensors[name].dtype, g.buffer_of(name).strides) if name else None

    attrs = dict(node.attrs)
    for pos, key in enumerate((registry or default_registry).constant_inputs(node.op_type), start=1):
        if pos < len(node.inputs) and node.inputs[pos] and g.is_constant(node.inputs[pos]):
            value = g.constant(node.inputs[pos])
            attrs[key] = value.tolist() if value.ndim else value.item()
    return NodeInfo(node.op_type, node.name, [info(n) for n in node.inputs], [info(n) for n in node.outputs],
                    attrs, g.opset)


def node_choices(registry: Any, g: Graph, node: Node, target: Target) -> tuple[list[Candidate], list[Any], list[str]]:
    """What the target's enabled backends offer for a node: rKernel candidates, call steps (a fallback's only when
    nothing else runs it), and one line per refusal."""
    info, ins, outs = node_info(g, node, registry), list(node.inputs), list(node.outputs)
    enabled = [b for name, b in BACKENDS.items() if target.uses(name)]
    found: list[Candidate] = []
    calls: list[Any] = []
    reasons: list[str] = []
    for b in enabled:
        if b.candidates is not None:
            got, why = b.candidates(registry, info, target)
            found, reasons = found + got, reasons + why
        if b.calls is not None:
            steps, why = b.calls(info, ins, outs, target)
            calls, reasons = calls + steps, reasons + why
    for b in enabled if not found and not calls else []:  # nothing else runs it: e.g. onnxruntime on the CPU
        if b.fallback is not None:
            steps, why = b.fallback(info, ins, outs, target)
            calls, reasons = calls + steps, reasons + why
    return found, calls, reasons


def describe_node(g: Graph, node: Node) -> str:
    """'Op in[1,3,8,8] out[1,4,8,8] at node 'name'' for error messages."""
    ins = " ".join(f"{g.tensors[n].dtype}{list(g.tensors[n].shape)}" for n in present(node.inputs))
    outs = " ".join(f"{list(g.tensors[n].shape)}" for n in present(node.outputs))
    return f"{node.op_type} in {ins} -> out {outs} at node '{node.name}'"


def build_workload(g: Graph, registry: Any = None, target: Target | None = None) -> Workload:
    """Candidates and call steps of the target's enabled backends for every node (default: rKernels of the corpus
    and user libraries on the GPU); ONE UnsupportedOpError listing every node that has none."""
    registry = registry or default_registry
    target = target or Target(TargetKind.GPU, 1, backends=default_backends(with_libraries=True))
    index = {id(n): i for i, n in enumerate(g.nodes)}
    producers, writers = g.producers(), g.writers()
    ops, missing = [], []
    for i, node in enumerate(g.nodes):
        found, calls, reasons = node_choices(registry, g, node, target)
        if not found and not calls:
            why = "; ".join(reasons) if reasons else "no rKernel for this op type"
            missing.append(f"{describe_node(g, node)} ({why})")
        preds = [index[id(p)] for p in g.predecessors(node, producers, writers)]
        if any(p >= i for p in preds):
            raise SchedulerError(f"node '{node.name}' reads a tensor produced later: graph not in topological order")
        ops.append(OpSpec(i, node.name, node.op_type, found, preds, list(node.inputs), list(node.outputs), calls))
    if missing:
        raise UnsupportedOpError(f"{len(missing)} unsupported operator(s), nothing compiled: " + " | ".join(missing))
    return Workload(ops, g)
