// Warp-aggregated atomics through a coalesced group (cuda-samples warpAggregatedAtomicsCG style): the lanes that
// take the branch elect one atomicAdd for all of them.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__device__ int agg_inc(int *counter) {
  cg::coalesced_group active = cg::coalesced_threads();
  int base = 0;
  if (active.thread_rank() == 0) base = atomicAdd(counter, (int)active.size());
  return active.shfl(base, 0) + (int)active.thread_rank();
}

__global__ void agg_filter(int *dst, int *count, const int *src, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && src[i] > 0) dst[agg_inc(count)] = src[i];
}
