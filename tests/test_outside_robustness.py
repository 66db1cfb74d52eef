"""Robustness classes an outside tester found on unseen CUDA repositories (notes/fresh.md bugs 8-12): convert-all
agrees with convert on host-code clang errors, `../` project headers are local, struct-pointer buffers are sized by
sizeof, a shared atomic far out of bounds is a memcheck line, `-o` never replaces a user's file without --force, and
an NVRTC compile has a watchdog."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rtransform import batch

REPO = Path(__file__).resolve().parents[1]

# A kernel file as tutorials write them: host code that calls a helper of a project header, the C library through
# <cuda_runtime.h> (as nvcc's brings it) and host API the parse prelude used to lack.
HOST_HEAVY = """\
#include <cuda_runtime.h>
#include "common.h"
__device__ float scale_table[4];
__global__ void scale_rows(float* m, int cols, float s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < cols) m[blockIdx.y * cols + i] *= s;
}
int main(int argc, char** argv) {
  initDevice(0);                                   // declared by common.h, which is not there
  int rows = argc > 1 ? atoi(argv[1]) : 64, cols = 256;
  float* h = (float*)malloc(rows * cols * sizeof(float));
  memset(h, 0, rows * cols * sizeof(float));
  float* pinned;
  cudaHostAlloc((void**)&pinned, 16, cudaHostAllocDefault);
  int regs = 0;
  cudaDeviceGetAttribute(&regs, cudaDevAttrMaxRegistersPerBlock, 0);
  float t[4];
  cudaMemcpyFromSymbol(t, scale_table, sizeof(t));
  float* d;
  cudaMalloc(&d, rows * cols * sizeof(float));
  scale_rows<<<dim3(1, rows), 256>>>(d, cols, 0.5f);
  free(h);
  exit(0);
}
"""


def _cli(tool: str, *args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    mod = {"rtransform": "rtransform.cli", "rammer": "rammer.cli"}[tool]
    return subprocess.run([sys.executable, "-c", f"from {mod} import main; main()", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


# ---- 1. convert-all and convert agree on host-code errors ---------------------------------------------------
def test_convert_all_converts_what_convert_converts(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "rows.cu").write_text(HOST_HEAVY)
    one = _cli("rtransform", "convert", str(src / "rows.cu"), "-o", str(tmp_path / "one.cu"))
    assert one.returncode == 0, one.stderr
    report = batch.convert_all(src, tmp_path / "out", jobs=1)
    (rec,) = report["files"]
    assert rec["status"] == "converted", rec
    assert [(k["name"], k["status"]) for k in rec["kernels"]] == [("scale_rows", "converted")]
    assert (tmp_path / "out" / "rows.cu").read_text() == (tmp_path / "one.cu").read_text()


def test_convert_all_still_fails_a_kernel_with_its_own_clang_error(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    text = HOST_HEAVY.replace('#include "common.h"\n', "").replace("  initDevice(0);", "")
    (src / "bad.cu").write_text(text.replace("m[blockIdx.y", "m[undeclared_y"))  # an error of the kernel itself
    report = batch.convert_all(src, tmp_path / "out", jobs=1)
    (rec,) = report["files"]
    assert rec["status"] == "failed" and "undeclared_y" in rec["reason"], rec


def test_a_file_without_kernels_that_clang_cannot_read_still_fails(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "notes.cu").write_text("this is not C++ at all {{{\n")
    (rec,) = batch.convert_all(src, tmp_path / "out", jobs=1)["files"]
    assert rec["status"] == "failed", rec


def test_the_parse_sees_the_c_library_through_cuda_runtime(tmp_path: Path) -> None:
    import converter
    text = HOST_HEAVY.replace('#include "common.h"\n', "").replace("  initDevice(0);", "")
    parsed = converter.parse_cuda(text, str(tmp_path / "rows.cu"))
    assert [d.spelling for d in parsed.errors()] == []


# ---- 2. a project header reached through ../ is local -------------------------------------------------------
def test_a_header_above_the_source_folder_is_sliced_as_local(tmp_path: Path) -> None:
    (tmp_path / "UTILS").mkdir()
    (tmp_path / "ch5").mkdir()
    (tmp_path / "UTILS" / "utils.h").write_text(
        "#pragma once\n#include <cuda_runtime.h>\n#include \"tiles.h\"\n"
        "inline int max_regs() { int v = 0; cudaDeviceGetAttribute(&v, cudaDevAttrMaxRegistersPerBlock, 0); "
        "return v; }\n")
    (tmp_path / "UTILS" / "tiles.h").write_text("#pragma once\n__device__ inline float half_of(float v) { return 0.5f * v; }\n"
                                                "inline void host_only() {}\n")
    src = tmp_path / "ch5" / "stencil.cu"
    src.write_text('#include "../UTILS/utils.h"\n'
                   "__global__ void halve(float* x) { x[threadIdx.x] = half_of(x[threadIdx.x]); }\n"
                   "int main() { return max_regs() > 0 ? 0 : 1; }\n")
    spec = tmp_path / "halve.yaml"
    spec.write_text("kernel: halve\ngrid: [1,1,1]\nblock: [32,1,1]\nargs:\n"
                    "- {name: x, kind: buffer, dtype: float32, size: 32, init: ones}\noutputs: [x]\n")
    from converter.slice import slice_source
    sliced = slice_source(src.read_text(), str(src))
    assert sorted(Path(h).name for h in sliced.headers) == ["tiles.h", "utils.h"]
    utils = next(t for h, t in sliced.headers.items() if h.endswith("utils.h"))
    assert "cudaDeviceGetAttribute" not in utils  # host code of the header sliced away
    res = _cli("rtransform", "run", str(src), "--spec", str(spec))
    assert res.returncode == 0, res.stderr
    assert "min=0.5 max=0.5" in res.stdout


# ---- 3. struct-pointer buffers are sized by the struct --------------------------------------------------------
AOS = """\
#include <cuda_runtime.h>
struct pair_ab { float a; float b; };
struct tagged { int id; float w; double d; };
__global__ void fill_pairs(const float* a, const float* b, struct pair_ab* res, const struct tagged* t, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { res[i].a = a[i] + b[i]; res[i].b = a[i] - b[i] + (float)t[i].id; }
}
int main() {
  int n = 1 << 12;
  size_t bytes = sizeof(float) * n, pair_bytes = sizeof(struct pair_ab) * n;
  float *a_d, *b_d;
  struct pair_ab* res_d;
  struct tagged* t_d;
  cudaMalloc((float**)&a_d, bytes);
  cudaMalloc((float**)&b_d, bytes);
  cudaMalloc((struct pair_ab**)&res_d, pair_bytes);
  cudaMalloc((void**)&t_d, sizeof(struct tagged) * n);
  fill_pairs<<<n / 256, 256>>>(a_d, b_d, res_d, t_d, n);
  return 0;
}
"""


@pytest.mark.parametrize("from_host", [True, False])
def test_struct_buffers_are_sized_by_sizeof(tmp_path: Path, from_host: bool) -> None:
    src = tmp_path / "aos.cu"
    src.write_text(AOS)
    out = tmp_path / "aos.yaml"
    res = _cli("rtransform", "spec", str(src), "--kernel", "fill_pairs", "-o", str(out),
               *(["--from-host"] if from_host else []))
    assert res.returncode == 0, res.stderr
    spec = yaml.safe_load(out.read_text())
    args = {a["name"]: a for a in spec["args"]}
    n = args["n"]["value"] if from_host else 4096
    threads = spec["grid"][0] * spec["block"][0]
    per = n if from_host else threads
    assert (args["res"]["dtype"], args["res"]["size"]) == ("float32", 2 * per)  # two floats per pair_ab
    assert (args["t"]["dtype"], args["t"]["size"]) == ("uint8", 16 * per)       # mixed fields: sizeof bytes
    assert args["t"]["init"] == "zeros"
    if from_host:
        assert "no cudaMalloc" not in out.read_text()
        ver = _cli("rtransform", "verify", str(src), "--spec", str(out))
        assert ver.returncode == 0, ver.stdout + ver.stderr


# ---- 4. a shared atomic far out of bounds is a memcheck line -------------------------------------------------
def test_a_far_out_of_bounds_shared_atomic_is_a_memcheck_line(tmp_path: Path) -> None:
    src = tmp_path / "hist.cu"
    src.write_text("__global__ void hist(const int* idx, int* out) {\n"
                   "  __shared__ int bins[10];\n"
                   "  if (threadIdx.x < 10) bins[threadIdx.x] = 0;\n"
                   "  __syncthreads();\n"
                   "  atomicAdd(bins + idx[threadIdx.x], 1);  // FAR\n"
                   "  __syncthreads();\n"
                   "  if (threadIdx.x < 10) out[threadIdx.x] = bins[threadIdx.x];\n"
                   "}\n")
    spec = tmp_path / "hist.yaml"
    spec.write_text("kernel: hist\ngrid: [1,1,1]\nblock: [32,1,1]\nargs:\n"
                    "- {name: idx, kind: buffer, dtype: int32, size: 32, init: random, low: 100000000, high: 200000000}\n"
                    "- {name: out, kind: buffer, dtype: int32, size: 10, init: zeros}\noutputs: [out]\n")
    res = _cli("rtransform", "run", str(src), "--spec", str(spec))
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "memcheck" in lines[0] and "out-of-bounds atomic" in lines[0], res.stderr
    assert "'bins'" in lines[0] and "hist.cu:5" in lines[0], lines[0]
    assert "segmentation fault" not in res.stderr


# ---- 5. -o never replaces a user's file without --force --------------------------------------------------------
def test_spec_and_convert_o_refuse_a_users_file_and_replace_their_own(tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n")
    mine = tmp_path / "mine.yaml"
    mine.write_text("kernel: k  # tuned by hand\n")
    res = _cli("rtransform", "spec", str(src), "--kernel", "k", "-o", str(mine))
    assert res.returncode == 2 and "--force" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert mine.read_text() == "kernel: k  # tuned by hand\n"
    ours = tmp_path / "ours.yaml"
    for _ in range(2):  # its own earlier output is replaced: reruns work
        assert _cli("rtransform", "spec", str(src), "--kernel", "k", "-o", str(ours)).returncode == 0
    assert _cli("rtransform", "spec", str(src), "--kernel", "k", "-o", str(mine), "--force").returncode == 0
    assert mine.read_text().startswith("# launch spec")
    hand = tmp_path / "hand.cu"
    hand.write_text("// my port\n")
    res = _cli("rtransform", "convert", str(src), "-o", str(hand))
    assert res.returncode == 2 and hand.read_text() == "// my port\n"
    for _ in range(2):
        assert _cli("rtransform", "convert", str(src), "-o", str(tmp_path / "conv.cu")).returncode == 0


def test_zoo_o_refuses_a_users_file(tmp_path: Path) -> None:
    from rammer.zoo import zoo_command
    theirs = tmp_path / "model.onnx"
    theirs.write_bytes(b"\x08\x07\x12\x07pytorch")
    assert zoo_command("lstm-tc", str(theirs), small=True) == 2
    assert theirs.read_bytes() == b"\x08\x07\x12\x07pytorch"
    ours = tmp_path / "ours.onnx"
    assert zoo_command("lstm-tc", str(ours), small=True) == 0
    assert zoo_command("lstm-tc", str(ours), small=True, seed=1) == 0
    assert zoo_command("lstm-tc", str(theirs), small=True, force=True) == 0


# ---- 6. the NVRTC watchdog --------------------------------------------------------------------------------------
def _nvrtc_or_skip():
    from vdevice import nvrtc
    ok, why = nvrtc.available()
    if not ok:
        pytest.skip(why)
    return nvrtc


SMALL = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n'


def test_watched_compile_gives_the_in_process_cubin() -> None:
    nvrtc = _nvrtc_or_skip()
    from vdevice.gpu import runtime_options
    opts = runtime_options("sm_90")
    here = nvrtc.compile_cubin(SMALL, opts, ["twice"], timeout_s=0)
    t0 = time.perf_counter()
    watched = nvrtc.compile_cubin(SMALL, opts, ["twice"], timeout_s=120)
    assert time.perf_counter() - t0 < 30
    assert (watched.cubin, watched.lowered, watched.version) == (here.cubin, here.lowered, here.version)
    with pytest.raises(nvrtc.NvrtcError, match="cannot compile"):
        nvrtc.compile_cubin("not cuda (", opts, [], timeout_s=120)


def test_a_compile_past_the_limit_fails_in_one_line_naming_the_variable(monkeypatch) -> None:
    nvrtc = _nvrtc_or_skip()
    from vdevice.gpu import runtime_options
    monkeypatch.setenv(nvrtc.TIMEOUT_ENV, "0.01")  # the child cannot even start in 10 ms: a stand-in for a hang
    t0 = time.perf_counter()
    with pytest.raises(nvrtc.NvrtcError) as err:
        nvrtc.compile_cubin(SMALL, runtime_options("sm_90"), ["twice"])
    assert time.perf_counter() - t0 < 10
    msg = str(err.value)
    assert "\n" not in msg and "0.01 s" in msg and nvrtc.TIMEOUT_ENV in msg


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_malformed_timeout_is_refused(monkeypatch, value: str) -> None:
    from vdevice import nvrtc
    monkeypatch.setenv(nvrtc.TIMEOUT_ENV, value)
    with pytest.raises(nvrtc.NvrtcError, match=nvrtc.TIMEOUT_ENV):
        nvrtc.compile_timeout()


def test_report_json_is_written(tmp_path: Path) -> None:
    """convert-all's report after the agreement change still parses and counts the file once."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "rows.cu").write_text(HOST_HEAVY)
    batch.convert_all(src, tmp_path / "out", jobs=1)
    report = json.loads((tmp_path / "out" / batch.REPORT_NAME).read_text())
    assert report["counts"]["files"] == {"converted": 1}


# ---- small ones from the same report ------------------------------------------------------------------------
def test_a_yaml_exponent_without_a_dot_is_a_number(tmp_path: Path) -> None:
    from rtransform.spec import load_spec
    path = tmp_path / "s.yaml"
    path.write_text("kernel: k\ngrid: [1,1,1]\nblock: [32,1,1]\ntolerance: 1e-3\nargs:\n"
                    "- {name: x, kind: buffer, dtype: float32, size: 32, init: random, low: -1e2, high: 1e2}\n"
                    "- {name: big, kind: scalar, dtype: float32, value: 1e30}\noutputs: [x]\n")
    spec = load_spec(str(path))
    assert spec.tolerance == 1e-3 and spec.args[1].value == 1e30 and spec.args[0].low == -100.0


def test_o_through_a_file_named_as_a_folder_says_so(tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n")
    (tmp_path / "file.cu").write_text("mine\n")
    res = _cli("rtransform", "convert", str(src), "-o", str(tmp_path / "file.cu") + "/")
    assert res.returncode == 2 and "is a file, not a folder" in res.stderr, res.stderr


def test_a_maskless_shuffle_is_refused_for_what_it_is(tmp_path: Path) -> None:
    src = tmp_path / "sh.cu"
    src.write_text('#include "course_helpers.h"\n'
                   "__global__ void bcast(int* v) { v[threadIdx.x] = __shfl(v[threadIdx.x], 2, 32); }\n")
    res = _cli("rtransform", "convert", str(src), "-o", str(tmp_path / "o.cu"))
    assert res.returncode == 1
    assert "was removed for sm_70" in res.stderr and "__shfl_sync" in res.stderr
    assert "course_helpers.h" not in res.stderr.split("error:", 1)[1]


# ---- Latin-1 sources: older code keeps accented names in comments (nvcc takes the bytes as they are) ----------
def test_a_latin1_source_and_header_convert_and_verify(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 in comments of the source and of a local header: the file converts (it was refused
    as "not a text file"), the comments survive, and verify agrees with the legacy kernel the emulator runs from
    the original bytes; convert-all converts it too."""
    (tmp_path / "util.cuh").write_bytes(b"#pragma once\n// fonction \xe9l\xe9mentaire \xa9 Jos\xe9\n"
                                        b"__device__ inline float twice(float v) { return 2.0f * v; }\n")
    src = tmp_path / "scale.cu"
    src.write_bytes(b'#include "util.cuh"\n// Autor: J\xfcrgen M\xfcller, d\xe9calage\n'
                    b"__global__ void scale(float* x, float a, int n) {\n"
                    b"  int i = blockIdx.x * blockDim.x + threadIdx.x;  // index \xb7 global\n"
                    b"  if (i < n) x[i] = twice(x[i]) * a;\n}\n")
    out = tmp_path / "scale.rtask.cu"
    r = _cli("rtransform", "convert", str(src), "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text(encoding="utf-8")
    assert "Jürgen Müller" in text and "scale__rtask" in text
    spec = tmp_path / "scale.spec.yaml"
    spec.write_text("kernel: scale\ngrid: [3, 1, 1]\nblock: [64, 1, 1]\nargs:\n"
                    "- {name: x, kind: buffer, dtype: float32, size: 190, init: random}\n"
                    "- {name: a, kind: scalar, dtype: float32, value: 1.5}\n"
                    "- {name: n, kind: scalar, dtype: int32, value: 190}\noutputs: [x]\ntolerance: 0\n")
    r = _cli("rtransform", "verify", str(src), "--spec", str(spec))
    assert r.returncode == 0 and "verified" in r.stdout, r.stdout + r.stderr
    r = _cli("rtransform", "convert-all", str(tmp_path), "-o", str(tmp_path.parent / f"{tmp_path.name}-all"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert list((tmp_path.parent / f"{tmp_path.name}-all").rglob("scale*.cu"))
