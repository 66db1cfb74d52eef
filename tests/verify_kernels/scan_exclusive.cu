// Work-efficient (Blelloch) exclusive scan of 2 * blockDim elements per block, GPU Gems 3 ch. 39 style,
// with bank-conflict-avoiding padding in dynamic shared memory.
#include <cuda_runtime.h>

#define NUM_BANKS 32
#define LOG_NUM_BANKS 5
#define CONFLICT_FREE_OFFSET(n) ((n) >> LOG_NUM_BANKS)

// Padded shared-memory indices of the two tree nodes that thread `thid` combines at stride `offset`.
__device__ __forceinline__ void tree_pair(int offset, int thid, int& a, int& b) {
  a = offset * (2 * thid + 1) - 1;
  b = offset * (2 * thid + 2) - 1;
  a += CONFLICT_FREE_OFFSET(a);
  b += CONFLICT_FREE_OFFSET(b);
}

__global__ void prescan(int* g_odata, const int* g_idata, int* g_sums, int n) {
  extern __shared__ int temp[];
  const int thid = threadIdx.x;
  const int m = 2 * blockDim.x;
  const int base = blockIdx.x * m;
  const int ai = thid, bi = thid + blockDim.x;
  const int bankOffsetA = CONFLICT_FREE_OFFSET(ai);
  const int bankOffsetB = CONFLICT_FREE_OFFSET(bi);
  temp[ai + bankOffsetA] = base + ai < n ? g_idata[base + ai] : 0;
  temp[bi + bankOffsetB] = base + bi < n ? g_idata[base + bi] : 0;
  int offset = 1;
  for (int d = m >> 1; d > 0; d >>= 1) {  // up-sweep
    __syncthreads();
    if (thid < d) {
      int a, b;
      tree_pair(offset, thid, a, b);
      temp[b] += temp[a];
    }
    offset *= 2;
  }
  if (thid == 0) {
    const int last = m - 1 + CONFLICT_FREE_OFFSET(m - 1);
    g_sums[blockIdx.x] = temp[last];
    temp[last] = 0;
  }
  for (int d = 1; d < m; d *= 2) {  // down-sweep
    offset >>= 1;
    __syncthreads();
    if (thid < d) {
      int a, b;
      tree_pair(offset, thid, a, b);
      const int t = temp[a];
      temp[a] = temp[b];
      temp[b] += t;
    }
  }
  __syncthreads();
  if (base + ai < n) g_odata[base + ai] = temp[ai + bankOffsetA];
  if (base + bi < n) g_odata[base + bi] = temp[bi + bankOffsetB];
}
