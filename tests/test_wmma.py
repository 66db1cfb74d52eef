"""The emulator's warp matrix API (cuda_emu/include/emu_wmma.h) and its models of the PTX instructions tc.cu issues
(emu_mma.h: mma.sync m16n8k8 tf32 / m16n8k16 bf16 by the PTX ISA's per-lane fragment layouts, ldmatrix, cp.async
groups, cvt to tf32 / bf16x2): rounding, layouts and products bit for bit against numpy doing the same arithmetic
(each product exact in float32, one rounding per step, k in order); and the tensor-core GEMM / convolution kernels of
kernel_corpus/legacy/tc.cu, every tile, precision, copy width and split-K factor, against a numpy model of their
arithmetic (bit for bit) and against float64."""
from __future__ import annotations

from collections.abc import Callable
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


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even) -> float32, as __float2bfloat16."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)).view(np.float32)


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


def _mma_expr(kind: str, M: int, N: int, K: int, row_a: bool, row_b: bool, round_: bool) -> str:
    """The one_mma instantiation of a case."""
    t, s = TYPES[kind]
    return f"one_mma<{t}, {s}, {M}, {N}, {K}, {LAYOUTS[row_a]}, {LAYOUTS[row_b]}, {'true' if round_ else 'false'}>"


MMA_FAMILY = [_mma_expr(*case) for case in CASES]


@pytest.mark.parametrize("kind,M,N,K,row_a,row_b,round_", CASES)
def test_mma_sync_matches_numpy_bit_for_bit(kind: str, M: int, N: int, K: int, row_a: bool, row_b: bool,
                                            round_: bool) -> None:
    expr = _mma_expr(kind, M, N, K, row_a, row_b, round_)
    mod = _shared_module(MMA_FAMILY, [expr], lambda exprs: CpuModule(MMA_SRC, exprs))
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


# ---- the PTX instruction models (cuda_emu/include/emu_mma.h), through tc.cu's wrappers -----------------------------
PTX_SRC = r"""
#include "tc.cu"
// Lane l of one warp loads its m16n8k8 tf32 fragments from a [16][8], b [8][8] (k, n) and c [16][8] by the PTX ISA's
// layout (g = l / 4, t = l % 4), issues mma.sync, and stores its d elements at their (row, column).
__global__ void one_mma_tf32(const float* a, const float* b, const float* c, float* d) {
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  const unsigned af[4] = {__float_as_uint(a[g * 8 + t]), __float_as_uint(a[(g + 8) * 8 + t]),
                          __float_as_uint(a[g * 8 + t + 4]), __float_as_uint(a[(g + 8) * 8 + t + 4])};
  const unsigned bf[2] = {__float_as_uint(b[t * 8 + g]), __float_as_uint(b[(t + 4) * 8 + g])};
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  tc_mma_tf32(acc, af, bf);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
// The same for m16n8k16 bf16: a [16][16], b [16][8] hold bf16 bit patterns (uint16), pairs low half first.
__global__ void one_mma_bf16(const unsigned short* a, const unsigned short* b, const float* c, float* d) {
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  unsigned af[4], bf[2];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
    af[i] = a[row * 16 + col] | (unsigned)a[row * 16 + col + 1] << 16;
  }
  for (int i = 0; i < 2; ++i) {
    const int k = 2 * t + 8 * i;
    bf[i] = b[k * 8 + g] | (unsigned)b[(k + 1) * 8 + g] << 16;
  }
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  tc_mma_bf16(acc, af, bf);
  for (int e = 0; e < 4; ++e) d[(g + 8 * (e / 2)) * 8 + 2 * t + e % 2] = acc[e];
}
// ldmatrix.x4 over a [32][8] word matrix in shared memory: lane l addresses row rows[l] (16 bytes at column 4 *
// half[l]); every lane writes the four words it receives to out[l][0..3].
__global__ void ldsm_x4(const unsigned* src, const int* rows, const int* half, unsigned* out) {
  __shared__ __align__(16) unsigned m[32 * 8];
  for (int i = threadIdx.x; i < 32 * 8; i += 32) m[i] = src[i];
  __syncthreads();
  unsigned r[4];
  tc_ldsm4(r, tc_smem_addr(&m[rows[threadIdx.x] * 8 + 4 * half[threadIdx.x]]));
  for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = r[i];
}
// cp.async groups: thread 0 copies src[0..3] (16 bytes, group 0), src[4] (4 bytes, group 1), nothing valid for
// dst[8..11] (zero-fill, group 1), src[12..15] (group 2), reading dst after wait_group 2, 1 and 0 into seen[0..47].
__global__ void cp_async_groups(const float* src, float* seen) {
  __shared__ __align__(16) float dst[16];
  for (int i = 0; i < 16; ++i) dst[i] = -1.0f;
  const tc_sptr s = tc_smem_addr(dst);
  tc_copy<16>(s, src, true);
  tc_copy_commit();
  tc_copy<4>(s + 16, src + 4, true);
  tc_copy<16>(s + 32, src + 8, false);
  tc_copy_commit();
  tc_copy<16>(s + 48, src + 12, true);
  tc_copy_commit();
  tc_copy_wait<2>();
  for (int i = 0; i < 16; ++i) seen[i] = dst[i];
  tc_copy_wait<1>();
  for (int i = 0; i < 16; ++i) seen[16 + i] = dst[i];
  tc_copy_wait<0>();
  for (int i = 0; i < 16; ++i) seen[32 + i] = dst[i];
}
// A 16-byte cp.async from a source that is not 16-byte aligned.
__global__ void cp_async_misaligned(const float* src) {
  __shared__ __align__(16) float dst[4];
  tc_copy<16>(tc_smem_addr(dst), src + 1, true);
  tc_copy_commit();
  tc_copy_wait<0>();
}
// cvt.rna.tf32.f32 and cvt.rn.bf16x2.f32 of x[i] (the bf16 pair: x[i] high, -x[i] low).
__global__ void cvt(const float* x, unsigned* tf32, unsigned* bf16x2, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  tf32[i] = tc_to_tf32(__float_as_uint(x[i]));
  bf16x2[i] = tc_to_bf16x2(__float_as_uint(x[i]), __float_as_uint(-x[i]));
}
"""


def _ptx_module(exprs: list[str], sanitize: str | None = "all") -> CpuModule:
    """The instruction tests built against tc.cu's wrappers (the kernels' own instruction calls)."""
    return CpuModule(PTX_SRC, exprs, include_dirs=[str(LEGACY_DIR)], sanitize=sanitize)


def test_mma_m16n8k8_tf32_follows_the_ptx_fragment_layout() -> None:
    """Fragments loaded by the PTX ISA's per-lane layout give D = C + A B with tf32-truncated operands, k in order,
    bit for bit; the operands' low 13 bits are ignored (NaN-free random bits in them change nothing)."""
    mod = _ptx_module(["one_mma_tf32"])
    for seed in range(3):
        rng = np.random.default_rng(seed)
        a = rng.uniform(-2, 2, (16, 8)).astype(np.float32)
        b = rng.uniform(-2, 2, (8, 8)).astype(np.float32)
        c = rng.uniform(-4, 4, (16, 8)).astype(np.float32)
        d = np.full((16, 8), np.nan, np.float32)
        mod.launch("one_mma_tf32", grid=1, block=32, args=[a, b, c, d])
        want = mma_model(tf32_trunc(a), tf32_trunc(b), c)
        assert np.array_equal(d.view(np.uint32), want.view(np.uint32))
        assert not np.array_equal(want, mma_model(a.astype(np.float64), b, c).astype(np.float32))  # truncation shows


def test_mma_m16n8k16_bf16_follows_the_ptx_fragment_layout() -> None:
    mod = _ptx_module(["one_mma_bf16"])
    rng = np.random.default_rng(7)
    a = bf16_round(rng.uniform(-2, 2, (16, 16)).astype(np.float32))
    b = bf16_round(rng.uniform(-2, 2, (16, 8)).astype(np.float32))
    c = rng.uniform(-4, 4, (16, 8)).astype(np.float32)
    d = np.full((16, 8), np.nan, np.float32)
    bits = lambda x: (x.view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731
    mod.launch("one_mma_bf16", grid=1, block=32, args=[bits(a), bits(b), c, d])
    assert np.array_equal(d.view(np.uint32), mma_model(a, b, c).view(np.uint32))


def test_ldmatrix_x4_gives_each_lane_its_words() -> None:
    """Lanes 8i..8i+7 address the rows of matrix i (any rows, in any order); lane l receives word l % 4 of the row
    lane 8i + l / 4 addressed."""
    mod = _ptx_module(["ldsm_x4"])
    rng = np.random.default_rng(3)
    src = rng.integers(0, 2**32, 32 * 8, dtype=np.uint64).astype(np.uint32)
    rows = rng.permutation(32).astype(np.int32)
    half = rng.integers(0, 2, 32).astype(np.int32)
    out = np.zeros(32 * 4, np.uint32)
    mod.launch("ldsm_x4", grid=1, block=32, args=[src, rows, half, out])
    m = src.reshape(32, 8)
    want = [[m[rows[8 * i + l // 4], 4 * half[8 * i + l // 4] + l % 4] for i in range(4)] for l in range(32)]
    assert np.array_equal(out.reshape(32, 4), np.array(want, np.uint32))


def test_cp_async_completes_groups_in_order_with_zero_fill() -> None:
    """wait_group N completes every committed group but the N most recent; an invalid copy zero-fills. Until its
    group is waited for, the destination keeps its old contents on the emulator (the GPU may show either)."""
    mod = _ptx_module(["cp_async_groups"])
    src = np.arange(1, 17, dtype=np.float32)
    seen = np.zeros(48, np.float32)
    mod.launch("cp_async_groups", grid=1, block=1, args=[src, seen])
    old = np.full(16, -1.0, np.float32)
    g0 = old.copy()
    g0[0:4] = src[0:4]
    g1 = g0.copy()
    g1[4] = src[4]
    g1[8:12] = 0.0
    g2 = g1.copy()
    g2[12:16] = src[12:16]
    assert np.array_equal(seen.reshape(3, 16), np.stack([g0, g1, g2]))


def test_cp_async_needs_aligned_addresses() -> None:
    from cuda_emu import EmuError
    mod = _ptx_module(["cp_async_misaligned"], sanitize=None)
    with pytest.raises(EmuError, match="must be 16-byte aligned"):
        mod.launch("cp_async_misaligned", grid=1, block=1, args=[np.zeros(8, np.float32)])


def test_mma_needs_the_whole_warp() -> None:
    from cuda_emu import EmuError
    mod = _ptx_module(["one_mma_tf32"], sanitize=None)
    z = np.zeros(128, np.float32)
    with pytest.raises(EmuError, match="needs all 32 lanes"):
        mod.launch("one_mma_tf32", grid=1, block=16, args=[z, z, z, z.copy()])


def test_cvt_tf32_and_bf16x2_round_as_ptx() -> None:
    x = np.concatenate([_special_floats(), np.random.default_rng(5).standard_normal(500).astype(np.float32)])
    tf32, pair = np.zeros(x.size, np.uint32), np.zeros(x.size, np.uint32)
    mod = _ptx_module(["cvt"])
    mod.launch("cvt", grid=-(-x.size // 128), block=128, args=[x, tf32, pair, np.int32(x.size)])
    ok = ~np.isnan(x)
    assert np.array_equal(tf32[ok], tf32_rna(x).view(np.uint32)[ok])
    hi, lo = (pair >> 16).astype(np.uint32) << 16, (pair & 0xFFFF).astype(np.uint32) << 16
    assert np.array_equal(hi[ok], bf16_round(x).view(np.uint32)[ok])
    assert np.array_equal(lo[ok], bf16_round(-x).view(np.uint32)[ok])


# ---- the tensor-core kernels of tc.cu ------------------------------------------------------------------------------
BF16_K_ORDER = [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]  # tc.cu's bf16 products, per 16-deep stage


def tc_gemm_model(a: np.ndarray, b: np.ndarray, prec: int) -> np.ndarray:
    """tc.cu's product over one K range (stages of 16 from its start, zero-padded at the end): per k8 step lo*hi,
    hi*lo, hi*hi (3xTF32) or hi*hi (TF32); BF16: operands rounded to bfloat16, k in BF16_K_ORDER per stage."""
    M, K = a.shape
    N = b.shape[1]
    Kp = -(-K // 16) * 16
    ap = np.zeros((M, Kp), np.float32)
    bp = np.zeros((Kp, N), np.float32)
    ap[:, :K], bp[:K] = a, b
    acc = np.zeros((M, N), np.float32)
    if prec == 2:
        order = np.concatenate([np.array(BF16_K_ORDER) + k0 for k0 in range(0, Kp, 16)])
        return mma_model(bf16_round(ap[:, order]), bf16_round(bp[order]), acc)
    for k0 in range(0, Kp, 8):
        ah, al = split(ap[:, k0:k0 + 8], prec)
        bh, bl = split(bp[k0:k0 + 8], prec)
        terms = [(al, bh), (ah, bl), (ah, bh)] if prec == 0 else [(ah, bh)]
        for x, y in terms:
            acc = mma_model(x, y, acc)
    return acc


def split_ranges(K: int, splits: int) -> list[tuple[int, int]]:
    """The K range of each split, as tc.cu's TcSplit documents it: the ceil(K/16) stages shared out, split s from
    stage floor(s * stages / splits)."""
    stages = -(-K // 16)
    return [(s * stages // splits * 16, min(K, (s + 1) * stages // splits * 16)) for s in range(splits)]


def tc_split_model(a: np.ndarray, b: np.ndarray, prec: int, splits: int) -> np.ndarray:
    """Split-K: each split's product over its K range, then the partial sums added in split order (float32)."""
    parts = [tc_gemm_model(a[:, k0:k1], b[k0:k1], prec) for k0, k1 in split_ranges(a.shape[1], splits)]
    acc = parts[0]
    for p in parts[1:]:
        acc = (acc + p).astype(np.float32)
    return acc


def _tc_module(exprs: list[str]) -> CpuModule:
    """tc.cu built for the emulator with the sanitizers on (as the corpus tests build it)."""
    path = LEGACY_DIR / "tc.cu"
    return CpuModule(path.read_text(), exprs, include_dirs=[str(LEGACY_DIR)], name=str(path), sanitize="all")


_SHARED: dict[tuple[str, ...], CpuModule] = {}


def _shared_module(family: list[str], exprs: list[str],
                   build: Callable[[list[str]], CpuModule] | None = None) -> CpuModule:
    """The one module of a test family's kernel expressions (tc.cu's, see _tc_module, unless `build` makes it from
    the sorted expressions), built on first use: every case of the family launches its own instantiation from it, so
    g++ pays the emulator's runtime and the source's shared code once per family instead of once per case (the
    kernels, their launches and what is asserted are unchanged)."""
    assert set(exprs) <= set(family), (exprs, family)
    key = tuple(sorted(set(family)))
    if key not in _SHARED:
        _SHARED[key] = (build or _tc_module)(list(key))
    return _SHARED[key]


def _gemm_vec(M: int, N: int, K: int, trans_a: bool, batch: int) -> int:
    """tc.cu's VEC bits as the GEMM binding sets them for these operands."""
    a = not trans_a and K % 4 == 0 and (batch == 1 or (M * K) % 4 == 0)
    b = N % 4 == 0 and (batch == 1 or (K * N) % 4 == 0)
    return int(a) | 2 * int(b)


GEMM_CASES = [
    (64, 64, 0, 37, 45, 50, False, 1, 1), (64, 64, 1, 70, 33, 17, True, 1, 1), (128, 64, 0, 130, 70, 40, False, 2, 1),
    (64, 64, 0, 1, 65, 100, False, 1, 1), (64, 64, 1, 8, 16, 16, False, 3, 1), (32, 32, 0, 45, 33, 29, True, 2, 1),
    (64, 64, 1, 33, 48, 30, False, 1, 1), (128, 64, 0, 40, 64, 64, False, 2, 1), (128, 64, 1, 131, 67, 35, True, 1, 1),
    (64, 64, 0, 36, 44, 52, False, 1, 1), (32, 32, 2, 20, 70, 33, False, 1, 1), (64, 64, 2, 37, 48, 52, False, 2, 1),
    (32, 32, 0, 33, 40, 300, False, 1, 2), (32, 32, 0, 17, 36, 260, True, 2, 3), (64, 64, 0, 40, 68, 530, False, 1, 8),
    (32, 32, 1, 9, 20, 1030, False, 1, 16), (64, 64, 2, 24, 40, 200, False, 2, 3), (128, 64, 0, 70, 36, 96, False, 1, 6)]
EPILOGUE_EXPR = "gemm_tc<32, 32, 0, 0, 1>"


def _gemm_expr(bm: int, bn: int, prec: int, M: int, N: int, K: int, trans_a: bool, batch: int, splits: int) -> str:
    """The gemm_tc instantiation the GEMM binding launches for these operands."""
    return f"gemm_tc<{bm}, {bn}, {prec}, {_gemm_vec(M, N, K, trans_a, batch)}, {int(splits > 1)}>"


GEMM_FAMILY = [_gemm_expr(*case) for case in GEMM_CASES] + [EPILOGUE_EXPR]


@pytest.mark.parametrize("bm,bn,prec,M,N,K,trans_a,batch,splits", GEMM_CASES)
def test_gemm_tc_matches_numpy_model_bit_for_bit(bm: int, bn: int, prec: int, M: int, N: int, K: int,
                                                 trans_a: bool, batch: int, splits: int) -> None:
    """Every tile, precision, copy width (16-byte where the operands allow, else 4-byte) and split factor against
    tc.cu's documented arithmetic in numpy, bit for bit; split-K in one launch (each tile's last block adds the
    splits, its arrival counters left at zero for the next run: run twice). A batch writes Y as a strided view
    (ysz, ysm: Y stored [M, batch, N], as an attention's heads are stored [S, heads, D])."""
    exprs = [_gemm_expr(bm, bn, prec, M, N, K, trans_a, batch, splits)]
    mod = _shared_module(GEMM_FAMILY, exprs)
    rng = np.random.default_rng(M + N + K)
    a = rng.uniform(-2, 2, (batch, M, K)).astype(np.float32)
    b = rng.uniform(-2, 2, (batch, K, N)).astype(np.float32)
    stored_a = np.ascontiguousarray(a.transpose(0, 2, 1)) if trans_a else a
    sam, sak = (1, M) if trans_a else (K, 1)
    stored_y = np.full((M, batch, N), np.nan, np.float32)
    y = stored_y.transpose(1, 0, 2)
    ysz, ysm = N, batch * N
    part = np.full(splits * batch * M * N, np.nan, np.float32)
    grid = (-(-N // bn), -(-M // bm), batch * splits)
    arrivals = np.zeros(grid[0] * grid[1] * batch, np.int32)
    ints = [M, N, K, sam, sak, N, 1, 0, 0, M * K if batch > 1 else 0, K * N if batch > 1 else 0]
    for run in range(2 if splits > 1 else 1):
        stored_y[...] = np.nan
        mod.launch(exprs[0], grid=grid, block=tc_threads(bm, bn),
                   args=[stored_a, b, b, stored_y, part, arrivals]
                   + [np.int32(v) for v in ints] + [np.float32(1.0), np.float32(0.0), np.int32(0), np.int32(0),
                                                    np.int32(splits), np.int32(ysz), np.int32(ysm)])
        assert not arrivals.any()  # rearmed by each tile's last block
        for z in range(batch):
            want = tc_split_model(a[z], b[z], prec, splits)
            assert np.array_equal(y[z].view(np.uint32), want.view(np.uint32)), run
            exact = a[z].astype(np.float64) @ b[z].astype(np.float64)
            err = np.abs(y[z] - exact).max() / np.abs(exact).max()
            assert err < {0: 2e-6, 1: 2e-3, 2: 2e-2}[prec]


@pytest.mark.parametrize("splits,bias,act", [(2, 1, 0), (5, 1, 1), (3, 0, 1)])
def test_gemm_split_last_block_applies_the_epilogue(splits: int, bias: int, act: int) -> None:
    """A split gemm_tc's last block per tile: the partial sums added in split order, then alpha, beta * C (broadcast
    rows) and Relu, in float32 as numpy computes them (the partials as the kernel leaves them in P)."""
    mod = _shared_module(GEMM_FAMILY, [EPILOGUE_EXPR])
    rng = np.random.default_rng(splits)
    batch, M, N, K = 2, 7, 33, 16 * splits + 5
    a = rng.uniform(-2, 2, (batch, M, K)).astype(np.float32)
    b = rng.uniform(-2, 2, (batch, K, N)).astype(np.float32)
    c = rng.uniform(-1, 1, N).astype(np.float32)
    y = np.full((batch, M, N), np.nan, np.float32)
    part = np.full((splits, batch, M, N), np.nan, np.float32)
    alpha, beta = np.float32(0.5), np.float32(-2.0)
    grid = (-(-N // 32), -(-M // 32), batch * splits)
    arrivals = np.zeros(grid[0] * grid[1] * batch, np.int32)
    mod.launch(EPILOGUE_EXPR, grid=grid, block=tc_threads(32, 32),
               args=[a, b, c, y, part, arrivals] + [np.int32(v) for v in (M, N, K, K, 1, N, 1, 0, 1, M * K, K * N)]
               + [alpha, beta, np.int32(bias), np.int32(act), np.int32(splits), np.int32(M * N), np.int32(N)])
    acc = part[0]
    for p in part[1:]:
        acc = (acc + p).astype(np.float32)
    want = (alpha * acc).astype(np.float32)
    if bias:
        want = (want + (beta * c).astype(np.float32)).astype(np.float32)
    if act:
        want = np.maximum(want, np.float32(0))
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))


@pytest.fixture(scope="module")
def tc_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of tc.cu outside the repository that rtransform verify converts, one per test process: its path names
    the sanitized builds (the emulator's cache key), so the cases that launch the same kernels share their builds."""
    import shutil
    return Path(shutil.copy(LEGACY_DIR / "tc.cu", tmp_path_factory.mktemp("tc") / "tc.cu"))


def test_gemm_tc_splits_are_bit_reproducible_in_any_block_order(tmp_path, tc_copy: Path) -> None:
    """The same split GEMM run as rTasks of a persistent vDevice with shuffled block orders (rtransform verify of
    both launches) gives the legacy result bit for bit: the fixup adds the splits in a fixed order."""
    import yaml

    from kernel_corpus.bindings import registry
    from kernel_corpus.index import launch_spec
    from kernel_corpus.reference import shape_node
    from kernel_corpus.bindings import Shape
    from rtransform.verify import verify_file
    node = shape_node(registry.op("MatMul"), Shape(((20, 600), (600, 36))), "n")
    source = tc_copy
    for k, launch in enumerate(registry.get("MatMul", "tc32x32k8_3xtf32").launch(node)):
        spec = tmp_path / f"launch{k}.spec.yaml"
        spec.write_text(yaml.safe_dump(launch_spec(launch, node), sort_keys=False))
        res = verify_file(str(source), str(spec))
        assert res.ok and all(c.max_error == 0 for c in res.outputs), res.summary()


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


def _im2col(x: np.ndarray, KH: int, KW: int, stride, pad, dil, OH: int, OW: int, cg: int, g: int) -> np.ndarray:
    """Group g's im2col matrix [cg*KH*KW, N*OH*OW] (r = (c*KH + kh)*KW + kw, p = (n*OH + oh)*OW + ow), zero padding."""
    N = x.shape[0]
    xp = np.pad(x[:, g * cg:(g + 1) * cg], ((0, 0), (0, 0), (pad[0], pad[0] + 8), (pad[1], pad[1] + 8)))
    rows = []
    for c in range(cg):
        for kh in range(KH):
            for kw in range(KW):
                patch = xp[:, c, kh * dil[0]: kh * dil[0] + stride[0] * OH: stride[0],
                           kw * dil[1]: kw * dil[1] + stride[1] * OW: stride[1]]
                rows.append(patch.reshape(N * OH * OW))
    return np.stack(rows).astype(np.float32)


CONV_CASES = [
    ((64, 64), 0, (1, 3, 9, 11), (5, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, 1, 0),
    ((32, 32), 0, (2, 4, 10, 7), (6, 2, 3, 2), (2, 1), (1, 0), (1, 2), 2, 1, 1),
    ((64, 64), 1, (1, 16, 8, 8), (32, 16, 1, 1), (1, 1), (0, 0), (1, 1), 1, 1, 1),
    ((128, 64), 0, (8, 8, 6, 5), (12, 4, 3, 3), (1, 2), (1, 1), (1, 1), 2, 1, 1),
    ((32, 32), 0, (1, 40, 7, 7), (36, 40, 3, 3), (1, 1), (1, 1), (1, 1), 1, 1, 0),
    ((32, 32), 2, (2, 8, 6, 6), (16, 8, 1, 1), (1, 1), (0, 0), (1, 1), 1, 1, 1),
    ((32, 32), 0, (1, 64, 6, 6), (40, 32, 3, 3), (1, 1), (1, 1), (1, 1), 2, 4, 1),
    ((64, 64), 0, (2, 160, 4, 4), (24, 160, 1, 1), (1, 1), (0, 0), (1, 1), 1, 2, 1),
    ((32, 32), 1, (1, 96, 5, 5), (20, 48, 3, 3), (2, 2), (1, 1), (1, 1), 2, 6, 0),
    ((64, 64), 2, (1, 48, 7, 7), (8, 48, 3, 3), (1, 1), (2, 2), (2, 2), 1, 3, 1),
    ((32, 32), 0, (2, 128, 4, 4), (36, 128, 3, 3), (1, 1), (1, 1), (1, 1), 1, 16, 1),
    ((64, 64), 0, (1, 48, 6, 6), (70, 48, 1, 1), (1, 1), (0, 0), (1, 1), 1, 3, 1),
    # the padding bits at their limits: a 15-tap row and a 1-tap column, dilated, a pad wider than the input
    ((32, 32), 0, (1, 2, 5, 9), (4, 2, 1, 15), (1, 1), (2, 9), (1, 1), 1, 1, 0),
    ((64, 64), 1, (2, 3, 13, 6), (5, 3, 15, 2), (2, 1), (8, 1), (1, 3), 1, 2, 0),
    # wider than the bits: the shifts' test (VEC bit 2), unsplit and split, a 41-tap column as DeepSpeech2's
    ((32, 32), 0, (1, 2, 44, 9), (3, 2, 41, 3), (2, 1), (20, 1), (1, 1), 1, 1, 1),
    ((64, 64), 0, (1, 4, 9, 30), (6, 2, 3, 17), (1, 1), (1, 8), (1, 1), 2, 2, 0)]


def _conv_exprs(tile: tuple[int, int], prec: int, xs, ws, stride, pad, dil, group, splits: int) -> list[str]:
    """The offset table's kernel and the conv_tc instantiation the Conv binding launches for this convolution."""
    N, C, H, W = xs
    M, cg, KH, KW = ws
    OH = (H + 2 * pad[0] - dil[0] * (KH - 1) - 1) // stride[0] + 1
    OW = (W + 2 * pad[1] - dil[1] * (KW - 1) - 1) // stride[1] + 1
    R = cg * KH * KW
    direct = (KH, KW, *stride, *pad) == (1, 1, 1, 1, 0, 0) and (OH * OW) % 4 == 0
    vec = int(R % 4 == 0) | 2 * int(direct) | 4 * int(max(KH, KW) > 15)
    return ["conv_tc_offsets<256>", f"conv_tc<{tile[0]}, {tile[1]}, {prec}, {vec}, {int(splits > 1)}>"]


CONV_FAMILY = sorted({e for case in CONV_CASES for e in _conv_exprs(*case[:9])})


@pytest.mark.parametrize("tile,prec,xs,ws,stride,pad,dil,group,splits,res", CONV_CASES)
def test_conv_tc_matches_numpy_model_bit_for_bit(tile: tuple[int, int], prec: int, xs, ws, stride, pad, dil, group,
                                                 splits: int, res: int) -> None:
    """conv_tc against the GEMM model on numpy's im2col per group, then bias, the residual Z (res: FusedConvAdd's
    epilogue, added once after the splits' sum) and Relu in float32: bit for bit; and within the precision's error
    of float64. A split launch (in place: each tile's last block adds the splits) runs twice: its counters rearm."""
    rng = np.random.default_rng(sum(xs) + sum(ws) + splits)
    x = rng.uniform(-2, 2, xs).astype(np.float32)
    w = rng.uniform(-2, 2, ws).astype(np.float32)
    bias = rng.uniform(-1, 1, ws[0]).astype(np.float32)
    exact = _conv_ref(x, w, stride, pad, dil, group) + bias[None, :, None, None]
    z = rng.uniform(-4, 4, exact.shape).astype(np.float32)
    exact = exact + z if res else exact
    N, C, H, W = xs
    M, cg, KH, KW = ws
    OH, OW = exact.shape[2:]
    R, P, mg = cg * KH * KW, N * OH * OW, M // group
    exprs = _conv_exprs(tile, prec, xs, ws, stride, pad, dil, group, splits)
    mod = _shared_module(CONV_FAMILY, exprs)
    r_pad = -(-R // 16) * 16
    tab = np.full(4 * r_pad, -99, np.int32)
    mod.launch(exprs[0], grid=-(-r_pad // 256), block=256,
               args=[tab] + [np.int32(v) for v in (R, r_pad, H, W, KH, KW, *dil)])
    y = np.full(exact.shape, np.nan, np.float32)
    part = np.full(splits * M * P, np.nan, np.float32)
    grid = (-(-P // tile[1]), -(-mg // tile[0]), group * splits)
    arrivals = np.zeros(grid[0] * grid[1] * group, np.int32)
    ints = [N, C, H, W, M, OH, OW, *stride, *pad, KH, KW, *dil, R, group, 1, 1, splits]
    for run in range(2 if splits > 1 else 1):
        y[...] = np.nan
        mod.launch(exprs[1], grid=grid, block=tc_threads(*tile),
                   args=[x, w, bias, y, part, arrivals, tab] + [np.int32(v) for v in ints]
                   + [z if res else x, np.int32(res)])
        assert not arrivals.any()  # rearmed by each tile's last block
        want = np.zeros_like(y)
        for g in range(group):
            acc = tc_split_model(w[g * mg:(g + 1) * mg].reshape(mg, R), _im2col(x, KH, KW, stride, pad, dil, OH, OW, cg, g),
                                 prec, splits)
            acc = (acc + bias[g * mg:(g + 1) * mg, None]).astype(np.float32).reshape(mg, N, OH, OW).transpose(1, 0, 2, 3)
            if res:
                acc = (acc + z[:, g * mg:(g + 1) * mg]).astype(np.float32)
            want[:, g * mg:(g + 1) * mg] = np.maximum(acc, np.float32(0))
        assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), run
        err = np.abs(y - np.maximum(exact, 0)).max() / (1 + np.abs(exact).max())
        assert err < {0: 1e-6, 1: 2e-3, 2: 2e-2}[prec]


# ---- converted like every corpus kernel -------------------------------------------------------------------------
@pytest.mark.parametrize("op,variant,shape_index", [
    ("Gemm", "tc64x64_3xtf32", 2), ("MatMul", "tc32x32_3xtf32", 1), ("FusedConv", "tc128x64_tf32", 1),
    ("Conv", "tc64x64_3xtf32", 1), ("MatMul", "tc32x32_bf16", 1), ("Conv", "tc32x32_3xtf32", 6),
    ("MatMul", "tc128x64_3xtf32", 1), ("FusedMatMul", "tc32x32k2_3xtf32", 11), ("FusedConvAdd", "tc32x32k4_3xtf32", 6),
    ("FusedConvAdd", "tc64x64_3xtf32", 5)])
def test_converted_tensor_core_kernels_verify(tmp_path, tc_copy: Path, op: str, variant: str, shape_index: int) -> None:
    """rtransform verify (the converted rKernel on the persistent executor: fewer vEUs than rTasks, surplus
    threads, shuffled rTasks) reproduces the legacy kernel bit for bit at a corpus launch."""
    import yaml

    from kernel_corpus.bindings import registry
    from kernel_corpus.index import launch_spec
    from kernel_corpus.reference import shape_node
    from rtransform.verify import verify_file
    d = registry.op(op)
    node = shape_node(d, [s for s in d.shapes if s.test][shape_index], "n")
    source = tc_copy
    for k, launch in enumerate(registry.get(op, variant).launch(node)):
        spec = tmp_path / f"launch{k}.spec.yaml"
        spec.write_text(yaml.safe_dump(launch_spec(launch, node), sort_keys=False))
        res = verify_file(str(source), str(spec))
        assert res.ok and all(c.max_error == 0 for c in res.outputs), res.summary()


@pytest.mark.parametrize("kh,kw,window", [(15, 3, False), (3, 15, False), (16, 1, True), (1, 41, True)])
def test_conv_tc_takes_wide_windows_by_their_shifts(kh: int, kw: int, window: bool) -> None:
    """conv_tc's padding test holds a pixel's inside taps as bits, at most 15 per row and per column: a wider window
    (DeepSpeech2's 41 x 11) runs the instantiation that tests the table's shifts (VEC bit 2) instead."""
    from kernel_corpus.bindings import Shape, registry
    from kernel_corpus.reference import shape_node
    node = shape_node(registry.op("Conv"), Shape(((1, 4, 50, 50), (8, 4, kh, kw)), {"pads": [1, 1, 1, 1]}), "n")
    (main,) = [ln for ln in registry.get("Conv", "tc32x32_3xtf32").launch(node) if ln.kernel == "conv_tc"]
    assert bool(main.template_args[3] & 4) == window
