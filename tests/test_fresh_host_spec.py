"""`spec --from-host` on file constants spelled with shifts (CoffeeBeforeArch-style `constexpr int K = (1 << 11) + 7;`).

Found by an outside pass over unseen repositories: such a constant was skipped as "not derived", a default of 1024
replaced it in the spec's sizes, and the kernel, which reads the constant itself, ran past the spec's buffers."""
import pytest
import yaml

from rtransform.host_spec import spec_from_host

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
