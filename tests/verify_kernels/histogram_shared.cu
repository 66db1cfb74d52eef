// 256-bin byte histogram: per-block privatised bins in shared memory (shared atomics), grid-stride input.
#include <cuda_runtime.h>

#define NUM_BINS 256

__global__ void histogram256(const unsigned char* __restrict__ data, unsigned int* __restrict__ hist, int n) {
  __shared__ unsigned int local[NUM_BINS];
  for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&local[data[i]], 1u);
  __syncthreads();
  for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x)
    if (local[b]) atomicAdd(&hist[b], local[b]);
}
