"""numpy references for the converter's feature kernels: file stem -> f(inputs by arg name) -> outputs by name.

Each function takes the launch spec's inputs (rtransform.spec.make_inputs) and returns the expected final
contents of every output buffer, written from what the kernel means, never from running it. Buffers a kernel
only partly writes keep their initial values elsewhere.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Arrays = dict[str, np.ndarray]
F32 = np.float32


def _blocks(values: np.ndarray, n: int, block: int, nblocks: int, pad: float = 0.0) -> np.ndarray:
    """The first n values laid out one row per block, padded where the grid overshoots n."""
    out = np.full(block * nblocks, pad, dtype=values.dtype)
    out[:n] = values[:n]
    return out.reshape(nblocks, block)


def _warp_masks(block: int) -> list[tuple[int, int]]:
    """(first thread, lane count) of each warp of a block."""
    return [(w, min(32, block - w)) for w in range(0, block, 32)]


def saxpy_bounds(a: dict) -> Arrays:
    return {"y": (a["a"] * a["x"] + a["y"]).astype(F32)}


def transpose_tile(a: dict) -> Arrays:
    rows, cols = int(a["rows"]), int(a["cols"])
    return {"out": np.ascontiguousarray(a["in"][: rows * cols].reshape(rows, cols).T).ravel()}


def mirror3d(a: dict) -> Arrays:
    W, H, D = int(a["W"]), int(a["H"]), int(a["D"])
    bx, by, bz = 4, 4, 2
    vol = a["in"][: W * H * D].reshape(D, H, W)
    grid = np.zeros((-(-D // bz) * bz, -(-H // by) * by, -(-W // bx) * bx), F32)
    grid[:D, :H, :W] = vol
    z, y, x = np.meshgrid(np.arange(D), np.arange(H), np.arange(W), indexing="ij")
    mz = z // bz * bz + (bz - 1 - z % bz)
    my = y // by * by + (by - 1 - y % by)
    mx = x // bx * bx + (bx - 1 - x % bx)
    return {"out": (vol - grid[mz, my, mx]).astype(F32).ravel()}


def shared_multi(a: dict) -> Arrays:
    n, nb = int(a["n"]), len(a["positives"])
    xs, ys = _blocks(a["x"], n, 16, nb), _blocks(a["y"], n, 16, nb)
    out = (xs[:, ::-1] * ys).ravel()[:n]
    return {"out": out.astype(F32), "positives": (xs > 0).sum(axis=1).astype(np.int32)}


def dyn_alias(a: dict) -> Arrays:
    n, nt = int(a["n"]), 64
    nb = -(-n // nt)
    f = _blocks(a["x"], n, nt, nb)
    ids = _blocks(3 * np.arange(n, dtype=np.int32), n, nt, nb, pad=-1)
    out = (f[:, ::-1] + ids[:, ::-1].astype(F32)).ravel()[:n]
    bits = f[:, ::-1].copy().view(np.int32).ravel()[:n]
    return {"out": out.astype(F32), "bits": bits}


def block_reduce(a: dict) -> Arrays:
    rows = len(a["sums"])
    x = a["x"][: rows * int(a["cols"])].reshape(rows, -1)
    return {"sums": x.astype(np.float64).sum(axis=1).astype(F32), "maxs": x.max(axis=1)}


def file_scope_shared(a: dict) -> Arrays:
    n, nt = int(a["n"]), 64
    xs = _blocks(a["x"], n, nt, -(-n // nt)).astype(np.float64)
    return {"out": np.cumsum(xs, axis=1).ravel()[:n].astype(F32)}


def macro_hidden(a: dict) -> Arrays:
    n, nt = int(a["n"]), 64
    xs = _blocks(a["in"], n, nt, -(-n // nt))
    return {"out": (2.0 * xs[:, ::-1]).astype(F32).ravel()[:n]}


def template_scale(a: dict) -> Arrays:
    n, nt = int(a["n"]), 32
    xs = _blocks(a["in"], n, nt, -(-n // nt))
    m = xs.max(axis=1, keepdims=True)
    out = (F32(a["alpha"]) * xs - m).astype(F32).ravel()[:n]
    return {"out": out}


def early_return(a: dict) -> Arrays:
    rows, cols = int(a["rows"]), int(a["cols"])
    x = a["in"][: rows * cols].reshape(rows, cols).astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    out = a["out"].copy()
    out[: rows * cols] = (e / e.sum(axis=1, keepdims=True)).ravel()
    return {"out": out}


def loop_barrier(a: dict) -> Arrays:
    n, nt, iters = int(a["n"]), 64, int(a["iters"])
    cur = _blocks(a["in"], n, nt, -(-n // nt)).copy()
    for b in range(cur.shape[0]):
        row = cur[b]
        for _ in range(iters + (b & 1)):
            left = np.concatenate([row[:1], row[:-1]])
            right = np.concatenate([row[1:], row[-1:]])
            row = (F32(0.25) * left + F32(0.5) * row + F32(0.25) * right).astype(F32)
        cur[b] = row
    return {"out": cur.ravel()[:n]}


def partial_warp_48(a: dict) -> Arrays:
    n, nt = int(a["n"]), 48
    xs = _blocks(a["x"], n, nt, -(-n // nt)).astype(np.float64)
    sums = np.zeros(len(a["warp_sums"]), F32)
    centred = np.zeros(xs.shape, np.float64)
    for b in range(xs.shape[0]):
        for w, (first, lanes) in enumerate(_warp_masks(nt)):
            total = xs[b, first:first + lanes].sum()
            sums[b * 2 + w] = total
            centred[b, first:first + lanes] = xs[b, first:first + lanes] - total
    return {"warp_sums": sums, "centred": centred.ravel()[:n].astype(F32)}


def vote_40(a: dict) -> Arrays:
    n, nt = int(a["n"]), 40
    nb = -(-n // nt)
    pred = _blocks((a["x"] > a["thr"]).astype(np.int64), n, nt, nb)
    valid = _blocks(np.ones(n, np.int64), n, nt, nb)
    ballots = np.zeros(nb * 2, np.uint32)
    anys, alls = np.zeros(nb * 2, np.int32), np.zeros(nb * 2, np.int32)
    for b in range(nb):
        for w, (first, lanes) in enumerate(_warp_masks(nt)):
            p = pred[b, first:first + lanes]
            ballots[b * 2 + w] = sum(int(v) << lane for lane, v in enumerate(p))
            anys[b * 2 + w] = int(p.any())
            alls[b * 2 + w] = int(valid[b, first:first + lanes].all())
    partner = pred.reshape(nb, -1, 2)[:, :, ::-1].reshape(nb, nt)
    pairs = (pred + 2 * partner).ravel()[:n].astype(np.int32)
    return {"ballots": ballots, "anys": anys, "alls": alls, "pairs": pairs}


def coop_groups(a: dict) -> Arrays:
    n, nb = int(a["n"]), len(a["sums"])
    xs = _blocks(a["x"], n, 96, nb).astype(np.float64)
    return {"sums": xs.sum(axis=1).astype(F32), "sumsq": (xs * xs).sum(axis=1).astype(F32)}


def sync_count(a: dict) -> Arrays:
    n, nb, thr = int(a["n"]), len(a["counts"]), F32(a["thr"])
    x = _blocks(a["x"], n, 64, nb)
    valid = _blocks(np.ones(n, bool), n, 64, nb)
    return {"counts": (valid & (x > thr)).sum(axis=1).astype(np.int32),
            "alls": valid.all(axis=1).astype(np.int32),
            "anys": (valid & (x > F32(3.0) * thr)).any(axis=1).astype(np.int32)}


def atomics(a: dict) -> Arrays:
    n, bins = int(a["n"]), int(a["bins"])
    hist = a["hist"] + np.bincount(a["keys"][:n] % bins, minlength=bins).astype(np.int32)
    total = a["total"] + F32(a["vals"][:n].astype(np.float64).sum())
    return {"hist": hist.astype(np.int32), "total": total.astype(F32)}


def ns_float4(a: dict) -> Arrays:
    rows, cols = int(a["rows"]), int(a["cols"])
    A = a["a"][: rows * cols].reshape(rows, cols).astype(np.float64)
    B = a["b"][: rows * cols].reshape(rows, cols).astype(np.float64)
    return {"out": (A * B).sum(axis=1).astype(F32)}


def host_mixed(a: dict) -> Arrays:
    return {"y": (a["y"] + a["a"] * a["x"]).astype(F32)}


def select_kernels(a: dict) -> Arrays:
    x = a["in"]
    return {"out": np.where(np.arange(len(x)) % 2 == 1, -x, x).astype(F32)}


def line_numbers(a: dict) -> Arrays:
    """The lines of the file's four `__LINE__`s (lane_line, after_clone, the kernel, after_kernel, in file
    order), stored by the kernel as: its own, lane_line's, after_clone's, after_kernel's."""
    from pathlib import Path
    text = (Path(__file__).parent / "line_numbers.cu").read_text().splitlines()
    found = [n for n, t in enumerate(text, 1) if "__LINE__" in t.split("//")[0]]
    assert len(found) == 4, found
    lane, clone, kernel, after = found
    return {"lines": np.array([kernel, lane, clone, after], dtype=np.int32)}


REFS: dict[str, Callable[[dict], Arrays]] = {
    "saxpy_bounds": saxpy_bounds, "transpose_tile": transpose_tile, "mirror3d": mirror3d,
    "shared_multi": shared_multi, "dyn_alias": dyn_alias, "block_reduce": block_reduce,
    "file_scope_shared": file_scope_shared, "macro_hidden": macro_hidden, "template_scale": template_scale,
    "early_return": early_return, "loop_barrier": loop_barrier, "partial_warp_48": partial_warp_48,
    "vote_40": vote_40, "coop_groups": coop_groups, "sync_count": sync_count, "atomics": atomics,
    "ns_float4": ns_float4, "host_mixed": host_mixed, "select_kernels": select_kernels,
    "line_numbers": line_numbers,
}
