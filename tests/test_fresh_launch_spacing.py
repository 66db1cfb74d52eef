"""Launches spaced as Visual Studio's formatter writes them (`K << <grid, block >> > (args)`, which nvcc accepts).

Found by an outside pass (CoffeeBeforeArch's sum reductions): `spec --from-host` found no launch and fell back to
the skeleton's guesses, whose buffers the kernel overran."""
import pytest
import yaml

from rtransform.host_spec import spec_from_host
from rtransform.skeleton import find_launch

SOURCE = """
#define N {n}
__global__ void scale(float* v, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] *= 2.0f;
}}
int main() {{
  float* d;
  cudaMalloc(&d, N * sizeof(float));
  scale {open}N / {block}, {block}{close}(d, N);
  return 0;
}}
"""
SPACINGS = [("<< <", ">> > "), ("<<< ", " >>>"), ("<<\t<", ">>\n>")]


@pytest.mark.parametrize("open_, close", SPACINGS)
@pytest.mark.parametrize("n, block", [(2048, 128), (1024, 64)])
def test_fresh_spaced_launch_read_from_host(open_: str, close: str, n: int, block: int) -> None:
    """The spec takes the launch's grid, block and sizes, whatever the spacing of the chevrons."""
    spec = spec_from_host(SOURCE.format(n=n, block=block, open=open_, close=close), "scale.cu", "scale")
    doc = yaml.safe_load(spec.yaml)
    assert doc["grid"] == [n // block, 1, 1] and doc["block"] == [block, 1, 1]
    assert doc["args"][0]["size"] == n and doc["args"][1]["value"] == n


@pytest.mark.parametrize("open_, close", SPACINGS)
def test_fresh_spaced_launch_in_the_skeleton(open_: str, close: str) -> None:
    """The skeleton reads a constant launch spaced the same way instead of guessing it."""
    text = "__global__ void k(float* v) {}\nint main() { k " + open_ + "12, 96" + close + "(0); }\n"
    launch = find_launch(text, "k")
    assert launch.grid == [12, 1, 1] and launch.block == [96, 1, 1]
