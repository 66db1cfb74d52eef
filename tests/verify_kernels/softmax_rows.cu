// Row softmax, one block per row: warp shuffles within a warp, dynamic shared memory across warps.
#include <cuda_runtime.h>
#include <float.h>

__device__ float warpMax(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}

__device__ float warpSum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

__global__ void softmax_rows(float* out, const float* inp, int rows, int cols) {
  extern __shared__ float shared[];  // [0, nwarps): warp maxima, [nwarps, 2 * nwarps): warp sums
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int nwarps = blockDim.x / 32;
  const float* x = inp + row * cols;

  float m = -FLT_MAX;
  for (int i = tid; i < cols; i += blockDim.x) m = fmaxf(m, x[i]);
  m = warpMax(m);
  if (lane == 0) shared[warp] = m;
  __syncthreads();
  m = shared[0];
  for (int w = 1; w < nwarps; ++w) m = fmaxf(m, shared[w]);

  float s = 0.f;
  for (int i = tid; i < cols; i += blockDim.x) s += expf(x[i] - m);
  s = warpSum(s);
  if (lane == 0) shared[nwarps + warp] = s;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < nwarps; ++w) total += shared[nwarps + w];

  for (int i = tid; i < cols; i += blockDim.x) out[row * cols + i] = expf(x[i] - m) / total;
}
