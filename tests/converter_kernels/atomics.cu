// Atomics: a per-block histogram with shared int atomics, merged into global ints; a block sum with a shared
// float atomic, merged into a global float.
__global__ void histogram_atomic(int* hist, float* total, const int* keys, const float* vals, int n, int bins) {
  __shared__ int local[16];
  __shared__ float part;
  const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  if (t < bins) local[t] = 0;
  if (t == 0) part = 0.f;
  __syncthreads();
  if (i < n) {
    atomicAdd(&local[keys[i] % bins], 1);
    atomicAdd(&part, vals[i]);
  }
  __syncthreads();
  if (t < bins) atomicAdd(&hist[t], local[t]);
  if (t == 0) atomicAdd(total, part);
}
