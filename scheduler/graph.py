"""The scheduler's dataflow graph: plain dataclasses for rOperators and tensors, shared by every pass."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from kernel_corpus.bindings import contiguous_strides


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
    """A zero-copy alias: the tensor lives inside `base`'s buffer starting `offset` elements in, C-ordered
    (`strides` None) or, for a strided view, element (i0, i1, ...) at offset + sum(i_d * strides[d]) (element
    strides per dimension of the tensor's own shape: a Transpose, a Split on an inner axis). Host and device read a
    view through this one description: `read` here, and the kernels that take operand strides (the GEMM family,
    bound through kernel_corpus.bindings.TensorInfo.strides)."""

    base: str
    offset: int = 0
    strides: tuple[int, ...] | None = None

    def read(self, flat: np.ndarray, shape: tuple[int, ...], writeable: bool = False) -> np.ndarray:
        """The tensor of `shape` this view shows in its base's flat (1-D) array (a numpy view, not a copy; one a
        writer may assign through with `writeable`)."""
        if self.strides is None:
            return flat[self.offset:self.offset + int(np.prod(shape, dtype=np.int64))].reshape(shape)
        lo, hi = self.extent(shape)
        item = flat.dtype.itemsize
        return np.lib.stride_tricks.as_strided(flat[lo:hi], shape, [s * item for s in self.strides],
                                               writeable=writeable)

    def extent(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """[first, last + 1) elements of the base buffer the view touches (strides are never negative)."""
        if any(d == 0 for d in shape):
            return self.offset, self.offset
        strides = self.strides if self.strides is not None else contiguous_strides(shape)
        return self.offset, self.offset + 1 + sum((d - 1) * s for d, s in zip(shape, strides))


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
        """Follow the alias chain to the buffer that really holds `name` (offsets add up). A strided view keeps its
        strides; only a C-ordered view may lie between it and the buffer (the buffer placed inside a bigger one)."""
        offset = 0
        seen = 0
        strides = None
        while name in self.aliases:
            view = self.aliases[name]
            if view.strides is not None:
                if seen:
                    raise SchedulerError(f"tensor '{name}' is a strided view seen through another view")
                strides = view.strides
            name, offset = view.base, offset + view.offset
            seen += 1
            if seen > len(self.aliases):
                raise SchedulerError(f"alias cycle through tensor '{name}'")
        return View(name, offset, strides)

    def is_strided(self, name: str) -> bool:
        """True for a strided view (not a C-ordered range of its buffer)."""
        return bool(name) and self.buffer_of(name).strides is not None

    def producers(self) -> dict[str, Node]:
        """Map each node-written tensor to the node that writes it (a node writing into another buffer through a
        view is that buffer's writer: Graph.writers)."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        """Map each buffer (after aliasing) to the nodes that read it."""
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in present(node.inputs):
                users.setdefault(self.buffer_of(name).base, []).append(node)
        return users

    def writers(self) -> dict[str, list[tuple[int, int, Node]]]:
        """Nodes whose output is a view of another buffer, by that buffer: (first element, last element + 1, node)
        of the range they write (a producer writing its slice of a Concat's output, scheduler/concat_elim.py; a GEMM
        writing a Transpose's layout through a strided view, passes.alias_views)."""
        found: dict[str, list[tuple[int, int, Node]]] = {}
        for node in self.nodes:
            for out in present(node.outputs):
                if out in self.aliases:
                    view = self.buffer_of(out)
                    found.setdefault(view.base, []).append((*view.extent(self.tensors[out].shape), node))
        return found

    def predecessors(self, node: Node, producers: dict[str, Node] | None = None,
                     writers: dict[str, list[tuple[int, int, Node]]] | None = None) -> list[Node]:
        """Nodes whose outputs `node` reads, through aliases, without repeats, in input order: the producer of the
        buffer read and every node writing into the part of it that is read (Graph.writers)."""
        producers = self.producers() if producers is None else producers
        writers = self.writers() if writers is None else writers
        preds: list[Node] = []
        for name in present(node.inputs):
            view = self.buffer_of(name)
            lo, hi = view.extent(self.tensors[name].shape)
            found = [producers.get(view.base)] + [w for start, end, w in writers.get(view.base, ())
                                                  if start < hi and lo < end]
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
        return view.read(self.weights[view.base].reshape(-1), self.tensors[name].shape)

    def add_weight(self, name: str, value: np.ndarray) -> str:
        """Register a new initializer under a fresh name and return that name."""
        name = self.fresh_name(name)
        value = np.asarray(value, order="C")
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


def viewed_bases(g: Graph) -> set[str]:
    """Buffers some alias (a view) points into."""
    return {g.buffer_of(a).base for a in g.aliases}


def sole_reader(g: Graph, name: str, consumers: dict[str, list[Node]], viewed: set[str]) -> Node | None:
    """The one node reading `name` directly when nothing else can see it (no other reader, no view of it, not a
    graph output): only then may that node be folded into `name`'s producer and `name` disappear."""
    users = consumers.get(name, [])
    if name in g.outputs or name in viewed or len(users) != 1 or name not in users[0].inputs:
        return None
    return users[0]
