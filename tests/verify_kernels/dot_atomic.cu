// Dot product: grid-stride partial sums, a shared-memory tree per block, one float atomicAdd per block.
#include <cuda_runtime.h>

__global__ void dot_atomic(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ result, int n) {
  __shared__ float cache[128];
  float tmp = 0.f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) tmp += a[i] * b[i];
  cache[threadIdx.x] = tmp;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) cache[threadIdx.x] += cache[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(result, cache[0]);
}
