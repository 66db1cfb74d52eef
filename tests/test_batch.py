"""`rtransform convert-all` on trees of kernels written for these tests: report, exit code, cache, jobs.

Truth comes from the fixtures themselves: every construct a diagnostic must point at carries a marker
comment on its line, and every file's expected status is written down beside its text."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rtransform import batch
from toolchain.demangle import demangle_entry
from toolchain.ptxas import parse_ptxas, run_ptxas
from vdevice import RUNTIME_INCLUDE

REFUSE = "// REFUSE"   # the line the refusal must point at
BROKEN = "// BROKEN"   # the line the clang error must point at

# rel path -> (source text, file status, [(kernel, kernel status)])
TREE: dict[str, tuple[str, str, list[tuple[str, str]]]] = {
    "ew/axpby.cu": ("""\
// y = a*x + b*y with a grid-stride loop; clamp with an early return
__global__ void axpby(float* __restrict__ y, const float* __restrict__ x, float a, float b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = a * x[i] + b * y[i];
}
__global__ void clamp_inplace(float* v, float lo, float hi, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  v[i] = fminf(fmaxf(v[i], lo), hi);
}
""", "converted", [("axpby", "converted"), ("clamp_inplace", "converted")]),
    "ew/consts.cuh": ("""\
#pragma once
#define SCALE_FACTOR 3.0f
__device__ inline float scaled(float v) { return v * SCALE_FACTOR; }
""", "no_kernels", []),
    "ew/scale_by.cu": ("""\
#include "consts.cuh"
__global__ void scale_all(float* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = scaled(v[i]);
}
""", "converted", [("scale_all", "converted")]),
    "red/block/sum_sq.cu": ("""\
#define SUMSQ_THREADS 128
__global__ void sum_squares(const float* x, float* partial, int n) {
  __shared__ float buf[SUMSQ_THREADS];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : 0.0f;
  buf[threadIdx.x] = v * v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = buf[0];
}
""", "converted", [("sum_squares", "converted")]),
    "red/warp/max_shfl.cu": ("""\
__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__global__ void row_max(const float* x, float* out, int cols) {
  const float* row = x + (size_t)blockIdx.x * cols;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += 32) m = fmaxf(m, row[c]);
  m = warp_max(m);
  if (threadIdx.x == 0) out[blockIdx.x] = m;
}
""", "converted", [("row_max", "converted")]),
    "tiles/deep/er/transpose_tile.cu": ("""\
template <int T>
__global__ void transpose_tile(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[T][T + 1];
  int c = blockIdx.x * T + threadIdx.x, r = blockIdx.y * T + threadIdx.y;
  if (r < rows && c < cols) tile[threadIdx.y][threadIdx.x] = in[r * cols + c];
  __syncthreads();
  c = blockIdx.y * T + threadIdx.x;
  r = blockIdx.x * T + threadIdx.y;
  if (r < cols && c < rows) out[r * rows + c] = tile[threadIdx.x][threadIdx.y];
}
""", "converted", [("transpose_tile", "converted")]),
    "inc/relu_kernel.cuh": ("""\
#pragma once
__global__ void relu_inplace(float* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = v[i] > 0.0f ? v[i] : 0.0f;
}
""", "converted", [("relu_inplace", "converted")]),
    "bad/grid_sync.cu": ("""\
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void mirror_add(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= 2.0f;
  cg::this_grid().sync();  // REFUSE
  if (i < n) data[i] += data[n - 1 - i];
}
__global__ void negate(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = -data[i];
}
""", "partial", [("mirror_add", "refused"), ("negate", "converted")]),
    "bad/launch_child.cu": ("""\
__global__ void fill_child(float* y, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}
__global__ void fill_parent(float* y, int n) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    fill_child<<<(n + 63) / 64, 64>>>(y, 1.5f, n);  // REFUSE
}
""", "partial", [("fill_child", "converted"), ("fill_parent", "refused")]),
    "bad/tex_ref.cu": ("""\
texture<float, 1> weights_tex;
__global__ void gather_weights(float* out, const int* idx, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch(weights_tex, idx[i]);  // REFUSE
}
""", "refused", [("gather_weights", "refused")]),
    "bad/asm_ctaid.cu": ("""\
__global__ void stamp_block(unsigned* out) {
  unsigned b;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(b));  // REFUSE
  out[b * blockDim.x + threadIdx.x] = b;
}
""", "refused", [("stamp_block", "refused")]),
    "broken.cu": ("""\
__global__ void half_done(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = x[i] * 2.0f  // BROKEN
  if (i < n) y[i] = v;
}
""", "failed", [("half_done", "failed")]),
    "helpers_only.cu": ("""\
// device helpers and host code, no kernel
__device__ float lerp3(float a, float b, float t) { return a + t * (b - a); }
static int host_side(int x) { return x * 2; }
""", "no_kernels", []),
}
TRANSPOSE_SPEC = """\
kernel: transpose_tile
template_args: [8]
grid: [2, 3, 1]
block: [8, 8, 1]
args:
  - {name: in, kind: buffer, dtype: float32, size: 480, init: random}
  - {name: out, kind: buffer, dtype: float32, size: 480, init: zeros}
  - {name: rows, kind: scalar, dtype: int32, value: 24}
  - {name: cols, kind: scalar, dtype: int32, value: 20}
outputs: [out]
"""


def write_tree(root: Path, files: dict[str, tuple[str, str, list]]) -> Path:
    """Write fixture sources under root."""
    for rel, (text, _, _) in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def marked_line(text: str, marker: str) -> int:
    """1-based line number of the marker (the independent truth for a diagnostic's location)."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


def out_files(out: Path) -> dict[str, bytes]:
    """Every output file but the report and the cache, by relative path."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name not in (batch.REPORT_NAME, batch.CACHE_NAME)}


def stable(report: dict) -> dict:
    """The part of a report that must not depend on jobs, timing or the cache."""
    return {"files": report["files"], "counts": report["counts"], "exit_code": report["exit_code"]}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The fixture tree plus a dangling link (an unreadable source)."""
    root = write_tree(tmp_path_factory.mktemp("src"), TREE)
    os.symlink(root / "no_such_target.cu", root / "ghost.cu")
    return root


@pytest.fixture(scope="module")
def first_run(tree, tmp_path_factory) -> tuple[Path, dict, int]:
    """One cold conversion of the tree with two jobs: (out dir, report, exit code)."""
    out = tmp_path_factory.mktemp("out")
    code = batch.convert_all_command(str(tree), str(out), jobs=2)
    return out, json.loads((out / batch.REPORT_NAME).read_text()), code


def test_report_lists_every_file_and_kernel_with_the_right_status(tree, first_run):
    _, report, _ = first_run
    files = {f["path"]: f for f in report["files"]}
    assert sorted(files) == sorted(list(TREE) + ["ghost.cu"])
    for rel, (_, status, kernels) in TREE.items():
        assert files[rel]["status"] == status, rel
        assert [(k["name"], k["status"]) for k in files[rel]["kernels"]] == kernels, rel
    assert files["ghost.cu"]["status"] == "failed"
    assert "cannot read" in files["ghost.cu"]["reason"]


def test_reasons_are_the_converter_line_at_the_offending_construct(tree, first_run):
    _, report, _ = first_run
    files = {f["path"]: f for f in report["files"]}
    for rel, (text, _, kernels) in TREE.items():
        path = os.path.abspath(tree / rel)
        for k in files[rel]["kernels"]:
            if k["status"] == "converted":
                assert k["reason"] is None
                continue
            marker = REFUSE if k["status"] == "refused" else BROKEN
            assert re.fullmatch(rf"{re.escape(path)}:{marked_line(text, marker)}:\d+: error: .+", k["reason"]), \
                (rel, k["reason"])
    broken_line = marked_line(TREE["broken.cu"][0], BROKEN)
    assert files["broken.cu"]["reason"].startswith(f"{os.path.abspath(tree / 'broken.cu')}:{broken_line}:")
    assert "\n" not in "".join(str(f["reason"]) for f in report["files"])


def test_counts_match_the_fixtures(first_run):
    _, report, _ = first_run
    counts = report["counts"]
    want_files = Counter(status for _, status, _ in TREE.values()) + Counter(failed=1)  # + ghost.cu
    assert counts["files"] == dict(want_files)
    assert counts["kernels"] == dict(Counter(s for _, _, ks in TREE.values() for _, s in ks))
    assert counts["features"]["barrier"] == 2  # sum_squares and transpose_tile call __syncthreads()
    assert counts["features"]["template"] == 1  # transpose_tile
    assert counts["features"]["warp_intrinsics"] == 1  # row_max, through its callee warp_max
    reasons = counts["reasons"]
    assert sum(reasons.values()) == counts["kernels"]["refused"] + counts["files"]["failed"]
    for needle in ("this_grid", "dynamic parallelism", "tex1Dfetch", "%ctaid", "expected ';'", "cannot read"):
        assert sum(v for k, v in reasons.items() if needle in k) >= 1, needle


def test_exit_code_and_strict(tmp_path, first_run):
    assert first_run[2] == 1  # broken.cu and ghost.cu failed
    refused_only = {k: v for k, v in TREE.items() if v[1] != "failed"}
    src = write_tree(tmp_path / "src", refused_only)
    assert batch.convert_all_command(str(src), str(tmp_path / "out"), jobs=2) == 0
    # strict changes only the verdict: the same output dir answers from the cache
    assert batch.convert_all_command(str(src), str(tmp_path / "out"), jobs=2, strict=True) == 1
    good_only = {k: v for k, v in TREE.items() if v[1] in ("converted", "no_kernels")}
    src2 = write_tree(tmp_path / "src2", good_only)
    assert batch.convert_all_command(str(src2), str(tmp_path / "out2"), jobs=1, strict=True) == 0


def test_outputs_mirror_the_tree(tree, first_run):
    out, report, _ = first_run
    for f in report["files"]:
        rel = f["path"]
        cu, meta = batch.output_paths(rel)
        if f["status"] == "failed":
            assert not (out / cu).exists() and not (out / meta).exists(), rel
        elif f["status"] == "no_kernels":
            assert (out / cu).read_text() == TREE[rel][0]
            assert not (out / meta).exists()
        else:
            converted = [k["name"] for k in f["kernels"] if k["status"] == "converted"]
            text = (out / cu).read_text() if converted else ""
            assert (out / cu).exists() == bool(converted), rel  # never an empty converted source
            for name in converted:
                assert f"{name}__rtask" in text
            data = json.loads((out / meta).read_text())
            assert [rk["name"] for rk in data["rkernels"]] == converted
            assert sorted(r["name"] for r in data["refused"]) == sorted(
                k["name"] for k in f["kernels"] if k["status"] == "refused")
    assert (out / "inc/relu_kernel.cuh").exists() and (out / "inc/relu_kernel.cuh.rkernels.json").exists()
    assert (out / "tiles/deep/er/transpose_tile.rkernels.json").exists()


def test_cache_second_run_converts_nothing_and_changes_nothing(tree, tmp_path):
    src = Path(shutil.copytree(tree, tmp_path / "src", symlinks=True))
    out = tmp_path / "out"
    cold = batch.convert_all(src, out, jobs=2)
    before = out_files(out)
    warm = batch.convert_all(src, out, jobs=2)
    assert warm["run"]["converted_files"] == 0
    assert warm["run"]["cache_hits"] == len(cold["files"])
    assert out_files(out) == before
    assert stable(warm) == stable(cold)
    # an edited file is converted again, alone
    (src / "ew/axpby.cu").write_text(TREE["ew/axpby.cu"][0] + "// edited\n")
    assert batch.convert_all(src, out, jobs=2)["run"]["converted_files"] == 1
    # an edited local header is converted again with the file that includes it
    (src / "ew/consts.cuh").write_text(TREE["ew/consts.cuh"][0].replace("3.0f", "4.0f"))
    again = batch.convert_all(src, out, jobs=2)
    assert again["run"]["converted_files"] == 2
    assert "4.0f" in (out / "ew/consts.cuh").read_text()
    # an output deleted by hand is written again; a vanished source takes its outputs along
    (out / "red/block/sum_sq.cu").unlink()
    (src / "ew/scale_by.cu").unlink()
    last = batch.convert_all(src, out, jobs=2)
    assert last["run"]["converted_files"] == 1 and (out / "red/block/sum_sq.cu").exists()
    assert not (out / "ew/scale_by.cu").exists() and not (out / "ew/scale_by.rkernels.json").exists()


def test_jobs_1_and_2_give_the_same_report(tree, tmp_path, first_run):
    one = batch.convert_all(tree, tmp_path / "one", jobs=1)
    assert stable(one) == stable(first_run[1])
    assert out_files(tmp_path / "one") == out_files(first_run[0])


def test_json_output_and_no_progress_bar_without_a_tty(tree, tmp_path, capsys):
    code = batch.convert_all_command(str(tree), str(tmp_path / "out"), jobs=2, json_out=True)
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert printed == json.loads((tmp_path / "out" / batch.REPORT_NAME).read_text())
    assert code == printed["exit_code"] == 1
    assert captured.err == ""
    batch.convert_all_command(str(tree), str(tmp_path / "out"), jobs=2)
    captured = capsys.readouterr()
    assert captured.err == ""  # stderr is not a TTY under pytest: no progress bar
    lines = captured.out.splitlines()
    assert lines[0].split() == ["FILE", "KERNEL", "STATUS", "DETAIL"]
    row = next(ln for ln in lines if ln.startswith("bad/grid_sync.cu") and "mirror_add" in ln)
    assert "refused" in row and "this_grid" in row


def _stderr_on_a_tty(src: Path, out: Path, json_out: bool) -> str:
    """Run convert-all in a child whose stderr is a terminal (120 columns); what it wrote there."""
    import fcntl
    import pty
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    code = (f"import sys; from rtransform.batch import convert_all_command as c; "
            f"sys.exit(c({str(src)!r}, {str(out)!r}, jobs=2, json_out={json_out}))")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=slave,
                             cwd=Path(batch.__file__).resolve().parents[1])
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    child.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode(errors="replace")


def test_progress_bar_on_a_tty_unless_json(tmp_path):
    src = write_tree(tmp_path / "src", {k: v for k, v in TREE.items() if k.startswith("ew/")})
    bar = _stderr_on_a_tty(src, tmp_path / "out1", json_out=False)
    assert "convert-all: 100%" in bar and "3/3" in bar
    assert "convert-all" not in _stderr_on_a_tty(src, tmp_path / "out2", json_out=True)


@pytest.mark.parametrize("args, message", [
    (("{tmp}/missing", "{tmp}/out"), "source directory not found"),
    (("{tmp}/src", "{tmp}/src"), "(the source tree), an input of this run"),
    (("{tmp}/src", "{tmp}"), "holds {tmp}/src (the source tree)"),
    (("{tmp}/src", "{tmp}/file.txt"), "exists and is not a folder"),
])
def test_bad_arguments_give_one_error_line_and_exit_2(tmp_path, capsys, args, message):
    (tmp_path / "src").mkdir()
    (tmp_path / "file.txt").write_text("x")
    code = batch.convert_all_command(*(a.format(tmp=tmp_path) for a in args))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message.format(tmp=tmp_path) in err[0]


def test_bad_jobs(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    assert batch.convert_all_command(str(tmp_path / "src"), str(tmp_path / "out"), jobs=0) == 2
    assert "--jobs" in capsys.readouterr().err


def test_resources_without_nvcc_is_a_usage_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "src").mkdir()
    monkeypatch.setattr(batch, "find_nvcc", lambda: None)  # a machine without any nvcc
    assert batch.convert_all_command(str(tmp_path / "src"), str(tmp_path / "out"), resources=True) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs nvcc" in err[0]


# ---- faults injected into the converter: one file misbehaves, the batch goes on ---------------------------
def _fault(monkeypatch, victim: str, action):
    """Make the converter misbehave on files whose name contains victim (workers are forked: they inherit it)."""
    import converter
    real = converter.convert_source

    def convert_source(text, filename, *args, **kwargs):
        if victim in filename:
            action()
        return real(text, filename, *args, **kwargs)

    monkeypatch.setattr(converter, "convert_source", convert_source)


def _crash():
    raise RuntimeError("index out of range in the rewriter\nsecond line of the message")


# the per-file timeout: only the hanging file may reach it, so it is far above what a good file takes even on a loaded
# machine (2 s made the good files time out too under pytest-xdist on a busy machine)
FILE_TIMEOUT_S = 20


@pytest.mark.parametrize("action, jobs, reason, transient", [
    (_crash, 2, "converter crashed: RuntimeError: index out of range in the rewriter", False),
    (lambda: os._exit(3), 2, "converter process died", True),
    (lambda: time.sleep(600), 1, f"timeout: not done within {FILE_TIMEOUT_S} s", True),
])
def test_one_misbehaving_file_never_stops_the_batch(tmp_path, monkeypatch, action, jobs, reason, transient):
    good = {k: v for k, v in TREE.items() if k.startswith(("ew/", "red/"))}
    src = write_tree(tmp_path / "src", good)
    _fault(monkeypatch, "sum_sq.cu", action)
    report = batch.convert_all(src, tmp_path / "out", jobs=jobs, file_timeout_s=FILE_TIMEOUT_S)
    files = {f["path"]: f for f in report["files"]}
    assert files["red/block/sum_sq.cu"]["status"] == "failed"
    got = files["red/block/sum_sq.cu"]["reason"]
    assert got.startswith(reason) and "\n" not in got and "second line" not in got
    assert not (tmp_path / "out/red/block/sum_sq.cu").exists()
    for rel, (_, status, _) in good.items():
        if rel != "red/block/sum_sq.cu":
            assert files[rel]["status"] == status, rel
    assert report["exit_code"] == 1
    monkeypatch.undo()  # the converter behaves again: a transient failure is retried, a crash stays cached
    again = batch.convert_all(src, tmp_path / "out", jobs=jobs)
    assert again["run"]["converted_files"] == (1 if transient else 0)


# ---- --verify: legacy against rKernel on the CPU emulator ---------------------------------------------------
LAST_WRITER = """\
// every block stamps its index into out[0]: the result depends on which block runs last
__global__ void last_writer(int* out) {
  if (threadIdx.x == 0) out[0] = blockIdx.x;
}
"""
LAST_WRITER_SPEC = """\
kernel: last_writer
grid: [6, 1, 1]
block: [32, 1, 1]
args:
  - {name: out, kind: buffer, dtype: int32, size: 1, init: zeros}
outputs: [out]
"""


def test_verify_reports_verified_differs_no_spec_and_error(tmp_path):
    files = {k: v for k, v in TREE.items() if k in ("tiles/deep/er/transpose_tile.cu", "ew/axpby.cu",
                                                    "red/block/sum_sq.cu")}
    src = write_tree(tmp_path / "src", files)
    (src / "tiles/deep/er/transpose_tile.spec.yaml").write_text(TRANSPOSE_SPEC)
    (src / "last_writer.cu").write_text(LAST_WRITER)
    (src / "last_writer.spec.yaml").write_text(LAST_WRITER_SPEC)
    (src / "red/block/sum_squares.spec.yaml").write_text("kernel: sum_squares\ngrid: [2]\n")  # incomplete
    report = batch.convert_all(src, tmp_path / "out", jobs=2, verify=True)
    kernels = {k["name"]: k for f in report["files"] for k in f["kernels"]}
    assert kernels["transpose_tile"]["verify"] == "verified"
    assert kernels["axpby"]["verify"] == kernels["clamp_inplace"]["verify"] == "no spec"
    # the legacy launch runs blocks in order, so its last writer is block 5; the rTasks run shuffled
    assert kernels["last_writer"]["verify"] == "differs" and "legacy 5" in kernels["last_writer"]["verify_detail"]
    assert kernels["sum_squares"]["verify"] == "error" and "missing field" in kernels["sum_squares"]["verify_detail"]
    assert report["counts"]["verify"] == {"differs": 1, "error": 1, "no spec": 2, "verified": 1}
    assert report["exit_code"] == 1


# ---- resources (nvcc -Xptxas -v) --------------------------------------------------------------------------
PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z6kernelPf' for 'sm_90'
ptxas info    : Function properties for _Z6kernelPf
    8 bytes stack frame, 12 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 1040 bytes smem
ptxas info    : Function properties for _Z6helperf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_ZN2ns4tileILi8EEEvPKfPf' for 'sm_90'
ptxas info    : Function properties for _ZN2ns4tileILi8EEEvPKfPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 288 bytes smem, 368 bytes cmem[0]
"""


def test_parse_ptxas_log():
    got = parse_ptxas(PTXAS_LOG)
    assert got == {
        "_Z6kernelPf": {"registers": 40, "spill_stores": 12, "spill_loads": 4, "stack_frame": 8,
                        "static_smem_bytes": 1040},
        "_ZN2ns4tileILi8EEEvPKfPf": {"registers": 12, "spill_stores": 0, "spill_loads": 0, "stack_frame": 0,
                                     "static_smem_bytes": 288},
    }


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt not installed")
@pytest.mark.parametrize("symbol", ["_Z6kernelPf", "_ZN2ns4tileILi8EEEvPKfPf", "_Z14transpose_tileILi16EEvPKfPfii",
                                    "_ZN5outer5inner3fooIfLi4EEEvT_", "_Z4gemmILi64ELin2ELb1ELb0EEvPf",
                                    "_Z3addIjLj7EEvP4Vec3", "_ZN12_GLOBAL__N_16hiddenEv", "plain_c_kernel"])
def test_demangle_entry_agrees_with_cxxfilt(symbol):
    demangled = subprocess.run(["c++filt", symbol], capture_output=True, text=True).stdout.strip()
    head = re.sub(r"\([^()]*\)$", "", demangled)  # drop the parameter list
    m = re.search(r"<(.*)>$", head)
    name = re.sub(r"<.*>$", "", head).split("::")[-1].split()[-1]
    args = "" if m is None else re.sub(r"\b(\d+)u\b", r"\1", m.group(1)).replace("(unsigned int)", "")
    assert demangle_entry(symbol) == (name, args)


def _legacy_ptxas(nvcc: str, path: Path, extra: str = "") -> dict[str, dict]:
    """ptxas figures of the unconverted kernels (the legacy baseline), compiled directly."""
    ok, log = run_ptxas(path.read_text() + extra, nvcc, [str(RUNTIME_INCLUDE), str(path.parent)])
    assert ok, log
    return {demangle_entry(k)[0]: v for k, v in parse_ptxas(log).items()}


@pytest.mark.nvcc
@pytest.mark.skipif(batch.find_nvcc() is None, reason="nvcc not found")
def test_resources_per_rkernel_from_ptxas(tmp_path):
    files = {k: v for k, v in TREE.items() if k in ("red/block/sum_sq.cu", "tiles/deep/er/transpose_tile.cu")}
    src = write_tree(tmp_path / "src", files)
    report = batch.convert_all(src, tmp_path / "out", jobs=2, resources=True)
    kernels = {k["name"]: k for f in report["files"] for k in f["kernels"]}
    # a template without a spec is not instantiated
    meta = json.loads((tmp_path / "out/tiles/deep/er/transpose_tile.rkernels.json").read_text())
    assert meta["rkernels"][0]["ptxas"]["instances"] == [] and "no spec" in meta["rkernels"][0]["ptxas"]["note"]
    nvcc = batch.find_nvcc()
    legacy = _legacy_ptxas(nvcc, src / "red/block/sum_sq.cu")["sum_squares"]
    (res,) = kernels["sum_squares"]["resources"]
    assert 1 <= res["registers"] <= 255 and res["spill_stores"] == 0
    # the converted kernel keeps the legacy buffer (128 floats) and at most adds the rTask slot (48 bytes) +
    # alignment: the plain wrapper synchronises with __syncthreads, so a kernel without __syncthreads_count/and/or
    # leaves the slot unused and the compiler drops it
    assert legacy["static_smem_bytes"] == 512
    assert legacy["static_smem_bytes"] <= res["static_smem_bytes"] <= legacy["static_smem_bytes"] + 64
    # with a spec giving the template arguments, the template is instantiated and measured
    (src / "tiles/deep/er/transpose_tile.spec.yaml").write_text(TRANSPOSE_SPEC)
    report = batch.convert_all(src, tmp_path / "out", jobs=2, resources=True)
    kernels = {k["name"]: k for f in report["files"] for k in f["kernels"]}
    (inst,) = kernels["transpose_tile"]["resources"]
    assert inst["template_args"] == [8]
    legacy_t = _legacy_ptxas(nvcc, src / "tiles/deep/er/transpose_tile.cu",
                             "\nvoid* inst() { return (void*)&transpose_tile<8>; }\n")["transpose_tile"]
    assert legacy_t["static_smem_bytes"] == 8 * 9 * 4
    assert legacy_t["static_smem_bytes"] <= inst["static_smem_bytes"] <= legacy_t["static_smem_bytes"] + 64


# ---- throughput: a benchmark, not a test (tests/convert_all_bench.py; README "Measured") -------------------------


# ---- the corpus index -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus_index() -> dict:
    """The index built from the corpus as it is (no nvcc: that part has its own test)."""
    from rtransform import corpus_index
    return corpus_index.build_index(None, None)


def test_index_lists_every_binding_kernel(corpus_index):
    from kernel_corpus.bindings import registry
    entries = {(e["source"], e["kernel"]): e for e in corpus_index["rkernels"]}
    for b in registry.all():
        for k in b.kernels:
            listed = entries[(b.source, k)]["bindings"]
            assert any(x["op_type"] == b.op_type and x["variant"] == b.variant for x in listed), (b.name, k)
    assert corpus_index["problems"] == []
    for e in corpus_index["rkernels"]:
        assert e["status"] in ("converted", "refused")
        assert (e["reason"] is None) == (e["status"] == "converted")
        assert e["profile"] == {} and all(i["verified"] == "not verified" for i in e["instances"].values())


@pytest.mark.parametrize("shape, m, n, batch", [("MatMul(64x128, 128x96)", 64, 96, 1),
                                                 ("MatMul(2x32x64, 64x48)", 32, 48, 2)])
def test_index_rtask_counts_follow_the_kernel_geometry(corpus_index, shape, m, n, batch):
    # gemm.cu: gemm_tiled<TILE> runs a TILE x TILE block per output tile, grid (ceil(N/TILE), ceil(M/TILE), batch)
    (e,) = [e for e in corpus_index["rkernels"] if e["kernel"] == "gemm_tiled"]
    (ev,) = [r for r in e["rtasks"] if r["shape"] == shape and r["op_type"] == "MatMul"]
    grid = [-(-n // 16), -(-m // 16), batch]
    assert ev["grid"] == grid and ev["rtasks"] == grid[0] * grid[1] * grid[2]
    assert ev["threads_per_rtask"] == 256 and ev["instance"] == "gemm_tiled<16, false, 0>"


@pytest.mark.parametrize("pick", [lambda d, s: d.op_type == "Conv" and "strides" in s.attrs,
                                  lambda d, s: d.op_type == "Split", lambda d, s: d.op_type == "Slice",
                                  lambda d, s: d.op_type == "MaxPool" and "pads" in s.attrs,
                                  lambda d, s: d.op_type == "LSTMCell" and not s.test])
def test_reference_output_shapes_agree_with_onnxruntime(pick):
    """The index's output shapes (shape inference, through a custom op's equivalent graph) are what onnxruntime
    computes, including for model-sized shapes that only the index evaluates."""
    import numpy as np
    import onnxruntime as ort
    from kernel_corpus import index as ix
    from kernel_corpus.reference import node_model, shape_node
    d, s = next((d, s) for d, s in ix.reference_shapes() if pick(d, s))
    node = shape_node(d, s)
    session = ort.InferenceSession(node_model(node, d).SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {f"x{i}": np.ones(sh, np.float32) for i, sh in enumerate(s.inputs) if sh is not None}
    got = [o.shape for o in session.run(None, feeds)]
    assert [t.shape for t in node.outputs] == got


def test_index_keeps_profiles_and_verification_of_unchanged_sources_only(corpus_index):
    import copy
    from rtransform import corpus_index as ci
    old = copy.deepcopy(corpus_index)
    a, b = old["rkernels"][0], old["rkernels"][1]
    a["profile"] = {"NVIDIA H100": {a["rtasks"][0]["shape"]: 3.5}}
    a_inst = next(iter(a["instances"]))
    a["instances"][a_inst]["verified"] = "verified"
    b["profile"] = {"NVIDIA H100": {"x": 1.0}}
    b_inst = next(iter(b["instances"]))
    b["instances"][b_inst]["verified"] = "differs"
    b["source_sha256"] = "0" * 64  # its source changed since
    new = ci.build_index(old, None)
    na, nb = new["rkernels"][0], new["rkernels"][1]
    assert na["profile"] == a["profile"] and na["instances"][a_inst]["verified"] == "verified"
    assert nb["profile"] == {} and nb["instances"][b_inst]["verified"] == "not verified"


def test_index_main_writes_the_file(tmp_path, capsys):
    from kernel_corpus import index as ix
    from rtransform.corpus_index import index_command
    assert index_command(tmp_path / "index.json", no_nvcc=True) == 0
    data = json.loads((tmp_path / "index.json").read_text())
    assert data["schema"] == ix.SCHEMA and len(data["rkernels"]) >= 1
    assert f"{len(data['rkernels'])} kernels" in capsys.readouterr().err


@pytest.mark.nvcc
@pytest.mark.skipif(batch.find_nvcc() is None, reason="nvcc not found")
def test_index_registers_per_instance(corpus_index):
    import copy
    from kernel_corpus.bindings import LEGACY_DIR
    from rtransform import corpus_index as ci
    entries = {(e["source"], e["kernel"]): copy.deepcopy(e) for e in corpus_index["rkernels"]
               if e["source"] == "layout.cu"}
    text = (LEGACY_DIR / "layout.cu").read_text()
    converted = batch.convert_kernels(text, str(LEGACY_DIR / "layout.cu")).output
    assert ci.add_resources(entries, {"layout.cu": converted}, batch.find_nvcc()) == []
    for e in entries.values():
        if e["status"] != "converted":
            continue
        for expr, inst in e["instances"].items():
            assert 1 <= inst["registers"] <= 255, expr


def test_convert_all_over_the_whole_corpus(tmp_path):
    """`rtransform convert-all kernel_corpus/legacy`: every kernel a binding launches is converted (their
    outputs are run against numpy in test_corpus/test_vdevice), exit 0, outputs and report on disk."""
    from kernel_corpus.bindings import LEGACY_DIR, registry
    res = subprocess.run([sys.executable, "-c", "from rtransform.cli import main; main()", "convert-all",
                          str(LEGACY_DIR), "-o", str(tmp_path / "out"), "--json"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    status = {(f["path"], k["name"]): k["status"] for f in report["files"] for k in f["kernels"]}
    assert status and set(status.values()) == {"converted"}
    needed = {(b.source, k) for b in registry.all() for k in b.kernels}
    assert needed <= set(status)
    assert all((tmp_path / "out" / source).is_file() for source, _ in needed)
