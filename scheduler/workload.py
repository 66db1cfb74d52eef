"""What the policies schedule: each node of the passed DFG with its applicable rKernels (corpus bindings) and
its predecessors; also the support check that refuses a model before anything is compiled."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernel_corpus.bindings import NodeInfo, TensorInfo
from kernel_corpus.bindings import registry as default_registry
from toolchain.refusal import Refusal

from .graph import Graph, Node, SchedulerError, present

class UnsupportedOpError(SchedulerError):
    """Some operators have no applicable rKernel in the corpus."""


@dataclass
class Candidate:
    """One rKernel choice for a node: a binding variant and its concrete launches, run in order."""

    variant: str
    kind: str  # fast | efficient | only: the corpus's hint
    launches: list[Any]  # kernel_corpus.bindings.Launch
    source: str = ""
    backend: str = "rtask"  # the binding's backend: rtask (the corpus) or user (a user library)


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
    """Describe a node to the corpus: static tensors ('' -> None) and the constant operands its op definition
    asks for (`OpDef.constant_inputs`) as attributes of those names."""
    def info(name: str) -> TensorInfo | None:
        return TensorInfo(g.tensors[name].shape, g.tensors[name].dtype) if name else None

    attrs = dict(node.attrs)
    for pos, key in enumerate((registry or default_registry).constant_inputs(node.op_type), start=1):
        if pos < len(node.inputs) and node.inputs[pos] and g.is_constant(node.inputs[pos]):
            value = g.constant(node.inputs[pos])
            attrs[key] = value.tolist() if value.ndim else value.item()
    return NodeInfo(node.op_type, node.name, [info(n) for n in node.inputs], [info(n) for n in node.outputs],
                    attrs, g.opset)


def candidates(registry: Any, g: Graph, node: Node,
               backends: tuple[str, ...] = ("rtask", "user")) -> tuple[list[Candidate], list[str]]:
    """Applicable bindings of the enabled backends as candidates, and the reasons the others gave."""
    info = node_info(g, node, registry)
    found, reasons = [], []
    for binding in registry.for_op(node.op_type):
        if binding.backend not in backends:
            continue
        refused = binding.refusal(info)
        if refused is None:
            found.append(Candidate(binding.variant, binding.kind, binding.launch(info), binding.source,
                                   binding.backend))
        else:
            reasons.append(f"{binding.variant}: {refused.reason}")
    return found, reasons


def library_calls(registry: Any, g: Graph, node: Node, target: str) -> tuple[list[Any], str | None]:
    """The library step that can run a node (a list of at most one), or why none can."""
    from .backends import library_call
    call = library_call(node_info(g, node, registry), list(node.inputs), list(node.outputs), target)
    return ([], f"library: {call.reason}") if isinstance(call, Refusal) else ([call], None)


def fallback_calls(registry: Any, g: Graph, node: Node, target: str) -> tuple[list[Any], str | None]:
    """The onnxruntime step for a node nothing else implements (a list of at most one), or why there is none."""
    from .backends import fallback_call
    call = fallback_call(node_info(g, node, registry), list(node.inputs), list(node.outputs), target)
    return ([], call.reason) if isinstance(call, Refusal) else ([call], None)


def describe_node(g: Graph, node: Node) -> str:
    """'Op in[1,3,8,8] out[1,4,8,8] at node 'name'' for error messages."""
    ins = " ".join(f"{g.tensors[n].dtype}{list(g.tensors[n].shape)}" for n in present(node.inputs))
    outs = " ".join(f"{list(g.tensors[n].shape)}" for n in present(node.outputs))
    return f"{node.op_type} in {ins} -> out {outs} at node '{node.name}'"


def build_workload(g: Graph, registry: Any = None, backends: tuple[str, ...] = ("rtask", "user"),
                   target: str = "gpu") -> Workload:
    """Candidates of the enabled backends for every node (rKernels; library calls when "library" is enabled);
    ONE UnsupportedOpError listing every node that has none."""
    registry = registry or default_registry
    index = {id(n): i for i, n in enumerate(g.nodes)}
    producers = g.producers()
    ops, missing = [], []
    for i, node in enumerate(g.nodes):
        found, reasons = candidates(registry, g, node, backends)
        calls: list[Any] = []
        if "library" in backends:
            calls, why = library_calls(registry, g, node, target)
            reasons += [why] if why else []
            if not found and not calls:  # no rKernel and no vendor call: onnxruntime stands in (CPU target)
                calls, why = fallback_calls(registry, g, node, target)
                reasons += [why] if why else []
        if not found and not calls:
            why = "; ".join(reasons) if reasons else "no rKernel for this op type"
            missing.append(f"{describe_node(g, node)} ({why})")
        preds = [index[id(p)] for p in g.predecessors(node, producers)]
        if any(p >= i for p in preds):
            raise SchedulerError(f"node '{node.name}' reads a tensor produced later: graph not in topological order")
        ops.append(OpSpec(i, node.name, node.op_type, found, preds, list(node.inputs), list(node.outputs), calls))
    if missing:
        raise UnsupportedOpError(f"{len(missing)} unsupported operator(s), nothing compiled: " + " | ".join(missing))
    return Workload(ops, g)
