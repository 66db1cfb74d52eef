"""convert-all throughput, cold and from its cache (a benchmark: run by hand, never by pytest, because a speed
depends on the machine and on what else runs there; README "Measured" quotes it).

    python3 tests/convert_all_bench.py [--kernels 120] [--jobs 2] [--min-kps 0]

Writes 120 generated kernels (elementwise, shared-memory reduction, warp shuffle; 3 per file) to a temporary tree,
converts them twice and prints the figures as JSON; with --min-kps it exits 1 when the cold run converts fewer
kernels per second (the old unit-test threshold was 5 on a shared 2-core machine, 20 the target when idle)."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rtransform import batch  # noqa: E402


def generated_kernels(count: int) -> dict[str, str]:
    """count kernels of three shapes (elementwise, shared-memory reduction, warp shuffle), 3 per file."""
    ops = ["a * x[i] + 1.0f", "x[i] * x[i] - a", "fmaxf(x[i], a)", "x[i] / (1.0f + fabsf(x[i]))", "a - x[i]"]
    files: dict[str, str] = {}
    for f in range((count + 2) // 3):
        k = f * 3
        op = ops[f % len(ops)]
        block = 32 << (f % 4)
        files[f"gen/d{f % 7}/g{f:03d}.cu"] = f"""\
__global__ void ew_{k}(const float* x, float* y, float a, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = {op};
}}
__global__ void red_{k + 1}(const float* x, float* out, int n) {{
  __shared__ float s[{block}];
  int i = blockIdx.x * {block} + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int w = {block // 2}; w > 0; w >>= 1) {{
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }}
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}}
__global__ void shfl_{k + 2}(const float* x, float* out, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}}
"""
    return files


def main() -> int:
    """Convert the generated tree cold, then again from the cache; print kernels/s and seconds."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=120, help="how many kernels to generate")
    ap.add_argument("--jobs", type=int, default=2, help="convert-all worker processes")
    ap.add_argument("--min-kps", type=float, default=0.0, help="exit 1 below this many kernels/s cold (0: report)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="convert-all-bench-") as tmp:
        src = Path(tmp) / "src"
        files = generated_kernels(args.kernels)
        for rel, text in files.items():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_text(text)
        cold = batch.convert_all(src, Path(tmp) / "out", jobs=args.jobs)
        warm = batch.convert_all(src, Path(tmp) / "out", jobs=args.jobs)
    figures = {"kernels": cold["counts"]["kernels"], "files": len(files), "jobs": args.jobs,
               "cold_s": cold["run"]["seconds"], "kernels_per_s": cold["run"]["kernels_per_second"],
               "cached_s": warm["run"]["seconds"], "cached_converted_files": warm["run"]["converted_files"]}
    print(json.dumps(figures))
    return 1 if figures["kernels_per_s"] < args.min_kps else 0


if __name__ == "__main__":
    sys.exit(main())
