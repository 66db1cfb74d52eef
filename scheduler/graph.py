"""The scheduler's dataflow graph: plain dataclasses for rOperators and tensors, shared by every pass."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np


class SchedulerError(Exception):
    """Base of every error the scheduler reports to a user as one line."""


@dataclass
class Tensor:
    """A tensor of the DFG with its static shape (batch fixed) and numpy dtype name."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str = "intermediate"  # input | weight | intermediate | output

    @property
    def size(self) -> int:
        """Element count (1 for a scalar)."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes of the whole tensor, for cost models and buffer planning."""
        return self.size * np.dtype(self.dtype).itemsize


@dataclass
class Node:
    """One rOperator: an ONNX op (or our custom LSTMCell) over named tensors; '' marks an absent input."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class View:
    """A zero-copy alias: the tensor lives inside `base`'s buffer starting `offset` elements in."""

    base: str
    offset: int = 0


@dataclass
class Graph:
    """A model as a DFG: nodes in topological order, tensor table, weights and the tensor -> buffer alias map."""

    nodes: list[Node]
    tensors: dict[str, Tensor]
    inputs: list[str]
    outputs: list[str]
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    aliases: dict[str, View] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    opset: int = 17
    pass_log: list[Any] = field(default_factory=list)  # scheduler.passes.PassRecord per pass, in order

    def copy(self) -> "Graph":
        """A graph a pass may change without touching this one: nodes, tables and logs copied, arrays shared (passes
        replace arrays, they never write into them)."""
        nodes = [Node(n.name, n.op_type, list(n.inputs), list(n.outputs), dict(n.attrs)) for n in self.nodes]
        return Graph(nodes, dict(self.tensors), list(self.inputs), list(self.outputs), dict(self.weights),
                     dict(self.aliases), list(self.notes), self.opset, list(self.pass_log))

    def buffer_of(self, name: str) -> View:
        """Follow the alias chain to the buffer that really holds `name` (offsets add up)."""
        offset = 0
        seen = 0
        while name in self.aliases:
            view = self.aliases[name]
            name, offset = view.base, offset + view.offset
            seen += 1
            if seen > len(self.aliases):
                raise SchedulerError(f"alias cycle through tensor '{name}'")
        return View(name, offset)

    def producers(self) -> dict[str, Node]:
        """Map each node-written tensor to the node that writes it."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        """Map each buffer (after aliasing) to the nodes that read it."""
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in present(node.inputs):
                users.setdefault(self.buffer_of(name).base, []).append(node)
        return users

    def writers(self) -> dict[str, list[tuple[int, int, Node]]]:
        """Nodes whose output is a view of another buffer (a producer that writes straight into its slice of a
        Concat's output, scheduler/concat_elim.py), by that buffer: (element offset, element count, node)."""
        found: dict[str, list[tuple[int, int, Node]]] = {}
        for node in self.nodes:
            for out in present(node.outputs):
                if out in self.aliases:
                    view = self.buffer_of(out)
                    found.setdefault(view.base, []).append((view.offset, self.tensors[out].size, node))
        return found

    def predecessors(self, node: Node, producers: dict[str, Node] | None = None,
                     writers: dict[str, list[tuple[int, int, Node]]] | None = None) -> list[Node]:
        """Nodes whose outputs `node` reads, through aliases, without repeats, in input order: the producer of the
        buffer read and every node writing into the part of it that is read (Graph.writers)."""
        producers = self.producers() if producers is None else producers
        writers = self.writers() if writers is None else writers
        preds: list[Node] = []
        for name in present(node.inputs):
            view, size = self.buffer_of(name), self.tensors[name].size
            found = [producers.get(view.base)] + [w for start, n, w in writers.get(view.base, ())
                                                  if start < view.offset + size and view.offset < start + n]
            for prod in found:
                if prod is not None and prod is not node and all(prod is not p for p in preds):
                    preds.append(prod)
        return preds

    def is_constant(self, name: str) -> bool:
        """True for a weight, directly or through an alias."""
        return self.buffer_of(name).base in self.weights

    def constant(self, name: str) -> np.ndarray:
        """The value of a constant tensor, viewed with the tensor's own shape."""
        view = self.buffer_of(name)
        flat = self.weights[view.base].reshape(-1)
        t = self.tensors[name]
        return flat[view.offset:view.offset + t.size].reshape(t.shape)

    def add_weight(self, name: str, value: np.ndarray) -> str:
        """Register a new initializer under a fresh name and return that name."""
        name = self.fresh_name(name)
        value = np.ascontiguousarray(value)
        self.weights[name] = value
        self.tensors[name] = Tensor(name, tuple(int(d) for d in value.shape), value.dtype.name, "weight")
        return name

    def add_tensor(self, name: str, shape: Iterable[int], dtype: str) -> str:
        """Register a new intermediate tensor under a fresh name and return that name."""
        name = self.fresh_name(name)
        self.tensors[name] = Tensor(name, tuple(int(d) for d in shape), dtype)
        return name

    def fresh_name(self, stem: str) -> str:
        """A tensor name not yet in the graph, derived from `stem`."""
        if stem not in self.tensors:
            return stem
        k = 1
        while f"{stem}_{k}" in self.tensors:
            k += 1
        return f"{stem}_{k}"


def present(names: Iterable[str]) -> list[str]:
    """The names of the inputs that are given (ONNX marks an omitted optional input with '')."""
    return [n for n in names if n]
