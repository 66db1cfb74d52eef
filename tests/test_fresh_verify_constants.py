"""`rtransform verify` on kernels that read `__constant__` memory the host fills with cudaMemcpyToSymbol.

Found by an outside pass (convolution kernels of two course repositories): the host code does not run, so the
mask is zeros in both runs, every output is zero and verify agreed without exercising the arithmetic; it now says
so in a note."""
import subprocess
import sys
from pathlib import Path

import pytest

from rtransform.verify import zero_constants

KERNEL = """
{decl}
__global__ void conv1d(const float* in, float* out, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i + 2 < n) out[i] = mask[0] * in[i] + mask[1] * in[i + 1] + mask[2] * in[i + 2];
}}
"""


@pytest.mark.parametrize("text, names", [
    ("__constant__ float mask[3];", ["mask"]),
    ("static __constant__ int M[7 * 7];\n__constant__ float bias;", ["M", "bias"]),
    ("__constant__ float mask[3] = {1.0f, 2.0f, 3.0f};", []),
    ("__device__ __constant__ double w[2][4];", ["w"]),
    ("// __constant__ float gone[3];\n__constant__ float k = 2.0f;", []),
    ("extern __constant__ float shared_mask[9];", ["shared_mask"]),
])
def test_fresh_zero_constants_are_those_without_initializer(text: str, names: list[str]) -> None:
    """Declarations without `=` are zero in an emulator run; initialised ones and comments are not."""
    assert zero_constants(text) == names


@pytest.mark.parametrize("decl, noted", [("__constant__ float mask[3];", True),
                                         ("__constant__ float mask[3] = {0.25f, 0.5f, 0.25f};", False)])
def test_fresh_verify_notes_zero_constant_memory(tmp_path: Path, decl: str, noted: bool) -> None:
    """The verify that agrees on a kernel reading unset constant memory says the mask was zero."""
    src = tmp_path / "conv1d.cu"
    src.write_text(KERNEL.format(decl=decl))
    spec = tmp_path / "conv1d.yaml"
    spec.write_text("kernel: conv1d\ngrid: [2, 1, 1]\nblock: [32, 1, 1]\nargs:\n"
                    "- {name: in, kind: buffer, dtype: float32, size: 64, init: random}\n"
                    "- {name: out, kind: buffer, dtype: float32, size: 64, init: zeros}\n"
                    "- {name: n, kind: scalar, dtype: int32, value: 64}\noutputs: [out]\n")
    res = subprocess.run([sys.executable, "-c", "from rtransform.cli import main; main()", "verify", str(src),
                          "--spec", str(spec)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert ("__constant__ mask is all zeros" in res.stderr) == noted, res.stderr
