// Row sum and sum of squares through a blockReduceSum helper that keeps its own static __shared__ array
// and calls warpReduceSum (FasterTransformer style).
#include <cuda_runtime.h>

__inline__ __device__ float warpReduceSum(float val) {
  for (int mask = 16; mask > 0; mask >>= 1) val += __shfl_xor_sync(0xffffffff, val, mask, 32);
  return val;
}

__inline__ __device__ float blockReduceSum(float val) {
  static __shared__ float shared[32];
  const int lane = threadIdx.x & 0x1f;
  const int wid = threadIdx.x >> 5;
  val = warpReduceSum(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();
  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : 0.0f;
  val = warpReduceSum(val);
  return val;
}

__global__ void row_stats(const float* __restrict__ x, float* __restrict__ sums, float* __restrict__ sumsq,
                          int cols) {
  const float* row = x + blockIdx.x * cols;
  float s = 0.f, q = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    s += row[i];
    q += row[i] * row[i];
  }
  s = blockReduceSum(s);
  __syncthreads();  // the helper's shared array is reused by the second reduction
  q = blockReduceSum(q);
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = s;
    sumsq[blockIdx.x] = q;
  }
}
