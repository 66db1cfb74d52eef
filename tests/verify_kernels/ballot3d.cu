// A 3-D block [8, 4, 2] (64 threads, two warps): each warp ballots a predicate of its elements; the lane of
// (x, y, z) is x + 8 * y + 32 * z modulo 32, so the ballot bits say whether the block is linearised x-fastest.
#include <cuda_runtime.h>

__global__ void ballot3d(const int* __restrict__ v, unsigned* __restrict__ masks, int threshold) {
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int i = blockIdx.x * (blockDim.x * blockDim.y * blockDim.z) + t;
  const unsigned b = __ballot_sync(0xffffffffu, v[i] > threshold);
  if ((t & 31) == 0) masks[blockIdx.x * 2 + (t >> 5)] = b;
}
