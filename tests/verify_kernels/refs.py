"""Independent numpy references for the verified kernels: REFS[name](inputs) -> {output name: expected}.

Each function reads the spec's inputs (the values before the launch) and computes, in numpy only, what the
legacy kernel must leave in its outputs. TOLERANCES gives the per-kernel bound on max |a-b| / (1 + |b|)
for the emulated legacy kernel against these references (0 = exact).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Inputs = dict[str, np.ndarray]
REFS: dict[str, Callable[[Inputs], dict[str, np.ndarray]]] = {}
TOLERANCES: dict[str, float] = {}
F32 = np.float32


def ref(name: str, tol: float = 1e-5):
    """Register a reference under the kernel file's name."""
    def deco(fn):
        REFS[name] = fn
        TOLERANCES[name] = tol
        return fn
    return deco


def segments(a: np.ndarray, size: int, pad=0) -> np.ndarray:
    """a split into rows of `size`, the last one padded with `pad`."""
    n = -(-len(a) // size) * size
    out = np.full(n, pad, dtype=a.dtype)
    out[:len(a)] = a
    return out.reshape(-1, size)


@ref("tiled_matmul", 1e-5)
def _matmul(i: Inputs):
    M, N, K = int(i["M"]), int(i["N"]), int(i["K"])
    a = i["A"].astype(np.float64).reshape(M, K)
    b = i["B"].astype(np.float64).reshape(K, N)
    return {"C": (a @ b).ravel()}


@ref("gemv_float4", 1e-5)
def _gemv(i: Inputs):
    a = i["A"].astype(np.float64).reshape(int(i["rows"]), int(i["cols"]))
    return {"y": a @ i["x"].astype(np.float64)}


@ref("softmax_rows", 1e-5)
def _softmax(i: Inputs):
    x = i["inp"].astype(np.float64).reshape(int(i["rows"]), int(i["cols"]))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"out": (e / e.sum(axis=1, keepdims=True)).ravel()}


@ref("layernorm", 1e-4)
def _layernorm(i: Inputs):
    N, C = int(i["N"]), int(i["C"])
    x = i["inp"].astype(np.float64).reshape(N, C)
    mean = x.mean(axis=1)
    rstd = 1.0 / np.sqrt(x.var(axis=1) + 1e-5)
    out = (x - mean[:, None]) * rstd[:, None] * i["weight"] + i["bias"]
    return {"out": out.ravel(), "mean": mean, "rstd": rstd}


@ref("block_reduce_sum", 1e-5)
def _row_stats(i: Inputs):
    x = i["x"].astype(np.float64).reshape(-1, int(i["cols"]))
    return {"sums": x.sum(axis=1), "sumsq": (x * x).sum(axis=1)}


@ref("scan_inclusive", 0)
def _scan_inclusive(i: Inputs):
    seg = segments(i["in"][:int(i["n"])], 128).astype(np.int64)
    scanned = np.cumsum(seg, axis=1)
    return {"out": scanned.ravel()[:int(i["n"])], "block_sums": scanned[:, -1]}


@ref("scan_exclusive", 0)
def _scan_exclusive(i: Inputs):
    seg = segments(i["g_idata"][:int(i["n"])], 128).astype(np.int64)
    inclusive = np.cumsum(seg, axis=1)
    return {"g_odata": (inclusive - seg).ravel()[:int(i["n"])], "g_sums": inclusive[:, -1]}


@ref("histogram_shared", 0)
def _histogram(i: Inputs):
    return {"hist": np.bincount(i["data"][:int(i["n"])], minlength=256)}


@ref("transpose_padded", 0)
def _transpose(i: Inputs):
    w, h = int(i["width"]), int(i["height"])
    return {"odata": i["idata"].reshape(h, w).T.ravel()}


@ref("stencil3d", 1e-5)
def _stencil(i: Inputs):
    nx, ny, nz = int(i["nx"]), int(i["ny"]), int(i["nz"])
    v = np.pad(i["in"].astype(np.float64).reshape(nz, ny, nx), 1)
    c = v[1:-1, 1:-1, 1:-1]
    nb = (v[1:-1, 1:-1, :-2] + v[1:-1, 1:-1, 2:] + v[1:-1, :-2, 1:-1] + v[1:-1, 2:, 1:-1]
          + v[:-2, 1:-1, 1:-1] + v[2:, 1:-1, 1:-1])
    return {"out": (float(i["c0"]) * c + float(i["c1"]) * nb).ravel()}


def conv2d_nchw(x: np.ndarray, w: np.ndarray, stride: int, pad: int, groups: int = 1) -> np.ndarray:
    """Plain cross-correlation, NCHW input, OIHW weights (I = C / groups)."""
    n, c, h, wd = x.shape
    oc, icg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, oc, oh, ow))
    per_group = oc // groups
    for o in range(oc):
        g = o // per_group
        for dy in range(kh):
            for dx in range(kw):
                patch = xp[:, g * icg:(g + 1) * icg, dy:dy + stride * oh:stride, dx:dx + stride * ow:stride]
                out[:, o] += np.tensordot(patch, w[o, :, dy, dx], axes=([1], [0]))
    return out


@ref("depthwise_conv", 1e-5)
def _depthwise(i: Inputs):
    n, c, h, w = (int(i[k]) for k in ("N", "C", "H", "W"))
    kh, kw = int(i["KH"]), int(i["KW"])
    x = i["input"].astype(np.float64).reshape(n, c, h, w)
    wt = i["weight"].astype(np.float64).reshape(c, 1, kh, kw)
    out = conv2d_nchw(x, wt, int(i["stride"]), int(i["pad"]), groups=c) + i["bias"].astype(np.float64)[None, :, None, None]
    return {"output": out.ravel()}


@ref("maxpool2d", 0)
def _maxpool(i: Inputs):
    H, W, OH, OW, K, S, P = (int(i[k]) for k in ("H", "W", "OH", "OW", "K", "S", "P"))
    x = i["in"].reshape(-1, H * W)
    out = np.zeros((len(x), OH, OW), np.float32)
    arg = np.zeros((len(x), OH, OW), np.int64)
    for oh in range(OH):
        for ow in range(OW):
            rows = [h for h in range(oh * S - P, oh * S - P + K) if 0 <= h < H]
            cols = [w for w in range(ow * S - P, ow * S - P + K) if 0 <= w < W]
            flat = np.array([h * W + w for h in rows for w in cols])
            vals = x[:, flat]
            out[:, oh, ow] = vals.max(axis=1)
            arg[:, oh, ow] = flat[vals.argmax(axis=1)]
    return {"out": out.ravel(), "argmax": arg.ravel()}


@ref("avgpool2d", 1e-6)
def _avgpool(i: Inputs):
    H, W, OH, OW, K, S = (int(i[k]) for k in ("H", "W", "OH", "OW", "K", "S"))
    x = i["in"].astype(np.float64).reshape(-1, H, W)
    out = np.zeros((len(x), OH, OW))
    for oh in range(OH):
        for ow in range(OW):
            out[:, oh, ow] = x[:, oh * S:min(oh * S + K, H), ow * S:min(ow * S + K, W)].mean(axis=(1, 2))
    return {"out": out.ravel()}


@ref("grid_stride_axpy", 1e-6)
def _saxpy(i: Inputs):
    return {"y": F32(i["a"]) * i["x"] + i["y"]}


@ref("early_return_rows", 1e-5)
def _early_return(i: Inputs):
    n, c = int(i["N"]), int(i["C"])
    sums = i["inp"].astype(np.float64)[:n * c].reshape(n, c).sum(axis=1)
    return {"row_sums": sums, "block_totals": segments(sums, 4).sum(axis=1)}


@ref("block48_rowsum", 1e-5)
def _rowsum48(i: Inputs):
    return {"out": i["x"].astype(np.float64).reshape(-1, int(i["cols"])).sum(axis=1)}


@ref("cg_reduce", 1e-5)
def _cg_reduce(i: Inputs):
    return {"out": i["x"].astype(np.float64).reshape(-1, int(i["cols"])).sum(axis=1)}


@ref("cg_tile_scan", 0)
def _cg_tile_scan(i: Inputs):
    n = int(i["n"])
    blocks = segments(i["in"][:n].astype(np.int64), 64)
    scanned = np.cumsum(blocks, axis=1)
    flags = (scanned.reshape(len(blocks), 4, 16) < 0).any(axis=2).astype(np.int64)
    return {"out": scanned.ravel()[:n], "tile_flags": flags.ravel()}


@ref("ballot_vote", 0)
def _ballot(i: Inputs):
    n = int(i["n"])
    pred = segments(i["x"][:n] > int(i["threshold"]), 32, pad=False)
    any_all = np.stack([pred.any(axis=1), pred.all(axis=1)], axis=1).astype(np.int64)
    return {"counts": pred.sum(axis=1), "any_all": any_all.ravel()}


@ref("syncthreads_count", 0)
def _block_votes(i: Inputs):
    n, th = int(i["n"]), int(i["threshold"])
    v = segments(i["x"][:n].astype(np.int64), 100)
    mag = np.abs(v).max(axis=1)
    rounds = np.array([int(m).bit_length() - 1 if m > 1 else 0 for m in mag])
    stats = np.stack([(v > th).sum(axis=1), (v > th).all(axis=1), (v > -th).any(axis=1), rounds], axis=1)
    return {"stats": stats.astype(np.int64).ravel()}


@ref("template_scale", 1e-12)
def _scale_add(i: Inputs):
    return {"y": float(i["alpha"]) * i["x"] + i["y"]}


@ref("macro_hidden", 0)
def _reverse(i: Inputs):
    n = int(i["n"])
    rev = segments(i["in"][:n], 96)[:, ::-1]
    return {"out": rev.ravel()[:n]}


@ref("launch_bounds_relu", 0)
def _bias_relu(i: Inputs):
    x = i["x"].reshape(int(i["rows"]), int(i["cols"])) + i["bias"]
    return {"y": np.maximum(x, F32(0)).ravel()}


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation, in float64."""
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


@ref("extern_c_gelu", 1e-5)
def _gelu(i: Inputs):
    return {"out": gelu_tanh(i["inp"].astype(np.float64))}


@ref("namespaced_silu", 1e-5)
def _silu(i: Inputs):
    x = i["x"].astype(np.float64)
    return {"y": x / (1 + np.exp(-x))}


@ref("half_storage", 1e-3)
def _half(i: Inputs):
    cols = int(i["cols"])
    x = i["x"].astype(np.float32).reshape(-1, cols)
    y = x * F32(i["scale"]) + i["bias"].astype(np.float32)
    return {"y": y.astype(np.float16).ravel()}


@ref("host_mix_bias_gelu", 1e-5)
def _bias_gelu(i: Inputs):
    x = i["out"].astype(np.float64).reshape(int(i["rows"]), int(i["cols"])) + i["bias"]
    return {"out": gelu_tanh(x).ravel()}


@ref("conv2d_direct", 1e-5)
def _conv2d(i: Inputs):
    ic, oc, h, w = (int(i[k]) for k in ("IC", "OC", "H", "W"))
    x = i["in"].astype(np.float64).reshape(-1, ic, h, w)
    wt = i["w"].astype(np.float64).reshape(oc, ic, 3, 3)
    return {"out": (conv2d_nchw(x, wt, 1, 1) + i["bias"][None, :, None, None]).ravel()}


@ref("batchnorm_infer", 1e-5)
def _batchnorm(i: Inputs):
    c, hw = int(i["C"]), int(i["HW"])
    x = i["x"].astype(np.float64).reshape(-1, c, hw)
    scale = i["gamma"] / np.sqrt(i["var"].astype(np.float64) + float(i["eps"]))
    y = (x - i["mean"][None, :, None]) * scale[None, :, None] + i["beta"][None, :, None]
    return {"y": y.ravel()}


@ref("argmax_rows", 0)
def _argmax(i: Inputs):
    x = i["x"].reshape(-1, int(i["cols"]))
    return {"idx_out": x.argmax(axis=1), "val_out": x.max(axis=1)}


@ref("embedding_gather", 0)
def _embedding(i: Inputs):
    dim, vocab = int(i["dim"]), int(i["vocab"])
    table = i["table"].reshape(-1, dim)[:vocab]
    ids = i["ids"][:int(i["n_ids"])]
    valid = (ids >= 0) & (ids < vocab)
    out = np.where(valid[:, None], table[np.clip(ids, 0, vocab - 1)], F32(0))
    return {"out": out.ravel()}


@ref("bitonic_sort", 0)
def _bitonic(i: Inputs):
    n = int(i["n"])
    s = np.sort(segments(i["data"][:n], 128, pad=np.inf), axis=1)
    return {"data": s.ravel()[:n]}


@ref("quantize_int8", 0)
def _quantize(i: Inputs):
    x = i["x"].reshape(-1, int(i["cols"]))
    absmax = np.abs(x).max(axis=1)
    scale = np.where(absmax > 0, absmax / F32(127), F32(1)).astype(np.float32)
    v = x / scale[:, None]                                 # float32 division, as on the device
    r = np.sign(v) * np.floor(np.abs(v).astype(np.float64) + 0.5)   # roundf: half away from zero
    return {"q": np.clip(r, -127, 127).astype(np.int8).ravel(), "scales": scale}


@ref("shared_memory_reduce", 0)
def _reduce6(i: Inputs):
    n, blocks, bs = int(i["n"]), 4, 64
    idx = np.arange(n)
    owner = (idx % (bs * blocks)) // bs                    # the non-power-of-two grid-stride walk
    return {"g_odata": np.bincount(owner, weights=i["g_idata"][:n].astype(np.float64), minlength=blocks)}


@ref("dot_atomic", 1e-5)
def _dot(i: Inputs):
    return {"result": np.array([np.dot(i["a"].astype(np.float64), i["b"].astype(np.float64))])}


@ref("lstm_cell", 1e-5)
def _lstm(i: Inputs):
    b, hd = int(i["batch"]), int(i["hidden"])
    g = i["gates"].astype(np.float64).reshape(b, 4, hd)
    sig = lambda v: 1 / (1 + np.exp(-v))
    c = sig(g[:, 1]) * i["c_prev"].reshape(b, hd) + sig(g[:, 0]) * np.tanh(g[:, 3])
    return {"h": (sig(g[:, 2]) * np.tanh(c)).ravel(), "c": c.ravel()}


@ref("im2col", 0)
def _im2col(i: Inputs):
    h, w, k, p, s = int(i["height"]), int(i["width"]), int(i["kernel_h"]), int(i["pad_h"]), int(i["stride_h"])
    hc, wc = int(i["height_col"]), int(i["width_col"])
    x = np.pad(i["data_im"].reshape(-1, h, w), ((0, 0), (p, p), (p, p)))
    cols = [x[:, dy:dy + s * hc:s, dx:dx + s * wc:s] for dy in range(k) for dx in range(k)]
    return {"data_col": np.stack(cols, axis=1).reshape(-1)}


@ref("rows2d_shfl", 1e-5)
def _rows2d_shfl(i: Inputs):
    x = i["x"].astype(np.float64).reshape(20, 32)
    lanes = np.tile(np.arange(32) + 100 * (np.arange(20)[:, None] % 4), 1)
    return {"row_sums": (x * (1.0 + np.arange(32))).sum(axis=1), "lanes": lanes.ravel()}


@ref("ballot3d", 0)
def _ballot3d(i: Inputs):
    bits = (i["v"] > int(i["threshold"])).reshape(12, 32).astype(np.uint64)
    return {"masks": (bits << np.arange(32, dtype=np.uint64)).sum(axis=1)}
