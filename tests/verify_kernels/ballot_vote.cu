// Warp votes: __ballot_sync + __popc, __any_sync and __all_sync of a threshold predicate, one result per warp.
#include <cuda_runtime.h>

__global__ void warp_vote(const int* __restrict__ x, int* __restrict__ counts, int* __restrict__ any_all, int n,
                          int threshold) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31;
  const int warp_global = gid >> 5;
  const int pred = gid < n && x[gid] > threshold;
  const unsigned b = __ballot_sync(0xffffffff, pred);
  const int any = __any_sync(0xffffffff, pred);
  const int all = __all_sync(0xffffffff, pred);
  if (lane == 0) {
    counts[warp_global] = __popc(b);
    any_all[2 * warp_global] = any;
    any_all[2 * warp_global + 1] = all;
  }
}
