"""What the GEMM and Conv bindings share about the tensor-core kernels of legacy/tc.cu: their precisions, tile
shapes, thread count and the work they really do (padded tiles, three products per step for 3xTF32)."""
from __future__ import annotations

from kernel_corpus.ops._common import cdiv

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


def threads(bm: int, bn: int) -> int:
    """Threads of a BM x BN tile's block, as tc.cu's TcShape arranges its warps (4 up to 64x64, 8 for 128x64)."""
    return 32 * (bm // min(bm // 2, WARP_TILE)) * (bn // min(bn // 2, WARP_TILE))


def tensor_core_flops(batch: int, M: int, N: int, K: int, bm: int, bn: int, precision: str) -> int:
    """Tensor-core FLOPs of a batch of M x N x K products as the kernel runs them: whole BM x BN tiles, K padded to
    BK, and PRODUCTS[precision] products per multiply-add."""
    return int(2 * batch * cdiv(M, bm) * bm * cdiv(N, bn) * bn * cdiv(K, BK) * BK * PRODUCTS[precision])
