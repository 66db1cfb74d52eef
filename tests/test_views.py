"""Strided views (scheduler.graph.View.strides): a Transpose, an inner-axis Split/Slice and the reshapes of such views
are read in place by the GEMM kernels (their operand strides) instead of being copied; any other reader keeps the
copy. Truth: numpy for the view arithmetic, onnxruntime for the built models (run on the CPU emulator)."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernel_corpus.bindings import NodeInfo, TensorInfo, registry
from kernel_corpus.ops.gemm import gemm_problem
from rammer.build import build_model
from rammer.zoo import random_inputs
from scheduler.export import graph_to_onnx
from scheduler.graph import View
from scheduler.onnx_import import import_model
from scheduler.passes import reshaped_strides, run_passes
from scheduler.reference import run_graph
from scheduler.workload import build_workload, node_info
from test_build import ort_outputs


# ---- the view arithmetic against numpy ---------------------------------------------------------------------------
def numpy_view(a: np.ndarray) -> View:
    """The View describing a numpy view `a` of a C-ordered float32 buffer (its .base)."""
    base = a.base if a.base is not None else a
    offset = (a.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // a.itemsize
    return View("x", offset, tuple(s // a.itemsize for s in a.strides))


@pytest.mark.parametrize("shape,perm,cut,new_shape", [
    ((2, 6, 12), (0, 2, 1), None, (2, 3, 4, 6)),
    ((1, 8, 24), None, (2, 8), (1, 8, 2, 3)),
    ((3, 4, 5, 2), (0, 2, 1, 3), None, (3, 20, 2)),
    ((1, 16, 48), None, (16, 32), (16, 4, 4)),
    ((4, 1, 6), (2, 1, 0), None, (6, 4)),
    ((2, 3, 4), (1, 0, 2), None, (3, 8)),
])
def test_reshaped_strides_agree_with_numpy(shape, perm, cut, new_shape) -> None:
    flat = np.arange(int(np.prod(shape)), dtype=np.float32)
    a = flat.reshape(shape)
    a = a.transpose(perm) if perm else a[..., cut[0]:cut[1]]
    view = numpy_view(a)
    got = reshaped_strides(a.shape, view.strides, new_shape)
    probe = a.view()
    try:
        probe.shape = new_shape  # numpy reshapes in place only without a copy
    except AttributeError:
        assert got is None
        return
    assert got is not None
    np.testing.assert_array_equal(View("x", view.offset, got).read(flat, new_shape), a.reshape(new_shape))


def test_view_read_and_extent() -> None:
    flat = np.arange(60, dtype=np.float32)
    a = flat.reshape(3, 4, 5).transpose(2, 0, 1)[1:4]
    view = numpy_view(a)
    np.testing.assert_array_equal(view.read(flat, a.shape), a)
    lo, hi = view.extent(a.shape)
    touched = np.unique(view.read(np.arange(60), a.shape))
    assert (lo, hi) == (touched.min(), touched.max() + 1)


def test_gemm_problem_takes_operand_strides() -> None:
    """Q (heads of a [1, S, 3E] QKV row) @ K^T as the attention reads them: one batch stride per operand; a batch of
    two such views does not merge into one stride and every binding refuses it (the copy stays)."""
    S, H, D = 8, 2, 4
    E = H * D
    q = TensorInfo((1, H, S, D), strides=(0, D, 3 * E, 1))
    k = TensorInfo((1, H, D, S), strides=(0, D, 1, 3 * E))
    node = NodeInfo("MatMul", "qk", [q, k], [TensorInfo((1, H, S, S))])
    p = gemm_problem(node)
    assert (p.batch, p.M, p.N, p.K) == (H, S, S, D)
    assert (p.sam, p.sak, p.sbk, p.sbn, p.batch_a, p.batch_b) == (3 * E, 1, 1, 3 * E, D, D)
    variants = {b.variant for b in registry.applicable(node)}
    assert {"tiled16", "regblock32x32", "tc32x32_3xtf32"} <= variants
    assert not any(v.startswith("gemv") for v in variants)
    two = NodeInfo("MatMul", "qk2", [TensorInfo((2, H, S, D), strides=(S * 3 * E, D, 3 * E, 1)), k],
                   [TensorInfo((2, H, S, S))])
    assert not registry.applicable(two)
    # a kernel that reads its input C-ordered refuses a strided view
    soft = NodeInfo("Softmax", "s", [q], [TensorInfo(q.shape)], {"axis": -1})
    assert not registry.applicable(soft)


VIEW_VARIANTS = ["tiled16", "regblock32x32", "regblock64x64", "tiled16k4", "regblock32x32k4", "tc32x32_3xtf32",
                 "tc64x64_3xtf32", "tc32x32k2_3xtf32", "tc32x32_tf32"]


def _view_shape(variant: str) -> tuple[int, int, int]:
    """S, H, D of a variant's case (split-K needs a long K)."""
    return (19, 2, 256) if variant in ("tiled16k4", "regblock32x32k4", "tc32x32k2_3xtf32") else (19, 3, 8)


def _view_node(S: int, H: int, D: int) -> NodeInfo:
    """Q K^T read as heads of one [S, 3E] buffer, written into an [S, H, S] layout."""
    E = H * D
    q = TensorInfo((1, H, S, D), strides=(0, D, 3 * E, 1))  # at offset 0
    k = TensorInfo((1, H, D, S), strides=(0, D, 1, 3 * E))  # at offset E
    y = TensorInfo((1, H, S, S), strides=(0, S, H * S, 1))  # [S, H, S] stored
    return NodeInfo("FusedMatMul", "qk", [q, k], [y], {"alpha": 0.5})


@functools.cache
def _view_module(source: str):
    """One emulator module per legacy source with every expression the variants launch from it (g++ pays the
    emulator's runtime once per source, not once per variant; the launches are the same)."""
    from kernel_corpus.cpu_run import build_module
    exprs = {ln.expr for v in VIEW_VARIANTS if registry.get("FusedMatMul", v).source == source
             for ln in registry.get("FusedMatMul", v).launch(_view_node(*_view_shape(v)))}
    return build_module(source, sorted(exprs))


@pytest.mark.parametrize("variant", VIEW_VARIANTS)
def test_gemm_kernels_read_and_write_strided_views(variant: str) -> None:
    """Each GEMM kernel, on the CPU emulator, reading Q and K^T as heads of one [S, 3E] buffer and writing its
    heads straight into an [S, H, S] layout (output strides), against numpy."""
    from kernel_corpus.cpu_run import _argument
    S, H, D = _view_shape(variant)
    E = H * D
    rng = np.random.default_rng(len(variant))
    qkv = rng.uniform(-1, 1, (S, 3 * E)).astype(np.float32)
    flat = qkv.reshape(-1)
    node = _view_node(S, H, D)
    binding = registry.get("FusedMatMul", variant)
    launches = binding.launch(node)
    module = _view_module(binding.source)
    stored = np.full((S, H, S), np.nan, np.float32)
    temps: dict = {}
    for ln in launches:
        args = [_argument(a, [flat, flat[E:]], [stored.reshape(-1)], temps) for a in ln.args]
        module.launch(ln.expr, ln.grid, ln.block, ln.dynamic_smem, args)
    heads = qkv.reshape(S, 3, H, D).astype(np.float64)
    want = 0.5 * np.einsum("shd,thd->sht", heads[:, 0], heads[:, 1])
    tol = 3e-2 if variant.endswith("_tf32") else 1e-5
    np.testing.assert_allclose(stored, want, rtol=tol, atol=tol)


# ---- models: the passes' views, and the build on the CPU emulator against onnxruntime ----------------------------
def weight(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def model_of(nodes: list, inputs: dict[str, tuple], outputs: dict[str, tuple], inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "views", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def attention_model(batch: int, seq: int, heads: int, d: int, seed: int) -> onnx.ModelProto:
    """x [B, S, C] @ W [C, 3d] -> Split(axis=-1) -> per-head Reshape + Transpose -> softmax(Q K^T) V -> merge."""
    rng = np.random.default_rng(seed)
    c, hd = 5, d // heads
    nodes = [helper.make_node("MatMul", ["x", "w"], ["qkv"]),
             helper.make_node("Split", ["qkv", "sizes"], ["q0", "k0", "v0"], axis=-1)]
    for t, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [helper.make_node("Reshape", [f"{t}0", "heads"], [f"{t}1"]),
                  helper.make_node("Transpose", [f"{t}1"], [t], perm=perm)]
    nodes += [helper.make_node("MatMul", ["q", "k"], ["scores"]),
              helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", "v"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ctx_t", "merged"], ["y"])]
    inits = [weight(rng, "w", (c, 3 * d)), ints("sizes", [d, d, d]), ints("heads", [batch, seq, heads, hd]),
             ints("merged", [batch, seq, d])]
    return model_of(nodes, {"x": (batch, seq, c)}, {"y": (batch, seq, d)}, inits)


def transpose_model(shape: tuple[int, ...], perm: list[int], n: int, seed: int,
                    also_add: bool = False) -> onnx.ModelProto:
    """x -> Transpose(perm) -> MatMul by a weight (and, with also_add, the Transpose read by an Add too)."""
    rng = np.random.default_rng(seed)
    t_shape = tuple(shape[p] for p in perm)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=perm), helper.make_node("MatMul", ["t", "w"], ["y"])]
    outputs = {"y": t_shape[:-1] + (n,)}
    if also_add:
        nodes.append(helper.make_node("Add", ["t", "t"], ["z"]))
        outputs["z"] = t_shape
    return model_of(nodes, {"x": shape}, outputs, [weight(rng, "w", (t_shape[-1], n))])


def written_model(shape: tuple[int, ...], perm: list[int], seed: int, also_read: bool = False) -> onnx.ModelProto:
    """a @ b -> Transpose(perm) -> Relu: the GEMM may write the Transpose's layout (with also_read, the GEMM's output
    is read by an Add too)."""
    rng = np.random.default_rng(seed)
    *batch, m, n = shape
    k = 5
    t_shape = tuple(shape[p] for p in perm)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["mm"]), helper.make_node("Transpose", ["mm"], ["t"], perm=perm),
             helper.make_node("Relu", ["t"], ["y"])]
    outputs = {"y": t_shape}
    if also_read:
        nodes.append(helper.make_node("Add", ["mm", "mm"], ["z"]))
        outputs["z"] = shape
    return model_of(nodes, {"a": (*batch, m, k)}, outputs, [weight(rng, "b", (*batch, k, n))])


def split_model(rows: int, widths: list[int], n: int, seed: int, batch: int = 1) -> onnx.ModelProto:
    """x [B, rows, sum(widths)] -> Split(axis=-1) -> each piece @ its weight; and a piece as B: W^T-like x."""
    rng = np.random.default_rng(seed)
    outs = [f"p{i}" for i in range(len(widths))]
    nodes = [helper.make_node("Split", ["x", "sizes"], outs, axis=-1)]
    inits = [ints("sizes", widths)]
    outputs = {}
    for i, (p, w) in enumerate(zip(outs, widths)):
        nodes.append(helper.make_node("MatMul", [p, f"w{i}"], [f"y{i}"]))
        inits.append(weight(rng, f"w{i}", (w, n)))
        outputs[f"y{i}"] = (batch, rows, n)
    nodes.append(helper.make_node("MatMul", ["a", outs[0]], ["yb"]))  # the piece as operand B
    outputs["yb"] = (batch, 3, widths[0])
    return model_of(nodes, {"x": (batch, rows, sum(widths)), "a": (batch, 3, rows)}, outputs, inits)


def assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


def copies_left(model: onnx.ModelProto) -> list[str]:
    """The Transpose/Split/Slice nodes the passes keep as copies."""
    return sorted(n.op_type for n in run_passes(import_model(model)).nodes if n.op_type in ("Transpose", "Split"))


def check_passed_graph(model: onnx.ModelProto, seed: int) -> None:
    """The passed graph (views included) by the node-by-node numpy reference and as exported ONNX, against
    onnxruntime on the original model; the GEMMs reading strided views get only strided-capable candidates."""
    g = run_passes(import_model(model))
    feeds = random_inputs(model, seed)
    want = ort_outputs(model, feeds)
    assert_close({k: np.asarray(v) for k, v in run_graph(g, feeds).items()}, want)
    assert_close(ort_outputs(graph_to_onnx(g), feeds), want)
    work = build_workload(g)
    for node, op in zip(g.nodes, work.ops):
        info = node_info(g, node)
        views = {n: t.strides for n, t in zip(node.inputs + node.outputs, info.inputs + info.outputs)
                 if t is not None and t.strides is not None}
        if views:
            assert node.op_type in ("MatMul", "FusedMatMul") and op.candidates
            assert all(call.strides == {n: list(s) for n, s in views.items()} for call in op.calls)
        if info.outputs[0] is not None and info.outputs[0].strides is not None:
            assert {c.launches[0].kernel for c in op.candidates} <= {"gemm_tiled", "gemm_regblock", "gemm_tc"}


@pytest.mark.parametrize("batch,seq,heads,d", [(1, 8, 2, 8), (1, 6, 4, 16), (2, 5, 2, 8), (2, 4, 4, 8)])
def test_attention_heads_are_views(batch: int, seq: int, heads: int, d: int) -> None:
    model = attention_model(batch, seq, heads, d, seed=heads + seq)
    # batch 1: the Split and the three head Transposes are views read by the GEMMs, and P.V writes its heads
    # straight into the merge Transpose's layout. Batch 2: the heads' two batch dims do not merge into one stride
    # (the kernels take one per operand): the copies stay.
    assert copies_left(model) == ([] if batch == 1 else ["Split"] + ["Transpose"] * 4)
    check_passed_graph(model, seed=batch)


@pytest.mark.parametrize("shape,perm", [((4, 6), [1, 0]), ((2, 3, 5, 4), [0, 2, 1, 3]), ((3, 5, 4), [2, 0, 1]),
                                        ((1, 4, 3, 6), [0, 2, 3, 1]), ((2, 7, 3), [1, 0, 2])])
def test_transpose_into_matmul(shape, perm) -> None:
    model = transpose_model(shape, perm, n=5, seed=len(shape))
    g = run_passes(import_model(model))
    assert [n.op_type for n in g.nodes] in (["MatMul"], ["Transpose", "MatMul"])
    check_passed_graph(model, seed=3)


@pytest.mark.parametrize("shape,perm,copied", [
    ((1, 3, 6, 4), [0, 2, 1, 3], False),   # heads [S, H, D]: written in place
    ((3, 6, 4), [1, 0, 2], False),
    ((1, 2, 6, 4), [2, 0, 1, 3], False),
    ((2, 3, 6, 4), [0, 2, 1, 3], True),    # two batch dims that do not merge into one stride
    ((3, 6, 4), [0, 2, 1], True),          # rows would not be contiguous
])
def test_gemm_writes_the_transposes_layout(shape, perm, copied: bool) -> None:
    model = written_model(shape, perm, seed=len(perm))
    assert copies_left(model) == (["Transpose"] if copied else [])
    check_passed_graph(model, seed=2)


def test_gemm_output_read_by_another_node_keeps_the_copy() -> None:
    model = written_model((3, 6, 4), [1, 0, 2], seed=4, also_read=True)
    assert copies_left(model) == ["Transpose"]
    check_passed_graph(model, seed=4)


def test_transpose_read_by_a_non_gemm_keeps_its_copy() -> None:
    model = transpose_model((2, 3, 4), [0, 2, 1], n=3, seed=1, also_add=True)
    assert copies_left(model) == ["Transpose"]
    check_passed_graph(model, seed=1)


@pytest.mark.parametrize("rows,widths,batch", [(6, [4, 8, 4], 1), (5, [3, 5], 1), (4, [8, 8, 8], 2)])
def test_split_last_axis_into_matmul(rows: int, widths: list[int], batch: int) -> None:
    model = split_model(rows, widths, n=6, seed=rows, batch=batch)
    assert copies_left(model) == []
    check_passed_graph(model, seed=rows)


@pytest.mark.parametrize("name,make", [
    ("attention1", lambda: attention_model(1, 8, 2, 8, seed=0)),
    ("attention2", lambda: attention_model(2, 6, 4, 16, seed=1)),
    ("transpose", lambda: transpose_model((2, 3, 5, 4), [0, 2, 1, 3], n=6, seed=2)),
    ("transpose2d", lambda: transpose_model((4, 6), [1, 0], n=5, seed=2)),  # a view of the graph input
    ("split", lambda: split_model(6, [4, 8, 4], n=5, seed=3)),
    ("written", lambda: written_model((1, 3, 6, 4), [0, 2, 1, 3], seed=4)),
])
def test_built_on_the_cpu_emulator_matches_onnxruntime(tmp_path: Path, name: str, make) -> None:
    model = make()
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out", target="cpu", veus=4, quiet=True)
    feeds = random_inputs(model, 7)
    assert_close(built.run(feeds), ort_outputs(model, feeds))
    if name == "attention1":  # plan.json describes each view as the kernels read it (S 8, 2 heads of D 4, E 8)
        aliases = json.loads((tmp_path / "out" / "plan.json").read_text())["aliases"]
        want = {"q": ("qkv", 0, [4, 24, 1]), "k": ("qkv", 8, [4, 1, 24]), "v": ("qkv", 16, [4, 24, 1]),
                "ctx": ("ctx_t", 0, [4, 8, 1])}  # the head, row and column strides (the size-1 batch aside)
        for t, (base, offset, strides) in want.items():
            assert (aliases[t]["base"], aliases[t]["offset"], aliases[t]["strides"][1:]) == (base, offset, strides)


def test_library_calls_read_and_write_views(tmp_path: Path) -> None:
    """Every GEMM of the attention forced to a library call: the calls read the heads as strided views and write
    P.V through one (staged), and agree with onnxruntime."""
    model = attention_model(1, 8, 2, 8, seed=5)
    path = tmp_path / "attention.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out", target="cpu", veus=4, quiet=True, backends=("rtask", "library"),
                        force=("MatMul_*=library", "*=rtask"))
    calls = [s for s in built.manifest.steps if s.kind == "library"]
    assert len(calls) == 3
    feeds = random_inputs(model, 8)
    assert_close(built.run(feeds), ort_outputs(model, feeds))


def test_a_library_call_on_views_is_charged_their_copies() -> None:
    """Each strided tensor of a vendor call costs one more graph kernel (a launched op's floor) plus its read and
    write at the calls' bandwidth share (hand computation); the same call on C-ordered tensors costs none."""
    from scheduler.backends.library import call_kernel_us, library_call
    from scheduler.dispatch_costs import LAUNCHES
    from scheduler.profiler import H100
    S, H, D = 64, 12, 64
    E = H * D
    q = TensorInfo((1, H, S, D), strides=(0, D, 3 * E, 1))
    k = TensorInfo((1, H, D, S), strides=(0, D, 1, 3 * E))
    y = TensorInfo((1, H, S, S), strides=(0, S, H * S, 1))
    plain = NodeInfo("MatMul", "qk", [TensorInfo(q.shape), TensorInfo(k.shape)], [TensorInfo(y.shape)])
    viewed = NodeInfo("MatMul", "qk", [q, k], [y])
    a = library_call(plain, ["q", "k"], ["y"], "gpu")
    b = library_call(viewed, ["q", "k"], ["y"], "gpu")
    assert b.strides == {"q": list(q.strides), "k": list(k.strides), "y": list(y.strides)} and a.strides == {}
    copies = sum(LAUNCHES.floor_us("graph") + 8 * n / (H100.mem_bw * 0.8) * 1e6 for n in (S * E, S * E, H * S * S))
    assert call_kernel_us(b, H100) - call_kernel_us(a, H100) == pytest.approx(copies)


def test_siblings_writing_views_are_not_merged() -> None:
    """Two MatMuls of one input each writing a Transpose's layout: the IOS merge leaves them (its Split could not
    write views), and a pair of plain siblings beside them still merges; the graph agrees with onnxruntime."""
    from scheduler.merge import merge_siblings
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m0"]), helper.make_node("MatMul", ["x", "w1"], ["m1"]),
             helper.make_node("Transpose", ["m0"], ["t0"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["m1"], ["t1"], perm=[1, 0, 2]),
             helper.make_node("Relu", ["t0"], ["r0"]), helper.make_node("Relu", ["t1"], ["r1"]),
             helper.make_node("MatMul", ["x", "w2"], ["y2"]), helper.make_node("MatMul", ["x", "w3"], ["y3"])]
    model = model_of(nodes, {"x": (3, 5, 4)}, {"r0": (5, 3, 6), "r1": (5, 3, 6), "y2": (3, 5, 2), "y3": (3, 5, 2)},
                     [weight(rng, f"w{i}", (4, 6 if i < 2 else 2)) for i in range(4)])
    g = run_passes(import_model(model))
    assert sorted(n.op_type for n in g.nodes) == ["MatMul"] * 4 + ["Relu"] * 2 and {"m0", "m1"} <= set(g.aliases)
    assert merge_siblings(g, "always", lambda graph, ns: 0.0, lambda op: True) == 1
    # y2, y3 (graph outputs): one MatMul and a Split
    assert sorted(n.op_type for n in g.nodes) == ["MatMul"] * 3 + ["Relu"] * 2 + ["Split"]
    feeds = random_inputs(model, 6)
    assert_close({k: np.asarray(v) for k, v in run_graph(g, feeds).items()}, ort_outputs(model, feeds))
