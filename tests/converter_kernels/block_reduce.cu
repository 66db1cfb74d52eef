// Block reductions in helper functions: each helper has its own `static __shared__` scratch and calls a warp
// reduction built on shuffles. The two helpers run back to back with no barrier in between, so their
// scratch arrays must not alias.
#include <float.h>

__device__ float warpReduceSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
  return v;
}

__device__ float warpReduceMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}

__device__ float blockReduceSum(float v) {
  static __shared__ float s[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpReduceSum(v);
  if (lane == 0) s[warp] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? s[lane] : 0.f;
  if (warp == 0) v = warpReduceSum(v);
  return v;  // the block's sum, in thread 0
}

__device__ float blockReduceMax(float v) {
  static __shared__ float s[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpReduceMax(v);
  if (lane == 0) s[warp] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? s[lane] : -FLT_MAX;
  if (warp == 0) v = warpReduceMax(v);
  return v;  // the block's maximum, in thread 0
}

__global__ void row_stats(float* sums, float* maxs, const float* x, int cols) {
  const float* row = x + blockIdx.x * cols;
  float s = 0.f, m = -FLT_MAX;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    s += row[i];
    m = fmaxf(m, row[i]);
  }
  s = blockReduceSum(s);
  m = blockReduceMax(m);
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = s;
    maxs[blockIdx.x] = m;
  }
}
