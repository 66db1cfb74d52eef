// Bias + ReLU over a matrix with __launch_bounds__: 128 threads cover a 4 x 32 tile of rows x cols.
#include <cuda_runtime.h>

__global__ void __launch_bounds__(128, 4)
    bias_relu_2d(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ bias, int rows,
                 int cols) {
  const int c = blockIdx.x * 32 + threadIdx.x % 32;
  const int r = blockIdx.y * 4 + threadIdx.x / 32;
  if (r < rows && c < cols) {
    const float v = x[r * cols + c] + bias[c];
    y[r * cols + c] = v > 0.f ? v : 0.f;
  }
}
