"""`rammer build --precision`: which kernels a precision allows, builds at each precision against onnxruntime, and
the tensor-core kernels' SASS (HMMA in the inner loop, no spills) as static evidence."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_build import assert_close, ort_outputs, rammer_cli
from test_scheduler import cnn_model, feeds_for, mlp_model

from kernel_corpus.bindings import LEGACY_DIR, PRECISIONS, registry
from rammer.build import build_model


def test_restricted_registry_keeps_the_precisions_at_least_as_accurate() -> None:
    for precision in PRECISIONS:
        allowed = set(PRECISIONS[: PRECISIONS.index(precision) + 1])
        view = registry.restricted(precision)
        for op in ("MatMul", "Gemm", "Conv", "FusedConv"):
            kept = view.for_op(op)
            assert {b.precision for b in kept} <= allowed
            assert [b.name for b in kept] == [b.name for b in registry.for_op(op) if b.precision in allowed]
    assert {b.precision for b in registry.for_op("Conv")} >= {"fp32", "3xtf32", "tf32"}
    with pytest.raises(ValueError, match="unknown precision"):
        registry.restricted("fp8")


def _chosen(folder: Path) -> set[str]:
    """Variants the build's plan chose."""
    text = (folder / "plan.json").read_text()
    return set(re.findall(r'"variant": ?"([^"]+)"', text))


@pytest.mark.parametrize("precision,make,veus,tol", [
    ("fp32", lambda: cnn_model(batch=2, channels=64, size=8, groups=4), 4, 1e-4),
    ("3xtf32", lambda: cnn_model(batch=2, channels=64, size=8, groups=4), 4, 1e-4),
    ("3xtf32", lambda: mlp_model(batch=64, dims=(256, 256, 128, 64)), 3, 1e-4),
    ("tf32", lambda: cnn_model(batch=2, channels=32, size=16, groups=4), 5, 3e-2),
    ("bf16", lambda: cnn_model(batch=2, channels=32, size=16, groups=4), 5, 1e-1)])
def test_build_at_a_precision_matches_onnxruntime(tmp_path: Path, precision: str, make, veus: int,
                                                  tol: float) -> None:
    model = make()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    built = build_model(path, tmp_path / "out", target="cpu", veus=veus, quiet=True, precision=precision,
                        profile="model")
    assert built.manifest.stats["precision"] == precision
    used = {v.rsplit("_", 1)[1] for v in _chosen(tmp_path / "out") if v.startswith("tc")}
    assert used <= set(PRECISIONS[1: PRECISIONS.index(precision) + 1])
    assert bool(used) == (precision != "fp32")  # at these sizes the cost model takes the tensor cores
    feeds = feeds_for(model, seed=veus)
    want = ort_outputs(model, feeds)
    if tol <= 1e-4:
        assert_close(built.run(feeds), want)
    else:
        for name, ref in want.items():
            err = np.abs(built.run(feeds)[name] - ref).max() / max(float(np.abs(ref).max()), 1e-6)
            assert err <= tol


def test_cli_refuses_an_unknown_precision(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(mlp_model(), path)
    res = rammer_cli("build", str(path), "-o", str(tmp_path / "out"), "--target", "cpu", "--precision", "fp8")
    assert res.returncode == 2 and "fp8" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.nvcc
@pytest.mark.parametrize("kernel,expr", [
    ("gemm_tc", "gemm_tc<64, 64, 0>"), ("gemm_tc", "gemm_tc<128, 64, 0>"), ("conv_tc", "conv_tc<64, 64, 0>"),
    ("gemm_tc", "gemm_tc<32, 32, 1>"), ("conv_tc", "conv_tc<128, 64, 0>"), ("gemm_tc", "gemm_tc<128, 64, 2>")])
def test_tensor_core_kernels_use_hmma_in_their_inner_loop(tmp_path: Path, kernel: str, expr: str) -> None:
    """Compiled for sm_90, the kernel's hottest loop issues HMMA (3 per useful product for 3xTF32) and spills
    nothing."""
    from toolchain.sass import compile_figures, demangle, find_cuobjdump
    from toolchain.nvcc import find_nvcc
    if find_nvcc() is None or find_cuobjdump() is None:
        pytest.skip("needs nvcc and cuobjdump (pip install nvidia-cuda-nvcc nvidia-cuda-cuobjdump: extra `sass`)")
    unit = tmp_path / "unit.cu"
    unit.write_text(f'#include "{LEGACY_DIR / "tc.cu"}"\nvoid instantiate() {{ (void)&{expr}; }}\n')
    figures = {demangle(f.name): f for f in compile_figures(unit, [str(LEGACY_DIR)])}
    want = expr.replace(" ", "")
    (f,) = [f for name, f in figures.items() if name.replace(" ", "") == want]
    assert f.loop is not None and f.loop.hmma > 0 and f.loop.ffma == 0
    bm, bn, prec = (int(v) for v in want[want.index("<") + 1:-1].split(","))
    # per warp and 16-deep k stage, per fragment of a warp's min(BM/2, 32) x min(BN/2, 32) outputs: tf32, 2 k-steps
    # x 4 HMMA.1684 (16x16x8 = 2 n-halves x 2 k-halves on sm_90) x products; bf16, 2 HMMA.16816 (2 n-halves)
    fragments = (min(bm // 2, 32) // 16) * (min(bn // 2, 32) // 16)
    assert f.loop.hmma == fragments * {0: 2 * 4 * 3, 1: 2 * 4, 2: 2}[prec]
    # no spills, and at most 128 registers: two 256-thread vEUs per SM can hold any tile
    assert f.spill_bytes == 0 and f.registers <= 128


@pytest.mark.nvcc
def test_gpu_build_program_has_tensor_core_instructions(tmp_path: Path) -> None:
    """A --target gpu build (no GPU needed: nvcc compiles program.cu) holds HMMA in its persistent interpreter at the
    default precision and none with --precision fp32."""
    from toolchain.nvcc import find_nvcc
    from toolchain.sass import compile_figures, find_cuobjdump
    from vdevice.codegen import INCLUDE_DIR
    if find_nvcc() is None or find_cuobjdump() is None:
        pytest.skip("needs nvcc and cuobjdump (pip install nvidia-cuda-nvcc nvidia-cuda-cuobjdump: extra `sass`)")
    path = tmp_path / "cnn.onnx"
    onnx.save(cnn_model(batch=2, channels=64, size=16, groups=4), path)
    hmma = {}
    for precision in ("fp32", "3xtf32"):
        built = build_model(path, tmp_path / precision, target="gpu", veus=16, quiet=True, precision=precision,
                            profile="model", launches=False)  # every node in the rProgram, whatever is faster
        figures = compile_figures(built.folder / "program.cu", [str(INCLUDE_DIR)])
        hmma[precision] = sum(f.hmma for f in figures)
    assert hmma["fp32"] == 0 and hmma["3xtf32"] > 0
