// y = alpha * x + y, templated on the element type and an unroll factor (UNROLL elements per thread).
#include <cuda_runtime.h>

template <typename T, int UNROLL>
__global__ void scale_add_unrolled(T* __restrict__ y, const T* __restrict__ x, T alpha, int n) {
  const int base = (blockIdx.x * blockDim.x) * UNROLL + threadIdx.x;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int i = base + u * blockDim.x;
    if (i < n) y[i] = alpha * x[i] + y[i];
  }
}
