// One warp per row (llm.c style): warps past the last row `return` at once, and the remaining warps then meet
// at a block barrier; on sm_70+ the exited threads no longer count for __syncthreads.
#include <cuda_runtime.h>

__global__ void rowsum_block_total(const float* __restrict__ inp, float* __restrict__ row_sums,
                                   float* __restrict__ block_totals, int N, int C) {
  __shared__ float warp_sums[32];
  const int warpsPerBlock = blockDim.x / 32;
  const int warpId = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int idx = blockIdx.x * warpsPerBlock + warpId;
  if (idx >= N) return;
  const float* x = inp + idx * C;
  float s = 0.f;
  for (int i = lane; i < C; i += 32) s += x[i];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
  if (lane == 0) {
    row_sums[idx] = s;
    warp_sums[warpId] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int rest = N - blockIdx.x * warpsPerBlock;
    const int live = warpsPerBlock < rest ? warpsPerBlock : rest;
    float t = 0.f;
    for (int w = 0; w < live; ++w) t += warp_sums[w];
    block_totals[blockIdx.x] = t;
  }
}
