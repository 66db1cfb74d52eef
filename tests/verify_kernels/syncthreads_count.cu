// Block votes with __syncthreads_count/_and/_or, and a loop whose barrier count depends on the data:
// every thread halves its magnitude until no thread of the block is above 1.
#include <cuda_runtime.h>

__global__ void block_votes(const int* __restrict__ x, int* __restrict__ stats, int n, int threshold) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const int v = gid < n ? x[gid] : 0;
  const int count = __syncthreads_count(v > threshold);
  const int all = __syncthreads_and(v > threshold);
  const int any = __syncthreads_or(v > -threshold);
  int a = v < 0 ? -v : v;
  int rounds = 0;
  while (__syncthreads_or(a > 1)) {
    a >>= 1;
    ++rounds;
  }
  if (threadIdx.x == 0) {
    stats[4 * blockIdx.x + 0] = count;
    stats[4 * blockIdx.x + 1] = all;
    stats[4 * blockIdx.x + 2] = any;
    stats[4 * blockIdx.x + 3] = rounds;
  }
}
