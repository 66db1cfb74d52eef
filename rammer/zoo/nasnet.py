"""NASNet-A CIFAR (6@768): normal and reduction cells of separable convs, pools, Adds and a Concat.

Approximation of the TF-slim model, faithful in structure: the cell wiring (operations, hidden-state
indices, unused-state concat) is NASNet-A's; omitted are the auxiliary head, drop-path and dropout. The
factorised reduction of the previous cell's output takes its shifted path with two one-axis Slices and a
stride-2 1x1 average pool (slim pads then slices; on even grids the result is the same, see
_factorized_reduction). Filters: 32, 64, 128 per stack, so the last normal cell has 6 x 128 = 768 channels.
"""
from __future__ import annotations

from dataclasses import dataclass

from .builder import GraphBuilder

# NASNet-A cells: pairs of (operation, hidden-state index) combined by Add; states 0/1 are cur/prev.
NORMAL = (("sep5", 0), ("sep3", 1), ("sep5", 1), ("sep3", 1), ("avg3", 0), ("id", 1),
          ("avg3", 1), ("avg3", 1), ("sep3", 0), ("id", 0))
NORMAL_USED = (1, 0, 0, 0, 0, 0, 0)
REDUCTION = (("sep5", 0), ("sep7", 1), ("max3", 0), ("sep7", 1), ("avg3", 0), ("sep5", 1),
             ("id", 3), ("avg3", 2), ("sep3", 2), ("max3", 0))
REDUCTION_USED = (1, 1, 1, 0, 0, 0, 0)


@dataclass(frozen=True)
class NasNetConfig:
    """Image size, stem width, first-stack filters, normal cells per stack, stacks, classes."""

    image: int
    stem: int
    filters: int
    cells: int
    stacks: int
    classes: int = 10


def _separable(g: GraphBuilder, x: str, f: int, k: int, stride: int) -> str:
    """slim's separable_KxK_2: (ReLU, depthwise KxK, pointwise 1x1, BN) twice; the first may stride."""
    for s in (stride, 1):
        c = g.shapes[x][1]
        x = g.relu(x)
        x = g.conv(x, c, k, s, k // 2, group=c, bias=False)
        x = g.conv_bn(x, f, 1)
    return x


def _apply(g: GraphBuilder, x: str, op: str, f: int, stride: int) -> str:
    """One cell operation on a hidden state; pools whose width differs from f get a 1x1 conv + BN."""
    if op.startswith("sep"):
        return _separable(g, x, f, int(op[3:]), stride)
    if op == "id":
        return x  # NASNet-A applies identity only to states of the cell's own grid (stride 1)
    y = g.pool("AveragePool" if op == "avg3" else "MaxPool", x, 3, stride, 1)
    return y if g.shapes[y][1] == f else g.conv_bn(y, f, 1)


def _factorized_reduction(g: GraphBuilder, x: str, f: int) -> str:
    """Halve the grid of prev with two shifted stride-2 1x1 paths of f/2 channels each, then BN.

    slim pads the second path by one at the bottom/right and drops the first row/column; on an even grid
    the stride-2 samples never reach the padding, so Slice [1:, 1:] then the same pool is exact.
    """
    x = g.relu(x)
    _, _, h, w = g.shapes[x]
    if h % 2 or w % 2:
        raise ValueError(f"NASNet factorized reduction needs an even grid, got {h}x{w}")
    p1 = g.conv(g.pool("AveragePool", x, 1, 2), f // 2, 1, bias=False)
    shifted = g.slice(g.slice(x, [1], [h], [2]), [1], [w], [3])  # one axis per Slice, as the corpus binds
    p2 = g.conv(g.pool("AveragePool", shifted, 1, 2), f - f // 2, 1, bias=False)
    return g.bn(g.concat([p1, p2]))


def _cell(g: GraphBuilder, cur: str, prev: str, f: int, reduction: bool) -> str:
    """A NASNet-A cell: base 1x1 convs, five pairwise combinations, concat of the unused states."""
    if g.shapes[prev][2] != g.shapes[cur][2]:
        prev = _factorized_reduction(g, prev, f)
    elif g.shapes[prev][1] != f:
        prev = g.conv_bn(g.relu(prev), f, 1)
    states = [g.conv_bn(g.relu(cur), f, 1), prev]
    ops, used = (REDUCTION, REDUCTION_USED) if reduction else (NORMAL, NORMAL_USED)
    for (op_l, i_l), (op_r, i_r) in zip(ops[0::2], ops[1::2]):
        left = _apply(g, states[i_l], op_l, f, 2 if reduction and i_l < 2 else 1)
        right = _apply(g, states[i_r], op_r, f, 2 if reduction and i_r < 2 else 1)
        states.append(g.add(left, right))
    return g.concat([s for s, u in zip(states, used) if not u])


def nasnet(g: GraphBuilder, batch: int, small: bool) -> None:
    """NASNet-A 6@768 on CIFAR-10 32x32 (N = 6 normal cells per stack, 3 stacks, 2 reduction cells).

    --small: 16x16 input, filters 8, one normal cell per stack and two stacks (one reduction cell).
    """
    cfg = NasNetConfig(16, 24, 8, 1, 2) if small else NasNetConfig(32, 96, 32, 6, 3)
    x = g.conv_bn(g.input("input", (batch, 3, cfg.image, cfg.image)), cfg.stem, 3, 1, 1)
    prev, f = x, cfg.filters
    for stack in range(cfg.stacks):
        if stack > 0:
            f *= 2
            prev, x = x, _cell(g, x, prev, f, reduction=True)
        for _ in range(cfg.cells):
            prev, x = x, _cell(g, x, prev, f, reduction=False)
    g.output(g.classifier(g.relu(x), cfg.classes), "output")
