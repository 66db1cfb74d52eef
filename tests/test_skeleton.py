"""`rtransform spec FILE --kernel K`: a launch-spec skeleton that loads, matches the kernel's parameters, takes
the launch sizes from the host code, and runs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from rtransform.run import run_file
from rtransform.skeleton import find_launch, spec_skeleton
from rtransform.spec import check_params, load_spec
from converter.slice import slice_source

REPO = Path(__file__).resolve().parent.parent
KDIR = REPO / "tests" / "real_code_kernels"
CASES = sorted(KDIR.glob("*/*.cu"))


@pytest.mark.parametrize("cu", CASES, ids=lambda p: p.stem)
def test_skeleton_loads_and_matches_the_parameters(cu, tmp_path):
    kernel = yaml.safe_load(cu.with_suffix(".spec.yaml").read_text())["kernel"]
    out = tmp_path / "s.yaml"
    out.write_text(spec_skeleton(cu.read_text(), str(cu), kernel))
    spec = load_spec(str(out))
    check_params(spec, slice_source(cu.read_text(), str(cu), [kernel]).params[spec.kernel])


@pytest.mark.parametrize("launch,grid,block", [
    ("k<<<dim3(4, 2), dim3(16, 8)>>>(o, a, n);", [4, 2, 1], [16, 8, 1]),
    ("k<<<N / BS, BS>>>(o, a, n);", [16, 1, 1], [64, 1, 1]),
    ("k<<<(n + 127) / 128, 128, 0, stream>>>(o, a, n);", [4, 1, 1], [128, 1, 1]),
])
def test_launch_sizes_come_from_the_host_code(launch, grid, block):
    text = f"#define BS 64\nconst int N = 1024;\nvoid host(float* o, const float* a, int n) {{ {launch} }}\n"
    got = find_launch(text, "k")
    assert (got.grid, got.block, got.found) == (grid, block, True)


def test_skeleton_runs_an_elementwise_kernel(tmp_path):
    src = tmp_path / "axpy.cu"
    src.write_text("#define THREADS 96\n__global__ void axpy(float *y, const float *x, float a, int n) {\n"
                   "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] += a * x[i];\n}\n"
                   "void run(float *y, const float *x, int n) { axpy<<<5, THREADS>>>(y, x, 2.0f, n); }\n")
    out = tmp_path / "axpy.spec.yaml"
    r = subprocess.run([sys.executable, "-m", "rtransform.cli", "spec", str(src), "--kernel", "axpy", "-o", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    spec = load_spec(str(out))
    assert spec.grid == (5, 1, 1) and spec.block == (96, 1, 1) and spec.outputs == ["y"]
    res = run_file(str(src), str(out))
    want = res.inputs["y"] + np.float32(res.inputs["a"]) * res.inputs["x"]
    np.testing.assert_allclose(res.outputs["y"], want, rtol=1e-6)


def test_unknown_kernel_is_one_line(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void only(float *o) { o[0] = 1; }\n")
    r = subprocess.run([sys.executable, "-m", "rtransform.cli", "spec", str(src), "--kernel", "other"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2 and r.stderr.strip() == (f"{src}:1:1: error: kernel 'other' not found "
                                                      "(__global__ functions: only)")


def test_unnamed_parameters_and_dynamic_shared_memory(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float *out, int /*unused*/) {\n  extern __shared__ float buf[];\n"
                   "  buf[threadIdx.x] = 1.0f;\n  __syncthreads();\n  out[threadIdx.x] = buf[threadIdx.x];\n}\n")
    out = tmp_path / "k.spec.yaml"
    out.write_text(spec_skeleton(src.read_text(), str(src), "k"))
    spec = load_spec(str(out))
    assert [a.name for a in spec.args] == ["out", "arg1"] and spec.dynamic_smem > 0
    res = run_file(str(src), str(out))
    assert (res.outputs["out"][:128] == 1.0).all()


TEMPLATED = """#include <type_traits>
template <typename T> __global__ void twice(T *y, const T *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2 * x[i];
}
template <int BlockSize, bool Scale = true>
__global__ void __launch_bounds__(BlockSize) block_sum(float *out, const float *in) {
  __shared__ float s[BlockSize];
  s[threadIdx.x] = in[blockIdx.x * BlockSize + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    float a = 0;
    for (int i = 0; i < BlockSize; ++i) a += s[i];
    out[blockIdx.x] = Scale ? 2 * a : a;
  }
}
template <bool A, bool B> __global__ void flags(int *out) { out[threadIdx.x] = A * 2 + B; }
struct Const { static constexpr int value = 64; };
void host(float *y, const float *x, int n, int *f) {
  twice<<<4, 32>>>(y, x, n);
  block_sum<Const::value><<<3, 64>>>(y, x);
  flags<true, false><<<1, 32>>>(f);
}
"""


@pytest.mark.parametrize("kernel,targs", [("twice", ["float"]), ("block_sum", [64]), ("flags", [True, False])])
def test_template_arguments_spelled_deduced_or_guessed(tmp_path, kernel, targs):
    """Template arguments come from the launch where it spells literals; deduced ones and names of the launcher are
    guessed from the kernel's parameters (a type float, a bool false, an integer the block size; defaults stay),
    so a `BlockSize` kernel runs: block_sum's guessed spec matches numpy."""
    src = tmp_path / "t.cu"
    src.write_text(TEMPLATED)
    out = tmp_path / "s.yaml"
    out.write_text(spec_skeleton(TEMPLATED, str(src), kernel))
    assert yaml.safe_load(out.read_text())["template_args"] == targs
    if kernel == "block_sum":
        res = run_file(str(src), str(out))
        want = 2 * res.inputs["in"].astype(np.float64).reshape(-1, 64).sum(axis=1)
        np.testing.assert_allclose(res.outputs["out"][:3], want, rtol=1e-5)


@pytest.mark.parametrize("host,grid,block,guessed", [
    ("dim3 block(16, 16);\n  dim3 grid(8, 4);\n  k<<<grid, block>>>(o, a, n);", [8, 4, 1], [16, 16, 1], []),
    ("dim3 threads{8, 4, 2};\n  k<<<dim3(3, 2), threads, 0, s>>>(o, a, n);", [3, 2, 1], [8, 4, 2], []),
    ("const dim3 block(BS, BS);\n  dim3 grid = dim3(N / BS);\n  k<<<grid, block>>>(o, a, n);",
     [16, 1, 1], [64, 64, 1], []),
    # the grid depends on the problem size: the block is read, the grid is a marked guess
    ("dim3 block(32, 8);\n  dim3 grid((n + 31) / 32, (n + 7) / 8);\n  k<<<grid, block>>>(o, a, n);",
     [4, 1, 1], [32, 8, 1], ["grid"]),
    ("k<<<n, m>>>(o, a, n);", [4, 1, 1], [128, 1, 1], ["grid", "block"]),
])
def test_dim3_launches_are_read_and_guesses_named(host, grid, block, guessed):
    text = f"#define BS 64\nconst int N = 1024;\nvoid host(float* o, const float* a, int n, int m) {{\n  {host}\n}}\n"
    got = find_launch(text, "k")
    assert (got.grid, got.block) == (grid, block)
    assert [g.split()[0] for g in got.guessed] == guessed


def test_skeleton_lists_its_guesses_and_verify_blames_them(tmp_path):
    """A kernel with no constant launch: the skeleton guesses grid, block and sizes, says so (stderr and `# guessed:`
    lines), and the verify that then fails under memcheck adds a note that the spec may be at fault; once the
    guesses are confirmed (lines deleted) the note goes."""
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* o, const float* a) {\n  int i = blockIdx.x * 256 + threadIdx.x;\n"
                   "  o[i] = a[i];\n}\n")
    out = tmp_path / "k.spec.yaml"
    r = subprocess.run([sys.executable, "-m", "rtransform.cli", "spec", str(src), "--kernel", "k", "-o", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "guessed block [128, 1, 1]" in r.stderr and "guessed grid [4, 1, 1]" in r.stderr
    from rtransform.spec import guessed_values
    assert [g.split()[0] for g in guessed_values(out)] == ["grid", "block", "buffer"]
    verify = lambda: subprocess.run([sys.executable, "-m", "rtransform.cli", "verify", str(src), "--spec", str(out)],
                                    capture_output=True, text=True, timeout=300, cwd=REPO)
    v = verify()
    assert v.returncode == 1 and "memcheck" in v.stderr
    assert f"{out}: note: this spec has 3 value(s) `rtransform spec` guessed" in v.stderr
    out.write_text("\n".join(line for line in out.read_text().splitlines() if not line.startswith("# guessed:")))
    v = verify()
    assert v.returncode == 1 and "memcheck" in v.stderr and "guessed" not in v.stderr


CONST_TEMPLATE = """template <const int TILE>
__global__ void reverse_tiles(float *out, const float *in) {
  __shared__ float t[TILE];
  const int base = blockIdx.x * TILE;
  t[threadIdx.x] = in[base + threadIdx.x];
  __syncthreads();
  out[base + threadIdx.x] = t[TILE - 1 - threadIdx.x];
}
"""


def test_const_integer_template_parameter_without_a_launch_is_guessed(tmp_path):
    """`template <const int TILE>` (the SGEMM tutorials' spelling) is an integer parameter: with no launch in the
    file the skeleton guesses the block's thread count, as for `int TILE`, and the kernel runs (numpy: each tile of
    128 reversed), instead of a launcher that does not compile for want of a template argument."""
    src = tmp_path / "k.cuh"
    src.write_text(CONST_TEMPLATE)
    out = tmp_path / "s.yaml"
    out.write_text(spec_skeleton(CONST_TEMPLATE, str(src), "reverse_tiles"))
    spec = yaml.safe_load(out.read_text())
    assert spec["template_args"] == [128] and spec["block"] == [128, 1, 1]
    res = run_file(str(src), str(out))
    x = res.inputs["in"].reshape(-1, 128)
    np.testing.assert_array_equal(res.outputs["out"].reshape(-1, 128), x[:, ::-1])


VECTOR_ADDS = """#include <cuda_fp16.h>
#define AS_F4(v) (reinterpret_cast<float4 *>(&(v))[0])
#define AS_128(v) (reinterpret_cast<float4 *>(&(v))[0])
__global__ void add4(float *x, float *y, float *z, int n) {
  int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
  float4 a = AS_F4(x[i]), b = AS_F4(y[i]);
  if (i < n) AS_F4(z[i]) = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__global__ void add8h(half *x, half *y, half *z, int n) {
  int i = 8 * (blockIdx.x * blockDim.x + threadIdx.x);
  half ra[8], rb[8], rc[8];
  AS_128(ra[0]) = AS_128(x[i]);
  AS_128(rb[0]) = AS_128(y[i]);
  for (int k = 0; k < 8; ++k) rc[k] = __hadd(ra[k], rb[k]);
  if (i < n) AS_128(z[i]) = AS_128(rc[0]);
}
"""


@pytest.mark.parametrize("kernel,lanes,dtype", [("add4", 4, np.float32), ("add8h", 8, np.float16)])
def test_vector_loads_get_buffers_that_cover_them(tmp_path, kernel, lanes, dtype):
    """A kernel that loads 16 bytes a thread through a cast macro (the LeetCUDA / How_to_optimize style, no launch
    in the file) reads `lanes` elements per thread: the skeleton's buffers cover them (memcheck stopped it at
    element 512 of 512 before), its non-const float buffers start random, and the output matches numpy."""
    src = tmp_path / "v.cu"
    src.write_text(VECTOR_ADDS)
    out = tmp_path / "s.yaml"
    out.write_text(spec_skeleton(VECTOR_ADDS, str(src), kernel))
    spec = yaml.safe_load(out.read_text())
    threads = 4 * 128
    assert [a["size"] for a in spec["args"][:3]] == [threads * lanes] * 3
    res = run_file(str(src), str(out))
    x, y = res.inputs["x"].astype(dtype), res.inputs["y"].astype(dtype)
    assert np.abs(x).max() > 0
    n = threads  # the size-named scalar is the thread count: only the first n // lanes threads store
    np.testing.assert_array_equal(res.outputs["z"][:n], (x + y)[:n])


PER_THREAD = """#include <cuda_fp16.h>
#define H2(v) (reinterpret_cast<half2 *>(&(v))[0])
__global__ void relu8(half *x, half *y, int n) {
  int idx = 8 * (blockIdx.x * blockDim.x + threadIdx.x);   // 8 halves a thread, as four half2
  for (int k = 0; k < 8; k += 2) {
    half2 v = H2(x[idx + k]);
    v.x = __hmax(__float2half(0.0f), v.x);
    v.y = __hmax(__float2half(0.0f), v.y);
    if (idx + k < n) H2(y[idx + k]) = v;
  }
}
template <const int NUM_THREADS = 256>
__global__ void block_max(const float *x, float *out) {
  __shared__ float s[NUM_THREADS / 32];
  float v = x[blockIdx.x * NUM_THREADS + threadIdx.x];
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = s[0];
    for (int w = 1; w < NUM_THREADS / 32; ++w) m = fmaxf(m, s[w]);
    out[blockIdx.x] = m;
  }
}
"""


def test_index_multiples_and_thread_count_template_parameters(tmp_path):
    """`idx = 8 * (blockIdx.x * blockDim.x + threadIdx.x)` reads 8 elements a thread (four half2, each 4 bytes):
    the buffers cover 8 per thread (memcheck stopped LeetCUDA's relu_f16x8 at x[+1024] of 1024). A thread-count
    template parameter with a default (`NUM_THREADS = 256`) takes the guessed block's size, so the kernel's
    per-warp slots match its warps (the default with a 128-thread block read slots no warp wrote). Both match numpy."""
    src = tmp_path / "k.cu"
    src.write_text(PER_THREAD)
    out = tmp_path / "relu.yaml"
    out.write_text(spec_skeleton(PER_THREAD, str(src), "relu8"))
    spec = yaml.safe_load(out.read_text())
    assert [a["size"] for a in spec["args"][:2]] == [8 * 512] * 2
    res = run_file(str(src), str(out))
    n = 512  # the size-named scalar: the thread count
    np.testing.assert_array_equal(res.outputs["y"][:n], np.maximum(res.inputs["x"][:n], 0))
    out = tmp_path / "max.yaml"
    out.write_text(spec_skeleton(PER_THREAD, str(src), "block_max"))
    spec = yaml.safe_load(out.read_text())
    assert spec["template_args"] == [128] and spec["block"] == [128, 1, 1]
    res = run_file(str(src), str(out))
    np.testing.assert_array_equal(res.outputs["out"][:4], res.inputs["x"][:512].reshape(4, 128).max(axis=1))


TILE_FLIP = """#define TILE EDGE
__global__ void tile_flip(const float *in, float *out) {   // no launch in this file: the host code is elsewhere
  float __shared__ t[TILE][TILE PAD];
  int b = blockIdx.x * TILE * TILE;
  t[threadIdx.y][threadIdx.x] = in[b + threadIdx.y * TILE + threadIdx.x];
  __syncthreads();
  out[b + threadIdx.y * TILE + threadIdx.x] = t[threadIdx.x][threadIdx.y];
}
"""


@pytest.mark.parametrize("edge,pad", [(8, ""), (16, "+ 1"), (32, "")])
def test_a_kernel_indexing_square_tiles_with_threadIdx_y_gets_a_tile_shaped_block(tmp_path, edge, pad):
    """A kernel whose file has no launch (PMPP's chapter 6: the .cu defines it, another file launches its
    neighbour) got the default 128 x 1 block, so threadIdx.x ran past its [TILE][TILE] tile (memcheck: array
    index 32 out of bounds for float[32]); a kernel that reads threadIdx.y and declares square __shared__ tiles now
    gets a TILE x TILE block. The legacy run matches numpy (each block transposes its tile)."""
    src = tmp_path / "flip.cu"
    text = TILE_FLIP.replace("EDGE", str(edge)).replace("PAD", pad)
    src.write_text(text)
    sp = tmp_path / "s.yaml"
    sp.write_text(spec_skeleton(text, str(src), "tile_flip"))
    spec = yaml.safe_load(sp.read_text())
    assert spec["block"] == [edge, edge, 1]
    res = run_file(str(src), str(sp))
    blocks = spec["grid"][0]
    x = res.inputs["in"][: blocks * edge * edge].reshape(blocks, edge, edge)
    np.testing.assert_array_equal(res.outputs["out"][: blocks * edge * edge].reshape(blocks, edge, edge),
                                  x.transpose(0, 2, 1))
