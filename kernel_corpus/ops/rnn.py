"""Bindings of the custom LSTMCell op (one whole LSTM step) to the fused kernel of legacy/rnn.cu."""
from __future__ import annotations

from dataclasses import dataclass

from kernel_corpus.bindings import Binding, Launch, NodeInfo
from kernel_corpus.ops._common import IN, MAX_GRID_YZ, OUT, cdiv, i32, tensor_bytes

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


def _condition(node: NodeInfo) -> bool | str:
    """Consistent shapes of the present inputs (see lstm_cell_shape)."""
    s = lstm_cell_shape(node)
    return s if isinstance(s, str) else True


def _binding(units: int, kind: str) -> Binding:
    """lstm_cell_fused<J, BB, THREADS>: J hidden units (4J weight columns) by BB batch rows per rTask."""

    def plan(node: NodeInfo) -> list[Launch]:
        s = lstm_cell_shape(node)
        # an absent operand is never read: c_prev stands in for its pointer
        arg = [IN(i) if node.input(i) is not None else IN(C_PREV) for i in range(C_PREV)]
        args = [*arg, IN(C_PREV), OUT(0), OUT(1), i32(s.B), i32(s.H), i32(s.I), i32(s.KH), i32(s.pre_stride)]
        grid = (cdiv(s.H, units), cdiv(s.B, BATCH_ROWS), 1)
        return [Launch("lstm_cell_fused", [units, BATCH_ROWS, THREADS], grid, (THREADS, 1, 1), 0, args, s.flops,
                       tensor_bytes(*node.inputs, *node.outputs))]

    return Binding("LSTMCell", f"fused_j{units}", SOURCE, kind, _condition, plan, ("lstm_cell_fused",),
                   note="custom op: x [B,I], Wt [I,4H] (both optional), h_prev [B,H], Rt [H,4H] (both optional), "
                        "pre [4H] or [B,4H] (optional), c_prev [B,H] -> h [B,H], c [B,H]; gates in ONNX order "
                        "i,o,f,c")


BINDINGS = [_binding(8, "fast"), _binding(32, "efficient")]
