"""The emulator's precompiled header (cuda_emu/pch.py): a module built with it is the library the plain build makes,
byte for byte, and runs the same; a damaged PCH in the cache is noticed and rebuilt; its key covers the flags, the
compiler and the header's text."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from cuda_emu import module as emu
from cuda_emu import pch
from cuda_emu.env import PCH_ENV
from cuda_emu.module import CpuModule, EmuCompileError

KERNELS = r"""
__global__ void sumsq(float* out, const float* in, int n) {
  __shared__ float part[BLOCK];
  int i = blockIdx.x * BLOCK + threadIdx.x;
  part[threadIdx.x] = i < n ? in[i] * in[i] : 0.0f;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
__global__ void softplus(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = logf(1.0f + expf(in[i])) * SCALE;
}
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of the test's own (no PCH yet), the PCH on."""
    monkeypatch.setenv("RAMMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(PCH_ENV, raising=False)
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PCH of the unsanitized -O1 build, made once by two builds (the second build of a key makes it)."""
    root = tmp_path_factory.mktemp("seed") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAMMER_CACHE", str(root))
        mp.delenv(PCH_ENV, raising=False)
        build(1.0)
        assert build(2.0).compiled_with == "pch"
    return root / "pch"


@pytest.fixture
def warm(cache: Path, seed: Path) -> Path:
    """The test's own cache holding a copy of that PCH (its libraries are not copied: builds compile)."""
    shutil.copytree(seed, cache / "pch", ignore=shutil.ignore_patterns("*.lock"))
    return cache


def build(scale: float, block: int = 64, sanitize: str | None = None, **kw) -> CpuModule:
    return CpuModule(KERNELS, ["sumsq", "softplus"], defines={"BLOCK": block, "SCALE": f"{scale}f"},
                     sanitize=sanitize, fresh_globals=True, **kw)  # fresh: each launch loads the file's bytes now


def run(m: CpuModule, n: int, block: int, seed: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Both kernels on fresh data, checked against numpy; their outputs."""
    rng = np.random.default_rng(seed)
    ints = rng.integers(-20, 21, n).astype(np.float32)   # sums of squares stay exact in float32
    sums = np.zeros(-(-n // block), np.float32)
    m.launch("sumsq", len(sums), block, args=[sums, ints, np.int32(n)])
    padded = np.zeros(len(sums) * block, np.float64)
    padded[:n] = ints
    np.testing.assert_array_equal(sums, (padded ** 2).reshape(-1, block).sum(1))
    x = rng.uniform(-6, 6, n).astype(np.float32)
    y = np.zeros(n, np.float32)
    m.launch("softplus", -(-n // 32), 32, args=[y, x, np.int32(n)])
    np.testing.assert_allclose(y, np.log1p(np.exp(x.astype(np.float64))) * scale, rtol=3e-6, atol=1e-6)
    return sums, y


def gchs(cache: Path) -> set[str]:
    return {p.name for p in (cache / "pch").glob("*.gch")}


def seen(cache: Path) -> int:
    return len(list((cache / "pch").glob("*.seen")))


@pytest.mark.parametrize("sanitize", [None, "all"])
def test_the_pch_build_is_the_plain_build(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                          sanitize: str | None) -> None:
    monkeypatch.setenv(PCH_ENV, "0")
    plain = build(0.5, sanitize=sanitize)
    assert plain.compiled_with == "plain" and not (cache / "pch").exists()
    plain_bytes = plain.library_path.read_bytes()
    want = {n: run(plain, n, 64, n, 0.5) for n in (1, 100, 333)}

    monkeypatch.setenv(PCH_ENV, "1")
    assert build(1.5, sanitize=sanitize).compiled_with == "plain"   # the header's text met once: no PCH yet
    plain.library_path.unlink()
    again = build(0.5, sanitize=sanitize)                          # met again: the PCH is built and used
    assert again.compiled_with == "pch" and len(gchs(cache)) == 1
    assert again.library_path == plain.library_path and again.library_path.read_bytes() == plain_bytes
    for n, (sums, y) in want.items():
        got = run(again, n, 64, n, 0.5)
        assert got[0].tobytes() == sums.tobytes() and got[1].tobytes() == y.tobytes()
    other = build(2.5, block=128, sanitize=sanitize)               # another module: the PCH again, right results
    assert other.compiled_with == "pch"
    for n in (7, 256, 1000):
        run(other, n, 128, n, 2.5)


@pytest.mark.parametrize("damage", ["flipped", "truncated", "foreign"])
def test_a_damaged_pch_is_noticed_and_rebuilt(warm: Path, damage: str) -> None:
    cache = warm
    (name,) = gchs(cache)
    gch = cache / "pch" / name
    good = gch.read_bytes()
    if damage == "flipped":      # bits changed in place: the digest beside it no longer matches
        data = bytearray(good)
        for at in range(len(data) // 3, len(data) // 3 + 4096, 512):
            data[at] ^= 0x5A
        damaged = bytes(data)
    elif damage == "truncated":  # a crash or a full disk while it was written by hand
        damaged = good[: len(good) // 2]
    else:                        # a file g++ refuses, whose digest was recorded with it: the compile falls back
        damaged = good[:64] + bytes(range(256)) * 64   # its own magic and compiler stamp, then no PCH
        (cache / "pch" / (name + ".sha256")).write_text(hashlib.sha256(damaged).hexdigest() + "\n")
    gch.write_bytes(damaged)
    m = build(3.0)
    run(m, 100, 64, 3, 3.0)
    if damage == "foreign":
        assert m.compiled_with == "plain" and not gch.exists()   # discarded: the next build makes it again
        m = build(4.0)
        run(m, 200, 64, 4, 4.0)
    assert m.compiled_with == "pch" and pch.intact(gch) and gch.read_bytes() != damaged


def test_a_compile_error_is_the_plain_builds_and_keeps_the_pch(warm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = "__global__ void k(float* o) { o[0] = undeclared_name; }\n"
    monkeypatch.setenv(PCH_ENV, "0")
    with pytest.raises(EmuCompileError) as plain:
        CpuModule(bad, ["k"])
    monkeypatch.setenv(PCH_ENV, "1")
    before = gchs(warm)
    with pytest.raises(EmuCompileError) as withpch:
        CpuModule(bad, ["k"])
    assert str(withpch.value) == str(plain.value) and "undeclared_name" in str(plain.value)
    assert gchs(warm) == before and build(3.0).compiled_with == "pch"


def test_the_pch_key_covers_flags_compiler_and_header_text(warm: Path, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    cache = warm
    assert seen(cache) == 1
    changes = 0

    def another_key(m: CpuModule, scale: float) -> None:
        nonlocal changes
        changes += 1
        assert m.compiled_with == "plain" and seen(cache) == 1 + changes   # a new key, met for the first time
        run(m, 90, 64, changes, scale)

    another_key(build(3.0, opt="-O2"), 3.0)                          # flags
    another_key(build(4.0, sanitize="memcheck"), 4.0)                # flags (and the sanitizer's define)
    with monkeypatch.context() as mp:
        mp.setitem(emu._VERSIONS, emu._compiler(), "g++ (another build) 99.0")
        another_key(build(5.0), 5.0)                                 # the compiler's version
    # the header's text: a define that changes the C++ library's inline code, then the emulator's headers themselves
    another_key(CpuModule(KERNELS, ["sumsq", "softplus"],
                          defines={"BLOCK": 64, "SCALE": "6.0f", "_GLIBCXX_ASSERTIONS": None}), 6.0)
    headers = tmp_path / "include"
    shutil.copytree(emu.INCLUDE_DIR, headers)
    with (headers / "cuda_emu.h").open("a") as fh:
        fh.write("\ninline int emu_header_edited() { return 1; }\n")
    with monkeypatch.context() as mp:
        mp.setattr(emu, "INCLUDE_DIR", headers)
        another_key(build(7.0), 7.0)
    assert len(gchs(cache)) == 1 and build(8.0).compiled_with == "pch"   # the first key's PCH is still the one used
