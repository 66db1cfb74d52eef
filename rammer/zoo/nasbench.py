"""NASBench-101-style network: one random cell (a DAG of conv/pool vertices) from the seed, stacked.

The cell follows NASBench-101: vertex 0 is the input and the last vertex the output; each interior vertex
sums its inputs (the cell input enters through a 1x1 conv-bn-relu projection, wider tensors are sliced to
the vertex's channels) and applies conv3x3-bn-relu, conv1x1-bn-relu or maxpool3x3; the output concatenates
the interior vertices that feed it and adds the projected input when input -> output is an edge. Output
channels are split evenly over the concatenated vertices, other vertices take the widest successor.
Bounds: at most 7 vertices (5 operators) and 7 edges, so at most 9 operators and 7 edges as asked.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .builder import GraphBuilder

OPS = ("conv3x3-bn-relu", "conv1x1-bn-relu", "maxpool3x3")
MAX_VERTICES = 7
MAX_EDGES = 7


@dataclass(frozen=True)
class CellSpec:
    """Upper-triangular adjacency matrix (vertex i -> j for i < j) and the op of each interior vertex."""

    matrix: np.ndarray
    ops: tuple[str, ...]

    @property
    def size(self) -> int:
        """Number of vertices including input and output."""
        return self.matrix.shape[0]


def _reachable(matrix: np.ndarray, start: int, forward: bool) -> set[int]:
    """Vertices reachable from start along (forward) or against (backward) the edges."""
    seen, todo = {start}, [start]
    while todo:
        v = todo.pop()
        nxt = np.nonzero(matrix[v] if forward else matrix[:, v])[0]
        for u in map(int, nxt):
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return seen


def prune(matrix: np.ndarray, ops: list[str]) -> CellSpec | None:
    """Drop vertices not on an input -> output path (as NASBench does); None if the output is unreachable."""
    last = matrix.shape[0] - 1
    keep = sorted(_reachable(matrix, 0, True) & _reachable(matrix, last, False))
    if 0 not in keep or last not in keep:
        return None
    sub = matrix[np.ix_(keep, keep)]
    return CellSpec(sub, tuple(ops[v - 1] for v in keep[1:-1]))


def random_cell(seed: int, tries: int = 10_000) -> CellSpec:
    """Sample a valid cell: random DAG on 7 vertices, pruned, with 1..7 edges and at least one operator."""
    rng = np.random.default_rng(seed)
    for _ in range(tries):
        matrix = np.triu(rng.integers(0, 2, size=(MAX_VERTICES, MAX_VERTICES)), k=1)
        ops = [OPS[i] for i in rng.integers(0, len(OPS), size=MAX_VERTICES - 2)]
        spec = prune(matrix, ops)
        if spec is not None and spec.size > 2 and 0 < spec.matrix.sum() <= MAX_EDGES:
            return spec
    raise RuntimeError(f"no valid NASBench cell found for seed {seed} in {tries} tries")


def vertex_channels(spec: CellSpec, cin: int, cout: int) -> list[int]:
    """NASBench channel rule: the output's width is split over the vertices that feed it."""
    last = spec.size - 1
    ch = [0] * spec.size
    ch[0], ch[last] = cin, cout
    feeders = [v for v in range(1, last) if spec.matrix[v, last]]
    for i, v in enumerate(feeders):
        ch[v] = cout // len(feeders) + (1 if i < cout % len(feeders) else 0)
    for v in range(last - 1, 0, -1):
        if not spec.matrix[v, last]:
            ch[v] = max(ch[u] for u in range(v + 1, last) if spec.matrix[v, u])
    return ch


def _truncate(g: GraphBuilder, x: str, c: int) -> str:
    """Keep the first c channels (NASBench sums tensors of unequal width this way)."""
    return x if g.shapes[x][1] == c else g.slice(x, [0], [c], [1])


def _vertex_op(g: GraphBuilder, x: str, op: str, c: int) -> str:
    """Apply one interior vertex's operator."""
    if op == "maxpool3x3":
        return g.pool("MaxPool", x, 3, 1, 1)
    k = 3 if op == "conv3x3-bn-relu" else 1
    return g.conv_bn_relu(x, c, k, 1, k // 2)


def cell(g: GraphBuilder, x: str, spec: CellSpec, cout: int) -> str:
    """Build one cell on x with cout output channels."""
    last = spec.size - 1
    ch = vertex_channels(spec, g.shapes[x][1], cout)
    values = {0: x}
    for v in range(1, last):
        ins = [_truncate(g, values[u], ch[v]) for u in range(1, v) if spec.matrix[u, v]]
        if spec.matrix[0, v]:
            ins.append(g.conv_bn_relu(x, ch[v], 1))
        values[v] = _vertex_op(g, g.add_all(ins), spec.ops[v - 1], ch[v])
    feeders = [values[v] for v in range(1, last) if spec.matrix[v, last]]
    out = g.concat(feeders) if feeders else None
    if spec.matrix[0, last]:
        proj = g.conv_bn_relu(x, cout, 1)
        out = proj if out is None else g.add(out, proj)
    return out


@dataclass(frozen=True)
class NasBenchConfig:
    """Image, stem channels, stacks, cells per stack, classes (NASBench-101: 32, 128, 3, 3, 10)."""

    image: int
    stem: int
    stacks: int
    cells: int
    classes: int = 10


def nasbench(g: GraphBuilder, batch: int, small: bool) -> None:
    """Stem conv, stacks of the seed's cell with 2x2 max-pool downsampling and channel doubling, classifier."""
    cfg = NasBenchConfig(16, 16, 3, 1) if small else NasBenchConfig(32, 128, 3, 3)
    spec = random_cell(g.seed)
    x = g.conv_bn_relu(g.input("input", (batch, 3, cfg.image, cfg.image)), cfg.stem, 3, 1, 1)
    c = cfg.stem
    for stack in range(cfg.stacks):
        if stack > 0:
            x = g.pool("MaxPool", x, 2, 2)
            c *= 2
        for _ in range(cfg.cells):
            x = cell(g, x, spec, c)
    g.output(g.classifier(x, cfg.classes), "output")
