// A libcu++ block barrier in shared memory (SGEMM double-buffering style): init by one thread, arrive/wait
// split around independent work.
#include <cuda/barrier>
#include <cooperative_groups.h>
#include <cstdlib>

__global__ void stage_swap(float *x) {
  auto block = cooperative_groups::this_thread_block();
  __shared__ cuda::barrier<cuda::thread_scope::thread_scope_block> bar;
  __shared__ float s[96];
  if (block.thread_rank() == 0) init(&bar, block.size());
  __syncthreads();
  s[threadIdx.x] = x[blockIdx.x * 96 + threadIdx.x];
  auto token = bar.arrive();
  float mine = 3.0f * x[blockIdx.x * 96 + threadIdx.x];
  bar.wait(std::move(token));
  float other = s[95 - threadIdx.x];
  bar.arrive_and_wait();
  x[blockIdx.x * 96 + threadIdx.x] = mine - other;
}
