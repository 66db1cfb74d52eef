"""Issue 30, fifth family: checks that cannot pass a wrong answer. `rammer run --check` is an elementwise
|out - ref| <= atol + rtol*|ref| (numpy's allclose) with the worst element named; out-of-range Gather indices stop
the run as onnxruntime does; NaN goes through every fused Relu epilogue; a launch spec's integer and float16 ranges
fit their dtype; Resize with align_corners when downsampling agrees with onnxruntime."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rammer.build import build_model
from rammer.check import ATOL, RTOL, check_output, reference_outputs
from rammer.runtime import load

REPO = Path(__file__).resolve().parent.parent


def rammer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from rammer.cli import main; main()", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=900)


# ---- the measure ---------------------------------------------------------------------------------------------------
def test_a_sign_flipped_region_beside_large_values_fails() -> None:
    ref = np.concatenate([np.full(100, 1e4), np.linspace(0.01, 0.1, 20)])
    got = ref.copy()
    got[100:] *= -1  # 2e-6 of the largest value: the old max-scaled measure passed it
    c = check_output("y", got, ref)
    assert not c.ok and c.bad == 20 and c.index[0] >= 100 and c.got < 0 < c.want
    assert "worst y[" in c.line() and "FAIL" in c.line()


@pytest.mark.parametrize("case", ["roundoff", "near-zero", "nan-agrees", "inf-agrees", "signed-zero", "empty"])
def test_what_agrees_passes(case: str) -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4, 50)) * 30
    got = ref * (1 + rng.uniform(-RTOL / 2, RTOL / 2, ref.shape))
    if case == "near-zero":
        ref[0, :5] = 0.0
        got[0, :5] = rng.uniform(-ATOL / 2, ATOL / 2, 5)
    elif case == "nan-agrees":
        ref[1, 1] = got[1, 1] = np.nan
    elif case == "inf-agrees":
        ref[2, 2] = got[2, 2] = -np.inf
    elif case == "signed-zero":
        ref[3, 3], got[3, 3] = 0.0, -0.0
    elif case == "empty":
        ref, got = np.zeros((0, 3)), np.zeros((0, 3))
    assert check_output("y", got, ref).ok


@pytest.mark.parametrize("case,needle", [("nan-for-number", "NaN where onnxruntime has"),
                                         ("number-for-nan", "where onnxruntime has NaN"),
                                         ("inf-sign", "-inf where onnxruntime has +inf"),
                                         ("one-element", "worst y[3, 7]"),
                                         ("just-past", "worst y[0, 0]")])
def test_what_disagrees_fails_and_is_named(case: str, needle: str) -> None:
    ref = np.linspace(-5, 5, 40).reshape(4, 10)
    got = ref.copy()
    if case == "nan-for-number":
        got[1, 2] = np.nan
    elif case == "number-for-nan":
        ref[1, 2] = np.nan
    elif case == "inf-sign":
        ref[2, 2], got[2, 2] = np.inf, -np.inf
    elif case == "one-element":
        got[3, 7] += 1e-3
    else:
        got[0, 0] = ref[0, 0] + 1.01 * (ATOL + RTOL * abs(ref[0, 0]))
    c = check_output("y", got, ref)
    assert not c.ok and needle in c.line(), c.line()


# ---- models -----------------------------------------------------------------------------------------------------------
def model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))


def build(tmp: Path, m: onnx.ModelProto) -> Path:
    onnx.save(m, tmp / "m.onnx")
    build_model(tmp / "m.onnx", tmp / "b", target="cpu", veus=2, quiet=True)
    return tmp / "b"


def f32(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_run_check_names_the_worst_element_and_passes_a_right_answer(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((8, 5)).astype(np.float32), "w")
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [f32("x", [3, 8])], [f32("y", [3, 5])], [w])
    b = build(tmp_path, m)
    res = rammer("run", str(b), "--check", "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 0 and out["check"]["pass"] and out["check"]["rtol"] == RTOL
    assert out["outputs"][0]["check"]["worst_ratio"] <= 1 and len(out["outputs"][0]["check"]["worst_index"]) == 2


@pytest.mark.parametrize("op,indices,ok", [("Gather", [0, 2, -1], True), ("Gather", [0, 3], False),
                                           ("Gather", [-4, 1], False), ("GatherElements", [[0, -3], [2, 1]], True),
                                           ("GatherElements", [[0, 5], [2, 1]], False)])
def test_out_of_range_indices_stop_the_run_as_in_onnxruntime(tmp_path: Path, op: str, indices, ok: bool) -> None:
    idx = np.array(indices, np.int64)
    inits = [numpy_helper.from_array(idx, "i")]
    node = helper.make_node(op, ["x", "i"], ["y"], axis=1)
    out_shape = [2, len(indices)] if op == "Gather" else list(idx.shape)
    m = model([node], [f32("x", [2, 3])], [f32("y", out_shape)], inits)
    b = build(tmp_path, m)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "in.npz", x=x)
    res = rammer("run", str(b), "--inputs", str(tmp_path / "in.npz"), "--check")
    assert "Traceback" not in res.stderr, res.stderr
    if ok:
        assert res.returncode == 0, res.stdout + res.stderr
        assert np.allclose(load(b).run({"x": x})["y"], reference_outputs(m, {"x": x})[0])
    else:
        assert res.returncode != 0 and "out of range" in res.stderr and "index" in res.stderr, res.stderr
        import onnxruntime as ort
        with pytest.raises(Exception):  # the independent truth refuses it too
            ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


@pytest.mark.parametrize("kind", ["MatMul", "Gemm", "Conv"])
def test_nan_survives_the_fused_relu_epilogue(tmp_path: Path, kind: str) -> None:
    rng = np.random.default_rng(3)
    if kind == "Conv":
        w = numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w")
        nodes = [helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["y"])]
        xs, ys = [1, 2, 6, 6], [1, 4, 6, 6]
    else:
        w = numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "w")
        first = helper.make_node("MatMul", ["x", "w"], ["h"]) if kind == "MatMul" else \
            helper.make_node("Gemm", ["x", "w"], ["h"])
        nodes = [first, helper.make_node("Relu", ["h"], ["y"])]
        xs, ys = [4, 8], [4, 6]
    m = model(nodes, [f32("x", xs)], [f32("y", ys)], [w])
    b = build(tmp_path, m)
    built = json.loads((b / "build.json").read_text())
    assert any("fuse" in json.dumps(p).lower() or "activation" in json.dumps(p) for p in built["stats"]["passes"])
    x = rng.standard_normal(xs).astype(np.float32)
    x.reshape(-1)[0] = np.nan
    got = load(b).run({"x": x})["y"]
    ref = reference_outputs(m, {"x": x})[0]
    assert np.isnan(ref).any() and np.array_equal(np.isnan(got), np.isnan(ref)), (got, ref)
    assert check_output("y", got, ref).ok


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales,shape", [([1.0, 1.0, 0.6, 0.6], [1, 1, 2, 4]), ([1.0, 1.0, 0.7, 0.45], [1, 2, 5, 9]),
                                          ([1.0, 1.0, 1.6, 2.3], [1, 1, 3, 4])])
def test_resize_align_corners_agrees_with_onnxruntime(tmp_path: Path, mode: str, scales, shape) -> None:
    """ONNX's own downsampling cases (scales an initializer, as exporters write them), and more scales."""
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode, coordinate_transformation_mode="align_corners")
    s = numpy_helper.from_array(np.array(scales, np.float32), "s")
    m = model([node], [f32("x", shape)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [s], opset=19)
    b = build(tmp_path, m)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    got, ref = load(b).run({"x": x})["y"], reference_outputs(m, {"x": x})[0]
    assert check_output("y", got, ref).ok, (got, ref)


# ---- launch specs: ranges that fit their dtype ---------------------------------------------------------------------
@pytest.mark.parametrize("arg,needle", [
    ("dtype: int32, size: 4, low: 0, high: 3000000000", "does not fit int32"),
    ("dtype: int32, size: 4, low: -3000000000, high: 0", "does not fit int32"),
    ("dtype: uint8, size: 4, low: -1, high: 10", "does not fit uint8"),
    ("dtype: uint8, size: 4, low: 0, high: 300", "does not fit uint8"),
    ("dtype: int8, size: 200, init: arange", "arange up to 199 does not fit int8"),
    ("dtype: int16, size: 4, low: 0.5, high: 9", "not a whole number"),
    ("dtype: float16, size: 4, low: 0, high: 100000", "float16's largest value"),
    ("dtype: uint64, size: 4, low: 0, high: 18446744073709551615", "does not fit uint64"),
])
def test_spec_ranges_must_fit_the_dtype(tmp_path: Path, arg: str, needle: str) -> None:
    (tmp_path / "k.cu").write_text("__global__ void k(int* a) { a[threadIdx.x] += 1; }\n")
    (tmp_path / "k.yaml").write_text(f"kernel: k\ngrid: [1]\nblock: [1]\nargs:\n  - {{name: a, kind: buffer, {arg}}}\n"
                                     "outputs: [a]\n")
    res = subprocess.run([sys.executable, "-c", "from rtransform.cli import main; main()", "run",
                          str(tmp_path / "k.cu"), "--spec", str(tmp_path / "k.yaml")], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "Traceback" not in res.stderr and needle in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
