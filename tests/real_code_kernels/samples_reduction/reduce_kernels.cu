// Parallel reductions and a scan in the CUDA samples' style (written for this project): the block's partial
// results live in dynamic shared memory reached through SharedMemory<T> (sharedmem.cuh) or a local accessor
// struct of this file; host launchers pick the template instance.
#include <cuda_runtime.h>
#include <cstdio>
#include "sharedmem.cuh"

// Interleaved addressing with the first add during the global load.
template <class T>
__global__ void reduce_first_add(const T *g_idata, T *g_odata, unsigned int n) {
  T *sdata = SharedMemory<T>();
  unsigned int tid = threadIdx.x;
  unsigned int i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;
  T mySum = (i < n) ? g_idata[i] : 0;
  if (i + blockDim.x < n) mySum += g_idata[i + blockDim.x];
  sdata[tid] = mySum;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sdata[tid] = mySum = mySum + sdata[tid + s];
    __syncthreads();
  }
  if (tid == 0) g_odata[blockIdx.x] = mySum;
}

// Inclusive scan of each block (Hillis-Steele, double-buffered in 2 * blockDim.x elements of dynamic shared
// memory); the last thread also writes the block's total.
template <class T>
__global__ void scan_blocks(const T *in, T *out, T *block_sums, int n) {
  T *temp = SharedMemory<T>();
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  int pout = 0, pin = 1;
  temp[t] = i < n ? in[i] : 0;
  __syncthreads();
  for (int offset = 1; offset < blockDim.x; offset *= 2) {
    pout = 1 - pout;
    pin = 1 - pout;
    if (t >= offset)
      temp[pout * blockDim.x + t] = temp[pin * blockDim.x + t] + temp[pin * blockDim.x + t - offset];
    else
      temp[pout * blockDim.x + t] = temp[pin * blockDim.x + t];
    __syncthreads();
  }
  if (i < n) out[i] = temp[pout * blockDim.x + t];
  if (t == blockDim.x - 1) block_sums[blockIdx.x] = temp[pout * blockDim.x + t];
}

// A local accessor of this file, non-template kernel: the conversion is implicit in the declaration.
struct FloatScratch {
  __device__ operator float *() {
    extern __shared__ float scratch_f[];
    return scratch_f;
  }
};

__global__ void reduce_max_abs(const float *in, float *out, int n) {
  float *s = FloatScratch();
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? fabsf(in[i]) : 0.0f;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (t < w) s[t] = fmaxf(s[t], s[t + w]);
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

template <class T>
void reduce(int size, int threads, int blocks, const T *d_idata, T *d_odata) {
  int smemSize = (threads <= 32) ? 2 * threads * sizeof(T) : threads * sizeof(T);
  reduce_first_add<T><<<blocks, threads, smemSize>>>(d_idata, d_odata, size);
}

template <class T>
void scan(int size, int threads, const T *d_in, T *d_out, T *d_sums) {
  int blocks = (size + threads - 1) / threads;
  scan_blocks<T><<<blocks, threads, 2 * threads * sizeof(T)>>>(d_in, d_out, d_sums, size);
}

int main() {
  float *d_in = nullptr, *d_out = nullptr;
  cudaMalloc(&d_in, 4096 * sizeof(float));
  cudaMalloc(&d_out, 64 * sizeof(float));
  reduce<float>(4096, 128, 16, d_in, d_out);
  scan<float>(4096, 256, d_in, d_in, d_out);
  reduce_max_abs<<<16, 256, 256 * sizeof(float)>>>(d_in, d_out, 4096);
  printf("done\n");
  return 0;
}
