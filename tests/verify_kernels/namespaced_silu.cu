// SiLU with the kernel itself inside a namespace (launched as act::silu), 2-D grid over (cols, rows).
#include <cuda_runtime.h>

namespace act {

__device__ inline float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

__global__ void silu(float* __restrict__ y, const float* __restrict__ x, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y;
  if (c < cols && r < rows) y[r * cols + c] = x[r * cols + c] * sigmoid(x[r * cols + c]);
}

}  // namespace act
