"""numpy references for the real-code kernels: inputs (dict of arrays/scalars before the launch) -> outputs."""
from __future__ import annotations

import numpy as np


def scale(a):
    out = a["out"].copy()
    n = int(a["n"])
    out[:n] = a["in"][:n] * np.float32(a["s"])
    return {"out": out}


def tile_max(a):
    return {"out": a["in"].reshape(-1, 16).max(axis=1)}


def reverse_rows(a):
    return {"out": a["in"].reshape(4, 128)[:, ::-1].ravel()}


def gelu_forward(a):
    out = a["out"].copy()
    n = int(a["N"])
    x = a["inp"][:n].astype(np.float64)
    out[:n] = 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))
    return {"out": out}


def box_filter(a):
    rows = a["in"].reshape(-1, 8).astype(np.float64)
    return {"out": np.repeat(rows.mean(axis=1), 8)}


def sq(a):
    x = a["x"].copy()
    n = int(a["n"])
    x[:n] = x[:n] * x[:n]
    return {"x": x}


def fwd_helper(a):
    x = a["in"].reshape(4, 48).astype(np.float32)
    lane = np.arange(48, dtype=np.float32)
    blk = np.arange(4, dtype=np.float32)[:, None]
    return {"out": ((x + np.float32(0.5) * lane) * np.float32(3) + blk + np.roll(x, -1, axis=1)).ravel()}


def lambdas_mixed(a):
    x = a["in"].reshape(3, 64).astype(np.int64)
    stage = x + (np.arange(64) % 7)
    res = np.roll(stage, -3, axis=1)
    res = res * 100 + (x & 1).sum(axis=1, keepdims=True)
    res = res * 10 + (x > 40).any(axis=1, keepdims=True)
    res = res * 100 + ((x & 2) != 0).sum(axis=1, keepdims=True)
    return {"out": res.astype(np.int32).ravel()}


def group_sum(a):
    t = a["in"].reshape(3, 8, 16).astype(np.float64).sum(axis=2)
    return {"out": (t + np.roll(t, -1, axis=1)).ravel()}


def stage_swap(a):
    x = a["x"].reshape(3, 96).astype(np.float64)
    return {"x": (3 * x - x[:, ::-1]).ravel()}


def padded_tile(a):
    x = a["in"].reshape(3, 4, 16)
    return {"out": np.roll(x, -1, axis=1).ravel()}


def agg_filter(a):
    src = a["src"][:int(a["n"])]
    return {"count": np.array([(src > 0).sum()], np.int32)}


def tile_stats(a, tile=64):
    """wide_tiles/tile_stats.cu for tiles of `tile` threads (the case's spec: 64)."""
    v = a["in"].reshape(-1, tile).astype(np.float64)
    k = a["keys"].reshape(-1, tile).astype(np.int64)
    r = np.arange(tile)
    inc = np.cumsum(k, axis=1)
    # keep_odd folded over ranks 0 .. r-1 (rank 0 gets T() = 0): the last odd key among ranks 1 .. r-1, else rank 0's
    exc = np.zeros_like(k)
    exc[:, 1] = k[:, 0]
    for i in range(2, tile):
        exc[:, i] = np.where((k[:, i - 1] & 1) == 1, k[:, i - 1], exc[:, i - 1])
    scans = np.stack([inc, exc], axis=2).reshape(-1)
    rev = v[:, tile - 1 - r] + 2 * v[:, (r + 33) % tile]
    flags = k[:, tile - 1:] * 4 + (k > 97).any(axis=1, keepdims=True) * 2 + (k > 1).all(axis=1, keepdims=True)
    return {"sums": v.sum(axis=1), "maxes": k.max(axis=1), "scans": scans,
            "flags": np.broadcast_to(flags, k.shape).ravel(), "rev": rev.ravel()}


def tile_scans(a, tile=16, block=40):
    """tile_scans/tile_scans.cu: scans over tiles of `tile` block ranks (the last one partial when `tile` does not
    divide `block`)."""
    x = a["in"]
    acc = np.float64 if x.dtype.kind == "f" else np.int64
    out = {"inc": np.zeros(x.size, acc), "exc": np.zeros(x.size, acc), "run_max": np.zeros(x.size, acc)}
    for start in range(0, x.size, block):
        for t0 in range(start, start + block, tile):
            seg = x[t0:min(t0 + tile, start + block)].astype(acc)
            out["inc"][t0:t0 + seg.size] = np.cumsum(seg)
            out["exc"][t0:t0 + seg.size] = np.cumsum(seg) - seg
            out["run_max"][t0:t0 + seg.size] = np.maximum.accumulate(seg)
    return out


def row_sum(a):
    """header_reduce/row_sum.cu: rows of `n` columns, one per block."""
    n = int(a["n"])
    return {"out": a["in"].reshape(-1, n).astype(np.float64).sum(axis=1)}


def row_center(a):
    """header_reduce/row_center.cu: each row minus its maximum."""
    x = a["in"].reshape(-1, int(a["n"]))
    return {"out": (x - x.max(axis=1, keepdims=True)).ravel()}


def overload_sum(a):
    """cu_overloads/overload_sum.cu: per row of `n` columns, twice its sum then its sum."""
    s = a["in"].reshape(-1, int(a["n"])).astype(np.float64).sum(axis=1)
    return {"out": np.stack([2 * s, s], axis=1).ravel()}


def smooth_rows(a):
    """Two 3-point averages per block of 128 (zero outside the block's live part), as float32 in CUDA's order."""
    n, tile = int(a["n"]), 128
    x = a["in"][:n].astype(np.float32)
    out = a["out"].copy()
    third = np.float32(3.0)
    for lo in range(0, n, tile):
        seg = x[lo:lo + tile]
        last_in_tile = np.zeros(tile + 2, np.float32)
        last_in_tile[1:1 + len(seg)] = seg
        first = (last_in_tile[:-2] + last_in_tile[1:-1] + last_in_tile[2:]) / third
        pad = np.zeros(len(seg) + 2, np.float32)
        pad[1:-1] = first[:len(seg)]
        out[lo:lo + len(seg)] = (pad[:-2] + pad[1:-1] + pad[2:]) / third
    return {"out": out}


def reduce_kernels(a):
    """scan_blocks<int>, 128 threads: each block's inclusive prefix sums (zero past n) and its total."""
    n, bs = int(a["n"]), 128
    x = np.zeros(5 * bs, np.int64)
    x[:n] = a["in"][:n]
    scans = np.cumsum(x.reshape(5, bs), axis=1)
    return {"out": scans.ravel()[:n].astype(np.int32), "block_sums": scans[:, -1].astype(np.int32)}


def void_params(a):
    """number_threads over grid (2, 3, 2) x block (4, 4, 4): id * 100 + (thread within the block) % 32."""
    ids = np.arange(768)
    return {"out": (ids * 100 + (ids % 64) % 32).astype(np.int32)}


def saxpy_app(a):
    """saxpy over the first n elements, float32 as CUDA computes a * x + y (one rounding each)."""
    n, y = int(a["n"]), a["y"].copy()
    y[:n] = np.float32(a["a"]) * a["x"][:n] + a["y"][:n]
    return {"y": y}


def block_transpose(a):
    """transpose_16_long: out (cols x rows) = in (rows x cols) transposed."""
    rows, cols = int(a["rows"]), int(a["cols"])
    out = a["out"].copy()
    out[:rows * cols] = a["in"][:rows * cols].reshape(rows, cols).T.ravel()
    return {"out": out}


def block_tools(a):
    """center_rows<128>: each block of 128 (zero past n) minus its block's mean."""
    n = int(a["n"])
    x = np.zeros(4 * 128)
    x[:n] = a["in"][:n]
    blocks = x.reshape(4, 128)
    out = a["out"].copy()
    out[:n] = (blocks - blocks.mean(axis=1, keepdims=True)).ravel()[:n]
    return {"out": out}


def bfs_relax(a):
    n = int(a["n"])
    cost = a["cost"].astype(np.int64)
    nbr = a["nbr"].reshape(-1, 4)[:n]
    best = np.minimum(cost[:n], (cost[nbr] + 1).min(axis=1))
    nxt = a["next"].copy()
    nxt[:n] = best
    dropped = np.zeros(256, dtype=bool)
    dropped[:n] = best != cost[:n]
    return {"next": nxt, "changed": dropped.reshape(4, 64).sum(axis=1).astype(np.int32)}
