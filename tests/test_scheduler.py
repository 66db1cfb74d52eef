"""Scheduler front end, profiler and mechanism: ONNX import, passes (checked against onnxruntime on the original
model), support check, cost model and measured cache, rProgram timing and plan.json."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernel_corpus.bindings import In, Launch, Out
from scheduler.graph import SchedulerError
from scheduler.onnx_import import ModelError, import_model
from scheduler.passes import run_passes
from scheduler.pipeline import check_plan, plan_model
from scheduler.profiler import H100, Measurement, Profiler, Resources
from scheduler.reference import run_graph
from scheduler.simulate import makespan
from scheduler.workload import UnsupportedOpError, build_workload
from vdevice.program import KernelRef, Op, Program, Run, TaskRef, Wait

REPO = Path(__file__).resolve().parent.parent


# ---- small ONNX models built in the tests ---------------------------------------------------------------------
class Builder:
    """Nodes, initializers and I/O of one test model, with seeded weights."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, stem: str) -> str:
        """A fresh tensor/node name."""
        self.count += 1
        return f"{stem}{self.count}"

    def weight(self, shape: tuple[int, ...], scale: float = 0.3, positive: bool = False) -> str:
        """A float32 initializer (positive ones for variances)."""
        value = self.rng.standard_normal(shape).astype(np.float32) * scale
        if positive:
            value = np.abs(value) + 0.5
        return self.const(value)

    def const(self, value: np.ndarray) -> str:
        """Any initializer."""
        name = self.name("w")
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs) -> list[str]:
        """Append a node; returns its output names."""
        outs = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(f"n_{op_type}"), **attrs))
        return outs

    def one(self, op_type: str, inputs: list[str], **attrs) -> str:
        """Append a single-output node."""
        return self.op(op_type, inputs, **attrs)[0]

    def model(self, inputs: dict[str, tuple], outputs: dict[str, tuple], opset: int = 17) -> onnx.ModelProto:
        """The checked model."""
        g = helper.make_graph(
            self.nodes, "test",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def mlp_model(batch: int = 2, dims: tuple[int, ...] = (16, 32, 24, 8)) -> onnx.ModelProto:
    """MatMul+Add+Relu, then Gemm(transB)+BatchNormalization (folded) and Tanh."""
    b = Builder(1)
    d0, d1, d2, d3 = dims
    h = b.one("Relu", [b.one("Add", [b.one("MatMul", ["x", b.weight((d0, d1))]), b.weight((d1,))])])
    g = b.one("Gemm", [h, b.weight((d2, d1)), b.weight((d2,))], transB=1, alpha=0.7, beta=1.3)
    bn = b.one("BatchNormalization", [g, b.weight((d2,)), b.weight((d2,)), b.weight((d2,)),
                                      b.weight((d2,), positive=True)], epsilon=1e-3)
    b.one("Tanh", [b.one("MatMul", [b.one("Relu", [bn]), b.weight((d2, d3))])])
    b.nodes[-1].output[0] = "y"
    return b.model({"x": (batch, d0)}, {"y": (batch, d3)})


def lstm_model(steps: int = 8, batch: int = 2, isize: int = 5, hidden: int = 6, layers: int = 2,
               init: bool = False, bias: bool = True) -> onnx.ModelProto:
    """Stacked forward LSTMs (Squeeze between layers); outputs the top Y and the first layer's Y_c."""
    b = Builder(2)
    x = "x"
    for layer in range(layers):
        ins = [x, b.weight((1, 4 * hidden, isize if layer == 0 else hidden)), b.weight((1, 4 * hidden, hidden)),
               b.weight((1, 8 * hidden)) if bias else "", ""]
        if init and layer == layers - 1:
            ins += [b.weight((1, batch, hidden)), b.weight((1, batch, hidden))]
        y, _, yc = b.op("LSTM", ins, outputs=3, hidden_size=hidden)
        if layer == 0:
            first_c = yc
        x = b.one("Squeeze", [y, b.const(np.array([1], np.int64))])
    b.nodes[-1].output[0] = "y"
    return b.model({"x": (steps, batch, isize)}, {"y": (steps, batch, hidden), first_c: (1, batch, hidden)})


def cnn_model(batch: int = 1, channels: int = 8, size: int = 8, groups: int = 4) -> onnx.ModelProto:
    """Conv+BN+Relu stem, a residual block whose branch has a grouped conv, pooling, Flatten, Gemm."""
    b = Builder(3)
    c = channels

    def conv_bn_relu(x: str, cin: int, group: int = 1) -> str:
        y = b.one("Conv", [x, b.weight((c, cin // group, 3, 3)), b.weight((c,))], pads=[1, 1, 1, 1], group=group)
        y = b.one("BatchNormalization", [y, b.weight((c,)), b.weight((c,)), b.weight((c,)),
                                         b.weight((c,), positive=True)])
        return b.one("Relu", [y])

    stem = conv_bn_relu("x", 3)
    branch = conv_bn_relu(stem, c, groups)
    branch = b.one("Conv", [branch, b.weight((c, c, 1, 1))])
    res = b.one("Add", [stem, branch])
    pooled = b.one("MaxPool", [res], kernel_shape=[2, 2], strides=[2, 2])
    gap = b.one("GlobalAveragePool", [b.one("Relu", [pooled])])
    flat = b.one("Flatten", [gap])
    b.one("Gemm", [flat, b.weight((10, c)), b.weight((10,))], transB=1)
    b.nodes[-1].output[0] = "y"
    return b.model({"x": (batch, 3, size, size)}, {"y": (batch, 10)})


def transformer_model(batch: int = 1, seq: int = 8, d: int = 16, heads: int = 2) -> onnx.ModelProto:
    """Pre-LN block: attention (Transpose, MatMul, Softmax) and an MLP with Gelu; the head merge Reshape
    takes its shape from a Shape/Gather/Unsqueeze/Concat subgraph (constant-folded)."""
    b = Builder(4)
    dh = d // heads
    ln1 = b.one("LayerNormalization", ["x", b.weight((d,)), b.weight((d,))], axis=-1, epsilon=1e-5)
    split_shape = b.const(np.array([batch, seq, heads, dh], np.int64))

    def heads_of(w: str, perm: list[int]) -> str:
        return b.one("Transpose", [b.one("Reshape", [b.one("MatMul", [ln1, w]), split_shape])], perm=perm)

    q = heads_of(b.weight((d, d)), [0, 2, 1, 3])
    k = heads_of(b.weight((d, d)), [0, 2, 3, 1])
    v = heads_of(b.weight((d, d)), [0, 2, 1, 3])
    scores = b.one("Mul", [b.one("MatMul", [q, k]), b.const(np.array(dh ** -0.5, np.float32))])
    ctx = b.one("Transpose", [b.one("MatMul", [b.one("Softmax", [scores], axis=-1), v])], perm=[0, 2, 1, 3])
    batch_dim = b.one("Unsqueeze", [b.one("Gather", [b.one("Shape", ["x"]), b.const(np.array(0, np.int64))]),
                                    b.const(np.array([0], np.int64))])
    merge_shape = b.one("Concat", [batch_dim, b.const(np.array([seq, d], np.int64))], axis=0)
    attn = b.one("MatMul", [b.one("Reshape", [ctx, merge_shape]), b.weight((d, d))])
    h = b.one("Add", ["x", attn])
    ln2 = b.one("LayerNormalization", [h, b.weight((d,)), b.weight((d,))], axis=-1)
    mlp = b.one("Gelu", [b.one("Add", [b.one("MatMul", [ln2, b.weight((d, 4 * d))]), b.weight((4 * d,))])])
    b.one("Add", [h, b.one("MatMul", [mlp, b.weight((4 * d, d))])])
    b.nodes[-1].output[0] = "y"
    return b.model({"x": (batch, seq, d)}, {"y": (batch, seq, d)}, opset=20)


MODELS = {
    "mlp": lambda: mlp_model(3),
    "lstm": lambda: lstm_model(init=True),
    "cnn": lambda: cnn_model(2),
    "transformer": lambda: transformer_model(),
}


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for every graph input."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    return {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
            for vi in model.graph.input if vi.name not in inits}


def assert_same_as_onnxruntime(model: onnx.ModelProto) -> None:
    """Import + passes, then the numpy evaluator on the passed graph vs onnxruntime on the original."""
    feeds = feeds_for(model)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    graph = run_passes(import_model(model))
    got = run_graph(graph, feeds)
    for name, want in zip([o.name for o in model.graph.output], expected):
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max())))


# ---- import + passes preserve semantics --------------------------------------------------------------------------
@pytest.mark.parametrize("batch,dims", [(1, (16, 32, 24, 8)), (5, (7, 3, 9, 2))])
def test_mlp_passes_match_onnxruntime(batch: int, dims: tuple[int, ...]) -> None:
    model = mlp_model(batch, dims)
    assert_same_as_onnxruntime(model)
    graph = run_passes(import_model(model))
    assert "BatchNormalization" not in {n.op_type for n in graph.nodes}  # folded into the Gemm


def epilogue_model() -> onnx.ModelProto:
    """MatMul epilogues the fusion must take (scale then mask; bias) and must leave (two readers, a graph output,
    a bias with batch dims, a non-constant addend, a Div with the MatMul as divisor)."""
    b = Builder(21)
    q = b.one("MatMul", ["x", b.weight((6, 5))])                                        # [2, 3, 4, 5]
    k = b.one("Transpose", [b.one("MatMul", ["x", b.weight((6, 5))])], perm=[0, 1, 3, 2])
    s = b.one("Add", [b.const(np.triu(np.full((1, 1, 4, 4), -3.0, np.float32), 1)),
                      b.one("Div", [b.one("MatMul", [q, k]), b.const(np.float32(2.5))])])  # fused: alpha 0.4, mask
    p = b.one("Softmax", [s])
    h = b.one("Relu", [b.one("Add", [b.one("MatMul", [p, b.weight((4, 4))]), b.weight((4,))])])  # fused: bias
    two = b.one("MatMul", [h, b.weight((4, 4))])                                          # two readers: kept
    both = b.one("Add", [b.one("Add", [two, b.weight((4,))]), b.one("Mul", [two, b.const(np.float32(2.0))])])
    batched = b.one("Add", [b.one("MatMul", [both, b.weight((4, 4))]), b.weight((2, 3, 4, 4))])  # batch dims: kept
    summed = b.one("Add", [b.one("MatMul", [batched, b.weight((4, 4))]), batched])        # not constant: kept
    divisor = b.one("Div", [b.const(np.float32(3.0)), b.one("MatMul", [summed, b.weight((4, 4))])])  # kept
    b.nodes.append(helper.make_node("Identity", [divisor], ["y"]))
    return b.model({"x": (2, 3, 4, 6)}, {"y": (2, 3, 4, 4)})


def test_matmul_epilogues_fuse_only_where_exact() -> None:
    model = epilogue_model()
    assert_same_as_onnxruntime(model)
    graph = run_passes(import_model(model))
    fused = [n for n in graph.nodes if n.op_type == "FusedMatMul"]
    assert [n.attrs["alpha"] for n in fused] == pytest.approx([0.4, 1.0]) and all(n.inputs[2] for n in fused)
    assert graph.tensors[fused[0].inputs[2]].shape == (1, 1, 4, 4) and graph.tensors[fused[1].inputs[2]].shape == (4,)
    assert "activation" not in fused[0].attrs and fused[1].attrs["activation"] == "Relu"  # its Relu folded too
    kinds = [n.op_type for n in graph.nodes]
    assert "Relu" not in kinds
    # q, k, the two-reader one, the batched-bias one, the non-constant sum and the divisor stay plain MatMuls
    assert kinds.count("MatMul") == 6 and kinds.count("Div") == 1 and kinds.count("Add") == 4
    assert kinds.count("Mul") == 1


def relu_model() -> onnx.ModelProto:
    """Relus the fusion must fold (after a Conv, a Gemm, a bare MatMul) and must leave (the Conv output has a
    second reader; the Relu reads a view of the Conv output; a Relu after an Add)."""
    b = Builder(22)
    c1 = b.one("Relu", [b.one("Conv", ["x", b.weight((4, 3, 3, 3)), b.weight((4,))], pads=[1, 1, 1, 1])])  # folded
    c2 = b.one("Conv", [c1, b.weight((4, 4, 1, 1))])
    r2 = b.one("Add", [b.one("Relu", [c2]), c2])                            # c2 has two readers: kept
    flat = b.one("Flatten", [b.one("Conv", [r2, b.weight((2, 4, 3, 3))])])  # [1, 2*3*3]
    r3 = b.one("Relu", [flat])                                              # reads a view: kept
    g = b.one("Relu", [b.one("Gemm", [r3, b.weight((7, 18)), b.weight((7,))], transB=1)])  # folded: FusedGemm
    m = b.one("Relu", [b.one("MatMul", [g, b.weight((7, 6))])])            # folded: FusedMatMul, no bias
    b.one("Relu", [b.one("Add", [m, m])])
    b.nodes[-1].output[0] = "y"
    return b.model({"x": (1, 3, 5, 5)}, {"y": (1, 6)})


def test_gelu_folds_into_the_mlp_matmul() -> None:
    graph = run_passes(import_model(transformer_model()))
    gelu = [n for n in graph.nodes if n.attrs.get("activation") == "Gelu"]
    assert len(gelu) == 1 and gelu[0].op_type == "FusedMatMul" and gelu[0].inputs[2]  # bias and Gelu in one
    assert "Gelu" not in {n.op_type for n in graph.nodes}


def test_relu_folds_into_its_producer_only_where_exact() -> None:
    model = relu_model()
    assert_same_as_onnxruntime(model)
    graph = run_passes(import_model(model))
    kinds = [n.op_type for n in graph.nodes]
    assert kinds.count("FusedConv") == 1 and kinds.count("Conv") == 2 and kinds.count("Relu") == 2
    assert kinds.count("FusedBinary") == 1  # the Relu after the last Add: fuse_elementwise's, not this pass's
    assert kinds.count("FusedGemm") == 1 and kinds.count("FusedMatMul") == 1
    assert all(n.attrs["activation"] == "Relu" for n in graph.nodes if n.op_type.startswith("Fused"))


def test_batchnorm_stays_when_its_input_is_also_seen_through_a_view() -> None:
    """The Conv output is a graph output through a Flatten view: folding the BN would delete what the view reads."""
    b = Builder(3)
    c = b.one("Conv", ["x", b.weight((4, 3, 3, 3))])
    bn = b.one("BatchNormalization", [c, b.weight((4,)), b.weight((4,)), b.weight((4,)), b.weight((4,), positive=True)])
    b.nodes += [helper.make_node("Flatten", [c], ["v"]), helper.make_node("Identity", [bn], ["y"])]
    model = b.model({"x": (1, 3, 5, 5)}, {"y": (1, 4, 3, 3), "v": (1, 36)})
    assert_same_as_onnxruntime(model)
    assert "BatchNormalization" in {n.op_type for n in run_passes(import_model(model)).nodes}


@pytest.mark.parametrize("steps,batch,isize,hidden,init,bias", [
    (8, 2, 5, 6, False, True), (8, 1, 3, 4, True, True), (3, 3, 4, 2, True, True), (4, 5, 3, 5, False, False)])
def test_lstm_unrolled_matches_onnxruntime(steps: int, batch: int, isize: int, hidden: int, init: bool,
                                           bias: bool) -> None:
    model = lstm_model(steps, batch, isize, hidden, 2, init, bias)
    assert_same_as_onnxruntime(model)
    graph = run_passes(import_model(model))
    kinds = [n.op_type for n in graph.nodes]
    assert "LSTM" not in kinds
    assert kinds.count("LSTMCell") == 2 * steps  # one operator per cell
    # layer 1's hoisted x·Wᵀ, with its bias Add fused into it when there is one
    assert kinds.count("FusedMatMul" if bias else "MatMul") == 1 and "Add" not in kinds
    assert set(kinds) <= {"MatMul", "FusedMatMul", "LSTMCell", "Concat"}


def test_stacked_lstm_steps_read_previous_layer_steps_directly() -> None:
    """Layer 2's step t depends on layer 1's step t only, not on the whole layer (the diagonal wavefront)."""
    graph = run_passes(import_model(lstm_model(6, 2, 3, 4, 2)))
    producers = graph.producers()
    layer2_step0 = next(n for n in graph.nodes if n.name.endswith("/t0/cell") and n.inputs[0])  # reads x_t
    (pred,) = graph.predecessors(layer2_step0, producers)
    assert pred.op_type == "LSTMCell" and pred.name.endswith("/t0/cell") and pred is not layer2_step0


@pytest.mark.parametrize("batch,channels,size,groups", [(1, 8, 8, 4), (2, 4, 6, 2)])
def test_cnn_passes_match_onnxruntime(batch: int, channels: int, size: int, groups: int) -> None:
    model = cnn_model(batch, channels, size, groups)
    assert_same_as_onnxruntime(model)
    graph = run_passes(import_model(model))
    kinds = [n.op_type for n in graph.nodes]
    assert "BatchNormalization" not in kinds and "Flatten" not in kinds
    flat = next(o for o in graph.aliases)
    assert graph.buffer_of(flat).base in graph.producers()  # the Flatten output is a view of the pool output


@pytest.mark.parametrize("batch,seq,d,heads", [(1, 8, 16, 2), (2, 5, 12, 3)])
def test_transformer_passes_match_onnxruntime(batch: int, seq: int, d: int, heads: int) -> None:
    model = transformer_model(batch, seq, d, heads)
    assert_same_as_onnxruntime(model)
    kinds = {n.op_type for n in run_passes(import_model(model)).nodes}
    assert not kinds & {"Shape", "Gather", "Unsqueeze", "Concat", "Reshape"}  # folded or aliased


def test_constant_folding_of_initializer_only_subgraph() -> None:
    b = Builder(5)
    w = b.one("Transpose", [b.one("Mul", [b.weight((4, 6)), b.const(np.array(2.0, np.float32))])], perm=[1, 0])
    b.one("MatMul", ["x", b.one("Cast", [w], to=TensorProto.FLOAT)])
    b.nodes[-1].output[0] = "y"
    model = b.model({"x": (3, 6)}, {"y": (3, 4)})
    graph = run_passes(import_model(model))
    assert [n.op_type for n in graph.nodes] == ["MatMul"]
    assert_same_as_onnxruntime(model)


@pytest.mark.parametrize("axis,sizes,views", [(0, [2, 3], True), (1, [1, 2], False)])
def test_split_is_a_view_only_when_contiguous(axis: int, sizes: list[int], views: bool) -> None:
    b = Builder(6)
    parts = b.op("Split", [b.one("Relu", ["x"]), b.const(np.array(sizes, np.int64))], outputs=2, axis=axis)
    b.one("Add", [b.one("Sigmoid", [parts[1]]), b.one("Tanh", [parts[1]])])
    b.nodes[-1].output[0] = "y"
    shape = [5, 3]
    out = list(shape)
    out[axis] = sizes[1]
    model = b.model({"x": tuple(shape)}, {"y": tuple(out)})
    graph = run_passes(import_model(model))
    assert ("Split" not in {n.op_type for n in graph.nodes}) == views
    if views:
        assert graph.buffer_of(parts[1]).offset == sizes[0] * shape[1]
    assert_same_as_onnxruntime(model)


# ---- bad input ------------------------------------------------------------------------------------------------------
def test_dynamic_batch_is_refused_naming_the_dimension() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match="dynamic dimension 'N'"):
        import_model(m)


def test_malformed_and_missing_files_are_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07not a protobuf at all\xff\xff")
    for path in (bad, tmp_path / "missing.onnx"):
        with pytest.raises(ModelError) as info:
            import_model(path)
        assert "\n" not in str(info.value) and str(path) in str(info.value)


def unsupported_model() -> onnx.ModelProto:
    """Two op types the corpus has no rKernel for, between supported ones."""
    b = Builder(7)
    h = b.one("Relu", [b.one("Sinh", ["x"])])
    b.one("Add", [h, b.one("Cosh", [h])])
    b.nodes[-1].output[0] = "y"
    return b.model({"x": (2, 7)}, {"y": (2, 7)})


def test_unsupported_ops_listed_in_one_error() -> None:
    graph = run_passes(import_model(unsupported_model()))
    with pytest.raises(UnsupportedOpError) as info:
        build_workload(graph)
    text = str(info.value)
    assert "\n" not in text and "2 unsupported" in text
    for op_type in ("Sinh", "Cosh"):
        node = next(n for n in graph.nodes if n.op_type == op_type)
        assert f"{op_type} in float32[2, 7]" in text and f"node '{node.name}'" in text


def test_cli_reports_unsupported_op_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(unsupported_model(), path)
    proc = subprocess.run([sys.executable, "-c", "from rammer.cli import main; main()", "plan", str(path)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "Sinh" in proc.stderr and "Cosh" in proc.stderr


def test_cli_plans_and_writes_plan_json(tmp_path: Path) -> None:
    path, out = tmp_path / "m.onnx", tmp_path / "plan.json"
    onnx.save(mlp_model(2), path)
    proc = subprocess.run([sys.executable, "-c", "from rammer.cli import main; main()", "plan", str(path), "--veus", "16",
                           "-o", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "profiler: mode=model" in proc.stdout and "cache=none" in proc.stdout
    plan = json.loads(out.read_text())
    assert plan["num_veus"] == 16 and plan["programs"]


# ---- profiler ---------------------------------------------------------------------------------------------------------
def launch(kernel: str, rtasks: int, threads: int = 128, flops: float = 0, nbytes: float = 0) -> Launch:
    """A corpus Launch with the given geometry and work."""
    return Launch(kernel, [], (rtasks, 1, 1), (threads, 1, 1), 0, [In(0), Out(0)], int(flops), int(nbytes))


@pytest.mark.parametrize("veus", [8, 132, 264, 396])
def test_cost_model_against_hand_numbers(veus: int) -> None:
    """Hand-derived from the H100 figures (67 TFLOP/s FP32 over 132 SMs, 3.0 TB/s, the measured 0.527 us dispatch):
    compute at the kernel's FFMA share (gemm_tiled 18%) scaled by how much of the SM's 64 warps its co-resident
    warps fill, memory bounded by 16 bytes in flight per thread over 0.6 us."""
    prof = Profiler(H100, veus)
    per_sm = -(-veus // 132)
    hidden = min(1.0, per_sm * 8 / 64)  # 256-thread vEUs: 8 warps each
    t = prof.rtask_us(launch("gemm_tiled", 1000, 256, flops=1e9, nbytes=1e3))
    assert t == pytest.approx(0.527 + 1e9 / 1000 / (67e12 / 132 * 0.18 * hidden / per_sm) * 1e6)
    # memory: a 32-thread rTask keeps 512 B in flight: 0.85 GB/s, far below its share of the device
    t = prof.rtask_us(launch("unary", 10, 32, flops=10, nbytes=4e6))
    assert t == pytest.approx(0.527 + 4e6 / 10 / min(3.0e12 / veus, 32 * 16 / 0.6e-6) * 1e6)
    assert prof.launch_us(launch("gemm_tiled", 1000, 256, 1e9, 1e3)) == pytest.approx(
        -(-1000 // veus) * prof.rtask_us(launch("gemm_tiled", 1000, 256, 1e9, 1e3)))
    # a barrier-rTask at the profiler's fan-in: the measured step barrier over N vEUs (fan-in N - 1), linear
    # between fan-ins 1 (1.448), 15 (1.411), 131 (1.310), 263 (1.642) and 395 (1.858 us)
    slope = (1.858 - 1.642) / 132
    want = {8: 1.448 + (1.411 - 1.448) * 7 / 14, 132: 1.310 + (1.642 - 1.310) / 132, 264: 1.642 + slope,
            396: 1.858 + slope}[veus]
    assert prof.device.barrier_us == pytest.approx(want)
    assert prof.barrier_cost_us(1) == pytest.approx(1.448)


def test_more_veus_per_sm_hide_latency() -> None:
    """A memory-bound op of 2048 rTasks of 128 threads: one vEU per SM cannot keep enough loads in flight, three can
    (and their dispatch overhead is spread over three times the vEUs)."""
    work = launch("unary", 2048, 128, 0, 64e6)
    one, three = Profiler(H100, 132), Profiler(H100, 396)
    assert three.launch_us(work) < one.launch_us(work) / 2


def test_l2_term_for_a_model_that_fits() -> None:
    """Operands of a model whose working set fits the 50 MB L2 come at 5.5 TB/s and a weight stream's L2 latency
    (0.42 us, fitted to lstm-tc's CUDA Graphs on the H100, results/h100-2026-11-27-0900), others at 3.0 TB/s and
    0.6 us."""
    work = launch("unary", 1, 1024, 0, 1e6)
    cold, warm = Profiler(H100, 1), Profiler(H100, 1)
    warm.resident_bytes = 21 * 2**20
    cold.resident_bytes = 300 * 2**20
    assert cold.rtask_us(work) == pytest.approx(0.527 + 1e6 / min(3.0e12, 1024 * 16 / 0.6e-6) * 1e6)
    assert warm.rtask_us(work) == pytest.approx(0.527 + 1e6 / min(5.5e12, 1024 * 16 / 0.42e-6) * 1e6)
    big = launch("unary", 396 * 4, 1024, 0, 40e6)  # on 396 vEUs the bandwidth share binds, not the loads in flight
    many_warm, many_cold = Profiler(H100, 396), Profiler(H100, 396)
    many_warm.resident_bytes, many_cold.resident_bytes = warm.resident_bytes, cold.resident_bytes
    assert many_warm.rtask_us(big) == pytest.approx(0.527 + 40e6 / (396 * 4) / (5.5e12 / 396) * 1e6)
    assert many_cold.rtask_us(big) == pytest.approx(0.527 + 40e6 / (396 * 4) / (3.0e12 / 396) * 1e6)


def test_baselines_against_hand_numbers_and_independent_of_veus() -> None:
    """The legacy kernels as launched alone: 300 memory-bound blocks of 128 threads (2 MB) sit 8 per SM by
    registers (64 assumed) and threads, so one wave of 300 concurrent blocks, each pulling 128 x 16 B / 0.6 us;
    plus the launch gap (a graph node: the measured tiny op less its 0.6 us kernel, 1.258), never below the measured
    tiny op; eager: the host's 6.279 us per launch or the kernel and the stream's 1.30 us gap, the longer; a graph is
    launched once (6.279 us)."""
    big = 2e6 / 300 / min(3.0e12 / 300, 128 * 16 / 0.6e-6) * 1e6
    want = {"op-by-op": max(6.279, big + 1.30) + 6.279,  # eager: the host's interval or kernel + stream gap
            "cuda-graph": 6.279 + max(1.258, big + 1.258 - 0.6) + 1.258}
    launches = [launch("unary", 300, 128, 0, 2e6), launch("unary", 10, 128)]
    for veus in (1, 8, 132, 264, 396):
        got = Profiler(H100, veus).baselines_us(launches)
        assert got == pytest.approx(want), f"{veus} vEUs"


def test_measured_mode_caches_on_disk_per_device(tmp_path: Path) -> None:
    calls = []

    def measure(l: Launch) -> Measurement:
        calls.append(l.kernel)
        return Measurement(3.5 if l.kernel == "a" else 7.25, registers=40)

    prof = Profiler(H100, mode="measured", measure=measure, cache_dir=tmp_path)
    assert str(tmp_path) in prof.describe() and "mode=measured" in prof.describe()
    assert prof.rtask_us(launch("a", 4)) == 3.5 and prof.rtask_us(launch("b", 4)) == 7.25
    assert prof.rtask_us(launch("a", 4)) == 3.5 and calls == ["a", "b"]
    assert prof.resources(launch("a", 4)) == Resources(128, 0, 40)
    assert prof.resources(launch("a", 4, threads=64)).registers is None  # another shape: not measured
    # another grid is another shape: measured again
    assert prof.rtask_us(launch("a", 8)) == 3.5 and calls == ["a", "b", "a"]
    again = Profiler(H100, mode="measured", cache_dir=tmp_path)  # no measuring function: the file answers
    assert again.rtask_us(launch("b", 4)) == 7.25 and again.misses == 0
    other = Profiler(H100.named("Other GPU", 10), mode="measured", cache_dir=tmp_path)
    other.rtask_us(launch("b", 4, flops=1e6, nbytes=1e6))
    assert other.misses == 1 and other.cache.path != again.cache.path
    again.cache.path.write_text("{not json")
    with pytest.raises(SchedulerError, match="corrupt"):
        Profiler(H100, mode="measured", cache_dir=tmp_path)


def test_program_time_simulates_each_veu_and_barrier() -> None:
    """Two vEUs: vEU 1 waits for vEU 0's second task; times by hand."""
    ops = [Op("a", KernelRef("s", "a__rtask", grid=(2, 1, 1))), Op("b", KernelRef("s", "b__rtask", grid=(2, 1, 1)))]
    prog = Program(ops, 2)
    prog.append(TaskRef(0, 0), 0)
    prog.append(TaskRef(0, 1), 0)
    prog.append(TaskRef(1, 0), 1)
    prog.wait(TaskRef(1, 1), [TaskRef(0, 1)])
    prog.append(TaskRef(1, 1), 1)
    dur = {0: 2.0, 1: 5.0}
    # vEU0: 0-2, 2-4; vEU1: 0-5, then waits for 4 + 0.7 -> starts at 5 -> ends 10
    assert makespan(prog, dur.__getitem__, 0.7) == pytest.approx(10.0)
    dur = {0: 4.0, 1: 1.0}
    # vEU0 ends at 8; vEU1: 0-1, waits for 8 + 0.7, ends 9.7
    assert makespan(prog, dur.__getitem__, 0.7) == pytest.approx(9.7)


def test_deadlocked_program_is_an_error_not_a_hang() -> None:
    ops = [Op("a", KernelRef("s", "a__rtask", grid=(2, 1, 1)))]
    prog = Program(ops, 2, [[Wait(((1, 0),)), Run(TaskRef(0, 0))], [Wait(((0, 0),)), Run(TaskRef(0, 1))]])
    with pytest.raises(SchedulerError, match="deadlock"):
        makespan(prog, lambda op: 1.0, 0.7)


# ---- plan.json ------------------------------------------------------------------------------------------------------------
def test_plan_json_round_trips_into_vdevice_programs(tmp_path: Path) -> None:
    sch = plan_model(cnn_model(1), "wavefront", Profiler(H100, 24), veus=24)
    path = tmp_path / "plan.json"
    sch.plan.save(path)
    data = json.loads(path.read_text())
    ops = [Op.from_json(o["vdevice"]) for o in data["ops"]]
    programs = [Program.from_json(p, ops) for p in data["programs"]]
    assert [p.veus for p in programs] == [p.veus for p in sch.plan.programs]
    assert data["predicted_us"] == pytest.approx(sch.plan.predicted_us, abs=1e-2)
    for prog in data["programs"]:
        used = {op for rows in prog["veus"] for row in rows if row[0] == "r" for op in [row[1]]}
        assert prog["veu_threads"] == max(int(np.prod(data["ops"][i]["launch"]["block"])) for i in used)
    assert set(data["choices"]) == {op.name for op in sch.workload.ops}
    assert any("BatchNormalization folded" in n for n in data["notes"])
    flat_alias = [k for k, v in data["aliases"].items()]
    assert flat_alias and all(v["base"] in sch.graph.tensors for v in data["aliases"].values())
    sch.plan.programs = programs
    check_plan(sch.plan, sch.workload)
