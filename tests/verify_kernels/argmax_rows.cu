// Row argmax: per-thread strided scan, then a shared-memory tree of (value, index) pairs; ties keep the
// smaller index.
#include <cuda_runtime.h>
#include <math.h>

#define THREADS 64

__global__ void argmax_rows(const float* __restrict__ x, int* __restrict__ idx_out, float* __restrict__ val_out,
                            int cols) {
  __shared__ float sval[THREADS];
  __shared__ int sidx[THREADS];
  const float* row = x + blockIdx.x * cols;
  float best = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = row[i];
    if (v > best) {
      best = v;
      bi = i;
    }
  }
  sval[threadIdx.x] = best;
  sidx[threadIdx.x] = bi;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = sval[threadIdx.x + s];
      const int oi = sidx[threadIdx.x + s];
      if (ov > sval[threadIdx.x] || (ov == sval[threadIdx.x] && oi < sidx[threadIdx.x])) {
        sval[threadIdx.x] = ov;
        sidx[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    idx_out[blockIdx.x] = sidx[0];
    val_out[blockIdx.x] = sval[0];
  }
}
