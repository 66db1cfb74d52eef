// CUDA-samples style reduction (reduce6): SharedMemory<T> hands out the extern __shared__ buffer, the block size
// and the power-of-two case are template parameters, the last warp finishes with shuffles.
#include <cuda_runtime.h>

template <class T>
struct SharedMemory {
  __device__ inline operator T*() {
    extern __shared__ int __smem[];
    return (T*)__smem;
  }
  __device__ inline operator const T*() const {
    extern __shared__ int __smem[];
    return (T*)__smem;
  }
};

template <class T, unsigned int blockSize, bool nIsPow2>
__global__ void reduce6(const T* __restrict__ g_idata, T* __restrict__ g_odata, unsigned int n) {
  T* sdata = SharedMemory<T>();
  const unsigned int tid = threadIdx.x;
  const unsigned int gridSize = blockSize * 2 * gridDim.x;
  T mySum = 0;
  if (nIsPow2) {
    unsigned int i = blockIdx.x * blockSize * 2 + threadIdx.x;
    while (i < n) {
      mySum += g_idata[i];
      if (i + blockSize < n) mySum += g_idata[i + blockSize];
      i += gridSize;
    }
  } else {
    unsigned int i = blockIdx.x * blockSize + threadIdx.x;
    while (i < n) {
      mySum += g_idata[i];
      i += blockSize * gridDim.x;
    }
  }
  sdata[tid] = mySum;
  __syncthreads();
  if ((blockSize >= 512) && (tid < 256)) sdata[tid] = mySum = mySum + sdata[tid + 256];
  __syncthreads();
  if ((blockSize >= 256) && (tid < 128)) sdata[tid] = mySum = mySum + sdata[tid + 128];
  __syncthreads();
  if ((blockSize >= 128) && (tid < 64)) sdata[tid] = mySum = mySum + sdata[tid + 64];
  __syncthreads();
  if (tid < 32) {
    if (blockSize >= 64) mySum += sdata[tid + 32];
    for (int offset = warpSize / 2; offset > 0; offset /= 2) mySum += __shfl_down_sync(0xffffffff, mySum, offset);
  }
  if (tid == 0) g_odata[blockIdx.x] = mySum;
}
