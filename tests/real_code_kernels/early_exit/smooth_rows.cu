// A stencil in the style of small application kernels: threads past the end `return` after the first barrier,
// having read shared memory, while the rest meet two more __syncthreads (legal on sm_70+: exited threads no
// longer count). Each row of `width` values is smoothed twice with a 3-point average held in shared memory.
#include <cuda_runtime.h>

#define TILE 128

__global__ void smooth_rows(const float* __restrict__ in, float* __restrict__ out, int n) {
  __shared__ float tile[TILE + 2];
  const int t = threadIdx.x;
  const int i = blockIdx.x * blockDim.x + t;
  tile[t + 1] = i < n ? in[i] : 0.0f;
  if (t == 0) tile[0] = 0.0f;
  if (t == blockDim.x - 1) tile[t + 2] = 0.0f;
  __syncthreads();
  float first = (tile[t] + tile[t + 1] + tile[t + 2]) / 3.0f;
  if (i >= n) return;  // after reading the tile; the others go on to two more barriers
  __syncthreads();
  tile[t + 1] = first;
  if (t == 0) tile[0] = 0.0f;
  const int last = min((int)blockDim.x, n - (int)(blockIdx.x * blockDim.x)) - 1;
  if (t == last) tile[t + 2] = 0.0f;
  __syncthreads();
  out[i] = (tile[t] + tile[t + 1] + tile[t + 2]) / 3.0f;
}

void launch_smooth(const float* in, float* out, int n, cudaStream_t s) {
  smooth_rows<<<(n + TILE - 1) / TILE, TILE, 0, s>>>(in, out, n);
}
