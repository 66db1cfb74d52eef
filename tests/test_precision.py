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


def _tc_hot_loop(expr: str):
    """The sm_90 SASS of one tc.cu instantiation: ptxas's registers and spills, and the instructions of its hottest
    loop (the one that itself issues the most HMMA)."""
    from toolchain.nvcc import find_nvcc
    from toolchain.ptxas import parse_ptxas
    from toolchain.sass import compile_sass, demangle, find_cuobjdump, loop_spans
    if find_nvcc() is None or find_cuobjdump() is None:
        pytest.skip("needs nvcc and cuobjdump (pip install nvidia-cuda-nvcc nvidia-cuda-cuobjdump: extra `sass`)")
    functions, log = compile_sass(f'#include "tc.cu"\nvoid instantiate() {{ (void)&{expr}; }}\n', [str(LEGACY_DIR)])
    want = expr.replace(" ", "")
    (name,) = [n for n in functions if demangle(n).replace(" ", "") == want]
    code = functions[name]
    spans = loop_spans(code)
    hmma = {s: sum(i.base == "HMMA" for i in code if s[0] <= i.addr <= s[1]) for s in spans}
    lo, hi = max(spans, key=lambda s: (hmma[s], -(s[1] - s[0])))
    used = parse_ptxas(log)[name]
    return used, [i for i in code if lo <= i.addr <= hi]


# (BM, BN, PREC, VEC) -> useful multiply-adds per warp instruction of the wmma-based tc.cu before issue 25 (sm_90
# SASS, BENCHMARKS.md "Kernel SASS": gemm_tc<64,64,3xTF32> 16384 MACs in 409 instructions, ...): the new loops must
# at least double them
BEFORE = {("gemm_tc", 32, 32, 0): 20.1, ("gemm_tc", 64, 64, 0): 40.1, ("gemm_tc", 128, 64, 0): 40.4,
          ("gemm_tc", 64, 64, 1): 46.7, ("gemm_tc", 64, 64, 2): 37.4, ("conv_tc", 64, 64, 0): 33.4,
          ("conv_tc", 128, 64, 0): 39.6}


@pytest.mark.nvcc
@pytest.mark.parametrize("kernel,bm,bn,prec,vec", [
    ("gemm_tc", 64, 64, 0, 3), ("gemm_tc", 128, 64, 0, 3), ("gemm_tc", 32, 32, 0, 3), ("gemm_tc", 64, 64, 1, 3),
    ("gemm_tc", 64, 64, 2, 3), ("conv_tc", 64, 64, 0, 3), ("conv_tc", 128, 64, 0, 3)])
def test_tensor_core_loops_issue_like_a_tuned_library(kernel: str, bm: int, bn: int, prec: int, vec: int) -> None:
    """Compiled for sm_90, the main loop of a 16-byte-copy instantiation issues mma.m16n8k8 (HMMA.1688; bf16
    HMMA.16816), loads A fragments with LDSM and B fragments with LDS.64 (no generic loads, no register moves for
    operands), copies with 16-byte LDGSTS only, waits for a stage with at least one newer group in flight (>= 3 stages),
    reaches at least twice the useful multiply-adds per instruction of the wmma kernels it replaced, and spills
    nothing within 128 registers. The loop is unrolled by its pipeline stages (TcShape::STAGES: 4 for 64x64, else
    3), so it holds that many stages' instructions."""
    used, hot = _tc_hot_loop(tc_expr(kernel, bm, bn, prec, vec))
    ops = [i.opcode for i in hot]
    hmma = [o for o in ops if o.startswith("HMMA")]
    # per warp and 16-deep stage: (WN / 16) x (WM / 8) fragments, 2 k8 steps x 3 products (3xTF32), 2 x 1 (TF32),
    # one k16 product (BF16)
    warp_m, warp_n = min(bm // 2, 32), min(bn // 2, 32)
    fragments = (warp_n // 16) * (warp_m // 8)
    stages = 4 if bm * bn == 64 * 64 else 3
    assert len(hmma) == stages * fragments * {0: 6, 1: 2, 2: 1}[prec]
    assert set(hmma) == {"HMMA.16816.F32.BF16" if prec == 2 else "HMMA.1688.F32.TF32"}
    assert ops.count("LDSM.16.M88.4") == stages * (warp_m // 16) * 2
    assert ops.count("LDS.64") == stages * (warp_n // 16) * 4
    # no generic or 32-bit fragment loads (ptxas puts a few `LDS RZ, [RZ]`, which load nothing, before LDGSTS)
    assert not [i for i in hot if i.base == "LD" or (i.opcode == "LDS" and not i.operands.startswith("RZ"))]
    copies = [o for o in ops if o.startswith("LDGSTS")]
    assert copies and all(o.endswith(".128") for o in copies)
    waits = [i.operands for i in hot if i.base == "DEPBAR"]
    assert waits and all(int(w.split(",")[-1], 16) >= 1 for w in waits)  # wait_group N >= 1: STAGES >= 3
    useful = stages * fragments * 16 * 8 * 16  # a warp's multiply-adds per loop trip (16-deep products)
    assert useful / len(ops) >= 2 * BEFORE[(kernel, bm, bn, prec)]
    assert used["spill_stores"] + used["spill_loads"] == 0 and used["registers"] <= 128


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


def tc_expr(kernel: str, bm: int, bn: int, prec: int, vec: int, split: int = 0) -> str:
    """A tc.cu instantiation: the fifth argument is SPLIT (the split launches' in-place fixup)."""
    return f"{kernel}<{bm}, {bn}, {prec}, {vec}, {split}>"


def _share_cases() -> list[tuple]:
    from scheduler.profiler import TC_HMMA_SHARE, TC_PRECISION, TC_SPLIT_HMMA_SHARE
    prec = {v: k for k, v in TC_PRECISION.items()}
    vec = {("gemm_tc", "vec"): 3, ("gemm_tc", "gather"): 0, ("conv_tc", "vec"): 3, ("conv_tc", "gather"): 1,
           ("conv_tc", "window"): 5}
    return [(k, bm, bn, prec[p], vec[(k, copies)], split, share)
            for split, table in ((0, TC_HMMA_SHARE), (1, TC_SPLIT_HMMA_SHARE))
            for (k, bm, bn, copies, p), share in table.items()]


@pytest.mark.nvcc
@pytest.mark.parametrize("kernel,bm,bn,prec,vec,split,share", _share_cases())
def test_cost_models_tensor_core_shares_are_the_sass(kernel: str, bm: int, bn: int, prec: int, vec: int, split: int,
                                                     share: float) -> None:
    """Every HMMA share the cost model charges (scheduler.profiler.TC_HMMA_SHARE, and TC_SPLIT_HMMA_SHARE for the
    split instantiations) is what the sm_90 SASS of that loop issues: HMMA steps of TF32-rate work (an
    HMMA.1688 two HMMA.1684s, a bf16 HMMA.16816 two at twice the rate) per loop instruction, within 5% (ptxas'
    scheduling moves a few instructions between versions)."""
    _, hot = _tc_hot_loop(tc_expr(kernel, bm, bn, prec, vec, split))
    steps = sum(2 for i in hot if i.base == "HMMA")
    assert steps / len(hot) == pytest.approx(share, rel=0.05), f"{steps} HMMA steps in {len(hot)} instructions"
