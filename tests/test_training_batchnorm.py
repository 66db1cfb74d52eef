"""Training-mode BatchNormalization lowered to standard operators (lower_training_batchnorm), built for the CPU
target and checked against onnx's ReferenceEvaluator: Y from the batch statistics, the running mean and variance
blended by momentum; with the pass disabled the node is refused, never folded as if it were inference."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from rammer.build import build_model
from scheduler.graph import SchedulerError


def bn_model(shape: tuple[int, ...], opset: int, outputs: int, momentum: float) -> onnx.ModelProto:
    """One training-mode BatchNormalization with runtime parameters."""
    c = [shape[1]]
    names = ["x", "s", "b", "m", "v"]
    node = helper.make_node("BatchNormalization", names, ["y", "rm", "rv"][:outputs], training_mode=1,
                            momentum=momentum, epsilon=1e-3)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))] + \
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, c) for n in names[1:]]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))] + \
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, c) for n in ["rm", "rv"][:outputs - 1]]
    return helper.make_model(helper.make_graph([node], "bn", inputs, outs),
                             opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("shape,opset,outputs,momentum", [((2, 3, 4, 5), 15, 3, 0.9), ((4, 6), 18, 3, 0.5),
                                                          ((1, 2, 3, 2, 4), 15, 3, 0.0)])
def test_training_batchnorm_matches_reference(tmp_path: Path, shape: tuple, opset: int, outputs: int,
                                              momentum: float) -> None:
    model = bn_model(shape, opset, outputs, momentum)
    onnx.save(model, str(tmp_path / "m.onnx"))
    built = build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", veus=3, quiet=True)
    rng = np.random.default_rng(len(shape))
    c = shape[1]
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "s": rng.uniform(0.5, 1.5, c).astype(np.float32),
             "b": rng.standard_normal(c).astype(np.float32), "m": rng.standard_normal(c).astype(np.float32),
             "v": rng.uniform(0.5, 1.5, c).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)
    got = built.run(feeds)
    for name, ref in zip([o.name for o in model.graph.output], want):
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5, err_msg=name)


def test_without_the_pass_training_batchnorm_is_refused(tmp_path: Path) -> None:
    onnx.save(bn_model((2, 3, 4), 15, 3, 0.9), str(tmp_path / "m.onnx"))
    with pytest.raises(SchedulerError, match="BatchNormalization"):
        build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", quiet=True,
                    disable_passes=["lower_training_batchnorm"])
