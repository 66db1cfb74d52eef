// Per-row absmax int8 quantisation: warp max by shuffles, block max through shared memory, then
// q = clamp(round(x / scale)) with scale = absmax / 127.
#include <cuda_runtime.h>

__global__ void quantize_rows_int8(const float* __restrict__ x, signed char* __restrict__ q,
                                   float* __restrict__ scales, int cols) {
  __shared__ float warp_max[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  const float* row = x + blockIdx.x * cols;
  float m = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, fabsf(row[i]));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < nwarps; ++w) t = fmaxf(t, warp_max[w]);
    warp_max[0] = t;
  }
  __syncthreads();
  const float absmax = warp_max[0];
  const float scale = absmax > 0.f ? absmax / 127.f : 1.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    float v = roundf(row[i] / scale);
    v = fminf(127.f, fmaxf(-127.f, v));
    q[blockIdx.x * cols + i] = (signed char)v;
  }
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
}
