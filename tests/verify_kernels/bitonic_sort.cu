// Bitonic sort of each 128-element segment in shared memory (padded with +inf); 64 threads, 2 elements each.
#include <cuda_runtime.h>
#include <math.h>

#define SORT_N 128

__global__ void bitonic_sort_blocks(float* data, int n) {
  __shared__ float s[SORT_N];
  const int base = blockIdx.x * SORT_N;
  for (int i = threadIdx.x; i < SORT_N; i += blockDim.x) s[i] = base + i < n ? data[base + i] : INFINITY;
  __syncthreads();
  for (int k = 2; k <= SORT_N; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < SORT_N; i += blockDim.x) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const bool up = (i & k) == 0;
          const float a = s[i], b = s[ixj];
          if ((a > b) == up) {
            s[i] = b;
            s[ixj] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < SORT_N; i += blockDim.x)
    if (base + i < n) data[base + i] = s[i];
}
