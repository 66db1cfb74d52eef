"""CPU emulator of CUDA (cuda_emu/include/cuda_emu.h + cuda_emu/module.py) against numpy references."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from cuda_emu import CpuModule, EmuCompileError, EmuError, rewrite_shared
from vdevice import RUNTIME_INCLUDE

KERNELS = Path(__file__).resolve().parent / "emu_kernels"


def module(name: str, kernels: list[str], **kw) -> CpuModule:
    """Builds tests/emu_kernels/<name> for the given kernel expressions."""
    path = KERNELS / name
    kw.setdefault("include_dirs", [str(KERNELS)])
    return CpuModule(path.read_text(), kernels, name=str(path), **kw)


def blocks_of(n: int, b: int) -> int:
    """Blocks of b threads covering n items."""
    return (n + b - 1) // b


@pytest.fixture(scope="module", params=[None, "all"], ids=["plain", "sanitized"])
def blocks(request):
    return module("blocks.cu", ["block_sum<64, float>", "block_sum<128, double>", "block_sum<32, int>",
                                "warp_reduce", "shuffles", "votes", "sync_reductions", "early_return",
                                "indices", "box3x3<8>", "barrier_loop", "hello"], sanitize=request.param)


@pytest.fixture(scope="module", params=[None, "all"], ids=["plain", "sanitized"])
def memory(request):
    return module("memory.cu", ["histogram", "global_atomics", "spin_lock", "dyn_alias", "dyn_scan<float>",
                                "dyn_scan<int>", "decl_forms", "half_ops", "to_half", "to_bf16",
                                "half_scale"], sanitize=request.param)


@pytest.fixture(scope="module", params=[None, "all"], ids=["plain", "sanitized"])
def groups(request):
    return module("groups.cu", ["cg_block_sum", "cg_tiles8"], sanitize=request.param)


@pytest.fixture(scope="module")
def failures():
    return module("failures.cu", ["deadlock_mixed", "deadlock_branch", "flag_chain", "spin_on_flag", "spin_no_yield",
                                  "null_write", "stack_hog", "huge_frame", "failing_assert", "int_div",
                                  "throws", "dyn_overflow"])


@pytest.fixture(scope="module", params=[None, "all"], ids=["plain", "sanitized"])
def rtask(request):
    return module("rtask.cu", ["seg_sum<64>", "seg_sum_veu<64>", "partial_reduce"],
                  include_dirs=[str(KERNELS), str(RUNTIME_INCLUDE)], sanitize=request.param)


# ---------------------------------------------------------------------------------------------------------
# barriers, templates, indices
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel,b,dtype,n,grid", [
    ("block_sum<64, float>", 64, np.float32, 1000, 4),
    ("block_sum<64, float>", 64, np.float32, 37, 1),
    ("block_sum<128, double>", 128, np.float64, 5000, 3),
    ("block_sum<32, int>", 32, np.int32, 777, 5),
])
def test_block_reduce_with_barriers_in_a_loop(blocks, kernel, b, dtype, n, grid):
    rng = np.random.default_rng(n)
    x = (rng.integers(-50, 50, n) if dtype == np.int32 else rng.standard_normal(n)).astype(dtype)
    out = np.zeros(grid, dtype)
    blocks.launch(kernel, grid, b, 0, [out, x, np.int32(n)])
    ref = [x[np.arange(n) % (b * grid) // b == k].sum() for k in range(grid)]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("block,n", [(48, 48 * 5 - 7), (48, 48), (96, 300), (17, 40)])
def test_warp_shuffle_reduce_with_partial_warp(blocks, block, n):
    x = np.random.default_rng(block).standard_normal(n).astype(np.float32)
    grid = blocks_of(n, block)
    out = np.zeros(grid, np.float32)
    blocks.launch("warp_reduce", grid, block, 0, [out, x, np.int32(n)])
    ref = [x[k * block:(k + 1) * block].sum() for k in range(grid)]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def shuffle_reference(n: int, src: int, delta: int, width: int) -> np.ndarray:
    """What CUDA documents for __shfl*_sync with a width, lane by lane (warps of 32 in a block of n)."""
    v = np.arange(n) * 10 + 1
    res = np.zeros((5, n), np.int64)
    for t in range(n):
        base, lane = t // 32 * 32, t % 32
        seg = lane // width * width
        res[0, t] = v[base + seg + src % width]
        res[1, t] = v[t - delta] if lane - seg >= delta else v[t]
        res[2, t] = v[t + delta] if lane - seg + delta < width else v[t]
        j = lane ^ delta
        res[3, t] = v[base + j] if j < seg + width else v[t]   # later groups give the own value
        res[4, t] = 2 * v[base + (lane ^ 1)] + 1
    return res


@pytest.mark.parametrize("src,delta,width", [(5, 3, 32), (37, 1, 16), (2, 4, 8), (0, 6, 4), (3, 16, 32),
                                             (1, 12, 8)])
def test_shuffle_variants_and_widths(blocks, src, delta, width):
    n = 64
    out = np.zeros((5, n), np.int32)
    blocks.launch("shuffles", 1, n, 0, [out, np.int32(src), np.int32(delta), np.int32(width)])
    np.testing.assert_array_equal(out, shuffle_reference(n, src, delta, width))


def test_ballot_any_all_match_reduce(blocks):
    n = 64
    rng = np.random.default_rng(3)
    pred = (rng.random(n) < 0.4).astype(np.int32)
    pred[32:] = 1                      # second warp: all true
    key = rng.integers(0, 4, n).astype(np.int32)
    out = np.zeros((6, n), np.uint32)
    blocks.launch("votes", 1, n, 0, [out, pred, key])
    for w in range(2):
        lanes = slice(32 * w, 32 * w + 32)
        p, k = pred[lanes], key[lanes]
        ballot = sum(1 << i for i in range(32) if p[i])
        assert (out[0, lanes] == ballot).all()
        assert (out[1, lanes] == int(p.any())).all()
        assert (out[2, lanes] == int(p.all())).all()
        match = [sum(1 << j for j in range(32) if k[j] == k[i]) for i in range(32)]
        assert (out[3, lanes] == match).all()
        assert (out[4, lanes] == k.sum()).all()
        assert (out[5, lanes].view(np.int32) == (k - 50).max()).all()


@pytest.mark.parametrize("block", [(8, 6), (32, 1), (7, 3)])
def test_syncthreads_count_and_or(blocks, block):
    nt, nb = block[0] * block[1], 4
    pred = (np.random.default_rng(nt).random((nb, nt)) < 0.5).astype(np.int32)
    pred[1] = 1
    pred[2] = 0
    out = np.zeros((nb, 4), np.int32)
    blocks.launch("sync_reductions", nb, block, 0, [out, pred])
    ref = np.stack([pred.sum(1), pred.all(1), pred.any(1), (1 - pred).sum(1)], 1)
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("block,n", [(64, 100), (256, 1000), (33, 33 * 3 + 1)])
def test_early_return_before_barriers(blocks, block, n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    blocks.launch("early_return", blocks_of(n, block), block, 0, [y, x, np.int32(n)])
    ref = np.concatenate([np.roll(x[s:s + block], 1) + x[s:s + block] for s in range(0, n, block)])
    np.testing.assert_allclose(y, ref, rtol=1e-6)


@pytest.mark.parametrize("grid,block", [((3, 2, 2), (4, 3, 2)), ((2, 3), (5, 7)), (5, 33), ((1, 1, 3), (2, 2, 4))])
def test_multi_dimensional_blocks_and_grids(blocks, grid, block):
    g = (tuple(grid) + (1, 1))[:3] if not isinstance(grid, int) else (grid, 1, 1)
    b = (tuple(block) + (1, 1))[:3] if not isinstance(block, int) else (block, 1, 1)
    nt, nb = np.prod(b), np.prod(g)
    out = np.full((nb, nt, 6), -1, np.int32)
    blocks.launch("indices", grid, block, 0, [out])
    bz, by, bx = np.meshgrid(*(np.arange(d) for d in g[::-1]), indexing="ij")
    tz, ty, tx = np.meshgrid(*(np.arange(d) for d in b[::-1]), indexing="ij")
    for k, (x, y, z) in enumerate(zip(bx.ravel(), by.ravel(), bz.ravel())):
        np.testing.assert_array_equal(out[k, :, :3], np.stack([tx.ravel(), ty.ravel(), tz.ravel()], 1))
        np.testing.assert_array_equal(out[k, :, 3:], np.tile([x, y, z], (nt, 1)))


@pytest.mark.parametrize("rows,cols", [(8, 8), (13, 21), (30, 5)])
def test_box_filter_2d_tiles_with_halo(blocks, rows, cols):
    a = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    out = np.zeros((rows, cols), np.float32)
    blocks.launch("box3x3<8>", (blocks_of(cols, 8), blocks_of(rows, 8)), (8, 8), 0,
                  [out, a, np.int32(rows), np.int32(cols)])
    p = np.pad(a, 1)
    ref = sum(p[dr:dr + rows, dc:dc + cols] for dr in range(3) for dc in range(3))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_barrier_cost_is_linear(blocks, record_property):
    """256 threads x 100 and x 400 barriers: the count is right and the fiber switches grow linearly with the
    barriers (the times are recorded as properties, never asserted: the machine is shared)."""
    out = np.zeros(256, np.int32)
    times = {}
    for nbar in (100, 400):
        t0 = time.perf_counter()
        blocks.launch("barrier_loop", 1, 256, 0, [out, np.int32(nbar)])
        times[nbar] = time.perf_counter() - t0
        assert (out == nbar).all()
        assert blocks.last_stats.switches >= 255 * (nbar + 1)   # the last arrival continues without a switch
    per_switch = blocks.last_stats.seconds / blocks.last_stats.switches
    record_property("barrier_100_x_256_seconds", times[100])
    record_property("seconds_per_switch", per_switch)


def test_device_printf(blocks, capfd):
    blocks.launch("hello", 2, 3, 0, [np.int32(7)])
    lines = capfd.readouterr().out.splitlines()
    assert lines == [f"tag 7 block {b} thread {t}" for b in range(2) for t in range(3)]


# ---------------------------------------------------------------------------------------------------------
# memory: atomics, shared memory forms, 16-bit floats
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,nbins,grid,block", [(5000, 64, 4, 128), (333, 7, 2, 32), (10, 3, 1, 64)])
def test_shared_atomics_histogram(memory, n, nbins, grid, block):
    rng = np.random.default_rng(n)
    bins = rng.integers(0, nbins, n).astype(np.int32)
    w = rng.random(n).astype(np.float32)
    hist, ws = np.zeros(nbins, np.int32), np.zeros(nbins, np.float32)
    memory.launch("histogram", grid, block, 0, [hist, ws, bins, w, np.int32(n), np.int32(nbins)])
    np.testing.assert_array_equal(hist, np.bincount(bins, minlength=nbins))
    np.testing.assert_allclose(ws, np.bincount(bins, w, minlength=nbins), rtol=1e-4)


@pytest.mark.parametrize("n,block", [(1000, 128), (31, 64)])
def test_global_atomics(memory, n, block):
    x = np.random.default_rng(n).integers(0, 1000, n).astype(np.int32)
    ires = np.array([0, 0, -1, 10**6, 0], np.int32)
    ures = np.array([0, 0xFFFFFFFF, 0, 0], np.uint32)
    ull, dsum = np.zeros(1, np.uint64), np.zeros(1, np.float64)
    memory.launch("global_atomics", blocks_of(n, block), block, 0, [ires, ures, ull, dsum, x, np.int32(n)])
    bits = np.bitwise_or.reduce(np.uint32(1) << (x & 31).astype(np.uint32))
    assert list(ires) == [x.sum(), -x.sum(), x.max(), x.min(), 3 * x.max()]
    assert list(ures) == [bits, 0xFFFFFFFF & ~bits, np.bitwise_xor.reduce(x.astype(np.uint32)), n % 8]
    assert int(ull[0]) == int(x.astype(object).sum() * 1000000007) % 2**64
    assert dsum[0] == pytest.approx(x.sum() * 0.25)


def test_spin_lock_with_cas(memory):
    lock, counter = np.zeros(1, np.int32), np.zeros(1, np.int32)
    memory.launch("spin_lock", 1, 48, 0, [lock, counter, np.int32(5)])
    assert counter[0] == 48 * 5 and lock[0] == 0


@pytest.mark.parametrize("cooperative", [False, True])
@pytest.mark.parametrize("block,grid", [(64, 3), (32, 2)])
def test_dynamic_shared_two_extern_arrays_alias(memory, block, grid, cooperative):
    n = block * grid - 5
    x = np.random.default_rng(block).standard_normal(n).astype(np.float32)
    out_f, out_i = np.zeros(block * grid, np.float32), np.zeros(block * grid, np.int32)
    memory.launch("dyn_alias", grid, block, block * 4, [out_f, out_i, x, np.int32(n)], cooperative=cooperative)
    xp = np.concatenate([x, np.zeros(5, np.float32)]).reshape(grid, block)
    np.testing.assert_array_equal(out_f.reshape(grid, block), xp[:, ::-1])
    np.testing.assert_array_equal(out_i, xp.ravel().view(np.int32))


@pytest.mark.parametrize("kernel,dtype,block,n", [("dyn_scan<float>", np.float32, 128, 100),
                                                  ("dyn_scan<int>", np.int32, 64, 64)])
def test_shared_memory_helper_struct(memory, kernel, dtype, block, n):
    x = np.random.default_rng(n).integers(-9, 9, n).astype(dtype)
    out = np.zeros(n, dtype)
    memory.launch(kernel, 1, block, block * np.dtype(dtype).itemsize, [out, x, np.int32(n)])
    np.testing.assert_array_equal(out, np.cumsum(x).astype(dtype))


@pytest.mark.parametrize("cooperative", [False, True])
def test_shared_declaration_forms_are_per_block(memory, cooperative):
    nb = 5
    out, out_i = np.zeros(nb * 32, np.float32), np.zeros(nb * 2, np.int32)
    memory.launch("decl_forms", nb, 32, 0, [out, out_i], cooperative=cooperative)
    t = np.arange(32)
    ref = np.concatenate([(31 - t) + 2 * t + 0.5 * b for b in range(nb)])
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(out_i.reshape(nb, 2), np.tile([t.sum(), 32], (nb, 1)))


def test_half_arithmetic(memory):
    n = 300
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(n) * 4).astype(np.float16), (rng.standard_normal(n) * 4).astype(np.float16)
    y, yf = np.zeros(n, np.float16), np.zeros(n, np.float32)
    memory.launch("half_ops", blocks_of(n, 64), 64, 0, [y, yf, a, b, np.int32(n)])
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    s = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(y, np.float32(a64 * b64 + s).astype(np.float16))
    qa = (a.astype(np.float32) ** 2).astype(np.float16).astype(np.float32)
    qb = (b.astype(np.float32) ** 2).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(yf, qa + qb)


def test_scalar_parameters_convert_to_the_parameter_type(memory):
    n = 70
    x = np.random.default_rng(2).standard_normal(n).astype(np.float16)
    y, z = np.zeros(n, np.float16), np.zeros(n, np.float32)
    # __half from np.float16, float from np.float64, int from a Python int, bool from a Python bool
    memory.launch("half_scale", 2, 64, 0, [y, z, x, np.float16(1.5), np.float64(0.1), n, True])
    np.testing.assert_array_equal(y, -(x.astype(np.float32) * np.float32(1.5)).astype(np.float16))
    np.testing.assert_array_equal(z, x.astype(np.float32) * np.float32(0.1))


def special_floats(rng) -> np.ndarray:
    """Values that exercise rounding: ties, subnormals of both formats, overflow, inf, nan."""
    base = [0.0, -0.0, 1.0, 65504.0, 65519.0, 65520.0, 1e6, -1e6, 6e-8, 3e-8, 2.98e-8, 1e-9, 6.1e-5,
            np.inf, -np.inf, np.nan, 1.00048828125, 1.00146484375, 3.14159, 1e-40, 3.4e38]
    rand = rng.standard_normal(2000) * 10.0 ** rng.integers(-9, 6, 2000)
    return np.concatenate([base, rand]).astype(np.float32)


def test_float_to_half_rounding(memory):
    x = special_floats(np.random.default_rng(5))
    h = np.zeros(len(x), np.uint16)
    memory.launch("to_half", blocks_of(len(x), 128), 128, 0, [h, x, np.int32(len(x))])
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(h[~nan], ref[~nan])
    assert np.isnan(h[nan].view(np.float16)).all()


def bf16_reference(x: np.ndarray) -> np.ndarray:
    """Nearest bfloat16 of each float32, chosen by comparing the two neighbours in float64 (ties to even)."""
    out = np.zeros(len(x), np.uint16)
    for k, v in enumerate(x.astype(np.float32)):
        u = int(v.view(np.uint32))
        lo, hi = u >> 16, (u >> 16) + 1
        if u & 0xFFFF == 0 or np.isnan(v):   # exact (zeros, infinities too); NaNs are checked apart
            out[k] = lo
            continue
        vlo = float(np.uint32(lo << 16).view(np.float32))
        # rounding up past the largest finite value means infinity: compare against 2^128 instead
        vhi = math.copysign(2.0**128, v) if (hi & 0x7F80) == 0x7F80 else float(np.uint32(hi << 16).view(np.float32))
        dlo, dhi = abs(float(v) - vlo), abs(vhi - float(v))
        out[k] = lo if dlo < dhi or (dlo == dhi and lo % 2 == 0) else hi
    return out


def test_float_to_bfloat16_rounding(memory):
    x = special_floats(np.random.default_rng(6))
    h = np.zeros(len(x), np.uint16)
    memory.launch("to_bf16", blocks_of(len(x), 128), 128, 0, [h, x, np.int32(len(x))])
    nan = np.isnan(x)
    np.testing.assert_array_equal(h[~nan], bf16_reference(x)[~nan])
    assert ((h[nan] & 0x7F80) == 0x7F80).all() and (h[nan] & 0x7F).all()


# ---------------------------------------------------------------------------------------------------------
# cooperative groups
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("block,n", [(128, 1000), (48, 48 * 3 - 10), (256, 256)])
def test_cg_block_tile_reduce(groups, block, n):
    x = np.random.default_rng(block).standard_normal(n).astype(np.float32)
    grid, ntiles = blocks_of(n, block), blocks_of(block, 32)
    out, tmax = np.zeros(grid, np.float32), np.zeros(grid * ntiles, np.float32)
    groups.launch("cg_block_sum", grid, block, 0, [out, tmax, x, np.int32(n)])
    xp = np.concatenate([x, np.zeros(grid * block - n, np.float32)]).reshape(grid, block)
    np.testing.assert_allclose(out, xp.sum(1), rtol=1e-5, atol=1e-5)
    ref_max = [xp[g, t * 32:min(block, t * 32 + 32)].max() for g in range(grid) for t in range(ntiles)]
    np.testing.assert_array_equal(tmax, ref_max)


@pytest.mark.parametrize("block", [(8, 4), (16, 6)])
def test_cg_tiles_of_eight(groups, block):
    nt = block[0] * block[1]
    x = np.random.default_rng(nt).integers(0, 100, nt).astype(np.int32)
    out = np.zeros((8, nt), np.int32)
    groups.launch("cg_tiles8", 1, block, 0, [out, x])
    r = np.arange(nt)
    base, lane = r // 8 * 8, r % 8
    tiles = x.reshape(-1, 8)
    np.testing.assert_array_equal(out[0], x[base + 3])
    np.testing.assert_array_equal(out[1], np.where(lane + 2 < 8, x[np.minimum(r + 2, nt - 1)], x))
    np.testing.assert_array_equal(out[2], x[base + (lane ^ 5)])
    ballots = [sum(1 << i for i in range(8) if t[i] % 2) for t in tiles]
    np.testing.assert_array_equal(out[3], np.repeat(ballots, 8))
    anyall = [2 * (t > 90).any() + (t > 5).all() for t in tiles]
    np.testing.assert_array_equal(out[4], np.repeat(anyall, 8))
    np.testing.assert_array_equal(out[5], np.repeat(tiles.min(1), 8))
    np.testing.assert_array_equal(out[6], r // 8 * 100 + lane)
    np.testing.assert_array_equal(out[7], r % block[0] + 10 * (r // block[0]) + 1000 * block[1])


# ---------------------------------------------------------------------------------------------------------
# errors: deadlock, watchdog, cooperative polling, faults, bad launches
# ---------------------------------------------------------------------------------------------------------
def test_deadlock_names_threads_and_waits(failures):
    with pytest.raises(EmuError) as e:  # found as a deadlock at once, not by the watchdog's yield budget
        failures.launch("deadlock_mixed", 1, 64, 0, [np.zeros(64, np.int32)])
    msg = str(e.value)
    assert "watchdog" not in msg
    assert "deadlock" in msg and "block (0,0,0)" in msg
    assert "33 threads (linear 0-32) wait at __syncthreads" in msg
    assert "31 threads (linear 33-63) wait at __shfl_sync mask 0xffffffff" in msg


@pytest.mark.parametrize("k", [5, 20, 45])
def test_deadlock_barrier_in_branch(failures, k):
    out = np.zeros(64, np.uint32)
    with pytest.raises(EmuError) as e:
        failures.launch("deadlock_branch", (2, 1), 64, 0, [out, np.int32(k)])
    msg = str(e.value)
    assert "deadlock" in msg and "block (0,0,0)" in msg and "__ballot_sync" in msg
    assert f"{64 - k} threads" in msg and "__syncthreads" in msg


def test_deadlock_free_when_the_warp_exits(failures):
    """k = 32: the ballot warp is complete, its threads exit, and the barrier then counts only the others."""
    out = np.zeros(64, np.uint32)
    failures.launch("deadlock_branch", 1, 64, 0, [out, np.int32(32)])
    assert (out[:32] == 0xFFFFFFFF).all()


@pytest.mark.parametrize("nb", [2, 5])
def test_cooperative_blocks_poll_each_other(failures, nb):
    flags, order, counter = np.zeros(nb, np.int32), np.full(nb, -1, np.int32), np.zeros(1, np.int32)
    failures.launch("flag_chain", nb, 32, 0, [flags, order, counter], cooperative=True)
    np.testing.assert_array_equal(order, np.arange(nb)[::-1])
    assert failures.last_stats.yields > 0


def test_plain_launch_of_polling_blocks_ends_in_watchdog(failures):
    flags, order, counter = np.zeros(3, np.int32), np.full(3, -1, np.int32), np.zeros(1, np.int32)
    with pytest.raises(EmuError) as e:
        failures.launch("flag_chain", 3, 32, 0, [flags, order, counter], yield_budget=200_000)
    msg = str(e.value)
    assert msg.startswith("flag_chain: watchdog: 200000 yields")
    assert "block (0,0,0) thread (0,0,0) polls at" in msg and "31 threads (linear 1-31) wait at __syncthreads" in msg


@pytest.mark.parametrize("cooperative", [True, False])
def test_block_spins_on_flag_from_other_block(failures, cooperative):
    flag, seen = np.zeros(1, np.int32), np.zeros(1, np.int32)
    failures.launch("spin_on_flag", 2, 32, 0, [flag, seen], cooperative=cooperative)
    assert seen[0] == 42


@pytest.mark.parametrize("cooperative", [False, True])
def test_spin_without_yield_ends_in_stall_error(failures, cooperative):
    with pytest.raises(EmuError, match=r"stall: block \(0,0,0\) thread \(0,0,0\) ran [0-9.]+ s without reaching"):
        failures.launch("spin_no_yield", 2, 1, 0, [np.zeros(1, np.int32)], cooperative=cooperative,
                        stall_timeout=0.5)
    flag = np.ones(1, np.int32)       # already set: no spin, and the disarmed timer leaves later launches alone
    failures.launch("spin_no_yield", 2, 1, 0, [flag], stall_timeout=0.5)


@pytest.mark.parametrize("cooperative", [False, True])
def test_dynamic_shared_out_of_bounds_faults(failures, cooperative):
    out = np.zeros(64, np.float32)
    failures.launch("dyn_overflow", 2, 64, 64 * 4, [out, np.int32(0)], cooperative=cooperative)
    np.testing.assert_array_equal(out, np.arange(64))
    with pytest.raises(EmuError, match=r"dynamic shared memory access out of bounds: byte offset (\d+) of a "
                                       r"256-byte launch") as e:
        failures.launch("dyn_overflow", 2, 64, 64 * 4, [out, np.int32(64)], cooperative=cooperative)
    assert 256 <= int(e.value.args[0].split("byte offset ")[1].split()[0]) < 512
    with pytest.raises(EmuError, match=r"byte offset 0 of a 0-byte launch"):
        failures.launch("dyn_overflow", 1, 8, 0, [out, np.int32(0)], cooperative=cooperative)


def test_faults_end_the_launch_not_the_process(failures):
    with pytest.raises(EmuError, match=r"block \(0,0,0\) thread \(3,0,0\): segmentation fault at address"):
        failures.launch("null_write", 1, 8, 0, [None])
    with pytest.raises(EmuError, match="stack overflow"):
        failures.launch("stack_hog", 1, 4, 0, [np.zeros(4, np.int32), np.int32(64)])
    with pytest.raises(EmuError, match="stack overflow"):
        failures.launch("huge_frame", 1, 4, 0, [np.zeros(4, np.int32), np.int32(199999)])
    with pytest.raises(EmuError, match=r"thread \(2,0,0\): assertion 'x\[threadIdx.x\] >= 0' failed"):
        failures.launch("failing_assert", 1, 4, 0, [np.array([1, 2, -3, 4], np.int32)])
    with pytest.raises(EmuError, match="arithmetic exception"):
        failures.launch("int_div", 1, 4, 0, [np.zeros(4, np.int32), np.array([1, 2, 0, 4], np.int32)])
    with pytest.raises(EmuError, match=r"thread \(1,0,0\): a C\+\+ exception escaped the kernel"):
        failures.launch("throws", 1, 4, 0, [np.zeros(1, np.int32)])
    out = np.zeros(4, np.int32)   # the module still works afterwards
    failures.launch("int_div", 1, 4, 0, [out, np.array([1, 2, 3, 4], np.int32)])
    np.testing.assert_array_equal(out, [100, 50, 33, 25])


def test_larger_stacks_on_request(failures):
    out, depth = np.zeros(4, np.int32), 64
    failures.stack_size = 1 << 20
    try:
        failures.launch("stack_hog", 1, 4, 0, [out, np.int32(depth)])
    finally:
        failures.stack_size = 64 * 1024
    assert (out == depth * (depth + 1) // 2 - 1).all()   # sum of 2..depth, as the recursion adds it


@pytest.mark.parametrize("grid,block,dyn,match", [
    (1, 1025, 0, "at most 1024"), (1, (32, 1, 65), 0, "at most 1024"), (0, 32, 0, "must be a positive int"),
    ((1, 70000), 32, 0, "exceeds CUDA's limits"), (1, 32, 1 << 20, "dynamic shared memory"),
])
def test_bad_launch_configurations(blocks, grid, block, dyn, match):
    with pytest.raises(EmuError, match=match):
        blocks.launch("indices", grid, block, dyn, [np.zeros(1 << 16, np.int32)])


def test_bad_arguments(blocks, memory):
    x = np.zeros(64, np.float32)
    with pytest.raises(EmuError, match="takes 3 arguments, got 2"):
        blocks.launch("warp_reduce", 1, 32, 0, [x, x])
    with pytest.raises(EmuError, match=r"argument 1: the kernel expects a pointer \(const float\*\)"):
        blocks.launch("warp_reduce", 1, 32, 0, [x, np.float32(1), np.int32(3)])
    with pytest.raises(EmuError, match="argument 2: the kernel expects a value of type int, got an array"):
        blocks.launch("warp_reduce", 1, 32, 0, [x, x, x])
    with pytest.raises(EmuError, match="non-integral value 2.5"):
        blocks.launch("warp_reduce", 1, 32, 0, [x, x, np.float32(2.5)])
    with pytest.raises(EmuError, match="C-contiguous"):
        blocks.launch("warp_reduce", 1, 32, 0, [x, np.zeros((8, 8), np.float32)[:, 1], np.int32(3)])
    with pytest.raises(EmuError, match="was not built"):
        blocks.launch("nope", 1, 32, 0, [])
    out = np.zeros(1, np.float32)   # Python int / float scalars convert like numpy ones
    blocks.launch("warp_reduce", 1, 32, 0, [out, np.arange(32, dtype=np.float32), 10])
    assert out[0] == 45


USER_LERP = """// llm.c names its own device helper lerp, which C++20's <math.h> also declares (std::lerp, in the global
// namespace); CUDA has no lerp, so the file's own must compile and be the one called
__device__ float lerp(float start, float end, float weight) { return fmaf(weight, end, fmaf(-weight, start, start)) + 1000.0f; }
__device__ double lerp(double a, double b, double t) { return a + t * (b - a) - 1000.0; }
__global__ void blend(float* out, const float* a, const float* b) {
  const unsigned i = threadIdx.x;
  out[i] = lerp(a[i], b[i], 0.25f) + (float)lerp((double)a[i], 4.0, 0.5);
}
"""


def test_a_user_lerp_compiles_and_is_the_one_called():
    """No clash with C++20's std::lerp: both of the file's overloads are called (their offsets show it)."""
    mod = CpuModule(USER_LERP, ["blend"], name="lerp.cu")
    rng = np.random.default_rng(3)
    a, b = rng.uniform(-1, 1, 64).astype(np.float32), rng.uniform(-1, 1, 64).astype(np.float32)
    out = np.zeros(64, np.float32)
    mod.launch("blend", 1, 64, 0, [out, a, b])
    want = (a + np.float32(0.25) * (b - a) + 1000) + (a.astype(np.float64) + 0.5 * (4.0 - a) - 1000)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-4)


def test_compile_errors_name_the_line():
    with pytest.raises(EmuCompileError, match=r"k\.cu:2:\d+: error: .*undefined_name"):
        CpuModule("__global__ void k(float* x) {\n  x[0] = undefined_name;\n}\n", ["k"], name="k.cu")
    with pytest.raises(EmuCompileError, match="kernel expression 'k<3>'"):
        CpuModule("__global__ void k(float* x) { x[0] = 1; }\n", ["k<3>"], name="k.cu")
    with pytest.raises(EmuError, match="bad kernel expression"):
        CpuModule("__global__ void k(float* x) {}\n", ["k; int y"])


# ---------------------------------------------------------------------------------------------------------
# rTasks: the converted form, the plain wrapper, a vEU executor with more threads than the rTask
# ---------------------------------------------------------------------------------------------------------
def seg_sum_reference(x: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Block sums, live-thread counts, and 2 * x rotated by one within each block's live threads."""
    n, grid = len(x), blocks_of(len(x), b)
    sums = np.array([x[k * b:(k + 1) * b].sum() for k in range(grid)], np.float32)
    live = np.array([min(b, n - k * b) for k in range(grid)], np.int32)
    rot = np.concatenate([2 * np.roll(x[k * b:k * b + live[k]], -1) for k in range(grid)])
    return sums, live, rot


@pytest.mark.parametrize("n", [64 * 5 - 3, 64, 1000])
def test_rtask_plain_wrapper(rtask, n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    grid = blocks_of(n, 64)
    out, live = np.zeros(grid + n, np.float32), np.zeros(grid, np.int32)
    rtask.launch("seg_sum<64>", grid, 64, 64 * 4, [out, live, x, np.int32(n)])
    sums, live_ref, rot = seg_sum_reference(x, 64)
    np.testing.assert_allclose(out[:grid], sums, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(live, live_ref)
    np.testing.assert_array_equal(out[grid:], rot)


@pytest.mark.parametrize("cooperative", [False, True])
@pytest.mark.parametrize("n,veus,veu_threads", [(64 * 7 - 9, 3, 96), (640, 2, 128), (130, 4, 64)])
def test_rtask_veu_executor(rtask, n, veus, veu_threads, cooperative):
    x = np.random.default_rng(n + veus).standard_normal(n).astype(np.float32)
    grid = blocks_of(n, 64)
    out, live = np.zeros(grid + n, np.float32), np.zeros(grid, np.int32)
    legacy_grid = np.array([grid, 1, 1], np.uint32).tobytes()   # a dim3 parameter, passed as raw bytes
    rtask.launch("seg_sum_veu<64>", veus, veu_threads, 1024, [out, live, x, np.int32(n), legacy_grid],
                 cooperative=cooperative)
    sums, live_ref, rot = seg_sum_reference(x, 64)
    np.testing.assert_allclose(out[:grid], sums, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(live, live_ref)
    np.testing.assert_array_equal(out[grid:], rot)


def test_rtask_reduce_over_partial_tile(rtask):
    x = np.arange(52, dtype=np.float32)
    out = np.zeros(52, np.float32)
    rtask.launch("partial_reduce", 1, 52, 0, [out, x])
    np.testing.assert_array_equal(out, np.r_[np.full(32, x[:32].sum()), np.full(20, x[32:].sum())])


# rt::reduce over tiles of N lanes of an rTask of any thread count, run by vEUs of at least as many threads:
# the tiles past the rTask's last thread are partial (or absent), surplus vEU threads never join the tile.
TILE_REDUCE = r"""
#include "rtask_runtime.cuh"
template <int OP> struct Op;
template <> struct Op<0> { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
template <> struct Op<1> { template <class T> __device__ T operator()(T a, T b) const { return a < b ? b : a; } };
template <> struct Op<2> { template <class T> __device__ T operator()(T a, T b) const { return b < a ? b : a; } };
template <> struct Op<3> { template <class T> __device__ T operator()(T a, T b) const { return a & b; } };
template <> struct Op<4> { template <class T> __device__ T operator()(T a, T b) const { return a | b; } };
template <> struct Op<5> { template <class T> __device__ T operator()(T a, T b) const { return a ^ b; } };

template <unsigned N, class T, int OP>
__device__ void tile_reduce__rtask(rt::Task& __rt, T* out, const T* x) {
  RT_LEGACY_INDICES(__rt);
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  auto tile = rt::tiled_partition<N>(rt::this_task(__rt));
  out[i] = rt::reduce(tile, x[i], Op<OP>());
}
// vEU executor: rTasks id = blockIdx.x, += gridDim.x, of nthreads threads each (nthreads <= blockDim.x).
template <unsigned N, class T, int OP>
__global__ void tile_reduce(T* out, const T* x, unsigned nthreads, unsigned ntasks) {
  __shared__ rt::TaskSlot slot;
  for (unsigned id = blockIdx.x; id < ntasks; id += gridDim.x) {
    rt::Task t = rt::make_task(&slot, id, dim3(ntasks), dim3(nthreads), nullptr, nullptr);
    rt::begin_task(t);
    if (t.tid < t.nthreads) {
      tile_reduce__rtask<N, T, OP>(t, out, x);
      rt::end_task(t);
    }
    __syncthreads();
  }
}
"""
TILE_OPS = {  # op index in TILE_REDUCE -> (C++ type, numpy dtype, numpy reduction)
    "plus_f": (0, "float", np.float32, np.add), "max_f": (1, "float", np.float32, np.maximum),
    "min_f": (2, "float", np.float32, np.minimum), "plus_i": (0, "int", np.int32, np.add),
    "max_i": (1, "int", np.int32, np.maximum), "min_i": (2, "int", np.int32, np.minimum),
    "and_u": (3, "unsigned", np.uint32, np.bitwise_and), "or_u": (4, "unsigned", np.uint32, np.bitwise_or),
    "xor_u": (5, "unsigned", np.uint32, np.bitwise_xor),
}
TILE_SIZES = [1, 2, 4, 8, 16, 32]


def tile_kernel(n: int, op: str) -> str:
    k, ctype, _, _ = TILE_OPS[op]
    return f"tile_reduce<{n}, {ctype}, {k}>"


@pytest.fixture(scope="module")
def tiles():
    return CpuModule(TILE_REDUCE, [tile_kernel(n, op) for n in TILE_SIZES for op in TILE_OPS],
                     include_dirs=[str(RUNTIME_INCLUDE)], name="tile_reduce.cu")


def tile_reduce_reference(x: np.ndarray, nthreads: int, tile: int, ufunc) -> np.ndarray:
    """Per rTask thread: ufunc over the live lanes (rTask threads) of its tile."""
    out = np.empty_like(x)
    for base in range(0, len(x), nthreads):
        for t0 in range(0, nthreads, tile):
            lo, hi = base + t0, base + min(t0 + tile, nthreads)
            out[lo:hi] = ufunc.reduce(x[lo:hi])
    return out


def tile_inputs(rng, dtype, size: int) -> np.ndarray:
    if dtype == np.float32:  # small integers: exact in any summation order
        return rng.integers(-64, 64, size).astype(np.float32)
    if dtype == np.int32:
        return rng.integers(-1000, 1000, size).astype(np.int32)
    return rng.integers(0, 2**32, size, dtype=np.uint64).astype(np.uint32)


@pytest.mark.parametrize("veu_extra", [0, 1, 64])   # vEU threads = nthreads + extra (rounded up to warps if > 0)
@pytest.mark.parametrize("tile", [4, 8, 16, 32])
@pytest.mark.parametrize("nthreads", [1, 5, 31, 33, 47, 64, 100])
def test_rtask_reduce_partial_tiles(tiles, nthreads, tile, veu_extra):
    veu_threads = nthreads if veu_extra == 0 else (nthreads + veu_extra + 31) // 32 * 32
    ntasks, veus = 3, 2                              # a vEU runs more than one rTask
    rng = np.random.default_rng(nthreads * 1000 + tile * 10 + veu_extra)
    for op, (_, _, dtype, ufunc) in TILE_OPS.items():
        x = tile_inputs(rng, dtype, ntasks * nthreads)
        out = np.zeros_like(x)
        tiles.launch(tile_kernel(tile, op), veus, veu_threads, 0, [out, x, np.uint32(nthreads), np.uint32(ntasks)])
        np.testing.assert_array_equal(out, tile_reduce_reference(x, nthreads, tile, ufunc), err_msg=op)


@pytest.mark.parametrize("tile", [1, 2])
@pytest.mark.parametrize("nthreads", [1, 3, 37])
def test_rtask_reduce_small_tiles(tiles, nthreads, tile):
    rng = np.random.default_rng(nthreads + tile)
    for op, (_, _, dtype, ufunc) in TILE_OPS.items():
        x = tile_inputs(rng, dtype, 2 * nthreads)
        out = np.zeros_like(x)
        tiles.launch(tile_kernel(tile, op), 1, 64, 0, [out, x, np.uint32(nthreads), np.uint32(2)])
        np.testing.assert_array_equal(out, tile_reduce_reference(x, nthreads, tile, ufunc), err_msg=op)


# ---------------------------------------------------------------------------------------------------------
# build: cache, the ucontext fallback, the __shared__ rewrite keeps line numbers
# ---------------------------------------------------------------------------------------------------------
SMALL = """
__global__ void iota_sum(int* out) {
  __shared__ int s[128];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (threadIdx.x == 0) { int t = 0; for (int i = 0; i < blockDim.x; ++i) t += s[i]; out[blockIdx.x] = t; }
}
"""


def test_cache_reuses_the_library(tmp_path, monkeypatch):
    monkeypatch.setenv("RAMMER_CACHE", str(tmp_path))
    a = CpuModule(SMALL, ["iota_sum"])
    built = a.library_path.stat().st_ino  # a rebuild renames a new file into place: another inode
    b = CpuModule(SMALL, ["iota_sum"])
    assert b.library_path == a.library_path and b.library_path.stat().st_ino == built  # served, not rebuilt
    assert a.library_path.parent == tmp_path / "emu" and len(list((tmp_path / "emu").glob("*.so"))) == 1
    c = CpuModule(SMALL, ["iota_sum"], defines={"UNUSED_FLAG": 1})
    assert c.library_path == a.library_path            # same preprocessed text and flags
    out = np.zeros(3, np.int32)
    b.launch("iota_sum", 3, 100, 0, [out])
    assert (out == 4950).all()


def test_ucontext_fallback_switching():
    mod = CpuModule(SMALL, ["iota_sum"], defines={"EMU_USE_UCONTEXT": None})
    out = np.zeros(2, np.int32)
    mod.launch("iota_sum", 2, 128, 0, [out])
    assert (out == 127 * 128 // 2).all()


def test_shared_rewrite_keeps_line_numbers():
    src = ("void f() {\n  static __emu_shared__ int a[4], b;\n  extern __emu_shared__\n    float d[];\n}\n"
           "__emu_shared__ float g[2];\n")
    out = rewrite_shared(src)
    assert out.count("\n") == src.count("\n")
    assert "SharedSlot<int [4]> a__emu_slot" in out and "SharedSlot<int > b__emu_slot" in out
    assert "float (&d)[] = *(float(*)[])::emu::dyn_smem();" in out
    assert "static ::emu::NsShared g__emu_ns" in out and "__emu_shared__" not in out


def test_large_launches_do_not_keep_thousands_of_mappings():
    """Each fiber stack is a mapping: a module that keeps 2048 of them after a launch, times a few dozen
    modules, exhausts vm.max_map_count and corrupts the process. After a launch only a small pool stays."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("no /proc/self/maps on this system")
    src = "__global__ void fill(float* y) { y[blockIdx.x * blockDim.x + threadIdx.x] = threadIdx.x; }\n"
    mod = CpuModule(src, ["fill"])
    y = np.zeros(8 * 256, np.float32)
    before = len(maps.read_text().splitlines())
    mod.launch("fill", 8, 256, 0, [y], cooperative=True)
    after = len(maps.read_text().splitlines())
    np.testing.assert_array_equal(y, np.tile(np.arange(256, dtype=np.float32), 8))
    assert after - before < 400, f"{after - before} mappings kept after one 2048-thread launch"


def test_one_set_of_stub_headers_serves_parser_and_emulator():
    """A legacy file including every stubbed header (C/C++ library, CUDA host runtime, CUDA device headers)
    converts with libclang and runs on the emulator, taking FLT_MAX, INT_MAX, int32_t and INFINITY from them."""
    from converter import convert_source
    from toolchain.stubs import DEVICE_STUBS, HOST_STUBS
    names = sorted(p.relative_to(d).as_posix() for d in (HOST_STUBS, DEVICE_STUBS) for p in d.rglob("*")
                   if p.is_file())
    assert {"cuda_runtime.h", "cstdint", "cooperative_groups.h", "stdio.h"} <= set(names)
    src = "".join(f"#include <{n}>\n" for n in names) + (
        "__global__ void limits(float* out, int* iout) {\n"
        "  int32_t i = threadIdx.x;\n"
        "  out[i] = i == 0 ? FLT_MAX : (i == 1 ? INFINITY : -FLT_MAX);\n"
        "  iout[i] = i == 0 ? INT_MAX : INT_MIN + i;\n}\n")
    res = convert_source(src, "stubs_all.cu")
    assert [m.name for m in res.rkernels] == ["limits"] and not res.warnings
    out, iout = np.zeros(3, np.float32), np.zeros(3, np.int32)
    CpuModule(src, ["limits"], name="stubs_all.cu").launch("limits", 1, 3, 0, [out, iout])
    assert out[0] == np.finfo(np.float32).max and np.isinf(out[1]) and out[2] == -np.finfo(np.float32).max
    assert iout.tolist() == [2**31 - 1, -2**31 + 1, -2**31 + 2]
