"""The device API table (converter/device_api.py): every row on the CPU emulator against its known result, the
table's kernel converted (the parse prelude declares every row) and verified, and docs/DEVICE_API.md in step."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from converter import ConversionError, convert_source
from converter.device_api import BLOCK, GRID, KERNEL, ROWS, THREADS, ApiRow, kernel_source, markdown
from cuda_emu import CpuModule
from rtransform.verify import verify_file
from toolchain.nvcc import nvcc_compile
from vdevice import RUNTIME_INCLUDE

REPO = Path(__file__).resolve().parent.parent


def _inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(-2, 2, THREADS).astype(np.float32), "y": rng.uniform(0.5, 4, THREADS).astype(np.float32),
            "i": rng.integers(-1000, 1000, THREADS).astype(np.int32),
            "u": rng.integers(0, 2**32, THREADS, dtype=np.uint64).astype(np.uint32)}


def _warp(a: np.ndarray, fold) -> np.ndarray:
    return np.repeat([fold(w) for w in a.reshape(-1, 32)], 32)


def _tiles(a: np.ndarray, n: int, fold) -> np.ndarray:
    return np.repeat([fold(t) for t in np.asarray(a).reshape(-1, n)], n)


def _namespace(inp: dict[str, np.ndarray], row: ApiRow) -> dict:
    g = np.arange(THREADS)
    return {**inp, "g": g, "lane": g % 32, "np": np, "math": math, "THREADS": THREADS, "BLOCK": BLOCK,
            "init": row.init, "ballot": lambda p: _warp(p, lambda w: sum(int(b) << k for k, b in enumerate(w))),
            "warp_any": lambda p: _warp(p, lambda w: int(w.any())),
            "warp_sum": lambda a: _warp(a.astype(np.int64), lambda w: w.sum()),
            "warp_max": lambda a: _warp(a, lambda w: w.max()),
            "warp_count": lambda p: _warp(p, lambda w: int(w.sum())),
            "rank_among": lambda p: np.concatenate([np.cumsum(w) - w for w in p.reshape(-1, 32).astype(np.int64)]),
            "last_among": lambda p, a: _warp(np.where(p, g, -1), lambda w: a[w.max()] if w.max() >= 0 else 0),
            "warp_cumsum": lambda a: np.concatenate([np.cumsum(w.astype(np.int64)) for w in a.reshape(-1, 32)]),
            "tile_sum": lambda a, n: _tiles(a.astype(np.int64), n, lambda t: t.sum()),
            "tile_any": lambda p, n: _tiles(p, n, lambda t: int(t.any())),
            "tile_all": lambda p, n: _tiles(p, n, lambda t: int(t.all())),
            "tile_scan": lambda a, n, op: np.concatenate([op.accumulate(t) for t in
                                                          np.asarray(a).astype(np.float64 if a.dtype.kind == "f"
                                                                               else np.int64).reshape(-1, n)])}


def _run(rows: list[ApiRow], seed: int) -> tuple[np.ndarray, np.ndarray, dict]:
    inp = _inputs(seed)
    slots = np.zeros(len(rows), np.uint64)
    for r, row in enumerate(rows):
        if row.kind == "atomic":
            one = np.zeros(1, np.uint64)
            one.view(row.dtype)[0] = np.asarray(row.init).astype(row.dtype)
            slots[r] = one[0]
    out = np.zeros(len(rows) * THREADS, np.float64)
    mod = CpuModule(kernel_source(rows), [KERNEL], name="device_api.cu")
    mod.launch(KERNEL, (GRID, 1, 1), (BLOCK, 1, 1), 0, [inp["x"], inp["y"], inp["i"], inp["u"], out, slots])
    return out.reshape(len(rows), THREADS), slots, inp


@pytest.mark.parametrize("seed", [0, 1])
def test_every_row_matches_its_known_result_on_the_emulator(seed):
    out, slots, inp = _run(ROWS, seed)
    bad = []
    for r, row in enumerate(ROWS):
        want = np.asarray(eval(row.ref, _namespace(inp, row)))  # noqa: S307 - the table's own numpy column
        if row.kind == "atomic":
            got = slots[r:r + 1].view(row.dtype)[0]
            ok = got == want.astype(row.dtype) if row.exact else abs(float(got) - float(want)) <= row.rtol * abs(float(want))
        else:
            want = np.broadcast_to(want.astype(np.float64), (THREADS,))
            ok = np.array_equal(out[r], want) if row.exact else np.allclose(out[r], want, rtol=row.rtol, atol=1e-6)
        if not ok:
            bad.append(f"{row.name} [{row.signature}]: got {out[r][:4] if row.kind == 'value' else got}, "
                       f"want {want[:4] if row.kind == 'value' else want}")
    assert not bad, "\n".join(bad)


def test_table_kernel_converts_and_verifies(tmp_path):
    """Rows the converter accepts: one kernel converts (no clang error anywhere: the prelude declares each row)
    and the persistent rKernel agrees with the legacy kernel; refused rows are refused with their reason."""
    rows = [r for r in ROWS if r.converts]
    src = tmp_path / "device_api.cu"
    src.write_text(kernel_source(rows))
    spec = tmp_path / "device_api.spec.yaml"
    n = len(rows) * THREADS
    spec.write_text(f"kernel: {KERNEL}\ngrid: [{GRID}]\nblock: [{BLOCK}]\nargs:\n"
                    f"- {{name: X, kind: buffer, dtype: float32, size: {THREADS}, init: random, low: -2, high: 2}}\n"
                    f"- {{name: Y, kind: buffer, dtype: float32, size: {THREADS}, init: random, low: 0.5, high: 4}}\n"
                    f"- {{name: I, kind: buffer, dtype: int32, size: {THREADS}, init: random, low: -1000, high: 1000}}\n"
                    f"- {{name: U, kind: buffer, dtype: uint32, size: {THREADS}, init: random}}\n"
                    f"- {{name: out, kind: buffer, dtype: float64, size: {n}, init: zeros}}\n"
                    f"- {{name: slots, kind: buffer, dtype: uint64, size: {len(rows)}, init: zeros}}\n"
                    "outputs: [out]\ntolerance: 1.0e-6\n")
    result = verify_file(str(src), str(spec))
    assert result.ok, result.summary()
    for row in (r for r in ROWS if not r.converts):
        with pytest.raises(ConversionError) as e:
            convert_source(kernel_source([row]), str(tmp_path / "one.cu"))
        assert len(e.value.diagnostics) == 1 and f"{row.name} has no rTask counterpart" in e.value.diagnostics[0]


def test_docs_table_is_generated_from_the_rows():
    doc = (REPO / "docs" / "DEVICE_API.md").read_text()
    assert doc == markdown() + "\n", "docs/DEVICE_API.md is stale: write converter.device_api.markdown() to it"


@pytest.mark.nvcc
def test_table_kernel_compiles_for_sm90_legacy_and_converted(nvcc_path, tmp_path):
    """With nvcc's own cooperative_groups the legacy table kernel compiles for sm_90 (the rows are CUDA's API as it
    is: tiles of 64, scans, struct shuffles), and so does the converted one: rt::Tile moves values wider than a
    hardware shuffle (uint4, 12- and 24-byte structs) as 32-bit words, and a 64-thread tile syncs its two warps."""
    rows = [r for r in ROWS if r.converts]
    legacy = tmp_path / "device_api.cu"
    legacy.write_text(kernel_source(rows))
    rtask = tmp_path / "device_api.rtask.cu"
    rtask.write_text(convert_source(legacy.read_text(), str(legacy)).output)
    for src in (legacy, rtask):
        r = nvcc_compile(src, src.with_suffix(".cubin"), "sm_90", ["-cubin"], include_dirs=[str(RUNTIME_INCLUDE)])
        assert r.returncode == 0, f"{src.name}: " + (r.stdout + r.stderr)[-4000:]
