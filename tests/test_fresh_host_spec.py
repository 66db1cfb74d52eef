"""`spec --from-host` on host code as found in public repositories (an outside pass over unseen code).

File constants spelled with shifts (CoffeeBeforeArch-style `constexpr int K = (1 << 11) + 7;`): such a constant was skipped as "not derived", a default of 1024
replaced it in the spec's sizes, and the kernel, which reads the constant itself, ran past the spec's buffers."""
import pytest
import yaml

from rtransform.host_spec import spec_from_host
from rtransform.skeleton import find_launch

SOURCE = """
constexpr int N = {expr};
__global__ void fill(float* a) {{
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += blockDim.x * gridDim.x) a[i] = 1.0f;
}}
int main() {{
  float* d;
  cudaMalloc(&d, N * sizeof(float));
  fill<<<(N + 127) / 128, 128>>>(d);
  return 0;
}}
"""


@pytest.mark.parametrize("expr, value", [("(1 << 12) + 7", 4103), ("(1 << 10) * 3", 3072), ("(8192 >> 1)", 4096),
                                         ("(1u << 11)", 2048)])
def test_fresh_shift_constant_sizes_the_buffer(expr: str, value: int) -> None:
    """The buffer the kernel indexes up to N gets N elements, N as the C expression says (not a default)."""
    spec = spec_from_host(SOURCE.format(expr=expr), "fill.cu", "fill")
    doc = yaml.safe_load(spec.yaml)
    assert doc["args"][0]["size"] == value
    assert doc["grid"] == [-(-value // 128), 1, 1]
    assert not any("not derived" in n for n in spec.notes)



LAUNCH_SOURCE = """
#define N {n}
__global__ void half(float* v, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] *= 0.5f;
}}
int main() {{
  float* d;
  cudaMalloc(&d, N * sizeof(float));
  dim3 grid({grid});
  half {open}grid, {block}{close}(d, N);
  return 0;
}}
"""


def launch_spec(n: int, grid: str, block: int = 256, open_: str = "<<<", close: str = ">>>") -> dict:
    """The spec `--from-host` reads from LAUNCH_SOURCE so filled in."""
    text = LAUNCH_SOURCE.format(n=n, grid=grid, block=block, open=open_, close=close)
    return yaml.safe_load(spec_from_host(text, "half.cu", "half").yaml)


@pytest.mark.parametrize("grid", ["ceil((float) N / 256)", "ceil(static_cast<double>(N) / 256)",
                                  "(int) ceil((double) N / 256.0)"])
@pytest.mark.parametrize("n", [1000, 300, 4096])
def test_fresh_float_cast_divides_as_floats(grid: str, n: int) -> None:
    """`ceil((float) N / 256)` is the rounded-up block count, as C computes it (not ceil of an integer quotient)."""
    doc = launch_spec(n, grid)
    assert doc["grid"] == [-(-n // 256), 1, 1]
    assert doc["args"][0]["size"] == n


# Visual Studio's formatter spaces the chevrons (`K << <grid, block >> > (args)`), which nvcc accepts; found in
# CoffeeBeforeArch's sum reductions, where `spec --from-host` found no launch and the skeleton's guesses were overrun
SPACINGS = [("<< <", ">> > "), ("<<< ", " >>>"), ("<<\t<", ">>\n>")]


@pytest.mark.parametrize("open_, close", SPACINGS)
@pytest.mark.parametrize("n, block", [(2048, 128), (1024, 64)])
def test_fresh_spaced_launch_read_from_host(open_: str, close: str, n: int, block: int) -> None:
    """The spec takes the launch's grid, block and sizes, whatever the spacing of the chevrons."""
    doc = launch_spec(n, f"N / {block}", block, open_, close)
    assert doc["grid"] == [n // block, 1, 1] and doc["block"] == [block, 1, 1]
    assert doc["args"][0]["size"] == n and doc["args"][1]["value"] == n


@pytest.mark.parametrize("open_, close", SPACINGS)
def test_fresh_spaced_launch_in_the_skeleton(open_: str, close: str) -> None:
    """The skeleton reads a constant launch spaced the same way instead of guessing it."""
    text = "__global__ void k(float* v) {}\nint main() { k " + open_ + "12, 96" + close + "(0); }\n"
    launch = find_launch(text, "k")
    assert launch.grid == [12, 1, 1] and launch.block == [96, 1, 1]
