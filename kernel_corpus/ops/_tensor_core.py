"""What the GEMM and Conv bindings share about the tensor-core kernels of legacy/tc.cu: their precisions, tile
shapes, thread count, the work they really do (padded tiles, three products per step for 3xTF32), and split-K (the
k range of one output tile spread over several rTasks whose partial sums the tile's last rTask to arrive adds in a
fixed order, in the same launch, for the GEMM and the convolution alike)."""
from __future__ import annotations

import dataclasses

from kernel_corpus.bindings import Launch, Temp
from kernel_corpus.ops._common import SPLIT_REDUCE_BLOCK, cdiv, i32, linear_launch, require_split, temp

SOURCE = "tc.cu"
BK = 16  # k per pipeline stage
PREC_CODE = {"3xtf32": 0, "tf32": 1, "bf16": 2}  # tc.cu's PREC template argument
# Tensor-core products per multiply-add, in TF32-rate units (bf16 tensor cores run at twice the TF32 rate).
PRODUCTS = {"3xtf32": 3, "tf32": 1, "bf16": 0.5}
# TF32 tensor-core peak over the fp32 CUDA-core peak: 378 / 51 dense TFLOP/s on an H100 PCIe (the cost model's
# DeviceSpec); the cost model's roofline holds every kernel to its peak alike.
TF32_RATE = 378.0 / 51.0
TILES = ((32, 32, "fast"), (64, 64, "fast"), (128, 64, "efficient"))  # (BM, BN, kind)
WARP_TILE = 32  # tc.cu's TcShape: a warp owns half the tile in each dimension, at most 32 x 32 outputs
VEC_A, VEC_B = 1, 2  # tc.cu's VEC bits: the A (filter) / B (input) tiles may be copied 16 bytes at a time
VEC_WINDOW = 4  # conv_tc's VEC bit 2: a window wider than its padding bits hold (TC_TAP_MAX taps a side)
# Split-K variants per tile: the split factors offered (the cost model weighs their extra rTasks against the second
# launch and the partial sums' traffic); a split keeps at least SPLIT_MIN_K of K (4 stages: the pipeline's prologue
# stays a small part of it).
SPLITS = {(32, 32): (2, 4, 8, 16), (64, 64): (2, 4, 8)}


def arrivals(tiles: int, splits: int) -> tuple[Temp, list[Launch]]:
    """A split launch's arrival counters (one int32 per output tile; unsplit, 4 bytes never read) and the setup
    launch that zeroes them once (tc_arrivals_zero; each tile's last block rearms its counter)."""
    if splits == 1:
        return temp("arrivals", 4, "int32"), []
    counters = temp("arrivals", 4 * tiles, "int32")
    zero = linear_launch("tc_arrivals_zero", [], tiles, SPLIT_REDUCE_BLOCK, [counters, i32(tiles)], 0, 4 * tiles)
    return counters, [dataclasses.replace(zero, setup=True)]


def split_bytes(splits: int, outputs: int) -> int:
    """The partial sums' traffic of a split launch: each rTask writes its partial tile, the last one of each tile reads
    all of them back."""
    return 8 * splits * outputs if splits > 1 else 0


def threads(bm: int, bn: int) -> int:
    """Threads of a BM x BN tile's block, as tc.cu's TcShape arranges its warps (4 up to 64x64, 8 for 128x64)."""
    return 32 * (bm // min(bm // 2, WARP_TILE)) * (bn // min(bn // 2, WARP_TILE))


def tensor_core_flops(batch: int, M: int, N: int, K: int, bm: int, bn: int, precision: str) -> int:
    """Tensor-core FLOPs of a batch of M x N x K products as the kernel runs them: whole BM x BN tiles, K padded to
    BK (split-K splits are whole stages, so the same), and PRODUCTS[precision] products per multiply-add."""
    return int(2 * batch * cdiv(M, bm) * bm * cdiv(N, bn) * bn * cdiv(K, BK) * BK * PRODUCTS[precision])


def split_k(K: int, splits: int) -> None:
    """Refused when K is too short for `splits` splits of at least SPLIT_MIN_K (whole stages of BK each)."""
    require_split(K, splits, BK)


def variant(bm: int, bn: int, precision: str, splits: int) -> str:
    """A tensor-core binding's variant name: tile, split factor when split, precision last."""
    return f"tc{bm}x{bn}{f'k{splits}' if splits > 1 else ''}_{precision}"


def tile_variants() -> list[tuple[int, int, str, int]]:
    """(BM, BN, kind, splits) of every tensor-core binding of one op type and precision: each tile unsplit, then its
    split-K variants (the most efficient kind: more rTasks, a second launch)."""
    out = []
    for bm, bn, kind in TILES:
        out.append((bm, bn, kind, 1))
        out += [(bm, bn, "efficient", s) for s in SPLITS.get((bm, bn), ())]
    return out
