"""What `rtransform verify` compares, and what the emulator compiles, in the cases real code brought up:

- device code is compiled with `__CUDA_ARCH__` defined, as nvcc's device pass and the converter's parse define it
  (a kernel under `#if __CUDA_ARCH__ >= 120` with `#else` stubs: tests/real_code_kernels/arch_guarded);
- every launch starts from the source's initial `__device__` globals (a counter the legacy run incremented does not
  carry into the rKernel's runs);
- a difference that the legacy kernel itself gives when its blocks run in the same order (races between blocks),
  or two legacy runs that differ (clock readings), is its own outcome (exit 4), never "verified" and never a
  "differs" of the conversion; a broken conversion still differs (exit 1);
- the persistent run, whose vEUs each run several rTasks one after another, gets a yield budget per rTask.
The independent truth in each case is the legacy kernel, run by the emulator alone.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rtransform.verify as V
from converter.parse import CLANG_ARGS
from cuda_emu import CpuModule
from cuda_emu.module import DEFAULT_ARCH, DEFAULT_YIELD_BUDGET, EmuError, cuda_arch, device_arch_define
from rtransform.run import RunError
from toolchain.exits import Exit
from vdevice.executors import cpu_yield_budget

REPO = Path(__file__).resolve().parent.parent


def _write(tmp_path: Path, name: str, source: str, spec: str) -> tuple[str, str]:
    (tmp_path / f"{name}.cu").write_text(source)
    (tmp_path / f"{name}.spec.yaml").write_text(spec)
    return str(tmp_path / f"{name}.cu"), str(tmp_path / f"{name}.spec.yaml")


def _verify_cli(cu: str, spec: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rtransform.cli", "verify", cu, "--spec", spec],
                          capture_output=True, text=True, timeout=300, cwd=REPO)


def _spec(kernel: str, grid: int, block: int, args: str, outputs: str) -> str:
    return (f"kernel: {kernel}\ngrid: [{grid}, 1, 1]\nblock: [{block}, 1, 1]\nargs:\n{args}outputs: [{outputs}]\n")


# ---- __CUDA_ARCH__ ------------------------------------------------------------------------------------------------
def test_emulated_arch_is_the_one_the_converter_parses_with():
    """The converter parses as nvcc's device pass for sm_90; the emulator compiles device code for the same target."""
    assert f"--cuda-gpu-arch={DEFAULT_ARCH}" in CLANG_ARGS
    assert cuda_arch(DEFAULT_ARCH) == 900 and "#define __CUDA_ARCH__ 900" in device_arch_define()
    assert "#define __CUDA_ARCH__ 800" in device_arch_define("sm_80")


def test_device_code_sees_cuda_arch_and_the_emulator_headers_do_not(monkeypatch):
    """The source's device code takes the `__CUDA_ARCH__` branches of the emulated target ($RAMMER_EMU_ARCH);
    cuda_emu.h was read before the define (RT_CPU_EMULATOR still tells the emulator apart)."""
    src = ("#if !defined(__CUDA_ARCH__) || !defined(RT_CPU_EMULATOR)\n#error device code without __CUDA_ARCH__\n#endif\n"
           "__global__ void arch(int* out) { out[0] = __CUDA_ARCH__; }\n")
    for target, want in (("sm_90", 900), ("sm_80", 800)):
        monkeypatch.setenv("RAMMER_EMU_ARCH", target)
        m = CpuModule(src, ["arch"])
        out = np.zeros(1, np.int32)
        m.launch("arch", 1, 1, 0, [out])
        assert out[0] == want


# ---- block order and fresh globals in the emulator ----------------------------------------------------------------
COUNTER = """
__device__ unsigned int ticket = 0;
__global__ void take(int* out) { if (threadIdx.x == 0) out[blockIdx.x] = (int)atomicAdd(&ticket, 1u); }
"""


def test_emulator_runs_blocks_in_a_given_order_and_refuses_a_bad_one():
    m = CpuModule(COUNTER, ["take"], fresh_globals=True)
    out = np.zeros(4, np.int32)
    m.launch("take", 4, 32, 0, [out], order=[3, 1, 0, 2])
    assert out.tolist() == [2, 1, 3, 0]  # block 3 ran first and took ticket 0
    m.launch("take", 4, 32, 0, [out])
    assert out.tolist() == [0, 1, 2, 3]  # the default order, and the ticket counter started again at 0
    for bad in ([0, 1, 2], [0, 1, 1, 2], [0, 1, 2, 4]):
        with pytest.raises(EmuError, match="each of the grid's 4 blocks once"):
            m.launch("take", 4, 32, 0, [out], order=bad)
    with pytest.raises(EmuError, match="cooperative"):
        m.launch("take", 4, 32, 0, [out], order=[0, 1, 2, 3], cooperative=True)


def test_without_fresh_globals_a_module_keeps_its_globals():
    """The default (rammer's executors, which run one library for a whole model) is unchanged."""
    m = CpuModule(COUNTER, ["take"])
    out = np.zeros(2, np.int32)
    m.launch("take", 2, 32, 0, [out])
    m.launch("take", 2, 32, 0, [out])
    assert out.tolist() == [2, 3]


# ---- verify: __device__ globals reset between runs ----------------------------------------------------------------
def test_device_counter_kernel_verifies(tmp_path):
    """A work-queue style kernel that does not reset its own `__device__` counter: each run starts from 0, as the
    legacy run did, so every block sees a ticket below gridDim.x (the legacy result: all ones)."""
    cu, spec = _write(tmp_path, "ctr", "__device__ unsigned int ctr = 0;\n__global__ void once(int* out) {\n"
                      "  if (threadIdx.x == 0) out[blockIdx.x] = (atomicAdd(&ctr, 1u) < gridDim.x) ? 1 : 2;\n}\n",
                      _spec("once", 8, 32, "- {name: out, kind: buffer, dtype: int32, size: 8, init: zeros}\n", "out"))
    r = _verify_cli(cu, spec)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verified" in r.stdout


# ---- verify: the legacy kernel's own order dependence -------------------------------------------------------------
LAST_WRITER = "__global__ void last(int* out) { if (threadIdx.x == 0) out[0] = blockIdx.x; }\n"


@pytest.mark.parametrize("grid", [2, 8])
def test_last_writer_wins_is_the_legacy_kernels_own_order_dependence(tmp_path, grid):
    """Every block writes out[0]: the result is the last block's id, whichever CUDA runs last. grid 2: one vEU, the
    legacy kernel in the reverse order gives the rKernel's result; grid 8: three vEUs, the legacy kernel in that
    order gives another result than in its own, and the rKernel gives it on one vEU."""
    cu, spec = _write(tmp_path, "last", LAST_WRITER,
                      _spec("last", grid, 32, "- {name: out, kind: buffer, dtype: int32, size: 1, init: zeros}\n",
                            "out"))
    r = _verify_cli(cu, spec)
    assert r.returncode == Exit.LEGACY_ORDER == 4, r.stdout + r.stderr
    assert "the legacy kernel's own result depends on block order (races between blocks)" in r.stdout
    res = V.verify_file(cu, spec)
    assert not res.ok and res.outcome == "legacy order-dependent"
    assert res.summary().startswith("the legacy kernel's own result depends on block order")


def test_clock_reading_kernel_varies_between_legacy_runs(tmp_path):
    cu, spec = _write(tmp_path, "clk", "__global__ void clk(long long* out) {\n  long long t = clock64();\n"
                      "  for (int i = 0; i < 50; ++i) __syncthreads();\n"
                      "  out[blockIdx.x * blockDim.x + threadIdx.x] = clock64() - t;\n}\n",
                      _spec("clk", 2, 32, "- {name: out, kind: buffer, dtype: int64, size: 64, init: zeros}\n", "out"))
    res = V.verify_file(cu, spec)
    assert res.outcome == "legacy order-dependent"
    assert "varies between two runs in the same block order" in res.legacy_dependence


def test_a_broken_conversion_still_differs(tmp_path):
    """The legacy kernel is order independent: a conversion that computes something else differs (exit 1)."""
    cu, spec = _write(tmp_path, "twice", "__global__ void twice(const float* in, float* out, int n) {\n"
                      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = in[i] * 2.0f;\n}\n",
                      _spec("twice", 4, 32, "- {name: in, kind: buffer, dtype: float32, size: 128, init: random}\n"
                            "- {name: out, kind: buffer, dtype: float32, size: 128, init: zeros}\n"
                            "- {name: n, kind: scalar, dtype: int32, value: 128}\n", "out"))
    assert V.verify_file(cu, spec).ok
    res = V.verify_file(cu, spec, transform=lambda t: t.replace("* 2.0f", "* 3.0f"))
    assert res.outcome == "differs" and not res.legacy_dependence


# ---- the persistent run's yield budget ----------------------------------------------------------------------------
_ALL_SCHEDULES = V.schedules


def _first_schedule(spec):
    return _ALL_SCHEDULES(spec)[:1]


BARRIERS = """
__global__ void steps(float* out, int n) {
  __shared__ float acc[64];
  acc[threadIdx.x] = 0.0f;
  __syncthreads();
  for (int s = 0; s < n; ++s) {
    acc[(threadIdx.x + 1) % blockDim.x] += 1.0f;
    __syncthreads();
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc[threadIdx.x];
}
"""


def test_cpu_yield_budget_grows_with_the_work_run_in_one_launch():
    assert cpu_yield_budget(0) == cpu_yield_budget(1) == DEFAULT_YIELD_BUDGET
    assert cpu_yield_budget(16) == 16 * DEFAULT_YIELD_BUDGET
    assert cpu_yield_budget(3, 1000) == DEFAULT_YIELD_BUDGET


def test_persistent_run_of_many_barrier_rtasks_finishes_where_the_legacy_run_does(tmp_path, monkeypatch):
    """48 rTasks of 8000 barriers each: the legacy launch finishes within the emulator's default budget, while the
    persistent launch polls its rTask barriers about 24 M times on its vEUs; with the default budget it would stop
    at the watchdog."""
    cu, spec = _write(tmp_path, "steps", BARRIERS,
                      _spec("steps", 48, 64, "- {name: out, kind: buffer, dtype: float32, size: 3072, init: zeros}\n"
                            "- {name: n, kind: scalar, dtype: int32, value: 8000}\n", "out"))
    monkeypatch.setattr(V, "schedules", _first_schedule)  # reverse on 3 vEUs: 16 rTasks each
    assert V.verify_file(cu, spec, sanitize=()).ok
    monkeypatch.setattr(V, "cpu_yield_budget", lambda units: DEFAULT_YIELD_BUDGET)
    with pytest.raises(RunError, match="yield"):
        V.verify_file(cu, spec, sanitize=())
