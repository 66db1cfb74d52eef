"""IOS operator merge (Ding et al., MLSys'21): sibling operators that read the same input become one larger
operator followed by a Split (a zero-copy view where the pieces are contiguous, a copy kernel otherwise):
- Convs (and FusedConvs) with one kernel geometry and activation, concatenated along output channels;
- MatMuls (and FusedMatMuls) sharing A with constant 2-D B, concatenated along N.
Each group is priced both ways with the policy on the profiler: the siblings alone, run concurrently in one
rProgram, against the merged operator and its Split. `auto` merges where that wins by the model, `always` merges
every group (for tests and comparisons), `off` never. The mechanism (`merge_group`) is apart from the choice."""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .graph import Graph, Node, SchedulerError
from .passes import PassRecord, alias_views

MERGE_MODES = ("auto", "off", "always")
CONV_OPS = ("Conv", "FusedConv")
MATMUL_OPS = ("MatMul", "FusedMatMul")
GEOMETRY = ("kernel_shape", "strides", "pads", "dilations", "auto_pad", "group", "activation", "approximate",
            "alpha")


@dataclass(frozen=True)
class Group:
    """Sibling nodes that one merged node can replace: their kind ("conv" or "matmul") and nodes in graph order."""

    kind: str
    nodes: tuple[Node, ...]


def mergeable(g: Graph, node: Node) -> str | None:
    """The kind of merge a node can take part in, or None: constant weights (and bias), group 1."""
    ins = node.inputs + [""] * 3
    if node.outputs[0] in g.aliases:
        return None  # it writes into another buffer (a Concat's slice): its output cannot become a Split's piece
    if node.op_type in CONV_OPS:
        if int(node.attrs.get("group", 1)) != 1 or len(g.tensors[ins[0]].shape) != 4:
            return None
        return "conv" if g.is_constant(ins[1]) and (not ins[2] or g.is_constant(ins[2])) else None
    if node.op_type in MATMUL_OPS:
        a, b = g.tensors[ins[0]].shape, g.tensors[ins[1]].shape if ins[1] else ()
        if len(b) != 2 or len(a) < 2 or not g.is_constant(ins[1]):
            return None
        if ins[2] and (not g.is_constant(ins[2]) or g.tensors[ins[2]].shape != (b[1],)):
            return None
        return "matmul"
    return None


def signature(g: Graph, node: Node, kind: str) -> tuple:
    """What siblings must share to merge: op type, geometry attributes, kernel shape, bias presence."""
    ins = node.inputs + [""] * 3
    attrs = tuple((k, repr(node.attrs.get(k))) for k in GEOMETRY)
    w = g.tensors[ins[1]].shape
    shape = w[1:] if kind == "conv" else w[:1]
    return (node.op_type, kind, attrs, shape, bool(ins[2]))


def sibling_groups(g: Graph) -> list[Group]:
    """Groups of two or more mergeable nodes reading the same first input with one signature."""
    by_key: dict[tuple, list[Node]] = {}
    for node in g.nodes:
        kind = mergeable(g, node)
        if kind is not None:
            by_key.setdefault((node.inputs[0], signature(g, node, kind)), []).append(node)
    return [Group(key[1][1], tuple(nodes)) for key, nodes in by_key.items() if len(nodes) > 1]


def merge_group(g: Graph, group: Group) -> list[Node]:
    """Replace the group by one node writing a concatenated output and a Split producing the original outputs
    (names kept, so readers and graph outputs are untouched); a contiguous Split becomes views. Returns the new
    nodes that remain (the merged one, and the Split unless it became views)."""
    first = group.nodes[0]
    axis_w, axis_y = (0, 1) if group.kind == "conv" else (1, -1)
    weights = [g.constant(n.inputs[1]) for n in group.nodes]
    w = g.add_weight(f"{first.inputs[1]}_merged", np.concatenate(weights, axis=axis_w))
    inputs = [first.inputs[0], w]
    if len(first.inputs) > 2 and first.inputs[2]:
        inputs.append(g.add_weight(f"{first.inputs[2]}_merged",
                                   np.concatenate([g.constant(n.inputs[2]) for n in group.nodes])))
    outs = [n.outputs[0] for n in group.nodes]
    shape = list(g.tensors[outs[0]].shape)
    shape[axis_y] = sum(g.tensors[o].shape[axis_y] for o in outs)
    y = g.add_tensor(f"{first.name}_merged_out", shape, g.tensors[outs[0]].dtype)
    merged = Node(f"{first.name}_merged", first.op_type, inputs, [y], dict(first.attrs))
    split = Node(f"{first.name}_merged_split", "Split", [y], outs, {"axis": axis_y % len(shape)})
    drop = {id(n) for n in group.nodes}
    position = min(i for i, n in enumerate(g.nodes) if id(n) in drop)
    kept = [n for n in g.nodes if id(n) not in drop]
    g.nodes = kept[:position] + [merged, split] + kept[position:]
    alias_views(g)
    return [n for n in (merged, split) if any(m is n for m in g.nodes)]


Price = Callable[[Graph, list[Node]], float]


def merge_siblings(g: Graph, mode: str, price: Price, supports: Callable[[str], bool]) -> int:
    """Merge sibling groups per `mode` (auto: where `price(graph, nodes)` of the merged nodes is below the
    siblings'); a note per group says what was chosen and why. Returns how many groups were merged."""
    if mode not in MERGE_MODES:
        raise SchedulerError(f"unknown merge mode '{mode}' (choose from {', '.join(MERGE_MODES)})")
    if mode == "off":
        return 0
    merged = 0
    for group in sibling_groups(g):
        if not supports(group.nodes[0].op_type):
            continue
        trial = copy.copy(g)
        trial.nodes, trial.tensors, trial.weights = list(g.nodes), dict(g.tensors), dict(g.weights)
        trial.aliases, trial.notes = dict(g.aliases), []
        new = merge_group(trial, group)
        if mode == "auto":
            alone, joined = price(g, list(group.nodes)), price(trial, new)
            verdict = f"merged {joined:.2f} us vs concurrent {alone:.2f} us"
            if joined >= alone:
                g.notes.append(f"IOS merge: kept {len(group.nodes)} sibling {group.nodes[0].op_type}s of "
                               f"'{group.nodes[0].inputs[0]}' concurrent ({verdict})")
                continue
        else:
            verdict = "merge forced"
        g.nodes, g.tensors, g.weights, g.aliases = trial.nodes, trial.tensors, trial.weights, trial.aliases
        merged += 1
        views = "views" if len(new) == 1 else "a Split kernel"
        g.notes.append(f"IOS merge: {len(group.nodes)} sibling {group.nodes[0].op_type}s of "
                       f"'{group.nodes[0].inputs[0]}' ({', '.join(n.name for n in group.nodes)}) merged, outputs as "
                       f"{views} ({verdict})")
    return merged


def run_merge(g: Graph, mode: str, price: Price, supports: Callable[[str], bool]) -> Graph:
    """merge_siblings with its record in the graph's pass log (build.json, report.md)."""
    t0 = time.perf_counter()
    if mode == "off":
        g.pass_log.append(PassRecord("ios_merge", skipped="--merge off"))
        return g
    n = merge_siblings(g, mode, price, supports)
    g.pass_log.append(PassRecord("ios_merge", n, time.perf_counter() - t0))
    return g
