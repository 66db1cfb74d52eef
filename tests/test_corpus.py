"""The kernel corpus: every binding's legacy kernels, run on the CPU emulator, against numpy references of the ONNX
operators; the references against onnxruntime; registry rules, launch geometry and refusals."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference

from kernel_corpus.bindings import LEGACY_DIR, Binding, NodeInfo, NotApplicable, TensorInfo, registry
from kernel_corpus.cpu_run import build_module, kernel_exprs, run_launches
from kernel_corpus.reference import run_reference

TOL = 1e-5
TOL_LONG_K = 1e-4
CONST_ATTRS = ("starts", "ends", "axes", "steps", "split")  # ONNX inputs the corpus takes as attributes


@dataclass
class Case:
    """One node to test: the NodeInfo, the one-node ONNX model it came from (None for custom ops), tolerance."""

    label: str
    node: NodeInfo
    model: onnx.ModelProto | None
    tol: float = TOL
    seed: int = 0
    positive: tuple[int, ...] = ()   # inputs drawn in [0.5, 1.5] (variances, divisors)


def _value_info(name: str, shape) -> onnx.ValueInfoProto:
    """A float graph input or (shape unknown) output."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def onnx_case(label: str, op_type: str, shapes: list, attrs: dict | None = None, opset: int = 17,
              outputs: int = 1, tol: float = TOL, positive: tuple[int, ...] = ()) -> Case:
    """A one-node ONNX model whose output shapes come from ONNX shape inference, and its NodeInfo.

    `shapes` are the float inputs (None: absent optional input); attrs named in CONST_ATTRS become int64
    initializer inputs of the model (as opset 13+ wants) and stay attributes of the NodeInfo."""
    attrs = dict(attrs or {})
    consts = {k: attrs.pop(k) for k in CONST_ATTRS if k in attrs}
    names = [f"x{i}" if s is not None else "" for i, s in enumerate(shapes)]
    inits = [numpy_helper.from_array(np.array(v, dtype=np.int64), k) for k, v in consts.items()]
    if op_type == "Slice":
        names += [k if k in consts else "" for k in ("starts", "ends", "axes", "steps")]
    elif "split" in consts:
        names.append("split")
    while names and not names[-1]:
        names.pop()
    out_names = [f"y{i}" for i in range(outputs)]
    graph = helper.make_graph(
        [helper.make_node(op_type, names, out_names, **attrs)], label,
        [_value_info(n, s) for n, s in zip(names, shapes) if s is not None], [_value_info(n, None) for n in out_names],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    inferred = shape_inference.infer_shapes(model, strict_mode=True)
    out_shapes = [tuple(d.dim_value for d in o.type.tensor_type.shape.dim) for o in inferred.graph.output]
    inputs = [None if s is None else TensorInfo(s) for s in shapes]
    inputs += [TensorInfo(np.shape(v), "int64") for v in consts.values() if op_type == "Slice"]
    node = NodeInfo(op_type, label, inputs, [TensorInfo(s) for s in out_shapes], {**attrs, **consts}, opset)
    return Case(label, node, model, tol, positive=positive)


def lstm_case(label: str, batch: int, hidden: int) -> Case:
    """The custom LSTMCellPointwise node (no ONNX model: it is cross-checked through an ONNX LSTM step)."""
    node = NodeInfo("LSTMCellPointwise", label, [TensorInfo((batch, 4 * hidden)), TensorInfo((batch, hidden))],
                    [TensorInfo((batch, hidden)), TensorInfo((batch, hidden))])
    return Case(label, node, None)


def lstm_fused_case(label: str, batch: int, hidden: int, isize: int, recurrent: bool = True,
                    pre: str | None = "bias", tol: float = TOL) -> Case:
    """The custom LSTMCell node: x/Wt when isize > 0, h_prev/Rt when recurrent, pre 'bias' [4H] or 'rows' [B, 4H]."""
    b, h, g = batch, hidden, 4 * hidden
    pre_shape = {"bias": (g,), "rows": (b, g), None: None}[pre]
    shapes = [(b, isize) if isize else None, (isize, g) if isize else None, (b, h) if recurrent else None,
              (h, g) if recurrent else None, pre_shape, (b, h)]
    node = NodeInfo("LSTMCell", label, [None if s is None else TensorInfo(s) for s in shapes],
                    [TensorInfo((b, h)), TensorInfo((b, h))])
    return Case(label, node, None, tol)


def fused_case(label: str, op_type: str, shapes: list, attrs: dict | None = None, alpha: float | None = None,
               act: str | None = None, approximate: str | None = None, tol: float = TOL) -> Case:
    """One of our fused nodes and, as its truth, the ONNX graph it replaces: the base op (MatMul for FusedMatMul,
    whose C is added after the Mul by alpha; Gemm / Conv with all inputs for FusedGemm / FusedConv), then the
    activation `act` (Relu, or Gelu with `approximate`)."""
    base = op_type.removeprefix("Fused")
    names = [f"x{i}" for i, sh in enumerate(shapes) if sh is not None]
    inits, out = [], "base"
    nodes = [helper.make_node(base, names[:2] if base == "MatMul" else names, [out], **(attrs or {}))]
    if alpha is not None:
        inits.append(numpy_helper.from_array(np.array(alpha, np.float32), "alpha"))
        nodes.append(helper.make_node("Mul", [out, "alpha"], ["scaled"]))
        out = "scaled"
    if base == "MatMul" and len(names) > 2:
        nodes.append(helper.make_node("Add", [out, "x2"], ["biased"]))
        out = "biased"
    act_attrs = {"approximate": approximate} if approximate else {}
    nodes.append(helper.make_node(act or "Identity", [out], ["y0"], **act_attrs))
    graph = helper.make_graph(nodes, label, [_value_info(n, shapes[int(n[1:])]) for n in names],
                              [_value_info("y0", None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20 if act == "Gelu" else 17)])
    model.ir_version = 9
    out_info = shape_inference.infer_shapes(model, strict_mode=True).graph.output[0]
    fused = dict(attrs or {}, **({"alpha": alpha} if alpha is not None else {}),
                 **({"activation": act} if act else {}), **act_attrs)
    node = NodeInfo(op_type, label, [None if sh is None else TensorInfo(tuple(sh)) for sh in shapes],
                    [TensorInfo(tuple(d.dim_value for d in out_info.type.tensor_type.shape.dim))], fused)
    return Case(label, node, model, tol)


def _binary_cases() -> list[Case]:
    """Add/Sub/Mul/Div over same shapes (float4 path and tail), scalar, per-channel, last-dim and two-way broadcasts."""
    shapes = [([3, 50], [3, 50]), ([4, 8, 3], [4, 8, 3]), ([2, 3, 4, 5], []), ([2, 3, 4, 5], [1, 3, 1, 1]),
              ([6, 10], [10]), ([1, 5], [4, 1]), ([2, 1, 3, 2, 2, 3], [1, 1, 3, 1, 2, 3])]
    return [onnx_case(f"{op}-{'x'.join(map(str, a))}-{'x'.join(map(str, b)) or 'scalar'}", op, [a, b],
                      positive=(1,) if op == "Div" else ())
            for op in ("Add", "Sub", "Mul", "Div") for a, b in shapes]


def _cases() -> list[Case]:
    """Every test node: at least two shapes per binding, some of them not multiples of the tile sizes."""
    c = onnx_case
    cases = [
        c("matmul-20x37x45", "MatMul", [[20, 37], [37, 45]]),
        c("matmul-batched-bcastB", "MatMul", [[2, 3, 17, 9], [9, 33]]),
        c("matmul-batched-both", "MatMul", [[2, 5, 8], [2, 8, 7]]),
        c("matmul-batched-bcastA", "MatMul", [[5, 8], [3, 8, 6]]),
        c("matmul-gemv-1x70x50", "MatMul", [[1, 70], [70, 50]]),
        c("matmul-gemv-1d-300", "MatMul", [[300], [300, 40]], tol=TOL_LONG_K),
        c("matmul-gemv-1x200x33", "MatMul", [[1, 200], [200, 33]], tol=TOL_LONG_K),
        c("matmul-1d-B", "MatMul", [[6, 5], [5]]),
        c("gemm-bias-row", "Gemm", [[19, 23], [23, 30], [30]], {"alpha": 0.5, "beta": 2.0}),
        c("gemm-trans-bias-col", "Gemm", [[23, 19], [30, 23], [19, 1]], {"transA": 1, "transB": 1}),
        c("gemm-full-bias", "Gemm", [[33, 70], [70, 65], [33, 65]], {"beta": -1.0}),
        c("gemm-gemv-warp-k130", "Gemm", [[1, 130], [40, 130], [40]], {"transB": 1, "alpha": 1.5}, tol=TOL_LONG_K),
        c("gemm-gemv-warp-k256-nobias", "Gemm", [[1, 256], [33, 256]], {"transB": 1}, tol=TOL_LONG_K),
        c("gemm-gemv-col-k150", "Gemm", [[1, 150], [150, 37], [1, 37]], tol=TOL_LONG_K),
        c("gemm-gemv-transA-scalar-bias", "Gemm", [[200, 1], [200, 20], []], {"transA": 1, "beta": 0.5},
          tol=TOL_LONG_K),
        c("conv-3x3-pad1-bias", "Conv", [[1, 3, 9, 11], [5, 3, 3, 3], [5]], {"pads": [1, 1, 1, 1]}),
        c("conv-group2-stride-dil", "Conv", [[2, 4, 10, 7], [6, 2, 3, 2]],
          {"group": 2, "strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1]}),
        c("conv-depthwise-s2", "Conv", [[1, 4, 9, 9], [4, 1, 3, 3], [4]], {"group": 4, "pads": [1, 1, 1, 1],
                                                                            "strides": [2, 2]}),
        c("conv-depthwise-mult2-same", "Conv", [[1, 2, 7, 8], [4, 1, 3, 3]], {"group": 2, "auto_pad": "SAME_UPPER"}),
        c("conv-depthwise-dil2-big", "Conv", [[1, 3, 20, 18], [3, 1, 3, 3], [3]],
          {"group": 3, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
        c("conv-1d", "Conv", [[2, 3, 12], [4, 3, 3]], {"strides": [2], "pads": [1, 1]}),
        c("conv-1x1", "Conv", [[1, 8, 5, 5], [16, 8, 1, 1], [16]]),
        c("maxpool-3x3-s2-p1", "MaxPool", [[1, 3, 9, 9]], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                           "pads": [1, 1, 1, 1]}),
        c("maxpool-ceil", "MaxPool", [[2, 2, 8, 7]], {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
        c("maxpool-dilated", "MaxPool", [[1, 2, 9, 8]], {"kernel_shape": [2, 2], "dilations": [2, 2]}),
        c("maxpool-1d", "MaxPool", [[1, 2, 10]], {"kernel_shape": [3], "strides": [2]}),
        c("avgpool-exclude-pad", "AveragePool", [[1, 3, 9, 9]], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                                 "pads": [1, 1, 1, 1]}),
        c("avgpool-include-pad", "AveragePool", [[1, 2, 7, 6]], {"kernel_shape": [3, 2], "pads": [1, 1, 1, 0],
                                                                 "count_include_pad": 1}),
        c("avgpool-ceil-pad", "AveragePool", [[2, 2, 8, 8]], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                              "pads": [1, 1, 1, 1], "ceil_mode": 1}),
        c("gap-5x7", "GlobalAveragePool", [[2, 3, 5, 7]]),
        c("gap-20x20", "GlobalAveragePool", [[1, 4, 20, 20]]),
        c("gap-1d", "GlobalAveragePool", [[3, 5, 6]]),
        c("batchnorm-4d", "BatchNormalization", [[2, 3, 4, 5], [3], [3], [3], [3]], {"epsilon": 1e-3},
          positive=(4,)),
        c("batchnorm-2d", "BatchNormalization", [[4, 6], [6], [6], [6], [6]], positive=(4,)),
        c("batchnorm-5d", "BatchNormalization", [[1, 5, 3, 3, 2], [5], [5], [5], [5]], positive=(4,)),
        *_binary_cases(),
        *[c(f"{op.lower()}-{'x'.join(map(str, s))}", op, [s]) for op in ("Relu", "Sigmoid", "Tanh")
          for s in ([3, 70], [2, 3, 4, 5])],
        c("gelu-erf-3x70", "Gelu", [[3, 70]], opset=20),
        c("gelu-erf-4d", "Gelu", [[2, 3, 4, 5]], opset=20),
        c("gelu-tanh", "Gelu", [[5, 13]], {"approximate": "tanh"}, opset=20),
        fused_case("fusedmm-bias-row", "FusedMatMul", [[19, 23], [23, 30], [30]], alpha=0.5),
        fused_case("fusedmm-full-bias-relu", "FusedMatMul", [[33, 17], [17, 45], [33, 45]], act="Relu"),
        fused_case("fusedmm-col-bias", "FusedMatMul", [[20, 9], [9, 7], [20, 1]], alpha=-2.0),
        fused_case("fusedmm-batched-mask", "FusedMatMul", [[2, 3, 17, 9], [2, 3, 9, 17], [1, 1, 17, 17]],
                   alpha=0.125),
        fused_case("fusedmm-3d-weight-bias-relu", "FusedMatMul", [[1, 13, 40], [40, 24], [24]], act="Relu"),
        fused_case("fusedmm-scale-only", "FusedMatMul", [[2, 5, 8], [2, 8, 7]], alpha=3.0),
        fused_case("fusedmm-gemv-bias", "FusedMatMul", [[1, 200], [200, 33], [33]], alpha=1.5, tol=TOL_LONG_K),
        fused_case("fusedmm-gemv-1d-relu", "FusedMatMul", [[70], [70, 50], [50]], act="Relu", tol=TOL_LONG_K),
        fused_case("fusedmm-bias-gelu", "FusedMatMul", [[1, 9, 40], [40, 24], [24]], act="Gelu"),
        fused_case("fusedmm-gelu-tanh", "FusedMatMul", [[5, 8], [8, 70], [70]], act="Gelu", approximate="tanh"),
        fused_case("fusedmm-gemv-gelu", "FusedMatMul", [[1, 96], [96, 40], [40]], act="Gelu", tol=TOL_LONG_K),
        fused_case("fusedgemm-gelu-tanh", "FusedGemm", [[7, 12], [12, 30], [30]], act="Gelu", approximate="tanh"),
        fused_case("fusedgemm-relu", "FusedGemm", [[19, 23], [30, 23], [30]], {"transB": 1, "alpha": 0.5}, act="Relu"),
        fused_case("fusedgemm-gemv-warp-relu", "FusedGemm", [[1, 130], [40, 130], [40]], {"transB": 1}, act="Relu",
                   tol=TOL_LONG_K),
        fused_case("fusedgemm-gemv-warp-k256-nobias", "FusedGemm", [[1, 256], [33, 256]], {"transB": 1}, act="Relu",
                   tol=TOL_LONG_K),
        fused_case("fusedgemm-gemv-col-relu", "FusedGemm", [[1, 150], [150, 37], [37]], act="Relu", tol=TOL_LONG_K),
        fused_case("fusedgemm-gemv-col-transA", "FusedGemm", [[90, 1], [90, 20], [1, 20]], {"transA": 1, "beta": 0.5},
                   act="Relu", tol=TOL_LONG_K),
        fused_case("fusedconv-3x3-relu", "FusedConv", [[1, 3, 9, 11], [5, 3, 3, 3], [5]], {"pads": [1, 1, 1, 1]},
                   act="Relu"),
        fused_case("fusedconv-group-nobias-relu", "FusedConv", [[2, 4, 10, 7], [6, 2, 3, 2]],
                   {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1]}, act="Relu"),
        fused_case("fusedconv-depthwise-relu", "FusedConv", [[1, 4, 9, 9], [4, 1, 3, 3], [4]],
                   {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}, act="Relu"),
        fused_case("fusedconv-depthwise-big-relu", "FusedConv", [[1, 3, 20, 18], [3, 1, 3, 3], [3]],
                   {"group": 3, "dilations": [2, 2], "pads": [2, 2, 2, 2]}, act="Relu"),
        fused_case("fusedconv-1x1-relu", "FusedConv", [[1, 8, 5, 5], [16, 8, 1, 1], [16]], act="Relu"),
        lstm_case("lstm-cell-b1-h37", 1, 37),
        lstm_case("lstm-cell-b3-h20", 3, 20),
        lstm_fused_case("lstmcell-b1-h37-i20-bias", 1, 37, 20),
        lstm_fused_case("lstmcell-b3-h100-i37-bias", 3, 100, 37, tol=TOL_LONG_K),
        lstm_fused_case("lstmcell-b6-h20-hoisted", 6, 20, 0, pre="rows"),
        lstm_fused_case("lstmcell-b9-h12-i5-nopre", 9, 12, 5, pre=None),
        lstm_fused_case("lstmcell-b2-h10-first-step", 2, 10, 0, recurrent=False, pre="rows"),
        lstm_fused_case("lstmcell-b5-h9-i7-no-h", 5, 9, 7, recurrent=False),
        c("softmax-3x70", "Softmax", [[3, 70]]),
        c("softmax-2x3x300", "Softmax", [[2, 3, 300]]),
        c("softmax-opset11-flatten", "Softmax", [[2, 3, 4]], {"axis": 1}, opset=11),
        c("layernorm-3x70", "LayerNormalization", [[3, 70], [70], [70]], {"epsilon": 1e-3}),
        c("layernorm-nobias-2x4x33", "LayerNormalization", [[2, 4, 33], [33]]),
        c("layernorm-axis1", "LayerNormalization", [[2, 3, 5], [3, 5], [3, 5]], {"axis": 1}),
        c("concat-axis1", "Concat", [[2, 3, 4], [2, 5, 4]], {"axis": 1}),
        c("concat-last-3", "Concat", [[2, 3], [2, 1], [2, 4]], {"axis": -1}),
        c("concat-axis0", "Concat", [[1, 6], [3, 6]], {"axis": 0}),
        c("split-axis0", "Split", [[6, 10]], {"axis": 0, "split": [2, 4]}, outputs=2),
        c("split-axis1-equal", "Split", [[2, 9, 3]], {"axis": 1}, outputs=3),
        c("slice-step2", "Slice", [[10, 8]], {"starts": [1], "ends": [9], "axes": [0], "steps": [2]}),
        c("slice-negative-step", "Slice", [[4, 9]], {"starts": [-1], "ends": [-100], "axes": [1], "steps": [-2]}),
        c("slice-clamped-end", "Slice", [[3, 10, 4]], {"starts": [0, 2], "ends": [3, 1000], "axes": [0, 1]}),
        c("transpose-2d", "Transpose", [[3, 5]], {"perm": [1, 0]}),
        c("transpose-batched-last2", "Transpose", [[2, 33, 40]], {"perm": [0, 2, 1]}),
        c("transpose-merged-to-last2", "Transpose", [[2, 3, 4, 5]], {"perm": [0, 2, 3, 1]}),
        c("transpose-general", "Transpose", [[2, 3, 4, 5]], {"perm": [3, 1, 0, 2]}),
        c("transpose-5d-unit", "Transpose", [[2, 3, 1, 4, 5]], {"perm": [4, 2, 0, 3, 1]}),
    ]
    for i, case in enumerate(cases):
        case.seed = i
    return cases


CASES = _cases()
PAIRS = [(b, case) for case in CASES for b in registry.for_op(case.node.op_type) if b.applies(case.node) is True]


def draw_inputs(case: Case) -> list[np.ndarray | None]:
    """Seeded random float32 inputs (positive where the op needs it)."""
    rng = np.random.default_rng(case.seed)
    arrays = []
    for i, t in enumerate(case.node.inputs):
        if t is None or t.dtype != "float32":
            arrays.append(None)
        elif i in case.positive:
            arrays.append(rng.uniform(0.5, 1.5, t.shape).astype(np.float32))
        else:
            arrays.append(rng.uniform(-2.0, 2.0, t.shape).astype(np.float32))
    return arrays


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max |a - b| / (1 + |b|); NaN (an unwritten output element) counts as infinite."""
    err = np.abs(got.astype(np.float64) - want) / (1.0 + np.abs(want))
    return float(np.inf) if np.isnan(err).any() else float(err.max(initial=0.0))


# ---- the references against onnxruntime ----------------------------------------------------------------------
def _ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """Outputs of onnxruntime on CPU."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("case", [c for c in CASES if c.model is not None], ids=lambda c: c.label)
def test_reference_matches_onnxruntime(case: Case) -> None:
    inputs = draw_inputs(case)
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    want = _ort_run(case.model, feeds)
    got = run_reference(case.node, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert rel_err(w, g) <= 1e-5


@pytest.mark.parametrize("batch,hidden", [(1, 5), (3, 8)])
def test_lstm_cell_reference_matches_onnx_lstm(batch: int, hidden: int) -> None:
    """One ONNX LSTM step with W = identity, R = 0, B = 0 turns its input into the gate pre-activations."""
    rng = np.random.default_rng(hidden)
    gates = rng.uniform(-2, 2, (batch, 4 * hidden)).astype(np.float32)
    c_prev = rng.uniform(-1, 1, (batch, hidden)).astype(np.float32)
    weights = {"W": np.eye(4 * hidden, dtype=np.float32)[None], "R": np.zeros((1, 4 * hidden, hidden), np.float32),
               "h0": np.zeros((1, batch, hidden), np.float32)}
    graph = helper.make_graph(
        [helper.make_node("LSTM", ["X", "W", "R", "", "", "h0", "c0"], ["", "Yh", "Yc"], hidden_size=hidden)], "lstm",
        [_value_info("X", [1, batch, 4 * hidden]), _value_info("c0", [1, batch, hidden])],
        [_value_info("Yh", None), _value_info("Yc", None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    yh, yc = _ort_run(model, {"X": gates[None], "c0": c_prev[None]})
    h, c = run_reference(lstm_case("lstm", batch, hidden).node, [gates, c_prev])
    assert rel_err(yh[0], h) <= 1e-5 and rel_err(yc[0], c) <= 1e-5


@pytest.mark.parametrize("batch,hidden,isize", [(1, 6, 5), (3, 9, 4)])
def test_lstm_fused_cell_reference_matches_onnx_lstm(batch: int, hidden: int, isize: int) -> None:
    """One ONNX LSTM step with W, R, B, h0 and c0 is LSTMCell(x, Wᵀ, h0, Rᵀ, Wb + Rb, c0)."""
    rng = np.random.default_rng(hidden)
    g = 4 * hidden
    w, r = rng.uniform(-1, 1, (1, g, isize)), rng.uniform(-1, 1, (1, g, hidden))
    bias = rng.uniform(-1, 1, (1, 2 * g))
    x, h0, c0 = (rng.uniform(-2, 2, (1, batch, n)) for n in (isize, hidden, hidden))
    weights = {k: v.astype(np.float32) for k, v in {"W": w, "R": r, "B": bias}.items()}
    graph = helper.make_graph(
        [helper.make_node("LSTM", ["X", "W", "R", "B", "", "h0", "c0"], ["", "Yh", "Yc"], hidden_size=hidden)],
        "lstm", [_value_info("X", [1, batch, isize]), _value_info("h0", [1, batch, hidden]),
                 _value_info("c0", [1, batch, hidden])],
        [_value_info("Yh", None), _value_info("Yc", None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    feeds = {k: v.astype(np.float32) for k, v in {"X": x, "h0": h0, "c0": c0}.items()}
    yh, yc = _ort_run(model, feeds)
    node = lstm_fused_case("lstm", batch, hidden, isize).node
    inputs = [feeds["X"][0], weights["W"][0].T, feeds["h0"][0], weights["R"][0].T,
              weights["B"][0, :g] + weights["B"][0, g:], feeds["c0"][0]]
    h, c = run_reference(node, inputs)
    assert rel_err(yh[0], h) <= 1e-5 and rel_err(yc[0], c) <= 1e-5


# ---- the legacy kernels on the CPU emulator ------------------------------------------------------------------
@pytest.fixture(scope="session")
def modules() -> dict:
    """One emulator module per legacy source, instantiating every kernel expression the test pairs launch."""
    pytest.importorskip("cuda_emu", reason="the CPU emulator (cuda_emu) is not available")
    return {source: build_module(source, exprs) for source, exprs in kernel_exprs((b, c.node) for b, c in PAIRS).items()}


@pytest.mark.parametrize("binding,case", PAIRS, ids=[f"{b.name}-{c.label}" for b, c in PAIRS])
def test_binding_matches_reference(binding: Binding, case: Case, modules: dict) -> None:
    inputs = draw_inputs(case)
    got = run_launches(modules[binding.source], binding.launch(case.node), case.node, inputs)
    want = run_reference(case.node, inputs)
    for g, w in zip(got, want):
        assert g.shape == tuple(w.shape)
        assert rel_err(g, w) <= case.tol


@pytest.mark.gpu
def test_bindings_on_the_gpu_match_reference() -> None:
    """The same pairs as the emulator test, launched as plain kernels on a GPU (NVRTC), one module per source."""
    from vdevice.gpu import GpuModule, gpu_available
    ok, why = gpu_available()
    if not ok:
        pytest.skip(why)
    gpu = {source: GpuModule((LEGACY_DIR / source).read_text(), exprs, [str(LEGACY_DIR)])
           for source, exprs in kernel_exprs((b, c.node) for b, c in PAIRS).items()}
    failures = []
    for binding, case in PAIRS:
        inputs = draw_inputs(case)
        got = run_launches(gpu[binding.source], binding.launch(case.node), case.node, inputs)
        errs = [rel_err(g, w) for g, w in zip(got, run_reference(case.node, inputs))]
        if max(errs) > case.tol:
            failures.append(f"{binding.name}-{case.label}: {max(errs):.3g}")
    assert not failures, failures


# ---- registry, geometry and refusals ---------------------------------------------------------------------------
def test_every_binding_is_tested_on_two_shapes() -> None:
    for b in registry.all():
        shapes = {tuple(t.shape for t in c.node.inputs if t is not None) for bb, c in PAIRS if bb is b}
        assert len(shapes) >= 2, f"{b.name} runs on {len(shapes)} test shapes"


def test_registry_is_consistent() -> None:
    names = [b.name for b in registry.all()]
    assert len(names) == len(set(names))
    for op in registry.op_types():
        assert all(b.op_type == op for b in registry.for_op(op))
    assert registry.for_op("NoSuchOp") == []
    with pytest.raises(KeyError, match="tiled16"):
        registry.get("MatMul", "nope")
    assert {"MatMul", "Gemm", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization", "Add",
            "Mul", "Sub", "Relu", "Sigmoid", "Tanh", "Gelu", "LSTMCellPointwise", "LSTMCell", "Softmax",
            "LayerNormalization",
            "Concat", "Split", "Slice", "Transpose"} <= set(registry.op_types())


def _node(op_type: str, shapes: list, attrs: dict | None = None) -> NodeInfo:
    """An inferred NodeInfo (through onnx_case)."""
    return onnx_case("n", op_type, shapes, attrs).node


@pytest.mark.parametrize("op_type,shapes,attrs", [
    ("MatMul", [[8, 300], [300, 200]], {}),
    ("Gemm", [[1, 512], [512, 300]], {}),
    ("Gemm", [[1, 512], [300, 512]], {"transB": 1}),
    ("Conv", [[1, 16, 28, 28], [32, 16, 3, 3]], {"pads": [1, 1, 1, 1]}),
])
def test_fast_and_efficient_variants_differ_in_rtasks(op_type: str, shapes: list, attrs: dict) -> None:
    node = _node(op_type, shapes, attrs)
    usable = registry.applicable(node)
    counts = {b.kind: set() for b in usable}
    for b in usable:
        counts[b.kind].add(sum(launch.rtasks for launch in b.launch(node)))
    assert counts.get("fast") and counts.get("efficient")
    assert min(counts["fast"]) < max(counts["efficient"])


def test_launch_geometry_is_well_formed() -> None:
    for b, case in PAIRS:
        for launch in b.launch(case.node):
            assert launch.kernel in b.kernels
            assert all(d >= 1 for d in launch.grid) and len(launch.grid) == 3 and len(launch.block) == 3
            assert 1 <= launch.threads <= 1024 and launch.dynamic_smem >= 0
            assert launch.flops >= 0 and launch.bytes > 0
            for arg in launch.args:
                assert arg[0] in ("in", "out", "temp", "scalar")
                if arg[0] == "in":
                    assert case.node.input(arg[1]) is not None


def test_gemm_flops_and_splitk_launches() -> None:
    node = _node("MatMul", [[1, 1000], [1000, 70]])
    (tiled,) = registry.get("MatMul", "tiled16").launch(node)
    assert tiled.flops == 70 * (2 * 1000 + 1) and tiled.bytes == 4 * (1000 + 1000 * 70 + 70)
    partial, reduce = registry.get("MatMul", "gemv_splitk32x8").launch(node)
    temp_args = [a for a in partial.args if a[0] == "temp"]
    assert temp_args and temp_args == [a for a in reduce.args if a[0] == "temp"]
    splits = partial.grid[1]
    assert splits >= 2 and temp_args[0][2] == 4 * splits * 70 and splits * 64 >= 1000


@pytest.mark.parametrize("op_type,variant,node,reason", [
    ("MatMul", "tiled16", NodeInfo("MatMul", "n", [TensorInfo((3, 4)), TensorInfo((5, 6))], [TensorInfo((3, 6))]),
     "inner dimensions"),
    ("MatMul", "gemv_col32x8", NodeInfo("MatMul", "n", [TensorInfo((3, 4)), TensorInfo((4, 6))],
                                        [TensorInfo((3, 6))]), "M == 1"),
    ("MatMul", "tiled16", NodeInfo("MatMul", "n", [TensorInfo((3, 4), "float16"), TensorInfo((4, 6))],
                                   [TensorInfo((3, 6))]), "float32 only"),
    ("MatMul", "tiled16", NodeInfo("MatMul", "n", [TensorInfo((2, 1, 3, 4)), TensorInfo((1, 5, 4, 6))],
                                   [TensorInfo((2, 5, 3, 6))]), "partially"),
    ("Gemm", "gemv_warp2", NodeInfo("Gemm", "n", [TensorInfo((1, 4)), TensorInfo((4, 6))], [TensorInfo((1, 6))]),
     "transB"),
    ("Conv", "direct128", NodeInfo("Conv", "n", [TensorInfo((1, 3, 5, 5)), TensorInfo((4, 2, 3, 3))],
                                   [TensorInfo((1, 4, 3, 3))], {"group": 2}), "does not divide"),
    ("Conv", "depthwise16", NodeInfo("Conv", "n", [TensorInfo((1, 4, 5, 5)), TensorInfo((4, 4, 3, 3))],
                                     [TensorInfo((1, 4, 3, 3))]), "not depthwise"),
    ("Conv", "direct128", NodeInfo("Conv", "n", [TensorInfo((1, 4, 5, 5)), TensorInfo((4, 4, 3, 3))],
                                   [TensorInfo((1, 4, 4, 4))]), "does not follow"),
    ("MaxPool", "direct", NodeInfo("MaxPool", "n", [TensorInfo((1, 4, 5, 5))], [TensorInfo((1, 4, 3, 3))]),
     "kernel_shape"),
    ("Transpose", "tiled", NodeInfo("Transpose", "n", [TensorInfo((2, 3, 4))], [TensorInfo((4, 3, 2))]),
     "not a swap"),
    ("Slice", "copy", NodeInfo("Slice", "n", [TensorInfo((4, 6))], [TensorInfo((2, 3))],
                               {"starts": [0, 0], "ends": [2, 3]}), "one"),
    ("Softmax", "block256", NodeInfo("Softmax", "n", [TensorInfo((2, 3))], [TensorInfo((2, 3))], {"axis": 0}),
     "last axis"),
    ("Add", "same_shape", NodeInfo("Add", "n", [TensorInfo((2, 3)), TensorInfo((3,))], [TensorInfo((2, 3))]),
     "differ"),
    ("Add", "broadcast", NodeInfo("Add", "n", [TensorInfo((2, 3)), TensorInfo((4,))], [TensorInfo((2, 3))]),
     "do not broadcast"),
    ("Gelu", "direct", NodeInfo("Gelu", "n", [TensorInfo((2, 3))], [TensorInfo((2, 3))], {"approximate": "x"}),
     "approximate"),
    ("LayerNormalization", "warp4", NodeInfo("LayerNormalization", "n", [TensorInfo((2, 3)), TensorInfo((3,))],
                                             [TensorInfo((2, 3)), TensorInfo((2, 1))]), "optional output"),
    ("Relu", "direct", NodeInfo("Relu", "n", [TensorInfo((0, 3))], [TensorInfo((0, 3))]), "empty"),
    ("LSTMCell", "fused_j8", NodeInfo("LSTMCell", "n", [TensorInfo((2, 3)), None, None, None, None,
                                                        TensorInfo((2, 4))], [TensorInfo((2, 4)), TensorInfo((2, 4))]),
     "together"),
    ("LSTMCell", "fused_j32", NodeInfo("LSTMCell", "n", [None, None, TensorInfo((2, 4)), TensorInfo((4, 16)),
                                                         TensorInfo((3, 16)), TensorInfo((2, 4))],
                                       [TensorInfo((2, 4)), TensorInfo((2, 4))]), "pre must be"),
    ("FusedMatMul", "tiled16", NodeInfo("FusedMatMul", "n", [TensorInfo((2, 3, 4)), TensorInfo((4, 5)),
                                                             TensorInfo((2, 3, 5))], [TensorInfo((2, 3, 5))]),
     "without batch dims"),
    ("FusedConv", "direct128", NodeInfo("FusedConv", "n", [TensorInfo((1, 2, 5, 5)), TensorInfo((3, 2, 3, 3))],
                                        [TensorInfo((1, 3, 3, 3))], {"activation": "Gelu"}), "Relu only"),
    ("FusedMatMul", "tiled16", NodeInfo("FusedMatMul", "n", [TensorInfo((3, 4)), TensorInfo((4, 5))],
                                        [TensorInfo((3, 5))], {"activation": "Tanh"}), "Relu, Gelu, GeluTanh only"),
])
def test_refusals_give_one_line_reasons(op_type: str, variant: str, node: NodeInfo, reason: str) -> None:
    binding = registry.get(op_type, variant)
    verdict = binding.applies(node)
    assert isinstance(verdict, str) and reason in verdict and "\n" not in verdict
    with pytest.raises(NotApplicable, match=reason):
        binding.launch(node)
    assert binding not in registry.applicable(node)


# ---- the sources compile with nvcc (device code, every instantiation the tests use) ------------------------------
@pytest.mark.nvcc
def test_sources_compile_with_nvcc(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    exprs = kernel_exprs((b, c.node) for b, c in PAIRS)
    lines = [f'#include "{LEGACY_DIR / source}"' for source in sorted(exprs)]
    lines.append("void instantiate_all() {")
    lines += [f"  (void)&{expr};" for source in sorted(exprs) for expr in exprs[source]]
    lines.append("}")
    unit = tmp_path / "all_kernels.cu"
    unit.write_text("\n".join(lines) + "\n")
    result = subprocess.run([nvcc, "-arch=sm_90", "-std=c++17", "-c", str(unit), "-o", str(tmp_path / "all.o")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
