// Course-style C code (written for this project): helpers and kernels declared with a C-style `(void)` parameter
// list, a 3-D launch, printf in device code.
#include <stdio.h>

__device__ int lane_id(void);

__device__ int flat_thread(void) {
  return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
}

__device__ int flat_block(void) { return blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y; }

__global__ void number_threads(int *out) {
  int per_block = blockDim.x * blockDim.y * blockDim.z;
  int id = flat_block() * per_block + flat_thread();
  out[id] = id * 100 + lane_id();
  if (id == 0) printf("block %d thread %d\n", flat_block(), flat_thread());
}

__device__ int lane_id(void) { return flat_thread() % 32; }

int main(void) {
  int *d = NULL;
  cudaMalloc(&d, 2 * 3 * 4 * 64 * sizeof(int));
  number_threads<<<dim3(2, 3, 4), dim3(4, 4, 4)>>>(d);
  cudaDeviceSynchronize();
  return 0;
}
