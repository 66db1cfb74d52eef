"""Issue 30, fourth family: the emulator's sanitizers see what the GPU's would. Read-modify-write races (g++ checks
only the load), warp-synchronous hazards (the `volatile` reduction tail without __syncwarp), misaligned vector
accesses, array subscripts past their bound (local arrays too), the target's shared-memory limits; and verify runs
several block orders on two vEU counts and says which one differed. Every hostile kernel has a correct twin that
must still pass, so a check that reports everything fails here too."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuda_emu import CpuModule
from cuda_emu.module import EmuError
from rtransform.verify import verify_file

REPO = Path(__file__).resolve().parent.parent

TAIL = r"""
__global__ void volatile_tail(float* out, const float* in) {  // the legacy warp-synchronous reduction
  __shared__ float s[64];
  unsigned t = threadIdx.x;
  s[t] = in[t];
  __syncthreads();
  if (t < 32) {
    volatile float* v = s;
    v[t] += v[t + 32]; v[t] += v[t + 16]; v[t] += v[t + 8];
    v[t] += v[t + 4]; v[t] += v[t + 2]; v[t] += v[t + 1];
  }
  if (t == 0) out[0] = s[0];
}
"""
KERNELS = r"""
__global__ void rmw_race(float* out, int reps) {          // every thread adds into one shared word
  __shared__ float acc[2];
  if (threadIdx.x == 0) acc[0] = 0.0f;
  __syncthreads();
  for (int r = 0; r < reps; ++r) acc[0] += 1.0f;           // line 6: the load is checked, the store is not
  __syncthreads();
  if (threadIdx.x == 0) out[0] = acc[0];
}
__global__ void rmw_atomic(float* out, int reps) {        // the same sum, correctly
  __shared__ float acc[2];
  if (threadIdx.x == 0) acc[0] = 0.0f;
  __syncthreads();
  for (int r = 0; r < reps; ++r) atomicAdd(&acc[0], 1.0f);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = acc[0];
}
__global__ void rmw_own_word(float* out) {                // each thread updates its own word: no race
  __shared__ float s[128];
  s[threadIdx.x] = threadIdx.x;
  s[threadIdx.x] += 1.0f;
  s[threadIdx.x] *= 2.0f;
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}
__global__ void syncwarp_tail(float* out, const float* in) {  // the same steps, made correct with __syncwarp
  __shared__ float s[64];
  unsigned t = threadIdx.x;
  s[t] = in[t];
  __syncthreads();
  if (t < 32) {
    for (unsigned k = 32; k > 0; k >>= 1) {
      float x = s[t] + (t < k ? s[t + k] : 0.0f);
      __syncwarp();
      s[t] = x;
      __syncwarp();
    }
  }
  if (t == 0) out[0] = s[0];
}
__global__ void shuffle_tail(float* out, const float* in) {
  float v = in[threadIdx.x];
  for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
  if (threadIdx.x == 0) out[0] = v;
}
__global__ void lane_broadcast_race(float* out) {         // lane 0 writes, its warp reads, no __syncwarp
  __shared__ float flag[32];
  if (threadIdx.x == 0) flag[0] = 7.0f;
  out[threadIdx.x] = flag[0];
}
__global__ void float4_at(float* out, const float* in, int shift) {
  const float4* p = reinterpret_cast<const float4*>(in + shift);
  float4 v = p[threadIdx.x];
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}
__global__ void double_in_shared(float* out, int shift) {
  __shared__ float s[64];
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) { double* d = reinterpret_cast<double*>(s + shift); *d = 2.0; out[0] = s[shift]; }
}
__global__ void local_array(float* out, int n) {
  float r[4];
  for (int i = 0; i < n; ++i) r[i] = i * 2.0f;              // line 78: past r[3] when n > 4
  out[threadIdx.x] = r[threadIdx.x & 3];
}
__global__ void local_read(float* out, int i) {
  float r[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  out[threadIdx.x] = r[i];
}
__global__ void matrix_row(float* out, int j) {
  float m[2][3] = {{1, 2, 3}, {4, 5, 6}};
  out[threadIdx.x] = m[0][j];
}
__global__ void static_smem(float* out) {                  // STATIC_FLOATS floats of static shared memory
  __shared__ float s[STATIC_FLOATS];
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[0];
}
__global__ void dynamic_smem(float* out) {
  extern __shared__ float d[];
  d[threadIdx.x] = 2.0f;
  out[threadIdx.x] = d[threadIdx.x];
}
"""


def module(sanitize="all", static_floats=1024, arch=None) -> CpuModule:
    names = ["rmw_race", "rmw_atomic", "rmw_own_word", "volatile_tail", "syncwarp_tail", "shuffle_tail",
             "lane_broadcast_race", "float4_at", "double_in_shared", "local_array", "local_read", "matrix_row",
             "static_smem", "dynamic_smem"]
    return CpuModule(KERNELS + TAIL, names, defines={"STATIC_FLOATS": static_floats}, sanitize=sanitize, arch=arch,
                     name=str(REPO / "tests" / "safety_kernels.cu"))


@pytest.fixture(scope="module")
def sanitized() -> CpuModule:
    return module()


def report(m: CpuModule, kernel: str, block: int, args: list, dyn: int = 0) -> str | None:
    try:
        m.launch(kernel, 1, block, dyn, args)
    except EmuError as e:
        return str(e)
    return None


@pytest.mark.parametrize("block,reps", [(64, 1), (96, 3), (33, 1)])
def test_read_modify_write_races_are_reported(sanitized, block: int, reps: int) -> None:
    r = report(sanitized, "rmw_race", block, [np.zeros(1, np.float32), np.int32(reps)])
    assert r is not None and "racecheck" in r and "acc byte 0" in r, r
    assert r.count("safety_kernels.cu:6") == 2, r  # both sites: the += of two threads
    out = np.zeros(1, np.float32)
    assert report(sanitized, "rmw_atomic", block, [out, np.int32(reps)]) is None and out[0] == block * reps
    own = np.zeros(block, np.float32)
    assert report(sanitized, "rmw_own_word", block, [own]) is None
    assert np.array_equal(own, 2.0 * ((np.arange(block) + 1) % block + 1))


def test_racecheck_alone_sees_the_rmw_store() -> None:
    r = report(module("racecheck"), "rmw_race", 64, [np.zeros(1, np.float32), np.int32(1)])
    assert r is not None and "racecheck" in r


def test_warp_synchronous_tail_is_a_hazard_with_its_line(sanitized) -> None:
    x = np.arange(64, dtype=np.float32)
    r = report(sanitized, "volatile_tail", 64, [np.zeros(1, np.float32), x])
    assert r is not None and "warp-synchronous hazard" in r and "__syncwarp" in r, r
    assert "safety_kernels.cu:" in r
    for good in ("syncwarp_tail", "shuffle_tail", "rmw_own_word"):
        out = np.zeros(64, np.float32)
        args = [out] if good == "rmw_own_word" else [out, x]
        assert report(sanitized, good, 32 if good == "shuffle_tail" else 64, args) is None, good
        if good != "rmw_own_word":
            assert out[0] == (x[:32] if good == "shuffle_tail" else x).sum(), good
    r = report(sanitized, "lane_broadcast_race", 32, [np.zeros(32, np.float32)])
    assert r is not None and "warp-synchronous hazard (read after write)" in r


@pytest.mark.parametrize("shift,ok", [(0, True), (4, True), (1, False), (2, False), (3, False)])
def test_misaligned_vector_loads(sanitized, shift: int, ok: bool) -> None:
    x = np.arange(64, dtype=np.float32)
    r = report(sanitized, "float4_at", 8, [np.zeros(8, np.float32), x, np.int32(shift)])
    if ok:
        assert r is None, r
    else:
        assert r is not None and "misaligned read of 16 bytes" in r and "global memory" in r, r


@pytest.mark.parametrize("shift,ok", [(0, True), (2, True), (1, False), (3, False)])
def test_misaligned_double_in_shared_memory(sanitized, shift: int, ok: bool) -> None:
    r = report(sanitized, "double_in_shared", 32, [np.zeros(1, np.float32), np.int32(shift)])
    assert (r is None) == ok, r
    if not ok:
        assert "misaligned write of 8 bytes" in r and "shared memory" in r


@pytest.mark.parametrize("kernel,arg,bad", [("local_array", 4, False), ("local_array", 5, True),
                                            ("local_array", 9, True), ("local_read", 3, False),
                                            ("local_read", 4, True), ("local_read", -1, True),
                                            ("matrix_row", 2, False), ("matrix_row", 3, True)])
def test_local_array_overruns(sanitized, kernel: str, arg: int, bad: bool) -> None:
    r = report(sanitized, kernel, 4, [np.zeros(4, np.float32), np.int32(arg)])
    if bad:
        assert r is not None and "out of bounds for type" in r and "safety_kernels.cu:" in r, r
        first_bad = 4 if kernel == "local_array" else arg  # the loop's first index past r[3]
        assert f"array index {first_bad} " in r, r
    else:
        assert r is None, r


@pytest.mark.parametrize("sanitize", ["all", None])
def test_static_shared_memory_past_48_kb_never_runs(sanitize) -> None:
    """ptxas refuses more than 48 KB of static __shared__ on every architecture: with sanitizers or without."""
    over = report(module(sanitize, static_floats=12 * 1024 + 1), "static_smem", 32, [np.zeros(32, np.float32)])
    assert over is not None and "49152" in over and "static" in over, over
    assert report(module(sanitize, static_floats=12 * 1024), "static_smem", 32, [np.zeros(32, np.float32)]) is None


@pytest.mark.parametrize("arch,dyn,ok", [("sm_90", 200 * 1024, True), ("sm_80", 200 * 1024, False),
                                         ("sm_80", 150 * 1024, True), ("sm_75", 65 * 1024, False),
                                         ("sm_90", 227 * 1024 - 4096 + 1, False)])
def test_shared_memory_per_block_follows_the_architecture(arch: str, dyn: int, ok: bool) -> None:
    """static (1024 floats = 4 KB) + dynamic against the target's per-block figure."""
    m = module(None, static_floats=1024, arch=arch)
    r = report(m, "static_smem", 32, [np.zeros(32, np.float32)], dyn)
    assert (r is None) == ok, r
    if not ok:
        assert arch in r


def test_unknown_architecture_is_one_line() -> None:
    """An architecture the emulator does not model is one line, when the module is made (device code is compiled
    with that architecture's __CUDA_ARCH__) or at the latest at launch."""
    with pytest.raises(EmuError, match="is not one of"):
        m = module(None, arch="sm_42")
        m.launch("dynamic_smem", 1, 32, 128, [np.zeros(32, np.float32)])


# ---- verify: several block orders, two vEU counts ---------------------------------------------------------------
ORDERED = r"""
// the first block to run claims the slot: a result that depends on block order (legal CUDA, but not an rTask)
__global__ void first_wins(int* out) {
  if (threadIdx.x == 0 && out[0] == 0) out[0] = blockIdx.x + 1;
}
// each block stores a ticket: the order in which blocks ran
__global__ void tickets(int* out, int* counter) {
  if (threadIdx.x == 0) out[blockIdx.x] = atomicAdd(counter, 1);
}
// order-independent: every block writes its own element
__global__ void own_slot(int* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = blockIdx.x * 3;
}
"""


def spec(tmp: Path, kernel: str, grid: int, args: str, outputs: str) -> Path:
    p = tmp / f"{kernel}-{grid}.spec.yaml"
    p.write_text(f"kernel: {kernel}\ngrid: [{grid}]\nblock: [32]\nargs:\n{args}outputs: [{outputs}]\n")
    return p


@pytest.mark.parametrize("grid", [2, 3, 8])
def test_verify_finds_a_block_order_dependence_at_every_grid(tmp_path: Path, grid: int) -> None:
    (tmp_path / "k.cu").write_text(ORDERED)
    first = spec(tmp_path, "first_wins", grid, "  - {name: out, kind: buffer, dtype: int32, size: 1, init: zeros}\n",
                 "out")
    res = verify_file(str(tmp_path / "k.cu"), str(first))
    assert not res.ok and "(under block order" in res.summary(), res.summary()
    assert len(res.schedules) >= 3
    tickets = spec(tmp_path, "tickets", grid, "  - {name: out, kind: buffer, dtype: int32, size: 8, init: zeros}\n"
                   "  - {name: counter, kind: buffer, dtype: int32, size: 1, init: zeros}\n", "out")
    assert not verify_file(str(tmp_path / "k.cu"), str(tickets)).ok
    own = spec(tmp_path, "own_slot", grid, "  - {name: out, kind: buffer, dtype: int32, size: 8, init: zeros}\n",
               "out")
    res = verify_file(str(tmp_path / "k.cu"), str(own))
    assert res.ok, res.summary()
    vcounts = {s.rsplit(" on ", 1)[1] for s in res.schedules}
    assert len(vcounts) >= 2 and (grid == 2 or any("reverse" in s for s in res.schedules)), res.schedules


def test_verify_of_the_volatile_tail_fails_with_the_line(tmp_path: Path) -> None:
    (tmp_path / "tail.cu").write_text(TAIL)
    s = tmp_path / "tail.spec.yaml"
    s.write_text("kernel: volatile_tail\ngrid: [1]\nblock: [64]\nargs:\n"
                 "  - {name: out, kind: buffer, dtype: float32, size: 1, init: zeros}\n"
                 "  - {name: in, kind: buffer, dtype: float32, size: 64, init: arange}\noutputs: [out]\n")
    res = subprocess.run([sys.executable, "-c", "from rtransform.cli import main; main()", "verify",
                          str(tmp_path / "tail.cu"), "--spec", str(s)], cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode != 0 and "verified" not in res.stdout
    assert "warp-synchronous hazard" in res.stderr and "tail.cu:" in res.stderr, res.stderr
