// __half storage with float arithmetic: y = half(float(x) * scale + float(bias[col])).
#include <cuda_fp16.h>

__global__ void half_scale_bias(__half* __restrict__ y, const __half* __restrict__ x, const __half* __restrict__ bias,
                                float scale, int rows, int cols) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const float v = __half2float(x[i]) * scale + __half2float(bias[i % cols]);
  y[i] = __float2half(v);
}
