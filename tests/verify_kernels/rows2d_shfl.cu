// A 2-D block [32, 4]: each row of 32 threads (one warp: x fastest) sums its 32 values with __shfl_xor_sync, so
// the result is right only if threadIdx.x is the lane and threadIdx.y the warp, as CUDA linearises blocks.
#include <cuda_runtime.h>

__global__ void rows2d_shfl(const float* __restrict__ x, float* __restrict__ row_sums, float* __restrict__ lanes,
                            int cols) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  float v = x[row * cols + threadIdx.x] * (1.0f + threadIdx.x);  // weighted by the lane: a swap changes the sum
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  lanes[row * cols + threadIdx.x] = (float)(threadIdx.y * 100 + threadIdx.x);
  if (threadIdx.x == 0) row_sums[row] = v;
}
