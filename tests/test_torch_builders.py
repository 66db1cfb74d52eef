"""The PyTorch baselines (OpDef.torch) of the corpus's standard ops, each run on the op's test shapes against the
op's reference (onnx's ReferenceEvaluator); needs torch (the `bench` extra) and skips visibly without it. A builder
that refuses a shape (one-line ValueError) is allowed: `rammer bench` then reports that op as unsupported."""
from __future__ import annotations

import numpy as np
import pytest

from kernel_corpus.bindings import registry
from kernel_corpus.reference import constants_as_inputs, run_reference, shape_node

CASES = [(d, s) for d in registry.ops() if d.torch is not None and not d.custom for s in d.shapes if s.test]


@pytest.mark.parametrize("d,shape", CASES, ids=[f"{d.op_type}-{i}" for i, (d, _) in enumerate(CASES)])
def test_torch_builder_matches_reference(d, shape) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[bench]')")
    node = shape_node(d, shape)
    if d.op_type in ("Softmax", "LogSoftmax") and node.opset < 13:
        pytest.skip("a builder sees no opset: softmax before opset 13 flattens the trailing axes")
    rng = np.random.default_rng(len(d.op_type))
    as_inputs = constants_as_inputs(d, node.opset)
    consts: list = [None] * len(node.inputs)
    runtime = []
    for i, t in enumerate(node.inputs):
        key = d.constant_inputs[i - 1] if 1 <= i <= len(d.constant_inputs) else None
        if key in node.attrs and key in as_inputs:
            consts[i] = np.asarray(node.attrs[key])
            continue
        if t is None:
            continue
        if t.dtype == "bool":
            runtime.append(rng.random(t.shape) < 0.5)
        elif t.dtype != "float32":
            runtime.append(rng.integers(*shape.ranges.get(i, (0, 2)), t.shape).astype(t.dtype))
        else:
            low, high = (0.5, 1.5) if i in shape.positive else (-2.0, 2.0)
            runtime.append(rng.uniform(low, high, t.shape).astype(np.float32))
    attrs = {k: v for k, v in node.attrs.items() if k not in as_inputs}
    try:
        fn = d.torch(torch, attrs, consts, len(node.outputs))
        got = fn(*[torch.from_numpy(np.array(x)) for x in runtime])  # np.array keeps 0-d inputs 0-d
    except ValueError as exc:
        assert "\n" not in str(exc)
        pytest.skip(f"the builder refuses this shape: {exc}")
    got = got if isinstance(got, (tuple, list)) else (got,)
    full: list = [None] * len(consts)
    it = iter(runtime)
    for i in range(len(node.inputs)):
        if consts[i] is None and node.inputs[i] is not None:
            full[i] = next(it)
    want = run_reference(node, full)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.detach().numpy().astype(np.float64), w, rtol=1e-4, atol=1e-4)
