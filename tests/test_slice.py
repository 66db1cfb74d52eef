"""Device-code slicing: host code goes, what the kernel needs stays at the same line and column."""
from __future__ import annotations

import random

import pytest

from converter.slice import SliceError, device_slice, slice_source
from toolchain.nvcc import nvcc_compile

KEEP = [  # in dependency order; each piece is needed by kernel `k` below
    "#define SCALE 2.0f\n",
    "struct Pair {\n  float a, b;\n};\n",
    "__constant__ float coef[4];\n",
    "constexpr int kWidth = 8;\n",
    "__device__ float helper(float v) { return v * SCALE + coef[0]; }\n",
    "template <typename T>\n__device__ T twice(T v) {\n  return v + v;\n}\n",
    "namespace inner {\n__device__ float neg(float x) { return -x; }\n}  // namespace inner\n",
    "#define APPLY(x) inner::neg(x)\n",
]
DROP = [  # host code and device code the kernel never reaches
    "static void host_log(const char* s) { printf(\"%s\\n\", s); }\n",
    "float* g_host_buffer = nullptr;\n",
    "vendorblasHandle_t g_handle;\n",
    "__device__ float unused_helper(float x) { return x + undeclared_var; }\n",
    "__global__ void other_kernel(float* p) {\n  p[0] = 1.f;\n}\n",
    "static vendorblasStatus_t make_handle() {\n  return vendorblasCreate(&g_handle);\n}\n",
    "struct HostOnly {\n  vendorblasHandle_t h;\n};\n",
]
KERNEL = ("__global__ void k(Pair* out, const float* in, int n) {\n"
          "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
          "  if (i < n && i < kWidth * 100) { out[i].a = helper(in[i]); out[i].b = APPLY(twice(in[i])); }\n"
          "}\n")
MAIN = ("int main() {\n  float* d;\n  cudaMalloc(&d, 64);\n  k<<<1, 32>>>((Pair*)d, d, 8);\n"
        "  cudaDeviceSynchronize();\n  return 0;\n}\n")
HEADER = "#include <cstdio>\n#include <cuda_runtime.h>\n#include <vendorblas_v2.h>\n"


def build(seed: int) -> tuple[str, list[tuple[int, int, bool]]]:
    """A file mixing KEEP, DROP, KERNEL and MAIN in a seeded order; returns text and (start, end, kept) spans."""
    rng = random.Random(seed)
    pieces = [(p, True) for p in KEEP]
    for d in rng.sample(DROP, k=rng.randint(3, len(DROP))):
        pieces.insert(rng.randint(0, len(pieces)), (d, False))
    pieces += [(KERNEL, True), (MAIN, False)]
    text, spans = HEADER, []
    for body, kept in pieces:
        text += "\n" * rng.randint(0, 2)
        spans.append((len(text), len(text) + len(body), kept))
        text += body
    return text, spans


@pytest.mark.parametrize("seed", range(5))
def test_mixed_file_keeps_device_code_in_place(tmp_path, seed):
    text, spans = build(seed)
    res = slice_source(text, str(tmp_path / "mix.cu"), ["k"])
    out = res.text
    assert len(out) == len(text) and out.count("\n") == text.count("\n")
    for start, end, kept in spans:
        if kept:
            assert out[start:end] == text[start:end]
        else:
            assert set(out[start:end].split()) <= {";"}, out[start:end]
    assert "vendorblas" not in out and "main" not in out and "cudaMalloc" not in out
    assert res.dropped_includes == ["vendorblas_v2.h"]
    assert "#include <cstdio>" in out and "#include <cuda_runtime.h>" in out


@pytest.mark.nvcc
def test_sliced_file_compiles_with_nvcc(tmp_path, nvcc_path):
    text, _ = build(7)
    src = tmp_path / "mix.cu"
    src.write_text(device_slice(text, str(src), ["k"]))
    proc = nvcc_compile(src, tmp_path / "mix.o")
    assert proc.returncode == 0, proc.stderr


def test_all_kernels_when_none_named(tmp_path):
    text, spans = build(3)
    text += "__global__ void second(float* p) { p[0] = helper(p[1]); }\n"
    res = slice_source(text, str(tmp_path / "mix.cu"))
    assert set(res.kernels) >= {"k", "second", "other_kernel"}
    assert "__global__ void second" in res.text and "__device__ float helper" in res.text


def position(text: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """1-based line and column of the nth occurrence of needle."""
    off = -1
    for _ in range(nth + 1):
        off = text.index(needle, off + 1)
    return text.count("\n", 0, off) + 1, off - (text.rfind("\n", 0, off) + 1) + 1


def test_kernel_needing_a_dropped_header_is_reported(tmp_path):
    text = (HEADER + "__device__ void use(vendorblasHandle_t h) {}\n"
            "__global__ void gemm_epilogue(float* c) {\n  vendorblasHandle_t h;\n  use(h);\n  c[0] = 0.f;\n}\n" + MAIN)
    f = str(tmp_path / "e.cu")
    with pytest.raises(SliceError) as e:
        device_slice(text, f, ["gemm_epilogue"])
    line, col = position(text, "vendorblasHandle_t", 0)
    assert e.value.diagnostics[0] == (f"{f}:{line}:{col}: error: 'vendorblasHandle_t' is not declared "
                                      f"(needed by kernel gemm_epilogue); missing header 'vendorblas_v2.h'?")
    line2, col2 = position(text, "vendorblasHandle_t", 1)
    assert f"{f}:{line2}:{col2}: error: 'vendorblasHandle_t'" in e.value.diagnostics[1]


def test_undeclared_through_a_helper_names_the_kernel(tmp_path):
    text = ("#include <cuda_fp8.h>\n\n__device__ float to_f(__nv_fp8_e4m3 v) { return float(v); }\n"
            "__global__ void dequant(const __nv_fp8_e4m3* q, float* y) { y[threadIdx.x] = to_f(q[threadIdx.x]); }\n")
    with pytest.raises(SliceError) as e:
        device_slice(text, "fp8.cu", ["dequant"])
    line, col = position(text, "__nv_fp8_e4m3")
    assert e.value.diagnostics[0] == (f"fp8.cu:{line}:{col}: error: '__nv_fp8_e4m3' is not declared (needed by "
                                      "kernel dequant); missing header 'cuda_fp8.h'?")


def test_unknown_kernel(tmp_path):
    text, _ = build(1)
    with pytest.raises(SliceError, match=r"kernel 'nope' not found \(__global__ functions: k, other_kernel\)"):
        device_slice(text, "mix.cu", ["nope"])


def test_extern_c_namespace_and_template_kernels(tmp_path):
    text = ('#include <cstdlib>\nnamespace ops {\n__device__ float sq(float x) { return x * x; }\n'
            'void host_in_ns() { exit(1); }\ntemplate <int N> __global__ void tk(float* y) { y[0] = sq(N); }\n}\n'
            'extern "C" __global__ void ck(float* y) { y[0] = ops::sq(y[1]); }\n'
            'extern "C" { void host_c() {} }\nextern "C" int host_decl(int);\n')
    out = device_slice(text, "ns.cu", ["ck"])
    assert 'extern "C" __global__ void ck' in out and "__device__ float sq" in out
    assert "host_in_ns" not in out and "host_c" not in out and "host_decl" not in out and "tk" not in out
    assert out.count("{") == out.count("}") and "namespace ops {" in out
    out = device_slice(text, "ns.cu", ["ops::tk"])
    assert "template <int N> __global__ void tk" in out and "ck" not in out
