"""Bindings of the custom LSTMCell op (one whole LSTM step) to the fused kernels of legacy/rnn.cu, and the
weight-stationary cell: packed weights (input 6) a family of steps keeps resident on pinned vEUs."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from onnx import helper, numpy_helper

from kernel_corpus.bindings import Binding, In, Launch, NodeInfo, OpDef, Out, ResidentUse, Shape
from kernel_corpus.ops._common import MAX_GRID_YZ, cdiv, i32, tensor_bytes
from kernel_corpus.ops.elementwise import lstm_pointwise_nodes
from toolchain.refusal import Refused

SOURCE = "rnn.cu"
THREADS = 256
BATCH_ROWS = 4        # BB: batch rows per rTask (each weight read once for all of them)
CELL_FLOPS = 40       # per (b, j): three sigmoids, two tanh, the c and h updates
X, WT, H_PREV, RT, PRE, C_PREV, PACKED = range(7)  # node inputs, in this order ('' / None when absent)
# PACKED (optional): P [ceil(H/J), rows + 1, 4J], the step's weights packed per rTask (pack_lstm_weights); given, it
# supersedes Wt, Rt and a [4H] pre, and only the resident cell applies (scheduler pass resident_weights adds it)


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


def lstm_cell_shape(node: NodeInfo) -> LstmCellShape:
    """The sizes of an LSTMCell node (Refused, one line, when an input or output does not fit)."""
    c_prev, h_out, c_out = node.input(C_PREV), node.output(0), node.output(1)
    if c_prev is None or len(c_prev.shape) != 2:
        raise Refused(f"needs c_prev [B, H] as input {C_PREV}")
    B, H = c_prev.shape
    if [t.shape if t is not None else None for t in (h_out, c_out)] != [(B, H), (B, H)]:
        raise Refused(f"outputs must be h and c of shape {[B, H]}")
    x, wt, h_prev, rt, pre = (node.input(i) for i in (X, WT, H_PREV, RT, PRE))
    if (x is None) != (wt is None):
        raise Refused("x and Wt must be given together")
    I = 0 if x is None else x.shape[-1]
    if x is not None and (x.shape != (B, I) or wt.shape != (I, 4 * H)):
        raise Refused(f"needs x [B, I] and Wt [I, 4H] with B = {B}, H = {H}, got {list(x.shape)} and {list(wt.shape)}")
    if (h_prev is None) != (rt is None):
        raise Refused("h_prev and Rt must be given together")
    if h_prev is not None and (h_prev.shape != (B, H) or rt.shape != (H, 4 * H)):
        raise Refused(f"needs h_prev [{B}, {H}] and Rt [{H}, {4 * H}], got {list(h_prev.shape)} and {list(rt.shape)}")
    pre_stride = -1
    if pre is not None:
        if pre.shape not in ((4 * H,), (B, 4 * H)):
            raise Refused(f"pre must be [{4 * H}] or [{B}, {4 * H}], got {list(pre.shape)}")
        pre_stride = 0 if len(pre.shape) == 1 else 4 * H
    if cdiv(B, BATCH_ROWS) > MAX_GRID_YZ:
        raise Refused(f"batch {B} needs more than {MAX_GRID_YZ} rTask rows")
    return LstmCellShape(B, H, I, 0 if h_prev is None else H, pre_stride)


def staged_vector_bytes(isize: int, recurrent: int) -> int:
    """Dynamic shared memory of the batch-1 cells (lstm_cell_vec4, lstm_cell_resident): the step's x and h staged
    there by one coalesced load each (rnn.cu, lstm_stage_vector)."""
    return 4 * (isize + recurrent)


def _batch_condition(rows: int):
    """The shape condition, and which batch a BB = rows instantiation serves: BB = 1 exactly batch 1 (a BB = 4 block
    would spend three quarters of its multiply-adds on absent rows), BB > 1 the batches above 1."""

    def condition(node: NodeInfo) -> str | None:
        s = lstm_cell_shape(node)
        if node.input(PACKED) is not None:
            return PACKED_ONLY
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
    if node.input(PACKED) is not None:
        return PACKED_ONLY
    if s.B != 1 or s.H % 4:
        return f"needs batch 1 and H % 4 == 0 (float4 weight loads), got B = {s.B}, H = {s.H}"
    return None


def _vec4_binding(units: int, kind: str) -> Binding:
    """lstm_cell_vec4<J, THREADS>: batch 1, J hidden units per rTask, 16-byte weight loads."""

    def plan(node: NodeInfo) -> list[Launch]:
        s = lstm_cell_shape(node)
        arg = [In(i) if node.input(i) is not None else In(C_PREV) for i in range(C_PREV)]
        args = [*arg, In(C_PREV), Out(0), Out(1), i32(s.H), i32(s.I), i32(s.KH), i32(s.pre_stride)]
        return [Launch("lstm_cell_vec4", [units, THREADS], (cdiv(s.H, units), 1, 1), (THREADS, 1, 1),
                       staged_vector_bytes(s.I, s.KH), args, s.flops, tensor_bytes(*node.inputs, *node.outputs))]

    return Binding("LSTMCell", f"vec4_j{units}", SOURCE, kind, _vec4_condition, plan, ("lstm_cell_vec4",))


def _equivalent(node: NodeInfo, ins: list[str], outs: list[str], dtype) -> tuple[list, list]:
    """LSTMCell as standard ONNX ops: gates = pre + x·Wt + h_prev·Rt (absent terms left out), then the cell."""
    ins = ins + [""] * (7 - len(ins))
    if ins[PACKED]:
        return _packed_equivalent(node, ins, outs, dtype)
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


def _packed_equivalent(node: NodeInfo, ins: list[str], outs: list[str], dtype) -> tuple[list, list]:
    """With packed weights P: v = [x | h (zeros when absent) | 1] times P [blocks, rows + 1, 4J] gives each
    block's columns (gate g at g*J + jj), which reshape and transpose back to the [1, 4H] gates, plus pre rows."""
    p, c_prev = node.input(PACKED), node.input(C_PREV)
    blocks, rows1, cols = p.shape
    H, J, I = c_prev.shape[1], cols // 4, node.input(X).shape[1] if ins[X] else 0
    inits, parts = [], [ins[X]] if ins[X] else []
    if ins[H_PREV]:
        parts.append(ins[H_PREV])
    elif rows1 - 1 > I:
        inits.append(numpy_helper.from_array(np.zeros((1, rows1 - 1 - I), dtype), "packed_zero_h"))
        parts.append("packed_zero_h")
    inits += [numpy_helper.from_array(np.ones((1, 1), dtype), "packed_one"),
              numpy_helper.from_array(np.array([blocks, 4, J], np.int64), "packed_s3"),
              numpy_helper.from_array(np.array([4, blocks * J], np.int64), "packed_s2"),
              numpy_helper.from_array(np.array([1, 4 * H], np.int64), "packed_s1"),
              numpy_helper.from_array(np.array([0], np.int64), "packed_0"),
              numpy_helper.from_array(np.array([H], np.int64), "packed_h"),
              numpy_helper.from_array(np.array([1], np.int64), "packed_ax")]
    nodes = [helper.make_node("Concat", [*parts, "packed_one"], ["packed_v"], axis=1),
             helper.make_node("MatMul", ["packed_v", ins[PACKED]], ["packed_mm"]),
             helper.make_node("Reshape", ["packed_mm", "packed_s3"], ["packed_r3"]),
             helper.make_node("Transpose", ["packed_r3"], ["packed_t"], perm=[1, 0, 2]),
             helper.make_node("Reshape", ["packed_t", "packed_s2"], ["packed_r2"]),
             helper.make_node("Slice", ["packed_r2", "packed_0", "packed_h", "packed_ax"], ["packed_sl"]),
             helper.make_node("Reshape", ["packed_sl", "packed_s1"], ["packed_gates"])]
    gates = "packed_gates"
    if ins[PRE] and node.input(PRE).shape == (1, 4 * H):
        nodes.append(helper.make_node("Add", [gates, ins[PRE]], ["packed_gates_pre"]))
        gates = "packed_gates_pre"
    return nodes + lstm_pointwise_nodes(gates, ins[C_PREV], outs[0], outs[1], "cell"), inits


# ---- the weight-stationary cell -------------------------------------------------------------------------------
PACKED_ONLY = "packed weights P (input 6) are given: the resident cell reads them"


def resident_units(rows: int, hidden: int, budget: int, cap: int = 0) -> int | None:
    """J (hidden units per rTask) of the packed slices: the fewest rTasks whose slice of (rows + 1) x 4J floats fits
    `budget` bytes of a vEU's shared memory and whose J is at most `cap` (0: no cap), then J as even as that allows
    (least zero padding); None when not even J = 1 fits. At most THREADS / 4 (each of a block's threads owns at
    least one weight column)."""
    most = min(THREADS // 4, budget // (16 * (rows + 1)), cap or THREADS // 4)
    if most < 1:
        return None
    return cdiv(hidden, cdiv(hidden, most))


def pack_lstm_weights(wt: np.ndarray | None, rt: np.ndarray | None, bias: np.ndarray | None, hidden: int,
                      units: int) -> np.ndarray:
    """P [ceil(H/J), rows + 1, 4J] (rows = I + KH): block b, row k holds [Wt; Rt; bias][k][g*H + b*J + jj] at
    column g*J + jj (zero past H), so rTask b of lstm_cell_resident reads one contiguous slice."""
    parts = [a for a in (wt, rt) if a is not None]
    rows = sum(a.shape[0] for a in parts)
    full = np.zeros((rows + 1, 4 * hidden), dtype=np.float32)
    if parts:
        full[:rows] = np.concatenate(parts, axis=0)
    if bias is not None:
        full[rows] = bias
    blocks = cdiv(hidden, units)
    padded = np.zeros((rows + 1, 4, blocks * units), dtype=np.float32)
    padded[:, :, :hidden] = full.reshape(rows + 1, 4, hidden)
    return np.asarray(padded.reshape(rows + 1, 4, blocks, units).transpose(2, 0, 1, 3)
                                .reshape(blocks, rows + 1, 4 * units), order="C")


def _resident_condition(node: NodeInfo) -> str | None:
    """Batch 1 with packed weights P whose rows are x's, then h's (or none), for J <= THREADS / 4 units."""
    s = lstm_cell_shape(node)
    p = node.input(PACKED)
    if p is None:
        return "needs packed weights P (input 6, the resident_weights pass)"
    if s.B != 1:
        return f"the resident cell serves batch 1, not {s.B}"
    if len(p.shape) != 3 or p.shape[2] % 4 or not 0 < p.shape[2] <= THREADS:
        return f"P must be [blocks, rows + 1, 4J] with 4J <= {THREADS}, got {list(p.shape)}"
    blocks, rows1, cols = p.shape
    if blocks != cdiv(s.H, cols // 4) or rows1 - 1 not in (s.I, s.I + s.H) or (s.KH and rows1 - 1 != s.I + s.H):
        return f"P {list(p.shape)} does not pack I = {s.I}, H = {s.H} (rows I or I + H, ceil(H/J) blocks)"
    return None


def _resident_plan(node: NodeInfo) -> list[Launch]:
    """The family head loads its vEUs' resident slices first (resident_load); every step then runs
    lstm_cell_resident, whose global traffic is x, h, pre rows and the state: the weights stay on chip."""
    s = lstm_cell_shape(node)
    p = node.input(PACKED)
    blocks, rows1, cols = p.shape
    pre_rows = node.input(PRE) is not None and node.input(PRE).shape == (1, 4 * s.H)
    use = ResidentUse(str(node.attr("family", node.name)), (PACKED,), 4 * rows1 * cols)
    arg = [In(i) if node.input(i) is not None else In(C_PREV) for i in (X, H_PREV)]
    pre = In(PRE) if pre_rows else In(C_PREV)
    args = [*arg, In(PACKED), pre, In(C_PREV), Out(0), Out(1), i32(s.H), i32(s.I), i32(s.KH), i32(rows1 - 1),
            i32(int(pre_rows))]
    moved = tensor_bytes(node.input(X), node.input(H_PREV), node.input(PRE) if pre_rows else None,
                         node.input(C_PREV), *node.outputs)
    cell = Launch("lstm_cell_resident", [cols // 4, THREADS], (blocks, 1, 1), (THREADS, 1, 1),
                  staged_vector_bytes(s.I, s.KH), args, s.flops, moved, resident=use)
    if not node.attr("family_head", 1):
        return [cell]
    load = Launch("resident_load", [], (blocks, 1, 1), (THREADS, 1, 1), 0, [In(PACKED), i32(rows1 * cols // 4)], 0,
                  p.nbytes, resident=dataclasses.replace(use, load=True))
    return [load, cell]


def _packed_step(h: int, isize: int, units: int, recurrent: bool = True, rows_h: bool = True,
                 pre: str | None = "bias", **kw) -> Shape:
    """An LSTMCell node with packed weights for J = units (rows: x's, then h's when rows_h)."""
    rows = isize + (h if rows_h else 0)
    base = _step(1, h, isize, recurrent, pre)
    return Shape((*base.inputs, (cdiv(h, units), rows + 1, 4 * units)), outputs=2, **kw)


def _step(b: int, h: int, isize: int, recurrent: bool = True, pre: str | None = "bias", **kw) -> Shape:
    """An LSTMCell node: x/Wt when isize > 0, h_prev/Rt when recurrent, pre 'bias' [4H] or 'rows' [B, 4H]."""
    g = 4 * h
    pre_shape = {"bias": (g,), "rows": (b, g), None: None}[pre]
    return Shape(((b, isize) if isize else None, (isize, g) if isize else None, (b, h) if recurrent else None,
                  (h, g) if recurrent else None, pre_shape, (b, h)), outputs=2, **kw)


# At batch 1 the float4 cell comes first: the cost model cannot tell it from the scalar BB = 1 one (same work, bytes
# and rTasks), and a tie goes to the first candidate.
RESIDENT = Binding("LSTMCell", "resident", SOURCE, "fast", _resident_condition, _resident_plan,
                   ("lstm_cell_resident", "resident_load"), resident=(PACKED,),
                   note="batch 1 with packed weights P (input 6): a family of steps keeps P's rTask slices resident "
                        "on pinned vEUs (docs/ARCHITECTURE.md §7)")
OPS = [OpDef("LSTMCell", (_binding(8, "fast"), _binding(32, "efficient"), _vec4_binding(8, "fast"),
                          _vec4_binding(32, "efficient"), _binding(8, "fast", 1), _binding(32, "efficient", 1),
                          RESIDENT),
             (_step(1, 37, 20), _step(1, 70, 0, pre="rows", tol=1e-4), _step(1, 20, 9, pre=None),
              _step(1, 36, 13, tol=1e-4), _step(1, 44, 0, recurrent=False, pre="rows"),
              _step(3, 100, 37, tol=1e-4), _step(6, 20, 0, pre="rows"), _step(9, 12, 5, pre=None),
              _step(2, 10, 0, recurrent=False, pre="rows"), _step(5, 9, 7, recurrent=False),
              _step(1, 256, 256, test=False), _step(1, 256, 0, pre="rows", test=False),
              _step(8, 128, 0, pre="rows", test=False),
              _packed_step(37, 20, 8, tol=1e-4), _packed_step(70, 0, 16, pre="rows", tol=1e-4),
              _packed_step(20, 9, 64, recurrent=False, pre=None), _packed_step(24, 5, 5, recurrent=False, rows_h=False),
              _packed_step(33, 12, 7, attrs={"family": "f", "family_head": 0}),
              _packed_step(256, 256, 26, test=False)),
             equivalent=_equivalent, custom=True)]
