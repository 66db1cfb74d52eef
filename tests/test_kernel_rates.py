"""rammer.kernel_rates on the CPU emulator: every GEMM / convolution node of a build timed as its own kernels and as
the library's call on the build's buffers, with the node's FLOPs and agreeing outputs (the times themselves are
emulator wall clock: only their presence is checked)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from test_setup_launches import conv_model

from rammer.build import build_model
from rammer.kernel_rates import kernel_rates, render


def matmul_model(m: int, k: int, n: int, seed: int = 0) -> onnx.ModelProto:
    """x [m, k] @ W [k, n] -> Relu -> @ W2 [n, 3]."""
    rng = np.random.default_rng(seed)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm1"), helper.make_node("Relu", ["h"], ["r"], name="act"),
         helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, 3])],
        [numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal((n, 3)).astype(np.float32), "w2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_and_gemm_rates_have_the_nodes_flops_and_agree(tmp_path: Path) -> None:
    c, m, hw, k = 8, 16, 9, 3
    conv = conv_model(c, m, hw, k, stride=2)
    onnx.save(conv, tmp_path / "c.onnx")
    built = build_model(tmp_path / "c.onnx", tmp_path / "bc", target="cpu", veus=3, quiet=True, backends=("rtask",),
                        force=("*=launch",))
    rows = {r.node: r for r in kernel_rates(built, "cpu", repeats=1, inner=1)}
    oh = (hw + 2 - k) // 2 + 1
    assert set(rows) == {"gathered", "direct"}, rows  # the Relu is fused into the gathered conv; no library op
    assert rows["gathered"].flops == 2 * m * c * k * k * oh * oh
    assert rows["direct"].flops == 2 * 4 * m * oh * oh
    for r in rows.values():
        assert r.library == "conv2d" and r.agree is True and r.ours_us > 0 and r.library_us
        assert "conv_tc_offsets" not in r.kernels  # a setup launch: not part of any inference
    mm = matmul_model(5, 24, 12)
    onnx.save(mm, tmp_path / "m.onnx")
    built = build_model(tmp_path / "m.onnx", tmp_path / "bm", target="cpu", veus=2, quiet=True, backends=("rtask",),
                        force=("*=rtask",))
    rows = {r.node: r for r in kernel_rates(built, "cpu", repeats=1, inner=1)}
    assert {n: r.flops for n, r in rows.items()} == {"mm1": 2 * 5 * 24 * 12, "mm2": 2 * 5 * 12 * 3}
    assert all(r.agree for r in rows.values())
    table = render([r.to_json() for r in rows.values()])
    assert table.count("\n") == 2 + len(rows) and "| mm1 |" in table and "matmul" in table
