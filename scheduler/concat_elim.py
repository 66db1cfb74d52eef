"""Concat elimination: producers write straight into their slice of a Concat's output.

When a Concat's output pieces are contiguous ranges of its buffer (every dim before the axis is 1: a batch-1
channel concat of NCHW tensors), each input that a node computes becomes a view of the output at its piece's offset
(`Graph.aliases[input] = View(output, offset)`; for an input that is a whole reshape view of a node's output, that
output): its producer writes there and nothing copies it. Inputs that cannot
be placed (graph inputs, weights, existing views, graph outputs, a tensor two Concats read, a piece whose byte offset
is not 16-byte aligned for the vectorised kernels) are copied by a smaller Concat per run of neighbouring pieces,
itself writing into its slice; a Concat whose inputs are all placed disappears. A Concat's output that is itself a
piece of a later Concat is placed too (nested concats), so its producers write into the outer buffer.

Dependencies follow from the aliases: a reader of the output waits for every node writing into the part it reads
(Graph.writers / Graph.predecessors), and remove_dead keeps a node writing into a live buffer."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from .graph import Graph, Node, View, present

ALIGN_BYTES = 16  # binary_same's float4 path and tc.cu's 16-byte loads want 16-byte aligned tensors


@dataclass
class Piece:
    """One input of a Concat: its tensor, element offset in the output, and whether it was placed there."""

    name: str
    offset: int
    placed: bool = False


def piece_offsets(g: Graph, node: Node) -> list[int] | None:
    """Element offset of each input inside the Concat's output when every piece is one contiguous range."""
    shape = g.tensors[node.outputs[0]].shape
    axis = int(node.attrs.get("axis", 0)) % len(shape)
    if any(d != 1 for d in shape[:axis]):
        return None
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    offsets, start = [], 0
    for name in node.inputs:
        offsets.append(start)
        start += g.tensors[name].shape[axis] * inner
    return offsets


class ConcatEliminator:
    """One run of the pass over a graph (see the module docstring)."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.producers = g.producers()
        self.uses = Counter(self.target(i) for n in g.nodes if n.op_type == "Concat" for i in present(n.inputs))
        self.built: set[str] = set()  # outputs of Concats removed by this run: their writers build them
        self.placed = 0

    def target(self, name: str) -> str:
        """The tensor placed for a Concat input: the input, or the tensor it is a whole reshape of (a view at offset
        0 of the same size, e.g. the LSTM unroller's [1,1,B,H] view of a step's h)."""
        view = self.g.aliases.get(name)
        if view is None or view != View(view.base, 0) or view.base in self.g.aliases:
            return name
        return view.base if self.g.tensors[view.base].size == self.g.tensors[name].size else name

    def placeable(self, name: str, offset: int, out: str) -> bool:
        """Whether `name` may become a view of `out` at `offset` (see the module docstring)."""
        g = self.g
        if name not in self.producers and name not in self.built:
            return False  # a graph input, a weight or an existing view
        if name in g.aliases or name in g.outputs or name in g.inputs or self.uses[name] != 1:
            return False
        t = g.tensors[name]
        return t.dtype == g.tensors[out].dtype and offset * np.dtype(t.dtype).itemsize % ALIGN_BYTES == 0

    def run(self) -> int:
        """Rewrite every eligible Concat; return how many Concats were removed or shrunk."""
        kept: list[Node] = []
        changed = 0
        for node in self.g.nodes:
            offsets = piece_offsets(self.g, node) if node.op_type == "Concat" and node.inputs else None
            if offsets is None:
                kept.append(node)
                continue
            pieces = [Piece(n, off) for n, off in zip(node.inputs, offsets)]
            for p in pieces:
                p.placed = self.placeable(self.target(p.name), p.offset, node.outputs[0])
            if not any(p.placed for p in pieces):
                kept.append(node)
                continue
            for p in pieces:
                if p.placed:
                    self.g.aliases[self.target(p.name)] = View(node.outputs[0], p.offset)
                    self.placed += 1
            kept += self.copies(node, pieces)
            self.built.add(node.outputs[0])
            changed += 1
        self.g.nodes = kept
        return changed

    def copies(self, node: Node, pieces: list[Piece]) -> list[Node]:
        """A Concat per run of neighbouring unplaced pieces, writing its slice of the output."""
        g, out = self.g, node.outputs[0]
        shape = list(g.tensors[out].shape)
        axis = int(node.attrs.get("axis", 0)) % len(shape)
        runs: list[list[Piece]] = [[]]
        for p in pieces:
            if p.placed:
                runs.append([])
            else:
                runs[-1].append(p)
        nodes = []
        for k, run in enumerate(r for r in runs if r):
            shape[axis] = sum(g.tensors[p.name].shape[axis] for p in run)
            part = g.add_tensor(f"{out}/part{k}", shape, g.tensors[out].dtype)
            g.aliases[part] = View(out, run[0].offset)
            nodes.append(Node(f"{node.name}/part{k}", "Concat", [p.name for p in run], [part], dict(node.attrs)))
        return nodes


def eliminate_concats(g: Graph) -> int:
    """The pass: contiguous Concats' pieces written in place by their producers; returns Concats changed."""
    elim = ConcatEliminator(g)
    changed = elim.run()
    if changed:
        g.notes.append(f"concat elimination: {elim.placed} producer(s) write into their Concat slice, "
                       f"{changed} Concat(s) removed or reduced to copies of the rest")
    return changed
