"""The emulator's warp matrix API (cuda_emu/include/emu_wmma.h): TF32 rounding, fragment layouts and products,
bit for bit against numpy doing the same arithmetic (each product exact in float32, one rounding per step, k in
order); and the tensor-core GEMM / convolution kernels of kernel_corpus/legacy/tc.cu against a numpy model of
3xTF32 and TF32 and against float64."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernel_corpus.bindings import LEGACY_DIR
from kernel_corpus.ops._tensor_core import threads as tc_threads

pytest.importorskip("cuda_emu", reason="the CPU emulator (cuda_emu) is not available")
from cuda_emu import CpuModule  # noqa: E402


# ---- numpy models of the arithmetic ------------------------------------------------------------------------------
def tf32_rna(x: np.ndarray) -> np.ndarray:
    """PTX cvt.rna.tf32.f32: round to nearest, ties away from zero, to 10 mantissa bits; Inf and NaN unchanged."""
    u = np.asarray(x, np.float32).view(np.uint32)
    special = (u & 0x7F800000) == 0x7F800000
    r = ((u.astype(np.uint64) + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return np.where(special, u, r).view(np.float32)


def tf32_trunc(x: np.ndarray) -> np.ndarray:
    """What a tensor core reads of a float operand: the low 13 mantissa bits dropped."""
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def mma_model(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = C + A @ B with k in order and one float32 rounding per step (a product of the operands is exact)."""
    acc = c.astype(np.float32).copy()
    for k in range(a.shape[1]):
        acc = (acc + np.outer(a[:, k], b[k, :]).astype(np.float32)).astype(np.float32)
    return acc


def split(x: np.ndarray, prec: int) -> tuple[np.ndarray, np.ndarray]:
    """The operands tc.cu feeds the tensor cores: 3xTF32 (hi = x truncated to tf32, lo = x - hi, read truncated)
    or TF32 (hi = tf32(x) rounded; no lo)."""
    if prec == 1:
        return tf32_rna(x), np.zeros_like(x)
    hi = tf32_trunc(x)
    return hi, tf32_trunc((x - hi).astype(np.float32))


def tc_gemm_model(a: np.ndarray, b: np.ndarray, prec: int) -> np.ndarray:
    """tc.cu's product: k in steps of 8 (zero-padded), per step lo*hi, hi*lo, hi*hi (3xTF32) or hi*hi (TF32)."""
    M, K = a.shape
    N = b.shape[1]
    Kp = -(-K // 16) * 16
    ap = np.zeros((M, Kp), np.float32)
    bp = np.zeros((Kp, N), np.float32)
    ap[:, :K], bp[:K] = a, b
    acc = np.zeros((M, N), np.float32)
    for k0 in range(0, Kp, 8):
        ah, al = split(ap[:, k0:k0 + 8], prec)
        bh, bl = split(bp[k0:k0 + 8], prec)
        terms = [(al, bh), (ah, bl), (ah, bh)] if prec == 0 else [(ah, bh)]
        for x, y in terms:
            acc = mma_model(x, y, acc)
    return acc


# ---- __float_to_tf32 ---------------------------------------------------------------------------------------------
ROUND_SRC = r"""
#include <mma.h>
__global__ void round_tf32(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = nvcuda::wmma::__float_to_tf32(x[i]);
}
"""


def _special_floats() -> np.ndarray:
    """Ties (low 13 bits exactly 0x1000) both signs, just above/below, carries into the exponent, extremes."""
    bits = [0x3F801000, 0xBF801000, 0x3F803000, 0x3F800FFF, 0x3F801001, 0x3FFFF000, 0x7F7FF000, 0x7F7FFFFF,
            0x00001000, 0x80001000, 0x00000FFF, 0x7F800000, 0xFF800000, 0x7FC00001, 0x00000000, 0x80000000]
    return np.array(bits, np.uint32).view(np.float32)


def test_float_to_tf32_rounds_to_nearest_ties_away() -> None:
    rng = np.random.default_rng(1)
    scaled = (rng.standard_normal(3000) * 10.0 ** rng.integers(-30, 30, 3000)).astype(np.float32)
    raw = rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([_special_floats(), scaled, raw])
    y = np.zeros_like(x)
    mod = CpuModule(ROUND_SRC, ["round_tf32"])
    mod.launch("round_tf32", grid=-(-x.size // 128), block=128, args=[x, y, np.int32(x.size)])
    want = tf32_rna(x)
    nan = np.isnan(x)
    assert np.array_equal(y[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(y[nan]).all()
    # the documented cases by value: a tie rounds away from zero, a carry reaches the exponent, max float overflows
    assert y[0] == np.float32(1.0 + 2.0**-10) and y[1] == -np.float32(1.0 + 2.0**-10)
    assert y[5] == np.float32(2.0) and np.isinf(y[6])


# ---- one fragment product: layouts and element types -------------------------------------------------------------
MMA_SRC = r"""
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using namespace nvcuda;
// D = A B + C for one M x N x K product; A, B, C, D in the layouts LA, LB, LC, LD (1 = row-major), leading dims
// lda, ldb, ldc, ldd. TF32 operands are rounded with __float_to_tf32 when ROUND.
template <class T, class S, int M, int N, int K, class LA, class LB, bool ROUND>
__global__ void one_mma(const S* a, const S* b, const float* c, float* d, int lda, int ldb, int ldc, int ldd,
                        int c_row, int d_row) {
  wmma::fragment<wmma::matrix_a, M, N, K, T, LA> fa;
  wmma::fragment<wmma::matrix_b, M, N, K, T, LB> fb;
  wmma::fragment<wmma::accumulator, M, N, K, float> fc;
  wmma::load_matrix_sync(fa, a, lda);
  wmma::load_matrix_sync(fb, b, ldb);
  if (ROUND) {
    for (int t = 0; t < fa.num_elements; ++t) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
    for (int t = 0; t < fb.num_elements; ++t) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
  }
  wmma::load_matrix_sync(fc, c, ldc, c_row ? wmma::mem_row_major : wmma::mem_col_major);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d, fc, ldd, d_row ? wmma::mem_row_major : wmma::mem_col_major);
}
"""
LAYOUTS = {True: "wmma::row_major", False: "wmma::col_major"}
TYPES = {"tf32": ("wmma::precision::tf32", "float"), "half": ("__half", "__half"),
         "bf16": ("__nv_bfloat16", "__nv_bfloat16")}


def _place(x: np.ndarray, row: bool, ld: int, dtype) -> np.ndarray:
    """A matrix stored row- or column-major with leading dimension ld (padding NaN: never read)."""
    rows, cols = x.shape if row else x.T.shape
    buf = np.full((rows, ld), np.nan, np.float32)
    buf[:, :cols] = x if row else x.T
    return buf.astype(dtype).ravel()


def _operand(rng: np.random.Generator, shape: tuple[int, int], kind: str) -> np.ndarray:
    """Random float32 values; for half / bf16 exactly representable in that type."""
    x = rng.uniform(-2, 2, shape).astype(np.float32)
    if kind == "half":
        return x.astype(np.float16).astype(np.float32)
    if kind == "bf16":
        return (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return x


CASES = [("tf32", 16, 16, 8, True, True, True), ("tf32", 16, 16, 8, False, True, False),
         ("tf32", 16, 16, 8, True, False, True), ("tf32", 16, 16, 8, False, False, False),
         ("half", 16, 16, 16, True, False, True), ("half", 32, 8, 16, False, True, False),
         ("bf16", 8, 32, 16, True, True, True), ("bf16", 16, 16, 16, False, False, False)]


@pytest.mark.parametrize("kind,M,N,K,row_a,row_b,round_", CASES)
def test_mma_sync_matches_numpy_bit_for_bit(kind: str, M: int, N: int, K: int, row_a: bool, row_b: bool,
                                            round_: bool) -> None:
    t, s = TYPES[kind]
    expr = f"one_mma<{t}, {s}, {M}, {N}, {K}, {LAYOUTS[row_a]}, {LAYOUTS[row_b]}, {'true' if round_ else 'false'}>"
    mod = CpuModule(MMA_SRC, [expr])
    rng = np.random.default_rng(M * 100 + N + K + row_a + 2 * row_b)
    a, b = _operand(rng, (M, K), kind), _operand(rng, (K, N), kind)
    c = rng.uniform(-4, 4, (M, N)).astype(np.float32)
    storage = np.float16 if kind == "half" else np.float32
    c_row, d_row = row_a, not row_b
    lda, ldb = (K if row_a else M) + 4, (N if row_b else K) + 8
    ldc, ldd = (N if c_row else M) + 4, (N if d_row else M) + 4
    if kind == "bf16":  # bf16 storage: the high halves of float32 values
        pa = (_place(a, row_a, lda, np.float32).view(np.uint32) >> 16).astype(np.uint16)
        pb = (_place(b, row_b, ldb, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    else:
        pa, pb = _place(a, row_a, lda, storage), _place(b, row_b, ldb, storage)
    pc = _place(c, c_row, ldc, np.float32)
    d = np.full(N * ldd if not d_row else M * ldd, np.nan, np.float32)
    mod.launch(expr, grid=1, block=32, args=[pa, pb, pc, d, np.int32(lda), np.int32(ldb), np.int32(ldc),
                                             np.int32(ldd), np.int32(c_row), np.int32(d_row)])
    if kind == "tf32":
        a, b = (tf32_rna(a), tf32_rna(b)) if round_ else (tf32_trunc(a), tf32_trunc(b))
    want = mma_model(a, b, c)
    got = d.reshape(M, ldd)[:, :N] if d_row else d.reshape(N, ldd)[:, :M].T
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # the padding past each row was never written
    pad = d.reshape(-1, ldd)[:, (N if d_row else M):]
    assert np.isnan(pad).all()


# ---- the tensor-core kernels of tc.cu ------------------------------------------------------------------------------
def _tc_module(exprs: list[str]) -> CpuModule:
    """tc.cu built for the emulator with the sanitizers on (as the corpus tests build it)."""
    path = LEGACY_DIR / "tc.cu"
    return CpuModule(path.read_text(), exprs, include_dirs=[str(LEGACY_DIR)], name=str(path), sanitize="all")


@pytest.mark.parametrize("bm,bn,prec,M,N,K,trans_a,batch", [
    (64, 64, 0, 37, 45, 50, False, 1), (64, 64, 1, 70, 33, 17, True, 1), (128, 64, 0, 130, 70, 40, False, 2),
    (64, 64, 0, 1, 65, 100, False, 1), (64, 64, 1, 8, 16, 16, False, 3), (32, 32, 0, 45, 33, 29, True, 2),
    (64, 64, 1, 33, 48, 30, False, 1), (128, 64, 0, 40, 64, 64, False, 2), (128, 64, 1, 131, 67, 35, True, 1)])
def test_gemm_tc_matches_numpy_model_bit_for_bit(bm: int, bn: int, prec: int, M: int, N: int, K: int,
                                                 trans_a: bool, batch: int) -> None:
    expr = f"gemm_tc<{bm}, {bn}, {prec}>"
    mod = _tc_module([expr])
    rng = np.random.default_rng(M + N + K)
    a = rng.uniform(-2, 2, (batch, M, K)).astype(np.float32)
    b = rng.uniform(-2, 2, (batch, K, N)).astype(np.float32)
    stored_a = np.ascontiguousarray(a.transpose(0, 2, 1)) if trans_a else a
    sam, sak = (1, M) if trans_a else (K, 1)
    y = np.full((batch, M, N), np.nan, np.float32)
    grid = (-(-N // bn), -(-M // bm), batch)
    args = [stored_a, b, b, y, M, N, K, sam, sak, N, 1, 0, 0, M * K if batch > 1 else 0, K * N if batch > 1 else 0]
    mod.launch(expr, grid=grid, block=tc_threads(bm, bn), args=[np.int32(v) if isinstance(v, int) else v for v in args]
               + [np.float32(1.0), np.float32(0.0), np.int32(0), np.int32(0)])
    for z in range(batch):
        want = tc_gemm_model(a[z], b[z], prec)
        assert np.array_equal(y[z].view(np.uint32), want.view(np.uint32))
        exact = a[z].astype(np.float64) @ b[z].astype(np.float64)
        err = np.abs(y[z] - exact).max() / np.abs(exact).max()
        assert err < (2e-6 if prec == 0 else 2e-3)


def _conv_ref(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], pad: tuple[int, int],
              dil: tuple[int, int], group: int) -> np.ndarray:
    """Grouped 2-D convolution in float64 (NCHW, symmetric pads)."""
    N, C, H, W = x.shape
    M, cg, KH, KW = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    OH = (H + 2 * pad[0] - dil[0] * (KH - 1) - 1) // stride[0] + 1
    OW = (W + 2 * pad[1] - dil[1] * (KW - 1) - 1) // stride[1] + 1
    y = np.zeros((N, M, OH, OW))
    mg = M // group
    for m in range(M):
        g = m // mg
        for kh in range(KH):
            for kw in range(KW):
                patch = xp[:, g * cg:(g + 1) * cg, kh * dil[0]: kh * dil[0] + stride[0] * OH: stride[0],
                           kw * dil[1]: kw * dil[1] + stride[1] * OW: stride[1]]
                y[:, m] += np.einsum("nchw,c->nhw", patch, w[m, :, kh, kw])
    return y


@pytest.mark.parametrize("tile,prec,xs,ws,stride,pad,dil,group", [
    ((64, 64), 0, (1, 3, 9, 11), (5, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((32, 32), 0, (2, 4, 10, 7), (6, 2, 3, 2), (2, 1), (1, 0), (1, 2), 2),
    ((64, 64), 1, (1, 16, 8, 8), (32, 16, 1, 1), (1, 1), (0, 0), (1, 1), 1),
    ((128, 64), 0, (8, 8, 6, 5), (12, 4, 3, 3), (1, 2), (1, 1), (1, 1), 2),
    ((32, 32), 0, (1, 40, 7, 7), (36, 40, 3, 3), (1, 1), (1, 1), (1, 1), 1)])
def test_conv_tc_matches_float64(tile: tuple[int, int], prec: int, xs, ws, stride, pad, dil, group) -> None:
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x = rng.uniform(-2, 2, xs).astype(np.float32)
    w = rng.uniform(-2, 2, ws).astype(np.float32)
    bias = rng.uniform(-1, 1, ws[0]).astype(np.float32)
    want = _conv_ref(x, w, stride, pad, dil, group) + bias[None, :, None, None]
    N, C, H, W = xs
    M, cg, KH, KW = ws
    OH, OW = want.shape[2:]
    R = cg * KH * KW
    exprs = ["conv_tc_offsets<256>", f"conv_tc<{tile[0]}, {tile[1]}, {prec}>"]
    mod = _tc_module(exprs)
    tab = np.full(4 * R, -99, np.int32)
    mod.launch(exprs[0], grid=-(-R // 256), block=256, args=[tab] + [np.int32(v) for v in (R, H, W, KH, KW, *dil)])
    y = np.full(want.shape, np.nan, np.float32)
    grid = (-(-(N * OH * OW) // tile[1]), -(-(M // group) // tile[0]), group)
    ints = [N, C, H, W, M, OH, OW, *stride, *pad, R, group, 1, 0]
    mod.launch(exprs[1], grid=grid, block=tc_threads(*tile), args=[x, w, bias, y, tab] + [np.int32(v) for v in ints])
    err = np.abs(y - want).max() / (1 + np.abs(want).max())
    assert err < (1e-6 if prec == 0 else 2e-3)


# ---- converted like every corpus kernel -------------------------------------------------------------------------
@pytest.mark.parametrize("op,variant,shape_index", [
    ("Gemm", "tc64x64_3xtf32", 2), ("MatMul", "tc32x32_3xtf32", 1), ("FusedConv", "tc128x64_tf32", 1),
    ("Conv", "tc64x64_3xtf32", 1), ("MatMul", "tc32x32_bf16", 1),
    ("MatMul", "tc128x64_3xtf32", 1)])
def test_converted_tensor_core_kernels_verify(tmp_path, op: str, variant: str, shape_index: int) -> None:
    """rtransform verify (the converted rKernel on the persistent executor: fewer vEUs than rTasks, surplus
    threads, shuffled rTasks) reproduces the legacy kernel bit for bit at a corpus launch."""
    import shutil

    import yaml

    from kernel_corpus.bindings import registry
    from kernel_corpus.index import launch_spec
    from kernel_corpus.reference import shape_node
    from rtransform.verify import verify_file
    d = registry.op(op)
    node = shape_node(d, [s for s in d.shapes if s.test][shape_index], "n")
    source = Path(shutil.copy(LEGACY_DIR / "tc.cu", tmp_path / "tc.cu"))
    for k, launch in enumerate(registry.get(op, variant).launch(node)):
        spec = tmp_path / f"launch{k}.spec.yaml"
        spec.write_text(yaml.safe_dump(launch_spec(launch, node), sort_keys=False))
        res = verify_file(str(source), str(spec))
        assert res.ok and all(c.max_error == 0 for c in res.outputs), res.summary()


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even) -> float32, as __float2bfloat16."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)).view(np.float32)


@pytest.mark.parametrize("bm,bn,M,N,K", [(64, 64, 37, 45, 50), (32, 32, 20, 70, 33), (128, 64, 150, 40, 20)])
def test_gemm_tc_bf16_matches_numpy_model_bit_for_bit(bm: int, bn: int, M: int, N: int, K: int) -> None:
    """PREC 2: operands rounded to bfloat16, one k16 product per 16-deep stage, k in order."""
    expr = f"gemm_tc<{bm}, {bn}, 2>"
    mod = _tc_module([expr])
    rng = np.random.default_rng(M * N)
    a = rng.uniform(-2, 2, (M, K)).astype(np.float32)
    b = rng.uniform(-2, 2, (K, N)).astype(np.float32)
    y = np.full((M, N), np.nan, np.float32)
    ints = [M, N, K, K, 1, N, 1, 0, 0, 0, 0]
    mod.launch(expr, grid=(-(-N // bn), -(-M // bm), 1), block=tc_threads(bm, bn),
               args=[a, b, b, y] + [np.int32(v) for v in ints] + [np.float32(1), np.float32(0), np.int32(0), np.int32(0)])
    kp = -(-K // 16) * 16
    ap, bp = np.zeros((M, kp), np.float32), np.zeros((kp, N), np.float32)
    ap[:, :K], bp[:K] = bf16_round(a), bf16_round(b)
    assert np.array_equal(y.view(np.uint32), mma_model(ap, bp, np.zeros((M, N), np.float32)).view(np.uint32))
