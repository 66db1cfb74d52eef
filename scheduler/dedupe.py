"""Common-subexpression elimination of whole nodes: a node with the op type, inputs and attributes of an earlier one
computes the same outputs, so its readers read the earlier node's instead and it disappears (one launch fewer).

NASNet's cells apply `Relu` (and pooling) to the same cell input once per branch: 98 of its full-size nodes are
such repeats. Removing them first also lets `fuse_activations` fold the remaining Relu into the Conv that feeds it
when that Relu was the Conv's only other reader. Random generators are never merged; a repeated node whose output is
a graph output stays as a view of the first node's output."""
from __future__ import annotations

import dataclasses

from .graph import Graph, Node, View, present

NEVER = ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial",
         "If", "Loop", "Scan")  # a fresh value each time, or a subgraph attribute


def node_key(node: Node) -> tuple:
    """What makes two nodes compute the same outputs: op type, inputs in order, attributes."""
    return node.op_type, tuple(node.inputs), repr(sorted(node.attrs.items()))


def dedupe_nodes(g: Graph) -> int:
    """Drop each node that repeats an earlier one (see the module docstring); return how many."""
    rename: dict[str, str] = {}
    seen: dict[tuple, Node] = {}
    kept: list[Node] = []
    for node in g.nodes:
        node.inputs = [rename.get(i, i) for i in node.inputs]
        first = seen.get(node_key(node)) if node.op_type not in NEVER and present(node.outputs) else None
        if first is None or any(o and not (k < len(first.outputs) and first.outputs[k])
                                for k, o in enumerate(node.outputs)):
            seen.setdefault(node_key(node), node)
            kept.append(node)
            continue
        for out, same in zip(node.outputs, first.outputs):
            if not out:
                continue
            if out in g.outputs:
                g.aliases[out] = View(same, 0)  # the caller's name stays, its buffer is the first node's
            else:
                rename[out] = same
                del g.tensors[out]
    g.aliases = {k: dataclasses.replace(v, base=rename[v.base]) if v.base in rename else v
                 for k, v in g.aliases.items()}
    removed = len(g.nodes) - len(kept)
    g.nodes = kept
    if removed:
        g.notes.append(f"repeated nodes (same op, inputs and attributes) merged: {removed} node(s)")
    return removed
