"""The bottom layer's tool facts, each in one place: the C++ splitter, refusals, the CUDA toolkit and the compiler
command lines."""
from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import toolchain.nvcc
from toolchain.cxx import split_top_level
from toolchain.demangle import demangle_entry
from toolchain.nvcc import Toolkit, find_nvcc, find_toolkit, is_toolkit_include, nvcc_command
from toolchain.refusal import Refusal, Refused, attempt
from toolchain.stubs import stub_dirs


# ---- the C++ splitter --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,items", [
    ("a, b, c", ["a", "b", "c"]),
    ("f(a, b), g", ["f(a, b)", "g"]),                                  # ()
    ("x[i, j], y", ["x[i, j]", "y"]),                                  # [] (a comma expression, or C++23)
    ("{1, 2}, {3, 4}", ["{1, 2}", "{3, 4}"]),                          # {}
    ("tile<8, true>, float", ["tile<8, true>", "float"]),               # <>
    ("map<int, vector<int>>, n", ["map<int, vector<int>>", "n"]),       # >> closes two template brackets
    ("T<U<V<W, X>>>, Y<Z>", ["T<U<V<W, X>>>", "Y<Z>"]),                 # >>> closes three
    ("x >> 2, y", ["x >> 2", "y"]),                                    # >> as a shift
    ("a < b, c > d", ["a < b", "c > d"]),                              # comparisons, not brackets
    ("n<m, k", ["n<m", "k"]),                                          # a `<` nothing closes: a less-than
    ("f(i<n), j>k", ["f(i<n)", "j>k"]),                                # the `<` dies with its parenthesis
    ("a<<2, b", ["a<<2", "b"]), ("a<=b, c>=d", ["a<=b", "c>=d"]),       # shifts and comparisons
    ("p->q, r", ["p->q", "r"]),                                        # an arrow closes nothing
    ("foo<(3>2)>, z", ["foo<(3>2)>", "z"]),                             # a `>` inside () is a greater-than
    ('"a,b", \',\', 1\'000, s', ['"a,b"', "','", "1'000", "s"]),        # literals and digit separators
    ('"x\\",y", z', ['"x\\",y"', "z"]),                                # an escaped quote inside a literal
    ("dim3(N / 2, 1), 128, 0, stream", ["dim3(N / 2, 1)", "128", "0", "stream"]),
    ("(unsigned char)3, 7u", ["(unsigned char)3", "7u"]),
    ("  a ,, b , ", ["a", "b"]), ("", []),                              # stripped, empty items dropped
    ("float a[N], *b, c[2][M]", ["float a[N]", "*b", "c[2][M]"]),
])
def test_split_top_level(text, items):
    assert split_top_level(text) == items


@pytest.mark.parametrize("symbol,entry", [
    ("_Z4tileIN3foo3BarIiLi2EEELi3EEvPf", ("tile", "foo::Bar<int, 2>, 3")),   # tile<foo::Bar<int, 2>, 3>(float*)
    ("_Z6kernelIfLj256EEvPKT_PS0_i", ("kernel", "float, 256")),               # kernel<float, 256u>(...)
    ("_Z4fillIN3foo3BarIS1_IiLi1EELi2EEEEvPf", ("fill", "foo::Bar<foo::Bar<int, 1>, 2>")),  # nested
])
def test_demangle_splits_template_arguments_at_the_top(symbol, entry):
    assert demangle_entry(symbol) == entry


# ---- refusals ----------------------------------------------------------------------------------------------------
def test_refused_carries_one_refusal():
    def view(n: int) -> int:
        if n < 0:
            raise Refused(f"n = {n} is negative", by="view")
        return 2 * n

    assert attempt(lambda: view(3)) == 6
    got = attempt(lambda: view(-1))
    assert got == Refusal("n = -1 is negative", "view") and str(got) == "n = -1 is negative"
    with pytest.raises(ValueError, match="negative"):  # uncaught, it reads as the bad-input error it is
        view(-2)


# ---- the CUDA toolkit, found once; its headers first for nvcc and NVRTC ------------------------------------------
MMA_SOURCE = ("#include <mma.h>\n__global__ void k(float* y) {\n"
              "  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float> c;\n"
              "  nvcuda::wmma::fill_fragment(c, 1.0f);\n"
              "  nvcuda::wmma::store_matrix_sync(y, c, 16, nvcuda::wmma::mem_row_major);\n}\n")


def runtime_wheel(root: Path) -> Path:
    """A folder laid out as a CUDA runtime wheel's (CuPy's `site-packages/nvidia/cu13`): include/ has mma.h and
    cuda_runtime.h but no crt/, so its mma.h cannot open "crt/mma.h" unless the toolkit's folder is searched first."""
    inc = root / "include"
    inc.mkdir(parents=True)
    (inc / "mma.h").write_text('#pragma once\n#include "crt/mma.h"\n')
    (inc / "cuda_runtime.h").write_text("#pragma once\n")
    return root


def fake_toolkit(root: Path) -> Path:
    """A folder laid out as a toolkit's: include/ with crt/ beside cuda_runtime.h, and include/cccl."""
    (root / "include" / "crt").mkdir(parents=True)
    (root / "include" / "cccl").mkdir()
    (root / "include" / "cuda_runtime.h").write_text("#pragma once\n")
    return root


@pytest.fixture
def fresh_toolkit_search(monkeypatch):
    """find_toolkit searched anew (its answer is cached per process), and again afterwards."""
    find_toolkit.cache_clear()
    yield monkeypatch
    find_toolkit.cache_clear()


def test_a_runtime_wheels_folder_is_not_a_toolkit(tmp_path, fresh_toolkit_search):
    """Without a working nvcc the toolkit is the first folder with crt/ beside cuda_runtime.h: $CUDA_HOME pointing
    at a runtime wheel is passed over for $CUDA_PATH's toolkit."""
    wheel, toolkit = runtime_wheel(tmp_path / "wheel"), fake_toolkit(tmp_path / "cuda")
    fresh_toolkit_search.setattr(toolchain.nvcc, "_nvcc_candidates", lambda: [])
    fresh_toolkit_search.setenv("CUDA_HOME", str(wheel))
    fresh_toolkit_search.setenv("CUDA_PATH", str(toolkit))
    assert not is_toolkit_include(wheel / "include") and is_toolkit_include(toolkit / "include")
    assert find_toolkit() == Toolkit(None, (str(toolkit / "include"),), (str(toolkit / "include" / "cccl"),))
    assert find_nvcc() is None


@pytest.mark.nvcc
def test_the_toolkit_is_the_working_nvccs(nvcc_path):
    """With nvcc, the toolkit's folders are the ones nvcc searches itself: a real toolkit include (crt/mma.h)."""
    toolkit = find_toolkit()
    assert toolkit.nvcc == nvcc_path and toolkit.include_dirs
    assert is_toolkit_include(Path(toolkit.include_dirs[0])) and (Path(toolkit.include_dirs[0]) / "crt" / "mma.h").is_file()


def gpu_module_options(tmp_path: Path, monkeypatch, include_dirs: list[str]) -> list[str]:
    """The options vdevice.gpu.GpuModule hands to NVRTC, read through a stand-in CuPy whose CUDA path is a runtime
    wheel (as on the H100, where CuPy came from the wheels PyTorch installs)."""
    from vdevice.gpu import GpuModule
    wheel = runtime_wheel(tmp_path / "site-packages" / "nvidia" / "cu13")
    seen: dict = {}
    cuda = SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=lambda: 1),
                           Device=lambda i: SimpleNamespace(compute_capability="90"),
                           get_cuda_path=lambda: str(wheel))
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=cuda, RawModule=lambda **kw: seen.update(kw)))
    GpuModule(MMA_SOURCE, ["k"], include_dirs)
    return list(seen["options"])


def test_nvrtc_options_put_the_toolkit_before_cupys_folder(tmp_path, monkeypatch):
    toolkit = find_toolkit()
    if not toolkit.include_dirs:
        pytest.skip("no CUDA toolkit headers here ($CUDA_HOME, /usr/local/cuda, the nvidia-cuda-nvcc wheel)")
    project = tmp_path / "project"
    project.mkdir()
    options = gpu_module_options(tmp_path, monkeypatch, [str(project)])
    dirs = [o[2:] for o in options if o.startswith("-I")]
    wheel = str(tmp_path / "site-packages" / "nvidia" / "cu13" / "include")
    host_stubs = str(stub_dirs(device=False)[0])
    assert "--gpu-architecture=sm_90" in options and "-std=c++17" in options
    assert dirs.index(str(project)) < dirs.index(host_stubs) < dirs.index(toolkit.include_dirs[0]) < dirs.index(wheel)
    assert all(dirs.index(d) < dirs.index(wheel) for d in toolkit.header_dirs)


def nvrtc_library() -> ctypes.CDLL | None:
    """libnvrtc from the nvidia-cuda-nvrtc wheel (or the toolkit), None when neither has it."""
    names = [Path(site) / "nvidia" / sub / "lib" / lib for site in sys.path if site
             for sub in ("cu13", "cuda_nvrtc", "cu12") for lib in ("libnvrtc.so.13", "libnvrtc.so.12")]
    names += [Path(d).parent / lib / "libnvrtc.so" for d in find_toolkit().include_dirs for lib in ("lib64", "lib")]
    for path in names:
        if path.is_file():
            return ctypes.CDLL(str(path))
    return None


def nvrtc_compile(lib: ctypes.CDLL, source: str, options: list[str]) -> tuple[int, str]:
    """(NVRTC's result code, its log) of compiling `source` with `options` (no GPU needed)."""
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"module.cu", 0, None, None) == 0
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        result = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        return result, log.value.decode(errors="replace")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def test_nvrtc_compiles_mma_with_the_runtimes_options(tmp_path, monkeypatch):
    """NVRTC (the nvidia-cuda-nvrtc wheel: no GPU needed) compiles a wmma kernel with GpuModule's options and reads
    the toolkit's mma.h, though CuPy's folder is a runtime wheel's. Controls: without the toolkit's folders (the
    options before this fix) it fails as every GPU build did on the H100; with the wheel's folder ahead of the
    toolkit's, the wheel's mma.h is read (its quoted "crt/mma.h" then reaches the internal header, which warns)."""
    lib, toolkit = nvrtc_library(), find_toolkit()
    if lib is None or not toolkit.include_dirs:
        pytest.skip("needs libnvrtc (pip install nvidia-cuda-nvrtc) and CUDA toolkit headers")
    options = gpu_module_options(tmp_path, monkeypatch, [])
    result, log = nvrtc_compile(lib, MMA_SOURCE, options)
    assert result == 0 and "internal header" not in log, log
    before = [o for o in options if o[2:] not in toolkit.header_dirs]
    result, log = nvrtc_compile(lib, MMA_SOURCE, before)
    assert result != 0 and 'cannot open source file "crt/mma.h"' in log, log
    wheel = next(o for o in options if "site-packages" in o)
    result, log = nvrtc_compile(lib, MMA_SOURCE, [o for o in options if o != wheel][:2] + [wheel] +
                                [o for o in options if o != wheel][2:])
    assert "internal header" in log, log


@pytest.mark.nvcc
def test_nvcc_command_puts_the_toolkit_first(tmp_path, nvcc_path):
    """nvcc_command: the toolkit's include/ ahead of every folder given; nvcc then compiles the wmma kernel with a
    runtime wheel's folder on the path without reading that folder's mma.h (whose crt/mma.h include warns)."""
    wheel = runtime_wheel(tmp_path / "wheel") / "include"
    src = tmp_path / "k.cu"
    src.write_text(MMA_SOURCE)
    cmd = nvcc_command(src, tmp_path / "k.o", include_dirs=[str(wheel)])
    dirs = [a[2:] for a in cmd if a.startswith("-I")]
    assert cmd[:3] == [nvcc_path, "-arch=sm_90", "-std=c++17"] and dirs[0] == find_toolkit().include_dirs[0]
    assert dirs.index(str(wheel)) > 0
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "internal header" not in proc.stderr, proc.stderr
    wheel_first = [a for a in cmd if a != f"-I{dirs[0]}"]
    wheel_first.insert(wheel_first.index(f"-I{wheel}") + 1, f"-I{dirs[0]}")
    proc = subprocess.run(wheel_first, capture_output=True, text=True, timeout=300)
    assert "internal header" in proc.stderr  # the wheel's mma.h was read: the order is what kept it out
