"""Kernel files written the way real libraries are (tests/real_code_kernels/): system and vendor headers, a local
common.h full of host code, explicit instantiations, local shims named like system headers. Each runs on the
CPU against numpy and verifies with no flags; a header error that changes the analysis is one error line naming
the header and the kernel, never a silent partial conversion."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml
import pytest

from converter import ConversionError, convert_file
from converter.output import SharedVariable
from rtransform.run import run_file
from rtransform.verify import verify_file

REPO = Path(__file__).resolve().parent.parent
KDIR = REPO / "tests" / "real_code_kernels"
CASES = sorted(p.with_suffix("").relative_to(KDIR).as_posix() for p in KDIR.glob("*/*.cu"))


def _refs():
    spec = importlib.util.spec_from_file_location("real_code_refs", KDIR / "refs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REFS = _refs()


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rtransform.cli", *args], capture_output=True, text=True,
                          timeout=180, cwd=cwd)


@pytest.mark.parametrize("case", CASES)
def test_legacy_kernel_matches_numpy(case):
    """The sliced legacy kernel (host code and vendor headers dropped, local headers sliced) runs on the CPU."""
    res = run_file(str(KDIR / f"{case}.cu"), str(KDIR / f"{case}.spec.yaml"))
    want = getattr(REFS, Path(case).name)(res.inputs)
    for name, ref in want.items():
        np.testing.assert_allclose(res.outputs[name], ref, rtol=1e-5, atol=1e-6, err_msg=f"{case}: {name}")


@pytest.mark.parametrize("case", CASES)
def test_converts_and_verifies_with_no_flags(case):
    """`rtransform verify` with no -I/-D: the persistent rKernel agrees with the legacy kernel."""
    result = verify_file(str(KDIR / f"{case}.cu"), str(KDIR / f"{case}.spec.yaml"))
    assert result.ok, result.summary()


def test_template_callee_barrier_is_converted_beside_system_headers():
    """<stdlib.h>, <vector>... parse (the compiler headers the libclang wheel lacks are shipped), so clang still
    instantiates templates and the callee's cg::sync becomes the rTask's barrier."""
    out = convert_file(str(KDIR / "system_headers" / "reverse_rows.cu")).output
    clone = out[out.index("stage__rt("):]
    assert "rt::sync(g);" in clone and "cg::sync" not in clone and "stage__rt<N>(__rt, cta" in out


def test_vendor_headers_resolve_to_stubs_without_warnings():
    res = convert_file(str(KDIR / "llmc_style" / "gelu_forward.cu"))
    assert [m.name for m in res.rkernels] == ["gelu_forward"] and res.warnings == []


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).write_text(text)


KERNEL = ("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n#include \"Common.h\"\n"
          "template <int N> __device__ void step(cg::thread_block &b, float *s) { s[b.thread_rank()] *= N; "
          "cg::sync(b); }\n"
          "template <int N> __global__ void twice(float *out) {\n  cg::thread_block b = cg::this_thread_block();\n"
          "  __shared__ float s[64];\n  s[threadIdx.x] = out[threadIdx.x];\n  step<N>(b, s);\n"
          "  out[threadIdx.x] = s[63 - threadIdx.x] * BS;\n}\ntemplate __global__ void twice<2>(float *);\n")


def test_nested_missing_header_only_host_code_needs_is_recovered(tmp_path):
    """A header not found inside a local header (a project's config or logging header) is parsed as empty: convert
    exits 0 with one warning naming the header and its includer, templates are still instantiated (the callee's
    cg::sync becomes rt::sync), and `rtransform run` and `verify` work on the same file."""
    _write(tmp_path, {"Common.h": "#pragma once\n#include <project_config.h>\n#define BS 2\n", "k.cu": KERNEL})
    out = tmp_path / "k.rtask.cu"
    r = run_cli("convert", str(tmp_path / "k.cu"), "-o", str(out))
    assert r.returncode == 0 and out.exists() and "Traceback" not in r.stderr, r.stderr
    assert (f"{tmp_path / 'k.cu'}:1:1: warning: header 'project_config.h' not found (included from "
            f"{tmp_path / 'Common.h'}); parsed as empty") in r.stderr
    text = out.read_text()
    assert "rt::sync(b)" in text[text.index("step__rt("):]
    (tmp_path / "k.spec.yaml").write_text("kernel: twice\ntemplate_args: [2]\ngrid: [1]\nblock: [64]\nargs:\n"
                                          "- {name: out, kind: buffer, dtype: float32, size: 64, init: arange}\n"
                                          "outputs: [out]\ntolerance: 0\n")
    run = run_file(str(tmp_path / "k.cu"), str(tmp_path / "k.spec.yaml"))
    assert run.outputs["out"].tolist() == [2.0 * 2 * (63 - i) for i in range(64)]
    assert verify_file(str(tmp_path / "k.cu"), str(tmp_path / "k.spec.yaml")).ok


def test_missing_header_whose_declaration_device_code_uses_refuses_that_kernel(tmp_path):
    """When the kernel itself uses a name only the missing header would declare, that kernel is refused with
    clang's line and the missing header named; the file's other kernel converts."""
    _write(tmp_path, {"Common.h": "#pragma once\n#include \"generated/config.h\"\n#define BS 2\n",
                      "k.cu": KERNEL + "__global__ void scaled(float *x) { x[threadIdx.x] *= CONFIG_SCALE; }\n"})
    res = convert_file(str(tmp_path / "k.cu"))
    assert [m.name for m in res.rkernels] == ["twice"]
    assert res.refused == [{"name": "scaled", "diagnostics": [
        f"{tmp_path / 'k.cu'}:13:54: error: use of undeclared identifier 'CONFIG_SCALE': the device code uses a "
        "declaration of a header that was not found ('generated/config.h' (included from Common.h))"]}]


def test_system_header_failure_is_an_error(tmp_path):
    """A C library header that fails inside (here a system header pulled in through a local one, with an
    #include_next that has nothing after it) is reported, not parsed around."""
    _write(tmp_path, {"Common.h": "#pragma once\n#include <stdlib.h>\n#include_next <no_such_system_header.h>\n"
                                  "#define BS 1\n", "k.cu": KERNEL})
    with pytest.raises(ConversionError) as e:
        convert_file(str(tmp_path / "k.cu"))
    assert len(e.value.diagnostics) == 1 and "Common.h:3:" in e.value.diagnostics[0]
    assert "no_such_system_header.h" in e.value.diagnostics[0] and "twice" in e.value.diagnostics[0]


def test_header_declaration_error_is_reported_host_body_error_is_not(tmp_path):
    """An unknown type in a header's declaration leaves it unanalysed (an error naming the header); an unknown
    call inside a host function's body in a header cannot change device code (converts)."""
    _write(tmp_path, {"Common.h": "#pragma once\n#define BS 1\nvoid host_setup() { vendor_init(42); }\n",
                      "k.cu": KERNEL})
    assert [m.name for m in convert_file(str(tmp_path / "k.cu")).rkernels] == ["twice"]
    _write(tmp_path, {"Common.h": "#pragma once\n#define BS 1\nextern vendor_handle_t g_handle;\n"})
    with pytest.raises(ConversionError) as e:
        convert_file(str(tmp_path / "k.cu"))
    assert e.value.diagnostics[0].startswith(f"{tmp_path / 'Common.h'}:3:8: error: unknown type name "
                                             "'vendor_handle_t'")


def test_tile_sizes_cuda_rejects_are_refused_precisely(tmp_path):
    """block_tile_memory parses and a tile of 64 threads converts; a tile size CUDA itself rejects (not a power of
    two, or over 1024) is refused at the tiled_partition call (one line), while the other kernel converts."""
    src = tmp_path / "tiles.cu"
    src.write_text("#include <cooperative_groups.h>\n#include <cooperative_groups/reduce.h>\n"
                   "namespace cg = cooperative_groups;\n"
                   "template <unsigned B> __global__ void big(const float *in, float *out) {\n"
                   "  __shared__ cg::block_tile_memory<B> scratch;\n"
                   "  auto cta = cg::this_thread_block(scratch);\n"
                   "  auto t = cg::tiled_partition<64>(cta);\n"
                   "  float v = cg::reduce(t, in[threadIdx.x], cg::plus<float>());\n"
                   "  if (t.thread_rank() == 0) out[t.meta_group_rank()] = v;\n}\n"
                   "__global__ void odd(const float *in, float *out) {\n"
                   "  auto t = cg::tiled_partition<96>(cg::this_thread_block());\n"
                   "  out[threadIdx.x] = t.thread_rank();\n}\n")
    res = convert_file(str(src))
    assert [m.name for m in res.rkernels] == ["big"]
    assert "rt::tiled_partition<64>(cta)" in res.output and "rt::reduce(t, " in res.output
    assert res.refused == [{"name": "odd", "diagnostics": [
        f"{src}:12:12: error: tiled_partition<96>: CUDA's tiles are a power of two from 1 to 1024 threads"]}]


def _wide_spec(folder: Path, block: int, tile: int, blocks: int = 2) -> Path:
    """tile_stats' spec for one block and tile size (keys in [0, 100) so any/all and the odd-key scan vary)."""
    n = block * blocks
    bufs = [("in", "float32", n, ""), ("keys", "int32", n, ", low: 0, high: 100"),
            ("sums", "float32", n // tile, ""), ("maxes", "int32", n // tile, ""), ("scans", "int32", 2 * n, ""),
            ("flags", "int32", n, ""), ("rev", "float32", n, "")]
    init = {"in": "random", "keys": "random"}
    lines = ["kernel: tile_stats", f"template_args: [{block}, {tile}]", f"grid: [{blocks}]", f"block: [{block}]",
             f"seed: {block + tile}", "args:"]
    lines += [f"- {{name: {name}, kind: buffer, dtype: {dt}, size: {size}, init: {init.get(name, 'zeros')}{extra}}}"
              for name, dt, size, extra in bufs]
    lines += ["outputs: [sums, maxes, scans, flags, rev]", "tolerance: 0"]
    spec = folder / f"tile_stats_{block}_{tile}.spec.yaml"
    spec.write_text("\n".join(lines) + "\n")
    return spec


@pytest.mark.parametrize("block,tile", [(64, 64), (128, 64), (384, 128), (512, 256), (512, 512), (1024, 1024)])
def test_wide_tiles_match_numpy_and_verify_bit_exact(tmp_path, block, tile):
    """Tiles of 64 .. 1024 threads: the legacy kernel (cg on the emulator) matches numpy, and the rKernel (rt::Tile,
    run persistent with surplus vEU threads) matches the legacy kernel bit for bit."""
    cu = KDIR / "wide_tiles" / "tile_stats.cu"
    spec = _wide_spec(tmp_path, block, tile)
    res = run_file(str(cu), str(spec))
    for name, ref in REFS.tile_stats(res.inputs, tile).items():
        np.testing.assert_allclose(res.outputs[name], ref, rtol=1e-5, atol=1e-5, err_msg=f"{block}/{tile}: {name}")
    result = verify_file(str(cu), str(spec))
    assert result.ok, result.summary()


def test_wide_tile_on_a_block_it_does_not_divide_is_an_error(tmp_path):
    """CUDA leaves a tile of 64 on a 96-thread block undefined; the emulator says so in one line, not a hang."""
    spec = _wide_spec(tmp_path, 96, 64, blocks=1)
    spec.write_text(spec.read_text().replace("size: 1,", "size: 2,"))
    with pytest.raises(Exception, match=r"tiled_partition<64>: the block's 96 threads are not a multiple of the tile "
                                        r"size \(undefined in CUDA\)"):
        run_file(str(KDIR / "wide_tiles" / "tile_stats.cu"), str(spec))


SCAN_TYPES = {"int": "int32", "unsigned": "uint32", "float": "float32", "double": "float64"}


@pytest.mark.parametrize("tile,ctype,block", [(4, "int", 64), (8, "unsigned", 72), (32, "double", 96),
                                              (32, "float", 40), (64, "int", 128), (256, "float", 256)])
def test_tile_scans_match_numpy_and_verify_bit_exact(tmp_path, tile, ctype, block):
    """cg::inclusive_scan / exclusive_scan (plus, and a lambda) over tiles of 4 .. 256 threads and four element
    types, partial last tiles included: legacy against numpy, the rKernel (rt::inclusive_scan...) bit for bit."""
    cu = KDIR / "tile_scans" / "tile_scans.cu"
    n, dt = 2 * block, SCAN_TYPES[ctype]
    spec = tmp_path / "scans.spec.yaml"
    spec.write_text(f"kernel: tile_scans\ntemplate_args: [{tile}, {ctype}]\ngrid: [2]\nblock: [{block}]\n"
                    f"seed: {tile}\nargs:\n- {{name: in, kind: buffer, dtype: {dt}, size: {n}, init: random}}\n"
                    + "".join(f"- {{name: {o}, kind: buffer, dtype: {dt}, size: {n}, init: zeros}}\n"
                              for o in ("inc", "exc", "run_max"))
                    + "outputs: [inc, exc, run_max]\ntolerance: 0\n")
    res = run_file(str(cu), str(spec))
    for name, ref in REFS.tile_scans(res.inputs, tile, block).items():
        got = res.outputs[name]
        if ctype == "unsigned":
            ref = ref % 2**32
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=f"{tile}/{ctype}/{block}: {name}")
    result = verify_file(str(cu), str(spec))
    assert result.ok, result.summary()


@pytest.mark.nvcc
def test_wide_tiles_and_scans_compile_for_sm90(nvcc_path, tmp_path):
    """The converted tile files compile for sm_90 with nvcc at several tile sizes and types (rt::Tile's wide-tile
    barrier and exchange, the scans, word-wise shuffles of 8-byte doubles)."""
    from toolchain.nvcc import nvcc_compile
    from vdevice import RUNTIME_INCLUDE
    extra = {"wide_tiles/tile_stats": ["tile_stats<128, 128>", "tile_stats<1024, 256>", "tile_stats<512, 512>"],
             "tile_scans/tile_scans": ["tile_scans<4, double>", "tile_scans<32, unsigned>", "tile_scans<128, float>"]}
    params = {"wide_tiles/tile_stats": "(const float *, const int *, float *, int *, int *, int *, float *)"}
    for case, insts in extra.items():
        out = convert_file(str(KDIR / f"{case}.cu")).output
        for inst in insts:
            t = inst[inst.index(",") + 2:-1]
            sig = params.get(case, f"(const {t} *, {t} *, {t} *, {t} *)")
            out += f"\ntemplate __global__ void {inst}{sig};\n"
        src = tmp_path / (Path(case).name + ".rtask.cu")
        src.write_text(out)
        r = nvcc_compile(src, src.with_suffix(".cubin"), "sm_90", ["-cubin"], include_dirs=[str(RUNTIME_INCLUDE)])
        assert r.returncode == 0, f"{case}: " + (r.stdout + r.stderr)[-4000:]


def test_coalesced_group_filter_keeps_every_positive_value():
    """The aggregated increments hand out distinct slots: the kept values are exactly the positive inputs."""
    res = run_file(str(KDIR / "coalesced" / "agg_filter.cu"), str(KDIR / "coalesced" / "agg_filter.spec.yaml"))
    src = res.inputs["src"][:int(res.inputs["n"])]
    kept = res.outputs["dst"][:int(res.outputs["count"][0])]
    assert sorted(kept.tolist()) == sorted(src[src > 0].tolist())


def test_device_slice_drops_vendor_includes_it_does_not_need():
    """The slice of the llm.c-style kernel names nothing of cuBLAS/NVTX, so their #includes go (the slice builds
    where the libraries are not installed); the local header keeps its device helper."""
    from converter.slice import slice_source
    cu = KDIR / "llmc_style" / "gelu_forward.cu"
    res = slice_source(cu.read_text(), str(cu), ["gelu_forward"])
    assert sorted(res.dropped_includes) == ["cublasLt.h", "cublas_v2.h", "nvtx3/nvToolsExt.h"]
    header = next(iter(res.headers.values()))
    assert "#include <cublas" not in header and "#include <nvtx" not in header and "gelu_tanh" in header


def test_a_kernel_name_shared_with_a_vendor_struct_member_keeps_no_vendor_include(tmp_path):
    """llm.c's global_norm kernels take a parameter `data`, the name of a member of cublasLt's
    cublasLtMatmulAlgo_t: a struct member is no name device code can use on its own, so the slice still drops
    cuBLAS (only a typedef'd enum's constants count, as `CUBLAS_STATUS_SUCCESS` does)."""
    from converter.slice import slice_source
    (tmp_path / "common.h").write_text((KDIR / "llmc_style" / "common.h").read_text())
    cu = tmp_path / "norm.cu"
    cu.write_text('#include "common.h"\n__global__ void norm_kernel(float *out, const float *data, size_t count) {\n'
                  '  size_t i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < count) out[i] = data[i] * data[i];\n}\n')
    res = slice_source(cu.read_text(), str(cu), ["norm_kernel"])
    assert sorted(res.dropped_includes) == ["cublasLt.h", "cublas_v2.h", "nvtx3/nvToolsExt.h"]
    cu.write_text(cu.read_text().replace("out[i] = data[i] * data[i]", "out[i] = CUBLAS_STATUS_SUCCESS + data[i]"))
    res = slice_source(cu.read_text(), str(cu), ["norm_kernel"])
    assert "cublas_v2.h" not in res.dropped_includes


UNNAMED = ("#include <type_traits>\n"
           "template <bool Twice> __global__ void scale(float *out, const float *in, int n, std::bool_constant<Twice>,\n"
           "                                            int /*unused*/) {\n"
           "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = Twice ? 2.0f * in[i] : in[i];\n}\n"
           "__global__ void halve(float *x, int n, int) {\n"
           "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= 0.5f;\n}\n")


def test_unnamed_kernel_parameters_are_passed_on_by_the_wrapper(tmp_path):
    """llm.c's matmul_backward_bias_kernel8 takes an unnamed `std::bool_constant<Atomic>` tag: the wrapper names
    each unnamed parameter and passes it on (it used to pass an empty argument); the kernel verifies."""
    cu = tmp_path / "unnamed.cu"
    cu.write_text(UNNAMED)
    res = convert_file(str(cu))
    assert "(scale__rtask<Twice>(__rt, out, in, n, __rt_arg3, __rt_arg4))" in res.output
    assert [p.name for p in res.rkernels[1].params] == ["x", "n", "__rt_arg2"]
    spec = tmp_path / "halve.spec.yaml"
    spec.write_text("kernel: halve\ngrid: [3]\nblock: [64]\nargs:\n"
                    "- {name: x, kind: buffer, dtype: float32, size: 192, init: random}\n"
                    "- {name: n, kind: scalar, dtype: int32, value: 150}\n"
                    "- {name: unused, kind: scalar, dtype: int32, value: 7}\noutputs: [x]\ntolerance: 0\n")
    run = run_file(str(cu), str(spec))
    x = run.inputs["x"].copy()
    x[:150] *= np.float32(0.5)
    np.testing.assert_array_equal(run.outputs["x"], x)
    assert verify_file(str(cu), str(spec)).ok


@pytest.mark.nvcc
def test_unnamed_kernel_parameters_compile_for_sm90(nvcc_path, tmp_path):
    from toolchain.nvcc import nvcc_compile
    from vdevice import RUNTIME_INCLUDE
    cu = tmp_path / "unnamed.cu"
    cu.write_text(UNNAMED)
    src = tmp_path / "unnamed.rtask.cu"
    src.write_text(convert_file(str(cu)).output
                   + "template __global__ void scale<true>(float *, const float *, int, std::bool_constant<true>, int);\n")
    r = nvcc_compile(src, tmp_path / "u.cubin", "sm_90", ["-cubin"], include_dirs=[str(RUNTIME_INCLUDE)])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


HEADER_HELPERS = """#pragma once
using reduction_t = float (*)(float);
__device__ float twice(float v) { return 2.0f * v; }
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <reduction_t R> __device__ float block_reduce(float v, bool final_sync) {
  __shared__ float part[32];
  float r = R(v);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = r;
  __syncthreads();
  return part[0];
}
template <reduction_t R> __device__ float block_reduce(float v) { return block_reduce<R>(v, false); }
"""


def test_header_callees_that_need_the_rtask_context_are_cloned_into_the_output(tmp_path):
    """llm.c's common.h holds blockReduce (__shared__, __syncthreads, threadIdx) and warpReduceSum (full-mask
    shuffles): a kernel reaching such a header function, directly or through the header's own template overloads
    (a dependent call), gets a `__rt` clone of it in the converted .cu, its __shared__ array in the kernel's layout;
    a pure header helper is called as is, and the header is left byte for byte as it was."""
    (tmp_path / "helpers.h").write_text(HEADER_HELPERS)
    cu = tmp_path / "k.cu"
    cu.write_text('#include "helpers.h"\n'
                  "__global__ void pure(float *x) { x[threadIdx.x] = twice(x[threadIdx.x]); }\n"
                  "__global__ void reduced(float *x) { x[blockIdx.x * blockDim.x + threadIdx.x] = "
                  "block_reduce<warp_sum>(x[blockIdx.x * blockDim.x + threadIdx.x]); }\n"
                  "__global__ void shuffled(float *x) { x[blockIdx.x * blockDim.x + threadIdx.x] = "
                  "warp_sum(x[blockIdx.x * blockDim.x + threadIdx.x]); }\n")
    res = convert_file(str(cu))
    assert [m.name for m in res.rkernels] == ["pure", "reduced", "shuffled"] and res.refused == []
    meta = {m.name: m for m in res.rkernels}
    assert meta["pure"].callees_cloned == []
    assert sorted(meta["reduced"].callees_cloned) == ["block_reduce__rt", "block_reduce__rt"]  # both overloads
    assert meta["reduced"].static_smem_bytes == 128 and meta["shuffled"].callees_cloned == ["warp_sum__rt"]
    assert "__syncthreads" not in res.output
    # warp_sum passed as block_reduce's template argument runs unconverted: right while the rTask's warps are whole
    assert res.output.count("require_whole_warps") == 1
    assert '(::rt::require_whole_warps(__rt, "warp_sum (helpers.h: __shfl_xor_sync)"), block_reduce__rt<warp_sum>(' \
        in res.output
    assert (tmp_path / "helpers.h").read_text() == HEADER_HELPERS
    for kernel, block in (("shuffled", 64), ("shuffled", 96), ("reduced", 64), ("reduced", 128)):
        spec = tmp_path / f"{kernel}{block}.spec.yaml"
        spec.write_text(f"kernel: {kernel}\ngrid: [2]\nblock: [{block}]\nargs:\n"
                        f"- {{name: x, kind: buffer, dtype: float32, size: {2 * block}, init: random}}\n"
                        "outputs: [x]\ntolerance: 0\n")
        run = run_file(str(cu), str(spec))
        x = run.inputs["x"].astype(np.float64)
        if kernel == "shuffled":
            want = x.reshape(-1, 32).sum(axis=1).repeat(32)
        else:  # every thread of a block gets its block's first warp's sum
            want = x.reshape(2, -1)[:, :32].sum(axis=1).repeat(block)
        np.testing.assert_allclose(run.outputs["x"], want, rtol=1e-5, atol=1e-5)
        assert verify_file(str(cu), str(spec)).ok
    spec.write_text(spec.read_text().replace(f"block: [{block}]", "block: [48]").replace(f"size: {2 * block}", "size: 96"))
    with pytest.raises(Exception, match=r"warp_sum \(\w*helpers.h: __shfl_xor_sync\): its full-warp "
                                        r"intrinsics need whole warps, but the rTask has 48 threads"):
        verify_file(str(cu), str(spec))  # a partial last warp: one clear line
    assert (tmp_path / "helpers.h").read_text() == HEADER_HELPERS


@pytest.mark.parametrize("case,block", [("row_sum", 32), ("row_sum", 224), ("row_sum", 1024),
                                        ("row_center", 64), ("row_center", 160), ("row_center", 512)])
def test_header_block_reduce_is_cloned_and_verifies_bit_exact(tmp_path, case, block):
    """header_reduce/common.h's templated block_reduce (threadIdx, a __shared__ scratch array, __syncthreads, warp
    shuffles) and warp_reduce, used by two kernels: cloned into each converted file, the scratch array in the
    kernel's layout; legacy and converted agree bit for bit at block sizes (whole warps, as block_reduce requires)
    that do and do not divide the row, and match numpy; the header is not touched."""
    header = KDIR / "header_reduce" / "common.h"
    before = header.read_bytes()
    cu = KDIR / "header_reduce" / f"{case}.cu"
    meta = convert_file(str(cu)).rkernels[0]
    assert sorted(meta.callees_cloned) == ["block_reduce__rt", "warp_reduce__rt"]
    assert meta.shared_variables == [SharedVariable("block_reduce__scratch", "float block_reduce__scratch[32]", 128)]
    spec = tmp_path / f"{case}.spec.yaml"
    spec.write_text((KDIR / "header_reduce" / f"{case}.spec.yaml").read_text()
                    .replace("block: [64]", f"block: [{block}]").replace("block: [96]", f"block: [{block}]")
                    .replace("value: 200", "value: 333").replace("size: 600", "size: 999"))
    run = run_file(str(cu), str(spec))
    for name, ref in getattr(REFS, case)(run.inputs).items():
        np.testing.assert_allclose(run.outputs[name], ref, rtol=1e-5, atol=1e-5)
    result = verify_file(str(cu), str(spec))
    assert result.ok, result.summary()
    assert header.read_bytes() == before


@pytest.mark.nvcc
def test_header_block_reduce_clones_compile_for_sm90(nvcc_path, tmp_path):
    """The converted files, their header clones included (namespaced ones too), compile for sm_90 against the
    untouched headers."""
    from toolchain.nvcc import nvcc_compile
    from vdevice import RUNTIME_INCLUDE
    cases = [KDIR / "header_reduce" / "row_sum.cu", KDIR / "header_reduce" / "row_center.cu", _ns_case(tmp_path),
             KDIR / "cu_overloads" / "overload_sum.cu"]
    for cu in cases:
        src = tmp_path / f"{cu.stem}.rtask.cu"
        src.write_text(convert_file(str(cu)).output)
        r = nvcc_compile(src, src.with_suffix(".cubin"), "sm_90", ["-cubin"],
                         include_dirs=[str(RUNTIME_INCLUDE), str(cu.parent)])
        assert r.returncode == 0, f"{cu.name}: " + (r.stdout + r.stderr)[-4000:]


def test_header_callees_that_cannot_be_cloned_are_still_refused(tmp_path):
    """A header function that needs the rTask context but is a class member, uses a file-scope __shared__
    variable of the header (no place in the kernel's layout), or synchronises and is passed as a template argument
    (it would run unconverted), is refused at a line of the header or the call."""
    header = ("#pragma once\n__shared__ float pool[64];\n"
              "__device__ float pooled(float v) { pool[threadIdx.x] = v; __syncthreads(); return pool[0]; }\n"
              "struct Block { static __device__ float first(float v) {\n"
              "  __shared__ float s; if (threadIdx.x == 0) s = v; __syncthreads(); return s; } };\n"
              "__device__ float synced(float v) { __syncthreads(); return v; }\n"
              "template <float (*F)(float)> __device__ float apply(float v) { return F(v); }\n")
    (tmp_path / "h.h").write_text(header)
    cu = tmp_path / "k.cu"
    cu.write_text('#include "h.h"\n'
                  "__global__ void a(float *x) { x[threadIdx.x] = pooled(x[threadIdx.x]); }\n"
                  "__global__ void b(float *x) { x[threadIdx.x] = Block::first(x[threadIdx.x]); }\n"
                  "__global__ void c(float *x) { x[threadIdx.x] = apply<synced>(x[threadIdx.x]); }\n")
    with pytest.raises(ConversionError) as e:
        convert_file(str(cu))
    assert [r["name"] for r in e.value.refused] == ["a", "b", "c"]
    assert e.value.refused[2]["diagnostics"] == [f"{cu}:4:54: error: 'synced' (defined in h.h) uses __syncthreads: "
                                                 "passed as a template argument, it would run unconverted in the rTask"]
    assert e.value.refused[0]["diagnostics"] == [f"{tmp_path / 'h.h'}:3:36: error: file-scope __shared__ 'pool' of "
                                                 "a header has no place in the rTask's shared-memory layout",
                                                 f"{tmp_path / 'h.h'}:3:83: error: file-scope __shared__ 'pool' of "
                                                 "a header has no place in the rTask's shared-memory layout"]
    assert e.value.refused[1]["diagnostics"] == [f"{cu}:3:48: error: 'first' (a member of a class in h.h) uses "
                                                 "__shared__ memory: a local header's class cannot be given a clone "
                                                 "that takes the rTask (the header is not rewritten)"]
    assert (tmp_path / "h.h").read_text() == header


NS_HEADER = """#pragma once
namespace util {
template <class T> __device__ T wsum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ float bsum(float v) {
  __shared__ float s[32];
  v = util::wsum(v);
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < blockDim.x / 32; ++w) t += s[w];
  __syncthreads();
  return t;
}
}
"""
NS_KERNEL = """#include "ns.h"
__device__ float helper(float v) { return util::bsum(v) * 2.0f; }
__global__ void k(float *x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  __shared__ float mine[4];
  if (threadIdx.x < 4) mine[threadIdx.x] = 1.0f + threadIdx.x;
  __syncthreads();
  x[i] = helper(x[i]) + mine[threadIdx.x % 4];
}
"""


def _ns_case(folder: Path) -> Path:
    (folder / "ns.h").write_text(NS_HEADER)
    (folder / "k.cu").write_text(NS_KERNEL)
    return folder / "k.cu"


@pytest.mark.parametrize("block", [32, 96, 256])
def test_namespaced_header_callees_reached_through_a_cu_callee_verify(tmp_path, block):
    """A header's functions in a namespace, one a template whose shuffle is a dependent call, reached through a
    callee of the .cu file defined before the kernel: cloned (in their namespace, callees first, before the .cu
    callee's clone), the header's __shared__ array after the kernel's own in its layout; bit-exact, numpy."""
    cu = _ns_case(tmp_path)
    meta = convert_file(str(cu)).rkernels[0]
    assert sorted(meta.callees_cloned) == ["helper__rt", "util::bsum__rt", "util::wsum__rt"]
    assert [v.member for v in meta.shared_variables] == ["mine", "bsum__s"]
    spec = tmp_path / "k.spec.yaml"
    spec.write_text(f"kernel: k\ngrid: [3]\nblock: [{block}]\nargs:\n"
                    f"- {{name: x, kind: buffer, dtype: float32, size: {3 * block}, init: random}}\n"
                    "outputs: [x]\ntolerance: 0\n")
    run = run_file(str(cu), str(spec))
    x = run.inputs["x"].astype(np.float64).reshape(3, block)
    want = 2 * x.sum(axis=1, keepdims=True) + 1 + np.arange(block) % 4
    np.testing.assert_allclose(run.outputs["x"].reshape(3, block), want, rtol=1e-5, atol=1e-5)
    assert verify_file(str(cu), str(spec)).ok
    assert (tmp_path / "ns.h").read_text() == NS_HEADER


@pytest.mark.parametrize("block", [32, 96, 256])
def test_cu_overloads_reached_through_a_dependent_call_are_cloned_and_verify(tmp_path, block):
    """cu_overloads/overload_sum.cu: two block_reduce templates of the .cu file, the generic one calling the other
    through its T (a dependent call): every candidate is cloned and the call names the clones, so no hardware
    barrier or index is left in the rTask (before: synccheck's divergent barrier); bit-exact, numpy."""
    cu = KDIR / "cu_overloads" / "overload_sum.cu"
    res = convert_file(str(cu))
    assert res.rkernels[0].callees_cloned == ["block_reduce__rt", "block_reduce__rt"]
    assert "return block_reduce__rt<2>(__rt, __rt_sh, v, false);" in res.output
    assert "float twice = block_reduce__rt(__rt, __rt_sh, acc);" in res.output
    spec = tmp_path / "overload_sum.spec.yaml"
    spec.write_text((KDIR / "cu_overloads" / "overload_sum.spec.yaml").read_text()
                    .replace("block: [64]", f"block: [{block}]").replace("value: 200", "value: 333")
                    .replace("size: 600", "size: 999"))
    run = run_file(str(cu), str(spec))
    np.testing.assert_allclose(run.outputs["out"], REFS.overload_sum(run.inputs)["out"], rtol=1e-5, atol=1e-5)
    result = verify_file(str(cu), str(spec))
    assert result.ok, result.summary()


def test_cu_member_functions_are_cloned_operators_and_constructors_refused(tmp_path):
    """Named member functions of the .cu file's classes that need the rTask context are cloned into their class (a
    static method reading the indices converts and verifies); an operator or constructor that needs it is refused
    at its call, one line each; a member that needs nothing of the block (a functor's arithmetic) is left as it
    is; a kernel's own lambda is its body."""
    cu = tmp_path / "m.cu"
    cu.write_text("struct Sum { __device__ float operator()(float v) const {\n"
                  "  __shared__ float s[64]; s[threadIdx.x] = v; __syncthreads(); return s[0] + s[1]; } };\n"
                  "struct Idx { static __device__ int lane() { return threadIdx.x % 32; } };\n"
                  "struct Fence { __device__ Fence() { __syncthreads(); } };\n"
                  "struct Scale { float k; __device__ float operator()(float v) const { return k * v; } };\n"
                  "__global__ void a(float *x) { Sum s; x[threadIdx.x] = s(x[threadIdx.x]); }\n"
                  "__global__ void b(float *x) { x[blockIdx.x * blockDim.x + threadIdx.x] = Idx::lane(); }\n"
                  "__global__ void c(float *x) { Fence f; x[threadIdx.x] = 1.0f; }\n"
                  "__global__ void d(float *x) { auto sync = [] { __syncthreads(); }; sync();\n"
                  "  x[threadIdx.x] = Scale{2.0f}(x[threadIdx.x]); }\n")
    res = convert_file(str(cu))
    rule = "operators, constructors and destructors are not given a clone that takes the rTask (named member " \
           "functions are)"
    assert {r["name"]: r["diagnostics"] for r in res.refused} == {
        "a": [f"{cu}:6:55: error: operator 'Sum::operator()' uses the legacy thread/block indices: {rule}"],
        "c": [f"{cu}:8:37: error: constructor 'Fence::Fence' uses __syncthreads: {rule}"]}
    assert [m.name for m in res.rkernels] == ["b", "d"]
    assert "static __device__ int lane__rt(rt::Task& __rt) { RT_LEGACY_INDICES(__rt); return threadIdx.x % 32; }" \
        in res.output and "= Idx::lane__rt(__rt);" in res.output
    assert "auto sync = [&] { rt::sync(__rt); }; sync();" in res.output and "Scale{2.0f}(x[threadIdx.x])" in res.output
    with pytest.raises(ConversionError):
        convert_file(str(cu), kernels=["a"])
    spec = tmp_path / "b.yaml"
    spec.write_text("kernel: b\ngrid: [3]\nblock: [96]\nargs:\n"
                    "- {name: x, kind: buffer, dtype: float32, size: 288, init: zeros}\noutputs: [x]\ntolerance: 0\n")
    assert run_file(str(cu), str(spec)).outputs["x"].tolist() == [float(t % 96 % 32) for t in range(288)]
    result = verify_file(str(cu), str(spec))
    assert result.ok, result.summary()


MIXED_CANDIDATES = """__device__ float pick(float v, int) { return v + threadIdx.x; }
__device__ float pick(float v, float) { return v; }
template <class T> __device__ float twice(T v) { return pick(v, v) * 2.0f; }
__global__ void k(float *x) { x[threadIdx.x] = twice(x[threadIdx.x]); }
"""


def test_dependent_call_whose_candidates_differ_in_context_is_refused(tmp_path):
    """A dependent call with one candidate that needs the rTask context and one that does not cannot name
    clones (the one that needs none has no clone): refused at the call, never left half converted."""
    cu = tmp_path / "o.cu"
    cu.write_text(MIXED_CANDIDATES)
    with pytest.raises(ConversionError) as e:
        convert_file(str(cu))
    assert e.value.refused[0]["diagnostics"] == [
        f"{cu}:3:57: error: call to pick: some of its candidates need the rTask context and some do not, so the "
        "call cannot name their clones"]


# ---- the CUDA samples' SharedMemory<T> and class members (samples_reduction/, struct_members/) ------------------
REDUCE = KDIR / "samples_reduction" / "reduce_kernels.cu"
MEMBERS = KDIR / "struct_members" / "block_tools.cu"


def _spec(tmp_path: Path, kernel: str, targs: list, grid: int, block: int, smem: int, args: list[str],
          outputs: list[str]) -> Path:
    spec = tmp_path / f"{kernel}.spec.yaml"
    spec.write_text(f"kernel: {kernel}\ntemplate_args: {targs}\ngrid: [{grid}]\nblock: [{block}]\n"
                    f"dynamic_smem: {smem}\nargs:\n" + "".join(f"- {a}\n" for a in args)
                    + f"outputs: {outputs}\ntolerance: 0\n")
    return spec


def _verified(cu: Path, spec: Path) -> None:
    result = verify_file(str(cu), str(spec))
    assert result.ok, result.summary()


def test_shared_memory_accessor_needs_no_context_and_is_left_alone():
    """SharedMemory<T>'s conversion operators return extern __shared__ arrays, which alias the vEU's dynamic buffer
    as they are: no clone, no refusal (before: "'operator float *' ... uses __shared__ memory"); the header stays
    untouched and every kernel of the file converts."""
    res = convert_file(str(REDUCE))
    assert sorted(m.name for m in res.rkernels) == ["reduce_first_add", "reduce_max_abs", "scan_blocks"]
    assert res.refused == [] and "__rt(" not in res.output.split("reduce_first_add__rtask")[0].split(
        '#line 1 "')[1].replace("rtask_runtime", "")
    assert "T *sdata = SharedMemory<T>();" in res.output and "float *s = FloatScratch();" in res.output
    assert all(m.dynamic_smem for m in res.rkernels)


@pytest.mark.parametrize("dtype,block,n", [("int32", 64, 1000), ("float32", 256, 700), ("float64", 32, 96)])
def test_samples_scan_through_shared_memory_verifies_bit_exact(tmp_path, dtype, block, n):
    """scan_blocks<T>: a double-buffered block scan in SharedMemory<T>'s dynamic shared memory."""
    ctype = {"int32": "int", "float32": "float", "float64": "double"}[dtype]
    grid = (n + block - 1) // block
    size = np.dtype(dtype).itemsize
    spec = _spec(tmp_path, "scan_blocks", [ctype], grid, block, 2 * block * size,
                 [f"{{name: in, kind: buffer, dtype: {dtype}, size: {n}, init: random, low: -50, high: 50}}",
                  f"{{name: out, kind: buffer, dtype: {dtype}, size: {n}, init: zeros}}",
                  f"{{name: block_sums, kind: buffer, dtype: {dtype}, size: {grid}, init: zeros}}",
                  f"{{name: n, kind: scalar, dtype: int32, value: {n}}}"], ["out", "block_sums"])
    run = run_file(str(REDUCE), str(spec))
    x = np.zeros(grid * block)
    x[:n] = run.inputs["in"]
    scans = np.cumsum(x.reshape(grid, block), axis=1)
    np.testing.assert_allclose(run.outputs["out"], scans.ravel()[:n], rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(run.outputs["block_sums"], scans[:, -1], rtol=1e-5, atol=1e-3)
    _verified(REDUCE, spec)


@pytest.mark.parametrize("dtype,block", [("float64", 64), ("float64", 256), ("int32", 128)])
def test_samples_reduce_through_the_double_specialisation_verifies(tmp_path, dtype, block):
    """reduce_first_add<double> reaches SharedMemory<double>'s own extern array (the specialisation), int the
    generic one."""
    ctype = {"float64": "double", "int32": "int"}[dtype]
    n, grid = 7 * block + 3, 4
    spec = _spec(tmp_path, "reduce_first_add", [ctype], grid, block, 8 * block,
                 [f"{{name: g_idata, kind: buffer, dtype: {dtype}, size: {n}, init: random}}",
                  f"{{name: g_odata, kind: buffer, dtype: {dtype}, size: {grid}, init: zeros}}",
                  f"{{name: n, kind: scalar, dtype: uint32, value: {n}}}"], ["g_odata"])
    run = run_file(str(REDUCE), str(spec))
    x = run.inputs["g_idata"]
    want = [x[b * 2 * block:(b + 1) * 2 * block].sum() for b in range(grid)]
    np.testing.assert_allclose(run.outputs["g_odata"], want, rtol=1e-9, atol=1e-9)
    _verified(REDUCE, spec)


@pytest.mark.parametrize("block", [32, 128, 256])
def test_local_accessor_struct_in_a_plain_kernel_verifies(tmp_path, block):
    spec = _spec(tmp_path, "reduce_max_abs", [], 3, block, 4 * block,
                 [f"{{name: in, kind: buffer, dtype: float32, size: {3 * block - 5}, init: random}}",
                  "{name: out, kind: buffer, dtype: float32, size: 3, init: zeros}",
                  f"{{name: n, kind: scalar, dtype: int32, value: {3 * block - 5}}}"], ["out"])
    run = run_file(str(REDUCE), str(spec))
    x = np.abs(run.inputs["in"])
    assert run.outputs["out"].tolist() == [x[b * block:(b + 1) * block].max() for b in range(3)]
    _verified(REDUCE, spec)


def test_class_members_that_need_the_context_are_cloned_into_their_class():
    """BlockSum's members (indices, shuffles, barriers; one defined outside the class template, one static) and
    Stager's (a static __shared__ buffer of its own, called through another member) get clones beside them; the
    kernels call the clones; nothing is refused."""
    res = convert_file(str(MEMBERS))
    assert res.refused == []
    out = res.output
    for clone in ["int lane__rt(rt::Task& __rt) const", "float warp_sum__rt(rt::Task& __rt, float v) const",
                  "float sum__rt(rt::Task& __rt, float v);", "float BlockSum<BLOCK>::sum__rt(rt::Task& __rt, float v)",
                  "static __device__ unsigned first_index__rt(rt::Task& __rt)",
                  "template <class __RtL> __device__ float neighbour_sum__rt(rt::Task& __rt, __RtL& __rt_sh, int i",
                  "return 2.0f * neighbour_sum__rt(__rt, __rt_sh, i, n);"]:
        assert clone in out, clone
    assert "bs.sum__rt(__rt, v)" in out and "BlockSum<BLOCK>::first_index__rt(__rt)" in out
    assert "s.doubled__rt(__rt, __rt_sh, i, n)" in out
    pair = next(m for m in res.rkernels if m.name == "pair_sums")
    assert [v.member for v in pair.shared_variables] == ["neighbour_sum__stage"]


@pytest.mark.parametrize("block,n", [(64, 200), (128, 500), (128, 512)])
def test_class_template_members_verify_bit_exact(tmp_path, block, n):
    grid = (n + block - 1) // block
    spec = _spec(tmp_path, "center_rows", [block], grid, block, 0,
                 [f"{{name: in, kind: buffer, dtype: float32, size: {n}, init: random}}",
                  f"{{name: out, kind: buffer, dtype: float32, size: {n}, init: zeros}}",
                  f"{{name: n, kind: scalar, dtype: int32, value: {n}}}"], ["out"])
    run = run_file(str(MEMBERS), str(spec))
    x = np.zeros(grid * block)
    x[:n] = run.inputs["in"]
    rows = x.reshape(grid, block)
    np.testing.assert_allclose(run.outputs["out"], (rows - rows.mean(axis=1, keepdims=True)).ravel()[:n],
                               rtol=1e-5, atol=1e-5)
    _verified(MEMBERS, spec)


@pytest.mark.parametrize("block", [64, 96, 256])
def test_member_with_its_own_shared_buffer_verifies_bit_exact(tmp_path, block):
    n = 3 * block - 7
    spec = _spec(tmp_path, "pair_sums", [], 3, block, 0,
                 [f"{{name: in, kind: buffer, dtype: float32, size: {n}, init: random}}",
                  f"{{name: out, kind: buffer, dtype: float32, size: {n}, init: zeros}}",
                  f"{{name: n, kind: scalar, dtype: int32, value: {n}}}"], ["out"])
    run = run_file(str(MEMBERS), str(spec))
    x = np.zeros(3 * block, np.float32)
    x[:n] = run.inputs["in"]
    rows = x.reshape(3, block)
    want = (2 * (rows + np.roll(rows, -1, axis=1))).ravel()[:n]
    assert np.array_equal(run.outputs["out"], want)
    _verified(MEMBERS, spec)


@pytest.mark.nvcc
def test_samples_reduction_and_members_compile_for_sm90(nvcc_path, tmp_path):
    """The converted files (clones inside the classes, out-of-class clone definitions) compile for sm_90 with the
    instantiations a host launcher would make."""
    from toolchain.nvcc import nvcc_compile
    from vdevice import RUNTIME_INCLUDE
    insts = {REDUCE: ["template __global__ void scan_blocks<float>(const float *, float *, float *, int);",
                      "template __global__ void reduce_first_add<double>(const double *, double *, unsigned);"],
             MEMBERS: []}
    for cu, extra in insts.items():
        src = tmp_path / f"{cu.stem}.rtask.cu"
        src.write_text(convert_file(str(cu)).output + "\n" + "\n".join(extra) + "\n")
        r = nvcc_compile(src, src.with_suffix(".cubin"), "sm_90", ["-cubin"],
                         include_dirs=[str(RUNTIME_INCLUDE), str(cu.parent)])
        assert r.returncode == 0, f"{cu.name}: " + (r.stdout + r.stderr)[-4000:]


def test_header_class_member_that_needs_the_context_is_refused_precisely(tmp_path):
    """A local header's class cannot gain a clone (the header is never written): its member that reads the
    indices is refused at the call, one line naming the header; its member that needs nothing converts."""
    header = ("#pragma once\nstruct Lane { __device__ int get() const { return threadIdx.x % 32; }\n"
              "  __device__ float twice(float v) const { return 2.0f * v; } };\n")
    (tmp_path / "lane.h").write_text(header)
    cu = tmp_path / "k.cu"
    cu.write_text('#include "lane.h"\n__global__ void a(float *x) { Lane l; x[threadIdx.x] = l.get(); }\n'
                  "__global__ void b(float *x) { Lane l; x[threadIdx.x] = l.twice(x[threadIdx.x]); }\n")
    res = convert_file(str(cu))
    assert [m.name for m in res.rkernels] == ["b"]
    assert res.refused == [{"name": "a", "diagnostics": [
        f"{cu}:2:56: error: 'get' (a member of a class in lane.h) uses threadIdx: a local header's class cannot be "
        "given a clone that takes the rTask (the header is not rewritten)"]}]
    assert (tmp_path / "lane.h").read_text() == header


# ---- specs from the host code (rtransform/host_spec.py) ----------------------------------------------------------
APP = KDIR / "host_launch" / "saxpy_app.cu"


def _host_spec(tmp_path: Path, kernel: str, **kw) -> tuple[Path, object]:
    from rtransform.host_spec import spec_from_host
    hs = spec_from_host(APP.read_text(), str(APP), kernel, **kw)
    path = tmp_path / f"{kernel}.spec.yaml"
    path.write_text(hs.yaml)
    return path, hs


def test_host_spec_reads_main_sizes_mallocs_and_scales_down(tmp_path):
    """saxpy<<<blocks, kThreads>>> in main: N = 1 << 20 scaled to a size the emulator runs (said in a note), the
    grid recomputed from it, buffers from cudaMalloc(bytes); the spec runs and matches numpy."""
    spec, hs = _host_spec(tmp_path, "saxpy")
    assert hs.notes == ["N = 1048576 in the source; 16384 here so that the CPU emulator runs it (--set N=VALUE)"]
    data = yaml.safe_load(spec.read_text())
    assert data["grid"] == [64, 1, 1] and data["block"] == [256, 1, 1]
    assert [a.get("size", a.get("value")) for a in data["args"]] == [16384, 2.0, 16384, 16384]
    run = run_file(str(APP), str(spec))
    np.testing.assert_allclose(run.outputs["y"], 2 * run.inputs["x"] + run.inputs["y"], rtol=1e-6)


def test_host_spec_follows_a_launcher_and_cudalaunchkernel(tmp_path):
    """transpose_tile<TILE> launched by run_transpose(d_in, d_out, rows, cols) from main (dim3s of a function-like
    macro), scale_rows through cudaLaunchKernel with its args array: both run and match numpy."""
    spec, hs = _host_spec(tmp_path, "transpose_tile")
    data = yaml.safe_load(spec.read_text())
    rows, cols = data["args"][2]["value"], data["args"][3]["value"]
    assert data["template_args"] == [16] and data["block"] == [16, 16, 1]
    assert data["grid"] == [-(-cols // 16), -(-rows // 16), 1] and data["args"][0]["size"] == rows * cols
    assert any(n.startswith("rows = 300 in the source") for n in hs.notes)
    run = run_file(str(APP), str(spec))
    want = run.inputs["in"].reshape(rows, cols).T.ravel()
    np.testing.assert_array_equal(run.outputs["out"], want)
    spec, _ = _host_spec(tmp_path, "scale_rows")
    run = run_file(str(APP), str(spec))
    r, c = run.inputs["rows"], run.inputs["cols"]
    want = (run.inputs["m"].reshape(r, c) * run.inputs["s"][:, None]).ravel()
    np.testing.assert_allclose(run.outputs["m"], want, rtol=1e-6)
    assert verify_file(str(APP), str(spec)).ok


def test_host_spec_set_gives_the_size_and_cli_falls_back_to_the_skeleton(tmp_path):
    """--set N=4096 is the problem size (no scaling note); a kernel no host code launches gets the skeleton, with
    one note line saying so."""
    _, hs = _host_spec(tmp_path, "saxpy", overrides={"N": 4096})
    assert hs.notes == [] and "value: 4096" in hs.yaml and "grid: [16, 1, 1]" in hs.yaml
    r = run_cli("spec", str(APP), "--kernel", "saxpy", "--from-host", "--set", "N=4096")
    assert r.returncode == 0 and "grid: [16, 1, 1]" in r.stdout, r.stderr
    lone = tmp_path / "lone.cu"
    lone.write_text("__global__ void k(float *x, int n) { int i = threadIdx.x; if (i < n) x[i] = 1.0f; }\n")
    r = run_cli("spec", str(lone), "--kernel", "k", "--from-host")
    assert r.returncode == 0 and "launch spec skeleton for k" in r.stdout
    notes = r.stderr.strip().splitlines()
    assert notes[0] == f"{lone}: note: no launch of k in the host code read; the skeleton guess instead"
    assert notes[1:] and all(n.startswith(f"{lone}: note: k: guessed ") for n in notes[1:])  # the skeleton's guesses


TEX_FUNCTOR = """#include <cuda_runtime.h>
texture<float, 1, cudaReadModeElementType> tex_in;
struct TexFetch {
  __device__ float operator()(int i) const { return tex1Dfetch(tex_in, i); }
};
struct Plain {
  const float *p;
  __device__ float operator()(int i) const { return p[i]; }
};
template <class F>
__global__ void gather(F f, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = f(i);
}
__global__ void twice(float *out, int n) { int i = threadIdx.x; if (i < n) out[i] *= 2.0f; }
void run(float *d_out, const float *d_in, int n) {
  gather<<<(n + 127) / 128, 128>>>(TexFetch{}, d_out, n);
  gather<<<(n + 127) / 128, 128>>>(Plain{d_in}, d_out, n);
}
"""


def test_texture_fetch_through_a_functor_template_argument_is_refused_at_the_call(tmp_path):
    """A functor passed as a template argument whose operator() fetches from a texture reference would keep the
    fetch in the rTask (before: kept, and verify failed in the emulator's launcher): refused at `f(i)`, naming
    the functor and the fetch; the file's other kernel converts; without that functor the template converts."""
    cu = tmp_path / "g.cu"
    cu.write_text(TEX_FUNCTOR)
    res = convert_file(str(cu))
    assert [m.name for m in res.rkernels] == ["twice"]
    assert res.refused == [{"name": "gather", "diagnostics": [
        f"{cu}:13:23: error: 'f' (F) is called as a functor, and 'TexFetch' is passed for it: its operator() "
        "(line 4) uses texture/surface access tex1Dfetch, which cannot run as an rTask"]}]
    cu.write_text(TEX_FUNCTOR.replace("gather<<<(n + 127) / 128, 128>>>(TexFetch{}, d_out, n);\n", ""))
    assert sorted(m.name for m in convert_file(str(cu)).rkernels) == ["gather", "twice"]


def test_compiler_headers_named_by_the_file_are_not_missing(tmp_path):
    """<stdarg.h> is the compiler's own header (the parser ships it): naming it before <stdio.h> must not turn it
    into an empty 'missing' header that <stdio.h> then reads (it needs __gnuc_va_list from it)."""
    cu = tmp_path / "log.cu"
    cu.write_text("#include <stdarg.h>\n#include <stdio.h>\n"
                  "void log_msg(const char *fmt, ...) { va_list ap; va_start(ap, fmt); vprintf(fmt, ap); va_end(ap); }\n"
                  "__global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n")
    res = convert_file(str(cu))
    assert [m.name for m in res.rkernels] == ["k"] and res.warnings == []


BENCH_APP = """#include <cstdio>
#if !defined(SMALL) && !defined(LARGE)
#define MEDIUM
#endif
#ifdef SMALL
#define M 64
#endif
#ifdef MEDIUM
#define M 128
#endif
typedef float real;
const int chunks = 64;
const size_t ds = 1024 * 1024 * chunks;
__global__ void row_scale(const real *in, real *out) {
  int r = blockIdx.x, c = threadIdx.x;
  for (int k = c; k < M; k += blockDim.x) out[r * M + k] = 2 * in[r * M + k];
}
__global__ void halve(real *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 0.5f; }
int main() {
  real *d_in, *d_out, *d_x;
  cudaMalloc(&d_in, M * M * sizeof(real));
  cudaMalloc(&d_out, M * M * sizeof(real));
  row_scale<<<M, 32>>>(d_in, d_out);
  cudaMalloc(&d_x, ds * sizeof(real));
  halve<<<(ds + 255) / 256, 256>>>(d_x, ds);
  return 0;
}
"""


def test_host_spec_reads_active_macros_keeps_device_constants_and_scales_products(tmp_path):
    """The #if branch the preprocessor takes gives M = 128, which the kernel reads itself, so it is never scaled
    (its buffers are M * M through a typedef's sizeof); ds = 1024 * 1024 * chunks, which only the host uses, is
    scaled down; -DSMALL picks the other branch. Every spec runs."""
    from converter.flags import CompileFlags
    from rtransform.host_spec import spec_from_host
    cu = tmp_path / "bench.cu"
    cu.write_text(BENCH_APP)
    rows = yaml.safe_load(spec_from_host(BENCH_APP, str(cu), "row_scale").yaml)
    assert rows["grid"] == [128, 1, 1] and [a["size"] for a in rows["args"]] == [128 * 128, 128 * 128]
    small = yaml.safe_load(spec_from_host(BENCH_APP, str(cu), "row_scale", flags=CompileFlags(defines=("SMALL",)))
                           .yaml)
    assert small["grid"] == [64, 1, 1] and small["args"][0]["size"] == 64 * 64
    hs = spec_from_host(BENCH_APP, str(cu), "halve")
    half = yaml.safe_load(hs.yaml)
    n = half["args"][1]["value"]
    assert hs.notes == [f"ds = 67108864 in the source; {n} here so that the CPU emulator runs it (--set ds=VALUE)"]
    assert half["args"][0]["size"] == n and half["grid"] == [-(-n // 256), 1, 1]
    for kernel, data in (("row_scale", rows), ("halve", half)):
        spec = tmp_path / f"{kernel}.yaml"
        spec.write_text(yaml.safe_dump(data))
        run = run_file(str(cu), str(spec))
        name = "out" if kernel == "row_scale" else "x"
        want = 2 * run.inputs["in"] if kernel == "row_scale" else 0.5 * run.inputs["x"]
        np.testing.assert_allclose(run.outputs[name], want, rtol=1e-6)


def test_template_callee_shared_tiles_take_the_one_instantiation_each_kernel_calls(tmp_path):
    """transpose_tiles<TILE, index_t>'s __shared__ tile is sized by its template parameters: each extern "C"
    kernel calls one instantiation, so its layout holds the tile at that size (before: refused); a kernel calling
    two instantiations gets one tile per instantiation, as CUDA does (it was refused), reached through the
    layout's accessor, and verifies (one shared tile would race: the second call writes what the first reads)."""
    cu = KDIR / "template_callee_smem" / "block_transpose.cu"
    res = convert_file(str(cu))
    assert sorted(m.name for m in res.rkernels) == ["transpose_16_long", "transpose_8_int"] and not res.refused
    assert "float transpose_tiles__tile[(8)][(8) + 1];" in res.output
    assert "float transpose_tiles__tile[(16)][(16) + 1];" in res.output
    spec = tmp_path / "t8.yaml"
    spec.write_text("kernel: transpose_8_int\ngrid: [5, 4]\nblock: [8, 8]\nargs:\n"
                    "- {name: out, kind: buffer, dtype: float32, size: 1000, init: zeros}\n"
                    "- {name: in, kind: buffer, dtype: float32, size: 1000, init: random}\n"
                    "- {name: rows, kind: scalar, dtype: int32, value: 25}\n"
                    "- {name: cols, kind: scalar, dtype: int32, value: 40}\noutputs: [out]\ntolerance: 0\n")
    run = run_file(str(cu), str(spec))
    np.testing.assert_array_equal(run.outputs["out"], run.inputs["in"].reshape(25, 40).T.ravel())
    assert verify_file(str(cu), str(spec)).ok
    two = tmp_path / "two.cu"
    two.write_text(cu.read_text() + 'extern "C" __global__ void both(float *o, const float *i, int r, int c) {\n'
                   "  transpose_tiles<8, int>(o, i, r, c);\n  transpose_tiles<16, int>(o, i, r, c);\n}\n")
    res = convert_file(str(two))
    assert "both" in [m.name for m in res.rkernels] and not res.refused
    assert "struct both__rt_shared { float transpose_tiles__tile__0[(8)][(8) + 1]; float transpose_tiles__tile__1" \
        "[(16)][(16) + 1]; template <auto __rt_p0, class __rt_p1> __device__ auto& transpose_tiles__tile()" in res.output
    both = tmp_path / "both.yaml"
    both.write_text(spec.read_text().replace("transpose_8_int", "both").replace("[out]", "[o]")
                    .replace("name: out", "name: o").replace("name: in", "name: i").replace("name: rows", "name: r")
                    .replace("name: cols", "name: c"))
    assert verify_file(str(two), str(both)).ok


def test_equal_infinities_agree_in_a_tolerance_compare():
    """A Monte-Carlo course kernel whose sum overflows to -inf on both sides agrees (inf - inf is nan: it was
    reported as differing with 'legacy -inf vs rKernel -inf'); opposite infinities and a finite value still differ."""
    from rtransform.verify import compare
    legacy = np.array([-np.inf, np.inf, 1.0], np.float32)
    assert compare("s", legacy, legacy.copy(), 1e-5).ok
    assert not compare("s", legacy, np.array([np.inf, np.inf, 1.0], np.float32), 1e-5).ok
    assert not compare("s", legacy, np.array([-np.inf, 3.0e38, 1.0], np.float32), 1e-5).ok


# Launch configurations the way course and sample programs write them (written here in that style): an extern "C"
# launcher whose dim3s divide the image by the tile, sizes set by a chained assignment, dim3s declared bare and
# assigned later, a file-scope dim3 whose field is set in main, a grid from a parenthesised expression over a size
# the kernel reads itself, and a grid divided by a count only known at run time.
LAUNCH_APP = """#include <cstdio>
#define TILE_X 16
#define TILE_Y 4
#define STEPS 2
#define COUNT 300000
__global__ void rows_twice(float *dst, const float *src, int w, int h) {
  int y = blockIdx.y * TILE_Y + threadIdx.y;
  for (int s = 0; s < STEPS; s++) {
    int x = (blockIdx.x * STEPS + s) * TILE_X + threadIdx.x;
    if (x < w && y < h) dst[y * w + x] = 2.0f * src[y * w + x];
  }
}
__global__ void add_one(float *a) { a[blockIdx.x * blockDim.x + threadIdx.x] += 1.0f; }
__global__ void negate(float *a) { int i = blockIdx.x * blockDim.x + threadIdx.x; a[i] = -a[i]; }
__global__ void axpy_fixed(const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < COUNT) y[i] = 3.0f * x[i] + y[i];
}
__global__ void per_worker(float *a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] *= 4.0f; }
__global__ void tile_twice(float *partial, const float *in) {
  int row = blockIdx.y * 16 + threadIdx.y;
  partial[row * 16 + threadIdx.x] = 2.0f * in[row * 16 + threadIdx.x];
}
__global__ void fill_index(int *out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = i;
}
#define NVAR 3
template <typename T> T *dev_alloc(int count) {
  T *t;
  cudaMalloc((void **)&t, sizeof(T) * count);
  return t;
}
__global__ void init_vars(int nelr, float *vars) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int j = 0; j < NVAR; j++) vars[i + j * nelr] = (float)(j + 1);
}
void init_gpu(int nelr, float *vars) {
  dim3 Dg(nelr / 64), Db(64);
  init_vars<<<Dg, Db>>>(nelr, vars);
}
struct net_t { int input_n; };
unsigned int num_tiles = 0;
dim3 block(64);
dim3 grid;
extern "C" void rows_gpu(float *d_dst, float *d_src, int w, int h) {
  dim3 blocks(w / (STEPS * TILE_X), h / TILE_Y);
  dim3 threads(TILE_X, TILE_Y);
  rows_twice<<<blocks, threads>>>(d_dst, d_src, w, h);
}
int main(int argc, char **argv) {
  int W, H;
  W = H = 128;
  float *d_src, *d_dst, *d_a, *d_b, *d_x, *d_y, *d_w;
  cudaMalloc((void **)&d_src, W * H * sizeof(float));
  cudaMalloc((void **)&d_dst, W * H * sizeof(float));
  rows_gpu(d_dst, d_src, W, H);
  int n = 4096;
  dim3 threads, blocks;
  cudaMalloc((void **)&d_a, n * sizeof(float));
  threads = dim3(128, 1);
  blocks = dim3(n / threads.x, 1);
  add_one<<<blocks, threads>>>(d_a);
  int count = 2048;
  cudaMalloc((void **)&d_b, count * sizeof(float));
  grid.x = count / block.x;
  negate<<<grid, block>>>(d_b);
  int per_block = 256;
  int nblocks = (COUNT + (per_block - 1)) / per_block;
  cudaMalloc((void **)&d_x, COUNT * sizeof(float));
  cudaMalloc((void **)&d_y, COUNT * sizeof(float));
  axpy_fixed<<<nblocks, per_block>>>(d_x, d_y);
  int workers = atoi(argv[1]);
  cudaMalloc((void **)&d_w, n * sizeof(float));
  dim3 wgrid(n / (128 * workers));
  per_worker<<<wgrid, 128>>>(d_w, n);
  net_t *net = (net_t *)malloc(sizeof(net_t));
  net->input_n = atoi(argv[2]);
  int in = net->input_n;
  num_tiles = in / 16;
  dim3 tgrid(1, num_tiles), tthreads(16, 16);
  float *d_p, *d_i;
  cudaMalloc((void **)&d_i, in * 16 * sizeof(float));
  cudaMalloc((void **)&d_p, in * 16 * sizeof(float));
  tile_twice<<<tgrid, tthreads>>>(d_p, d_i);
  cudaDeviceProp props;
  cudaGetDeviceProperties(&props, 0);
  int *d_f;
  cudaMalloc((void **)&d_f, 5000 * sizeof(int));
  fill_index<<<props.multiProcessorCount * 2, 64>>>(d_f, 5000);
  int nel = atoi(argv[3]);
  int nelr = 64 * ((nel / 64) + min(1, nel % 64));
  float *vars = dev_alloc<float>(nelr * NVAR);
  init_gpu(nelr, vars);
  return 0;
}
"""


def _launch_app_spec(tmp_path: Path, kernel: str) -> tuple[Path, dict, list[str]]:
    from rtransform.host_spec import spec_from_host
    cu = tmp_path / "launch_app.cu"
    cu.write_text(LAUNCH_APP)
    hs = spec_from_host(LAUNCH_APP, str(cu), kernel)
    spec = tmp_path / f"{kernel}.spec.yaml"
    spec.write_text(hs.yaml)
    return spec, yaml.safe_load(hs.yaml), hs.notes


def test_host_spec_reads_launcher_dim3s_chained_sizes_and_late_dim3s(tmp_path):
    """The extern "C" launcher's dim3s over W = H = 128 (a chained assignment), dim3s declared bare and assigned
    `threads = dim3(128, 1)` later, a file-scope `dim3 block(64)` with `grid.x` set in main: each spec has the
    program's own launch, runs, and matches numpy."""
    cu = tmp_path / "launch_app.cu"
    spec, data, notes = _launch_app_spec(tmp_path, "rows_twice")
    assert data["grid"] == [4, 32, 1] and data["block"] == [16, 4, 1] and not notes
    assert [a.get("size", a.get("value")) for a in data["args"]] == [128 * 128, 128 * 128, 128, 128]
    run = run_file(str(cu), str(spec))
    np.testing.assert_allclose(run.outputs["dst"], 2 * run.inputs["src"], rtol=1e-6)
    assert verify_file(str(cu), str(spec)).ok
    spec, data, _ = _launch_app_spec(tmp_path, "add_one")
    assert data["grid"] == [32, 1, 1] and data["block"] == [128, 1, 1] and data["args"][0]["size"] == 4096
    run = run_file(str(cu), str(spec))
    np.testing.assert_allclose(run.outputs["a"], run.inputs["a"] + 1, rtol=1e-6)
    spec, data, _ = _launch_app_spec(tmp_path, "negate")
    assert data["grid"] == [32, 1, 1] and data["block"] == [64, 1, 1] and data["args"][0]["size"] == 2048
    run = run_file(str(cu), str(spec))
    np.testing.assert_array_equal(run.outputs["a"], -run.inputs["a"])


def test_host_spec_reads_dim3_declarator_lists_and_defaults_member_reads(tmp_path):
    """`dim3 tgrid(1, num_tiles), tthreads(16, 16);` (two declarators, one declaration) over a size read through a
    pointer (`in = net->input_n`, a run-time value: the default, said in a note), and a grid of
    `props.multiProcessorCount * 2` blocks (a device property: the default, scaled to fit): the specs run and match
    numpy."""
    cu = tmp_path / "launch_app.cu"
    spec, data, notes = _launch_app_spec(tmp_path, "tile_twice")
    assert any(n.startswith("net->input_n: not derived") for n in notes)
    rows = data["grid"][1] * 16
    assert data["grid"][0] == 1 and data["block"] == [16, 16, 1] and data["args"][0]["size"] == rows * 16
    run = run_file(str(cu), str(spec))
    np.testing.assert_allclose(run.outputs["partial"], 2 * run.inputs["in"], rtol=1e-6)
    spec, data, notes = _launch_app_spec(tmp_path, "fill_index")  # a grid of props.multiProcessorCount * 2
    assert any(n.startswith("props.multiProcessorCount: not derived") for n in notes)
    assert data["block"] == [64, 1, 1] and 1 <= data["grid"][0] * 64 <= 1 << 14 and data["args"][0]["size"] == 5000
    run = run_file(str(cu), str(spec))
    np.testing.assert_array_equal(run.outputs["out"], np.arange(5000))


def test_host_spec_reads_a_helper_that_returns_what_it_allocates(tmp_path):
    """`vars = dev_alloc<float>(nelr * NVAR)` (a template helper that cudaMallocs sizeof(T) * count and returns it)
    sizes the buffer the launcher's kernel indexes as vars[i + j * nelr], j < NVAR: before, it was sized one per
    thread and the legacy run read past it. The spec runs; each of the NVAR planes holds j + 1 (numpy)."""
    cu = tmp_path / "launch_app.cu"
    spec, data, notes = _launch_app_spec(tmp_path, "init_vars")
    nelr = data["args"][0]["value"]
    assert data["grid"] == [nelr // 64, 1, 1] and data["args"][1]["size"] == 3 * nelr
    assert not any(n.startswith("vars: no cudaMalloc") for n in notes)
    run = run_file(str(cu), str(spec))
    np.testing.assert_array_equal(run.outputs["vars"], np.repeat(np.arange(1, 4, dtype=np.float32), nelr))


def test_host_spec_clips_a_grid_over_device_sizes_and_lifts_a_grid_below_one(tmp_path):
    """COUNT = 300000 is read by the kernel (never scaled), so its grid of (COUNT + 255) / 256 blocks is clipped to
    what the emulator runs, said in a note: the first blocks compute, the rest keep their inputs (numpy). A grid
    n / (128 * workers) over a worker count read from argv (1024 here) is 0 blocks: 1 block, said in a note."""
    cu = tmp_path / "launch_app.cu"
    spec, data, notes = _launch_app_spec(tmp_path, "axpy_fixed")
    blocks = -(-300000 // 256)
    assert data["block"] == [256, 1, 1] and 1 <= data["grid"][0] * 256 <= 1 << 14 and data["grid"][1:] == [1, 1]
    assert [a["size"] for a in data["args"]] == [300000, 300000]
    assert any(n.startswith(f"grid 'nblocks' = [{blocks}, 1, 1] in the source") for n in notes)
    run = run_file(str(cu), str(spec))
    done = data["grid"][0] * 256
    want = run.inputs["y"].copy()
    want[:done] = 3 * run.inputs["x"][:done] + run.inputs["y"][:done]
    np.testing.assert_allclose(run.outputs["y"], want, rtol=1e-6)
    spec, data, notes = _launch_app_spec(tmp_path, "per_worker")
    assert data["grid"] == [1, 1, 1] and data["block"] == [128, 1, 1]
    assert any(n.startswith("workers: not derived") for n in notes) and any("side below 1" in n for n in notes)
    run = run_file(str(cu), str(spec))
    want = run.inputs["a"].copy()
    want[:128] *= 4
    np.testing.assert_allclose(run.outputs["a"], want, rtol=1e-6)


def test_limits_macros_need_no_include_as_under_nvcc(tmp_path):
    """A frontier kernel in the style of graph benchmarks tests `level[v] == UINT_MAX` and includes nothing (nvcc's
    implicit cuda_runtime.h brings <limits.h>): it converts (it was refused, 'use of undeclared identifier') and
    verifies; the unvisited vertices get the next level (numpy)."""
    cu = tmp_path / "frontier.cu"
    cu.write_text("__global__ void visit(unsigned *level, const int *next, int n, unsigned depth) {\n"
                  "  int v = blockIdx.x * blockDim.x + threadIdx.x;\n"
                  "  if (v < n && level[v] == UINT_MAX && next[v] != 0) level[v] = depth + 1;\n"
                  "  if (v < n && level[v] > INT_MAX) level[v] = UINT_MAX;\n}\n")
    res = convert_file(str(cu))
    assert [m.name for m in res.rkernels] == ["visit"] and not res.refused
    n = 300
    spec = tmp_path / "visit.yaml"
    spec.write_text(f"kernel: visit\ngrid: [{-(-n // 64)}]\nblock: [64]\nargs:\n"
                    f"- {{name: level, kind: buffer, dtype: uint32, size: {n}, init: random, low: 4294967290, "
                    "high: 4294967296}\n"
                    f"- {{name: next, kind: buffer, dtype: int32, size: {n}, init: random, low: 0, high: 2}}\n"
                    f"- {{name: n, kind: scalar, dtype: int32, value: {n}}}\n"
                    "- {name: depth, kind: scalar, dtype: uint32, value: 6}\noutputs: [level]\ntolerance: 0\n")
    run = run_file(str(cu), str(spec))
    level = run.inputs["level"].copy()
    level[(level == 0xFFFFFFFF) & (run.inputs["next"] != 0)] = 7
    level[level > 0x7FFFFFFF] = 0xFFFFFFFF
    assert (level == 7).sum() > 10 and (level == 0xFFFFFFFF).sum() > 10
    np.testing.assert_array_equal(run.outputs["level"], level)
    assert verify_file(str(cu), str(spec)).ok
