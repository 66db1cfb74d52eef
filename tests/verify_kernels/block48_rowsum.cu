// Row sums with 48-thread blocks: the second warp has 16 lanes, so its shuffle mask and width shrink to match.
#include <cuda_runtime.h>

__global__ void rowsum48(const float* __restrict__ x, float* __restrict__ out, int cols) {
  __shared__ float partial[2];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int left = blockDim.x - warp * 32;
  const int lanes = left < 32 ? left : 32;  // 32 or 16: a power of two
  const unsigned mask = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
  float s = 0.f;
  for (int i = tid; i < cols; i += blockDim.x) s += x[blockIdx.x * cols + i];
  for (int o = lanes / 2; o > 0; o >>= 1) s += __shfl_xor_sync(mask, s, o, lanes);
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  if (tid == 0) out[blockIdx.x] = partial[0] + partial[1];
}
