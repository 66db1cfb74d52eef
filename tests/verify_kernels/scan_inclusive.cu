// Hillis-Steele inclusive scan of each 128-element segment, double-buffered in shared memory.
#include <cuda_runtime.h>

#define BLOCK 128

__global__ void scan_inclusive(const int* in, int* out, int* block_sums, int n) {
  __shared__ int buf[2][BLOCK];
  const int tid = threadIdx.x;
  const int gid = blockIdx.x * BLOCK + tid;
  int pout = 0, pin = 1;
  buf[pout][tid] = gid < n ? in[gid] : 0;
  __syncthreads();
  for (int offset = 1; offset < BLOCK; offset <<= 1) {
    pout = 1 - pout;
    pin = 1 - pout;
    if (tid >= offset)
      buf[pout][tid] = buf[pin][tid] + buf[pin][tid - offset];
    else
      buf[pout][tid] = buf[pin][tid];
    __syncthreads();
  }
  if (gid < n) out[gid] = buf[pout][tid];
  if (tid == BLOCK - 1) block_sums[blockIdx.x] = buf[pout][tid];
}
