// GEMV y = A x: one warp per row, 128-bit float4 loads, warp-shuffle reduction (cols % 4 == 0).
#include <cuda_runtime.h>

#define WARP_SIZE 32

__device__ __forceinline__ float warp_reduce_sum(float v) {
  for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffff, v, offset);
  return v;
}

__global__ void gemv_float4(const float* __restrict__ A, const float* __restrict__ x, float* __restrict__ y,
                            int rows, int cols) {
  const int warp = threadIdx.x / WARP_SIZE;
  const int lane = threadIdx.x % WARP_SIZE;
  const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + warp;
  if (row >= rows) return;
  const float4* a4 = reinterpret_cast<const float4*>(A + (size_t)row * cols);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float sum = 0.f;
  for (int i = lane; i < cols / 4; i += WARP_SIZE) {
    const float4 a = a4[i];
    const float4 b = x4[i];
    sum += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
  }
  sum = warp_reduce_sum(sum);
  if (lane == 0) y[row] = sum;
}
