"""Bindings of MatMul, Gemm and our FusedMatMul (a MatMul with its scale, bias and activation epilogue) and
FusedGemm (a Gemm with an activation: Relu or Gelu) to the GEMM / GEMV kernels of legacy/gemm.cu."""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from typing import Callable

from onnx import helper

from kernel_corpus.bindings import Binding, In, Launch, NodeInfo, OpDef, Out, Shape, TensorInfo
from kernel_corpus.ops._common import (MAX_GRID_YZ, activated, cdiv, condition_of, f32, fused_activation, i32,
                                       linear_launch, require_present, require_split, scalar_initializer,
                                       SPLIT_REDUCE_BLOCK, temp, tensor_bytes)
from kernel_corpus.ops import _tensor_core as tc
from kernel_corpus.torch_builders import torch_function
from toolchain.refusal import Refused

SOURCE = "gemm.cu"
ACTIVATIONS = {"Relu": 1, "Gelu": 2, "GeluTanh": 3}  # the ACT codes of gemm.cu's epilogue
SPLITK_MIN_CHUNK = 64   # k per split-K block at least
SPLITK_MAX_SPLITS = 32
FP32_SPLITS = (4, 16)   # split-K factors of the CUDA-core GEMMs (gemm_tiled<16>, gemm_regblock<32,32>)
# A and B may be strided views (TensorInfo.strides): every kernel here addresses them through GemmProblem's element
# strides (sam, sak, sbk, sbn, batch_a, batch_b); a variant that needs a layout (GEMV rows/cols, float4) refuses others.
# Y may be one (rows contiguous) for the kernels that write it through ysz, ysm; the GEMVs write it row-major.
STRIDED = (0, 1)
STRIDED_Y = ("gemm_tiled", "gemm_regblock", "gemm_tc")


@dataclass(frozen=True)
class GemmProblem:
    """Y[z] = alpha * A[z](M,K) @ B[z](K,N) + beta * C, every operand described by element strides."""

    batch: int
    M: int
    N: int
    K: int
    sam: int
    sak: int
    sbk: int
    sbn: int
    batch_a: int
    batch_b: int
    bias: bool
    scm: int
    scn: int
    alpha: float
    beta: float
    act: int = 0  # a fused activation after the epilogue (ACTIVATIONS)
    ysz: int = 0  # Y(z, m, n) = Y[z*ysz + m*ysm + n]: row-major [batch, M, N] (set by gemm_problem) or a strided view
    ysm: int = 0

    @property
    def flops(self) -> int:
        """Multiply-adds count twice; the epilogue adds one op per output (two with a bias, about 8 more with an
        activation)."""
        return self.batch * self.M * self.N * (2 * self.K + (2 if self.bias else 1) + (8 if self.act else 0))


def _batch_stride(batch_dims: tuple[int, ...], batch_strides: tuple[int, ...], out_batch: tuple[int, ...]) -> int:
    """Batch stride of one MatMul operand: the stride of its (merged) batch dims when it has every batch, 0 when it
    has none. A strided view's batch dims must merge into one stride (the kernels take one per operand)."""
    padded = (1,) * (len(out_batch) - len(batch_dims)) + batch_dims
    if padded == out_batch:
        return _merged_stride(batch_dims, batch_strides) if prod(out_batch) > 1 else 0
    if prod(batch_dims) == 1:
        return 0
    raise Refused(f"batch dims {list(batch_dims)} broadcast partially against {list(out_batch)}")


def _merged_stride(dims: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """The one stride of dims that merge into one (size-1 dims ignored); Refused when they do not."""
    kept = [(d, s) for d, s in zip(dims, strides) if d != 1]
    for (_, outer), (d, inner) in zip(kept, kept[1:]):
        if outer != inner * d:
            raise Refused(f"batch dims {list(dims)} with strides {list(strides)} do not merge into one batch stride")
    return kept[-1][1]


def _operand(t: TensorInfo, row_vector: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape and element strides of a MatMul operand with numpy's promotion of a 1-D operand: A (K,) is a row
    (1, K), B (K,) a column (K, 1)."""
    shape, strides = t.shape, t.layout
    if len(shape) != 1:
        return shape, strides
    if row_vector:
        return (1, shape[0]), (shape[0] * strides[0], strides[0])
    return (shape[0], 1), (strides[0], strides[0])


def _matmul_problem(node: NodeInfo) -> GemmProblem:
    """numpy.matmul semantics: 1-D operands are promoted, batch dims broadcast (whole-operand only); operands are
    addressed through their strides (C order, or a strided view's)."""
    if not node.inputs[0].shape or not node.inputs[1].shape:
        raise Refused("MatMul operands must have rank >= 1")
    a, sa = _operand(node.inputs[0], True)
    b, sb = _operand(node.inputs[1], False)
    M, K, K2, N = a[-2], a[-1], b[-2], b[-1]
    if K != K2:
        raise Refused(f"inner dimensions differ: {list(node.inputs[0].shape)} @ {list(node.inputs[1].shape)}")
    ba, bb = a[:-2], b[:-2]
    out_batch = tuple(max(x, y) for x, y in _aligned(ba, bb))
    stride_a = _batch_stride(ba, sa[:-2], out_batch)
    stride_b = _batch_stride(bb, sb[:-2], out_batch)
    return GemmProblem(prod(out_batch), M, N, K, sa[-2], sa[-1], sb[-2], sb[-1], stride_a, stride_b, False, 0, 0,
                       1.0, 0.0)


def _aligned(x: tuple[int, ...], y: tuple[int, ...]) -> list[tuple[int, int]]:
    """Right-aligned pairs of two batch shapes (numpy broadcasting); Refused when incompatible."""
    n = max(len(x), len(y))
    px, py = (1,) * (n - len(x)) + x, (1,) * (n - len(y)) + y
    for u, v in zip(px, py):
        if u != v and 1 not in (u, v):
            raise Refused(f"batch dims {list(x)} and {list(y)} do not broadcast")
    return list(zip(px, py))


def _bias_strides(shape: tuple[int, ...], M: int, N: int) -> tuple[int, int]:
    """(row, column) strides of a Gemm C unidirectionally broadcast to [M, N]."""
    if len(shape) > 2:
        raise Refused(f"Gemm C has rank {len(shape)} > 2")
    rows, cols = ((1, 1) + shape)[-2:]
    if rows not in (1, M) or cols not in (1, N):
        raise Refused(f"Gemm C {list(shape)} does not broadcast to [{M}, {N}]")
    return (cols if rows == M and M > 1 else 0), (1 if cols == N and N > 1 else 0)


def _gemm_problem(node: NodeInfo) -> GemmProblem:
    """ONNX Gemm: Y = alpha * A' @ B' + beta * C with A' = A^T if transA, B' = B^T if transB."""
    a, b = node.inputs[0].shape, node.inputs[1].shape
    if len(a) != 2 or len(b) != 2:
        raise Refused(f"Gemm needs 2-D A and B, got {list(a)} and {list(b)}")
    trans_a, trans_b = int(node.attr("transA", 0)), int(node.attr("transB", 0))
    M, K = (a[1], a[0]) if trans_a else a
    K2, N = (b[1], b[0]) if trans_b else b
    if K != K2:
        raise Refused(f"inner dimensions differ: A' is [{M}, {K}], B' is [{K2}, {N}]")
    sa, sb = node.inputs[0].layout, node.inputs[1].layout
    sam, sak = (sa[1], sa[0]) if trans_a else sa
    sbk, sbn = (sb[1], sb[0]) if trans_b else sb
    c = node.input(2)
    scm, scn = 0, 0
    if c is not None:
        scm, scn = _bias_strides(c.shape, M, N)
    return GemmProblem(1, M, N, K, sam, sak, sbk, sbn, 0, 0, c is not None, scm, scn,
                       float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0)))


def _fused_matmul_problem(node: NodeInfo) -> GemmProblem:
    """FusedMatMul (ours): Y = alpha * (A @ B) + C, MatMul semantics, C broadcast over the batch to [M, N]."""
    p = _matmul_problem(node)
    c = node.input(2)
    if c is None:
        return replace(p, alpha=float(node.attr("alpha", 1.0)))
    shape = tuple(c.shape)
    while len(shape) > 2 and shape[0] == 1:
        shape = shape[1:]  # leading 1s broadcast over the batch: the kernel's C has no batch stride
    try:
        strides = _bias_strides(shape, p.M, p.N)
    except Refused as exc:
        raise Refused(f"FusedMatMul C {list(c.shape)} is not [M, N]-broadcastable without batch dims "
                      f"({exc.reason})") from None
    return replace(p, bias=True, scm=strides[0], scn=strides[1], alpha=float(node.attr("alpha", 1.0)), beta=1.0)


GEMM_PROBLEMS = {"MatMul": _matmul_problem, "Gemm": _gemm_problem, "FusedMatMul": _fused_matmul_problem,
                 "FusedGemm": _gemm_problem}


def gemm_problem(node: NodeInfo) -> GemmProblem:
    """The strided GEMM a MatMul, Gemm, FusedMatMul or FusedGemm (Gemm + activation) node computes (Refused when it
    cannot be expressed)."""
    require_present(node, 2)
    problem = replace(GEMM_PROBLEMS[node.op_type](node), act=fused_activation(node, ACTIVATIONS))
    if node.outputs[0].numel != problem.batch * problem.M * problem.N:
        raise Refused(f"output {list(node.outputs[0].shape)} is not [{problem.batch}, {problem.M}, {problem.N}]")
    problem = replace(problem, **_output_strides(node.outputs[0], problem))
    if problem.batch > MAX_GRID_YZ:
        raise Refused(f"batch {problem.batch} exceeds the grid limit {MAX_GRID_YZ}")
    return problem


def _output_strides(y: TensorInfo, p: GemmProblem) -> dict[str, int]:
    """ysz, ysm of the output: row-major, or a strided view's (contiguous rows; batch dims merging into one)."""
    if y.strides is None:
        return {"ysz": p.M * p.N, "ysm": p.N}
    shape, strides = y.shape, y.strides
    if len(shape) < 2 or shape[-2:] != (p.M, p.N):
        raise Refused(f"a strided output {list(shape)} must end in [M, N] = [{p.M}, {p.N}]")
    if p.N > 1 and strides[-1] != 1:
        raise Refused(f"a strided output's rows must be contiguous (column stride {strides[-1]})")
    ysz = _merged_stride(shape[:-2], strides[:-2]) if p.batch > 1 else 0
    return {"ysz": ysz, "ysm": strides[-2]}


def _flags(p: GemmProblem) -> list:
    """The kernels' trailing template arguments: BIAS, ACT."""
    return [bool(p.bias), p.act]


def _bias_arg(p: GemmProblem) -> In:
    """C when there is a bias; otherwise A stands in (the kernel never reads it)."""
    return In(2) if p.bias else In(0)


def _traffic(node: NodeInfo) -> int:
    """Compulsory bytes of the whole node: every input read once, the output written once."""
    return tensor_bytes(*node.inputs, node.outputs[0])


def _gemm_args(p: GemmProblem) -> list:
    """Arguments of gemm_tiled / gemm_regblock in parameter order."""
    return [In(0), In(1), _bias_arg(p), Out(0), i32(p.M), i32(p.N), i32(p.K), i32(p.sam), i32(p.sak), i32(p.sbk),
            i32(p.sbn), i32(p.scm), i32(p.scn), i32(p.batch_a), i32(p.batch_b), f32(p.alpha), f32(p.beta)]


def _gemm_condition(tile_m: int, splits: int = 1, step: int = 1):
    """Condition of a GEMM variant whose rTasks cover tile_m rows each (grid.y is limited), split `splits` ways over
    K in steps of `step`."""

    def condition(node: NodeInfo) -> str | None:
        p = gemm_problem(node)
        require_split(p.K, splits, step)
        if cdiv(p.M, tile_m) > MAX_GRID_YZ or p.batch * splits > MAX_GRID_YZ:
            return f"M = {p.M} or batch x splits = {p.batch * splits} exceeds the grid limits"
        return None

    return condition


def _y_strides(p: GemmProblem) -> list:
    """The trailing ysz, ysm arguments of gemm_tiled, gemm_regblock, gemm_tc and their split-K fixups."""
    return [i32(p.ysz), i32(p.ysm)]


def _split_variant(name: str, splits: int) -> str:
    """A variant's name with its split-K factor."""
    return f"{name}k{splits}" if splits > 1 else name


def _partial(p: GemmProblem, splits: int):
    """The partial sums' buffer of a split GEMM ([splits][batch][M][N]); unsplit, A stands in (never written)."""
    return temp("partial", 4 * splits * p.batch * p.M * p.N) if splits > 1 else In(0)


def _split_launches(node: NodeInfo, p: GemmProblem, main: Launch, splits: int, reduce: str, targs: list,
                    tail: list) -> list[Launch]:
    """A GEMM launch, and when split its fixup `reduce` (template arguments REDUCE_BLOCK + targs, trailing arguments
    `tail`): the main launch then writes the partial sums (no epilogue), the fixup adds them in split order and
    applies the epilogue."""
    if splits == 1:
        return [main]
    total = p.batch * p.M * p.N
    epilogue = p.flops - 2 * total * p.K
    main.flops -= epilogue
    main.bytes += 4 * splits * total - node.outputs[0].nbytes
    partial = _partial(p, splits)
    fixup = linear_launch(reduce, [SPLIT_REDUCE_BLOCK, *targs], total, SPLIT_REDUCE_BLOCK,
                          [partial, _bias_arg(p), Out(0), i32(total), i32(p.M), i32(p.N), i32(splits), i32(p.scm),
                           i32(p.scn), f32(p.alpha), f32(p.beta)] + tail + _y_strides(p),
                          total * (splits - 1) + epilogue,
                          4 * splits * total + tensor_bytes(node.input(2) if p.bias else None, node.outputs[0]))
    return [main, fixup]


TC_SPLIT_NOTE = ("one launch: partial sums of the K splits into a temp; the last rTask of each tile adds them in split "
                 "order with the epilogue (an arrival counter per tile, zeroed once by a setup launch)")
SPLIT_NOTE = ("two launches (partial sums of the K splits into a temp, then their sum in split order with the "
              "epilogue); the second waits for every rTask of the first")


def _tiled_binding(op_type: str, tile: int, kind: str, splits: int = 1) -> Binding:
    """gemm_tiled<TILE>: one TILE x TILE output tile per rTask, a thread per output; split-K when splits > 1."""

    def plan(node: NodeInfo) -> list[Launch]:
        p = gemm_problem(node)
        grid = (cdiv(p.N, tile), cdiv(p.M, tile), p.batch * splits)
        main = Launch("gemm_tiled", [tile, *_flags(p)], grid, (tile, tile, 1), 0,
                      _gemm_args(p) + [_partial(p, splits), i32(splits)] + _y_strides(p), p.flops, _traffic(node))
        return _split_launches(node, p, main, splits, "gemm_splitk_reduce", _flags(p), [])

    kernels = ("gemm_tiled", "gemm_splitk_reduce") if splits > 1 else ("gemm_tiled",)
    return Binding(op_type, _split_variant(f"tiled{tile}", splits), SOURCE, kind, _gemm_condition(tile, splits, tile),
                   plan, kernels, note=SPLIT_NOTE if splits > 1 else "")


def _regblock_binding(op_type: str, bm: int, bn: int, bk: int, tm: int, tn: int, kind: str,
                      splits: int = 1) -> Binding:
    """gemm_regblock: a BM x BN tile per rTask, TM x TN outputs per thread in registers; split-K when splits > 1."""

    def plan(node: NodeInfo) -> list[Launch]:
        p = gemm_problem(node)
        grid = (cdiv(p.N, bn), cdiv(p.M, bm), p.batch * splits)
        threads = (bm // tm) * (bn // tn)
        main = Launch("gemm_regblock", [bm, bn, bk, tm, tn, *_flags(p)], grid, (threads, 1, 1), 0,
                      _gemm_args(p) + [_partial(p, splits), i32(splits)] + _y_strides(p), p.flops,
                      _traffic(node))
        return _split_launches(node, p, main, splits, "gemm_splitk_reduce", _flags(p), [])

    kernels = ("gemm_regblock", "gemm_splitk_reduce") if splits > 1 else ("gemm_regblock",)
    return Binding(op_type, _split_variant(f"regblock{bm}x{bn}", splits), SOURCE, kind,
                   _gemm_condition(bm, splits, bk), plan, kernels, note=SPLIT_NOTE if splits > 1 else "")


def _tc_vec(p: GemmProblem) -> int:
    """tc.cu's VEC bits for a GEMM: A(m, k..k+3) and B(k, n..n+3) rows can be copied 16 bytes at a time when they are
    contiguous and every row (and batch) starts on a multiple of 4 elements (the kernel checks the pointers)."""
    a = p.sak == 1 and p.sam % 4 == 0 and p.K % 4 == 0 and p.batch_a % 4 == 0
    b = p.sbn == 1 and p.sbk % 4 == 0 and p.N % 4 == 0 and p.batch_b % 4 == 0
    return (tc.VEC_A if a else 0) | (tc.VEC_B if b else 0)


def _tensor_core_binding(op_type: str, bm: int, bn: int, precision: str, kind: str, splits: int = 1) -> Binding:
    """gemm_tc (tc.cu): a BM x BN tile per rTask on the tensor cores, 3xTF32 (float32 accuracy), TF32 or BF16; with
    splits > 1 (split-K) each tile's K is spread over `splits` rTasks writing partial sums, and the tile's last rTask
    to arrive (a counter per tile, zeroed by a setup launch) adds them in split order and applies the epilogue: one
    launch, no fixup kernel."""

    def plan(node: NodeInfo) -> list[Launch]:
        p = gemm_problem(node)
        grid = (cdiv(p.N, bn), cdiv(p.M, bm), p.batch * splits)
        work = tc.tensor_core_flops(p.batch, p.M, p.N, p.K, bm, bn, precision) + p.flops - 2 * p.batch * p.M * p.N * p.K
        counters, setup = tc.arrivals(grid[0] * grid[1] * p.batch, splits)
        args = _gemm_args(p)
        args = args[:4] + [_partial(p, splits), counters] + args[4:] + [i32(int(p.bias)), i32(p.act), i32(splits)]
        args += _y_strides(p)
        targs = [bm, bn, tc.PREC_CODE[precision], _tc_vec(p), int(splits > 1)]  # SPLIT: with the in-place fixup
        main = Launch("gemm_tc", targs, grid, (tc.threads(bm, bn), 1, 1), 0,
                      args, work, _traffic(node) + tc.split_bytes(splits, p.batch * p.M * p.N),
                      flop_rate=tc.TF32_RATE)
        return setup + [main]

    kernels = ("gemm_tc", "tc_arrivals_zero") if splits > 1 else ("gemm_tc",)  # the main kernel first (STRIDED_Y)
    return Binding(op_type, tc.variant(bm, bn, precision, splits), tc.SOURCE, kind,
                   _gemm_condition(bm, splits, tc.BK), plan, kernels, precision=precision,
                   note=TC_SPLIT_NOTE if splits > 1 else "")


def gemv_problem(node: NodeInfo, layout: str) -> GemmProblem:
    """The GEMM of a batch-1, M == 1 node whose weight is contiguous along k ('rows') or n ('cols')."""
    p = gemm_problem(node)
    if p.M != 1 or p.batch != 1:
        raise Refused(f"GEMV needs M == 1 and no batch, got M = {p.M}, batch = {p.batch}")
    if layout == "rows" and p.sbk != 1:
        raise Refused("the weight is not contiguous along K (needs Gemm transB=1)")
    if layout == "cols" and p.sbn != 1:
        raise Refused("the weight is not contiguous along N")
    return p


def _gemv_condition(layout: str):
    """Condition of a GEMV variant for one weight layout."""
    return condition_of(lambda node: gemv_problem(node, layout))


def _gemv_warp_binding(op_type: str, warps: int, kind: str) -> Binding:
    """gemv_warp<WARPS>: one warp per output, WARPS outputs per rTask."""

    def plan(node: NodeInfo) -> list[Launch]:
        p = gemv_problem(node, "rows")
        args = [In(0), In(1), _bias_arg(p), Out(0), i32(p.N), i32(p.K), i32(p.sak), i32(p.sbn), i32(p.scn),
                f32(p.alpha), f32(p.beta)]
        return [Launch("gemv_warp", [warps, *_flags(p)], (cdiv(p.N, warps), 1, 1), (32 * warps, 1, 1), 0,
                       args, p.flops, _traffic(node))]

    return Binding(op_type, f"gemv_warp{warps}", SOURCE, kind, _gemv_condition("rows"), plan, ("gemv_warp",))


def _gemv_col_binding(op_type: str, cols: int, krows: int, kind: str) -> Binding:
    """gemv_col<COLS, KROWS>: COLS outputs per rTask, KROWS threads per output."""

    def plan(node: NodeInfo) -> list[Launch]:
        p = gemv_problem(node, "cols")
        args = [In(0), In(1), _bias_arg(p), Out(0), i32(p.N), i32(p.K), i32(p.sak), i32(p.sbk), i32(p.sbn),
                i32(p.scn), f32(p.alpha), f32(p.beta)]
        return [Launch("gemv_col", [cols, krows, *_flags(p)], (cdiv(p.N, cols), 1, 1), (cols, krows, 1), 0,
                       args, p.flops, _traffic(node))]

    return Binding(op_type, f"gemv_col{cols}x{krows}", SOURCE, kind, _gemv_condition("cols"), plan, ("gemv_col",))


def _gemv_vec4_binding(op_type: str, cols4: int, ksplit: int, unroll: int, kind: str) -> Binding:
    """gemv_vec4<COLS4, KSPLIT, UNROLL>: batch 1, [K, N] weight read with 16-byte loads, 4*COLS4 outputs per rTask,
    K split over KSPLIT threads and summed in a tree."""

    def condition(node: NodeInfo) -> str | None:
        p = gemv_problem(node, "cols")
        if p.N % 4 or p.sbk % 4:
            return f"N = {p.N} and the weight's row stride {p.sbk} must be multiples of 4 (float4 loads)"
        return None

    def plan(node: NodeInfo) -> list[Launch]:
        p = gemv_problem(node, "cols")
        args = [In(0), In(1), _bias_arg(p), Out(0), i32(p.N), i32(p.K), i32(p.sak), i32(p.sbk), i32(p.scn),
                f32(p.alpha), f32(p.beta)]
        return [Launch("gemv_vec4", [cols4, ksplit, unroll, *_flags(p)], (cdiv(p.N, 4 * cols4), 1, 1),
                       (cols4, ksplit, 1), 0, args, p.flops, _traffic(node))]

    return Binding(op_type, f"gemv_vec4_{4 * cols4}x{ksplit}", SOURCE, kind, condition, plan, ("gemv_vec4",))


def splitk_shape(K: int) -> tuple[int, int]:
    """(splits, k per split) of the split-K GEMV: chunks of at least SPLITK_MIN_CHUNK, at most 32 splits."""
    chunk = max(SPLITK_MIN_CHUNK, cdiv(K, SPLITK_MAX_SPLITS))
    return cdiv(K, chunk), chunk


def _gemv_splitk_binding(op_type: str, cols: int, krows: int, reduce_block: int) -> Binding:
    """Two launches: per-(column chunk, k chunk) partial sums into a temp, then a fixed-order sum."""

    def condition(node: NodeInfo) -> str | None:
        p = gemv_problem(node, "cols")
        return None if splitk_shape(p.K)[0] >= 2 else f"K = {p.K} is too short to split (< {2 * SPLITK_MIN_CHUNK})"

    def plan(node: NodeInfo) -> list[Launch]:
        p = gemv_problem(node, "cols")
        splits, chunk = splitk_shape(p.K)
        partial = temp("partial", 4 * splits * p.N)
        first = Launch("gemv_splitk_partial", [cols, krows], (cdiv(p.N, cols), splits, 1), (cols, krows, 1), 0,
                       [In(0), In(1), partial, i32(p.N), i32(p.K), i32(chunk), i32(p.sak), i32(p.sbk), i32(p.sbn)],
                       2 * p.N * p.K, tensor_bytes(*node.inputs[:2]) + 4 * splits * p.N)
        second = linear_launch("gemv_splitk_reduce", [reduce_block, *_flags(p)], p.N, reduce_block,
                               [partial, _bias_arg(p), Out(0), i32(p.N), i32(splits), i32(p.scn), f32(p.alpha),
                                f32(p.beta)],
                               p.N * (splits + (2 if p.bias else 1)),
                               4 * splits * p.N + tensor_bytes(node.input(2), node.outputs[0]))
        return [first, second]

    return Binding(op_type, f"gemv_splitk{cols}x{krows}", SOURCE, "efficient", condition, plan,
                   ("gemv_splitk_partial", "gemv_splitk_reduce"),
                   note="two launches (partials into a temp, then a deterministic reduction); the second waits "
                        "for every rTask of the first")


def _bindings_for(op_type: str) -> list[Binding]:
    """The GEMM and [K, N]-weight GEMV variants, for MatMul or Gemm. The float4 GEMVs come first: where the cost
    model cannot tell a batch-1 product's variants apart (same work, bytes and rTasks: gemv_vec4_16x64 and tiled16
    both give one rTask per 16 columns), a tie goes to the first candidate."""
    return [
        _gemv_vec4_binding(op_type, 4, 64, 4, "fast"),
        _gemv_vec4_binding(op_type, 8, 32, 4, "efficient"),
        _gemv_vec4_binding(op_type, 16, 16, 4, "efficient"),
        _tiled_binding(op_type, 16, "efficient"),
        _regblock_binding(op_type, 32, 32, 8, 2, 2, "efficient"),
        _regblock_binding(op_type, 64, 64, 8, 4, 4, "fast"),
    ] + [_tiled_binding(op_type, 16, "efficient", s) for s in FP32_SPLITS] + [
        _regblock_binding(op_type, 32, 32, 8, 2, 2, "efficient", s) for s in FP32_SPLITS] + [
        _gemv_col_binding(op_type, 32, 8, "efficient"),
        _gemv_col_binding(op_type, 128, 2, "fast"),
        _gemv_splitk_binding(op_type, 32, 8, 256),
    ] + [_tensor_core_binding(op_type, bm, bn, precision, kind, splits)
         for precision in tc.PREC_CODE for bm, bn, kind, splits in tc.tile_variants()]


# ---- op definitions ------------------------------------------------------------------------------------------
def _torch_gemm(T, a: dict, k: list, nout: int) -> Callable:
    """alpha * A' B' + beta * C, then a fused activation (FusedGemm)."""
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    act = _torch_activation(T, a)

    def f(x, w, c=None):
        x = x.t() if a.get("transA", 0) else x
        w = w.t() if a.get("transB", 0) else w
        y = T.matmul(x, w) * alpha if alpha != 1.0 else T.matmul(x, w)
        return act(y if c is None else y + (c * beta if beta != 1.0 else c))
    return f


def _torch_fused_matmul(T, a: dict, k: list, nout: int) -> Callable:
    """alpha * (A @ B) + C, then the activation."""
    alpha, act = a.get("alpha", 1.0), _torch_activation(T, a)
    return lambda x, w, c=None: act(T.matmul(x, w) * alpha + (0 if c is None else c))


def _torch_activation(T, a: dict) -> Callable:
    """A fused op's activation attribute as a torch function (identity without one)."""
    act = a.get("activation")
    if act == "Relu":
        return T.relu
    if act == "Gelu":
        return lambda y: T.nn.functional.gelu(y, approximate=a.get("approximate", "none"))
    return lambda y: y


def _fused_matmul_equivalent(node: NodeInfo, ins: list[str], outs: list[str], dtype) -> tuple[list, list]:
    """FusedMatMul as MatMul, Mul by alpha, Add C, activation."""
    nodes, inits, y = [helper.make_node("MatMul", ins[:2], ["mm"])], [], "mm"
    if float(node.attr("alpha", 1.0)) != 1.0:
        inits.append(scalar_initializer("alpha", float(node.attr("alpha")), dtype))
        nodes.append(helper.make_node("Mul", [y, "alpha"], ["scaled"]))
        y = "scaled"
    if len(ins) > 2 and ins[2]:
        nodes.append(helper.make_node("Add", [y, ins[2]], ["biased"]))
        y = "biased"
    return activated(node, nodes, y, outs[0]), inits


def _fused_gemm_equivalent(node: NodeInfo, ins: list[str], outs: list[str], dtype) -> tuple[list, list]:
    """FusedGemm as Gemm, then the activation."""
    attrs = {k: node.attr(k) for k in ("alpha", "beta", "transA", "transB") if k in node.attrs}
    return activated(node, [helper.make_node("Gemm", ins, ["gemm"], **attrs)], "gemm", outs[0]), []


def _shapes(*shapes: Shape) -> tuple[Shape, ...]:
    """A tuple of shapes (readability)."""
    return shapes


L = 1e-4  # tolerance of long-K reductions (fp32 sums in another order)
MATMUL_SHAPES = _shapes(
    Shape(((20, 37), (37, 45))), Shape(((2, 3, 17, 9), (9, 33))), Shape(((2, 5, 8), (2, 8, 7))),
    Shape(((5, 8), (3, 8, 6))), Shape(((1, 70), (70, 50))), Shape(((300,), (300, 40)), tol=L),
    Shape(((1, 200), (200, 33)), tol=L), Shape(((6, 5), (5,))), Shape(((1, 300), (300, 44)), tol=L),
    Shape(((1, 256), (256, 512)), test=False), Shape(((64, 128), (128, 96)), test=False),
    Shape(((2, 32, 64), (64, 48)), test=False), Shape(((1, 2048), (2048, 64)), test=False),
    Shape(((3, 1040), (1040, 20)), positive=(0, 1), tol=L), Shape(((2, 1, 1100), (1100, 36)), positive=(0, 1), tol=L))
GEMM_SHAPES = _shapes(
    Shape(((19, 23), (23, 30), (30,)), {"alpha": 0.5, "beta": 2.0}),
    Shape(((23, 19), (30, 23), (19, 1)), {"transA": 1, "transB": 1}),
    Shape(((33, 70), (70, 65), (33, 65)), {"beta": -1.0}),
    Shape(((1, 130), (40, 130), (40,)), {"transB": 1, "alpha": 1.5}, tol=L),
    Shape(((1, 256), (33, 256)), {"transB": 1}, tol=L),
    Shape(((1, 150), (150, 37), (1, 37)), tol=L),
    Shape(((1, 130), (130, 52), (52,)), {"alpha": 0.5, "beta": 2.0}, tol=L),
    Shape(((200, 1), (200, 20), ()), {"transA": 1, "beta": 0.5}, tol=L),
    Shape(((1, 512), (1024, 512), (1024,)), {"transB": 1}, test=False),
    Shape(((64, 128), (128, 256), (256,)), test=False), Shape(((1, 1024), (1024, 256), (256,)), test=False),
    Shape(((5, 1030), (24, 1030), (24,)), {"transB": 1}, positive=(0, 1), tol=L),
    Shape(((1100, 3), (1100, 20)), {"transA": 1, "alpha": 0.5}, positive=(0, 1), tol=L))
FUSED_MATMUL_SHAPES = _shapes(
    Shape(((19, 23), (23, 30), (30,)), {"alpha": 0.5}),
    Shape(((33, 17), (17, 45), (33, 45)), {"activation": "Relu"}),
    Shape(((20, 9), (9, 7), (20, 1)), {"alpha": -2.0}),
    Shape(((2, 3, 17, 9), (2, 3, 9, 17), (1, 1, 17, 17)), {"alpha": 0.125}),
    Shape(((1, 13, 40), (40, 24), (24,)), {"activation": "Relu"}),
    Shape(((2, 5, 8), (2, 8, 7)), {"alpha": 3.0}),
    Shape(((1, 200), (200, 33), (33,)), {"alpha": 1.5}, tol=L),
    Shape(((70,), (70, 50), (50,)), {"activation": "Relu"}, tol=L),
    Shape(((1, 9, 40), (40, 24), (24,)), {"activation": "Gelu"}),
    Shape(((5, 8), (8, 70), (70,)), {"activation": "Gelu", "approximate": "tanh"}),
    Shape(((1, 96), (96, 40), (40,)), {"activation": "Gelu"}, tol=L),
    Shape(((1, 1, 260), (260, 36), (36,)), {"activation": "Relu"}, tol=L),
    Shape(((1, 64, 768), (768, 2304), (2304,)), test=False),
    Shape(((1, 12, 64, 64), (1, 12, 64, 64), (1, 1, 64, 64)), {"alpha": 0.125}, test=False),
    Shape(((1, 256), (256, 1024), (1024,)), test=False),
    Shape(((4, 1060), (1060, 12), (12,)), {"activation": "Relu"}, positive=(0, 1), tol=L),
    Shape(((2, 3, 1040), (1040, 8)), {"alpha": 0.5}, positive=(0, 1), tol=L))
FUSED_GEMM_SHAPES = _shapes(
    Shape(((7, 12), (12, 30), (30,)), {"activation": "Gelu", "approximate": "tanh"}),
    Shape(((19, 23), (30, 23), (30,)), {"transB": 1, "alpha": 0.5, "activation": "Relu"}),
    Shape(((1, 130), (40, 130), (40,)), {"transB": 1, "activation": "Relu"}, tol=L),
    Shape(((1, 256), (33, 256)), {"transB": 1, "activation": "Relu"}, tol=L),
    Shape(((1, 150), (150, 37), (37,)), {"activation": "Relu"}, tol=L),
    Shape(((1, 100), (100, 48), (48,)), {"activation": "Relu"}, tol=L),
    Shape(((90, 1), (90, 20), (1, 20)), {"transA": 1, "beta": 0.5, "activation": "Relu"}, tol=L),
    Shape(((1, 9216), (4096, 9216), (4096,)), {"transB": 1, "activation": "Relu"}, test=False),
    Shape(((3, 1050), (1050, 16), (16,)), {"activation": "Relu"}, positive=(0, 1), tol=L),
    Shape(((1030, 2), (20, 1030), (20,)), {"transA": 1, "transB": 1, "activation": "Relu"}, positive=(0, 1), tol=L))


def _gemm_bindings(op_type: str) -> tuple[Binding, ...]:
    """Every GEMM / GEMV variant of one op type; the [N, K]-weight GEMV (gemv_warp) needs Gemm's transB=1."""
    warp = [_gemv_warp_binding(op_type, w, kind) for w, kind in ((2, "efficient"), (8, "fast"))] \
        if op_type in ("Gemm", "FusedGemm") else []
    return tuple(replace(b, strided=STRIDED, strided_out=(0,) if b.kernels[0] in STRIDED_Y else ())
                 for b in _bindings_for(op_type) + warp)


OPS = [
    OpDef("MatMul", _gemm_bindings("MatMul"), MATMUL_SHAPES, torch=torch_function("matmul")),
    OpDef("Gemm", _gemm_bindings("Gemm"), GEMM_SHAPES, torch=_torch_gemm),
    OpDef("FusedMatMul", _gemm_bindings("FusedMatMul"), FUSED_MATMUL_SHAPES, torch=_torch_fused_matmul,
          equivalent=_fused_matmul_equivalent, custom=True),
    OpDef("FusedGemm", _gemm_bindings("FusedGemm"), FUSED_GEMM_SHAPES, torch=_torch_gemm,
          equivalent=_fused_gemm_equivalent, custom=True),
]
