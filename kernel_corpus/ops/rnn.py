"""Bindings of the custom LSTMCell op (one whole LSTM step) to the fused kernel of legacy/rnn.cu."""
from __future__ import annotations

from dataclasses import dataclass

from onnx import helper

from kernel_corpus.bindings import Binding, In, Launch, NodeInfo, OpDef, Out, Shape
from kernel_corpus.ops._common import MAX_GRID_YZ, cdiv, i32, tensor_bytes
from kernel_corpus.ops.elementwise import lstm_pointwise_nodes

SOURCE = "rnn.cu"
THREADS = 256
BATCH_ROWS = 4        # BB: batch rows per rTask (each weight read once for all of them)
CELL_FLOPS = 40       # per (b, j): three sigmoids, two tanh, the c and h updates
X, WT, H_PREV, RT, PRE, C_PREV = range(6)  # node inputs, in this order ('' / None when absent)


@dataclass(frozen=True)
class LstmCellShape:
    """Sizes of one LSTMCell node: batch, hidden, input (0: no x term), recurrent rows (0 or H), pre stride."""

    B: int
    H: int
    I: int
    KH: int
    pre_stride: int   # 0: bias [4H], 4H: per-row [B, 4H], -1: no pre term

    @property
    def flops(self) -> int:
        """Multiply-adds of both products count twice, plus the pre add and the cell per (b, j)."""
        pre = 4 if self.pre_stride >= 0 else 0
        return self.B * (8 * self.H * (self.I + self.KH) + (pre + CELL_FLOPS) * self.H)


def lstm_cell_shape(node: NodeInfo) -> LstmCellShape | str:
    """The sizes of an LSTMCell node, or one line saying which input or output does not fit."""
    c_prev, h_out, c_out = node.input(C_PREV), node.output(0), node.output(1)
    if c_prev is None or len(c_prev.shape) != 2:
        return f"needs c_prev [B, H] as input {C_PREV}"
    B, H = c_prev.shape
    if [t.shape if t is not None else None for t in (h_out, c_out)] != [(B, H), (B, H)]:
        return f"outputs must be h and c of shape {[B, H]}"
    x, wt, h_prev, rt, pre = (node.input(i) for i in (X, WT, H_PREV, RT, PRE))
    if (x is None) != (wt is None):
        return "x and Wt must be given together"
    I = 0 if x is None else x.shape[-1]
    if x is not None and (x.shape != (B, I) or wt.shape != (I, 4 * H)):
        return f"needs x [B, I] and Wt [I, 4H] with B = {B}, H = {H}, got {list(x.shape)} and {list(wt.shape)}"
    if (h_prev is None) != (rt is None):
        return "h_prev and Rt must be given together"
    if h_prev is not None and (h_prev.shape != (B, H) or rt.shape != (H, 4 * H)):
        return f"needs h_prev [{B}, {H}] and Rt [{H}, {4 * H}], got {list(h_prev.shape)} and {list(rt.shape)}"
    pre_stride = -1
    if pre is not None:
        if pre.shape not in ((4 * H,), (B, 4 * H)):
            return f"pre must be [{4 * H}] or [{B}, {4 * H}], got {list(pre.shape)}"
        pre_stride = 0 if len(pre.shape) == 1 else 4 * H
    if cdiv(B, BATCH_ROWS) > MAX_GRID_YZ:
        return f"batch {B} needs more than {MAX_GRID_YZ} rTask rows"
    return LstmCellShape(B, H, I, 0 if h_prev is None else H, pre_stride)


def _batch_condition(rows: int):
    """The shape condition, and which batch a BB = rows instantiation serves: BB = 1 exactly batch 1 (a BB = 4 block
    would spend three quarters of its multiply-adds on absent rows), BB > 1 the batches above 1."""

    def condition(node: NodeInfo) -> str | None:
        s = lstm_cell_shape(node)
        if isinstance(s, str):
            return s
        if (rows == 1) != (s.B == 1):
            return "batch 1 has its own instantiation (BB = 1)" if s.B == 1 else f"BB = 1 serves batch 1, not {s.B}"
        return None

    return condition


def _binding(units: int, kind: str, rows: int = BATCH_ROWS) -> Binding:
    """lstm_cell_fused<J, BB, THREADS>: J hidden units (4J weight columns) by BB = rows batch rows per rTask."""

    def plan(node: NodeInfo) -> list[Launch]:
        s = lstm_cell_shape(node)
        # an absent operand is never read: c_prev stands in for its pointer
        arg = [In(i) if node.input(i) is not None else In(C_PREV) for i in range(C_PREV)]
        args = [*arg, In(C_PREV), Out(0), Out(1), i32(s.B), i32(s.H), i32(s.I), i32(s.KH), i32(s.pre_stride)]
        grid = (cdiv(s.H, units), cdiv(s.B, rows), 1)
        return [Launch("lstm_cell_fused", [units, rows, THREADS], grid, (THREADS, 1, 1), 0, args, s.flops,
                       tensor_bytes(*node.inputs, *node.outputs))]

    variant = f"fused_j{units}" if rows == BATCH_ROWS else f"fused_j{units}_b{rows}"
    return Binding("LSTMCell", variant, SOURCE, kind, _batch_condition(rows), plan, ("lstm_cell_fused",),
                   note="custom op: x [B,I], Wt [I,4H] (both optional), h_prev [B,H], Rt [H,4H] (both optional), "
                        "pre [4H] or [B,4H] (optional), c_prev [B,H] -> h [B,H], c [B,H]; gates in ONNX order "
                        "i,o,f,c")


def _vec4_condition(node: NodeInfo) -> str | None:
    """Batch 1 and H % 4 == 0 (whole float4 column quads)."""
    s = lstm_cell_shape(node)
    if isinstance(s, str):
        return s
    if s.B != 1 or s.H % 4:
        return f"needs batch 1 and H % 4 == 0 (float4 weight loads), got B = {s.B}, H = {s.H}"
    return None


def _vec4_binding(units: int, kind: str) -> Binding:
    """lstm_cell_vec4<J, THREADS>: batch 1, J hidden units per rTask, 16-byte weight loads."""

    def plan(node: NodeInfo) -> list[Launch]:
        s = lstm_cell_shape(node)
        arg = [In(i) if node.input(i) is not None else In(C_PREV) for i in range(C_PREV)]
        args = [*arg, In(C_PREV), Out(0), Out(1), i32(s.H), i32(s.I), i32(s.KH), i32(s.pre_stride)]
        return [Launch("lstm_cell_vec4", [units, THREADS], (cdiv(s.H, units), 1, 1), (THREADS, 1, 1), 0, args,
                       s.flops, tensor_bytes(*node.inputs, *node.outputs))]

    return Binding("LSTMCell", f"vec4_j{units}", SOURCE, kind, _vec4_condition, plan, ("lstm_cell_vec4",))


def _equivalent(node: NodeInfo, ins: list[str], outs: list[str], dtype) -> tuple[list, list]:
    """LSTMCell as standard ONNX ops: gates = pre + x·Wt + h_prev·Rt (absent terms left out), then the cell."""
    ins = ins + [""] * (6 - len(ins))
    terms, nodes = [], []
    for a, b, name in ((ins[X], ins[WT], "xw"), (ins[H_PREV], ins[RT], "hr")):
        if a and b:
            nodes.append(helper.make_node("MatMul", [a, b], [name]))
            terms.append(name)
    if ins[PRE]:
        terms.append(ins[PRE])
    gates = terms[0]
    for i, term in enumerate(terms[1:]):
        nodes.append(helper.make_node("Add", [gates, term], [f"gates{i}"]))
        gates = f"gates{i}"
    return nodes + lstm_pointwise_nodes(gates, ins[C_PREV], outs[0], outs[1], "cell"), []


def _step(b: int, h: int, isize: int, recurrent: bool = True, pre: str | None = "bias", **kw) -> Shape:
    """An LSTMCell node: x/Wt when isize > 0, h_prev/Rt when recurrent, pre 'bias' [4H] or 'rows' [B, 4H]."""
    g = 4 * h
    pre_shape = {"bias": (g,), "rows": (b, g), None: None}[pre]
    return Shape(((b, isize) if isize else None, (isize, g) if isize else None, (b, h) if recurrent else None,
                  (h, g) if recurrent else None, pre_shape, (b, h)), outputs=2, **kw)


# At batch 1 the float4 cell comes first: the cost model cannot tell it from the scalar BB = 1 one (same work, bytes
# and rTasks), and a tie goes to the first candidate.
OPS = [OpDef("LSTMCell", (_binding(8, "fast"), _binding(32, "efficient"), _vec4_binding(8, "fast"),
                          _vec4_binding(32, "efficient"), _binding(8, "fast", 1), _binding(32, "efficient", 1)),
             (_step(1, 37, 20), _step(1, 70, 0, pre="rows", tol=1e-4), _step(1, 20, 9, pre=None),
              _step(1, 36, 13, tol=1e-4), _step(1, 44, 0, recurrent=False, pre="rows"),
              _step(3, 100, 37, tol=1e-4), _step(6, 20, 0, pre="rows"), _step(9, 12, 5, pre=None),
              _step(2, 10, 0, recurrent=False, pre="rows"), _step(5, 9, 7, recurrent=False),
              _step(1, 256, 256, test=False), _step(1, 256, 0, pre="rows", test=False),
              _step(8, 128, 0, pre="rows", test=False)),
             equivalent=_equivalent, custom=True)]
