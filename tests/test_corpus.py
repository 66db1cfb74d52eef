"""The kernel corpus: every binding's legacy kernels, run on the CPU emulator, against numpy references of the ONNX
operators; the references against onnxruntime; registry rules, launch geometry and refusals."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernel_corpus.bindings import (LEGACY_DIR, PRECISION_TOL, Binding, In, NodeInfo, NotApplicable, OpDef, Out, Scalar,
                                    Shape, Temp, TensorInfo, registry)
from kernel_corpus.cpu_run import build_module, kernel_exprs, run_launches
from kernel_corpus.reference import node_model, run_reference, shape_node
from toolchain.nvcc import nvcc_compile

def _value_info(name: str, shape) -> onnx.ValueInfoProto:
    """A float graph input or (shape unknown) output."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


@dataclass
class Case:
    """One node to test: an op's reference shape made concrete (output shapes inferred), with its tolerance."""

    label: str
    node: NodeInfo
    op: OpDef
    tol: float
    seed: int = 0
    positive: tuple[int, ...] = ()   # inputs drawn in [0.5, 1.5] (variances, divisors)
    ranges: dict = dataclasses.field(default_factory=dict)  # integer inputs drawn in [low, high)

    @property
    def model(self) -> onnx.ModelProto:
        """The node as standard ONNX (a custom op as its equivalent graph), for onnxruntime."""
        return node_model(self.node, self.op)


def _cases() -> list[Case]:
    """Every test shape of every op definition (the model-sized ones only evaluate launch geometry)."""
    cases = []
    for d in registry.ops():
        for s in d.shapes:
            if s.test:
                label = s.label or s.key(d.op_type)
                cases.append(Case(label, shape_node(d, s, label), d, s.tol, len(cases), s.positive, s.ranges))
    return cases


def _node_of(op_type: str, shapes: list, attrs: dict | None = None, outputs: int = 1) -> NodeInfo:
    """An inferred NodeInfo of one op (through its definition's constant inputs and shape inference)."""
    d = registry.op(op_type)
    return shape_node(d, Shape(tuple(None if s is None else tuple(s) for s in shapes), dict(attrs or {}),
                               outputs=outputs), "n")


CASES = _cases()
# Every binding on every case it applies to, except split-K tensor-core tiles at the reduced precisions: the split
# (the k ranges, the partial sums, the fixup's order) is the same code at every precision, so the split variants run
# here at 3xTF32 on every case, and tests/test_wmma.py checks splits at every precision bit for bit against numpy.
SPLIT_AT_REDUCED_PRECISION = re.compile(r"tc\d+x\d+k\d+_(tf32|bf16)")
ALL_PAIRS = [(b, case) for case in CASES for b in registry.for_op(case.node.op_type) if b.applies(case.node)
             and not SPLIT_AT_REDUCED_PRECISION.fullmatch(b.variant)]
# Thinned (issue 27: the README's test command within 15 minutes cold): variants whose difference from a variant run
# on every case is arithmetic that other tests check bit for bit at every setting run here on the THIN_SHAPES
# cheapest test shapes they apply to (least flops + bytes of their launches; distinct input shapes), under the same
# sanitizers: a tensor-core tile at TF32 or BF16 (the same code as its 3xTF32 form, which runs on every case, but for
# the operand split; tests/test_wmma.py checks every tile at every precision against numpy bit for bit), and split-K
# variants (the same tile as their unsplit form, which runs on every case, plus the k ranges and the fixup;
# test_wmma's split cases and test_fp32_split_k_gemm/conv_is_bit_exact below check every split factor bit for bit).
THINNED = re.compile(r"tc\d+x\d+_(tf32|bf16)|tc\d+x\d+k\d+_3xtf32|tiled16k\d+|regblock32x32k\d+|implicit_gemm16k\d+")
THIN_SHAPES = 2


def _shape_key(case: Case) -> tuple:
    return tuple(t.shape for t in case.node.inputs if t is not None)


def _thinned(pairs: list) -> list:
    """pairs less the thinned variants' cases beyond their THIN_SHAPES cheapest distinct shapes (see THINNED)."""
    shapes: dict[str, set[tuple]] = {}
    kept: set[tuple[str, str]] = set()
    for b, case in sorted((p for p in pairs if THINNED.fullmatch(p[0].variant)),
                          key=lambda p: sum(ln.flops + ln.bytes for ln in p[0].launch(p[1].node))):
        seen = shapes.setdefault(b.name, set())
        if len(seen) < THIN_SHAPES and _shape_key(case) not in seen:
            seen.add(_shape_key(case))
            kept.add((b.name, case.label))
    pairs = [(b, case) for b, case in pairs if not THINNED.fullmatch(b.variant) or (b.name, case.label) in kept]
    # the shapes an op's split tensor-core forms run on (long K: the shapes are there for them) take each unsplit
    # 3xTF32 tile only on the cheapest one: the unsplit k loop is the split forms' loop over all of K (these were the
    # longest tests of the file)
    split_cases: dict[str, list[Case]] = {}
    for b, case in pairs:
        if re.fullmatch(r"tc\d+x\d+k\d+_3xtf32", b.variant) and case not in split_cases.setdefault(b.op_type, []):
            split_cases[b.op_type].append(case)
    drop = set()
    for b, case in pairs:
        big = split_cases.get(b.op_type, []) if re.fullmatch(r"tc\d+x\d+_3xtf32", b.variant) else []
        if case in big and case is not min(big, key=lambda c: sum(ln.flops + ln.bytes for ln in b.launch(c.node))):
            drop.add((b.name, case.label))
    return [(b, case) for b, case in pairs if (b.name, case.label) not in drop]


PAIRS = _thinned(ALL_PAIRS)


def draw_inputs(case: Case) -> list[np.ndarray | None]:
    """Seeded random inputs: float32 (positive where the op needs it), bool, integers in their given range."""
    rng = np.random.default_rng(case.seed)
    arrays = []
    constant = {pos for pos, key in enumerate(case.op.constant_inputs, start=1) if key in case.node.attrs}
    for i, t in enumerate(case.node.inputs):
        if i in constant:
            arrays.append(None)  # given as an attribute: an initializer of the reference model
        elif t is not None and t.dtype == "bool":
            arrays.append(np.asarray(rng.random(t.shape) < 0.5))  # a 0-d draw is a numpy scalar otherwise
        elif t is not None and i in case.ranges:
            arrays.append(rng.integers(*case.ranges[i], size=t.shape).astype(t.dtype))
        elif t is None or t.dtype != "float32":
            arrays.append(None)
        else:
            low, high = (0.5, 1.5) if i in case.positive else (-2.0, 2.0)
            x = np.asarray(rng.uniform(low, high, t.shape), dtype=np.float32)
            if case.op.op_type in FLOAT_SPECIALS:  # what these ops tell apart: NaN, +inf and -inf among numbers
                x.reshape(-1)[rng.permutation(x.size)[:3 * x.size // 4]] = np.resize([np.nan, np.inf, -np.inf],
                                                                                   3 * x.size // 4)
            arrays.append(x)
    return arrays


FLOAT_SPECIALS = {"IsNaN", "IsInf"}  # ops whose inputs are drawn with NaN and infinities among them


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


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_reference_matches_onnxruntime(case: Case) -> None:
    """onnx's ReferenceEvaluator (and the few hand-written overrides) against onnxruntime on the same node, or on
    a custom op's equivalent standard graph: two independent implementations of the truth agree."""
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
    h, c = run_reference(_node_of("LSTMCellPointwise", [(batch, 4 * hidden), (batch, hidden)], outputs=2),
                         [gates, c_prev])
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
    node = _node_of("LSTMCell", [(batch, isize), (isize, g), (batch, hidden), (hidden, g), (g,), (batch, hidden)],
                    outputs=2)
    inputs = [feeds["X"][0], weights["W"][0].T, feeds["h0"][0], weights["R"][0].T,
              weights["B"][0, :g] + weights["B"][0, g:], feeds["c0"][0]]
    h, c = run_reference(node, inputs)
    assert rel_err(yh[0], h) <= 1e-5 and rel_err(yc[0], c) <= 1e-5


# ---- the legacy kernels on the CPU emulator ------------------------------------------------------------------
# Kernel instantiations per emulator module: the emulator lays every static __shared__ variable of a module out in
# one static area of 1 MiB per block (emu_runtime.h, kStaticSmemCap), and tc.cu's pipelines take up to 44 KB each.
MODULE_INSTANCES = 24


class Modules:
    """Emulator modules of the legacy sources, built on first use, each instantiating at most MODULE_INSTANCES of the
    kernel expressions the test pairs launch (a binding's launches always share one module)."""

    def __init__(self) -> None:
        self.groups: dict[str, list[set[str]]] = {}
        for (binding, case) in PAIRS:
            exprs = {ln.expr for ln in binding.launch(case.node)}
            groups = self.groups.setdefault(binding.source, [])
            if any(exprs <= g for g in groups):
                continue
            if not groups or len(groups[-1] | exprs) > MODULE_INSTANCES:
                groups.append(set())
            groups[-1] |= exprs
        self.built: dict[tuple[str, int], object] = {}

    def of(self, source: str, launches: list) -> object:
        """The module of `source` that instantiates every expression of these launches."""
        exprs = {ln.expr for ln in launches}
        i = next(i for i, g in enumerate(self.groups[source]) if exprs <= g)
        if (source, i) not in self.built:
            self.built[(source, i)] = build_module(source, sorted(self.groups[source][i]), sanitize="all")
        return self.built[(source, i)]


@pytest.fixture(scope="session")
def modules() -> Modules:
    """The emulator modules of the test pairs (see Modules)."""
    pytest.importorskip("cuda_emu", reason="the CPU emulator (cuda_emu) is not available")
    return Modules()


@pytest.mark.parametrize("binding,case", PAIRS, ids=[f"{b.name}-{c.label}" for b, c in PAIRS])
def test_binding_matches_reference(binding: Binding, case: Case, modules: Modules) -> None:
    inputs = draw_inputs(case)
    launches = binding.launch(case.node)
    got = run_launches(modules.of(binding.source, launches), launches, case.node, inputs)
    want = run_reference(case.node, inputs)
    for g, w in zip(got, want):
        assert g.shape == tuple(w.shape)
        assert rel_err(g, w) <= max(case.tol, PRECISION_TOL[binding.precision])


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
        if max(errs) > max(case.tol, PRECISION_TOL[binding.precision]):
            failures.append(f"{binding.name}-{case.label}: {max(errs):.3g}")
    assert not failures, failures


# ---- registry, geometry and refusals ---------------------------------------------------------------------------
def test_every_binding_is_tested_on_two_shapes() -> None:
    """Every binding has at least two test shapes it applies to (a split tensor-core tile at a reduced precision
    counts the shapes it applies to, run here at 3xTF32: see PAIRS)."""
    for b in registry.all():
        applies = {tuple(t.shape for t in c.node.inputs if t is not None)
                   for c in CASES if c.node.op_type == b.op_type and b.applies(c.node)}
        ran = {tuple(t.shape for t in c.node.inputs if t is not None) for bb, c in PAIRS if bb is b}
        shapes = applies if SPLIT_AT_REDUCED_PRECISION.fullmatch(b.variant) else ran
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


@pytest.mark.parametrize("op_type,shapes,attrs", [
    ("MatMul", [[8, 300], [300, 200]], {}),
    ("Gemm", [[1, 512], [512, 300]], {}),
    ("Gemm", [[1, 512], [300, 512]], {"transB": 1}),
    ("Conv", [[1, 16, 28, 28], [32, 16, 3, 3]], {"pads": [1, 1, 1, 1]}),
])
def test_fast_and_efficient_variants_differ_in_rtasks(op_type: str, shapes: list, attrs: dict) -> None:
    node = _node_of(op_type, shapes, attrs)
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
                assert isinstance(arg, (In, Out, Temp, Scalar))
                if isinstance(arg, In):
                    assert case.node.input(arg.index) is not None


def test_gemm_flops_and_splitk_launches() -> None:
    node = _node_of("MatMul", [[1, 1000], [1000, 70]])
    (tiled,) = registry.get("MatMul", "tiled16").launch(node)
    assert tiled.flops == 70 * (2 * 1000 + 1) and tiled.bytes == 4 * (1000 + 1000 * 70 + 70)
    partial, reduce = registry.get("MatMul", "gemv_splitk32x8").launch(node)
    temp_args = [a for a in partial.args if isinstance(a, Temp)]
    assert temp_args and temp_args == [a for a in reduce.args if isinstance(a, Temp)]
    splits = partial.grid[1]
    assert splits >= 2 and temp_args[0].nbytes == 4 * splits * 70 and splits * 64 >= 1000


def _fp32_chain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b as the CUDA-core kernels sum on the emulator: k in order, each product rounded to float32, then added."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(a.shape[1]):
        acc = (acc + np.outer(a[:, k], b[k]).astype(np.float32)).astype(np.float32)
    return acc


def _split_sum(a: np.ndarray, b: np.ndarray, splits: int, step: int) -> np.ndarray:
    """Split-K as the kernels document it: ceil(K / step) steps shared out (split s from step s * steps // splits),
    each split's sum from zero, the partial sums added in split order."""
    steps = -(-a.shape[1] // step)
    edges = [min(a.shape[1], s * steps // splits * step) for s in range(splits + 1)]
    parts = [_fp32_chain(a[:, k0:k1], b[k0:k1]) for k0, k1 in zip(edges, edges[1:])]
    acc = parts[0]
    for p in parts[1:]:
        acc = (acc + p).astype(np.float32)
    return acc


@pytest.mark.parametrize("variant,step", [("tiled16", 16), ("tiled16k4", 16), ("tiled16k16", 16),
                                          ("regblock32x32k4", 8), ("regblock32x32k16", 8)])
def test_fp32_split_k_gemm_is_bit_exact(variant: str, step: int) -> None:
    """The CUDA-core GEMMs split over K (partial sums, then gemm_splitk_reduce) give numpy's float32 model of their
    arithmetic bit for bit, for every split factor (MatMul with a broadcast batch; Relu epilogue in FusedMatMul)."""
    node = _node_of("FusedMatMul", [[2, 9, 1100], [1100, 21], [21]], {"activation": "Relu"})
    rng = np.random.default_rng(step)
    a, b = rng.uniform(-2, 2, (2, 9, 1100)).astype(np.float32), rng.uniform(-2, 2, (1100, 21)).astype(np.float32)
    c = rng.uniform(-1, 1, 21).astype(np.float32)
    binding = registry.get("FusedMatMul", variant)
    mod = build_module("gemm.cu", [ln.expr for ln in binding.launch(node)], sanitize="all")
    (got,) = run_launches(mod, binding.launch(node), node, [a, b, c])
    splits = int(variant.rsplit("k", 1)[1]) if "k" in variant else 1
    for z in range(2):
        want = np.maximum((_split_sum(a[z], b, splits, step) + c).astype(np.float32), np.float32(0))
        assert np.array_equal(got[z].view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("splits,op_type", [(1, "FusedConv"), (4, "FusedConv"), (16, "FusedConv"),
                                            (1, "FusedConvAdd"), (4, "FusedConvAdd"), (16, "FusedConvAdd")])
def test_fp32_split_k_conv_is_bit_exact(splits: int, op_type: str) -> None:
    """conv_implicit_gemm split over R = C/group*KH*KW (then conv_splitk_reduce): numpy's float32 model on its
    im2col, bias, FusedConvAdd's residual (added once, after the splits' sum) and Relu, bit for bit, for every split
    factor; grouped and padded."""
    res = op_type == "FusedConvAdd"
    node = _node_of(op_type, [[2, 256, 3, 3], [10, 128, 3, 3], [10]] + ([[2, 10, 3, 3]] if res else []),
                    {"group": 2, "pads": [1, 1, 1, 1], "activation": "Relu"})
    rng = np.random.default_rng(splits)
    x = rng.uniform(-2, 2, (2, 256, 3, 3)).astype(np.float32)
    w = rng.uniform(-2, 2, (10, 128, 3, 3)).astype(np.float32)
    bias = rng.uniform(-1, 1, 10).astype(np.float32)
    z = rng.uniform(-40, 40, (2, 10, 3, 3)).astype(np.float32)
    binding = registry.get(op_type, f"implicit_gemm16k{splits}" if splits > 1 else "implicit_gemm16")
    mod = build_module("conv.cu", [ln.expr for ln in binding.launch(node)], sanitize="all")
    (got,) = run_launches(mod, binding.launch(node), node, [x, w, bias] + ([z] if res else []))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for g in range(2):
        cols = np.stack([xp[:, g * 128 + c, kh:kh + 3, kw:kw + 3].reshape(-1)
                         for c in range(128) for kh in range(3) for kw in range(3)])  # [R, N*OH*OW]
        acc = (_split_sum(w[g * 5:(g + 1) * 5].reshape(5, -1), cols, splits, 16)
               + bias[g * 5:(g + 1) * 5, None]).astype(np.float32)
        if res:
            acc = (acc + z[:, g * 5:(g + 1) * 5].transpose(1, 0, 2, 3).reshape(5, -1)).astype(np.float32)
        want = np.maximum(acc, np.float32(0))
        assert np.array_equal(got[:, g * 5:(g + 1) * 5].transpose(1, 0, 2, 3).reshape(5, -1).view(np.uint32),
                              want.view(np.uint32))


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
    ("Conv", "tc32x32_3xtf32", NodeInfo("Conv", "n", [TensorInfo((1, 4096, 512, 512)), TensorInfo((8, 4096, 3, 3))],
                                        [TensorInfo((1, 8, 510, 510))]), "int32"),  # im2col byte offsets
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
                                             [TensorInfo((2, 3)), TensorInfo((2, 1))], {"stash_type": 0}),
     "stash_type"),
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
    refused = binding.refusal(node)
    assert refused is not None and not binding.applies(node)
    assert refused.by == binding.name and reason in refused.reason and "\n" not in refused.reason
    with pytest.raises(NotApplicable, match=reason):
        binding.launch(node)
    assert binding not in registry.applicable(node)


# ---- the sources compile with nvcc (device code, every instantiation the tests use) ------------------------------
@pytest.mark.slow  # nvcc of every instantiation the tests use: half a minute of CPU (the CI's slow step runs it)
@pytest.mark.nvcc
def test_sources_compile_with_nvcc(tmp_path: Path, nvcc_path: str) -> None:
    exprs = kernel_exprs((b, c.node) for b, c in PAIRS)
    lines = [f'#include "{LEGACY_DIR / source}"' for source in sorted(exprs)]
    lines.append("void instantiate_all() {")
    lines += [f"  (void)&{expr};" for source in sorted(exprs) for expr in exprs[source]]
    lines.append("}")
    unit = tmp_path / "all_kernels.cu"
    unit.write_text("\n".join(lines) + "\n")
    result = nvcc_compile(unit, tmp_path / "all.o")
    assert result.returncode == 0, result.stderr[-3000:]


def test_launch_arguments_read_back_from_their_json() -> None:
    """Every argument kind a binding's launch takes survives plan.json (arg_to_json, then json, then
    arg_from_json: tests/calibration.py re-prices stored plans this way)."""
    import json

    from kernel_corpus.bindings import arg_from_json, arg_to_json
    args = [In(2), Out(0), Temp("partials", 4096), Scalar("int32", -7), Scalar("float32", 0.5)]
    assert [arg_from_json(json.loads(json.dumps(arg_to_json(a)))) for a in args] == args
