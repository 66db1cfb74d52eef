"""The verified kernels: the emulated legacy kernel against numpy, then legacy against the persistent rKernel.

Also: deliberately broken conversions must be caught, and the CLI reports failures in one line.
"""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rtransform.run import RunError, run_command, run_file
from rtransform.spec import load_spec
from rtransform.verify import num_veus, verify_command, verify_file, veu_threads
from toolchain.exits import Exit
from vdevice.gpu import gpu_available

REPO = Path(__file__).resolve().parent.parent
KDIR = REPO / "tests" / "verify_kernels"
NAMES = sorted(p.stem for p in KDIR.glob("*.cu"))


def load_refs(folder: Path = KDIR, name: str = "verify_refs"):
    """The numpy references (refs.py) of a kernel folder, imported from its path."""
    spec = importlib.util.spec_from_file_location(name, folder / "refs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REFS = load_refs()


def paths(name: str) -> tuple[str, str]:
    return str(KDIR / f"{name}.cu"), str(KDIR / f"{name}.spec.yaml")


def max_rel_error(actual: np.ndarray, expected: np.ndarray) -> float:
    a = np.asarray(actual, dtype=np.float64).ravel()
    b = np.asarray(expected, dtype=np.float64).ravel()
    assert a.shape == b.shape
    return float(np.max(np.abs(a - b) / (1.0 + np.abs(b)))) if a.size else 0.0


def test_corpus_is_large_and_complete():
    assert len(NAMES) >= 32
    for name in NAMES:
        assert (KDIR / f"{name}.spec.yaml").exists(), name
        assert name in REFS.REFS, f"no numpy reference for {name}"


@pytest.mark.parametrize("name", NAMES)
def test_legacy_on_cpu_matches_numpy(name):
    """The emulator runs the legacy kernel right: its outputs equal an independent numpy computation."""
    res = run_file(*paths(name))
    expected = REFS.REFS[name]({k: np.asarray(v) for k, v in res.inputs.items()})
    assert set(expected) == set(res.spec.outputs)
    for out, want in expected.items():
        err = max_rel_error(res.outputs[out], want)
        assert err <= REFS.TOLERANCES[name], f"{name}.{out}: error {err}"


@pytest.mark.parametrize("name", NAMES)
def test_verify_on_cpu(name):
    """The converted rKernel, run by the persistent executor, reproduces the legacy kernel."""
    res = verify_file(*paths(name))
    spec = load_spec(paths(name)[1])
    assert res.rtasks == spec.num_blocks() and res.veus == num_veus(spec.num_blocks())
    assert res.veus < res.rtasks or res.rtasks == 1
    assert res.veu_threads > res.block_threads and res.veu_threads % res.block_threads != 0
    assert res.ok, res.summary()


# ---- the converter's feature kernels (tests/converter_kernels) go through verify too ----------------------------
CONV_KDIR = REPO / "tests" / "converter_kernels"
CONV_NAMES = sorted(p.stem for p in CONV_KDIR.glob("*.cu"))


@pytest.mark.parametrize("name", CONV_NAMES)
def test_converter_kernel_verifies_on_cpu(name):
    """Each converter feature kernel: the emulated legacy kernel matches its numpy reference, and the converted
    rKernel under the persistent executor (fewer vEUs, surplus threads, shuffled rTasks) matches the legacy."""
    cu, spec_path = str(CONV_KDIR / f"{name}.cu"), str(CONV_KDIR / f"{name}.spec.yaml")
    spec = load_spec(spec_path)
    legacy = run_file(cu, spec_path)
    expected = load_refs(CONV_KDIR, "converter_kernel_refs_v").REFS[name]({k: np.asarray(v) for k, v in legacy.inputs.items()})
    for out, want in expected.items():
        err = max_rel_error(legacy.outputs[out], want)
        assert err <= spec.tolerance, f"legacy {name}.{out}: error {err} against numpy"
    res = verify_file(cu, spec_path)
    assert res.rtasks == spec.num_blocks()
    assert res.ok, res.summary()


@pytest.mark.parametrize("block", [1, 8, 32, 48, 64, 96, 100, 128, 256, 500, 1000, 1023])
def test_veu_width_is_larger_and_not_a_multiple(block):
    v = veu_threads(block)
    assert block < v <= 1024
    assert block == 1 or v % block != 0


# ---- broken conversions must be caught ---------------------------------------------------------------------
def swap_block_xy(text: str) -> str:
    """A wrong index remap: the rKernel reads blockIdx with x and y swapped."""
    new = ("const uint3 blockIdx = [&] { uint3 b = ::rt::block_idx(__rt); uint3 s; s.x = b.y; s.y = b.x; s.z = b.z; "
           "return s; }(); const uint3 threadIdx = ::rt::thread_idx(__rt); const dim3 blockDim = __rt.block; "
           "const dim3 gridDim = __rt.grid;")
    out, n = re.subn(r"RT_LEGACY_INDICES\(__rt\);", new, text, count=1)
    assert n == 1
    return out


def shift_task_id(text: str) -> str:
    """An off-by-one remap: the rKernel computes block __rt.id + 1."""
    out, n = re.subn(r"RT_LEGACY_INDICES\(__rt\);", "__rt.id = __rt.id + 1; RT_LEGACY_INDICES(__rt);", text, count=1)
    assert n == 1
    return out


def drop_first_sync(text: str) -> str:
    """A dropped barrier: the first rt::sync(__rt) of the rKernel disappears."""
    out, n = re.subn(r"rt::sync\(__rt\);", ";", text, count=1)
    assert n == 1
    return out


# Kernels whose blocks the corruption cannot merely permute: non-square grids for the x/y swap, a 3-D grid
# (block_idx wraps x and y, not z) for the shifted id, and reads of other threads' shared data after the
# dropped barrier.
BROKEN = [("transpose_padded", swap_block_xy), ("embedding_gather", swap_block_xy), ("stencil3d", shift_task_id),
          ("transpose_padded", drop_first_sync), ("argmax_rows", drop_first_sync)]


@pytest.mark.parametrize("name,corrupt", BROKEN, ids=[f"{n}-{c.__name__}" for n, c in BROKEN])
def test_verify_catches_broken_conversion(name, corrupt):
    if corrupt is drop_first_sync:  # racecheck names the race, with both sites, before any output is compared
        with pytest.raises(RunError, match=r"racecheck: shared-memory race .* with no barrier in between"):
            verify_file(*paths(name), transform=corrupt)
        res = verify_file(*paths(name), transform=corrupt, sanitize=())  # unsanitized, the outputs differ
    else:
        res = verify_file(*paths(name), transform=corrupt)
    assert not res.ok
    bad = [o for o in res.outputs if not o.ok]
    assert bad[0].first_index is not None and bad[0].mismatches > 0 and bad[0].max_error > 0
    assert f"{bad[0].name}: DIFFERS at index {bad[0].first_index}" in res.summary()


def test_verify_command_output_and_json(capsys):
    assert verify_command(*paths("scan_exclusive")) == 0
    out = capsys.readouterr().out
    assert "g_odata: ok (bit-exact)" in out and "verified: all outputs agree" in out
    assert verify_command(*paths("dot_atomic"), json_out=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["rtasks"] == 4 and data["veus"] == 3 and data["outputs"][0]["name"] == "result"


def test_run_saves_inputs_and_outputs(tmp_path, capsys):
    save = tmp_path / "r.npz"
    assert run_command(*paths("histogram_shared"), save=str(save)) == 0
    z = np.load(save)
    assert set(z.files) == {f"{p}.{n}" for p in ("in", "out") for n in ("data", "hist", "n")}
    assert z["in.hist"].sum() == 0 and z["out.hist"].sum() == 3000 and int(z["in.n"]) == 3000
    assert np.array_equal(z["out.hist"], np.bincount(z["in.data"], minlength=256))
    assert "hist: uint32[256]" in capsys.readouterr().out


def test_run_converted_wrapper(tmp_path):
    """--converted: the converted file's plain wrapper runs under the legacy spec and gives the legacy result."""
    cu, spec = paths("softmax_rows")
    out = tmp_path / "softmax_rows.rtask.cu"
    proc = subprocess.run([sys.executable, "-m", "rtransform.cli", "convert", cu, "-o", str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    conv = run_file(str(out), spec, converted=True)
    legacy = run_file(cu, spec)
    assert np.array_equal(conv.outputs["out"], legacy.outputs["out"])


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rtransform.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def test_cli_errors_are_one_line(tmp_path):
    cu, spec = paths("grid_stride_axpy")
    p = cli("verify", str(tmp_path / "missing.cu"), "--spec", spec)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "no such file" in p.stderr
    bad = tmp_path / "bad.spec.yaml"
    bad.write_text(Path(spec).read_text().replace("kind: scalar, dtype: float32", "kind: scalar, dtype: float64"))
    p = cli("run", cu, "--spec", str(bad))
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0
    assert "args[1] (a).dtype: parameter 'a' has type float, which needs float32, not float64" in p.stderr


CHAINED = """
// Illegal in CUDA (blocks are unordered) but deterministic when blocks run one after another: each block
// extends its predecessor's value. A shuffled rTask order must expose it.
__global__ void chained(int* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = (blockIdx.x == 0 ? 0 : out[blockIdx.x - 1]) + 1;
}
"""


def test_cli_verify_reports_a_difference(tmp_path):
    (tmp_path / "chained.cu").write_text(CHAINED)
    (tmp_path / "chained.spec.yaml").write_text(
        "kernel: chained\ngrid: [8]\nblock: [32]\nargs:\n  - {name: out, kind: buffer, dtype: int32, size: 8, "
        "init: zeros}\noutputs: [out]\n")
    legacy = run_file(str(tmp_path / "chained.cu"), str(tmp_path / "chained.spec.yaml")).outputs["out"]
    assert legacy.tolist() == list(range(1, 9))
    p = cli("verify", str(tmp_path / "chained.cu"), "--spec", str(tmp_path / "chained.spec.yaml"))
    # the legacy kernel itself, with its blocks in the order that differed, gives another result: exit 4, not 1
    assert p.returncode == Exit.LEGACY_ORDER
    m = re.search(r"out: DIFFERS at index (\d+): legacy (\d+) vs rKernel (\d+); max error \S+, (\d+) element", p.stdout)
    assert m, p.stdout
    i, want, got = int(m.group(1)), int(m.group(2)), int(m.group(3))
    assert want == i + 1 and got != want
    assert ("NOT VERIFIABLE: the legacy kernel's own result depends on block order (races between blocks)"
            in p.stdout and "1 of 1 output(s) differ" in p.stdout)
    p = cli("verify", str(tmp_path / "chained.cu"), "--spec", str(tmp_path / "chained.spec.yaml"), "--json")
    data = json.loads(p.stdout)
    assert p.returncode == Exit.LEGACY_ORDER and data["ok"] is False and data["outputs"][0]["first_index"] == i
    assert data["outcome"] == "legacy order-dependent" and data["legacy_dependence"]


GRID_SYNC = """#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void two_phase(float* y, int n) {
  cg::grid_group grid = cg::this_grid();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.f;
  grid.sync();
  if (i < n) y[i] *= 2.f;
}
"""


def test_verify_reports_a_refused_kernel_in_one_line(tmp_path, capsys):
    (tmp_path / "gs.cu").write_text(GRID_SYNC)
    (tmp_path / "gs.spec.yaml").write_text(
        "kernel: two_phase\ngrid: [2]\nblock: [32]\nargs:\n  - {name: y, kind: buffer, dtype: float32, size: 50}\n"
        "  - {name: n, kind: scalar, dtype: int32, value: 50}\noutputs: [y]\n")
    assert verify_command(str(tmp_path / "gs.cu"), str(tmp_path / "gs.spec.yaml")) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"{tmp_path / 'gs.cu'}:4:") and "grid" in err


def test_gpu_device_without_gpu_exits_3():
    ok, reason = gpu_available()
    if ok:
        pytest.skip(f"a GPU is present ({reason})")
    cu, spec = paths("grid_stride_axpy")
    p = cli("run", cu, "--spec", spec, "--device", "gpu")
    assert p.returncode == 3 and p.stderr.startswith("no GPU: ") and p.stderr.strip().count("\n") == 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_verify_on_gpu(name):
    ok, reason = gpu_available()
    if not ok:
        pytest.skip(reason)
    assert run_file(*paths(name), device="gpu").outputs
    res = verify_file(*paths(name), device="gpu")
    assert res.ok, res.summary()


# A dropped barrier is a race: the emulator exposes it every time, real hardware only when the timing is
# unlucky (argmax_rows without its first sync passed on the H100), so the GPU check uses the index mutations.
GPU_BROKEN = [(n, c) for n, c in BROKEN if c.__name__ != "drop_first_sync"]


@pytest.mark.gpu
@pytest.mark.parametrize("name,corrupt", GPU_BROKEN, ids=[f"{n}-{c.__name__}" for n, c in GPU_BROKEN])
def test_verify_on_gpu_catches_broken_conversion(name, corrupt):
    ok, reason = gpu_available()
    if not ok:
        pytest.skip(reason)
    assert not verify_file(*paths(name), device="gpu", transform=corrupt).ok


# ---- the stress order itself (a mutation that stops shuffling must be caught) ---------------------------------
LAST_WRITER = """\
// Every block writes its index to the same word: on a GPU the block order is unspecified, so the result is too.
__global__ void last_writer(int* out) { if (threadIdx.x == 0) out[0] = blockIdx.x; }
"""


@pytest.mark.parametrize("blocks", [3, 4, 7, 16])
def test_stress_order_is_not_the_identity(tmp_path, blocks):
    from rtransform.verify import task_order
    (tmp_path / "k.yaml").write_text(f"kernel: last_writer\ngrid: [{blocks}]\nblock: [32]\nargs:\n"
                                     f"  - {{name: out, kind: buffer, dtype: int32, size: 1, init: zeros}}\n"
                                     f"outputs: [out]\n")
    order = task_order(load_spec(str(tmp_path / "k.yaml")))
    assert sorted(order.tolist()) == list(range(blocks)) and order.tolist() != list(range(blocks))


def test_verify_runs_rtasks_out_of_order(tmp_path):
    """A kernel whose result depends on the block order is reported as differing: verify really shuffles."""
    (tmp_path / "k.cu").write_text(LAST_WRITER)
    (tmp_path / "k.yaml").write_text("kernel: last_writer\ngrid: [6]\nblock: [32]\nargs:\n"
                                     "  - {name: out, kind: buffer, dtype: int32, size: 1, init: zeros}\n"
                                     "outputs: [out]\n")
    res = verify_file(str(tmp_path / "k.cu"), str(tmp_path / "k.yaml"))
    assert not res.ok and res.outputs[0].mismatches == 1


def test_parameter_named_like_a_cuda_type(tmp_path):
    """llm.c's permute kernels name a parameter `dim3`: the legacy indices the conversion declares still compile
    (they spell ::dim3 / ::uint3), and the rKernel matches the legacy kernel."""
    (tmp_path / "k.cu").write_text(
        "__global__ void scale(float* out, const float* in, int N, int dim3) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < N) out[i] = in[i] * dim3;\n"
        "}\n")
    (tmp_path / "k.yaml").write_text(
        "kernel: scale\ngrid: [3]\nblock: [32]\nargs:\n"
        "  - {name: out, kind: buffer, dtype: float32, size: 90, init: zeros}\n"
        "  - {name: in, kind: buffer, dtype: float32, size: 90}\n"
        "  - {name: N, kind: scalar, dtype: int32, value: 90}\n"
        "  - {name: dim3, kind: scalar, dtype: int32, value: 3}\n"
        "outputs: [out]\n")
    res = verify_file(str(tmp_path / "k.cu"), str(tmp_path / "k.yaml"))
    assert res.ok, res
    legacy = run_file(str(tmp_path / "k.cu"), str(tmp_path / "k.yaml"))
    assert np.array_equal(legacy.outputs["out"], legacy.inputs["in"] * np.float32(3))
