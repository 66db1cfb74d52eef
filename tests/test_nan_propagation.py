"""NaN stays where ONNX keeps it: elementwise Max/Min, ReduceMax/ReduceMin/ReduceSum/ReduceLogSumExp, Clip, Relu,
HardSigmoid, LeakyRelu run on the CPU emulator with NaN inputs, against onnx's ReferenceEvaluator."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from kernel_corpus.bindings import Shape, registry
from kernel_corpus.cpu_run import build_module, run_launches
from kernel_corpus.reference import run_reference, shape_node

CASES = [
    ("Max", Shape(((3, 5), (3, 5)))), ("Min", Shape(((2, 3, 4), (4,)))), ("Max", Shape(((4, 6), (4, 6), (6,)))),
    ("ReduceMax", Shape(((3, 4, 5),), {"axes": [1]}, opset=18)), ("ReduceMin", Shape(((6, 7),), {}, opset=18)),
    ("ReduceSum", Shape(((4, 9),), {"axes": [1]}, opset=13)),
    ("ReduceLogSumExp", Shape(((5, 3),), {"axes": [0]}, opset=18)),
    ("Clip", Shape(((3, 8),), {"min": -0.5, "max": 0.5})), ("Relu", Shape(((4, 10),))),
    ("HardSigmoid", Shape(((4, 10),))), ("LeakyRelu", Shape(((4, 10),))),
]


@functools.cache
def _module(source: str):
    """One emulator module per legacy source, instantiating every kernel expression the cases launch from it (g++
    pays the emulator's runtime once per source instead of once per case; the launches are the same)."""
    exprs: set[str] = set()
    for op_type, shape in CASES:
        d = registry.op(op_type)
        node = shape_node(d, shape)
        exprs.update(ln.expr for b in d.bindings if b.applies(node) and b.source == source for ln in b.launch(node))
    return build_module(source, sorted(exprs))


@pytest.mark.parametrize("op_type,shape", CASES, ids=[f"{op}-{i}" for i, (op, _) in enumerate(CASES)])
def test_nan_is_kept_as_onnx_keeps_it(op_type: str, shape: Shape) -> None:
    d = registry.op(op_type)
    node = shape_node(d, shape)
    rng = np.random.default_rng(len(op_type))
    inputs = []
    for t in node.inputs:
        if t is None or t.dtype != "float32" or len(inputs) >= len(shape.inputs):
            inputs.append(None)
            continue
        x = rng.standard_normal(t.shape).astype(np.float32)
        x.reshape(-1)[rng.choice(x.size, max(1, x.size // 7), replace=False)] = np.nan
        inputs.append(x)
    want = run_reference(node, inputs)
    for binding in [b for b in d.bindings if b.applies(node)]:
        launches = binding.launch(node)
        module = _module(binding.source)
        got = run_launches(module, launches, node, inputs)
        for g, w in zip(got, want):
            assert np.array_equal(np.isnan(g), np.isnan(w)), f"{binding.name}: NaN pattern differs"
            np.testing.assert_allclose(g[~np.isnan(g)], w[~np.isnan(w)], rtol=1e-5, atol=1e-5)
