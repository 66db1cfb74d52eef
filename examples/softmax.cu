// Row softmax in the style of widely used LLM kernels: one block per row, warp shuffles, a shared-memory
// reduction across warps, and threads past the row's end returning early before later barriers.
#include <cuda_runtime.h>
#include <math.h>

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

// out[row, :] = softmax(in[row, :]); blockDim.x is a multiple of 32, cols <= 4 * blockDim.x.
__global__ void softmax_rows(float* __restrict__ out, const float* __restrict__ in, int rows, int cols) {
  __shared__ float red[32];
  int row = blockIdx.x;
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  const float* x = in + (size_t)row * cols;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, x[c]);
  m = warp_max(m);
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = lane < nwarps ? red[lane] : -INFINITY;
  m = warp_max(m);
  __syncthreads();
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(x[c] - m);
  s = warp_sum(s);
  if (lane == 0) red[warp] = s;
  __syncthreads();
  s = lane < nwarps ? red[lane] : 0.f;
  s = warp_sum(s);
  if (threadIdx.x >= cols) return;  // nothing left to write for these threads
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(size_t)row * cols + c] = expf(x[c] - m) / s;
}

int main() {  // host code is ignored by rtransform run/verify
  float* d;
  cudaMalloc(&d, 1024);
  softmax_rows<<<4, 128>>>(d, d, 4, 64);
  return 0;
}
